"""Fit the pipeline-level terms of the cost model (:mod:`parapipe.cost.pipeline_terms`) and the PU powers on
measured runs of whole mappings.

Each :class:`MeasuredRun` is a mapping of a problem (block times measured or modelled) with its measured period
(``1 / throughput``), optionally its idle latency (one frame through an empty pipeline) and its measured energy
per inference. :func:`fit_terms` chooses the terms that minimise the squared log errors
``ln(predicted / measured)`` of period and latency with ``scipy.optimize.least_squares`` (trust-region
reflective, within the bounds of :data:`BOUNDS`); each parameter's uncertainty is the square root of the diagonal
of ``s² (JᵀJ)⁻¹`` with ``J`` the Jacobian of the residuals at the optimum and ``s²`` the residual variance
(``Σ r² / (m − n)``): the usual linearised least-squares standard error (e.g. Nocedal & Wright, *Numerical
Optimization*, 2nd ed., §10.3). A parameter no run constrains (no PU serving two stages: no overlap; no
co-running stages: no contention) keeps its starting value and is reported as not fitted.

Energy (:func:`fit_power`): with the fitted terms, the energy per inference of the cost model is linear in the
powers, ``E = Σ_g Δ_g · compute_g + C · P`` (``Δ_g`` = active − idle power of a group of identical PUs,
``compute_g`` their busy compute seconds, ``C = Σ_p P_idle + P_static``, ``P`` the period), so they are fitted
by bounded linear least squares on the relative error (``scipy.optimize.lsq_linear``, powers >= 0). A PU with
operating points (:attr:`MappingProblem.operating_points`) gets one ``Δ`` per operating point its runs use
(``Δ_{g,f}``, its compute seconds at frequency ``f``): the dynamic power of a point is what DVFS changes.

:func:`calibrate_runs` does both and reports errors before (the profile as given), after (the fit, in sample)
and leave-one-out (each run predicted by a fit that did not see it), overall and per model.

**Workload runs** (:class:`MeasuredWorkload`: several models run at once, PUs shared as mapped) are one
observation each: the measured period per workload frame (``1 / workload throughput``) against the workload cost
model's (:func:`parapipe.cost.workload.evaluate_workload`: rate-weighted busy time, sharing and contention across
the models' stages), and each model's idle latency against its own latency under the terms (measured with the
other models idle: no co-runner, so no cross-model contention; the workload model's ``ρ^×`` is 0 then). Stages of
*different* models that share no PU run at once only in a workload run, so the contention ``γ`` (and the sharing
``ψ`` and overlap ``φ`` of a PU serving stages of two models) can be identified from them when single-model runs
cannot; each fitted :class:`ParamEstimate` says in ``workloads`` whether the workload runs inform it. Their
measured energy is not used (the power fit and the energy errors are the single-model runs').
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping
from parapipe.cost.pipeline_terms import MappingFacts, PipelineTerms, mapping_facts
from parapipe.cost.problem import MappingProblem
from parapipe.cost.workload import evaluate_workload

log = logging.getLogger(__name__)

__all__ = ["MeasuredRun", "MeasuredWorkload", "ParamEstimate", "Errors", "PowerFit", "RunsFit", "TERM_NAMES", "BOUNDS", "fit_terms",
           "fit_power", "calibrate_runs", "point_compute_s"]

#: A measured run the fit takes: one model's, or a workload's.
Run = Union["MeasuredRun", "MeasuredWorkload"]

#: The terms ``--fit`` may name.
TERM_NAMES = ("slowdown", "dispatch", "handoff", "contention", "sharing", "overlap")
#: Bounds of each parameter (dispatch: up to the longest measured period). Parapipe's choices: a slowdown
#: beyond ×5 either way means the block times describe another machine; a contention of 100 would slow a
#: stage 100× at full co-runner bandwidth; a sharing of 2 would triple a stage whose PU serves another.
BOUNDS = {"slowdown": (0.2, 5.0), "dispatch_s": (0.0, math.inf), "handoff_s": (0.0, math.inf),
          "contention": (0.0, 100.0), "sharing": (0.0, 2.0),
          "overlap": (0.0, 1.0)}


@dataclass
class MeasuredRun:
    """One measured mapping (s, J).

    Attributes
    ----------
    model : str
    label : str
        The mapping as the user wrote it, or the point id.
    problem : MappingProblem
    mapping : Mapping
    period_s : float
        Measured ``1 / throughput`` with the pipeline full.
    latency_s : float or None
        Measured idle latency (one frame at a time).
    energy_j : float or None
        Measured energy per inference.
    source : str
        Where the run comes from (``runs.csv: line 4``, ``profile.sqlite: run 7``).
    """

    model: str
    label: str
    problem: MappingProblem
    mapping: Mapping
    period_s: float
    latency_s: Optional[float] = None
    energy_j: Optional[float] = None
    source: str = ""
    facts: MappingFacts = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.facts = mapping_facts(self.problem, self.mapping, evaluate(self.problem, self.mapping))

    def shared_pus(self) -> List[str]:
        """PUs serving two or more stages."""
        counts: Dict[int, int] = {}
        for st in self.mapping.stages:
            for p in st.pus:
                counts[p] = counts.get(p, 0) + 1
        return [self.problem.pu_names[p] for p, c in counts.items() if c > 1]

    def handoffs(self) -> int:
        """Tensors handed between the PUs of a multi-PU stage per inference."""
        pu = self.mapping.block_pus()
        stage = [s for s, st in enumerate(self.mapping.stages) for _ in range(st.start, st.stop)]
        return sum(1 for (u, v), nb in self.problem.edge_nbytes.items()
                   if nb > 0 and pu[u] != pu[v] and stage[u] == stage[v])

    def has_co_runners(self) -> bool:
        """Whether two stages with DRAM traffic run at once (the contention term matters)."""
        return any(co and self.facts.traffic_nbytes[s] > 0 for s, co in enumerate(self.facts.co_runners))

    def residuals(self, terms: PipelineTerms) -> List[float]:
        """``ln(predicted / measured)`` of the period and, when measured, the latency."""
        period, latency, _ = self.facts.figures(terms)
        return [_log_ratio(period, self.period_s)] + ([_log_ratio(latency, self.latency_s)] if self.latency_s else [])

    def prior(self, terms: PipelineTerms) -> Tuple[float, float, Optional[float]]:
        """``(period_s, latency_s, energy_j)`` of the cost model with ``terms`` and the profile's powers."""
        ev = evaluate(self.problem, self.mapping, terms)
        return ev.period_s, ev.latency_s, ev.energy_j


