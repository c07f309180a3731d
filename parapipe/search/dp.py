"""Outer level of the hierarchical search: dynamic programming over stage boundaries × PU groups.

Blocks are in a topological order; a stage is a contiguous range ``[i, j)`` of that order (a downward-closed cut,
as in PipeDream's DP) placed on a PU group ``G`` with the greedy schedule of :mod:`.listsched`. States are
``(i, used PUs, PUs of the live producers at i[, number of stages])``: the live producers are the blocks before
``i`` whose outputs are read at or after ``i``, and their PUs are exactly what the next stages' input transfers
depend on. Each state keeps the Pareto set of its labels; every final objective is monotone in the label, so
keeping only non-dominated labels loses no Pareto-optimal mapping of the space searched.

Two spaces:

* ``reuse_pus=False`` (default): each PU serves at most one stage (the stage groups are disjoint). The period is
  then the largest stage time and a label is ``(max T_s, latency, E_dyn)`` — three numbers — with
  ``energy = E_dyn + (ΣP_idle + P_static)·period``. Fast: the states number at most n · 2^k · (live PU maps).
* ``reuse_pus=True``: a PU may serve several non-adjacent stages (its busy time is the sum); the label carries the
  busy time of every PU, ``(busy_1..busy_k, latency, E_dyn)``. Exact but its label sets grow quickly with k; used
  on small problems and by tests.

With ``epsilon = 0`` and no label cap the result is the exact front of the space (a test checks it against brute
force); ``epsilon > 0`` merges labels closer than ``epsilon`` × the total work on a grid (ε-dominance, Laumanns et
al., Evolutionary Computation 10(3), 2002) to bound the work on large graphs.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from itertools import combinations
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..cost.evaluate import Mapping, StageMapping
from ..cost.problem import MappingProblem
from .listsched import RangeSchedules, schedule_ranges
from .pareto import pareto_mask

log = logging.getLogger(__name__)


@dataclass
class DPOptions:
    """Options of :func:`dp_front`.

    Attributes
    ----------
    groups : list of tuple of int or None
        PU groups a stage may use (PU indices); ``None`` = every non-empty subset of at most ``max_group_size``.
    max_group_size : int or None
        Largest group when ``groups`` is None (None = all PUs).
    max_stages : int or None
        Most stages in a mapping (None = unbounded).
    epsilon : float
        Relative grid for label merging (0 = exact).
    max_labels : int
        Most labels kept per state (0 = unbounded); the kept ones are spread along the period axis.
    reuse_pus : bool
        Let a PU serve several non-adjacent stages (see the module docstring).
    max_cut_tensors : int or None
        Stage boundaries only where at most this many producers are live (None = anywhere). Cuts through the
        middle of a wide parallel section move many tensors and multiply the DP states; GUIDE §3 ("stage
        boundaries are best at cut points where few bytes cross").
    deadline : float or None
        ``time.monotonic()`` value after which the DP gives up with :class:`DPDeadline`.
    """

    groups: Optional[List[Tuple[int, ...]]] = None
    max_group_size: Optional[int] = None
    max_stages: Optional[int] = None
    epsilon: float = 0.0
    max_labels: int = 0
    reuse_pus: bool = False
    max_cut_tensors: Optional[int] = None
    deadline: Optional[float] = None


class DPDeadline(Exception):
    """The DP ran past ``DPOptions.deadline`` (the caller keeps what it had)."""


@dataclass
class DPResult:
    """Non-dominated mappings found by the DP, with their objectives (period_s, latency_s, energy_j)."""

    mappings: List[Mapping]
    objectives: np.ndarray  # (m, 3)
    n_states: int = 0
    n_labels: int = 0
    n_transitions: int = 0


def all_groups(k: int, max_size: Optional[int] = None) -> List[Tuple[int, ...]]:
    """Every non-empty subset of ``range(k)`` with at most ``max_size`` members, smallest first."""
    top = k if max_size is None else min(k, max_size)
    return [g for r in range(1, top + 1) for g in combinations(range(k), r)]


def _live_sets(problem: MappingProblem) -> List[Tuple[int, ...]]:
    """``live[i]``: blocks ``u < i`` with a successor ``>= i`` (sorted)."""
    n = problem.n_blocks
    last_use = [max(s) if s else -1 for s in problem.succs]
    live: List[Tuple[int, ...]] = []
    cur: List[int] = []
    for i in range(n + 1):
        live.append(tuple(cur))
        if i < n:
            cur = [u for u in cur if last_use[u] > i]
            if last_use[i] > i:
                cur.append(i)
    return live


def dp_front(problem: MappingProblem, options: Optional[DPOptions] = None,
             progress: Optional[Callable[[int], None]] = None) -> DPResult:
    """Pareto front (period, latency, energy) of hierarchical mappings of ``problem``.

    Parameters
    ----------
    problem : MappingProblem
    options : DPOptions, optional
    progress : callable, optional
        Called with the number of block positions finished (0..n) for progress bars.

    Returns
    -------
    DPResult

    Raises
    ------
    parapipe.errors.InfeasibleError
        If no mapping exists (e.g. groups exclude every PU that can run some block).
    """
    from ..errors import InfeasibleError

    opts = options or DPOptions()
    n, k = problem.n_blocks, problem.n_pus
    groups = opts.groups if opts.groups is not None else all_groups(k, opts.max_group_size)
    live = _live_sets(problem)
    cut_ok = [opts.max_cut_tensors is None or len(live[j]) <= opts.max_cut_tensors or j == n
              for j in range(n + 1)]
    preds = problem.preds
    idle_static = float(problem.idle_power_w.sum()) + problem.static_power_w
    reuse = opts.reuse_pus
    nb = k if reuse else 1  # label columns holding busy time (per PU, or the largest stage time)
    d = nb + 2
    group_masks = [sum(1 << p for p in g) for g in groups]
    # Grid for epsilon merging: a fraction of the total work on the fastest PUs.
    ref_t = float(np.nanmin(np.where(np.isfinite(problem.time_s), problem.time_s, np.nan), axis=1).sum())
    ref_e = float(np.abs(np.nan_to_num(problem.time_s * (problem.active_power_w - problem.idle_power_w),
                                       posinf=0.0)).min(axis=1).sum()) or 1.0
    grid = np.array([ref_t] * (nb + 1) + [ref_e]) * opts.epsilon if opts.epsilon > 0 else None

    sched_cache: Dict[Tuple[int, int], RangeSchedules] = {}

    def schedules(i: int, gi: int) -> RangeSchedules:
        key = (i, gi)
        rs = sched_cache.get(key)
        if rs is None:
            rs = schedule_ranges(problem, i, groups[gi])
            sched_cache[key] = rs
        return rs

    # candidates[(j, livekey, s)] -> list of (values array (m, d), back-pointer list)
    pending: Dict[tuple, list] = {}
    start_key = (0, 0, (), 0)
    start_vals = np.zeros((1, d))
    states: Dict[tuple, Tuple[np.ndarray, list]] = {start_key: (start_vals, [None])}
    by_pos: Dict[int, List[tuple]] = {0: [start_key]}
    n_trans = 0
    n_labels = 0
    for i in range(n):
        # Finalise states at position i (all their candidates come from earlier positions).
        for key in by_pos.get(i, []):
            if key in states:
                continue
            chunks = pending.pop(key)
            vals = np.concatenate([c[0] for c in chunks])
            back = _Back(chunks)
            vals, back = _prune(vals, back, grid, opts.max_labels, nb)
            states[key] = (vals, back)
            n_labels += len(back)
        for key in by_pos.get(i, []):
            vals, _ = states[key]
            _, used_mask, livepus, n_st = key
            if opts.max_stages is not None and n_st >= opts.max_stages:
                continue
            live_pu = dict(zip(live[i], livepus))
            for gi, group in enumerate(groups):
                if not reuse and used_mask & group_masks[gi]:
                    continue
                rs = schedules(i, gi)
                if not len(rs.assignment):
                    continue
                gset = set(group)
                used = set()
                need: Dict[Tuple[int, int], float] = {}
                t_in = 0.0
                for off, q in enumerate(rs.assignment):
                    v = i + off
                    used.add(q)
                    for u in preds[v]:
                        if u < i:
                            nbytes_uv = problem.edge_nbytes.get((u, v), 0.0)
                            old = need.get((u, q))
                            if old is None or nbytes_uv > old:
                                if old is not None:
                                    t_in -= problem.comm_s(live_pu[u], q, old)
                                need[(u, q)] = nbytes_uv
                                t_in += problem.comm_s(live_pu[u], q, nbytes_uv)
                    j = v + 1
                    if len(used) != len(gset) or not cut_ok[j]:
                        continue  # a PU of the group idles: the subgroup with the same schedule dominates
                    t_s = t_in + float(rs.makespan_s[off])
                    new_live = tuple(live_pu[u] if u < i else rs.assignment[u - i] for u in live[j])
                    nkey = (j, used_mask | group_masks[gi] if not reuse else 0, new_live,
                            n_st + 1 if opts.max_stages is not None else 0)
                    bucket = pending.get(nkey)
                    if bucket is None:
                        bucket = pending[nkey] = []
                        by_pos.setdefault(j, []).append(nkey)
                    m = len(vals)
                    new = vals.copy()
                    if reuse:
                        for p in group:
                            new[:, p] += t_s
                    else:
                        np.maximum(new[:, 0], t_s, out=new[:, 0])
                    new[:, nb] += t_s
                    new[:, nb + 1] += float(rs.dyn_energy_j[off])
                    bucket.append((new, (key, i, j, gi)))
                    n_trans += m
        if progress is not None:
            progress(i + 1)
        if opts.deadline is not None and time.monotonic() > opts.deadline:
            raise DPDeadline(f"DP stopped at block {i + 1} of {n}")
    finals = []
    for key in by_pos.get(n, []):
        chunks = pending.pop(key)
        # Final labels are judged on the final objectives only (3 numbers), so no label-space filter here.
        states[key] = (np.concatenate([c[0] for c in chunks]), _Back(chunks))
        finals.append(key)
    if not finals:
        raise InfeasibleError(f"{problem.name}: no mapping exists with the allowed PU groups; some block cannot run "
                              "on any allowed PU — allow more PUs (--pus)")
    objs = []
    refs = []
    for key in finals:
        vals, _ = states[key]
        period = vals[:, :nb].max(axis=1)
        objs.append(np.column_stack([period, vals[:, nb], vals[:, nb + 1] + idle_static * period]))
        refs.extend((key, idx) for idx in range(len(vals)))
    objs = np.concatenate(objs)
    mask = pareto_mask(objs)
    mappings = [_rebuild(states, refs[t], groups, sched_cache) for t in np.flatnonzero(mask)]
    return DPResult(mappings=mappings, objectives=objs[mask], n_states=len(states), n_labels=n_labels,
                    n_transitions=n_trans)


class _Back:
    """Back-pointers of concatenated label chunks, built only for the labels that are kept.

    A chunk is ``(values (m, d), (source state key, i, j, group index))``; label ``t`` of the concatenation is row
    ``t - offset`` of its chunk, and its back-pointer is ``(source key, source row, i, j, group index)``.
    """

    __slots__ = ("meta", "offsets")

    def __init__(self, chunks):
        self.meta = [c[1] for c in chunks]
        self.offsets = np.cumsum([0] + [len(c[0]) for c in chunks])

    def __getitem__(self, t: int):
        c = int(np.searchsorted(self.offsets, t, side="right")) - 1
        key, i, j, gi = self.meta[c]
        return (key, int(t - self.offsets[c]), i, j, gi)


def _prune(vals: np.ndarray, back: list, grid: Optional[np.ndarray], max_labels: int, nb: int):
    """Keep the non-dominated labels (on the epsilon grid when given), at most ``max_labels`` of them.

    With a cap and many candidates, a pre-selection keeps the ``4 · max_labels`` best candidates on each label
    column and on their normalised sum before the exact Pareto filter (the cap discards the rest anyway);
    this keeps large label sets (PU reuse: k + 2 columns) cheap.
    """
    keyvals = np.floor(vals / np.where(grid > 0, grid, 1.0)) if grid is not None else vals
    cand = np.arange(len(vals))
    if max_labels and len(vals) > 16 * max_labels:
        top = 4 * max_labels
        span = keyvals.max(axis=0) - keyvals.min(axis=0)
        norm = (keyvals - keyvals.min(axis=0)) / np.where(span > 0, span, 1.0)
        cols = [keyvals[:, c] for c in range(keyvals.shape[1])] + [norm.sum(axis=1), norm[:, :nb].max(axis=1)]
        pick = set()
        for col in cols:
            pick.update(np.argpartition(col, min(top, len(col) - 1))[:top].tolist())
        cand = np.array(sorted(pick))
    mask = pareto_mask(keyvals[cand])
    idx = cand[mask]
    if max_labels and len(idx) > max_labels:
        period = vals[idx, :nb].max(axis=1)
        order = idx[np.argsort(period, kind="stable")]
        pick = np.unique(np.linspace(0, len(order) - 1, max_labels).round().astype(int))
        idx = np.sort(order[pick])
    return vals[idx], [back[t] for t in idx]


def _rebuild(states, ref, groups, sched_cache) -> Mapping:
    stages: List[StageMapping] = []
    key, idx = ref
    while True:
        _, back = states[key]
        bp = back[idx]
        if bp is None:
            break
        pkey, pidx, i, j, gi = bp
        rs = sched_cache[(i, gi)]
        assign = tuple(rs.assignment[: j - i])
        stages.append(StageMapping(i, j, tuple(sorted(set(assign))), assign))
        key, idx = pkey, pidx
    return Mapping(tuple(reversed(stages)))
