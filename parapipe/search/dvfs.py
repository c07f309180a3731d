"""Operating points (DVFS) in the search: which points a search uses, re-timing mappings, governor baselines.

**Which points.** ``--operating-points`` (:attr:`parapipe.search.options.SearchOptions.operating_points`):

* ``max``: every PU at its highest point only (the fronts of a profile without operating points);
* ``all``: every point of every table;
* ``N`` (an integer >= 1): per PU, ``N`` points spread evenly over its table, the highest always among them;
* ``auto`` (default): every point when the catalogue stays small (at most :data:`AUTO_MAX_POINTS` points per PU and
  :data:`AUTO_MAX_VARIANTS` runs per start block over all PU groups, e.g. 3 PUs with 3 points each), else the
  largest ``N`` (at most :data:`AUTO_MAX_POINTS`) that keeps it so; above :data:`AUTO_MAX_OP_CELLS` the front's
  mappings are re-timed instead (below).

**Where they enter.** Up to ``exact_max_cells`` blocks × PUs the points are part of the DP's stage catalogue
(:mod:`.transitions`): the front is exact over mappings × the points used (exact over every point when all are
used). Above it the DP passes run at the highest points, as without tables, and every candidate mapping is then
*re-timed* (:func:`retime`): a small DP over its stages picks operating points per stage (and replica) among
:data:`RETIME_POINTS` points per PU, keeping the non-dominated ones; all are evaluated exactly. The search time
then grows by the re-timing only (``benchmarks/dvfs_bench.py`` measures it).

**Governors.** Users who set nothing run under their kernel's governor. ``performance`` runs every PU at its
highest point (the front with ``max``). ``schedutil`` is modelled as ``kernel/sched/cpufreq_schedutil.c``
``get_next_freq`` does it: ``next_freq = 1.25 · max_freq · util / max_capacity``, then the lowest table frequency
at or above it (``cpufreq_driver_resolve_freq``, relation ``CPUFREQ_RELATION_L``), with the frequency-invariant
utilisation ``util / max_capacity`` taken as the fraction of the period a PU computes or receives at its highest
point (:func:`schedutil_mapping`). ``ondemand`` (``drivers/cpufreq/cpufreq_ondemand.c``) jumps to the highest
frequency when a CPU's load exceeds ``up_threshold`` (80 % by default) and otherwise picks a frequency in
proportion to the load: for a PU busy more than 80 % of the period it is ``performance``, below that it lands near
schedutil's choice, so it is not modelled separately.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..cost.evaluate import evaluate
from ..cost.mapping import Mapping, ReplicaMapping, StageMapping
from ..cost.problem import MappingProblem
from ..cost.replication import replica_shares, replicated_energy_j, replicated_period_s
from ..cost.schedule import evaluate_stage
from .pareto import pareto_mask
from .stages import all_groups

__all__ = ["AUTO_MAX_VARIANTS", "AUTO_MAX_POINTS", "AUTO_MAX_OP_CELLS", "RETIME_POINTS", "RETIME_MAX_CHOICES", "RETIME_MAX_LABELS", "RETIME_MAX_RESULTS",
           "RETIME_MAX_MAPPINGS", "SCHEDUTIL_MARGIN",
           "OpSpace", "thin_points", "resolve_operating_points", "retime", "with_ops", "schedutil_mapping"]

log = logging.getLogger(__name__)

AUTO_MAX_VARIANTS = 64
"""``auto``: most stage runs per start block (Σ over PU groups of Π points of its PUs) with which every point goes
into the exact DP: 3 PUs × 3 points give 63; the replicated pass pairs runs, so its work grows with the square."""

AUTO_MAX_POINTS = 3
"""``auto``: most points per PU in the exact DP. Every point of a PU multiplies its stage runs, and in the PU-reuse
pass the states that track each PU's operating points: squeezenet (30 blocks) on the A311D's big cluster alone
searches in 2.2 s at its highest point, 27 s with all 11 points, 3.4 s with 3 (``parapipe optimize squeezenet
--soc amlogic_a311d --pus big --operating-points 11`` against ``3``, this project's 2-core x86-64 machine)."""

AUTO_MAX_OP_CELLS = 64
"""``auto``: operating points go into the exact DP only while blocks × Σ_PU points stays at most this (every test
problem of ``tests/test_search_dvfs.py``: 4 blocks × 3 PUs × 3 points = 36); above it the DP runs at the highest
points and the front's mappings are re-timed. squeezenet (30 blocks) on the A311D's big cluster alone: 2.2 s at the
highest point, 10 s with 3 points in the DP, 2.2 s re-timed (same machine and command as
:data:`AUTO_MAX_POINTS`)."""

RETIME_POINTS = 3
"""Points per PU a re-timing uses by default (the highest, the lowest and one between): on the zoo models ×
the bundled profiles the search time stays within 1.5× of the highest-point search (``benchmarks/dvfs_bench.py``)."""

RETIME_MAX_CHOICES = 27
"""Most operating-point choices tried for one stage (or replicated stage) in a re-timing; above it every PU of the
stage moves together (its i-th point of the points used)."""

RETIME_MAX_LABELS = 24
"""Labels kept per stage of a re-timing DP (spread along the period axis)."""

RETIME_MAX_RESULTS = 6
"""Variants a re-timing returns per mapping (spread along the period axis)."""

RETIME_MAX_MAPPINGS = 8
"""Highest-point front mappings re-timed per search (spread along the period axis, the fastest included)."""

SCHEDUTIL_MARGIN = 1.25
"""schedutil's headroom: ``next_freq = 1.25 * max_freq * util / max_capacity`` (Linux
``kernel/sched/cpufreq_schedutil.c``, ``get_next_freq``; ``map_util_freq`` adds ``freq >> 2``)."""


def thin_points(m: int, n: int) -> Tuple[int, ...]:
    """``n`` indices spread evenly over ``0 .. m-1``, the last (highest point) always included.

    >>> thin_points(10, 3), thin_points(2, 3), thin_points(7, 1)
    ((0, 4, 9), (0, 1), (6,))
    """
    if n <= 1:
        return (m - 1,)
    if n >= m:
        return tuple(range(m))
    return tuple(sorted(set(int(round(x)) for x in np.linspace(0, m - 1, n))))


@dataclass
class OpSpace:
    """The operating points a search uses (pareto.json ``search.operating_points``).

    ``op_sets[p]``: point indices PU ``p`` may use (None: the highest only, as without tables); ``mode``: the
    option given; ``where``: ``dp`` (in the DP's catalogue), ``retime`` (re-timing of candidate mappings) or
    ``max`` (none); ``exact``: every point of every table is searched; ``bounded_by``: what limited them.
    """

    op_sets: Optional[List[Tuple[int, ...]]]
    mode: str
    where: str
    exact: bool
    bounded_by: str = ""
    points_mhz: Dict[str, List[float]] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"mode": self.mode, "where": self.where, "all_points": self.exact,
                               "points_mhz": self.points_mhz}
        if self.bounded_by:
            out["bounded_by"] = self.bounded_by
        return out