@dataclass
class MeasuredWorkload:
    """One measured workload run (s): several models run at once on one SoC, each at its rate.

    Attributes
    ----------
    label : str
        The workload point's id.
    members : list of MeasuredRun
        One per model, in the workload's order: its problem, its mapping, its idle latency (``latency_s``,
        measured with the other models idle; None if not measured) and its own measured period while the
        workload ran (``period_s``, not fitted on: the workload period is).
    rates : list of float
        Frames of each model per workload frame (> 0).
    period_s : float
        Measured ``1 / workload throughput``: seconds per workload frame.
    source : str
        Where the run comes from (``profile.sqlite: workload 3f2a…``).
    workload_id : str
        The id its rows share in the ``runs`` table.

    ``model`` (``workload a+b``, the label of its line in the error tables), ``problem`` (the first model's: the
    PUs), ``latency_s`` and ``energy_j`` (None: the workload's own errors are on the period) let it stand where
    a :class:`MeasuredRun` does.
    """

    label: str
    members: List[MeasuredRun]
    rates: List[float]
    period_s: float
    source: str = ""
    workload_id: str = ""
    latency_s: Optional[float] = field(default=None, init=False)
    energy_j: Optional[float] = field(default=None, init=False)

    def __post_init__(self) -> None:
        if len(self.members) != len(self.rates) or not self.members:
            raise ValueError("one rate per model of a workload run, and at least one model")

    @property
    def model(self) -> str:
        return "workload " + "+".join(m.model for m in self.members)

    @property
    def problem(self) -> MappingProblem:
        return self.members[0].problem

    def evaluate(self, terms: PipelineTerms):
        """The workload cost model's :class:`~parapipe.cost.workload.WorkloadEvaluation` under ``terms``."""
        return evaluate_workload([m.problem for m in self.members], [m.mapping for m in self.members], self.rates,
                                 terms, facts=[m.facts if isinstance(m.facts, MappingFacts) else None
                                               for m in self.members])

    def _joint_stages(self) -> List[Tuple[int, set, float]]:
        """(model index, PUs, DRAM bytes per workload frame) of every stage the workload model shares and
        contends across models (those of mappings without replicated stages)."""
        return [(i, set(st.pus), self.rates[i] * m.facts.traffic_nbytes[s]) for i, m in enumerate(self.members)
                if not m.mapping.replicated for s, st in enumerate(m.mapping.stages)]

    def shared_pus(self) -> List[str]:
        """PUs serving two or more stages, of any models."""
        counts: Dict[int, int] = {}
        for _, pus, _ in self._joint_stages():
            for p in pus:
                counts[p] = counts.get(p, 0) + 1
        return [self.problem.pu_names[p] for p, c in counts.items() if c > 1]

    def handoffs(self) -> int:
        """Tensors handed between the PUs of a multi-PU stage per workload frame's models, summed."""
        return sum(m.handoffs() for m in self.members)

    def has_co_runners(self) -> bool:
        """Whether two stages (of any models) that share no PU run at once, one of them moving DRAM bytes."""
        stages = self._joint_stages()
        return any(not (a & b) and tb > 0 for i, (_, a, _) in enumerate(stages)
                   for j, (_, b, tb) in enumerate(stages) if i != j)

    def residuals(self, terms: PipelineTerms) -> List[float]:
        """``ln(predicted / measured)`` of the workload period, then of each model's measured idle latency."""
        out = [_log_ratio(self.evaluate(terms).period_s, self.period_s)]
        for m in self.members:
            if m.latency_s:
                out.append(_log_ratio(m.facts.figures(terms)[1], m.latency_s))
        return out

    def prior(self, terms: PipelineTerms) -> Tuple[float, float, Optional[float]]:
        """``(period_s, latency_s, energy_j)`` per workload frame of the workload model with ``terms`` and the
        profile's powers (latency: the largest model latency)."""
        ev = self.evaluate(terms)
        return ev.period_s, max(m.facts.figures(terms)[1] for m in self.members), ev.energy_j

    def figures(self, terms: PipelineTerms) -> Tuple[float, float]:
        """``(period_s, latency_s)`` under ``terms`` as :meth:`prior` has them."""
        return self.evaluate(terms).period_s, max(m.facts.figures(terms)[1] for m in self.members)


