"""A period lower bound that accounts for op support and forced hand-offs: a min-max DP over a per-block
relaxation of every mapping.

**The relaxation.** Write any mapping (contiguous stages; a stage on one PU, or on a group ``G`` with any
assignment and order; :mod:`parapipe.cost.evaluate`) as one *mode* per block: ``p`` when its stage runs on PU
``p`` alone, ``(G, q)`` when its stage runs on a group ``G`` and ``q`` is the PU of the latest *spine* block of
the stage so far (the spine is one fixed longest path of the DAG, by fastest block times). Along the blocks, a
label holds every PU's busy time from closed stages plus, for an open group stage, its input hand-off, spine
path and work; each stage adds to its PUs no more than it costs in the real mapping:

* a stage on one PU ``p``: its blocks' times on ``p`` (infinite where ``p`` cannot run a block: op support);
* a stage on a group ``G``, to every PU of ``G``: ``max(path, work / |G|)``, where ``path`` runs along the
  stage's spine blocks, each on its PU, with a transfer between consecutive ones on different PUs (a chain of
  dependencies: the makespan is at least its length), and ``work`` takes each block on its fastest PU of ``G``;
* at a stage boundary between ``v − 1`` and ``v`` where ``v`` is the first block that reads ``v − 1``'s output:
  one transfer into the new stage (its PUs' busy times) unless a PU the producer may sit on also runs ``v`` in
  the new stage — so an NPU that cannot run ``Add`` pays a hand-off at every residual. Other transfers are left
  out (a bound may leave costs out, never add them).

**Replicated stages** (``replicated=True``): one more mode per group ``G``, "a stage replicated over replicas
whose PUs make up ``G``" (``R``-mode). Each PU of ``G`` is busy ``P_s = f(T) = 1 / Σ_r 1/T_r`` per inference
(:mod:`parapipe.cost.replication`), with ``T_r >= in_r + Σ_v gmin_v(S_r) / |S_r|`` for replica ``r`` on PUs
``S_r`` (its input hand-off, and its makespan at least its work spread over its PUs, each block on its fastest
PU of ``S_r``). ``f`` is concave, increasing and 1-homogeneous, hence superadditive, so ``P_s >= f(in) +
Σ_v f(gmin_v(S_·) / |S_·|)``: an ``R``-mode block adds to every PU of ``G``

    ``h_v(G) = min over partitions of G into >= 2 replicas, each with a PU that runs v, of 1 / Σ_r |S_r| / gmin_v(S_r)``

(the mode is open for ``v`` only where such a partition exists: every replica runs every block of the stage), a
forced hand-off into an ``R``-mode stage adds ``hand / |G|`` (``f`` of ``R <= |G|`` inputs of at least ``hand``
each), and a forced hand-off *out of* one takes the least over every PU of ``G`` that runs the producer (the
frame's producer may sit on any replica). For single-PU replicas ``h_v`` is ``1 / Σ_p 1/t[v, p]``, exact for
PUs whose speeds are proportional. The plain modes stay as above (a stage with one replica is a plain stage),
so this relaxation bounds mappings with and without replicated stages.

**Pipeline terms** (``dispatch``: ``d_S`` per PU-set bit mask, :func:`parapipe.search.bounds.dispatch_table`):
every stage on the PUs ``S`` adds ``d_S`` to each of them, so a new stage (and the first) in a plain mode on
group ``G`` adds ``d_G`` to every PU of ``G`` (a mode's group is the stage's PU set); in an ``R``-mode on ``G``
the replicas' dispatches ``d_r >= d_{p}`` for a PU ``p`` of each replica add, by superadditivity,
``f(d_·) >= 1 / Σ_{p ∈ G} 1/d_{p}`` to every PU of ``G``. Consecutive stages on the same mode are relaxed as one
stage (one ``d``: a bound may leave costs out).

So every mapping's busy vector is at least the label of its mode sequence, and the least largest busy time over
all mode sequences bounds the period of every mapping. Labels are Pareto sets per (block, mode); with the best
period ``U`` a search found, labels that reach ``U`` (largest busy time, or mean busy time once the remaining
blocks' fastest times are spread over the PUs) are dropped, and if none is left ``U`` is **proved optimal**.
For a chain of blocks and one PU per stage the relaxation is exact.
"""
from __future__ import annotations

