"""Pipeline-level terms of the cost model, learnt from measured runs (or stated as priors in a profile): overlap of
the stages a PU shares, a dispatch cost per stage hop, a runtime invocation cost per PU and per hand-off between PUs, shared-DRAM contention between concurrent stages, and
a whole-run slowdown.

:func:`parapipe.cost.evaluate.evaluate` without terms gives the *plain* model: stage times ``T_s`` (input hand-off +
makespan), busy time of a PU = the sum of the ``T_s`` of the stages it serves, period = the largest busy time,
latency = ``Σ T_s``. :func:`apply_terms` turns that evaluation into the *full* model with the parameters of a
:class:`PipelineTerms` (defaults: the plain model, number for number):

0. **Hand-off** ``h`` (``handoff_s``, s >= 0): every tensor handed between the PUs of a multi-PU stage costs ``h``
   more than the profile's ``alpha + nbytes / beta`` (the receiving task waits for its thread or device to wake,
   on the stage's critical path, which an idle-machine measurement of ``alpha`` misses); the stages' schedules
   are evaluated again with ``alpha + h`` (the list schedule may change). The hop into a stage is the dispatch
   ``d`` of step 1. ``T_s``, ``input_s`` and ``makespan_s`` below are those of this step.
1. **Whole-run slowdown** ``κ`` (``slowdown``, > 0), **sharing** ``ψ`` (``sharing``, >= 0), **dispatch** ``d``
   (``dispatch_s``, s >= 0) and **invocation** ``i_p`` (``invoke_s[pu]``, s >= 0): every stage pays
   ``d_s = d + max_{p ∈ PUs(s)} i_p`` once per inference for the hop into it (``d``: the queue hand-off and the
   launch of its work, the first stage's included; ``i_p``: the fixed cost of one call into the runtime that
   drives PU ``p``, e.g. an NPU driver's submit and wait or a GPU command-buffer submit; a multi-PU stage
   invokes its PUs side by side and pays the largest, a first-order estimate that charges one call per PU) and
   its work is scaled by ``κ``, and by ``1 + ψ`` when
   one of its PUs serves another stage too (``shared_s``): the PU's caches then hold the other stage's weights
   and activations when this stage starts, so it refills them. Measured on a 2-core x86 machine with stage
   sub-models timed alone (benchmarks/fidelity.py): stages on a core shared with another stage ran 5-17 % longer
   in the pipeline than alone, stages with a core to themselves 0-6 %. ``T̃_s = κ·(1 + ψ·shared_s)·T_s + d_s``.
2. **Memory contention** ``γ`` (``contention``, >= 0), after the HaX-CoNN model of concurrent DNN layers on a
   shared-memory SoC (Dagli & Belviranli, "Shared Memory-contention-aware Concurrent DNN Execution for Diversely
   Heterogeneous System-on-Chips", PPoPP 2024), whose slowdown is a function of the bandwidth the co-running
   work demands (the PCCS model: Xu et al., "PCCS: Processor-Centric Contention-aware Slowdown Model for
   Heterogeneous System-on-Chips", MICRO 2019; this is its first, linear segment). In a full pipeline every
   stage runs at once with every stage that shares none of its PUs; stage ``r`` moves ``M_r`` bytes of DRAM
   traffic per inference (:func:`stage_traffic_nbytes`), i.e. demands ``M_r / P₀`` bytes/s on average over a
   period ``P₀`` (the period of step 3 computed with the ``T̃``). Stage ``s`` is slowed by the share of the
   SoC's bandwidth ``B`` (``memory_bandwidth_bytes_per_s``, the profile's) its co-runners demand::

       ρ_s = Σ_{r ≠ s, PUs(r) ∩ PUs(s) = ∅} M_r / (P₀ · B),     f_s = κ · (1 + ψ·shared_s) · (1 + γ · ρ_s)
       T'_s = (input_s · f_s + d_s) + makespan_s · f_s

   (one step: the duty cycles come from the uncontended period, a first-order estimate). Block start/finish
   times, the time PUs compute and the dynamic energy scale with ``f_s``; the dispatch draws idle power.
3. **Overlap** ``φ_p`` (``overlap[pu]``, in [0, 1]) of the stages a PU serves: host-side dispatch of one stage
   runs while the PU computes another (measured on a Mali GPU serving GPU → big → GPU: the period is far below
   the sum of its two stage times), so the PU's busy time lies between its largest stage and the sum::

       busy_p = max_{s ∋ p} T'_s + (1 − φ_p) · (Σ_{s ∋ p} T'_s − max_{s ∋ p} T'_s)

   With ``φ_p = 0`` it is the plain sum, added in stage order as the plain model adds it.
4. Period ``P = max_p busy_p``; latency (one frame through an idle pipeline: no co-runner, no contention)
   ``L = Σ_s (κ·(1 + ψ·shared_s)·T_s + d_s)``; energy ``E = Σ_s f_s·E_dyn,s + (Σ_p P_idle + P_static)·P`` (the plain model's energy
   with the lengthened compute and period).

With the defaults (``h = 0``, ``κ = 1``, ``ψ = 0``, ``d = 0``, ``i = 0``, ``γ = 0``, ``φ = 0``) every step multiplies by 1.0, adds 0.0 or sums in
the same order as the plain model: the numbers are bit-identical (tested on the zoo models).

A mapping with replicated stages takes steps 0 and 1 without sharing (:func:`parapipe.cost.evaluate.evaluate`:
every stage's and replica's time ``κ·T_r + d_r``, ``T_r`` its input hand-off plus its makespan with ``alpha + h``
between the PUs of a multi-PU replica or stage, ``d_r`` as ``d_s`` over the replica's PUs); ``calibrate --runs``
fits on its runs too (:class:`ReplicatedFacts`).

The search ranks its candidates with ``κ``, ``h``, ``d`` and ``i`` in its labels (:func:`search_problems`: its stage
times are ``κ·T_s + d_s``, exactly the full model's when ``ψ = γ = φ = 0``), and bounds the same model; every point
it reports is re-evaluated with the full model (:func:`parapipe.cost.evaluate.evaluate` with the terms) so that the
front it shows is the front of the model the user calibrated.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import math
from dataclasses import dataclass, field, replace
from typing import Dict, List, Mapping as TMapping, Optional, Sequence, Tuple

import numpy as np

from .mapping import Mapping
from .problem import MappingProblem
from .schedule import (Evaluation, StageResult, evaluate_plain, evaluate_stage, slowed, stage_input_transfers,
                       switching_s)

__all__ = ["PipelineTerms", "DEFAULT_TERMS", "scaled_problem", "handoff_problem", "search_problems", "MappingFacts", "ReplicatedFacts", "mapping_facts", "apply_terms",
           "replicated_with_terms", "stage_traffic_nbytes", "terms_from_soc"]


@dataclass(frozen=True)
class PipelineTerms:
    """Parameters of the pipeline-level terms (model and sources in the module docstring).

    Attributes
    ----------
    overlap : dict of str to float
        PU name -> ``φ_p`` in [0, 1]: 0 = the stages a PU serves add up (plain model), 1 = they overlap fully
        (its busy time is its largest stage). PUs not listed take 0.
    dispatch_s : float
        ``d``, s per stage per inference (>= 0).
    contention : float
        ``γ`` (>= 0, dimensionless): relative slowdown of a stage per unit share of the SoC's memory bandwidth
        its co-running stages demand.
    slowdown : float
        ``κ`` (> 0): factor on every stage's work.
    handoff_s : float
        ``h``, s per tensor handed between the PUs of a multi-PU stage, on top of the profile's transfer cost
        (>= 0).
    memory_bandwidth_bytes_per_s : float or None
        ``B``, the SoC's DRAM bandwidth (:attr:`parapipe.soc.SoC.memory_bandwidth_bytes_per_s`); required when
        ``contention > 0``.
    sharing : float
        ``ψ`` (>= 0, dimensionless): relative slowdown of a stage whose PU serves another stage too (step 1).
    invoke_s : dict of str to float
        PU name -> ``i_p``, s per stage (or replica) that runs on the PU, per inference (>= 0; step 1). PUs not
        listed take 0.

    Raises
    ------
    ValueError
        A value out of its range (a caller bug: profiles are validated when loaded).
    """

    overlap: TMapping[str, float] = field(default_factory=dict)
    dispatch_s: float = 0.0
    contention: float = 0.0
    slowdown: float = 1.0
    memory_bandwidth_bytes_per_s: Optional[float] = None
    handoff_s: float = 0.0
    sharing: float = 0.0
    invoke_s: TMapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for pu, phi in self.overlap.items():
            if not 0.0 <= phi <= 1.0:
                raise ValueError(f"overlap of {pu!r} must be in [0, 1], got {phi!r}")
        for pu, cost in self.invoke_s.items():
            if not (cost >= 0 and math.isfinite(cost)):
                raise ValueError(f"invoke_s of {pu!r} must be a finite number >= 0, got {cost!r}")
        for name in ("dispatch_s", "handoff_s"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("contention", "sharing"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not (self.slowdown > 0 and math.isfinite(self.slowdown)):
            raise ValueError(f"slowdown must be a finite number > 0, got {self.slowdown!r}")
        bw = self.memory_bandwidth_bytes_per_s
        if bw is not None and not bw > 0:
            raise ValueError(f"memory_bandwidth_bytes_per_s must be > 0, got {bw!r}")
        if self.contention > 0 and bw is None:
            raise ValueError("contention > 0 needs memory_bandwidth_bytes_per_s (the SoC's DRAM bandwidth)")

    def is_default(self) -> bool:
        """True when the terms reproduce the plain model."""
        return (self.dispatch_s == 0.0 and self.handoff_s == 0.0 and self.contention == 0.0 and self.slowdown == 1.0
                and self.sharing == 0.0 and all(v == 0.0 for v in self.overlap.values())
                and all(v == 0.0 for v in self.invoke_s.values()))

    def models_corunning(self) -> bool:
        """True when the terms slow a stage for running beside others (``slowdown`` ≠ 1 or ``contention`` > 0).
        Stage-level times are then measured alone (the terms were fitted so, benchmarks/fidelity.py); without
        such a term they are measured with the other cores loaded, so that the times carry it
        (:func:`parapipe.measure.submodels.measure_submodels`)."""
        return self.slowdown != 1.0 or self.contention > 0.0

    def to_json(self) -> Dict[str, object]:
        """The fitted values, as pareto.json's ``search.cost_terms`` and ``search.refine.terms`` carry them."""
        return {"overlap": dict(self.overlap), "dispatch_s": self.dispatch_s, "handoff_s": self.handoff_s,
                "contention": self.contention, "slowdown": self.slowdown, "sharing": self.sharing,
                **({"invoke_s": dict(self.invoke_s)} if any(self.invoke_s.values()) else {})}

    def stage_dispatch_s(self, pu_names: Sequence[str], pus: Sequence[int]) -> float:
        """``d_s = d + max_{p ∈ pus} i_p`` (step 1) of a stage or replica on PU indices ``pus`` of a problem whose
        PU names are ``pu_names``."""
        return self.dispatch_s + max((float(self.invoke_s.get(pu_names[p], 0.0)) for p in pus), default=0.0)

    def replace(self, **changes) -> "PipelineTerms":
        """A copy with ``changes`` (field name -> value)."""
        return replace(self, **changes)