@dataclass
class ParamEstimate:
    """A fitted parameter: ``name`` (``slowdown``, ``dispatch_s``, ``contention``, ``overlap.<pu>``,
    ``handoff_s``, ``power.delta_w.<group>``, ``power.base_w``), value, bounds, 1-sigma uncertainty (None if not fitted)."""

    name: str
    value: float
    lower: float
    upper: float
    stderr: Optional[float]
    fitted: bool
    note: str = ""
    #: What the workload runs (:class:`MeasuredWorkload`) tell of it: ``""`` (none, or none sensitive to it at
    #: the optimum), ``"also"`` (single-model runs inform it too), ``"only"`` (no single-model run does).
    workloads: str = ""


@dataclass
class Errors:
    """Relative errors of predictions against measurements, percent: MAPE and the signed worst error."""

    n: int
    period_mape: float
    period_worst: float
    latency_mape: Optional[float] = None
    latency_worst: Optional[float] = None
    energy_mape: Optional[float] = None
    energy_worst: Optional[float] = None


@dataclass
class PowerFit:
    """Fitted powers: ``delta_w[key]`` (active − idle, W) for each group of identical PUs (``groups``: group ->
    PU names) at one operating point (``points[key] = (group, frequency_hz or None)``; None: a PU without
    operating points; ``key`` is the group, or ``<group>@<MHz>``) and ``base_w`` (Σ idle + static, W)."""

    groups: Dict[str, List[str]]
    delta_w: Dict[str, ParamEstimate]
    base_w: ParamEstimate
    points: Dict[str, Tuple[str, Optional[float]]] = field(default_factory=dict)

    def energy_j(self, run: MeasuredRun, terms: PipelineTerms) -> float:
        """Energy per inference of ``run`` under ``terms`` with these powers, J."""
        period, _, _ = run.facts.figures(terms)
        compute = point_compute_s(run, terms)
        total = self.base_w.value * period
        for key, est in self.delta_w.items():
            group, f = self.points.get(key, (key, None))
            total += est.value * sum(compute.get((p, f), 0.0) for p in self.groups[group])
        return float(total)


