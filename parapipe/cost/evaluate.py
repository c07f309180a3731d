"""Exact evaluation of one hierarchical mapping under the shared cost model (GUIDE §2).

The model, stated once (every search, baseline and report uses it through :func:`evaluate`):

* A mapping is an ordered list of stages; stage ``s`` owns a contiguous range of blocks (in the problem's
  topological order), a group of PUs, and an assignment of each of its blocks to one PU of the group.
* **Stage time** ``T_s = T_in_s + makespan_s``. ``T_in_s`` is the input hand-off: for every block ``u`` of an
  earlier stage and every PU ``q`` of this stage that reads ``u``'s output, one transfer
  ``alpha[pu(u), q] + nbytes / beta[pu(u), q]`` (nbytes = the largest edge ``u → v`` with ``v`` on ``q``), done
  one after the other. ``makespan_s`` is the list schedule of the stage's blocks in ``order`` on their PUs: one
  block at a time per PU, a block starts when its PU is free and its in-stage predecessors' outputs have arrived
  (plus a transfer when the predecessor ran on another PU).
* A stage reserves all PUs of its group for ``T_s`` per inference. A PU may serve several (non-adjacent) stages:
  its **busy time** per inference is the sum of their ``T_s``.
* **Period** ``P = max_pu busy[pu]``; **throughput** ``1 / P``; **latency** ``L = Σ_s T_s`` (one input through an
  idle pipeline).
* **Energy per inference** ``E = Σ_blocks t·p_active + Σ_pu P_idle[pu]·(P − compute[pu]) + P_static·P`` where
  ``compute[pu]`` is the time the PU runs blocks. Transfers lengthen stages (hence the period and the idle and
  static energy) but draw no power of their own: memory-traffic power is part of the board's static power.
  Written as ``E = E_dyn + (Σ_pu P_idle + P_static)·P`` with ``E_dyn = Σ (p_active − P_idle)·t``, which is how the
  search accumulates it stage by stage.
* A single-PU stage over a block range with a stage-level measurement (``MappingProblem.range_time_s``) takes
  the measured time instead of its block sum (its blocks' times scaled to it); in a multi-PU stage, the blocks
  of a task (:func:`parapipe.cost.tasks.stage_tasks`: what the executor runs as one sub-model) with a
  measurement (``MappingProblem.task_time_s``) are scaled to it alike.
* **Replicated stages** (``StageMapping.replicas``): the block range runs whole on each replica (a PU or a PU
  group), frames dealt in proportion to speed; period contribution ``1 / Σ_r 1/T_r``, every replica PU busy
  that long per inference, latency the mean over dealt frames (worst replica in ``latency_worst_s``), dynamic
  energy ``Σ_r w_r E_dyn,r``, weights held once per replica. Formulas and their derivation:
  :mod:`parapipe.cost.replication`. A mapping without replicas is evaluated exactly as before.
* **Pipeline terms** (:mod:`parapipe.cost.pipeline_terms`, optional): a plain mapping gets all of them
  (:func:`parapipe.cost.pipeline_terms.apply_terms`); a mapping with replicated stages gets the slowdown ``κ``
  (every block, range and task time × ``κ``) and the dispatch ``d`` (added to every stage's and every replica's
  time ``T_r``: each frame dealt to a replica hops into it as into any stage). Its stages' PUs are disjoint, so
  sharing and overlap do not arise; memory contention is not modelled for it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .problem import MappingProblem
from .replication import (mean_and_worst_input_s, memory_violations, pu_weight_nbytes, replica_shares,
                          replicated_energy_j, replicated_period_s)



@dataclass(frozen=True)
class Replica:
    """One more copy of a stage's block range on its own PUs (see :class:`StageMapping`).

    ``pus`` are PU indices (disjoint from the stage's and from its other replicas'); ``assignment[i]`` is the PU
    of block ``start + i``; ``order`` the schedule order (default the block order).
    """

    pus: Tuple[int, ...]
    assignment: Tuple[int, ...]
    order: Optional[Tuple[int, ...]] = None


@dataclass(frozen=True)
class StageMapping:
    """One stage: blocks ``[start, stop)`` of the topological order on PU indices ``pus``.

    ``assignment[i]`` is the PU index of block ``start + i`` (must be in ``pus``); ``order`` is the schedule order
    of the stage's block indices (a topological order; default ``range(start, stop)``).

    ``replicas`` (default none) makes it a replicated stage: each :class:`Replica` runs the same blocks on its
    own PUs, and ``pus``/``assignment``/``order`` describe the first replica.
    """

    start: int
    stop: int
    pus: Tuple[int, ...]
    assignment: Tuple[int, ...]
    order: Optional[Tuple[int, ...]] = None
    replicas: Tuple[Replica, ...] = ()

    def block_order(self) -> Tuple[int, ...]:
        return self.order if self.order is not None else tuple(range(self.start, self.stop))

    def pu_of(self, block: int) -> int:
        return self.assignment[block - self.start]

    def replica_stages(self) -> Tuple["StageMapping", ...]:
        """Every replica as a plain stage over the same blocks, this stage's own PUs first (``(self,)`` when
        not replicated)."""
        if not self.replicas:
            return (self,)
        first = StageMapping(self.start, self.stop, self.pus, self.assignment, self.order)
        return (first,) + tuple(StageMapping(self.start, self.stop, r.pus, r.assignment, r.order)
                                for r in self.replicas)

    def all_pus(self) -> Tuple[int, ...]:
        """PUs of every replica, the stage's own first."""
        return tuple(p for st in self.replica_stages() for p in st.pus)


