"""Calibrate the analytical cost model (roofline) of each PU, and the transfer cost of each PU pair, on
measurements.

The model is the one :mod:`parapipe.cost.roofline` evaluates (:func:`parapipe.cost.roofline.roofline_s`, the one
place the formula is written; Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009): an operator of class
``c`` takes

    t = max(flops / (peak_flops · efficiency[c]),  bytes · s / memory_bandwidth) + op_overhead_s

on a PU, and a block or stage the sum over its operators. :func:`fit_pu` fits, per PU, the efficiency of every
op class that the samples exercise, the per-operator overhead and the memory bandwidth, minimising the mean
log errors ``ln(predicted / measured)`` (plus a weak pull towards the starting values, :data:`PRIOR_WEIGHT`)
under the Huber loss (quadratic up to :data:`HUBER_DELTA`, linear
beyond: robust to the odd disturbed measurement, and equal weight to small and large work): coordinate descent
over the log parameters on grids (to get near the minimum from far-off profile values), then
Levenberg-Marquardt with iteratively reweighted least squares (to settle it jointly). Parameters the samples
do not constrain keep the SoC profile's values.

Two fits are made per PU (:func:`parapipe.calibration.calibrated.fit_calibration`):

* **isolated**: on single-operator measurements (optimisation off, one operator per session run), the
  per-operator cost as profiled;
* **in graph**: on block measurements (optimisation on), with the operators that ONNX Runtime fuses away in a
  graph (:func:`parapipe.profiledb.catalog.in_graph_free`) costing nothing, plus one session boundary per
  timed sub-model: ``run_overhead_s + boundary bytes / boundary_bandwidth`` (:meth:`PUParams.boundary_s`). The
  boundary is what makes a stage of 30 blocks faster than its 30 blocks timed alone (squeezenet on a 2-core
  x86 machine: 5.6 ms against 7.6 ms; ``parapipe profile squeezenet --soc host`` stores the block times,
  ``parapipe calibrate --soc host --model squeezenet`` times whole stages next to them): each sub-model
  converts its activations to ONNX Runtime's blocked layout and back. It is fitted from pairs of consecutive
  blocks (:func:`fit_boundary`), then the rest on the blocks and pairs, starting from the isolated fit. This
  is the model of what the executor runs, and the one written to a calibrated profile. Without block
  measurements it
  equals the isolated fit.

Transfers: ``t = alpha_s + nbytes / beta_bytes_per_s`` per ordered PU pair, by least squares on the relative
error over the sizes measured (:func:`fit_transfer`).

One piece (about 600 lines): every fit of one calibration, all on relative (log) errors with the constants
below: the per-PU roofline fit (:func:`fit_pu`, with its parameter layout, loss and grids: most of the file)
and the three small fits run next to it (:func:`fit_boundary`, :func:`fit_cache`, :func:`fit_transfer`), with
the prediction they are fitted for (:func:`predict`), so a change to the formula or the loss is made here
once. The storage side (fitting from the database, the calibrated profile) is
:mod:`parapipe.calibration.calibrated`.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from parapipe.cost.roofline import PRECISION_BYTE_SCALE, roofline_s
from parapipe.profiledb.catalog import OpFeatures
from parapipe.soc.op_classes import OP_CLASSES
from parapipe.soc.profile import PU

log = logging.getLogger(__name__)

__all__ = ["PUParams", "Sample", "fit_pu", "fit_boundary", "fit_cache", "fit_transfer", "op_time", "predict",
           "compute_time", "mape_percent", "log_error", "samples_by_pu"]

#: Smallest per-operator overhead the fit may choose, s (1 ns: below any timer resolution).
MIN_OVERHEAD_S = 1e-9
#: Coordinate-descent sweeps over all parameters before the joint polish (a parapipe choice).
SWEEPS = 4
#: Levenberg-Marquardt iterations at most (it converges in 10-30 on the zoo models).
LM_ITERATIONS = 200
#: Weight of the pull of each fitted efficiency, memory bandwidth and (from a non-zero start) operator
#: overhead, in ln units, towards its starting value (the profile's, or the isolated fit's for the in-graph
#: fit), as a pseudo-observation: this or ``1 / samples``, whichever is more. With many samples a factor e
#: away costs as much as one sample off by 1 %; with few (a ``--budget`` run) the profile's values hold the
#: parameters the samples cannot tell apart. Measured on the nine zoo models on a 2-core x86 machine (fit on a
#: tenth, predict every other operator): mean MAPE 35 % with the ``1 / samples`` weight, 82 % without
#: (``parapipe profile MODEL --soc host --budget 0.1`` prints the held-out MAPE of such a fit). The boundary
#: is never pulled. A parapipe choice.
PRIOR_WEIGHT = 0.01
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
    run_overhead_s : float
        In-graph model only: fixed cost of one session run (one block or stage), s.
    boundary_bandwidth_bytes_per_s : float
        In-graph model only: bytes/s at which a session run's input and output activations cross its boundary.
        ONNX Runtime's CPU optimiser converts convolution inputs to its blocked NCHWc layout on entry and back
        on exit (NchwcTransformer), so a sub-model pays this per boundary byte; a whole stage pays it once
        where its blocks, timed one by one, each pay it. ``inf``: no boundary cost.
    cache_nbytes, cold_bandwidth_bytes_per_s : float
        In-graph model only: the weights a session run keeps in cache between runs, and the rate at which the
        weights that do not fit are read again. A block timed alone runs with its weights in cache; a stage
        whose weights exceed ``cache_nbytes`` reads them from memory every run (:meth:`cache_s`). ``inf``: no
        such effect seen.
    samples : int
        Measurements the fit used (0: the profile's values).
    fitted : tuple of str
        Parameters the samples constrained (``"efficiency.conv"``, ``"op_overhead_s"``, ...).
    """

    efficiency: Dict[str, float]
    op_overhead_s: float
    memory_bandwidth_bytes_per_s: float
    run_overhead_s: float = 0.0
    boundary_bandwidth_bytes_per_s: float = math.inf
    cache_nbytes: float = math.inf
    cold_bandwidth_bytes_per_s: float = math.inf
    samples: int = 0
    fitted: Tuple[str, ...] = ()

    @classmethod
    def of(cls, pu: PU) -> "PUParams":
        """The profile's own values for ``pu`` (no fit)."""
        return cls(dict(pu.efficiency), pu.op_overhead_s, pu.memory_bandwidth_bytes_per_s)

    def cache_s(self, block_weight_nbytes: Sequence[float]) -> float:
        """Extra time of a session run over blocks with these weight bytes, against the blocks timed alone:
        when their sum exceeds :attr:`cache_nbytes`, the weights of every block that fitted alone are read at
        :attr:`cold_bandwidth_bytes_per_s`, s."""
        if sum(block_weight_nbytes) <= self.cache_nbytes:
            return 0.0
        return sum(w for w in block_weight_nbytes if w <= self.cache_nbytes) / self.cold_bandwidth_bytes_per_s

    def boundary_s(self, nbytes: float) -> float:
        """Cost of one session run whose inputs and outputs total ``nbytes``: run overhead + boundary bytes,
        s."""
        return self.run_overhead_s + nbytes / self.boundary_bandwidth_bytes_per_s