def point_compute_s(run: MeasuredRun, terms: PipelineTerms) -> Dict[Tuple[str, Optional[float]], float]:
    """``{(PU name, frequency_hz or None): compute seconds per inference}`` of ``run`` under ``terms``: the
    compute of :meth:`MappingFacts.figures` split by the operating point each stage runs its PUs at (None for a
    PU without operating points, and for every PU of a mapping with replicated stages)."""
    _, _, compute = run.facts.figures(terms)
    problem = run.problem
    if problem.operating_points is None or not isinstance(run.facts, MappingFacts):
        return {(name, None): float(compute[i]) for i, name in enumerate(problem.pu_names)}
    factors = run.facts.factors(terms)
    out: Dict[Tuple[str, Optional[float]], float] = {}
    for s, st in enumerate(run.mapping.stages):
        for q in st.pus:
            key = (problem.pu_names[q], problem.frequency_hz(q, st.op_of(q)))
            out[key] = out.get(key, 0.0) + float(run.facts.compute_s[s, q] * factors[s])
    return out


@dataclass
class RunsFit:
    """What :func:`calibrate_runs` found.

    ``predictions`` holds, per run, ``(before, after, loo)`` triples of (period_s, latency_s, energy_j or None);
    ``overall`` and ``per_model[model]`` map ``before``/``after``/``loo`` to :class:`Errors`."""

    runs: List["Run"]
    terms: PipelineTerms
    params: List[ParamEstimate]
    power: Optional[PowerFit]
    predictions: List[Dict[str, Tuple[float, float, Optional[float]]]]
    overall: Dict[str, Errors]
    per_model: Dict[str, Dict[str, Errors]]
    warnings: List[str] = field(default_factory=list)


def _log_ratio(pred: float, meas: float) -> float:
    return math.log(max(pred, 1e-300) / meas)


class _Design:
    """The free parameters of a terms fit: names, bounds, scales, and the map vector -> PipelineTerms."""

    def __init__(self, runs: Sequence[Run], base: PipelineTerms, fit: Sequence[str]):
        bad = [f for f in fit if f not in TERM_NAMES]
        if bad:
            raise ValueError(f"unknown term(s) {bad}; choose from {TERM_NAMES}")
        self.base = base
        longest = max(r.period_s for r in runs)
        typical = float(np.median([r.period_s for r in runs]))
        self.names: List[str] = []
        self.lower: List[float] = []
        self.upper: List[float] = []
        self.scale: List[float] = []
        self.skipped: Dict[str, str] = {}

        def add(name, lo, hi, scale):
            self.names.append(name)
            self.lower.append(lo)
            self.upper.append(hi)
            self.scale.append(scale)

        if "slowdown" in fit:
            add("slowdown", *BOUNDS["slowdown"], 1.0)
        if "dispatch" in fit:
            add("dispatch_s", 0.0, longest, max(typical * 0.01, 1e-9))
        if "handoff" in fit:
            if not any(r.handoffs() for r in runs):
                self.skipped["handoff_s"] = "no run hands a tensor between the PUs of a multi-PU stage"
            else:
                add("handoff_s", 0.0, longest, max(typical * 0.01, 1e-9))
        if "contention" in fit:
            if base.memory_bandwidth_bytes_per_s is None:
                self.skipped["contention"] = "the profile gives no memory bandwidth"
            elif not any(r.has_co_runners() for r in runs):
                self.skipped["contention"] = "no run has stages that run at once"
            else:
                add("contention", *BOUNDS["contention"], 1.0)
        if "sharing" in fit:
            if not any(r.shared_pus() for r in runs):
                self.skipped["sharing"] = "no run has a PU serve two stages"
            else:
                add("sharing", *BOUNDS["sharing"], 0.1)
        if "overlap" in fit:
            shared = sorted({pu for r in runs for pu in r.shared_pus()})
            for pu in shared:
                add(f"overlap.{pu}", *BOUNDS["overlap"], 0.5)
            pus = sorted({pu for r in runs for pu in r.problem.pu_names})
            for pu in pus:
                if pu not in shared:
                    self.skipped[f"overlap.{pu}"] = "no run has this PU serve two stages"
        if len(self.names) > len(runs):  # more unknowns than runs: the fit would be exact and say nothing
            for name in self.names[len(runs):]:
                self.skipped[name] = (f"{len(runs)} run(s) support {len(runs)} parameter(s), fitted in the order "
                                      "slowdown, dispatch, handoff, contention, sharing, overlap; record more runs")
            del self.names[len(runs):], self.lower[len(runs):], self.upper[len(runs):], self.scale[len(runs):]

    def start(self) -> np.ndarray:
        b = self.base
        values = {"slowdown": b.slowdown, "dispatch_s": b.dispatch_s, "handoff_s": b.handoff_s,
                  "contention": b.contention, "sharing": b.sharing}
        x = [values.get(n, b.overlap.get(n.partition(".")[2], 0.0)) for n in self.names]
        return np.clip(np.array(x, dtype=float), self.lower, self.upper)

    def terms(self, x: Sequence[float]) -> PipelineTerms:
        changes: Dict[str, object] = {}
        overlap = dict(self.base.overlap)
        for name, value in zip(self.names, x):
            if name.startswith("overlap."):
                overlap[name.partition(".")[2]] = float(min(max(value, 0.0), 1.0))
            else:
                changes[name] = float(value)
        return self.base.replace(overlap=overlap, **changes)


