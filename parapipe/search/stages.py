"""Stage kinds: the stages the outer DP (:mod:`.dp`) may place, as runs over every stop of a block range.

A *stage kind* decides how one stage's blocks run on its PUs. The DP never looks inside a kind: it asks, for a
first block ``start``, for :class:`StageRun` records (one per PU group the kind can use) and reads from each, for
every stop ``start < stop <= n``, the stage's makespan, dynamic energy, the PU of every block, and whether that
stop is a stage of this kind. Two kinds exist:

* ``single-pu``: every block of the stage on one PU, run in topological order (makespan = sum of block times).
* ``list-scheduled``: a group of at least two PUs, blocks placed by the greedy earliest-finish-time list
  scheduler of :mod:`.listsched`. A stop where the scheduler left a PU of the group idle is not offered: the
  subgroup of the PUs it used gives the same schedule (the scheduler's choices never involved the idle PU) and
  reserves fewer PUs, so it weakly dominates.

Adding a kind (for example a stage replicated over several PUs that take frames in turn) means adding a builder
to :data:`KIND_BUILDERS` that returns runs with their own ``busy_share`` (the busy time each PU of the group is
charged per unit of stage time; 1 for the two kinds here) and teaching :func:`parapipe.cost.evaluate.evaluate`
the same rule; the DP's labels, pruning and rebuilding stay as they are.

**Operating points.** Given ``op_sets`` (per PU, the indices of the operating points the search may use,
:class:`parapipe.cost.problem.PUOperatingPoints`), :func:`stage_runs` builds one run per combination of points of
the group's PUs, on :meth:`parapipe.cost.problem.MappingProblem.at_operating_points` of that combination (the list
scheduler then places blocks with the times and powers of those points), each run recording its ``ops``.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, product
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..cost.problem import MappingProblem
from .listsched import schedule_ranges

__all__ = ["STAGE_KINDS", "all_groups", "StageRun", "single_pu_runs", "list_scheduled_runs", "KIND_BUILDERS",
           "op_combinations", "stage_runs"]

STAGE_KINDS = ("single-pu", "list-scheduled")
"""Stage kinds the search uses by default (see the module docstring)."""


def all_groups(k: int, max_size: Optional[int] = None) -> List[Tuple[int, ...]]:
    """Every non-empty subset of ``range(k)`` with at most ``max_size`` members, smallest first."""
    top = k if max_size is None else min(k, max_size)
    return [g for r in range(1, top + 1) for g in combinations(range(k), r)]


@dataclass
class StageRun:
    """Stages of one kind on one PU group starting at block ``start``, for every stop the kind allows.

    Attributes
    ----------
    kind : str
        One of :data:`STAGE_KINDS`.
    start : int
        First block of every stage of the run.
    group : tuple of int
        PU indices of the group (sorted).
    assignment : tuple of int, length m
        PU of blocks ``start .. start + m - 1``; the stage ``[start, stop)`` uses the first ``stop - start``
        entries (every kind here has this prefix property: appending a block never changes earlier decisions).
    makespan_s : ndarray, shape (m,)
        ``makespan_s[i]``: makespan of the stage ``[start, start + i + 1)`` without its input transfers, seconds.
    dyn_energy_j : ndarray, shape (m,)
        Dynamic energy (``sum (p_active - p_idle) * t``) of the same stage, joules.
    valid : ndarray of bool, shape (m,)
        Whether the stop ``start + i + 1`` is a stage of this kind.
    busy_share : ndarray, shape (k,)
        Busy time charged to each PU per second of stage time (1 on the group's PUs, 0 elsewhere).
    ops : tuple of int or None
        Operating point of each PU of ``group`` (an index into its table); None: every PU at its highest point.
    """

    kind: str
    start: int
    group: Tuple[int, ...]
    assignment: Tuple[int, ...]
    makespan_s: np.ndarray
    dyn_energy_j: np.ndarray
    valid: np.ndarray
    busy_share: np.ndarray
    ops: Optional[Tuple[int, ...]] = None

    @property
    def mask(self) -> int:
        """Bit mask of the group's PUs."""
        return sum(1 << p for p in self.group)

    def op_choice(self) -> Tuple[Tuple[int, int], ...]:
        """``((pu, op), ...)`` of the group (empty when ``ops`` is None)."""
        return () if self.ops is None else tuple(zip(self.group, self.ops))

    def op_of(self, pu: int) -> Optional[int]:
        """The point PU ``pu`` of the group runs at (None: its highest)."""
        return None if self.ops is None else self.ops[self.group.index(pu)]


def _share(problem: MappingProblem, group: Sequence[int]) -> np.ndarray:
    share = np.zeros(problem.n_pus)
    share[list(group)] = 1.0
    return share


def single_pu_runs(problem: MappingProblem, start: int, groups: Sequence[Tuple[int, ...]]) -> List[StageRun]:
    """``single-pu`` runs from ``start``: one per singleton group of ``groups`` whose PU runs block ``start``."""
    t = problem.time_s
    out = []
    for g in groups:
        if len(g) != 1:
            continue
        p = g[0]
        col = t[start:, p]
        bad = np.flatnonzero(~np.isfinite(col))
        m = int(bad[0]) if len(bad) else len(col)
        if m == 0:
            continue
        times = col[:m]
        dyn = times * (problem.active_power_w[start:start + m, p] - problem.idle_power_w[p])
        out.append(StageRun("single-pu", start, (p,), (p,) * m, np.cumsum(times), np.cumsum(dyn),
                            np.ones(m, dtype=bool), _share(problem, g)))
    return out


def list_scheduled_runs(problem: MappingProblem, start: int, groups: Sequence[Tuple[int, ...]]
                        ) -> List[StageRun]:
    """``list-scheduled`` runs from ``start``: one per group of ``groups`` with at least two PUs."""
    out = []
    for g in groups:
        if len(g) < 2:
            continue
        rs = schedule_ranges(problem, start, g)
        m = len(rs.assignment)
        if m == 0:
            continue
        valid = np.zeros(m, dtype=bool)
        seen = set()
        for i, p in enumerate(rs.assignment):
            seen.add(p)
            valid[i] = len(seen) == len(g)
        if valid.any():
            out.append(StageRun("list-scheduled", start, tuple(g), tuple(rs.assignment), rs.makespan_s,
                                rs.dyn_energy_j, valid, _share(problem, g)))
    return out


KIND_BUILDERS: Dict[str, Callable[[MappingProblem, int, Sequence[Tuple[int, ...]]], List[StageRun]]] = {
    "single-pu": single_pu_runs,
    "list-scheduled": list_scheduled_runs,
}
"""Stage kind name -> builder ``(problem, start, groups) -> runs``."""


def op_combinations(problem: MappingProblem, group: Sequence[int],
                    op_sets: Optional[Sequence[Sequence[int]]]) -> List[Optional[Tuple[int, ...]]]:
    """The operating-point combinations of ``group``'s PUs (``ops`` tuples, None for every PU at its highest
    point) that ``op_sets`` allows, highest first; ``[None]`` without ``op_sets``."""
    if op_sets is None:
        return [None]
    out: List[Optional[Tuple[int, ...]]] = []
    for combo in product(*(sorted(op_sets[p], reverse=True) for p in group)):
        out.append(None if all(o == problem.max_op(p) for p, o in zip(group, combo)) else tuple(combo))
    return out


def stage_runs(problem: MappingProblem, start: int, groups: Sequence[Tuple[int, ...]],
               kinds: Sequence[str] = STAGE_KINDS, op_sets: Optional[Sequence[Sequence[int]]] = None
               ) -> List[StageRun]:
    """Every run of the given ``kinds`` starting at block ``start`` on the allowed ``groups``, one per
    combination of operating points of the group's PUs in ``op_sets`` (module docstring; None: the highest).

    Raises
    ------
    ValueError
        An unknown kind.
    """
    out: List[StageRun] = []
    for kind in kinds:
        try:
            builder = KIND_BUILDERS[kind]
        except KeyError:
            raise ValueError(f"unknown stage kind {kind!r}; known: {', '.join(KIND_BUILDERS)}") from None
        if op_sets is None:
            out.extend(builder(problem, start, groups))
            continue
        for g in groups:
            for ops in op_combinations(problem, g, op_sets):
                sub = problem if ops is None else problem.at_operating_points(tuple(zip(g, ops)))
                for run in builder(sub, start, [g]):
                    run.ops = ops
                    out.append(run)
    return out