#: The plain model.
DEFAULT_TERMS = PipelineTerms()


def terms_from_soc(soc) -> PipelineTerms:
    """The terms of a SoC profile (its optional ``pipeline:`` section; defaults without one), with ``B`` = the
    profile's ``memory_bandwidth_bytes_per_s``."""
    spec = getattr(soc, "pipeline", None)
    bw = float(soc.memory_bandwidth_bytes_per_s)
    if spec is None:
        return PipelineTerms(memory_bandwidth_bytes_per_s=bw)
    return PipelineTerms(overlap=dict(spec.overlap), dispatch_s=spec.dispatch_s, contention=spec.contention,
                         slowdown=spec.slowdown, memory_bandwidth_bytes_per_s=bw, handoff_s=spec.handoff_s,
                         sharing=spec.sharing, invoke_s=dict(spec.invoke_s))


def scaled_problem(problem: MappingProblem, kappa: float) -> MappingProblem:
    """``problem`` with every block, sub-model and transfer time × ``kappa`` (``alpha × κ``, ``beta / κ``): its
    stage times ``T_s`` are ``κ·T_s`` of ``problem`` (step 1); ``problem`` itself for ``κ = 1``."""
    if kappa == 1.0:
        return problem
    out = slowed(problem, kappa)
    return dataclasses.replace(out, alpha_s=out.alpha_s * kappa, beta_bytes_per_s=out.beta_bytes_per_s / kappa)