from itertools import combinations
from typing import List, Optional, Tuple

import numpy as np

from ..cost.problem import MappingProblem
from .budget import Budget, BudgetExceeded
from .pareto import pareto_mask

__all__ = ["MAX_PUS", "GRID_REL", "spine", "RelaxedDP", "Relaxed", "relaxed_period_bound", "cost_to_go",
           "lagrangian_period_bound"]

MAX_PUS = 5
GRID_REL = 0.01
"""Label-merging lattice as a fraction of the probe limit, spread over the blocks: the bound loses at most 1 %."""
"""Largest PU count handled (modes grow as k · 2^(k-1); beyond it the other bounds of :mod:`.bounds` stand)."""


def spine(problem: MappingProblem) -> Tuple[np.ndarray, List[int]]:
    """One longest path by fastest block times: (on_spine (n,) bool, previous spine block per block or -1)."""
    n = problem.n_blocks
    fastest = np.min(problem.time_s, axis=1)
    dist = np.zeros(n)
    back = [-1] * n
    for v in range(n):
        best = max(problem.preds[v], key=lambda u: dist[u], default=-1)
        back[v] = best
        dist[v] = fastest[v] + (dist[best] if best >= 0 else 0.0)
    on = np.zeros(n, dtype=bool)
    prev = [-1] * n
    v = int(np.argmax(dist)) if n else -1
    while v >= 0:
        on[v] = True
        prev[v] = back[v]
        v = back[v]
    return on, prev


def _comm(problem: MappingProblem, nb: float) -> np.ndarray:
    """(k, k) transfer times of ``nb`` bytes, 0 on the diagonal."""
    c = problem.alpha_s + nb / problem.beta_bytes_per_s
    c[np.eye(problem.n_pus, dtype=bool)] = 0.0
    return c


def _meet_on_grid(x: np.ndarray, grid: float) -> np.ndarray:
    """Labels in the same cell of a ``grid``-second lattice replaced by their componentwise minimum (a label
    below each of them: the bound stays a bound, lowered by at most one cell per component per block)."""
    keys = np.floor(x / grid)
    order = np.lexsort(keys.T[::-1])
    ks = keys[order]
    starts = np.flatnonzero(np.r_[True, np.any(ks[1:] != ks[:-1], axis=1)])
    return np.minimum.reduceat(x[order], starts, axis=0)


