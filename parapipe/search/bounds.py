"""Lower bounds on the period and the latency of any mapping (GUIDE §2), used to report optimality gaps.

**Period: a relaxed DP over every mapping.** Any mapping the cost model accepts (contiguous stages, any PU group,
any assignment and order inside a stage; :mod:`parapipe.cost.evaluate`) is a path of the DP below, and along it
every PU's busy time is at least the DP's:

* a single-PU stage costs exactly its blocks' times plus its input transfers, given the PUs its live producers
  sit on — so op support and the hand-offs it forces (an NPU that cannot run ``Add`` hands off at every
  residual) are counted exactly for pure pipelines, with or without PU reuse;
* a stage on a group ``G`` of several PUs costs at least its forced input transfers (a producer whose PU, as far
  as the DP knows it, runs none of its consumers in the stage must send at least one tensor into ``G``) plus
  ``max(longest path, total work / |G|)``, where the path lets each block pick its PU in ``G`` independently and
  pays a transfer where consecutive blocks differ, and the work takes each block on its fastest PU in ``G``;
  producers of such a stage are known only to sit somewhere in ``G``.

Labels are per-PU busy vectors (Pareto sets per state, :class:`parapipe.search.labels.LabelStore`); the bound is
the least largest busy time over the final labels. Given the best period ``U`` the search found, labels whose
largest busy time, or whose mean once the remaining work is added, reaches ``U`` are dropped: if none remains the
search's period is **proved optimal** (no mapping of the cost model is faster). Within ``time_limit_s``; past
it, the LP bound below stands in.

**Period: LP fallback.** ``max(slowest block on its fastest PU, fractional load balance)``: blocks split across
PUs, no transfers (``min P s.t. Σ_b x_bp t_bp <= P``, ``Σ_p x_bp = 1``), solved with OR-Tools' GLOP.

**Latency.** Critical path with every block on its fastest PU and free transfers.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..cost.problem import MappingProblem
from .labels import LabelStore
from .stages import all_groups
from .transitions import StageCatalog, live_sets

PROOF_RTOL = 1e-9
"""Relative tolerance of "proved optimal": no mapping has a period below ``(1 - PROOF_RTOL) ×`` the best found
(float sums along different paths differ in the last bits)."""


@dataclass
class Bounds:
    """``period_s >= period_lb_s`` and ``latency_s >= latency_lb_s`` for every mapping of the problem.

    ``period_method`` is ``dp`` (the relaxed DP) or ``lp`` (its fallback; ``note`` says why);
    ``period_proved_optimal``: the best period found equals the bound (``period_lb_s`` is that period).
    """

    period_lb_s: float
    latency_lb_s: float
    period_method: str = "lp"
    period_proved_optimal: bool = False
    note: str = ""

    def info(self) -> Dict[str, Any]:
        """The bound's provenance for pareto.json ``search.bound``."""
        out = {"period_method": self.period_method, "period_proved_optimal": self.period_proved_optimal}
        if self.note:
            out["note"] = self.note
        return out


