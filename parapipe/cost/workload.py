"""The cost model of a workload: several models mapped onto one SoC and run at once.

A **workload** is a list of models, each with a rate ``r_m`` (frames of model ``m`` per workload frame, > 0); a
**workload mapping** is one index-form :class:`parapipe.cost.mapping.Mapping` per model, each over its own
:class:`~parapipe.cost.problem.MappingProblem` (its blocks) on the same PUs (same ``pu_names``, same order). The
model, stated once (every workload search, baseline and report uses it through :func:`evaluate_workload`):

* **Stage times** are each model's own (:mod:`parapipe.cost.evaluate`: input hand-off + makespan, at the stage's
  operating points), with the pipeline terms of :mod:`parapipe.cost.pipeline_terms` applied over the stages of
  *all* models: the dispatch ``d_s`` per stage, the slowdown ``κ``, the sharing ``ψ`` when a PU serves another
  stage of any model, and the memory contention ``γ`` from every stage of any model that shares none of the
  stage's PUs (step 2 there), its traffic weighted by its model's rate::

      ρ_{m,s} = Σ_{(n,q) ≠ (m,s), PUs(n,q) ∩ PUs(m,s) = ∅} r_n · M_{n,q} / (P₀ · B),
      f_{m,s} = κ · (1 + ψ·shared_{m,s}) · (1 + γ · ρ_{m,s})

  where ``P₀`` is the workload period with the factors without contention (one step, as for one model).
* **Busy time** of a PU per workload frame: ``Σ_m r_m · Σ_{s of m on the PU} T'_{m,s}`` (a PU serving stages of
  several models is busy for the sum; with an overlap ``φ_p``: ``max + (1 − φ_p)·(sum − max)`` over those stage
  times, as for one model), plus its operating-point switches (below).
* **Period** ``P = max_pu busy``; **throughput** ``1 / P`` workload frames per second (model ``m`` runs ``r_m / P``
  frames per second).
* **Latency of model m**: one frame of ``m`` through its pipeline, ``Σ_s (input_s·g + d_s) + makespan_s·g`` with
  ``g = κ·(1 + ψ·shared)·(1 + γ·ρ^×_{m,s})``: idle of its own frames, as the single-model model has it, but
  slowed by the contention of the *other* models' stages that run at once (``ρ^×`` counts only stages of other
  models). One model alone gets exactly the single-model latency. The front's **latency axis** is the largest
  model latency (``max``) or the rate-weighted mean (``weighted-mean``).
* **Energy per workload frame**: ``Σ_m r_m · Σ_s f_{m,s}·E_dyn,{m,s} + (Σ_pu P_idle + P_static)·P``: each model's
  active (dynamic) energy per inference times its rate, and the board's idle and static power over one period,
  counted **once** for the board (the single-model energy ``E_dyn + (Σ P_idle + P_static)·P`` per model would
  count the whole board once per model).
* **Operating points**: a PU may run stages of different models at different points; it pays its
  ``transition_s`` per switch. Per workload frame it runs each model's frames back to back, model after model in
  the workload's order: each model's own switches (:func:`parapipe.cost.schedule.switching_s`) × its rate, plus
  the switches the hand-over between models adds (the switches of the cycle of the models' point sequences
  joined, less the models' own, when positive).
* **Replicated stages**: a model whose mapping has them is evaluated by the single-model model
  (:func:`parapipe.cost.evaluate.evaluate` with the terms: ``κ`` and the dispatch) and enters the workload by its
  busy times, latency and dynamic energy; no contention or sharing across models is modelled for its stages.

With one model at rate 1 the figures equal :func:`parapipe.cost.evaluate.evaluate`'s.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from .evaluate import evaluate
from .mapping import Mapping
from .pipeline_terms import DEFAULT_TERMS, MappingFacts, PipelineTerms
from .problem import MappingProblem
from .schedule import Evaluation, StageResult, evaluate_plain, switching_s
from .rules import check_stages

__all__ = ["LATENCY_AXES", "WorkloadEvaluation", "evaluate_workload", "model_dyn_energy_j", "cross_switching_s",
           "workload_latency"]

#: The front's latency axis: the largest model latency, or the rate-weighted mean.
LATENCY_AXES = ("max", "weighted-mean")


@dataclass
class WorkloadEvaluation:
    """Figures of one workload mapping (SI units; model in the module docstring).

    ``period_s`` per workload frame; ``latency_s`` the latency axis; ``latency_s_per_model`` each model's latency;
    ``energy_j`` per workload frame; ``dyn_energy_j_per_model`` each model's active energy per inference of that
    model; ``busy_s`` each PU's busy time per workload frame; ``busy_s_per_model`` each PU's busy time per
    inference of each model; ``evaluations`` each model's stage results under the workload's factors (stage
    times, block start/finish), as a single-model :class:`~parapipe.cost.schedule.Evaluation`."""

    period_s: float
    latency_s: float
    energy_j: float
    latency_s_per_model: List[float]
    dyn_energy_j_per_model: List[float]
    busy_s: np.ndarray
    busy_s_per_model: List[np.ndarray]
    evaluations: List[Evaluation]

    @property
    def throughput_per_s(self) -> float:
        """Workload frames per second."""
        return 1.0 / self.period_s if self.period_s > 0 else float("inf")

    @property
    def fits_memory(self) -> bool:
        """True when no PU holds more weights than its memory limit, counting every model's weights."""
        return all(ev.fits_memory for ev in self.evaluations)

    def objectives(self):
        """``(period_s, latency_s, energy_j)``."""
        return self.period_s, self.latency_s, self.energy_j


