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
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .problem import MappingProblem


@dataclass(frozen=True)
class StageMapping:
    """One stage: blocks ``[start, stop)`` of the topological order on PU indices ``pus``.

    ``assignment[i]`` is the PU index of block ``start + i`` (must be in ``pus``); ``order`` is the schedule order
    of the stage's block indices (a topological order; default ``range(start, stop)``).
    """

    start: int
    stop: int
    pus: Tuple[int, ...]
    assignment: Tuple[int, ...]
    order: Optional[Tuple[int, ...]] = None

    def block_order(self) -> Tuple[int, ...]:
        return self.order if self.order is not None else tuple(range(self.start, self.stop))

    def pu_of(self, block: int) -> int:
        return self.assignment[block - self.start]


@dataclass(frozen=True)
class Mapping:
    """A hierarchical mapping: stages in pipeline order covering every block exactly once."""

    stages: Tuple[StageMapping, ...]

    def block_pus(self) -> List[int]:
        """PU index of every block, in block order."""
        out: List[int] = []
        for st in self.stages:
            out.extend(st.assignment)
        return out


@dataclass
class StageResult:
    """Evaluated stage: ``time_s = input_s + makespan_s``; per-block start/finish (s, from stage start)."""

    time_s: float
    input_s: float
    makespan_s: float
    start_s: Dict[int, float]
    finish_s: Dict[int, float]
    active_s: np.ndarray  # (k,) time each PU computes or receives in this stage
    dyn_energy_j: float


@dataclass
class Evaluation:
    """Objectives of one mapping (SI units) and the details reports need."""

    period_s: float
    latency_s: float
    energy_j: float
    stage_results: List[StageResult]
    busy_s: np.ndarray  # (k,) reserved time per PU per inference
    active_s: np.ndarray  # (k,) computing/receiving time per PU per inference

    @property
    def throughput_per_s(self) -> float:
        return 1.0 / self.period_s if self.period_s > 0 else float("inf")


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


def evaluate_stage(problem: MappingProblem, stage: StageMapping, producer_pu: Dict[int, int]) -> StageResult:
    """Stage time, schedule and dynamic energy of one stage (model in the module docstring).

    Raises
    ------
    ValueError
        If a block is assigned to a PU outside ``stage.pus`` or a predecessor is in a later stage.
    """
    k = problem.n_pus
    active = np.zeros(k)
    dyn = 0.0
    input_s = 0.0
    for (u, q), nb in stage_input_transfers(problem, stage).items():
        src = producer_pu[u]
        t = problem.comm_s(src, q, nb)
        input_s += t
        active[q] += t
    pu_free = {p: 0.0 for p in stage.pus}
    start: Dict[int, float] = {}
    finish: Dict[int, float] = {}
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
        t = float(problem.time_s[v, p])
        start[v], finish[v] = s, s + t
        pu_free[p] = s + t
        active[p] += t
        dyn += t * (problem.active_power_w[v, p] - problem.idle_power_w[p])
    makespan = max(finish.values()) if finish else 0.0
    return StageResult(time_s=input_s + makespan, input_s=input_s, makespan_s=makespan, start_s=start,
                       finish_s=finish, active_s=active, dyn_energy_j=dyn)


def evaluate(problem: MappingProblem, mapping: Mapping, terms=None) -> Evaluation:
    """Period, latency and energy per inference of ``mapping`` (model in the module docstring).

    ``terms`` (a :class:`parapipe.cost.pipeline_terms.PipelineTerms`, optional) adds the pipeline-level terms
    learnt from measured runs (:func:`parapipe.cost.pipeline_terms.apply_terms`); None is the plain model.

    Raises
    ------
    ValueError
        If the stages do not cover blocks ``0..n-1`` contiguously in order, a block's PU is outside its stage's
        group, or a dependency points to a later stage.
    """
    k = problem.n_pus
    expect = 0
    producer_pu: Dict[int, int] = {}
    busy = np.zeros(k)
    active = np.zeros(k)
    dyn = 0.0
    latency = 0.0
    results: List[StageResult] = []
    for st in mapping.stages:
        if st.start != expect or st.stop <= st.start or len(st.assignment) != st.stop - st.start:
            raise ValueError(f"stages must cover the blocks contiguously in order; stage at {st.start}:{st.stop} "
                             f"expected to start at {expect}")
        res = evaluate_stage(problem, st, producer_pu)
        for v in range(st.start, st.stop):
            producer_pu[v] = st.pu_of(v)
        for p in st.pus:
            busy[p] += res.time_s
        active += res.active_s
        dyn += res.dyn_energy_j
        latency += res.time_s
        results.append(res)
        expect = st.stop
    if expect != problem.n_blocks:
        raise ValueError(f"mapping covers {expect} of {problem.n_blocks} blocks")
    period = float(busy.max())
    energy = dyn + (float(problem.idle_power_w.sum()) + problem.static_power_w) * period
    plain = Evaluation(period_s=period, latency_s=latency, energy_j=energy, stage_results=results, busy_s=busy,
                       active_s=active)
    if terms is None:
        return plain
    from .pipeline_terms import apply_terms  # the one hook of the pipeline-level terms

    return apply_terms(problem, mapping, plain, terms)


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