@dataclass(frozen=True)
class Sample:
    """One measured piece of work: its operators (features, fused away in a graph), its time (s) and the bytes
    of the activations entering and leaving it (for the in-graph boundary cost)."""

    ops: Tuple[Tuple[OpFeatures, bool], ...]
    measured_s: float
    label: str = ""
    boundary_nbytes: float = 0.0


def op_time(op: OpFeatures, pu: PU, params: PUParams) -> float:
    """Roofline time of one operator on ``pu`` with ``params``, s; ``inf`` if the PU does not run its op type.

    :func:`parapipe.cost.roofline.roofline_s` (the formula :func:`parapipe.cost.roofline.op_time_s` uses) with
    the PU's efficiency, bandwidth and overhead replaced by ``params``.
    """
    if not pu.supports(op.op_type):
        return math.inf
    scale = PRECISION_BYTE_SCALE.get(pu.precision, 1.0)
    return roofline_s(op.flops, op.nbytes * scale, pu.peak_flops, params.efficiency[op.op_class],
                      params.memory_bandwidth_bytes_per_s) + params.op_overhead_s


def compute_time(ops: Sequence[Tuple[OpFeatures, bool]], pu: PU, params: PUParams, in_graph: bool) -> float:
    """Sum of the operator times of a piece of work, s (fused operators cost nothing with ``in_graph``); at
    least one operator overhead (a session run of only fused operators still dispatches once)."""
    kept = [op for op, free in ops if not (in_graph and free)]
    if not kept:
        return params.op_overhead_s
    return float(sum(op_time(op, pu, params) for op in kept))