def _variants(problem: MappingProblem, op_sets: Sequence[Sequence[int]]) -> int:
    return sum(int(np.prod([len(op_sets[p]) for p in g])) for g in all_groups(problem.n_pus))


def resolve_operating_points(problem: MappingProblem, mode: Union[str, int], small: bool) -> OpSpace:
    """The :class:`OpSpace` of ``mode`` (module docstring) on ``problem``; ``small``: the problem is within
    ``exact_max_cells`` (points go into the DP), else candidates are re-timed.

    Raises
    ------
    ValueError
        ``mode`` is not ``auto``, ``all``, ``max`` or a positive integer.
    """
    text = str(mode).strip().lower()
    if text not in ("auto", "all", "max"):
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"operating points {mode!r}: give auto, all, max or a number of points per PU (>= 1)")
    k = problem.n_pus
    counts = [problem.n_operating_points(p) for p in range(k)]
    if text == "max" or max(counts) == 1:
        return OpSpace(None, text, "max", max(counts) == 1, "" if max(counts) == 1 else "highest points only")
    full = [tuple(range(m)) for m in counts]
    bounded = ""
    if text == "all":
        sets = full
    elif text == "auto":
        small = small and problem.n_blocks * sum(min(m, AUTO_MAX_POINTS) for m in counts) <= AUTO_MAX_OP_CELLS
        if small and max(counts) <= AUTO_MAX_POINTS and _variants(problem, full) <= AUTO_MAX_VARIANTS:
            sets = full
        elif small:
            n = min(max(counts), AUTO_MAX_POINTS)
            while n > 1 and _variants(problem, [thin_points(m, n) for m in counts]) > AUTO_MAX_VARIANTS:
                n -= 1
            sets = [thin_points(m, n) for m in counts]
            bounded = (f"{n} points per PU (at most {AUTO_MAX_POINTS} per PU and {AUTO_MAX_VARIANTS} stage runs "
                       "per block)")
        else:
            sets = [thin_points(m, RETIME_POINTS) for m in counts]
            bounded = f"{RETIME_POINTS} points per PU, re-timing of the highest-point candidates"
    else:
        sets = [thin_points(m, int(text)) for m in counts]
        if sets != full:
            bounded = f"{text} points per PU"
    if not small and not bounded:
        bounded = "re-timing of the highest-point candidates"
    points = {problem.pu_names[p]: [round(float(problem.frequency_hz(p, o) or 0.0) / 1e6, 3) for o in sets[p]]
              for p in range(k) if counts[p] > 1}
    return OpSpace(sets, text, "dp" if small else "retime", small and sets == full, bounded, points)


