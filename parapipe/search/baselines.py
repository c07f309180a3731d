"""Baselines built from the same cost model and machinery as the parapipe search.

* ``single``: the whole model as one stage on one PU (every PU that can run every block).
* ``pipeline``: pure pipelining — stages of one PU each, every PU in at most one stage: the ``pipeline`` pass of
  :mod:`.passes` (the DP with single-PU stages only).
* ``parallel``: non-pipelined parallel execution — one stage holding every block over a group of at least two PUs
  (every such group; intra-stage schedule from list scheduling, polished by CP-SAT by the caller).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from ..cost.mapping import Mapping, StageMapping
from ..cost.problem import MappingProblem
from .stages import all_groups
from .listsched import schedule_ranges

__all__ = ["single_pu_mappings", "missing_single_pu", "parallel_mappings"]


def single_pu_mappings(problem: MappingProblem) -> List[Tuple[str, Mapping]]:
    """``(pu_name, mapping)`` for every PU that can run all blocks."""
    out = []
    n = problem.n_blocks
    for p, name in enumerate(problem.pu_names):
        if np.isfinite(problem.time_s[:, p]).all():
            out.append((name, Mapping((StageMapping(0, n, (p,), (p,) * n),))))
    return out


def missing_single_pu(problem: MappingProblem) -> Dict[str, str]:
    """``{"single-<pu>": why}`` for every PU that cannot run all blocks alone (so has no single-PU baseline):
    the first blocks it cannot run (op support, the profile's ``supported_ops``)."""
    out = {}
    for p, name in enumerate(problem.pu_names):
        bad = [problem.block_names[v] for v in np.flatnonzero(~np.isfinite(problem.time_s[:, p]))]
        if bad:
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            out[f"single-{name}"] = (f"{name} cannot run block{'s' if len(bad) > 1 else ''} "
                                     f"{', '.join(repr(b) for b in bad[:3])}{more} (its supported_ops)")
    return out


def parallel_mappings(problem: MappingProblem) -> List[Mapping]:
    """One stage holding every block, list-scheduled over each group of >= 2 PUs (distinct schedules only)."""
    n = problem.n_blocks
    out = []
    seen = set()
    for group in all_groups(problem.n_pus):
        if len(group) < 2:
            continue
        rs = schedule_ranges(problem, 0, group)
        assign = tuple(rs.assignment)
        used = tuple(sorted(set(assign)))
        # The list scheduler may leave PUs of the group idle (even all but one: that is its decision, and a fair
        # parallel baseline keeps it); groups that end with the same schedule are one mapping, kept once.
        if len(assign) < n or assign in seen:
            continue
        seen.add(assign)
        out.append(Mapping((StageMapping(0, n, used, assign),)))
    return out
