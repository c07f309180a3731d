"""The executor's tasks of a multi-PU stage, on block indices (pure: no ONNX, no runtime).

The same split rule as :func:`parapipe.runtime.plan.build_plan` (which works on block names and builds the
sub-models): walking the stage's schedule order, each PU's blocks form maximal runs; a block starts a new task
when it needs a result of another PU of the stage, or when the previous block of its PU feeds another PU of the
stage (a task hands its outputs over when it ends). Each task runs as one sub-model, so a stage-level time of
the task (:attr:`parapipe.cost.problem.MappingProblem.task_time_s`) describes it better than its blocks' sum.
"""
from __future__ import annotations

from typing import List, Tuple

from .problem import MappingProblem

__all__ = ["stage_tasks"]


def stage_tasks(problem: MappingProblem, stage) -> List[Tuple[int, Tuple[int, ...]]]:
    """``[(pu, blocks), ...]`` of ``stage`` (a :class:`parapipe.cost.evaluate.StageMapping`), in the order
    :func:`parapipe.runtime.plan.build_plan` makes them: PU by PU in ``stage.pus`` order, each task's blocks in
    the stage's schedule order."""
    def other_pu(b: int, pu: int) -> bool:
        return stage.start <= b < stage.stop and stage.pu_of(b) != pu

    order = stage.block_order()
    tasks: List[Tuple[int, List[int]]] = []
    for pu in stage.pus:
        current = None
        for v in order:
            if stage.pu_of(v) != pu:
                continue
            needs_other = any(other_pu(u, pu) for u in problem.preds[v])
            prev_feeds_other = current is not None and any(other_pu(w, pu) for w in problem.succs[current[-1]])
            if current is None or needs_other or prev_feeds_other:
                current = []
                tasks.append((pu, current))
            current.append(v)
    return [(pu, tuple(blocks)) for pu, blocks in tasks]


def stage_block_sets(problem: MappingProblem, mappings) -> Tuple[List[Tuple[int, int]], List[Tuple[int, ...]]]:
    """What the executor runs as one sub-model in ``mappings`` (:class:`parapipe.cost.evaluate.Mapping`):
    ``(ranges, tasks)``, each sorted and without repeats: ``(start, stop)`` of every single-PU stage or replica,
    and the sorted block indices of every task (:func:`stage_tasks`) of a multi-PU stage or replica."""
    ranges, tasks = set(), set()
    for mapping in mappings:
        for st in mapping.stages:
            for view in st.replica_stages():
                if len(view.pus) > 1:
                    tasks.update(tuple(sorted(blocks)) for _, blocks in stage_tasks(problem, view))
                else:
                    ranges.add((st.start, st.stop))
    return sorted(ranges), sorted(tasks)
