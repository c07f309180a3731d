"""The executor's tasks of a multi-PU stage, on block indices (pure: no ONNX, no runtime): the one split rule.

Walking the stage's schedule order, each PU's blocks form maximal runs; a block starts a new task when it needs
a result of another PU of the stage (so cross-PU inputs arrive only at a task's start), or when the previous
block of its PU feeds another PU of the stage (a task hands its outputs over when it ends, so ending it there
hands the result over as soon as it exists: without this an Inception fork and one of its branches would share a
task and the other PU's branches would wait for that branch). :func:`parapipe.execution.plan.build_plan` cuts
one sub-model per task; the cost model scales a task's blocks to its measured time when it has one
(:attr:`parapipe.cost.problem.MappingProblem.submodel_time_s`), since each task runs as one sub-model.
:func:`stage_submodels` lists every sub-model a set of mappings runs (whole single-PU stages and tasks).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Protocol, Sequence, Set, Tuple

from .mapping import Mapping, StageMapping
from .problem import SubmodelBlocks, block_range

__all__ = ["BlockDag", "stage_tasks", "stage_submodels"]


class _Dag(Protocol):
    """What the split rule reads of a DAG (read-only: a frozen :class:`BlockDag` or a problem's lists)."""

    @property
    def preds(self) -> Sequence[Sequence[int]]: ...

    @property
    def succs(self) -> Sequence[Sequence[int]]: ...


@dataclass(frozen=True)
class BlockDag:
    """The block DAG on block indices: ``preds[v]`` / ``succs[v]`` the producers / consumers of block ``v``
    (what :func:`stage_tasks` needs of a :class:`~parapipe.cost.problem.MappingProblem`)."""

    preds: Tuple[Tuple[int, ...], ...]
    succs: Tuple[Tuple[int, ...], ...]

    @classmethod
    def from_edges(cls, n_blocks: int, edges: Iterable[Tuple[int, int]]) -> "BlockDag":
        """The DAG of ``n_blocks`` blocks with the edges ``(u, v)`` (``u`` feeds ``v``), each listed once."""
        preds: List[List[int]] = [[] for _ in range(n_blocks)]
        succs: List[List[int]] = [[] for _ in range(n_blocks)]
        for u, v in sorted(set(edges)):
            preds[v].append(u)
            succs[u].append(v)
        return cls(tuple(map(tuple, preds)), tuple(map(tuple, succs)))


def stage_tasks(dag: _Dag, stage: StageMapping) -> List[Tuple[int, Tuple[int, ...]]]:
    """``[(pu, blocks), ...]`` of ``stage`` (a :class:`parapipe.cost.mapping.StageMapping`; ``dag`` a
    :class:`BlockDag` or a :class:`~parapipe.cost.problem.MappingProblem`): PU by PU in ``stage.pus`` order, each
    task's blocks in the stage's schedule order (the split rule in the module docstring)."""
    def other_pu(b: int, pu: int) -> bool:
        return stage.start <= b < stage.stop and stage.pu_of(b) != pu

    order = stage.block_order()
    tasks: List[Tuple[int, List[int]]] = []
    for pu in stage.pus:
        current: Optional[List[int]] = None
        for v in order:
            if stage.pu_of(v) != pu:
                continue
            needs_other = any(other_pu(u, pu) for u in dag.preds[v])
            prev_feeds_other = current is not None and any(other_pu(w, pu) for w in dag.succs[current[-1]])
            if current is None or needs_other or prev_feeds_other:
                current = []
                tasks.append((pu, current))
            current.append(v)
    return [(pu, tuple(blocks)) for pu, blocks in tasks]


def stage_submodels(dag: _Dag, mappings: Iterable[Mapping]) -> List[SubmodelBlocks]:
    """What the executor runs as one sub-model in ``mappings`` (:class:`parapipe.cost.mapping.Mapping`), sorted
    and without repeats: the blocks of every single-PU stage or replica (``start..stop-1``) and the sorted
    blocks of every task (:func:`stage_tasks`) of a multi-PU stage or replica."""
    out: Set[SubmodelBlocks] = set()
    for mapping in mappings:
        for st in mapping.stages:
            for view in st.replica_stages():
                if len(view.pus) > 1:
                    out.update(tuple(sorted(blocks)) for _, blocks in stage_tasks(dag, view))
                else:
                    out.add(block_range(st.start, st.stop))
    return sorted(out)