def _residuals(runs: Sequence["Run"], terms: PipelineTerms) -> np.ndarray:
    return np.array([x for r in runs for x in r.residuals(terms)])


def _workload_rows(runs: Sequence["Run"], terms: PipelineTerms) -> np.ndarray:
    """Per residual of :func:`_residuals`: whether it is a workload run's."""
    return np.array([isinstance(r, MeasuredWorkload) for r in runs for _ in r.residuals(terms)], dtype=bool)


def fit_terms(runs: Sequence[Run], base: PipelineTerms, fit: Sequence[str] = TERM_NAMES,
              starts: Optional[Sequence[np.ndarray]] = None) -> Tuple[PipelineTerms, List[ParamEstimate]]:
    """Least-squares fit of the terms named in ``fit`` (see the module docstring) starting from ``base``.
    Workload runs (:class:`MeasuredWorkload`) among ``runs`` set each estimate's ``workloads``: ``"also"`` or
    ``"only"`` where the Jacobian of their residuals at the optimum is non-zero in that parameter, ``"only"``
    when the single-model runs' is zero in it (no single-model run depends on it).

    Returns
    -------
    (PipelineTerms, list of ParamEstimate)
        The fitted terms (``base`` for what is not fitted) and one estimate per parameter, fitted or not.

    Raises
    ------
    ValueError
        No run, an unknown term name, or ``starts`` given empty.
    """
    from scipy.optimize import least_squares

    if not runs:
        raise ValueError("no measured run to fit on")
    design = _Design(runs, base, fit)
    estimates: List[ParamEstimate] = []
    if design.names:
        lo, hi = np.array(design.lower), np.array(design.upper)

        def fun(x):
            return _residuals(runs, design.terms(x))

        x0s = list(starts) if starts is not None else [design.start(), _interior(design)]
        best = None
        for x0 in x0s:
            sol = least_squares(fun, np.clip(x0, lo, hi), bounds=(lo, hi), x_scale=np.array(design.scale),
                                method="trf", xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=400)
            if best is None or sol.cost < best.cost:
                best = sol
        if best is None:
            raise ValueError("no start point to fit from: starts is empty")
        m, n = best.fun.size, best.x.size
        s2 = 2.0 * best.cost / (m - n) if m > n else float("nan")
        jac = np.asarray(best.jac)
        cov = np.linalg.pinv(jac.T @ jac) * s2
        live = np.abs(jac) > 1e-12
        dead = ~np.any(live, axis=0)
        rows = _workload_rows(runs, design.terms(best.x))
        from_workloads = np.any(live[rows], axis=0)
        from_singles = np.any(live[~rows], axis=0)
        for i, name in enumerate(design.names):
            err = float(math.sqrt(cov[i, i])) if np.isfinite(cov[i, i]) and cov[i, i] >= 0 and not dead[i] else None
            told = "" if not from_workloads[i] else "also" if from_singles[i] else "only"
            estimates.append(ParamEstimate(name, float(best.x[i]), float(lo[i]), float(hi[i]), err, True,
                                           "" if not dead[i] else "no run is sensitive to it at the optimum", told))
        terms = design.terms(best.x)
    else:
        terms = base
    for name, why in design.skipped.items():
        value = base.overlap.get(name.partition(".")[2], 0.0) if name.startswith("overlap.") else \
            getattr(base, name)
        low, high = BOUNDS["overlap"] if name.startswith("overlap.") else BOUNDS[name]
        estimates.append(ParamEstimate(name, float(value), low, high, None, False, why))
    return terms, estimates