def handoff_problem(problem: MappingProblem, handoff_s: float) -> MappingProblem:
    """``problem`` with ``alpha + handoff_s`` between different PUs (step 0: the transfer costs inside a multi-PU
    stage); ``problem`` itself for ``handoff_s = 0``."""
    if handoff_s == 0.0:
        return problem
    k = problem.n_pus
    return dataclasses.replace(problem, alpha_s=problem.alpha_s + handoff_s * (1.0 - np.eye(k)))


def search_problems(problem: MappingProblem, terms: Optional[PipelineTerms]
                    ) -> Tuple[MappingProblem, MappingProblem]:
    """``(hand-off problem, schedule problem)`` on which a search computes full-model stage times: the input
    hand-offs and block times of the first (``κ``-scaled, :func:`scaled_problem`), the schedule of a multi-PU
    stage on the second (also ``alpha + h`` between PUs, :func:`handoff_problem`); ``d_s`` is added per stage
    (:meth:`PipelineTerms.stage_dispatch_s`). Both are ``problem`` without terms."""
    if terms is None:
        return problem, problem
    kappa = float(terms.slowdown)
    return (scaled_problem(problem, kappa),
            scaled_problem(handoff_problem(problem, float(terms.handoff_s)), kappa))


def stage_traffic_nbytes(problem: MappingProblem, mapping) -> List[float]:
    """DRAM bytes each stage of ``mapping`` moves per inference: ``Σ`` over its blocks of the bytes the block
    reads and writes on its PU (:attr:`MappingProblem.block_nbytes`: operator inputs, outputs and weights at the
    PU's precision), or, for problems without them (block tables), the block's input edges plus its largest
    output edge."""
    nbytes = getattr(problem, "block_nbytes", None)
    if nbytes is None:
        inb = np.zeros(problem.n_blocks)
        outb = np.zeros(problem.n_blocks)
        for (u, v), nb in problem.edge_nbytes.items():
            inb[v] += nb
            outb[u] = max(outb[u], nb)
        per_block = inb + outb
        return [float(sum(per_block[v] for v in range(st.start, st.stop))) for st in mapping.stages]
    return [float(sum(nbytes[v, st.pu_of(v)] for v in range(st.start, st.stop))) for st in mapping.stages]