class _BoundMoves:
    """Stops of one relaxed stage (one PU, or a group) from ``start``, and its cost from given producer PU sets.

    ``items[t] = (j, makespan_lb_s, transfers, template)``; ``transfers[x] = (position in live[i], consumer PU
    mask, nbytes)``; ``template`` per block of ``live[j]``: its position in ``live[i]`` (``>= 0``) or ``-1 -
    mask`` of the PUs it may sit on.
    """

    __slots__ = ("mask", "items", "by_masks", "alpha", "beta", "pus")

    def __init__(self, problem: MappingProblem, start: int, group: Tuple[int, ...], live):
        rows = problem.rows()
        t, self.alpha, self.beta = rows.time_s, rows.alpha_s, rows.beta_bytes_per_s
        self.pus = group
        self.mask = sum(1 << p for p in group)
        self.by_masks: Dict[tuple, list] = {}
        pos = {u: x for x, u in enumerate(live[start])}
        single = len(group) == 1
        inf = float("inf")
        need: Dict[int, list] = {}  # producer before start -> [consumer PU mask, nbytes]
        finish: Dict[int, List[float]] = {}  # relaxed earliest finish of each block on each PU of the group
        path = work = 0.0
        items = []
        for v in range(start, problem.n_blocks):
            tv = [t[v][p] for p in group]
            if all(x == inf for x in tv):
                break
            can = sum(1 << p for p, x in zip(group, tv) if x < inf)
            for u in problem.preds[v]:
                nb = problem.edge_nbytes.get((u, v), 0.0)
                if u < start and nb > 0:
                    old = need.get(u)
                    if old is None:
                        need[u] = [can, nb]
                    else:  # one PU (single): the largest edge moves; a group: at least the smallest
                        old[0] |= can
                        old[1] = max(old[1], nb) if single else min(old[1], nb)
            fin = []
            for q, tq in zip(group, tv):
                ready = 0.0
                for u in problem.preds[v]:
                    if u >= start:
                        nb = problem.edge_nbytes.get((u, v), 0.0)
                        best = min(fu + (0.0 if p == q or nb <= 0 else self.alpha[p][q] + nb / self.beta[p][q])
                                   for p, fu in zip(group, finish[u]))
                        ready = max(ready, best)
                fin.append(ready + tq)
            finish[v] = fin
            path = max(path, min(fin))
            work += min(tv)
            mk = work if single else max(path, work / len(group))
            tmpl = tuple(pos[u] if u < start else -1 - (self.mask if single else self._support(problem, u, group))
                         for u in live[v + 1])
            items.append((v + 1, mk, tuple((pos[u], m, nb) for u, (m, nb) in need.items()), tmpl))
        self.items = items

    @staticmethod
    def _support(problem: MappingProblem, u: int, group) -> int:
        return sum(1 << p for p in group if np.isfinite(problem.time_s[u, p]))

    def moves(self, masks: tuple) -> list:
        """``[(j, stage time lower bound, producer PU masks at j)]`` from producers on PU sets ``masks``."""
        got = self.by_masks.get(masks)
        if got is None:
            got = []
            for j, mk, transfers, tmpl in self.items:
                t_in = 0.0
                for x, cmask, nb in transfers:
                    pmask = masks[x]
                    if pmask & cmask:
                        continue  # the producer may sit on a PU that runs a consumer: maybe no transfer
                    t_in += min(self.alpha[r][q] + nb / self.beta[r][q] for r in _bits(pmask) for q in _bits(cmask))
                got.append((j, t_in + mk, tuple(masks[x] if x >= 0 else -1 - x for x in tmpl)))
            self.by_masks[masks] = got
        return got


def _bits(mask: int) -> List[int]:
    return [p for p in range(mask.bit_length()) if mask >> p & 1]