def workload_latency(axis: str, latencies_s: Sequence[float], rates: Sequence[float]) -> float:
    """The latency axis (s) of per-model latencies: ``max`` or the ``rates``-weighted mean."""
    if axis == "max":
        return float(max(latencies_s))
    return float(sum(r * s for r, s in zip(rates, latencies_s)) / sum(rates))


def model_dyn_energy_j(problem: MappingProblem, ev: Evaluation) -> float:
    """Active (dynamic) energy per inference of a single-model evaluation, J: its energy less the board's idle
    and static power over its period (:mod:`parapipe.cost.evaluate`: ``E = E_dyn + (Σ P_idle + P_static)·P``);
    infinite for a mapping that cannot run (a block on a PU that lacks its operators: infinite period)."""
    if not math.isfinite(ev.period_s):
        return math.inf
    return float(ev.energy_j - (float(problem.idle_power_w.sum()) + problem.static_power_w) * ev.period_s)


def _uses(problem: MappingProblem, mapping: Mapping, p: int) -> List[int]:
    ops: List[int] = []
    for st in mapping.stages:
        for view in st.replica_stages():
            if p in view.pus:
                op = view.op_of(p)
                ops.append(problem.max_op(p) if op is None else op)
    return ops


def _cycle_switches(ops: List[int]) -> int:
    return sum(1 for a, b in zip(ops, ops[1:] + ops[:1]) if a != b) if len(ops) > 1 else 0


def cross_switching_s(problems: Sequence[MappingProblem], mappings: Sequence[Mapping],
                      rates: Sequence[float]) -> np.ndarray:
    """Per PU, its operating-point switches per workload frame, s (module docstring), shape (k,)."""
    k = problems[0].n_pus
    out = np.zeros(k)
    for m, (pr, mp) in enumerate(zip(problems, mappings)):
        out += rates[m] * switching_s(pr, mp)
    if all(pr.operating_points is None for pr in problems) or len(problems) < 2:
        return out
    for p in range(k):
        tables = [pr.operating_points[p] for pr in problems if pr.operating_points is not None]
        if not tables or tables[0] is None:
            continue
        seqs = [_uses(pr, mp, p) for pr, mp in zip(problems, mappings)]
        joined = [o for s in seqs for o in s]
        extra = _cycle_switches(joined) - sum(_cycle_switches(s) for s in seqs)
        out[p] += max(0, extra) * tables[0].transition_s
    return out


