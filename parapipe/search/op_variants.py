"""Operating-point variants of a search's mappings: the baselines at their own best points, re-timed variants of
the front's candidates, and the kernel governors' points (:mod:`.dvfs` finds the points; this module evaluates
them as :class:`parapipe.search.points.SearchPoint`)."""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

from ..cost.evaluate import evaluate
from ..cost.mapping import Mapping, ReplicaMapping, StageMapping
from ..cost.problem import MappingProblem
from .dvfs import RETIME_MAX_MAPPINGS, OpSpace, retime, schedutil_mapping
from .points import SearchPoint, own_front

__all__ = ["baselines_at_ops", "retimed", "governors"]


def baselines_at_ops(problem: MappingProblem, points: List[SearchPoint], space: OpSpace, terms, cache: dict,
                      objectives: Sequence[str], evaluate=evaluate) -> List[SearchPoint]:
    """Every baseline at its own best operating points: each baseline mapping with its re-timed variants
    (:func:`parapipe.search.dvfs.retime`), keeping per baseline family (a strategy, and the PU of a single-PU
    baseline) the points on that family's own front; ids get ``-f<i>`` for the variants."""
    assert space.op_sets is not None
    fams: Dict[str, List[SearchPoint]] = {}
    for p in points:
        fam = p.id if p.strategy == "single" else p.strategy
        fams.setdefault(fam, []).append(p)
        if p.strategy == "pipeline" and space.where == "dp":
            continue  # the pipeline pass already searched the points
        for i, m in enumerate(retime(problem, p.mapping, space.op_sets, cache)):
            fams[fam].append(SearchPoint(f"{p.id}-f{i}", p.strategy, m, evaluate(problem, m, terms),
                                         list(p.stage_schedules)))
    out: List[SearchPoint] = []
    for members in fams.values():
        out += own_front(members, objectives)
    return out


def retimed(problem: MappingProblem, cands: List[SearchPoint], space: OpSpace, terms, cache: dict,
             objectives: Sequence[str], evaluate=evaluate) -> List[SearchPoint]:
    """Re-timed variants (:func:`parapipe.search.dvfs.retime`) of the candidates on the highest-point front (at most
    :data:`parapipe.search.dvfs.RETIME_MAX_MAPPINGS` of them, spread along the period axis)."""
    assert space.op_sets is not None
    out: List[SearchPoint] = []
    front = sorted(own_front([c for c in cands if c.evaluation.fits_memory] or cands, objectives),
                   key=lambda p: p.objectives())
    if len(front) > RETIME_MAX_MAPPINGS:
        front = [front[i] for i in sorted(set(np.linspace(0, len(front) - 1, RETIME_MAX_MAPPINGS).round()
                                               .astype(int).tolist()))]
    for p in front:
        for m in retime(problem, p.mapping, space.op_sets, cache):
            out.append(SearchPoint("", "parapipe", m, evaluate(problem, m, terms), list(p.stage_schedules),
                                   origin=p.origin))
    return out


def governors(problem: MappingProblem, front: List[SearchPoint], terms, evaluate=evaluate) -> List[SearchPoint]:
    """The governors users get by default on the best-throughput mapping of ``front`` that fits memory
    (:mod:`parapipe.search.dvfs`): ``performance`` (every PU at its highest point) and ``schedutil``."""
    if not front:
        return []
    best = min((p for p in front if p.evaluation.fits_memory), key=lambda p: p.objectives(), default=None)
    if best is None:
        return []
    perf = Mapping(tuple(StageMapping(st.start, st.stop, st.pus, st.assignment, st.order,
                                      tuple(ReplicaMapping(r.pus, r.assignment, r.order) for r in st.replicas))
                         for st in best.mapping.stages))
    sched, _ = schedutil_mapping(problem, perf)
    return [SearchPoint("performance", "governor", perf, evaluate(problem, perf, terms), list(best.stage_schedules)),
            SearchPoint("schedutil", "governor", sched, evaluate(problem, sched, terms), list(best.stage_schedules))]
