"""The index form of a mapping: what the search builds and the cost model evaluates.

Blocks and PUs are indices into a :class:`parapipe.cost.problem.MappingProblem` (``block_names``,
``pu_names``). Its twin above the search is the typed document (:mod:`parapipe.mapping`); the one converter
between the two is :mod:`parapipe.mapping.index` (names -> indices) and :func:`parapipe.mapping.doc_from_result`
(indices -> names). The structural rules both forms obey are :mod:`parapipe.cost.rules`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from .problem import MappingProblem

__all__ = ["ReplicaMapping", "StageMapping", "Mapping", "mapping_from_pu_list"]


@dataclass(frozen=True)
class ReplicaMapping:
    """One more copy of a stage's block range on its own PUs (see :class:`StageMapping`).

    ``pus`` are PU indices (disjoint from the stage's and from its other replicas'); ``assignment[i]`` is the PU
    of block ``start + i``; ``order`` the schedule order (default the block order); ``ops`` the operating point
    of each PU of ``pus`` (see :class:`StageMapping`).
    """

    pus: Tuple[int, ...]
    assignment: Tuple[int, ...]
    order: Optional[Tuple[int, ...]] = None
    ops: Optional[Tuple[int, ...]] = None


@dataclass(frozen=True)
class StageMapping:
    """One stage: blocks ``[start, stop)`` of the topological order on PU indices ``pus``.

    ``assignment[i]`` is the PU index of block ``start + i`` (must be in ``pus``); ``order`` is the schedule order
    of the stage's block indices (a topological order; default ``range(start, stop)``).

    ``replicas`` (default none) makes it a replicated stage: each :class:`ReplicaMapping` runs the same blocks on
    its own PUs, and ``pus``/``assignment``/``order``/``ops`` describe the first replica.

    ``ops[i]`` is the operating point (an index into the PU's table,
    :attr:`parapipe.cost.problem.MappingProblem.operating_points`) that PU ``pus[i]`` runs this stage at;
    None (default) runs every PU at its highest point.

    Raises
    ------
    ValueError
        On construction, when ``stop <= start``, an ``assignment`` (the stage's or a replica's) does not give
        one PU per block of ``[start, stop)``, or ``ops`` does not give one point per PU.
    """

    start: int
    stop: int
    pus: Tuple[int, ...]
    assignment: Tuple[int, ...]
    order: Optional[Tuple[int, ...]] = None
    replicas: Tuple[ReplicaMapping, ...] = ()
    ops: Optional[Tuple[int, ...]] = None

    def __post_init__(self) -> None:
        n = self.stop - self.start
        if n <= 0 or len(self.assignment) != n or any(len(r.assignment) != n for r in self.replicas):
            raise ValueError(f"stage {self.start}:{self.stop} needs one PU per block in its assignment(s), got "
                             f"{[len(self.assignment)] + [len(r.assignment) for r in self.replicas]}")
        for pus, ops in [(self.pus, self.ops)] + [(r.pus, r.ops) for r in self.replicas]:
            if ops is not None and len(ops) != len(pus):
                raise ValueError(f"stage {self.start}:{self.stop} needs one operating point per PU {pus}, got {ops}")

    def op_choice(self) -> Tuple[Tuple[int, int], ...]:
        """``((pu, op), ...)`` of this stage's own PUs (empty when ``ops`` is None): the key of
        :meth:`parapipe.cost.problem.MappingProblem.at_operating_points`."""
        return () if self.ops is None else tuple(zip(self.pus, self.ops))

    def op_of(self, pu: int) -> Optional[int]:
        """The operating point PU index ``pu`` runs this stage at (None: its highest)."""
        if self.ops is None:
            return None
        return self.ops[self.pus.index(pu)]

    @property
    def blocks(self) -> range:
        """The stage's block indices, ``range(start, stop)``."""
        return range(self.start, self.stop)

    def block_order(self) -> Tuple[int, ...]:
        """``order``, or the block order when not given."""
        return self.order if self.order is not None else tuple(range(self.start, self.stop))

    def pu_of(self, block: int) -> int:
        """The PU index running ``block``."""
        return self.assignment[block - self.start]

    def replica_stages(self) -> Tuple["StageMapping", ...]:
        """Every replica as a plain stage over the same blocks, this stage's own PUs first (``(self,)`` when
        not replicated)."""
        if not self.replicas:
            return (self,)
        first = StageMapping(self.start, self.stop, self.pus, self.assignment, self.order, ops=self.ops)
        return (first,) + tuple(StageMapping(self.start, self.stop, r.pus, r.assignment, r.order, ops=r.ops)
                                for r in self.replicas)

    def all_pus(self) -> Tuple[int, ...]:
        """PUs of every replica, the stage's own first."""
        return tuple(p for st in self.replica_stages() for p in st.pus)


@dataclass(frozen=True)
class Mapping:
    """A hierarchical mapping: stages in pipeline order covering every block exactly once
    (:func:`parapipe.cost.rules.check_stages`)."""

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

    @property
    def has_ops(self) -> bool:
        """True if some stage (or replica) states operating points."""
        return any(view.ops is not None for st in self.stages for view in st.replica_stages())


def mapping_from_pu_list(problem: "MappingProblem", pus: Sequence[int]) -> Mapping:
    """Mapping from one PU index per block of ``problem``: runs of the same PU form a stage (``gpu,gpu,big,gpu``
    → 3 stages).

    Raises
    ------
    ValueError
        ``pus`` does not give one PU per block.
    """
    if len(pus) != problem.n_blocks:
        raise ValueError(f"need one PU per block ({problem.n_blocks}), got {len(pus)}")
    stages = []
    start = 0
    for i in range(1, len(pus) + 1):
        if i == len(pus) or pus[i] != pus[start]:
            stages.append(StageMapping(start, i, (pus[start],), tuple(pus[start:i])))
            start = i
    return Mapping(tuple(stages))
