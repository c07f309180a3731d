"""Greedy list scheduling of a block range on a PU group (HEFT-style earliest finish time).

For a fixed first block ``start`` and PU group, blocks are taken in topological order and each goes to the PU of
the group where it finishes first (ties: lower dynamic energy, then group order). Appending a block never changes
earlier decisions, so one pass yields the schedule of every range ``[start, stop)`` at once — the property the
dynamic programme relies on (Topcuoglu et al., "Performance-effective and low-complexity task scheduling for
heterogeneous computing", IEEE TPDS 2002, with the topological order as priority list).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..cost.problem import MappingProblem

__all__ = ["RangeSchedules", "schedule_ranges"]


@dataclass
class RangeSchedules:
    """Schedules of ``[start, stop)`` on ``group`` for every feasible ``stop``.

    ``assignment[i]`` is the PU of block ``start + i``; ``makespan_s[i]`` and ``dyn_energy_j[i]`` are those of the
    range ``[start, start + i + 1)``. Arrays stop at the first block no PU of the group can run.
    """

    start: int
    group: tuple
    assignment: List[int]
    makespan_s: np.ndarray
    dyn_energy_j: np.ndarray


def schedule_ranges(problem: MappingProblem, start: int, group: Sequence[int], stop_max: Optional[int] = None
                    ) -> RangeSchedules:
    """Greedy EFT schedules of ``[start, stop)`` on ``group`` for all ``stop`` up to ``stop_max``.

    Cost: O((stop_max - start) · |group| · in-degree).
    """
    n = problem.n_blocks if stop_max is None else stop_max
    group = tuple(group)
    rows = problem.rows()
    t, dynp = rows.time_s, rows.dyn_power_w
    alpha, beta = rows.alpha_s, rows.beta_bytes_per_s
    preds = problem.preds
    edges = problem.edge_nbytes
    pu_free = {p: 0.0 for p in group}
    finish: Dict[int, float] = {}
    pu_of: Dict[int, int] = {}
    assignment: List[int] = []
    makespans: List[float] = []
    dyns: List[float] = []
    makespan = 0.0
    dyn = 0.0
    single = len(group) == 1
    inf = math.inf
    for v in range(start, n):
        best = None
        tv_row, dv_row = t[v], dynp[v]
        inner = [(u, finish[u], pu_of[u], edges.get((u, v), 0.0)) for u in preds[v] if u >= start]
        for p in group:
            tv = tv_row[p]
            if tv == inf:
                continue
            ready = 0.0
            for u, fu, pu, nb in inner:
                if not single and pu != p and nb > 0:
                    fu += alpha[pu][p] + nb / beta[pu][p]
                if fu > ready:
                    ready = fu
            s = pu_free[p] if pu_free[p] > ready else ready
            f = s + tv
            e = tv * dv_row[p]
            if best is None or (f, e) < best[0]:
                best = ((f, e), p, f, e)
        if best is None:
            break
        _, p, f, e = best
        pu_free[p] = f
        finish[v] = f
        pu_of[v] = p
        assignment.append(p)
        if f > makespan:
            makespan = f
        dyn += e
        makespans.append(makespan)
        dyns.append(dyn)
    return RangeSchedules(start=start, group=group, assignment=assignment, makespan_s=np.array(makespans),
                          dyn_energy_j=np.array(dyns))