def predict(ops: Sequence[Tuple[OpFeatures, bool]], pu: PU, params: PUParams, in_graph: bool,
            boundary_nbytes: float = 0.0) -> float:
    """Time of a piece of work run as one session, s: :func:`compute_time`, plus with ``in_graph`` the run's
    boundary cost (:meth:`PUParams.boundary_s` of ``boundary_nbytes``)."""
    total = compute_time(ops, pu, params, in_graph)
    return total + params.boundary_s(boundary_nbytes) if in_graph else total


def log_error(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean ``|ln(predicted / measured)|``."""
    return float(np.mean(np.abs(np.log(predicted) - np.log(measured))))


def mape_percent(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error ``100 · mean(|p - m| / m)``; NaN for no pairs."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    if p.size == 0:
        return float("nan")
    return float(100.0 * np.mean(np.abs(p - m) / m))


# Parameter vector of the fit: ln of the 7 efficiencies, then these (all in ln units).
_OVH, _BW, _RUN, _BBW = range(len(OP_CLASSES), len(OP_CLASSES) + 4)
_SCALARS = {"op_overhead_s": _OVH, "memory_bandwidth_bytes_per_s": _BW, "run_overhead_s": _RUN,
            "boundary_bandwidth_bytes_per_s": _BBW}
_FLOOR = {_OVH: math.log(MIN_OVERHEAD_S), _RUN: math.log(MIN_OVERHEAD_S)}


def _index(name: str) -> int:
    return OP_CLASSES.index(name.split(".", 1)[1]) if name.startswith("efficiency.") else _SCALARS[name]


def _theta(p: PUParams) -> np.ndarray:
    return np.array([math.log(p.efficiency[c]) for c in OP_CLASSES]
                    + [math.log(max(p.op_overhead_s, MIN_OVERHEAD_S)),
                       math.log(p.memory_bandwidth_bytes_per_s),
                       math.log(max(p.run_overhead_s, MIN_OVERHEAD_S)),
                       math.log(min(p.boundary_bandwidth_bytes_per_s, 1e30))], float)


#: Range of every ln parameter (e^-40 ≈ 4e-18 to e^70 ≈ 2.5e30): keeps a wild trial step finite.
_LN_RANGE = (-40.0, 70.0)


def _clamp(theta: np.ndarray) -> np.ndarray:
    np.clip(theta, *_LN_RANGE, out=theta)
    for k, floor in _FLOOR.items():
        theta[k] = max(theta[k], floor)
    return theta


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
        self.boundary = np.asarray([s.boundary_nbytes * scale for s in samples], float)
        self.measured = np.asarray([s.measured_s for s in samples], float)
        self.peak = pu.peak_flops
        self.in_graph = in_graph
        self.n = len(samples)

    def predict(self, theta: np.ndarray) -> np.ndarray:
        eff = np.exp(theta[:len(OP_CLASSES)])[self.cls]
        t = roofline_s(self.flops, self.nbytes, self.peak, eff, math.exp(theta[_BW]))
        total = np.bincount(self.owner, weights=t, minlength=self.n) + math.exp(theta[_OVH]) * self.counts
        if self.in_graph:
            total = total + math.exp(theta[_RUN]) + self.boundary / math.exp(theta[_BBW])
        return total

    def set_prior(self, theta: np.ndarray, free: Sequence[int]) -> None:
        """Pull the ``free`` parameters towards ``theta``: :data:`PRIOR_WEIGHT`, or ``1 / samples`` when that
        is more (few samples: the profile's values count for more)."""
        self.prior, self.free = theta.copy(), list(free)
        self.weight = max(PRIOR_WEIGHT, 1.0 / max(self.n, 1))

    def residuals(self, theta: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            r = np.log(self.predict(theta)) - np.log(self.measured)
        r = np.where(np.isfinite(r), r, 1e3)
        if getattr(self, "free", None):
            r = np.concatenate([r, self.weight * (theta[self.free] - self.prior[self.free])])
        return r

    def objective(self, theta: np.ndarray) -> float:
        return _huber(self.residuals(theta))


def _huber(residuals: np.ndarray) -> float:
    """Mean Huber loss of log errors (:data:`HUBER_DELTA`)."""
    a = np.abs(residuals)
    return float(np.mean(np.where(a <= HUBER_DELTA, 0.5 * a * a, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))))


def _descend(design: _Design, theta: np.ndarray, free: Sequence[int]) -> np.ndarray:
    """Coordinate descent on grids of offsets (:data:`_GRIDS`), :data:`SWEEPS` sweeps at most."""
    best = design.objective(theta)
    for _ in range(SWEEPS):
        before = best
        for k in free:
            for grid in _GRIDS:
                trials = []
                for offset in grid:
                    trial = theta.copy()
                    trial[k] += offset
                    trials.append((design.objective(_clamp(trial)), abs(offset), trial))
                score, _, trial = min(trials, key=lambda v: (v[0], v[1]))
                if score < best - 1e-12:
                    best, theta = score, trial
        if before - best < 1e-6:
            break
    return theta


def _polish(design: _Design, theta: np.ndarray, free: Sequence[int]) -> np.ndarray:
    """Levenberg-Marquardt with Huber IRLS weights on the log errors, over the ``free`` parameters."""
    free = list(free)
    r = design.residuals(theta)
    best, lam, h = _huber(r), 1e-2, 1e-5
    for _ in range(LM_ITERATIONS):
        jac = np.empty((r.size, len(free)))
        for j, k in enumerate(free):
            bumped = theta.copy()
            bumped[k] += h
            jac[:, j] = (design.residuals(_clamp(bumped)) - r) / h
        a = np.abs(r)
        w = np.where(a <= HUBER_DELTA, 1.0, HUBER_DELTA / np.maximum(a, 1e-300))
        jtw = jac.T * w
        hess, grad = jtw @ jac, jtw @ r
        improved, step = False, np.zeros(len(free))
        while lam < 1e8:
            step = np.linalg.solve(hess + lam * np.diag(np.diag(hess) + 1e-12), -grad)
            trial = theta.copy()
            trial[free] += step
            trial = _clamp(trial)
            r_trial = design.residuals(trial)
            score = _huber(r_trial)
            if score < best - 1e-15:
                theta, r, best, improved = trial, r_trial, score, True
                lam = max(lam / 3.0, 1e-9)
                break
            lam *= 4.0
        if not improved or np.max(np.abs(step)) < 1e-8:
            break
    return theta


def fit_boundary(saved_s: Sequence[float], saved_nbytes: Sequence[float]) -> Optional[Tuple[float, float]]:
    """Fit one session boundary's cost from pairs of consecutive blocks.

    Two blocks timed alone pay two boundaries; timed together, one. So for each pair
    ``t(a) + t(b) - t(ab) = run_overhead_s + saved_nbytes / boundary_bandwidth`` with
    ``saved_nbytes = boundary(a) + boundary(b) - boundary(ab)`` (the bytes of the tensors between them,
    twice). Fitted by least absolute deviations (iteratively reweighted least squares, 30 rounds: one
    disturbed pair moves the line little), both parameters kept >= 0.

    Parameters
    ----------
    saved_s, saved_nbytes : sequences of equal length
        ``t(a) + t(b) - t(ab)`` in s and the bytes above, one per measured pair.

    Returns
    -------
    (run_overhead_s, boundary_bandwidth_bytes_per_s) or None
        None with fewer than 3 pairs. Bandwidth ``inf`` when the bytes do not cost anything measurable.

    Examples
    --------
    >>> x = [1e5, 5e5, 1e6, 4e6]
    >>> run, bw = fit_boundary([4e-6 + n / 1e10 for n in x], x)
    >>> round(run * 1e6, 2), round(bw / 1e9, 2)
    (4.0, 10.0)
    """
    y, x = np.asarray(saved_s, float), np.asarray(saved_nbytes, float)
    if y.size < 3:
        return None
    w = np.ones_like(y)
    run, inv_bw = 0.0, 0.0
    floor = 1e-9 * max(float(np.max(np.abs(y))), 1e-12)
    for _ in range(30):
        a = np.column_stack([np.ones_like(x), x]) * np.sqrt(w)[:, None]
        (run, inv_bw), *_ = np.linalg.lstsq(a, y * np.sqrt(w), rcond=None)
        if inv_bw < 0:
            inv_bw = 0.0
            run = float(np.sum(w * y) / np.sum(w))
        if run < 0:
            run = 0.0
            inv_bw = max(float(np.sum(w * x * y) / max(np.sum(w * x * x), 1e-300)), 0.0)
        w = 1.0 / np.maximum(np.abs(y - run - inv_bw * x), floor)  # IRLS weights of the L1 loss
    negligible = inv_bw * float(np.max(x)) <= 1e-6 * max(abs(float(run)), floor)  # bytes explain nothing
    return float(run), (math.inf if inv_bw <= 0 or negligible else float(1.0 / inv_bw))


#: Cache sizes tried by :func:`fit_cache`, bytes: 1 MiB to 1 GiB in powers of two.
CACHE_GRID_NBYTES = tuple(float(2 ** k) for k in range(20, 31))
#: Improvement of the spans' MAPE (percentage points) that a cache term must bring to be kept.
CACHE_MIN_GAIN_PERCENT = 1.0


def fit_cache(measured_s: Sequence[float], base_s: Sequence[float],
              block_weights: Sequence[Sequence[float]]) -> Optional[Tuple[float, float]]:
    """Fit the cache term (:meth:`PUParams.cache_s`) from spans: ranges of blocks timed as one sub-model.

    For each span, ``base_s`` is its prediction from its blocks timed alone (weights in cache) and
    ``measured_s`` its time. For each cache size of :data:`CACHE_GRID_NBYTES` the cold bandwidth is fitted by
    least squares on the relative error; the size with the lowest MAPE is kept if it beats no cache term by
    :data:`CACHE_MIN_GAIN_PERCENT` points.

    Returns
    -------
    (cache_nbytes, cold_bandwidth_bytes_per_s) or None
        None with fewer than 3 spans or no gain.

    Examples
    --------
    >>> weights = [[3e6] * 10, [3e6] * 4, [3e6] * 2, [1e6] * 6]
    >>> base = [0.01, 0.004, 0.002, 0.005]
    >>> slow = [b + (sum(w) / 1e10 if sum(w) > 2**23 else 0) for b, w in zip(base, weights)]
    >>> size, bw = fit_cache(slow, base, weights)
    >>> size / 2**20, round(bw / 1e9, 3)
    (8.0, 10.0)
    """
    t = np.asarray(measured_s, float)
    base = np.asarray(base_s, float)
    if t.size < 3:
        return None

    def mape(pred):
        return float(100.0 * np.mean(np.abs(pred - t) / t))

    best, best_score = None, mape(base) - CACHE_MIN_GAIN_PERCENT
    for size in CACHE_GRID_NBYTES:
        x = np.array([sum(v for v in w if v <= size) if sum(w) > size else 0.0 for w in block_weights])
        if not np.any(x > 0):
            continue
        inv = float(np.sum(x * (t - base) / t ** 2) / np.sum(x * x / t ** 2))
        if inv <= 0:
            continue
        score = mape(base + inv * x)
        if score < best_score:
            best, best_score = (size, 1.0 / inv), score
    return best


def fit_pu(samples: Sequence[Sample], pu: PU, start: Optional[PUParams] = None,
           in_graph: bool = False, boundary: Optional[Tuple[float, float]] = None) -> PUParams:
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
        Samples are sub-models run with optimisation on: operators flagged as fused away cost nothing, and the
        run overhead and boundary bandwidth are fitted too (when the samples' boundary bytes vary), unless
        ``boundary`` fixes them.
    boundary : (run_overhead_s, boundary_bandwidth_bytes_per_s), optional
        Fixed session boundary cost (from :func:`fit_boundary`), with ``in_graph``.

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
    >>> conv = [OpFeatures(f"c{i}", "Conv", "conv", 1e5 * 2**i, 10, 10, 10) for i in range(16)]
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
    theta = _theta(start)
    names = [f"efficiency.{OP_CLASSES[c]}" for c in sorted(set(int(c) for c in design.cls[design.flops > 0]))]
    names.append("op_overhead_s")
    if np.any(design.nbytes > 0):
        names.append("memory_bandwidth_bytes_per_s")
    fixed = []
    if in_graph and boundary is not None:
        theta[_RUN] = math.log(max(boundary[0], MIN_OVERHEAD_S))
        theta[_BBW] = math.log(min(boundary[1], 1e30))
        fixed = ["run_overhead_s", "boundary_bandwidth_bytes_per_s"]
    elif in_graph:
        names.append("run_overhead_s")
        if np.ptp(design.boundary) > 0:
            names.append("boundary_bandwidth_bytes_per_s")
            theta[_BBW] = math.log(10 * start.memory_bandwidth_bytes_per_s)  # start where it barely matters
    free = [_index(n) for n in names]
    pulled = [k for k in free if k < len(OP_CLASSES) or k == _BW or (k == _OVH and start.op_overhead_s > 0)]
    design.set_prior(theta, pulled)
    theta = _polish(design, _descend(design, theta, free), free)
    eff = {c: float(math.exp(v)) for c, v in zip(OP_CLASSES, theta)}
    bbw = math.inf
    if "boundary_bandwidth_bytes_per_s" in names:
        bbw = float(math.exp(theta[_BBW]))
    if boundary is not None and in_graph:
        bbw = boundary[1]
    run = float(math.exp(theta[_RUN])) if in_graph else 0.0
    params = PUParams(eff, float(math.exp(theta[_OVH])), float(math.exp(theta[_BW])), run_overhead_s=run,
                      boundary_bandwidth_bytes_per_s=bbw, samples=len(usable), fitted=tuple(names + fixed))
    log.info("%s fit of %s on %d samples: mean |ln error| %.3f; %s", "in-graph" if in_graph else "isolated",
             pu.name, len(usable), log_error(design.predict(theta), design.measured),
             ", ".join(f"{n}={math.exp(theta[_index(n)]):.3g}" for n in names))
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
        cores that share a cache); alpha is then the smallest size's time less its bytes over this beta. Times
        of 0 (below the clock's resolution) or not finite are left out, with a warning; when none is left the
        fit is ``alpha = 0`` at this beta.

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
    usable = np.isfinite(t) & (t > 0)  # a median of 0: the hand-off was below the clock's resolution
    if not usable.all():
        log.warning("transfer fit: %d of %d hand-off times are zero or not finite (below the clock's resolution, "
                    "or the measurement failed); fitted without them", int((~usable).sum()), int(n.size))
        if not usable.any():
            return TransferFit(0.0, float(fallback_beta_bytes_per_s), int(n.size),
                               tuple(sorted(set(int(v) for v in n))))
        n, t = n[usable], t[usable]
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
                  parts: Dict[str, List[Tuple[str, bool]]],
                  boundary: Optional[Dict[str, float]] = None) -> Dict[str, List[Sample]]:
    """Group measurement rows into :class:`Sample` lists per PU.

    Parameters
    ----------
    rows : sequence of Measurement
        Rows of kind ``op`` (signature = operator signature) or ``block``/``stage`` (signature in ``parts``).
    features : dict
        Operator signature -> features (the catalog).
    parts : dict
        Block/stage signature -> its ``(op signature, fused away)`` list.
    boundary : dict, optional
        Block/stage signature -> bytes entering and leaving it (default 0).

    Rows whose work is not in the catalog are skipped (logged once with their count).
    """
    out: Dict[str, List[Sample]] = {}
    missing = 0
    for row in rows:
        ops: Optional[List[Tuple[str, bool]]]
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
        nbytes = float((boundary or {}).get(row.signature, 0.0)) if row.kind != "op" else 0.0
        out.setdefault(row.pu, []).append(Sample(feats, row.median_s, row.signature, nbytes))
    if missing:
        log.info("%d measurement(s) name work the catalog does not describe; skipped", missing)
    return out