def with_ops(problem: MappingProblem, mapping: Mapping, ops_of: Dict[int, int]) -> Mapping:
    """``mapping`` with every stage and replica running PU ``p`` at point ``ops_of[p]`` (others as they were)."""
    stages = []
    for st in mapping.stages:
        ops = []
        for view in st.replica_stages():
            got = [ops_of.get(p, view.op_of(p)) for p in view.pus]
            ops.append(_norm(problem, view.pus, tuple(-1 if o is None else o for o in got)))
        stages.append(_stage_with(st, ops))
    return Mapping(tuple(stages))


def _stage_with(st: StageMapping, ops: Sequence[Optional[Tuple[int, ...]]]) -> StageMapping:
    reps = tuple(ReplicaMapping(r.pus, r.assignment, r.order, o) for r, o in zip(st.replicas, ops[1:]))
    return StageMapping(st.start, st.stop, st.pus, st.assignment, st.order, reps, ops[0])


def _norm(problem: MappingProblem, pus: Sequence[int], ops: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    """None when every PU is at its highest point (the form a mapping without points has)."""
    ops = tuple(problem.max_op(p) if o < 0 else o for p, o in zip(pus, ops))
    return None if all(o == problem.max_op(p) for p, o in zip(pus, ops)) else ops


def schedutil_mapping(problem: MappingProblem, mapping: Mapping) -> Tuple[Mapping, Dict[str, float]]:
    """``mapping`` with every PU at the point schedutil would pick for it (module docstring) from the mapping's
    utilisations at the highest points; returns the mapping and, per PU with a table, the frequency picked, Hz."""
    base = Mapping(tuple(_stage_with(st, [None] * len(st.replica_stages())) for st in mapping.stages))
    ev = evaluate(problem, base)
    ops_of: Dict[int, int] = {}
    picked: Dict[str, float] = {}
    for p in range(problem.n_pus):
        table = problem.operating_points[p] if problem.operating_points is not None else None
        if table is None or len(table) < 2 or ev.period_s <= 0:
            continue
        util = min(1.0, float(ev.active_s[p]) / ev.period_s)
        want = SCHEDUTIL_MARGIN * table.frequency_hz[-1] * util
        o = next((i for i, f in enumerate(table.frequency_hz) if f >= want), len(table) - 1)
        ops_of[p] = o
        picked[problem.pu_names[p]] = float(table.frequency_hz[o])
    return with_ops(problem, base, ops_of), picked


def _choices(problem: MappingProblem, pus: Sequence[int], op_sets: Sequence[Sequence[int]]
             ) -> List[Tuple[int, ...]]:
    """Operating-point choices of ``pus`` (a stage's PUs over all its replicas), at most
    :data:`RETIME_MAX_CHOICES` (else every PU moves together)."""
    sets = [sorted(op_sets[p], reverse=True) for p in pus]
    total = int(np.prod([len(s) for s in sets])) if sets else 1
    if total <= RETIME_MAX_CHOICES:
        return [tuple(c) for c in product(*sets)]
    levels = max(len(s) for s in sets)
    return [tuple(s[min(i * len(s) // levels, len(s) - 1)] for s in sets) for i in range(levels)]


def retime(problem: MappingProblem, mapping: Mapping, op_sets: Sequence[Sequence[int]],
           cache: Optional[dict] = None) -> List[Mapping]:
    """Operating-point variants of ``mapping`` (same stages, replicas, assignments and orders; points per stage
    and replica from ``op_sets``) that a DP over its stages finds non-dominated, at most
    :data:`RETIME_MAX_RESULTS`; the caller evaluates them exactly.

    The DP's labels are each PU's busy time, the latency and the dynamic energy, with every stage's input
    hand-off taken from ``mapping`` at its own points (exact unless a replicated stage's shares change with the
    points, which moves the next stage's mean input) and no switching time (the final evaluation adds both), so
    the variants are candidates, not a proof. ``cache`` (a dict shared across calls) memoises stage costs.
    """
    memo = cache if cache is not None else {}
    k = problem.n_pus
    base = evaluate(problem, mapping)
    producer_pu: Dict[int, int] = {}
    labels: List[Tuple[np.ndarray, float, float, tuple]] = [(np.zeros(k), 0.0, 0.0, ())]
    for st, res in zip(mapping.stages, base.stage_results):
        views = st.replica_stages()
        pus = [p for v in views for p in v.pus]
        inputs = [r.input_s for r in (res.replicas or [res])]
        variants = []
        for choice in _choices(problem, pus, op_sets):
            at, costs = 0, []
            for view, t_in in zip(views, inputs):
                ops = _norm(problem, view.pus, choice[at:at + len(view.pus)])
                at += len(view.pus)
                key = (view.start, view.stop, view.pus, view.assignment, view.order, ops)
                got = memo.get(key)
                if got is None:
                    r = evaluate_stage(problem, StageMapping(view.start, view.stop, view.pus, view.assignment,
                                                             view.order, ops=ops), producer_pu)
                    got = memo[key] = (r.makespan_s, r.dyn_energy_j)
                costs.append((t_in + got[0], got[1], ops))
            times = [c[0] for c in costs]
            if len(views) == 1:
                period, lat, dyn = times[0], times[0], costs[0][1]
            else:
                shares = replica_shares(times)
                period = replicated_period_s(times)
                lat = sum(w * t for w, t in zip(shares, times) if w > 0)
                dyn = replicated_energy_j([c[1] for c in costs], shares)
            variants.append((period, lat, dyn, tuple(c[2] for c in costs)))
        for v in st.blocks:
            producer_pu[v] = st.pu_of(v)
        vals = np.array([v[:3] for v in variants])
        variants = [variants[i] for i in np.flatnonzero(pareto_mask(vals))]
        share = np.zeros(k)
        share[pus] = 1.0
        new = [(busy + period * share, lat + l_s, dyn + d_s, ops + (vops,))
               for busy, lat, dyn, ops in labels for period, l_s, d_s, vops in variants]
        mat = np.array([np.concatenate([b, [l, d]]) for b, l, d, _ in new])
        keep = np.flatnonzero(pareto_mask(mat))
        if len(keep) > RETIME_MAX_LABELS:
            order = keep[np.argsort(mat[keep, :k].max(axis=1), kind="stable")]
            keep = order[np.unique(np.linspace(0, len(order) - 1, RETIME_MAX_LABELS).round().astype(int))]
        labels = [new[i] for i in keep]
    if len(labels) > RETIME_MAX_RESULTS:  # spread along the period axis, the fastest and the slowest kept
        by_period = sorted(range(len(labels)), key=lambda i: float(labels[i][0].max()))
        labels = [labels[by_period[i]] for i in
                  sorted(set(np.linspace(0, len(by_period) - 1, RETIME_MAX_RESULTS).round().astype(int).tolist()))]
    out: List[Mapping] = []
    for _, _, _, chosen in labels:
        m = Mapping(tuple(_stage_with(st, list(o)) for st, o in zip(mapping.stages, chosen)))
        if m != mapping and m.has_ops:
            out.append(m)
    return out