def _partitions(items: Tuple[int, ...]):
    """Every partition of ``items`` into non-empty blocks (lists of tuples)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [(first,)] + part
        for i in range(len(part)):
            yield part[:i] + [(first,) + part[i]] + part[i + 1:]


def _replicated_charge(t: np.ndarray, groups: List[Tuple[int, ...]]) -> np.ndarray:
    """``h[v, g]``: the least busy time block ``v`` adds to every PU of ``groups[g]`` in a stage replicated over
    them (module docstring), ``inf`` where no partition into >= 2 replicas runs ``v``."""
    n = t.shape[0]
    h = np.full((n, len(groups)), np.inf)
    for gi, g in enumerate(groups):
        parts = [p for p in _partitions(tuple(g)) if len(p) >= 2]
        for v in range(n):
            best = np.inf
            for part in parts:
                speed = 0.0
                for rep in part:
                    gmin = min(t[v, q] for q in rep)
                    if not np.isfinite(gmin):
                        break
                    speed += len(rep) / gmin if gmin > 0 else np.inf
                else:
                    val = 1.0 / speed if speed > 0 else 0.0
                    best = min(best, val)
            h[v, gi] = best
    return h


class RelaxedDP:
    """The relaxation of ``problem`` (module docstring) with its per-block tables built once; :meth:`probe`
    answers "is there a mode sequence whose largest busy time is below ``limit``?".

    Raises
    ------
    ValueError
        More than :data:`MAX_PUS` PUs.
    """

    def __init__(self, problem: MappingProblem, theta: float = 1.0, replicated: bool = False,
                 dispatch: Optional[np.ndarray] = None):
        n, k = problem.n_blocks, problem.n_pus
        if k > MAX_PUS:
            raise ValueError(f"{k} PUs: the relaxed bound handles at most {MAX_PUS}")
        t = problem.time_s
        groups = [g for r in range(2, k + 1) for g in combinations(range(k), r)]
        modes = [((p,), p) for p in range(k)] + [(g, q) for g in groups for q in g]
        n_plain = len(modes)
        if replicated:  # R-modes (module docstring): one per group, its "spine PU" fixed to the group's first
            modes += [(g, g[0]) for g in groups]
        nm = len(modes)
        repl = np.arange(nm) >= n_plain
        member = np.zeros((nm, k), dtype=bool)
        for i, (g, _) in enumerate(modes):
            member[i, list(g)] = True
        single = np.array([len(g) == 1 for g, _ in modes])
        pu = np.array([q for _, q in modes])
        member_q = np.zeros((nm, k), dtype=bool)
        member_q[np.arange(nm), pu] = True
        gid = np.array([groups.index(g) + (len(groups) if repl[i] else 0) if len(g) > 1 else -1
                        for i, (g, _) in enumerate(modes)])
        size = member.sum(axis=1).astype(float)
        tq = t[:, pu]  # (n, nm): v on the mode's PU
        gmin = np.where(member[None], t[:, None, :], np.inf).min(axis=2)  # (n, nm): v on the group's fastest PU
        on_spine, prev_spine = spine(problem)
        self.n, self.k, self.nm = n, k, nm
        self.rest = np.concatenate([np.cumsum(np.min(t, axis=1)[::-1])[::-1], [0.0]])
        self.member, self.single, self.pu, self.gid = member, single, pu, gid
        # Busy added by block v in mode m without transfers: t on p, or θ·t on q (spine) + (1-θ)·gmin/|G|.
        self.opened = np.where(single[None, :] | on_spine[:, None], np.isfinite(tq), np.isfinite(gmin))
        finite = np.isfinite(t)
        work_share = np.where(member, (1.0 / size)[:, None], 0.0)
        tq0, gmin0 = np.where(np.isfinite(tq), tq, 0.0), np.where(np.isfinite(gmin), gmin, 0.0)
        node = np.where(single[None, :, None], tq0[:, :, None] * member_q[None],
                        member[None] * np.where(on_spine[:, None], theta * tq0, 0.0)[:, :, None]
                        + (1 - theta) * gmin0[:, :, None] * work_share[None])
        if replicated:
            h = _replicated_charge(t, [g for g, _ in modes[n_plain:]])  # (n, groups)
            self.opened[:, repl] = np.isfinite(h)
            node[:, repl, :] = np.where(np.isfinite(h), h, 0.0)[:, :, None] * member[None, repl, :]
        self.node = node  # (n, nm, k)
        # What opening a stage in mode m adds to each PU (module docstring: pipeline terms).
        self.open = np.zeros((nm, k))
        if dispatch is not None:
            per_pu = np.array([float(dispatch[1 << p]) for p in range(k)])
            for i, (g, _) in enumerate(modes):
                if repl[i]:
                    d = per_pu[list(g)]
                    val = 0.0 if (d <= 0).any() else 1.0 / float(np.sum(1.0 / d))
                else:
                    val = float(dispatch[sum(1 << p for p in g)])
                self.open[i, list(g)] = val
        # What a forced hand-off into a stage of mode m adds to each PU: the transfer on every PU of its group,
        # divided by |G| for an R-mode.
        self.charge = np.where(repl[:, None], member / size[:, None], member.astype(float))
        self.repl = repl
        self.on_spine = on_spine
        self.hand: List[Optional[np.ndarray]] = [None] * n  # (nm, nm) forced hand-off into a new stage at v
        self.spine_comm: List[Optional[np.ndarray]] = [None] * n  # (k, k) θ·transfer along the spine into v
        for v in range(1, n):
            u = v - 1
            nb = problem.edge_nbytes.get((u, v), 0.0)
            if u in problem.preds[v] and min(problem.succs[u]) == v and nb > 0:
                comm = _comm(problem, nb)
                # PUs the producer may sit on / that may run v: the mode's PU for a single-PU stage and for a
                # spine block of a group stage (it is the mode's q), else the group's PUs that support it.
                prod = np.where(repl[:, None] | ~on_spine[u], member, member_q) & finite[u][None, :]
                cons = np.where(repl[:, None] | ~on_spine[v], member, member_q) & finite[v][None, :]
                pair = prod[:, None, :, None] & cons[None, :, None, :]
                hand = np.where(pair, comm[None, None], np.inf).min(axis=(2, 3))
                hand[~np.isfinite(hand)] = 0.0
                self.hand[v] = hand
            if on_spine[v] and prev_spine[v] >= 0:
                self.spine_comm[v] = theta * _comm(problem, problem.edge_nbytes.get((prev_spine[v], v), 0.0))

    def probe(self, limit: float, grid: float = 0.0, budget: Optional[Budget] = None,
              guide: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> Optional[float]:
        """The least largest busy time if it is below ``limit``, else None (then every mapping's period is at
        least ``limit``). ``grid > 0`` merges labels in the same ``grid``-second cell (module docstring).
        ``guide = (λ, cost_to_go(λ))`` also drops labels whose ``λ · busy`` plus the least ``λ``-weighted cost
        of the remaining blocks reaches ``limit`` (then so does their largest busy time, at the end).

        Raises
        ------
        TimeoutError
            ``budget`` (label rows built, :mod:`.budget`) ran out.
        """
        n, k, nm = self.n, self.k, self.nm
        member, single, pu, gid, rest = self.member, self.single, self.pu, self.gid, self.rest

        def admit(x: np.ndarray, v: int, m: int) -> np.ndarray:
            ok = (x.max(axis=1) < limit) & (x.sum(axis=1) + rest[v + 1] < limit * k)
            if guide is not None:
                ok &= x @ guide[0] + guide[1][v, m] < limit
            x = x[ok]
            if len(x) and grid > 0:
                x = _meet_on_grid(x, grid)
            return x[pareto_mask(x)] if len(x) else x

        none = np.empty((0, self.node.shape[-1]))  # no label in a mode
        labels: List[np.ndarray] = [admit((self.node[0, m] + self.open[m])[None], 0, m) if self.opened[0, m]
                                    else none for m in range(nm)]
        for v in range(1, n):
            _check(budget, v, n)
            srcs = [m for m in range(nm) if len(labels[m])]
            if not srcs:
                return None
            cl = np.concatenate([labels[m] for m in srcs])
            src = np.repeat(np.array(srcs, dtype=int), [len(labels[m]) for m in srcs])
            hand, spine_comm = self.hand[v], self.spine_comm[v]
            new: List[np.ndarray] = [none] * nm
            for m2 in np.flatnonzero(self.opened[v]).tolist():
                _check(budget, v, n)
                inc = self.node[v, m2]
                # (b) a new stage from every source (single p -> p is the same as (a)), with its forced hand-off
                keep = src != m2 if single[m2] else np.ones(len(src), dtype=bool)
                x = cl[keep] + (inc + self.open[m2])
                if hand is not None:
                    x += hand[src[keep], m2][:, None] * self.charge[m2]
                parts = [x]
                # (a) the same stage
                if single[m2]:
                    if len(labels[m2]):
                        parts.append(labels[m2] + inc)
                else:
                    for m in srcs:
                        if gid[m] != gid[m2] or (not self.on_spine[v] and pu[m] != pu[m2]):
                            continue
                        extra = spine_comm[pu[m], pu[m2]] if spine_comm is not None else 0.0
                        parts.append(labels[m] + inc + extra * member[m2])
                cand = np.concatenate(parts)
                if budget is not None:
                    budget.spend(len(cand))
                new[m2] = admit(cand, v, m2)
            labels = new
        found = [float(x.max(axis=1).min()) for x in labels if len(x)]
        return min(found) if found else None


class Relaxed:
    """The relaxation of a problem with its Lagrangian bound: ``bound_s``, the weights ``lam`` that reach it and
    the cost-to-go table for pruning (:func:`cost_to_go`)."""

    def __init__(self, problem: MappingProblem, best_period_s: Optional[float] = None,
                 budget: Optional[Budget] = None, replicated: bool = False, dispatch: Optional[np.ndarray] = None):
        self.replicated = replicated
        self.dispatch = dispatch
        self.dp = RelaxedDP(problem, replicated=replicated, dispatch=dispatch)
        self.bound_s, self.lam = lagrangian_period_bound(self.dp, best_period_s, budget=budget)
        self.h = cost_to_go(self.dp, self.lam)

    def guide(self) -> Tuple[np.ndarray, List[float]]:
        """``(λ, togo)`` with ``togo[j]`` the least λ-weighted busy time blocks ``j..n-1`` add (``togo[0] = 0``,
        ``togo[n] = 0``), for :class:`parapipe.search.labels.LabelStore`."""
        togo = [0.0] + self.h.min(axis=1).tolist()
        togo[-1] = 0.0
        return self.lam, togo


def relaxed_period_bound(problem: MappingProblem, best_period_s: float, floor_s: float = 0.0,
                         budget: Optional[Budget] = None, rtol: float = 1e-9, grid_rel: float = GRID_REL,
                         relaxed: Optional[Relaxed] = None, replicated: bool = False,
                         dispatch: Optional[np.ndarray] = None) -> Tuple[float, bool]:
    """The relaxation's bound on the period, and whether it proves ``best_period_s`` optimal.

    Bisection on the probe limit between ``floor_s`` (a known bound) and ``(1 - rtol) × best_period_s``: a low
    limit prunes hard and answers fast; the first probe that finds a mode sequence returns the relaxation's
    optimum (``dispatch``: the pipeline terms' ``d_S``, module docstring). Stops when ``budget`` (:mod:`.budget`) runs out, with the best limit proved so far. Labels are merged on a lattice of
    ``grid_rel × limit / n_blocks`` seconds (at most ``grid_rel`` of the limit lost).

    Returns
    -------
    (bound_s, proved)

    Raises
    ------
    ValueError
        More than :data:`MAX_PUS` PUs.
    """
    rel = relaxed if relaxed is not None else Relaxed(problem, best_period_s * (1 - rtol), budget, replicated,
                                                      dispatch)
    dp, lag = rel.dp, rel.bound_s
    n = max(problem.n_blocks, 1)
    top = best_period_s * (1 - rtol)
    guide = (rel.lam, rel.h)
    lo, hi = min(max(floor_s, lag), top), top
    probe = top if floor_s >= top else 0.5 * (lo + hi)
    while True:
        try:
            got = dp.probe(probe, grid_rel * probe / n, budget, guide)
        except BudgetExceeded:
            return lo, False
        if got is not None:
            return max(lo, got), False
        lo = probe
        if probe >= top:
            return best_period_s, True
        probe = top if (top - lo) <= 0.01 * top else 0.5 * (lo + hi)


def _check(budget: Optional[Budget], v: int, n: int) -> None:
    why = budget.over() if budget is not None else None
    if why is not None:
        assert budget is not None
        budget.stop_point = f"relaxed bound at block {v} of {n}"
        raise BudgetExceeded(f"relaxed bound stopped at block {v} of {n} ({why})", why)


def _step_costs(dp: RelaxedDP, lam: np.ndarray, v: int) -> Tuple[np.ndarray, np.ndarray]:
    """(nm, nm) λ-weighted cost of moving from mode m (block v-1) to m2 (block v), and whether the cheaper way
    is the same stage (a) rather than a new stage (b)."""
    nm = dp.nm
    lam_m = dp.member @ lam  # λ(G) per mode
    node = dp.node[v] @ lam
    opening = dp.open @ lam
    diag = np.eye(nm, dtype=bool) & dp.single[:, None]
    b = np.broadcast_to((node + opening)[None, :], (nm, nm)).copy()
    if dp.hand[v] is not None:
        b += dp.hand[v] * (dp.charge @ lam)[None, :]
    b[diag] = np.inf  # single p -> p is (a)
    a = np.full((nm, nm), np.inf)
    a[diag] = node[dp.single]
    grp = (dp.gid[:, None] == dp.gid[None, :]) & ~dp.single[:, None]
    if not dp.on_spine[v]:
        grp &= dp.pu[:, None] == dp.pu[None, :]
    spine_comm = dp.spine_comm[v]
    extra = spine_comm[dp.pu][:, dp.pu] if spine_comm is not None else np.zeros((nm, nm))
    a[grp] = (node[None, :] + extra * lam_m[None, :])[grp]
    cost = np.minimum(a, b)
    cost[:, ~dp.opened[v]] = np.inf
    return cost, a <= b


def _lagrange_value(dp: RelaxedDP, lam: np.ndarray) -> Tuple[float, np.ndarray]:
    """``min over mode sequences of λ · busy`` and the busy vector of a minimiser (a cutting plane)."""
    n, nm = dp.n, dp.nm
    val = np.where(dp.opened[0], (dp.node[0] + dp.open) @ lam, np.inf)
    choice = []
    for v in range(1, n):
        cost, use_a = _step_costs(dp, lam, v)
        tot = val[:, None] + cost
        arg = np.argmin(tot, axis=0)
        val = tot[arg, np.arange(nm)]
        choice.append((arg, use_a[arg, np.arange(nm)]))
    end = int(np.argmin(val))
    busy = np.zeros(dp.k)
    m = end
    for v in range(n - 1, 0, -1):
        arg, use_a = choice[v - 1]
        prev = int(arg[m])
        busy += dp.node[v, m]
        spine_comm, hand = dp.spine_comm[v], dp.hand[v]
        if use_a[m]:
            if spine_comm is not None and not dp.single[m]:
                busy += spine_comm[dp.pu[prev], dp.pu[m]] * dp.member[m]
        else:
            busy += dp.open[m]
            if hand is not None:
                busy += hand[prev, m] * dp.charge[m]
        m = prev
    busy += dp.node[0, m] + dp.open[m]
    return float(val[end]), busy


def cost_to_go(dp: RelaxedDP, lam: np.ndarray) -> np.ndarray:
    """(n, nm): least λ · busy the blocks after v add when block v is in mode m (for pruning probes)."""
    h = np.zeros((dp.n, dp.nm))
    for v in range(dp.n - 1, 0, -1):
        cost, _ = _step_costs(dp, lam, v)
        h[v - 1] = np.min(cost + h[v][None, :], axis=1)
    return h


def lagrangian_period_bound(dp: RelaxedDP, best_period_s: Optional[float] = None, iterations: int = 60,
                            budget: Optional[Budget] = None) -> Tuple[float, np.ndarray]:
    """``max over λ on the simplex of min over mode sequences of λ · busy`` (each value is a bound on the
    period, since ``max_q busy_q >= λ · busy``), by Kelley's cutting planes (LPs solved with OR-Tools' GLOP).

    Returns
    -------
    (bound_s, λ of the best value)
    """
    from ortools.linear_solver import pywraplp

    k = dp.k
    lam = np.full(k, 1.0 / k)
    best, best_lam = 0.0, lam
    cuts: List[np.ndarray] = []
    for _ in range(iterations):
        val, busy = _lagrange_value(dp, lam)
        if val > best:
            best, best_lam = val, lam
        cuts.append(busy)
        if budget is not None:
            budget.spend(dp.n * dp.nm * dp.nm)
        if (best_period_s is not None and best >= best_period_s) or (budget is not None and budget.over()):
            break
        lp = pywraplp.Solver.CreateSolver("GLOP")
        x = [lp.NumVar(0.0, 1.0, f"l{q}") for q in range(k)]
        z = lp.NumVar(-lp.infinity(), lp.infinity(), "z")
        lp.Add(sum(x) == 1.0)
        for c in cuts:
            lp.Add(z <= sum(float(c[q]) * x[q] for q in range(k)))
        lp.Maximize(z)
        if lp.Solve() != pywraplp.Solver.OPTIMAL:
            break
        lam = np.array([max(0.0, xi.solution_value()) for xi in x])
        if z.solution_value() - best <= 1e-6 * max(best, 1e-12):
            break
    return best, best_lam