def _busy(problem: MappingProblem, mapping, times: Sequence[float], overlap: TMapping[str, float]) -> np.ndarray:
    """Busy time per PU (step 3 of the module docstring)."""
    busy = np.zeros(problem.n_pus)
    served: Dict[int, List[float]] = {}
    for st, t in zip(mapping.stages, times):
        for p in st.pus:
            busy[p] += t
            served.setdefault(p, []).append(t)
    for p, ts in served.items():
        phi = float(overlap.get(problem.pu_names[p], 0.0))
        if phi != 0.0 and len(ts) > 1:
            top = max(ts)
            busy[p] = top + (1.0 - phi) * (busy[p] - top)
    return busy


def _stage_time(input_s: float, makespan_s: float, f: float, d: float) -> float:
    """``T'_s = (input_s · f + d) + makespan_s · f`` (step 2)."""
    return (input_s * f + d) + makespan_s * f


def _input_active(problem: MappingProblem, stage, producer: Dict[int, int], handoff_s: float) -> np.ndarray:
    """Per PU, the ``handoff_s`` the shifted evaluation added to its input hand-offs (taken back out)."""
    extra = np.zeros(problem.n_pus)
    for (u, q), nb in stage_input_transfers(problem, stage).items():
        if producer[u] != q and nb > 0:
            extra[q] += handoff_s
    return extra