@dataclass(frozen=True)
class Mapping:
    """A hierarchical mapping: stages in pipeline order covering every block exactly once."""

    stages: Tuple[StageMapping, ...]

    def block_pus(self) -> List[int]:
        """PU index of every block, in block order (the first replica's for replicated stages)."""
        out: List[int] = []
        for st in self.stages:
            out.extend(st.assignment)
        return out

    @property
    def replicated(self) -> bool:
        """True if some stage has replicas."""
        return any(st.replicas for st in self.stages)


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


def _task_scale(problem: MappingProblem, stage: StageMapping) -> Dict[int, float]:
    """Block -> ``measured task time / its blocks' sum`` for the tasks of a multi-PU stage that have a
    measurement (:attr:`MappingProblem.task_time_s`)."""
    from .tasks import stage_tasks

    scale: Dict[int, float] = {}
    for p, blocks in stage_tasks(problem, stage):
        measured = problem.task_time_s.get((p, tuple(sorted(blocks))))
        total = float(sum(problem.time_s[v, p] for v in blocks))
        if measured is not None and total > 0:
            scale.update({v: float(measured) / total for v in blocks})
    return scale


def _schedule(problem: MappingProblem, stage: StageMapping, active: np.ndarray):
    """List schedule of the stage's blocks on its PUs: ``(start, finish, makespan, dyn_energy_j)``; adds each
    block's time to ``active``. Raises ValueError as :func:`evaluate_stage`."""
    dyn = 0.0
    pu_free = {p: 0.0 for p in stage.pus}
    start: Dict[int, float] = {}
    finish: Dict[int, float] = {}
    scale = _task_scale(problem, stage) if problem.task_time_s and len(stage.pus) > 1 else {}
    for v in stage.block_order():
        p = stage.pu_of(v)
        if p not in pu_free:
            raise ValueError(f"block {problem.block_names[v]!r} assigned to PU {problem.pu_names[p]!r} "
                             "outside its stage's group")
        ready = 0.0
        for u in problem.preds[v]:
            if u >= stage.start:
                if u not in finish:
                    raise ValueError(f"schedule order puts {problem.block_names[v]!r} before its predecessor "
                                     f"{problem.block_names[u]!r}")
                ready = max(ready, finish[u] + problem.comm_s(stage.pu_of(u), p, problem.edge_nbytes.get((u, v), 0.0)))
        s = max(ready, pu_free[p])
        t = float(problem.time_s[v, p]) * scale.get(v, 1.0)
        start[v], finish[v] = s, s + t
        pu_free[p] = s + t
        active[p] += t
        dyn += t * (problem.active_power_w[v, p] - problem.idle_power_w[p])
    makespan = max(finish.values()) if finish else 0.0
    measured = problem.range_time_s.get((stage.start, stage.stop, stage.pus[0])) if (
        problem.range_time_s and len(stage.pus) == 1 and makespan > 0) else None
    if measured is not None:  # a stage-level measurement replaces the block sum; blocks keep their proportions
        scale = float(measured) / makespan
        active[stage.pus[0]] += measured - makespan
        start = {v: t * scale for v, t in start.items()}
        finish = {v: t * scale for v, t in finish.items()}
        makespan, dyn = float(measured), dyn * scale
    return start, finish, makespan, dyn


