"""Stage-level times on ``--soc host``: the stages of chosen mappings timed as the executor runs them.

The search ranks mappings by sums of block times, and isolated blocks mislead on stages (a stage sub-model ran
0.7-1.4x its blocks' sum on the zoo models: fusions across blocks, cache effects); on ``--soc host`` the machine
that searches can also run the stages, so the leading candidates' stages are timed as sub-models and the search
runs again with those times (:func:`parapipe.app.optimize.search_prepared`); ``evaluate --soc host`` times the
stages of the mappings it is given (:func:`time_mapping_stages`).

A problem is never changed in place: the times go into a new
:class:`~parapipe.cost.problem.MappingProblem` (``range_time_s`` / ``task_time_s``, every core alike: the host's
cores are identical PUs) inside a new :class:`~parapipe.app.prepare.Prepared`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from parapipe.app.prepare import Prepared, timed_loaded
from parapipe.cost.mapping import Mapping as CostMapping
from parapipe.cost.problem import MappingProblem
from parapipe.search.api import SearchPoint, SearchResult

log = logging.getLogger(__name__)

__all__ = ["STAGE_TIMING_POINTS", "STAGE_TIMING_MARGIN", "STAGE_TIMING_ROUNDS", "Range", "BlockSet", "Measure",
           "TimedStages", "time_mapping_stages", "with_stage_times", "stage_timed_ids", "leading_points"]

STAGE_TIMING_POINTS = 3
"""``--soc host``: the front points of highest throughput whose stages are timed as sub-models after the search
(:func:`parapipe.app.optimize.search_prepared`; ``optimize --time-stages``)."""
STAGE_TIMING_MARGIN = 0.15
"""Only points whose predicted throughput is within this fraction of the best are timed: a point further behind
would need a larger error to lead than the host model makes (leave-one-out worst period error 12.7 %, printed by
``python benchmarks/fidelity.py``)."""
STAGE_TIMING_ROUNDS = 3
"""Most measure-and-search-again rounds of :func:`parapipe.app.optimize.search_prepared` (each round times only
what earlier rounds did not; on the zoo models the leading points were all timed after 1-2 rounds)."""

Range = Tuple[int, int]
"""``(start, stop)``: blocks ``start <= j < stop`` run as one sub-model (a single-PU stage or replica)."""
BlockSet = Tuple[int, ...]
"""Sorted block indices run as one sub-model (a task of a multi-PU stage or replica)."""
Measure = Callable[[List[Range], List[BlockSet], bool], Tuple[Mapping[Range, float], Mapping[BlockSet, float]]]
"""``measure(ranges, tasks, loaded) -> (range_s, task_s)``: seconds per sub-model, timed with every other core
running it too when ``loaded``."""


@dataclass(frozen=True)
class TimedStages:
    """What :func:`time_mapping_stages` timed, and the prepared problem with those times installed."""

    prepared: Prepared
    ranges: List[Range]
    tasks: List[BlockSet]


def with_stage_times(problem: MappingProblem, range_s: Mapping[Range, float],
                     task_s: Mapping[BlockSet, float]) -> MappingProblem:
    """A new problem: ``problem`` with the stage-level times ``range_s`` / ``task_s`` (s) added to its
    ``range_time_s`` / ``task_time_s`` for every PU alike (identical cores); ``problem`` is left as it was."""
    ranges: Dict[Tuple[int, int, int], float] = {**(problem.range_time_s or {}), **{
        (a, b, p): t for (a, b), t in range_s.items() for p in range(problem.n_pus)}}
    tasks: Dict[Tuple[int, BlockSet], float] = {**(problem.task_time_s or {}), **{
        (p, blocks): t for blocks, t in task_s.items() for p in range(problem.n_pus)}}
    return replace(problem, range_time_s=ranges or None, task_time_s=tasks or None)


def stage_timed_ids(problem: MappingProblem, points: Sequence[SearchPoint]) -> List[str]:
    """Ids of ``points`` whose every sub-model (:func:`parapipe.cost.tasks.stage_block_sets`) has a stage-level
    time in ``problem`` (``range_time_s`` / ``task_time_s``): their figures come from stages timed as the
    executor runs them, the others' from block sums."""
    from parapipe.cost.tasks import stage_block_sets

    have_ranges = {(a, b) for a, b, _ in (problem.range_time_s or {})}
    have_tasks = {blocks for _, blocks in (problem.task_time_s or {})}
    out = []
    for p in points:
        ranges, tasks = stage_block_sets(problem, [p.mapping])
        if all(r in have_ranges for r in ranges) and all(t in have_tasks for t in tasks):
            out.append(p.id)
    return out


def time_mapping_stages(prep: Prepared, mappings: Sequence[CostMapping], passes: int = 3,
                        measure: Optional[Measure] = None,
                        skip: Tuple[Collection[Range], Collection[BlockSet]] = ((), ())) -> TimedStages:
    """Time the stages of ``mappings`` on this machine as the executor runs them (one sub-model per single-PU
    stage, replica or task, :func:`parapipe.cost.tasks.stage_block_sets`), so that
    :func:`parapipe.cost.evaluate.evaluate` on the returned problem predicts what
    :func:`parapipe.app.optimize.search_prepared` predicts for them. Ranges and tasks in ``skip`` (two
    collections) are not timed again. Timed loaded unless ``prep.terms`` model co-running
    (:func:`parapipe.app.prepare.timed_loaded`).

    ``measure`` replaces the host measurement (default :func:`parapipe.measure.local.measure_stages` with
    ``passes``). Returns the ranges and tasks timed and ``prep`` with their times installed
    (:func:`with_stage_times`); nothing is timed, and ``prep`` comes back as it is, when ``prep`` is not
    ``--soc host`` or everything is in ``skip``.

    Raises
    ------
    parapipe.errors.ExecutionError
        A sub-model cannot be built or run.
    """
    from parapipe.cost.tasks import stage_block_sets

    if not prep.host:
        return TimedStages(prep, [], [])
    if measure is None:
        from parapipe.measure.local import measure_stages

        def measure(ranges: List[Range], tasks: List[BlockSet], loaded: bool):
            return measure_stages(prep.block_graph, ranges, tasks, loaded, passes=passes, feeds=prep.host_feeds)
    problem = prep.problem
    ranges, tasks = stage_block_sets(problem, list(mappings))
    ranges = [r for r in ranges if r not in skip[0]]
    tasks = [t for t in tasks if t not in skip[1]]
    if not (ranges or tasks):
        return TimedStages(prep, [], [])
    log.info("timing %d stage range(s) and %d task(s) of %s", len(ranges), len(tasks), problem.name)
    range_s, task_s = measure(ranges, tasks, timed_loaded(prep.terms))
    timed = replace(prep, problem=with_stage_times(problem, range_s, task_s))
    return TimedStages(timed, list(range_s), list(task_s))


def leading_points(result: SearchResult, count: int) -> List[SearchPoint]:
    """The ``count`` front points of highest throughput within :data:`STAGE_TIMING_MARGIN` of the best
    predicted throughput, and the replicated baseline(s) wherever they stand: their whole-model time, taken once
    when the blocks were measured, can come out slow enough to push them out of the margin (shufflenet on two
    cores: 2.26-3.15 ms over five runs), and they are what a pipeline has to beat."""
    front = sorted(result.front(), key=lambda p: p.objectives())[:count]
    best_s = min(p.evaluation.period_s for p in front)
    return [p for p in front if p.evaluation.period_s * (1.0 - STAGE_TIMING_MARGIN) <= best_s] + result.front(
        "replicated")