def dp_period_bound(problem: MappingProblem, best_period_s: Optional[float] = None,
                    time_limit_s: Optional[float] = None, catalog: Optional[StageCatalog] = None
                    ) -> Optional[float]:
    """The relaxed DP's period bound (module docstring), or None if ``time_limit_s`` ran out.

    With ``best_period_s`` the DP prunes at it and returns ``best_period_s`` when nothing below
    ``(1 - PROOF_RTOL) × best_period_s`` exists (proved optimal).
    """
    n, k = problem.n_blocks, problem.n_pus
    live = catalog.live if catalog is not None else live_sets(problem)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    fastest = np.min(problem.time_s, axis=1)
    rest = np.concatenate([np.cumsum(fastest[::-1])[::-1], [0.0]]).tolist()
    limit = None if best_period_s is None else best_period_s * (1 - PROOF_RTOL)
    groups = all_groups(k)
    moves_at: Dict[int, list] = {}
    shares: List[Tuple[float, ...]] = []
    store = LabelStore(per_pu=True, n_pus=k, with_latency_energy=False, shares=shares, admit_below=limit,
                       rest_s=rest)
    pending: Dict[tuple, list] = {}
    by_pos: Dict[int, list] = {}
    for i in range(n):
        if i == 0:
            here = [store.start((0, ()))]
        else:
            here = [store.add(key, pending.pop(key)) for key in by_pos.pop(i, [])]
        here = [sid for sid in here if store.size(sid)]
        if here and i not in moves_at:
            moves_at[i] = []
            for g in groups:
                bm = _BoundMoves(problem, i, g, live)
                if bm.items:
                    shares.append(tuple(1.0 if p in g else 0.0 for p in range(k)))
                    moves_at[i].append((len(shares) - 1, bm))
        for sid in here:
            masks = store.keys[sid][1]
            for run_id, bm in moves_at[i]:
                for j, t_s, new_masks in bm.moves(masks):
                    key = (j, new_masks)
                    bucket = pending.get(key)
                    if bucket is None:
                        bucket = pending[key] = []
                        by_pos.setdefault(j, []).append(key)
                    bucket.append((sid, t_s, 0.0, run_id))
        if deadline is not None and time.monotonic() > deadline:
            return None
    best = np.inf
    for key in by_pos.pop(n, []):
        sid = store.add(key, pending.pop(key), prune=False)
        if store.size(sid):
            best = min(best, float(store.array(sid).max(axis=1).min()))
    if best_period_s is not None and not best < limit:
        return float(best_period_s)
    return float(best)


def lp_period_bound(problem: MappingProblem) -> float:
    """max(slowest block on its fastest PU, fractional load balance) (module docstring)."""
    t = problem.time_s
    single = float(np.min(t, axis=1).max())
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    n, k = t.shape
    period = solver.NumVar(0, solver.infinity(), "P")
    x = {(b, p): solver.NumVar(0, 1, f"x{b}_{p}") for b in range(n) for p in range(k) if np.isfinite(t[b, p])}
    for b in range(n):
        solver.Add(sum(x[b, p] for p in range(k) if (b, p) in x) == 1)
    for p in range(k):
        terms = [x[b, p] * float(t[b, p]) for b in range(n) if (b, p) in x]
        if terms:
            solver.Add(sum(terms) <= period)
    solver.Minimize(period)
    status = solver.Solve()
    balance = period.solution_value() if status == pywraplp.Solver.OPTIMAL else 0.0
    return max(single, float(balance) * (1 - 1e-9))


def latency_lower_bound(problem: MappingProblem) -> float:
    """Critical path with every block on its fastest PU and free transfers."""
    fastest = np.min(problem.time_s, axis=1)
    finish = np.zeros(problem.n_blocks)
    for v in range(problem.n_blocks):
        ready = max((finish[u] for u in problem.preds[v]), default=0.0)
        finish[v] = ready + fastest[v]
    return float(finish.max()) if len(finish) else 0.0


def lower_bounds(problem: MappingProblem, best_period_s: Optional[float] = None,
                 catalog: Optional[StageCatalog] = None, time_limit_s: Optional[float] = 5.0) -> Bounds:
    """Both bounds (module docstring).

    Parameters
    ----------
    problem : MappingProblem
    best_period_s : float, optional
        Best period found by a search, seconds: lets the DP prune, and prove it optimal.
    catalog : StageCatalog, optional
        Shared with the search (its live sets).
    time_limit_s : float or None
        Budget of the DP, seconds (None: unbounded); past it the LP bound is used.
    """
    latency = latency_lower_bound(problem)
    dp = None  # TEMP dp_period_bound(problem, best_period_s, time_limit_s, catalog)
    if dp is None:
        return Bounds(lp_period_bound(problem), latency, "lp", False, f"DP bound exceeded {time_limit_s} s")
    proved = best_period_s is not None and dp >= best_period_s
    return Bounds(dp, latency, "dp", proved)