def evaluate_stage(problem: MappingProblem, stage: StageMapping, producer_pu: Dict[int, int]) -> StageResult:
    """Stage time, schedule and dynamic energy of one (non-replicated) stage whose producers each ran on one PU
    (``producer_pu``: block -> PU); model in the module docstring.

    Raises
    ------
    ValueError
        If a block is assigned to a PU outside ``stage.pus`` or a predecessor is in a later stage.
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
                    dispatch_s: float = 0.0) -> Tuple[StageResult, float]:
    """One replica (a plain stage) whose producers may be replicated: its result with the mean input, and its
    worst-case time (:func:`parapipe.cost.replication.mean_and_worst_input_s`); ``dispatch_s`` is added to the
    input hand-off (the hop into the replica)."""
    active = np.zeros(problem.n_pus)
    terms = []
    for (u, q), nb in stage_input_transfers(problem, stage).items():
        src_stage, shares, pus = producers[u]
        seconds = [problem.comm_s(src, q, nb) for src in pus]
        terms.append((src_stage, shares, seconds))
        active[q] += sum(w * t for w, t in zip(shares, seconds))
    input_s, worst_input_s = mean_and_worst_input_s(terms)
    input_s, worst_input_s = input_s + dispatch_s, worst_input_s + dispatch_s
    start, finish, makespan, dyn = _schedule(problem, stage, active)
    res = StageResult(time_s=input_s + makespan, input_s=input_s, makespan_s=makespan, start_s=start,
                      finish_s=finish, active_s=active, dyn_energy_j=dyn)
    return res, worst_input_s + makespan


def evaluate_replicated_stage(problem: MappingProblem, stage: StageMapping,
                              producers: Dict[int, Producer], dispatch_s: float = 0.0) -> StageResult:
    """A stage with or without replicas, whose producers may be replicated (model in the module docstring).

    Parameters
    ----------
    problem : MappingProblem
    stage : StageMapping
    producers : dict of int to Producer
        For every block of an earlier stage: ``(stage index, replica shares, PU of the block on each replica)``.
    dispatch_s : float
        Seconds added to every replica's time (the dispatch term ``d``; 0 in the plain model).

    Returns
    -------
    StageResult
        Means over the dealt frames, ``period_s``, ``worst_time_s``, ``shares`` and per-replica ``replicas``.

    Raises
    ------
    ValueError
        A block assigned outside its replica's PUs, a schedule order against the dependencies, or replicas
        sharing a PU.
    """
    views = stage.replica_stages()
    seen: set = set()
    for view in views:
        if seen & set(view.pus):
            raise ValueError(f"stage {stage.start}:{stage.stop}: PU(s) "
                             f"{[problem.pu_names[p] for p in sorted(seen & set(view.pus))]} in two replicas")
        seen |= set(view.pus)
    results, worst = zip(*(_replica_result(problem, view, producers, dispatch_s) for view in views))
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


def evaluate(problem: MappingProblem, mapping: Mapping, terms=None) -> Evaluation:
    """Period, latency and energy per inference of ``mapping`` (model in the module docstring).

    ``terms`` (a :class:`parapipe.cost.pipeline_terms.PipelineTerms`, optional) adds the pipeline-level terms
    learnt from measured runs (:func:`parapipe.cost.pipeline_terms.apply_terms`); None or default terms give the
    plain model. A mapping with replicated stages takes the slowdown and the dispatch only (module docstring).

    Raises
    ------
    ValueError
        If the stages do not cover blocks ``0..n-1`` contiguously in order, a block's PU is outside its stage's
        group (or replica's), a dependency points to a later stage, or two replicas of a stage share a PU.
    """
    plain = _evaluate(problem, mapping)
    if terms is None or terms.is_default():
        return plain
    if mapping.replicated:  # slowdown and dispatch; the other terms do not arise or are not modelled here
        return _evaluate(_slowed(problem, float(terms.slowdown)), mapping, float(terms.dispatch_s))
    from .pipeline_terms import apply_terms  # the one hook of the pipeline-level terms

    return apply_terms(problem, mapping, plain, terms)


def _slowed(problem: MappingProblem, factor: float) -> MappingProblem:
    """``problem`` with every block, range and task time × ``factor``."""
    if factor == 1.0:
        return problem
    return dataclasses.replace(
        problem, time_s=problem.time_s * factor,
        range_time_s=None if problem.range_time_s is None else {
            k: t * factor for k, t in problem.range_time_s.items()},
        task_time_s=None if problem.task_time_s is None else {k: t * factor for k, t in problem.task_time_s.items()})


def _evaluate(problem: MappingProblem, mapping: Mapping, dispatch_s: Optional[float] = None) -> Evaluation:
    """The plain model (``dispatch_s`` None), or, for a mapping with replicated stages, the plain model with
    ``dispatch_s`` added to every stage's and replica's time."""
    k = problem.n_pus
    expect = 0
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
        if st.start != expect or st.stop <= st.start or len(st.assignment) != st.stop - st.start or any(
                len(r.assignment) != st.stop - st.start for r in st.replicas):
            raise ValueError(f"stages must cover the blocks contiguously in order; stage at {st.start}:{st.stop} "
                             f"expected to start at {expect}")
        replicated = replicated or bool(st.replicas)
        if not replicated and dispatch_s is None:  # the plain model, exactly as before replication existed
            res = evaluate_stage(problem, st, producer_pu)
            for p in st.pus:
                busy[p] += res.time_s
        else:
            res = evaluate_replicated_stage(problem, st, producers, dispatch_s or 0.0)
            for view, w in zip(st.replica_stages(), res.shares):
                for p in view.pus:
                    busy[p] += res.period_s if w > 0 else 0.0
        views = st.replica_stages()
        for v in range(st.start, st.stop):
            producer_pu[v] = st.pu_of(v)
            producers[v] = (s, tuple(res.shares), tuple(view.pu_of(v) for view in views))
            placements.extend((v, view.pu_of(v)) for view in views)
        active += res.active_s
        dyn += res.dyn_energy_j
        latency += res.time_s
        worst += res.worst_time_s
        results.append(res)
        expect = st.stop
    if expect != problem.n_blocks:
        raise ValueError(f"mapping covers {expect} of {problem.n_blocks} blocks")
    period = float(busy.max())
    energy = dyn + (float(problem.idle_power_w.sum()) + problem.static_power_w) * period
    held = pu_weight_nbytes(problem.weight_nbytes, placements, k)
    return Evaluation(period_s=period, latency_s=latency, energy_j=energy, stage_results=results, busy_s=busy,
                      active_s=active, latency_worst_s=worst if replicated else latency, weight_nbytes=held,
                      memory_exceeded=tuple(memory_violations(held, problem.memory_bytes)))


def mapping_from_pu_list(problem: MappingProblem, pus: Sequence[int]) -> Mapping:
    """Mapping from one PU index per block: runs of the same PU form a stage (``gpu,gpu,big,gpu`` → 3 stages)."""
    if len(pus) != problem.n_blocks:
        raise ValueError(f"need one PU per block ({problem.n_blocks}), got {len(pus)}")
    stages = []
    start = 0
    for i in range(1, len(pus) + 1):
        if i == len(pus) or pus[i] != pus[start]:
            stages.append(StageMapping(start, i, (pus[start],), tuple(pus[start:i])))
            start = i
    return Mapping(tuple(stages))
