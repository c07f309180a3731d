"""Stage-level times on ``--soc host``: the stages of chosen mappings timed as the executor runs them.

The search ranks mappings by sums of block times, and isolated blocks mislead on stages (a stage sub-model ran
0.7-1.4x its blocks' sum on the zoo models: fusions across blocks, cache effects); on ``--soc host`` the machine
that searches can also run the stages, so the leading candidates' stages are timed as sub-models and the search
runs again with those times (:func:`parapipe.app.optimize.search_prepared`); ``evaluate --soc host`` times the
stages of the mappings it is given (:func:`time_mapping_stages`).

A problem is never changed in place: the times go into a new
:class:`~parapipe.cost.problem.MappingProblem` (``submodel_time_s``, every core alike: the host's cores are
identical PUs) inside a new :class:`~parapipe.app.prepare.Prepared`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Collection, Dict, Iterable, List, Mapping, Optional, Sequence

from parapipe.app.prepare import Prepared, timed_loaded
from parapipe.cost.mapping import Mapping as CostMapping
from parapipe.cost.problem import MappingProblem, SubmodelBlocks, SubmodelKey, is_block_range
from parapipe.cost.tasks import stage_submodels
from parapipe.measure.trust import StepProgress
from parapipe.search.api import SearchPoint, SearchResult

log = logging.getLogger(__name__)

__all__ = ["STAGE_TIMING_POINTS", "STAGE_TIMING_MARGIN", "STAGE_TIMING_ROUNDS", "Measure", "TimedStages",
           "time_mapping_stages", "with_submodel_times", "submodel_counts", "stage_timed_ids", "leading_points"]

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

Measure = Callable[[List[SubmodelBlocks], bool], Mapping[SubmodelBlocks, float]]
"""``measure(submodels, loaded) -> {blocks: seconds}``: each sub-model (sorted block indices) timed as one, with
every other core running it too when ``loaded``."""


@dataclass(frozen=True)
class TimedStages:
    """What :func:`time_mapping_stages` timed (``submodels``: sorted block indices of each), and the prepared
    problem with those times installed."""

    prepared: Prepared
    submodels: List[SubmodelBlocks]


def with_submodel_times(problem: MappingProblem, times_s: Mapping[SubmodelBlocks, float]) -> MappingProblem:
    """A new problem: ``problem`` with the sub-model times ``times_s`` (s, keyed by sorted block indices) added to
    its ``submodel_time_s`` for every PU alike (identical cores); ``problem`` is left as it was."""
    merged: Dict[SubmodelKey, float] = {**(problem.submodel_time_s or {}), **{
        (p, blocks): t for blocks, t in times_s.items() for p in range(problem.n_pus)}}
    return replace(problem, submodel_time_s=merged or None)


def submodel_counts(submodels: Iterable[SubmodelBlocks]) -> Dict[str, int]:
    """``{"ranges": n, "tasks": m}``: how many of ``submodels`` are a contiguous range of blocks (what a single-PU
    stage runs) and how many are not (only a multi-PU stage's task runs them); the counts pareto.json's
    ``search.stage_timing`` and ``evaluate --soc host`` report."""
    blocks = list(submodels)
    ranges = sum(1 for b in blocks if is_block_range(b))
    return {"ranges": ranges, "tasks": len(blocks) - ranges}


def stage_timed_ids(problem: MappingProblem, points: Sequence[SearchPoint]) -> List[str]:
    """Ids of ``points`` whose every sub-model (:func:`parapipe.cost.tasks.stage_submodels`) has a stage-level
    time in ``problem`` (``submodel_time_s``, on some PU: the host's cores are identical): their figures come from
    stages timed as the executor runs them, the others' from block sums."""
    have = {blocks for _, blocks in (problem.submodel_time_s or {})}
    return [p.id for p in points if all(b in have for b in stage_submodels(problem, [p.mapping]))]


def time_mapping_stages(prep: Prepared, mappings: Sequence[CostMapping], passes: int = 3,
                        measure: Optional[Measure] = None, skip: Collection[SubmodelBlocks] = (),
                        progress: Optional[StepProgress] = None) -> TimedStages:
    """Time the stages of ``mappings`` on this machine as the executor runs them (one sub-model per single-PU
    stage, replica or task, :func:`parapipe.cost.tasks.stage_submodels`), so that
    :func:`parapipe.cost.evaluate.evaluate` on the returned problem predicts what
    :func:`parapipe.app.optimize.search_prepared` predicts for them. Sub-models in ``skip`` are not timed again.
    Timed loaded unless ``prep.terms`` model co-running (:func:`parapipe.app.prepare.timed_loaded`).

    ``measure`` replaces the host measurement (default :func:`parapipe.measure.submodels.measure_submodels` with
    ``passes`` and :data:`~parapipe.measure.submodels.STAGE_MIN_S`). Returns the sub-models timed and ``prep``
    with their times installed (:func:`with_submodel_times`); nothing is timed, and ``prep`` comes back as it is,
    when ``prep`` is not ``--soc host`` or everything is in ``skip``. The default measurement adds each timing's
    spread and load to ``prep.measure_log`` and reports ``progress("timing stages", done, total)``.

    Raises
    ------
    parapipe.errors.ExecutionError
        A sub-model cannot be built or run.
    """
    if not prep.host:
        return TimedStages(prep, [])
    if measure is None:
        from parapipe.measure.submodels import STAGE_MIN_S, measure_submodels

        def measure(submodels: List[SubmodelBlocks], loaded: bool) -> Mapping[SubmodelBlocks, float]:
            return measure_submodels(prep.block_graph, submodels, loaded=loaded, passes=passes,
                                     feeds=prep.host_feeds, min_s=STAGE_MIN_S, record=prep.measure_log,
                                     progress=None if progress is None else
                                     (lambda done, total: progress("timing stages", done, total)))
    problem = prep.problem
    wanted = [b for b in stage_submodels(problem, list(mappings)) if b not in skip]
    if not wanted:
        return TimedStages(prep, [])
    log.info("timing %d stage sub-model(s) of %s", len(wanted), problem.name)
    times_s = measure(wanted, timed_loaded(prep.terms))
    timed = replace(prep, problem=with_submodel_times(problem, times_s))
    return TimedStages(timed, list(times_s))


def leading_points(result: SearchResult, count: int) -> List[SearchPoint]:
    """The ``count`` front points of highest throughput within :data:`STAGE_TIMING_MARGIN` of the best
    predicted throughput, and the replicated baseline(s) wherever they stand: their whole-model time, taken once
    when the blocks were measured, can come out slow enough to push them out of the margin (shufflenet on two
    cores: 2.26-3.15 ms over five runs), and they are what a pipeline has to beat."""
    front = sorted(result.front(), key=lambda p: p.objectives())[:count]
    best_s = min(p.evaluation.period_s for p in front)
    return [p for p in front if p.evaluation.period_s * (1.0 - STAGE_TIMING_MARGIN) <= best_s] + result.front(
        "replicated")
