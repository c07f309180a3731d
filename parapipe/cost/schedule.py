"""The plain cost model's pieces: stage schedules, replicated stages and the evaluation record.

The model is stated in :mod:`parapipe.cost.evaluate`, whose :func:`~parapipe.cost.evaluate.evaluate` is the one
entry point (it checks the mapping's structure, :mod:`parapipe.cost.rules`, and adds the pipeline-level terms,
:mod:`parapipe.cost.pipeline_terms`, which build on these pieces). Nothing here checks a mapping's structure.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .mapping import Mapping, StageMapping
from .problem import MappingProblem, SubmodelKey, block_range
from .replication import (mean_and_worst_input_s, memory_violations, pu_weight_nbytes, replica_shares,
                          replicated_energy_j, replicated_period_s)
from .tasks import stage_tasks

__all__ = ["StageResult", "Evaluation", "Producer", "stage_input_transfers", "evaluate_stage",
           "evaluate_replicated_stage", "evaluate_plain", "switching_s", "slowed"]


@dataclass
class StageResult:
    """Evaluated stage: ``time_s = input_s + makespan_s``; per-block start/finish (s, from stage start).

    For a replicated stage ``time_s``, ``input_s``, ``makespan_s``, ``active_s`` and ``dyn_energy_j`` are means
    over the dealt frames (shares ``shares``), ``start_s``/``finish_s`` the first replica's schedule,
    ``replicas`` each replica's own result, ``period_s`` the stage's period contribution ``1 / Σ 1/T_r`` and
    ``worst_time_s`` the slowest replica's time (with its worst producers). Otherwise ``period_s`` and
    ``worst_time_s`` equal ``time_s`` (``None`` on construction means that).
    """

    time_s: float
    input_s: float
    makespan_s: float
    start_s: Dict[int, float]
    finish_s: Dict[int, float]
    active_s: np.ndarray  # (k,) time each PU computes or receives in this stage
    dyn_energy_j: float
    period_s: Optional[float] = None
    worst_time_s: Optional[float] = None
    shares: Tuple[float, ...] = (1.0,)
    replicas: List["StageResult"] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.period_s is None:
            self.period_s = self.time_s
        if self.worst_time_s is None:
            self.worst_time_s = self.time_s


@dataclass
class Evaluation:
    """Objectives of one mapping (SI units) and the details reports need."""

    period_s: float
    latency_s: float
    energy_j: float
    stage_results: List[StageResult]
    busy_s: np.ndarray  # (k,) reserved time per PU per inference
    active_s: np.ndarray  # (k,) computing/receiving time per PU per inference
    latency_worst_s: Optional[float] = None  # every replicated stage at its slowest replica (= latency_s if none)
    weight_nbytes: Optional[np.ndarray] = None  # (k,) weight bytes each PU holds (once per replica)
    memory_exceeded: Tuple[int, ...] = ()  # PU indices holding more weight bytes than problem.memory_bytes

    def __post_init__(self) -> None:
        if self.latency_worst_s is None:
            self.latency_worst_s = self.latency_s

    @property
    def throughput_per_s(self) -> float:
        return 1.0 / self.period_s if self.period_s > 0 else float("inf")

    @property
    def fits_memory(self) -> bool:
        """True when no PU holds more weights than its memory limit."""
        return not self.memory_exceeded


def stage_input_transfers(problem: MappingProblem, stage: StageMapping) -> Dict[Tuple[int, int], float]:
    """Cross-stage transfers into ``stage``: ``{(src_block, dst_pu): nbytes}`` (largest edge per pair)."""
    need: Dict[Tuple[int, int], float] = {}
    for v in range(stage.start, stage.stop):
        q = stage.pu_of(v)
        for u in problem.preds[v]:
            if u < stage.start:
                key = (u, q)
                nb = problem.edge_nbytes.get((u, v), 0.0)
                if nb > need.get(key, -1.0):
                    need[key] = nb
    return need


def _task_scale(problem: MappingProblem, stage: StageMapping, measured_s: Dict[SubmodelKey, float]) -> Dict[int, float]:
    """Block -> ``measured task time / its blocks' sum`` for the tasks of a multi-PU stage whose sub-model has a
    measurement in ``measured_s`` (:attr:`MappingProblem.submodel_time_s`)."""
    scale: Dict[int, float] = {}
    for p, blocks in stage_tasks(problem, stage):
        measured = measured_s.get((p, tuple(sorted(blocks))))
        total = float(sum(problem.time_s[v, p] for v in blocks))
        if measured is not None and total > 0:
            scale.update({v: float(measured) / total for v in blocks})
    return scale


def _schedule(problem: MappingProblem, stage: StageMapping,
              active: np.ndarray) -> Tuple[Dict[int, float], Dict[int, float], float, float]:
    """List schedule of the stage's blocks on its PUs: ``(start, finish, makespan, dyn_energy_j)``; adds each
    block's time to ``active``. A sub-model with a measured time (:attr:`MappingProblem.submodel_time_s`) takes
    it: a single-PU stage's makespan is replaced, a multi-PU stage's task has its blocks scaled to it."""
    problem = problem.at_operating_points(stage.op_choice())
    dyn = 0.0
    pu_free = {p: 0.0 for p in stage.pus}
    start: Dict[int, float] = {}
    finish: Dict[int, float] = {}
    measured_s = problem.submodel_time_s
    scale = _task_scale(problem, stage, measured_s) if measured_s and len(stage.pus) > 1 else {}
    first, assignment, preds, comm_s = stage.start, stage.assignment, problem.preds, problem.comm_s
    edge_nbytes, time_s = problem.edge_nbytes, problem.time_s
    power_w, idle_w = problem.active_power_w, problem.idle_power_w
    for v in stage.block_order():
        p = assignment[v - first]
        ready = 0.0
        for u in preds[v]:
            if u >= first:
                ready = max(ready, finish[u] + comm_s(assignment[u - first], p, edge_nbytes.get((u, v), 0.0)))
        s = max(ready, pu_free[p])
        t = float(time_s[v, p]) * scale.get(v, 1.0)
        start[v], finish[v] = s, s + t
        pu_free[p] = s + t
        active[p] += t
        dyn += t * (power_w[v, p] - idle_w[p])
    makespan = max(finish.values()) if finish else 0.0
    measured = measured_s.get((stage.pus[0], block_range(stage.start, stage.stop))) if (
        measured_s and len(stage.pus) == 1 and makespan > 0) else None
    if measured is not None:  # a stage-level measurement replaces the block sum; blocks keep their proportions
        factor = float(measured) / makespan
        active[stage.pus[0]] += measured - makespan
        start = {v: t * factor for v, t in start.items()}
        finish = {v: t * factor for v, t in finish.items()}
        makespan, dyn = float(measured), dyn * factor
    return start, finish, makespan, dyn


def evaluate_stage(problem: MappingProblem, stage: StageMapping, producer_pu: Dict[int, int]) -> StageResult:
    """Stage time, schedule and dynamic energy of one (non-replicated) stage whose producers each ran on one PU
    (``producer_pu``: block -> PU); model in :mod:`parapipe.cost.evaluate`. The stage obeys
    :mod:`parapipe.cost.rules` (:func:`parapipe.cost.evaluate.evaluate` checks; not checked here).
    """
    k = problem.n_pus
    active = np.zeros(k)
    input_s = 0.0
    for (u, q), nb in stage_input_transfers(problem, stage).items():
        src = producer_pu[u]
        t = problem.comm_s(src, q, nb)
        input_s += t
        active[q] += t
    start, finish, makespan, dyn = _schedule(problem, stage, active)
    return StageResult(time_s=input_s + makespan, input_s=input_s, makespan_s=makespan, start_s=start,
                       finish_s=finish, active_s=active, dyn_energy_j=dyn)


#: Producer of a block's output: (index of its stage, shares of the stage's replicas, PU on each replica).
Producer = Tuple[int, Tuple[float, ...], Tuple[int, ...]]


def _replica_result(problem: MappingProblem, stage: StageMapping, producers: Dict[int, Producer],
                    dispatch_s: float = 0.0, invoke_s: Sequence[float] = (),
                    stage_problem: Optional[MappingProblem] = None) -> Tuple[StageResult, float]:
    """One replica (a plain stage) whose producers may be replicated: its result with the mean input, and its
    worst-case time (:func:`parapipe.cost.replication.mean_and_worst_input_s`); ``dispatch_s`` plus the largest
    ``invoke_s`` (per PU index, s; empty: none) of the replica's PUs is added to the input hand-off (the hop into
    the replica); ``stage_problem`` (default ``problem``) gives the transfer costs inside the replica."""
    if invoke_s:
        dispatch_s = dispatch_s + max(float(invoke_s[p]) for p in stage.pus)
    active = np.zeros(problem.n_pus)
    terms = []
    for (u, q), nb in stage_input_transfers(problem, stage).items():
        src_stage, shares, pus = producers[u]
        seconds = [problem.comm_s(src, q, nb) for src in pus]
        terms.append((src_stage, shares, seconds))
        active[q] += sum(w * t for w, t in zip(shares, seconds))
    input_s, worst_input_s = mean_and_worst_input_s(terms)
    input_s, worst_input_s = input_s + dispatch_s, worst_input_s + dispatch_s
    inner = problem if stage_problem is None or len(stage.pus) < 2 else stage_problem
    start, finish, makespan, dyn = _schedule(inner, stage, active)
    res = StageResult(time_s=input_s + makespan, input_s=input_s, makespan_s=makespan, start_s=start,
                      finish_s=finish, active_s=active, dyn_energy_j=dyn)
    return res, worst_input_s + makespan


def evaluate_replicated_stage(problem: MappingProblem, stage: StageMapping,
                              producers: Dict[int, Producer], dispatch_s: float = 0.0,
                              invoke_s: Sequence[float] = (),
                              stage_problem: Optional[MappingProblem] = None) -> StageResult:
    """A stage with or without replicas, whose producers may be replicated (model in :mod:`parapipe.cost.evaluate`).

    Parameters
    ----------
    problem : MappingProblem
    stage : StageMapping
    producers : dict of int to Producer
        For every block of an earlier stage: ``(stage index, replica shares, PU of the block on each replica)``.
    dispatch_s : float
        Seconds added to every replica's time (the dispatch term ``d``; 0 in the plain model).
    invoke_s : sequence of float
        Per PU index, s: the invocation term ``i_p`` (:mod:`parapipe.cost.pipeline_terms`); each replica adds the
        largest of its PUs' (empty: none, the plain model).
    stage_problem : MappingProblem, optional
        ``problem`` with the transfer costs between the PUs of one replica (default: ``problem``'s).

    Returns
    -------
    StageResult
        Means over the dealt frames, ``period_s``, ``worst_time_s``, ``shares`` and per-replica ``replicas``.
        The stage obeys :mod:`parapipe.cost.rules` (not checked here).
    """
    views = stage.replica_stages()
    results, worst = zip(*(_replica_result(problem, view, producers, dispatch_s, invoke_s, stage_problem)
                            for view in views))
    times = [r.time_s for r in results]
    shares = replica_shares(times)
    if len(views) == 1:
        res = results[0]
        res.worst_time_s = worst[0]
        return res
    used = [i for i, w in enumerate(shares) if w > 0]
    active = sum(shares[i] * results[i].active_s for i in used)
    return StageResult(
        time_s=sum(shares[i] * times[i] for i in used), input_s=sum(shares[i] * results[i].input_s for i in used),
        makespan_s=sum(shares[i] * results[i].makespan_s for i in used), start_s=results[0].start_s,
        finish_s=results[0].finish_s, active_s=active,
        dyn_energy_j=replicated_energy_j([r.dyn_energy_j for r in results], shares),
        period_s=replicated_period_s(times), worst_time_s=max(worst[i] for i in used), shares=shares,
        replicas=list(results))


def evaluate_plain(problem: MappingProblem, mapping: Mapping, dispatch_s: Optional[float] = None,
                   invoke_s: Sequence[float] = (), stage_problem: Optional[MappingProblem] = None) -> Evaluation:
    """The plain model of :mod:`parapipe.cost.evaluate` on a mapping that obeys :mod:`parapipe.cost.rules` (not
    checked here) (``dispatch_s`` None), or, for a mapping with replicated stages, the plain model with
    ``dispatch_s`` plus the largest ``invoke_s`` (per PU index, s) of its PUs added to every stage's and
    replica's time, and the transfers between the PUs of a stage or replica priced by ``stage_problem`` (default
    ``problem``)."""
    k = problem.n_pus
    producer_pu: Dict[int, int] = {}
    producers: Dict[int, Producer] = {}
    replicated = False
    busy = np.zeros(k)
    active = np.zeros(k)
    dyn = 0.0
    latency = worst = 0.0
    results: List[StageResult] = []
    placements: List[Tuple[int, int]] = []
    for s, st in enumerate(mapping.stages):
        replicated = replicated or bool(st.replicas)
        if not replicated and dispatch_s is None:  # the plain model, exactly as before replication existed
            res = evaluate_stage(problem, st, producer_pu)
            for p in st.pus:
                busy[p] += res.time_s
        else:
            res = evaluate_replicated_stage(problem, st, producers, dispatch_s or 0.0, invoke_s, stage_problem)
            for view, w in zip(st.replica_stages(), res.shares):
                for p in view.pus:
                    busy[p] += res.period_s if w > 0 else 0.0
        views = st.replica_stages()
        shares = tuple(res.shares)
        if len(views) == 1:  # the common case, without the per-replica generators
            for v, p in zip(range(st.start, st.stop), st.assignment):
                producer_pu[v] = p
                producers[v] = (s, shares, (p,))
                placements.append((v, p))
        else:
            for v in range(st.start, st.stop):
                producer_pu[v] = st.pu_of(v)
                producers[v] = (s, shares, tuple(view.pu_of(v) for view in views))
                placements.extend((v, view.pu_of(v)) for view in views)
        active += res.active_s
        dyn += res.dyn_energy_j
        latency += res.time_s
        worst += res.time_s if res.worst_time_s is None else res.worst_time_s
        results.append(res)
    busy += switching_s(problem, mapping)
    period = float(busy.max())
    energy = dyn + (float(problem.idle_power_w.sum()) + problem.static_power_w) * period
    held = pu_weight_nbytes(problem.weight_nbytes, placements, k)
    return Evaluation(period_s=period, latency_s=latency, energy_j=energy, stage_results=results, busy_s=busy,
                      active_s=active, latency_worst_s=worst if replicated else latency, weight_nbytes=held,
                      memory_exceeded=tuple(memory_violations(held, problem.memory_bytes)))


def switching_s(problem: MappingProblem, mapping: Mapping) -> np.ndarray:
    """Per PU, the time its operating-point switches take per inference, s, shape (k,).

    A PU serves its stages (and replicas) in pipeline order, once per inference, and then starts over: each
    change of operating point between consecutive uses, the last use to the first included, costs the PU's
    ``transition_s`` (:class:`parapipe.cost.problem.PUOperatingPoints`). Zero for a PU at one point.
    """
    out = np.zeros(problem.n_pus)
    if problem.operating_points is None:
        return out
    uses: Dict[int, List[int]] = {}
    for st in mapping.stages:
        for view in st.replica_stages():
            for p in view.pus:
                op = view.op_of(p)
                uses.setdefault(p, []).append(problem.max_op(p) if op is None else op)
    for p, ops in uses.items():
        table = problem.operating_points[p]
        if table is None or len(ops) < 2:
            continue
        switches = sum(1 for a, b in zip(ops, ops[1:] + ops[:1]) if a != b)
        out[p] = switches * table.transition_s
    return out


def slowed(problem: MappingProblem, factor: float) -> MappingProblem:
    """``problem`` with every block and sub-model time × ``factor``."""
    if factor == 1.0:
        return problem
    return dataclasses.replace(
        problem, time_s=problem.time_s * factor,
        submodel_time_s=None if problem.submodel_time_s is None else {
            k: t * factor for k, t in problem.submodel_time_s.items()},
        operating_points=None if problem.operating_points is None else [
            None if t is None else dataclasses.replace(t, time_s=t.time_s * factor)
            for t in problem.operating_points])