def _interior(design: _Design) -> np.ndarray:
    """A second start inside the box: overlap ½, dispatch 1 % of the median period, contention 0.1."""
    x = design.start()
    for i, name in enumerate(design.names):
        if name.startswith("overlap."):
            x[i] = 0.5
        elif name in ("dispatch_s", "handoff_s"):
            x[i] = design.scale[i]
        elif name == "contention":
            x[i] = 0.1
    return x


def power_groups(problem: MappingProblem, soc=None) -> Dict[str, List[str]]:
    """Groups of PUs whose powers are fitted as one: identical PUs of ``soc`` (kind, cores, peak FLOP/s,
    precision, powers) share their powers; each PU alone without a profile. Group name: its first PU."""
    groups: Dict[tuple, List[str]] = {}
    for i, pu in enumerate(problem.pu_names):
        spec = soc.pus.get(pu) if soc is not None else None
        key = (pu,) if spec is None else (spec.kind, spec.cores, spec.peak_flops, spec.precision,
                                          spec.active_power_w, spec.idle_power_w)
        groups.setdefault(key, []).append(pu)
    return {pus[0] if len(pus) == 1 else f"{pus[0]}..{pus[-1]}": pus for pus in groups.values()}


def fit_power(runs: Sequence[Run], terms: PipelineTerms, groups: Dict[str, List[str]]) -> Optional[PowerFit]:
    """Bounded linear fit of ``Δ_g`` (``Δ_{g,f}`` per operating point) and ``C`` on the runs with a measured
    energy (module docstring).

    Returns None when fewer runs have an energy than there are unknowns.
    """
    from scipy.optimize import lsq_linear

    from parapipe.soc.operating_points import format_mhz

    with_energy = [r for r in runs if isinstance(r, MeasuredRun) and r.energy_j]
    group_of = {p: g for g, pus in groups.items() for p in pus}
    computes = [point_compute_s(r, terms) for r in with_energy]
    points: Dict[str, Tuple[str, Optional[float]]] = {}
    for compute in computes:
        for (pu, f), seconds in sorted(compute.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0.0)):
            if seconds > 0 and pu in group_of:
                g = group_of[pu]
                points.setdefault(g if f is None else f"{g}@{format_mhz(f)}", (g, f))
    used = list(points)
    if len(with_energy) < len(used) + 1:
        return None
    rows = []
    for r, compute in zip(with_energy, computes):
        period, _, _ = r.facts.figures(terms)
        row = [sum(compute.get((p, points[key][1]), 0.0) for p in groups[points[key][0]]) for key in used] + [period]
        rows.append(np.array(row) / r.energy_j)  # relative error: divide each equation by its measurement
    a = np.array(rows)
    b = np.ones(len(rows))
    sol = lsq_linear(a, b, bounds=(0.0, np.inf))
    m, n = a.shape
    resid = a @ sol.x - b
    s2 = float(resid @ resid) / (m - n) if m > n else float("nan")
    cov = np.linalg.pinv(a.T @ a) * s2
    err = [float(math.sqrt(cov[i, i])) if np.isfinite(cov[i, i]) and cov[i, i] >= 0 else None for i in range(n)]
    delta = {key: ParamEstimate(f"power.delta_w.{key}", float(sol.x[i]), 0.0, math.inf, err[i], True)
             for i, key in enumerate(used)}
    base = ParamEstimate("power.base_w", float(sol.x[-1]), 0.0, math.inf, err[-1], True)
    return PowerFit({g: groups[g] for g in dict.fromkeys(points[key][0] for key in used)}, delta, base, points)