def evaluate_workload(problems: Sequence[MappingProblem], mappings: Sequence[Mapping], rates: Sequence[float],
                      terms: Optional[PipelineTerms] = None, latency_axis: str = "max",
                      facts: Optional[Sequence[Optional[MappingFacts]]] = None) -> WorkloadEvaluation:
    """Period, latencies and energy of a workload mapping (model in the module docstring).

    Parameters
    ----------
    problems : sequence of MappingProblem
        One per model, all over the same PUs (``pu_names`` equal, in the same order).
    mappings : sequence of Mapping
        One per model, over its problem.
    rates : sequence of float
        Frames of each model per workload frame (> 0).
    terms : PipelineTerms, optional
        The pipeline terms (the SoC's; None: the plain model).
    latency_axis : str
        ``max`` or ``weighted-mean``.
    facts : sequence of MappingFacts or None, optional
        Per model, the :class:`~parapipe.cost.pipeline_terms.MappingFacts` of its mapping's plain evaluation
        from an earlier call (None for a model to evaluate afresh, and for a mapping with replicated stages):
        calls that vary only ``terms`` (calibration) then skip re-evaluating the mappings. Built when not given.

    Raises
    ------
    parapipe.cost.rules.RuleViolation
        A mapping breaks a structural rule (:func:`parapipe.cost.evaluate.evaluate`).
    ValueError
        Problems over different PUs, mismatched lengths, a rate <= 0 or an unknown axis (caller bugs).
    """
    if not (len(problems) == len(mappings) == len(rates)) or not problems:
        raise ValueError("one problem, one mapping and one rate per model")
    if any(list(pr.pu_names) != list(problems[0].pu_names) for pr in problems):
        raise ValueError("the models' problems must be over the same PUs, in the same order")
    if any(not r > 0 for r in rates) or latency_axis not in LATENCY_AXES:
        raise ValueError(f"rates must be > 0 and the axis one of {LATENCY_AXES}")
    terms = terms or DEFAULT_TERMS
    k = problems[0].n_pus
    idle = float(problems[0].idle_power_w.sum()) + problems[0].static_power_w
    known = [None if facts is None or mp.replicated else facts[m] for m, mp in enumerate(mappings)]
    plain_evs: List[Evaluation] = []
    for pr, mp, kf in zip(problems, mappings, known):
        if kf is not None:
            plain_evs.append(kf.evaluation)
            continue
        check_stages(mp.stages, range(pr.n_blocks), pr.preds.__getitem__, pr.block_names, pr.pu_names)
        plain_evs.append(evaluate_plain(pr, mp) if not mp.replicated else evaluate(pr, mp, terms))
    switching = cross_switching_s(problems, mappings, rates)
    joint = [m for m, mp in enumerate(mappings) if not mp.replicated]
    joint_facts = {m: known[m] or MappingFacts(problems[m], mappings[m], plain_evs[m]) for m in joint}
    # every stage of the joint models: (model, stage index, PUs)
    stages = [(m, s, set(st.pus)) for m in joint for s, st in enumerate(mappings[m].stages)]
    served = np.zeros(k, dtype=int)
    for _, _, pus in stages:
        for p in pus:
            served[p] += 1
    kappa, psi, gamma = float(terms.slowdown), float(terms.sharing), float(terms.contention)
    base = {(m, s): kappa * (1.0 + psi) if psi != 0.0 and any(served[p] > 1 for p in pus) else kappa
            for m, s, pus in stages}
    results = {m: joint_facts[m].stage_results(float(terms.handoff_s)) for m in joint}
    dispatch = {m: joint_facts[m].dispatch(terms) for m in joint}

    def times(factor) -> dict:
        return {(m, s): (results[m][s].input_s * factor[m, s] + dispatch[m][s]) + results[m][s].makespan_s * factor[m, s]
                for m, s, _ in stages}

    def busy_of(t: dict) -> np.ndarray:
        busy = np.zeros(k)
        for m in range(len(mappings)):
            if m not in joint_facts:
                busy += rates[m] * (plain_evs[m].busy_s - switching_s(problems[m], mappings[m]))
        per_pu: dict = {}
        for m, s, pus in stages:
            for p in pus:
                per_pu.setdefault(p, []).append((rates[m], t[m, s]))
        for p, items in per_pu.items():
            total = sum(r * x for r, x in items)
            phi = float(terms.overlap.get(problems[0].pu_names[p], 0.0))
            if phi != 0.0 and len(items) > 1:
                top = max(x for _, x in items)
                total = top + (1.0 - phi) * (total - top)
            busy[p] += total
        return busy + switching

    factor = dict(base)
    cross = {key: 0.0 for key in base}
    bw = terms.memory_bandwidth_bytes_per_s
    if gamma > 0.0 and bw is not None and len(stages) > 1:
        p0 = float(busy_of(times(base)).max())
        traffic = {(m, s): rates[m] * joint_facts[m].traffic_nbytes[s] for m, s, _ in stages}
        for m, s, pus in stages:
            own = other = 0.0
            for n, q, qpus in stages:
                if (n, q) != (m, s) and not (pus & qpus):
                    if n == m:
                        own += traffic[n, q]
                    else:
                        other += traffic[n, q]
            if p0 > 0:
                factor[m, s] = base[m, s] * (1.0 + gamma * (own + other) / (p0 * bw))
                cross[m, s] = gamma * other / (p0 * bw)
    final = times(factor)
    busy = busy_of(final)
    period = float(busy.max())
    latencies: List[float] = []
    dyn: List[float] = []
    busy_per_model: List[np.ndarray] = []
    evaluations: List[Evaluation] = []
    for m, (pr, mp) in enumerate(zip(problems, mappings)):
        if m not in joint_facts:
            ev = plain_evs[m]
            latencies.append(ev.latency_s)
            dyn.append(model_dyn_energy_j(pr, ev))
            busy_per_model.append(np.asarray(ev.busy_s, dtype=float))
            evaluations.append(ev)
            continue
        lat = 0.0
        new: List[StageResult] = []
        active = np.zeros(k)
        own_busy = np.zeros(k)
        e_dyn = 0.0
        for s, st in enumerate(mp.stages):
            res, f, d = results[m][s], factor[m, s], dispatch[m][s]
            g = base[m, s] * (1.0 + cross[m, s])
            lat += (res.input_s * g + d) + res.makespan_s * g
            sr = StageResult(time_s=final[m, s], input_s=res.input_s * f + d, makespan_s=res.makespan_s * f,
                             start_s={v: t * f for v, t in res.start_s.items()},
                             finish_s={v: t * f for v, t in res.finish_s.items()},
                             active_s=res.active_s * f, dyn_energy_j=res.dyn_energy_j * f)
            new.append(sr)
            active += sr.active_s
            e_dyn += sr.dyn_energy_j
            for p in st.pus:
                own_busy[p] += final[m, s]
        latencies.append(lat)
        dyn.append(e_dyn)
        own_busy += switching_s(pr, mp)
        busy_per_model.append(own_busy)
        ev0 = plain_evs[m]
        evaluations.append(Evaluation(period_s=float(own_busy.max()), latency_s=lat,
                                      energy_j=e_dyn + idle * float(own_busy.max()), stage_results=new,
                                      busy_s=own_busy, active_s=active, weight_nbytes=ev0.weight_nbytes,
                                      memory_exceeded=ev0.memory_exceeded))
    energy = sum(r * e for r, e in zip(rates, dyn)) + idle * period
    weights = [ev.weight_nbytes for ev in evaluations if ev.weight_nbytes is not None]
    if len(weights) > 1 and problems[0].memory_bytes is not None:  # every model's weights on one PU's memory
        held = np.sum(weights, axis=0)
        over = tuple(int(p) for p in np.flatnonzero(held > problems[0].memory_bytes))
        if over:
            evaluations = [Evaluation(**{**ev.__dict__, "memory_exceeded": over}) for ev in evaluations]
    return WorkloadEvaluation(period_s=period, latency_s=workload_latency(latency_axis, latencies, rates),
                              energy_j=float(energy), latency_s_per_model=latencies, dyn_energy_j_per_model=dyn,
                              busy_s=busy, busy_s_per_model=busy_per_model, evaluations=evaluations)