class MappingFacts:
    """What the terms need of one evaluated mapping, kept so that many parameter values are tried quickly
    (calibration): stage input and makespan times, dynamic energy, PU groups, DRAM traffic, co-runners.

    Parameters
    ----------
    problem : MappingProblem
    mapping : parapipe.cost.mapping.Mapping
    evaluation : parapipe.cost.schedule.Evaluation
        Its plain evaluation.
    """

    def __init__(self, problem: MappingProblem, mapping, evaluation):
        self.problem, self.mapping, self.evaluation = problem, mapping, evaluation
        self._handoff = (0.0, evaluation.stage_results)  # stage results at the last hand-off cost asked for
        served: Dict[int, int] = {}
        for st in mapping.stages:
            for p in st.pus:
                served[p] = served.get(p, 0) + 1
        #: per stage: one of its PUs serves another stage too (step 1)
        self.shared = [any(served[p] > 1 for p in st.pus) for st in mapping.stages]
        #: per PU: its operating-point switches per inference, s (added to its busy time, as apply_terms does)
        self.switching_s = switching_s(problem, mapping)

    # The figures below are built on first use: apply_terms needs them only with a contention term, calibration
    # (which tries many terms on the same facts) always.

    @functools.cached_property
    def traffic_nbytes(self) -> List[float]:
        """Per stage: its DRAM bytes per inference (:func:`stage_traffic_nbytes`)."""
        return stage_traffic_nbytes(self.problem, self.mapping)

    @functools.cached_property
    def co_runners(self) -> List[List[int]]:
        """Per stage: the stages on PUs disjoint from its own (they run at the same time in the pipeline)."""
        stages = self.mapping.stages
        return [[r for r, other in enumerate(stages) if r != s and not set(other.pus) & set(st.pus)]
                for s, st in enumerate(stages)]

    @functools.cached_property
    def compute_s(self) -> np.ndarray:
        """(stages, PUs): seconds each stage computes on each PU (block times only)."""
        out = np.zeros((len(self.mapping.stages), self.problem.n_pus))
        for s, st in enumerate(self.mapping.stages):
            at_ops = self.problem.at_operating_points(st.op_choice())
            for v in range(st.start, st.stop):
                out[s, st.pu_of(v)] += at_ops.time_s[v, st.pu_of(v)]
        return out

    def stage_results(self, handoff_s: float) -> list:
        """The plain stage results with ``alpha + handoff_s`` between the PUs of each multi-PU stage (step 0);
        input hand-offs keep their plain cost."""
        if handoff_s != self._handoff[0]:
            shifted = copy.copy(self.problem)
            k = shifted.n_pus
            shifted.alpha_s = self.problem.alpha_s + handoff_s * (1.0 - np.eye(k))
            producer: Dict[int, int] = {}
            results = []
            for st, plain in zip(self.mapping.stages, self.evaluation.stage_results):
                if len(st.pus) == 1:
                    results.append(plain)
                else:  # the makespan is scheduled from the end of the input hand-off, which keeps its cost
                    res = evaluate_stage(shifted, st, producer)
                    results.append(StageResult(plain.input_s + res.makespan_s, plain.input_s, res.makespan_s,
                                               res.start_s, res.finish_s, res.active_s - _input_active(shifted, st,
                                               producer, handoff_s), res.dyn_energy_j))
                producer.update({v: st.pu_of(v) for v in range(st.start, st.stop)})
            self._handoff = (handoff_s, results)
        return self._handoff[1]

    def dispatch(self, terms: PipelineTerms) -> List[float]:
        """``d_s`` of every stage (step 1)."""
        return [terms.stage_dispatch_s(self.problem.pu_names, st.pus) for st in self.mapping.stages]

    def factors(self, terms: PipelineTerms) -> List[float]:
        """``f_s`` of every stage (step 2)."""
        gamma = float(terms.contention)
        res = self.stage_results(float(terms.handoff_s))
        base = self.base_factors(terms)
        factors = list(base)
        bw = terms.memory_bandwidth_bytes_per_s  # set whenever gamma > 0 (PipelineTerms checks)
        if gamma > 0.0 and bw is not None and len(factors) > 1:
            first = [_stage_time(r.input_s, r.makespan_s, f, d) for r, f, d in zip(res, base, self.dispatch(terms))]
            p0 = float(_busy(self.problem, self.mapping, first, terms.overlap).max())
            for s, co in enumerate(self.co_runners):
                rho = sum(self.traffic_nbytes[r] for r in co) / (p0 * bw) if p0 > 0 else 0.0
                factors[s] = base[s] * (1.0 + gamma * rho)
        return factors

    def base_factors(self, terms: PipelineTerms) -> List[float]:
        """``κ·(1 + ψ·shared_s)`` of every stage (step 1): the factor without co-runners, as in the latency."""
        kappa, psi = float(terms.slowdown), float(terms.sharing)
        return [kappa * (1.0 + psi) if shared and psi != 0.0 else kappa for shared in self.shared]

    def figures(self, terms: PipelineTerms) -> Tuple[float, float, np.ndarray]:
        """``(period_s, latency_s, compute_s per PU)`` under ``terms``, without building stage results."""
        factors = self.factors(terms)
        res = self.stage_results(float(terms.handoff_s))
        dispatch = self.dispatch(terms)
        times = [_stage_time(r.input_s, r.makespan_s, f, d) for r, f, d in zip(res, factors, dispatch)]
        period = float((_busy(self.problem, self.mapping, times, terms.overlap) + self.switching_s).max())
        latency = 0.0
        for r, f, d in zip(res, self.base_factors(terms), dispatch):
            latency += _stage_time(r.input_s, r.makespan_s, f, d)
        compute = (self.compute_s * np.asarray(factors)[:, None]).sum(axis=0)
        return period, latency, compute


