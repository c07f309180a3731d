"""Calibrate the analytical cost model (roofline) of each PU, and the transfer cost of each PU pair, on
measurements.

The model is the one :mod:`parapipe.cost.roofline` evaluates (GUIDE §2; Williams, Waterman & Patterson,
"Roofline", CACM 52(4), 2009): an operator of class ``c`` takes

    t = max(flops / (peak_flops · efficiency[c]),  bytes · s / memory_bandwidth) + op_overhead_s

on a PU, and a block or stage the sum over its operators. :func:`fit_pu` fits, per PU, the efficiency of every
op class that the samples exercise, the per-operator overhead and the memory bandwidth, minimising the mean
log errors ``ln(predicted / measured)`` under the Huber loss (quadratic up to :data:`HUBER_DELTA`, linear
beyond: robust to the odd disturbed measurement, and equal weight to small and large work): coordinate descent
over the log parameters on grids (to get near the minimum from far-off profile values), then
Levenberg-Marquardt with iteratively reweighted least squares (to settle it jointly). Parameters the samples
do not constrain keep the SoC profile's values.

Two fits are made per PU (:func:`fit_calibration`):

* **isolated**: on single-operator measurements (optimisation off, one operator per session run), the
  per-operator cost as profiled;
* **in graph**: on block measurements (optimisation on), with the operators that ONNX Runtime fuses away in a
  graph (:func:`parapipe.profiling.catalog.in_graph_free`) costing nothing; started from the isolated fit.
  This is the model of what the executor runs, and the one written to a calibrated profile. Without block
  measurements it equals the isolated fit.

Transfers: ``t = alpha_s + nbytes / beta_bytes_per_s`` per ordered PU pair, by least squares on the relative
error over the sizes measured (:func:`fit_transfer`).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from parapipe.cost.roofline import PRECISION_BYTE_SCALE
from parapipe.profiling.catalog import OpFeatures
from parapipe.soc.op_classes import OP_CLASSES
from parapipe.soc.profile import PU

log = logging.getLogger(__name__)

__all__ = ["PUParams", "Sample", "fit_pu", "fit_transfer", "op_time", "predict", "mape_percent",
           "log_error"]

#: Smallest per-operator overhead the fit may choose, s (1 ns: below any timer resolution).
MIN_OVERHEAD_S = 1e-9
#: Coordinate-descent sweeps over all parameters before the joint polish (a parapipe choice).
SWEEPS = 4
#: Levenberg-Marquardt iterations at most (it converges in 10-30 on the zoo models).
LM_ITERATIONS = 200
#: Huber threshold on the log error (0.1 = 10 %): errors beyond it count linearly. A parapipe choice.
HUBER_DELTA = 0.1
#: Offsets, in ln units, tried around each parameter: coarse (e^±6 ≈ ×400), then two finer grids.
_GRIDS = (np.linspace(-6.0, 6.0, 49), np.linspace(-0.25, 0.25, 21), np.linspace(-0.025, 0.025, 11))


@dataclass(frozen=True)
class PUParams:
    """Roofline parameters of one PU.

    Attributes
    ----------
    efficiency : dict of str to float
        Achieved fraction of ``peak_flops`` per op class (all of :data:`OP_CLASSES`); may exceed 1 when the
        fitted work runs faster than the profile's peak (:func:`calibrated_soc` then raises the peak).
    op_overhead_s : float
        Fixed cost per operator, s.
    memory_bandwidth_bytes_per_s : float
    samples : int
        Measurements the fit used (0: the profile's values).
    fitted : tuple of str
        Parameters the samples constrained (``"efficiency.conv"``, ``"op_overhead_s"``, ...).
    """

    efficiency: Dict[str, float]
    op_overhead_s: float
    memory_bandwidth_bytes_per_s: float
    samples: int = 0
    fitted: Tuple[str, ...] = ()

    @classmethod
    def of(cls, pu: PU) -> "PUParams":
        """The profile's own values for ``pu`` (no fit)."""
        return cls(dict(pu.efficiency), pu.op_overhead_s, pu.memory_bandwidth_bytes_per_s)


@dataclass(frozen=True)
class Sample:
    """One measured piece of work: its operators (features, fused away in a graph) and its time, s."""

    ops: Tuple[Tuple[OpFeatures, bool], ...]
    measured_s: float
    label: str = ""


def op_time(op: OpFeatures, pu: PU, params: PUParams) -> float:
    """Roofline time of one operator on ``pu`` with ``params``, s; ``inf`` if the PU does not run its op type.

    Mirrors :func:`parapipe.cost.roofline.op_time_s` with the PU's fields replaced by ``params``.
    """
    if not pu.supports(op.op_type):
        return math.inf
    scale = PRECISION_BYTE_SCALE.get(pu.precision, 1.0)
    compute = op.flops / (pu.peak_flops * params.efficiency[op.op_class]) if op.flops > 0 else 0.0
    memory = op.nbytes * scale / params.memory_bandwidth_bytes_per_s
    return max(compute, memory) + params.op_overhead_s


def predict(ops: Sequence[Tuple[OpFeatures, bool]], pu: PU, params: PUParams, in_graph: bool) -> float:
    """Time of a piece of work (sum over its operators), s.

    With ``in_graph`` the operators flagged as fused away cost nothing; a piece of work always pays at least
    one overhead (a session run of only fused operators still costs one dispatch).
    """
    kept = [op for op, free in ops if not (in_graph and free)]
    if not kept:
        return params.op_overhead_s
    return float(sum(op_time(op, pu, params) for op in kept))


def log_error(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean ``|ln(predicted / measured)|`` (the fit's objective)."""
    return float(np.mean(np.abs(np.log(predicted) - np.log(measured))))


def mape_percent(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error ``100 · mean(|p - m| / m)``; NaN for no pairs."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    if p.size == 0:
        return float("nan")
    return float(100.0 * np.mean(np.abs(p - m) / m))


class _Design:
    """The samples as flat arrays, so one prediction of all samples is a few numpy operations."""

    def __init__(self, samples: Sequence[Sample], pu: PU, in_graph: bool):
        scale = PRECISION_BYTE_SCALE.get(pu.precision, 1.0)
        flops, nbytes, cls, owner, counts = [], [], [], [], []
        for i, sample in enumerate(samples):
            kept = [op for op, free in sample.ops if not (in_graph and free)]
            counts.append(max(len(kept), 1))
            for op in kept:
                flops.append(op.flops)
                nbytes.append(op.nbytes * scale)
                cls.append(OP_CLASSES.index(op.op_class))
                owner.append(i)
        self.flops = np.asarray(flops, float)
        self.nbytes = np.asarray(nbytes, float)
        self.cls = np.asarray(cls, int)
        self.owner = np.asarray(owner, int)
        self.counts = np.asarray(counts, float)
        self.measured = np.asarray([s.measured_s for s in samples], float)
        self.peak = pu.peak_flops
        self.n = len(samples)

    def predict(self, log_eff: np.ndarray, log_ovh: float, log_bw: float) -> np.ndarray:
        eff = np.exp(log_eff)[self.cls]
        with np.errstate(divide="ignore"):
            compute = np.where(self.flops > 0, self.flops / (self.peak * eff), 0.0)
        t = np.maximum(compute, self.nbytes / math.exp(log_bw))
        return np.bincount(self.owner, weights=t, minlength=self.n) + math.exp(log_ovh) * self.counts

    def objective(self, log_eff: np.ndarray, log_ovh: float, log_bw: float) -> float:
        return _huber(np.log(self.predict(log_eff, log_ovh, log_bw)) - np.log(self.measured))


def _huber(residuals: np.ndarray) -> float:
    """Mean Huber loss of log errors (:data:`HUBER_DELTA`)."""
    a = np.abs(residuals)
    return float(np.mean(np.where(a <= HUBER_DELTA, 0.5 * a * a, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))))


def _unpack(theta: np.ndarray, names: Sequence[str], log_eff: np.ndarray, log_ovh: float, log_bw: float):
    e, o, b = log_eff.copy(), log_ovh, log_bw
    for value, name in zip(theta, names):
        if name.startswith("efficiency."):
            e[OP_CLASSES.index(name.split(".", 1)[1])] = value
        elif name == "op_overhead_s":
            o = max(value, math.log(MIN_OVERHEAD_S))
        else:
            b = value
    return e, o, b


def _polish(design: "_Design", names: Sequence[str], log_eff: np.ndarray, log_ovh: float, log_bw: float):
    """Levenberg-Marquardt with Huber IRLS weights on the log errors, from the coordinate-descent point."""
    def pack(e, o, b):
        return np.array([e[OP_CLASSES.index(n.split(".", 1)[1])] if n.startswith("efficiency.")
                         else o if n == "op_overhead_s" else b for n in names], float)

    def residuals(theta):
        return np.log(design.predict(*_unpack(theta, names, log_eff, log_ovh,
                                              log_bw))) - np.log(design.measured)

    theta = pack(log_eff, log_ovh, log_bw)
    r = residuals(theta)
    best, lam, h = _huber(r), 1e-2, 1e-5
    for _ in range(LM_ITERATIONS):
        jac = np.empty((r.size, theta.size))
        for k in range(theta.size):
            bumped = theta.copy()
            bumped[k] += h
            jac[:, k] = (residuals(bumped) - r) / h
        a = np.abs(r)
        w = np.where(a <= HUBER_DELTA, 1.0, HUBER_DELTA / np.maximum(a, 1e-300))
        jtw = jac.T * w
        hess, grad = jtw @ jac, jtw @ r
        improved = False
        while lam < 1e8:
            step = np.linalg.solve(hess + lam * np.diag(np.diag(hess) + 1e-12), -grad)
            trial = theta + step
            r_trial = residuals(trial)
            score = _huber(r_trial)
            if score < best - 1e-15:
                theta, r, best, improved = trial, r_trial, score, True
                lam = max(lam / 3.0, 1e-9)
                break
            lam *= 4.0
        if not improved or np.max(np.abs(step)) < 1e-8:
            break
    return _unpack(theta, names, log_eff, log_ovh, log_bw)


def fit_pu(samples: Sequence[Sample], pu: PU, start: Optional[PUParams] = None,
           in_graph: bool = False) -> PUParams:
    """Fit the roofline parameters of ``pu`` to ``samples`` (see the module docstring).

    Parameters
    ----------
    samples : sequence of Sample
        Measured work on this PU; samples with a time <= 0 are ignored.
    pu : PU
        Supplies ``peak_flops`` and ``precision`` (fixed) and the starting values.
    start : PUParams, optional
        Starting values (default: the PU's own).
    in_graph : bool
        Operators flagged as fused away cost nothing (for block and stage measurements).

    Returns
    -------
    PUParams
        ``start`` unchanged when no sample is usable.

    Examples
    --------
    >>> from parapipe.soc.profile import PU
    >>> pu = PU(name="c", kind="cpu", cores=1, frequency_hz=1e9, peak_flops=1e10, precision="fp32",
    ...         memory_bandwidth_bytes_per_s=1e10, efficiency={"other": 1.0}, op_overhead_s=0.0,
    ...         active_power_w=1.0, idle_power_w=0.5)
    >>> conv = [OpFeatures(f"c{i}", "Conv", "conv", 1e6 * 4**i, 10, 10, 10) for i in range(4)]
    >>> samples = [Sample(((op, False),), op.flops / (1e10 * 0.5) + 5e-6) for op in conv]
    >>> p = fit_pu(samples, pu)
    >>> round(p.efficiency["conv"], 2), round(p.op_overhead_s * 1e6, 1)
    (0.5, 5.0)
    """
    start = start or PUParams.of(pu)
    usable = [s for s in samples if s.measured_s > 0 and math.isfinite(s.measured_s)
              and all(pu.supports(op.op_type) for op, _ in s.ops)]
    if not usable:
        return start
    design = _Design(usable, pu, in_graph)
    log_eff = np.log(np.array([start.efficiency[c] for c in OP_CLASSES], float))
    log_ovh = math.log(max(start.op_overhead_s, MIN_OVERHEAD_S))
    log_bw = math.log(start.memory_bandwidth_bytes_per_s)
    with_flops = design.cls[design.flops > 0]
    free_classes = sorted(set(int(c) for c in with_flops))
    names = [f"efficiency.{OP_CLASSES[c]}" for c in free_classes] + ["op_overhead_s"]
    if np.any(design.nbytes > 0):
        names.append("memory_bandwidth_bytes_per_s")
    best = design.objective(log_eff, log_ovh, log_bw)
    for _ in range(SWEEPS):
        before = best
        for name in names:
            for grid in _GRIDS:
                values = []
                for offset in grid:
                    e, o, b = log_eff.copy(), log_ovh, log_bw
                    if name.startswith("efficiency."):
                        e[OP_CLASSES.index(name.split(".", 1)[1])] += offset
                    elif name == "op_overhead_s":
                        o = max(o + offset, math.log(MIN_OVERHEAD_S))
                    else:
                        b += offset
                    values.append((design.objective(e, o, b), abs(offset), e, o, b))
                score, _, e, o, b = min(values, key=lambda v: (v[0], v[1]))
                if score < best - 1e-12:
                    best, log_eff, log_ovh, log_bw = score, e, o, b
        if before - best < 1e-6:
            break
    log_eff, log_ovh, log_bw = _polish(design, names, log_eff, log_ovh, log_bw)
    best = log_error(design.predict(log_eff, log_ovh, log_bw), design.measured)
    fitted = tuple(names)
    efficiency = {c: float(math.exp(v)) for c, v in zip(OP_CLASSES, log_eff)}
    params = PUParams(efficiency, float(math.exp(log_ovh)), float(math.exp(log_bw)), len(usable), fitted)
    log.info("%s fit of %s on %d samples: mean |ln error| %.3f; %s", "in-graph" if in_graph else "isolated",
             pu.name, len(usable), best, ", ".join(f"{k}={v:.3g}" for k, v in efficiency.items()
                                                   if f"efficiency.{k}" in fitted))
    return params


@dataclass(frozen=True)
class TransferFit:
    """Fitted hand-off cost of one ordered PU pair: ``alpha_s + nbytes / beta_bytes_per_s``."""

    alpha_s: float
    beta_bytes_per_s: float
    samples: int
    sizes: Tuple[int, ...] = field(default=())


def fit_transfer(nbytes: Sequence[int], times_s: Sequence[float],
                 fallback_beta_bytes_per_s: float) -> TransferFit:
    """Fit ``t = alpha + n / beta`` minimising the squared relative error.

    Parameters
    ----------
    nbytes, times_s : sequences of equal length
        Measured hand-offs (sizes in bytes, median times in s).
    fallback_beta_bytes_per_s : float
        Used when the sizes do not determine a positive slope (one size, or the larger sizes were not slower:
        cores that share a cache); alpha is then the smallest size's time less its bytes over this beta.

    Returns
    -------
    TransferFit
        ``alpha_s >= 0``, ``beta_bytes_per_s > 0``.

    Examples
    --------
    >>> sizes = [1024, 2**20, 2**22]
    >>> fit = fit_transfer(sizes, [1e-5 + n / 1e9 for n in sizes], 1e10)
    >>> round(fit.alpha_s * 1e6, 3), round(fit.beta_bytes_per_s / 1e9, 3)
    (10.0, 1.0)
    """
    n = np.asarray(nbytes, float)
    t = np.asarray(times_s, float)
    if n.size == 0:
        raise ValueError("fit_transfer needs at least one measurement")
    sizes = tuple(sorted(set(int(v) for v in n)))
    if len(sizes) >= 2:
        # Relative least squares: minimise sum((alpha + n·inv_beta - t) / t)^2, linear in (alpha, inv_beta).
        a = np.column_stack([1.0 / t, n / t])
        (alpha, inv_beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if inv_beta > 0 and alpha >= 0:
            return TransferFit(float(alpha), float(1.0 / inv_beta), int(n.size), sizes)
        if inv_beta > 0:  # negative intercept: pass through the origin instead
            inv_beta = float(np.sum(n / t) / np.sum((n / t) ** 2))
            return TransferFit(0.0, 1.0 / inv_beta, int(n.size), sizes)
    small = n == n.min()
    alpha = max(float(np.median(t[small])) - float(n.min()) / fallback_beta_bytes_per_s, 0.0)
    log.info("transfer fit: sizes %s do not give a slope; beta %.3g B/s assumed", sizes,
             fallback_beta_bytes_per_s)
    return TransferFit(alpha, float(fallback_beta_bytes_per_s), int(n.size), sizes)


def samples_by_pu(rows: Sequence, features: Dict[str, OpFeatures],
                  parts: Dict[str, List[Tuple[str, bool]]]) -> Dict[str, List[Sample]]:
    """Group measurement rows into :class:`Sample` lists per PU.

    Parameters
    ----------
    rows : sequence of Measurement
        Rows of kind ``op`` (signature = operator signature) or ``block``/``stage`` (signature in ``parts``).
    features : dict
        Operator signature -> features (the catalog).
    parts : dict
        Block/stage signature -> its ``(op signature, fused away)`` list.

    Rows whose work is not in the catalog are skipped (logged once with their count).
    """
    out: Dict[str, List[Sample]] = {}
    missing = 0
    for row in rows:
        if row.kind == "op":
            ops = [(row.signature, False)]
        else:
            ops = parts.get(row.signature)
            if ops is None:
                missing += 1
                continue
        try:
            feats = tuple((features[sig], free) for sig, free in ops)
        except KeyError:
            missing += 1
            continue
        out.setdefault(row.pu, []).append(Sample(feats, row.median_s, row.signature))
    if missing:
        log.info("%d measurement(s) name work the catalog does not describe; skipped", missing)
    return out