def _errors(runs: Sequence[Run], preds: Sequence[Tuple[float, float, Optional[float]]]) -> Errors:
    def stats(pairs):
        if not pairs:
            return None, None
        rel = [100.0 * (p / m - 1.0) for p, m in pairs]
        return float(np.mean(np.abs(rel))), float(max(rel, key=abs))

    pm, pw = stats([(p[0], r.period_s) for r, p in zip(runs, preds)])
    lm, lw = stats([(p[1], r.latency_s) for r, p in zip(runs, preds) if r.latency_s])
    em, ew = stats([(p[2], r.energy_j) for r, p in zip(runs, preds) if r.energy_j and p[2] is not None])
    return Errors(len(runs), pm, pw, lm, lw, em, ew)


def calibrate_runs(runs: Sequence[Run], base: PipelineTerms, fit: Sequence[str] = TERM_NAMES,
                   soc=None, loo: bool = True) -> RunsFit:
    """Fit the terms (and, where runs carry energies, the powers) and report the errors. At most one parameter
    per run is fitted (in the order of :data:`TERM_NAMES`; the rest keep ``base``'s values): with more unknowns
    than runs the fit is exact whatever the terms, so its error says nothing. ``warnings`` of the result say so,
    and that one run has no leave-one-out check.

    Parameters
    ----------
    runs : sequence of MeasuredRun or MeasuredWorkload
        A workload run is one run: left out whole in the leave-one-out check, its errors those of its period per
        workload frame, and ``per_model`` lists it under its own label (``workload a+b``).
    base : PipelineTerms
        The profile's terms: the "before" model and the starting point.
    fit : sequence of str
        Terms to fit (:data:`TERM_NAMES`).
    soc : parapipe.soc.SoC, optional
        Groups identical PUs for the power fit (:func:`power_groups`).
    loo : bool
        Also predict every run with a fit on the others.

    Raises
    ------
    ValueError
        No run.
    """
    runs = list(runs)
    terms, params = fit_terms(runs, base, fit)
    groups = power_groups(runs[0].problem, soc)
    power = fit_power(runs, terms, groups)
    preds: List[Dict[str, Tuple[float, float, Optional[float]]]] = []
    for i, r in enumerate(runs):
        row: Dict[str, Tuple[float, float, Optional[float]]] = {"before": r.prior(base)}
        row["after"] = _after(r, terms, power)
        if loo and len(runs) > 1:
            others = runs[:i] + runs[i + 1:]
            design = _Design(others, base, fit)
            start = np.clip([_value(terms, n) for n in design.names], design.lower, design.upper)
            t_i, _ = fit_terms(others, base, fit, starts=[start])
            row["loo"] = _after(r, t_i, fit_power(others, t_i, groups))
        preds.append(row)
    kinds = ["before", "after"] + (["loo"] if loo and len(runs) > 1 else [])
    overall = {k: _errors(runs, [p[k] for p in preds]) for k in kinds}
    per_model: Dict[str, Dict[str, Errors]] = {}
    for model in dict.fromkeys(r.model for r in runs):
        idx = [i for i, r in enumerate(runs) if r.model == model]
        per_model[model] = {k: _errors([runs[i] for i in idx], [preds[i][k] for i in idx]) for k in kinds}
    warnings = []
    capped = [p.name for p in params if not p.fitted and "run(s) support" in p.note]
    fitted = sum(p.fitted for p in params)
    if capped:
        warnings.append(f"{len(runs)} run(s) for {fitted + len(capped)} parameters: fitted only {fitted} "
                        f"({', '.join(p.name for p in params if p.fitted)}), kept the profile's "
                        f"{', '.join(capped)}; record at least {fitted + len(capped)} runs (other points, other "
                        "models) to fit them all")
    if len(runs) == 1:
        warnings.append("one run: its 'after' error is in sample (the fit saw it) and no leave-one-out check is "
                        "possible; record 2 runs or more to see how well the fit predicts")
    return RunsFit(runs, terms, params, power, preds, overall, per_model, warnings)


def _after(r: Run, terms: PipelineTerms, power: Optional[PowerFit]) -> Tuple[float, float, Optional[float]]:
    """``(period_s, latency_s, energy_j or None)`` of a run under fitted terms and powers."""
    if isinstance(r, MeasuredWorkload):
        period, latency = r.figures(terms)
        return period, latency, None
    period, latency, _ = r.facts.figures(terms)
    return period, latency, power.energy_j(r, terms) if power else None


def _value(terms: PipelineTerms, name: str) -> float:
    if name.startswith("overlap."):
        return terms.overlap.get(name.partition(".")[2], 0.0)
    return float(getattr(terms, name))