class ReplicatedFacts:
    """:class:`MappingFacts`' interface for a mapping with replicated stages, which takes ``κ`` and ``d`` only
    (:func:`parapipe.cost.evaluate.evaluate`): its figures are evaluated afresh for each ``terms`` (no
    co-runner traffic: contention is not modelled for it), so that calibration can fit on replicated runs."""

    def __init__(self, problem: MappingProblem, mapping, evaluation):
        self.problem, self.mapping, self.evaluation = problem, mapping, evaluation
        self.traffic_nbytes = [0.0] * len(mapping.stages)
        self.co_runners: List[List[int]] = [[] for _ in mapping.stages]

    def figures(self, terms: PipelineTerms) -> Tuple[float, float, np.ndarray]:
        """``(period_s, latency_s, active_s per PU)`` under ``terms``."""
        ev = replicated_with_terms(self.problem, self.mapping, terms)
        return ev.period_s, ev.latency_s, np.asarray(ev.active_s, dtype=float)


def mapping_facts(problem: MappingProblem, mapping, evaluation):
    """:class:`ReplicatedFacts` for a mapping with replicated stages, :class:`MappingFacts` otherwise."""
    return (ReplicatedFacts if mapping.replicated else MappingFacts)(problem, mapping, evaluation)


def apply_terms(problem: MappingProblem, mapping, evaluation, terms: PipelineTerms, facts: Optional[MappingFacts] = None):
    """The full-model :class:`~parapipe.cost.schedule.Evaluation` of ``mapping`` from its plain evaluation.

    Parameters
    ----------
    problem : MappingProblem
    mapping : parapipe.cost.mapping.Mapping
    evaluation : parapipe.cost.schedule.Evaluation
        ``evaluate(problem, mapping)`` (the plain model).
    terms : PipelineTerms
    facts : MappingFacts, optional
        Of this mapping (built when not given).

    Returns
    -------
    Evaluation
        Period, energy, stage results (loaded stage times, block start/finish, dynamic energy), busy and active
        time per PU under the full model; the latency is one frame through an idle pipeline (no co-runner, so
        no contention: ``Σ_s κ·T_s + d_s``). Default terms give numbers equal to ``evaluation``'s, bit for bit.
    """

    facts = facts or MappingFacts(problem, mapping, evaluation)
    factors = facts.factors(terms)
    new: List[StageResult] = []
    active = np.zeros(problem.n_pus)
    dyn = 0.0
    latency = 0.0
    for res, f, f0, d in zip(facts.stage_results(float(terms.handoff_s)), factors, facts.base_factors(terms),
                             facts.dispatch(terms)):
        input_s = res.input_s * f + d
        makespan = res.makespan_s * f
        sr = StageResult(time_s=input_s + makespan, input_s=input_s, makespan_s=makespan,
                         start_s={v: t * f for v, t in res.start_s.items()},
                         finish_s={v: t * f for v, t in res.finish_s.items()},
                         active_s=res.active_s * f, dyn_energy_j=res.dyn_energy_j * f)
        new.append(sr)
        active += sr.active_s
        dyn += sr.dyn_energy_j
        latency += _stage_time(res.input_s, res.makespan_s, f0, d)
    busy = _busy(problem, mapping, [r.time_s for r in new], terms.overlap) + switching_s(problem, mapping)
    period = float(busy.max())
    energy = dyn + (float(problem.idle_power_w.sum()) + problem.static_power_w) * period
    return Evaluation(period_s=period, latency_s=latency, energy_j=energy, stage_results=new, busy_s=busy,
                      active_s=active, weight_nbytes=evaluation.weight_nbytes,
                      memory_exceeded=evaluation.memory_exceeded)


def replicated_with_terms(problem: MappingProblem, mapping: Mapping, terms: PipelineTerms) -> Evaluation:
    """The full-model evaluation of a mapping with replicated stages: the plain model with every block, range,
    task and transfer time × ``κ``, ``alpha + h`` between the PUs of a multi-PU stage or replica (step 0), and the
    dispatch ``d_s`` (``d`` + the largest ``i_p`` of its PUs) added to every stage's and replica's time (the
    other terms do not arise or are not modelled for it). The mapping obeys :mod:`parapipe.cost.rules` (not
    checked here)."""
    names = problem.pu_names
    hand, sched = search_problems(problem, terms)
    return evaluate_plain(hand, mapping, float(terms.dispatch_s),
                          invoke_s=[float(terms.invoke_s.get(n, 0.0)) for n in names], stage_problem=sched)
