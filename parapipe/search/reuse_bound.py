"""A period lower bound over the PU-reuse space that counts every hand-off: a DP over stage cuts whose states
know where the live tensors may be.

The space: mappings without replicated stages, a PU may serve several stages (:mod:`parapipe.cost.evaluate`).
The per-block relaxation of :mod:`.relaxation` forgets where a tensor was made once its next block has run, so
it charges no transfer for an edge that skips a stage (a residual's shortcut, a branch of an Inception module
read after its siblings): on models whose accelerator runs every convolution but not the ``Add`` that closes a
residual, those transfers are much of the period it cannot see. This DP walks stage cuts instead, as the
search's outer DP does (:mod:`.transitions`), and keeps per *live producer* (a block before the cut whose output
is read after it) the set of PUs it may sit on. A move is a stage on the PU set ``G`` over blocks ``a..b-1``;
it adds to every PU of ``G`` a lower bound on the stage's time ``T_in + makespan`` in every mapping that reaches
its state:

* on one PU ``q``: the cost model's time exactly, given the producers' PUs: ``Σ_v t[v, q]`` plus, per live
  producer the stage reads, its largest edge into the stage from the cheapest PU of its set to ``q`` (0 when
  ``q`` is in the set), plus the stage's ``d_G`` with pipeline terms (:func:`parapipe.search.bounds.dispatch_table`);
  the producers of ``live[b]`` it ran then sit on ``q``;
* on a group: the largest of ``run(a, b, G) + d_G`` (:func:`parapipe.search.stage_bound.stage_run_bounds`:
  critical path, weighted work, each PU's own blocks) plus the least input hand-off (per live producer read,
  the largest over its consumers in the stage of the least transfer from a PU of its set to a PU of ``G`` that
  runs the consumer: every consumer receives it somewhere), and a critical path that knows where inputs come
  from: ``F[v][q] = t[v, q] + max(transfer of each earlier-stage input from its set to q, min_{q'} F[u][q'] +
  comm(q', q) over in-stage inputs u)``, a lower bound on when ``v`` finishes on ``q`` counted from the stage's
  start (``T_in`` comes first, then the makespan), so ``T >= max_v min_q F[v][q]``; and one move per PU each of
  the stage's live outputs ends on (``q ∈ G`` that runs it, the stage at least ``F[u][q]``), which then is its
  set.

A state keeps the PUs of at most :data:`KEEP_LIVE` live producers per cut; the others may sit anywhere (their
hand-offs cost nothing), which only lowers costs. Every mapping's stages are then a path of this DP whose costs
are at most its stage times (``tests/test_search_bounds.py`` walks random mappings through it), so the least,
over paths, of the largest per-PU sum bounds its period. Two bounds are read off it, both over the moves cheaper
than the limit ``X`` being tested (a mapping with a period below ``X`` has no stage as long):

* the **Lagrangian** ``max over λ on the simplex of min over paths of λ · busy`` (a shortest path per ``λ``,
  Kelley's cutting planes: :func:`parapipe.search.lagrangian.kelley`), each value a bound;
* the **probe**: labels (every PU's busy time) per node, kept as Pareto sets, merged on a lattice (componentwise
  minimum, so the bound stays one) and pruned at ``X`` (largest busy time; mean busy time with the remaining
  blocks' fastest times spread over the PUs; ``λ · busy`` plus the node's least ``λ``-weighted cost to the end).
  When no label reaches the last block below ``X``, no mapping is faster than ``X``; when one does, the least
  largest busy time found is a bound.

Given the per-block relaxation's guide (its ``λ`` and cost to go per block, a lower bound on what any mapping's
later stages add in ``λ`` terms, :meth:`parapipe.search.relaxation.Relaxed.guide`), the graph leaves out every
move after which the least ``λ``-weighted path so far, the move and that cost to go reach ``X``: no mapping below
``X`` passes there. For a chain of blocks mapped one PU per stage the DP is exact up to the lattice.

Cost: the graph (nodes: reachable (cut, state); edges: moves below ``X``) is built once per limit; on the zoo
models at 48 blocks × 4 PUs it has 2·10^4 to 7·10^4 edges where it certifies a gap the other bounds do not, and
each Lagrangian value is a few numpy passes over it. Work is counted in
:data:`parapipe.search.budget.RELAX_WORK_PER_S` units (:data:`EDGE_UNITS`, :data:`CALL_UNITS`,
:data:`LAGRANGE_EDGE_UNITS`, :data:`PROBE_ENTRY_UNITS` and the probe's Pareto filters as in :mod:`.relaxation`).
"""
from __future__ import annotations

from itertools import product
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..cost.problem import MappingProblem
from .budget import WORK, Budget, BudgetExceeded
from .lagrangian import kelley
from .pareto import meet_on_grid, pareto_mask
from .relaxation import PARETO_UNIT
from .stage_bound import stage_run_bounds
from .transitions import live_sets

__all__ = ["MAX_PUS", "EDGE_UNITS", "CALL_UNITS", "LAGRANGE_EDGE_UNITS", "PROBE_ENTRY_UNITS", "PROJECT_FROM",
           "KEEP_LIVE", "GRID_REL", "ReuseStageDP", "reuse_period_bound"]

MAX_PUS = 5
"""Largest PU count the DP is built for (PU sets grow as 2^k, each with its stage-time table)."""

EDGE_UNITS = 26.0
"""Work units (:data:`parapipe.search.budget.RELAX_WORK_PER_S`, 4 M per CPU second) per edge of the graph built:
the Python work of one move, about 7 µs ..."""

CALL_UNITS = 70.0
"""... plus this per (node, PU set) whose moves the build lists, edges or not (their stage costs and critical
paths, about 18 µs). Measured with ``time.process_time`` around :class:`ReuseStageDP` at a limit 10 % below the
best period on resnet50, shufflenet, inception_v1 and inception_v2 on the A311D, RK3588 and AGX Orin profiles:
3.3-4.0 M units charged per CPU second."""

LAGRANGE_EDGE_UNITS = 0.15
"""Work units per edge (and per node) of one Lagrangian value (a shortest path: numpy passes over the edges; the
same measurement around :meth:`ReuseStageDP.lagrange_value`: 3.1-3.2 M units per CPU second on graphs of
2·10^4 edges)."""

PROBE_ENTRY_UNITS = 1.0
"""Work units per (edge, label) pair the probe extends (numpy over (edges, labels, PUs) arrays, with its
per-node Pareto filters charged as in :mod:`.relaxation`; the same measurement around :meth:`ReuseStageDP.probe`
on shufflenet on the A311D and RK3588 profiles and inception_v1 on the A311D: 3.5-4.3 M units per CPU second)."""

PROJECT_FROM = 0.125
"""From this fraction of the blocks on, the graph's build stops once its work so far, extrapolated linearly over
the blocks, passes the budget (a graph it cannot finish bounds nothing; the budget is left to the per-block
relaxation). Builds do more work early on, so the projection over-estimates: measured on the zoo models × the
A311D, RK3588, A1000 and Orin Nano profiles (the build's work per block at a limit 10 % below the best period), its
largest value from here on was 1.06-1.18× the finished build's work where the DP certifies a gap the other bounds
do not (resnet50, shufflenet: 0.9-1.2 M units), up to 1.45× on the largest graphs (inception_v2: 1.3-3.0 M units)
and more only on graphs below 0.2 M units."""

KEEP_LIVE = 2
"""Live producers per cut whose PUs a state keeps: the two largest tensors (a residual's shortcut and the
block's own output); the others are forgotten (they may sit on any PU, their hand-offs cost nothing), which keeps
the states of a cut inside a four-branch module (Inception) from multiplying four masks."""

GRID_REL = 0.005
"""The probe's label lattice as a fraction of the limit, spread over the blocks: each merge lowers a label by at
most one cell per PU and a path has at most one merge per block, so the probe's bound loses at most 0.5 % of the
limit."""


def _pus(mask: int, k: int) -> List[int]:
    return [p for p in range(k) if mask >> p & 1]


def _check(budget: Optional[Budget], what: str) -> None:
    if budget is not None:
        budget.check("reuse stage bound", what)


class ReuseStageDP:
    """The graph of the module docstring for the limit ``limit_s`` (moves of at least that long left out).

    ``dispatch``: ``d_S`` per PU-set bit mask (:func:`parapipe.search.bounds.dispatch_table`; None: 0);
    ``budget``: the work budget the build spends (:mod:`.budget`); ``guide``: ``(λ, togo)`` of
    :meth:`parapipe.search.relaxation.Relaxed.guide` (moves no mapping below the limit can take are left out);
    ``runs``: :func:`parapipe.search.stage_bound.stage_run_bounds` of ``problem`` when already computed.

    Attributes
    ----------
    node_cut : ndarray (N,)
        The cut (block position) of each node; node 0 is the start, the last node the end (cut ``n``).
    src, dst, cost, group : ndarray (E,)
        Each edge's nodes, its cost in seconds and the PU-set bit mask it adds it to; edges sorted by the cut of
        their source.

    Raises
    ------
    ValueError
        More than :data:`MAX_PUS` PUs.
    BudgetExceeded
        ``budget`` ran out while building.
    """

    def __init__(self, problem: MappingProblem, limit_s: float, dispatch: Optional[np.ndarray] = None,
                 budget: Optional[Budget] = None, guide: Optional[Tuple[np.ndarray, Sequence[float]]] = None,
                 runs: Optional[Dict[int, np.ndarray]] = None):
        n, k = problem.n_blocks, problem.n_pus
        if k > MAX_PUS:
            raise ValueError(f"{k} PUs: the reuse stage bound handles at most {MAX_PUS}")
        self.problem, self.n, self.k, self.limit_s = problem, n, k, float(limit_s)
        t = problem.time_s
        runs = stage_run_bounds(problem) if runs is None else runs
        self.masks = list(range(1, 1 << k))
        d = (lambda m: 0.0) if dispatch is None else (lambda m: float(dispatch[m]))
        self.run = {m: runs[m] + d(m) for m in self.masks}  # run(a, b, G) + d_G: (n + 1, n + 1)
        self.member = np.array([[m >> p & 1 for p in range(k)] for m in [0] + self.masks], dtype=float)
        finite = np.isfinite(t)
        self.support = [sum(1 << p for p in range(k) if finite[v, p]) for v in range(n)]
        self.live = live_sets(problem)
        self.rest = np.concatenate([np.cumsum(np.min(t, axis=1)[::-1])[::-1], [0.0]])
        # per edge u -> v: the least transfer time from a PU of the set S to PU q (``hop[S, q]``, 0 when q ∈ S)
        # and to a PU of the set G (``hop_set[S, G]``), sets as bit masks (row / column 0 unused); empty tensors
        # move for free (MappingProblem.comm_s)
        member = self.member.astype(bool)
        self.hop: Dict[Tuple[int, int], np.ndarray] = {}
        self.hop_set: Dict[Tuple[int, int], np.ndarray] = {}
        for (u, v), nb in problem.edge_nbytes.items():
            c = problem.comm_matrix_s(nb)
            per_pu = np.where(member[:, :, None], c[None], np.inf).min(axis=1)  # (2^k, k)
            self.hop[(u, v)] = per_pu
            self.hop_set[(u, v)] = np.where(member[None, :, :], per_pu[:, None, :], np.inf).min(axis=2)
        self._single = np.array([1 << p for p in range(k)])
        multi = [m for m in self.masks if m & (m - 1)]
        self._multi = {m: i for i, m in enumerate(multi)}
        self._off = np.where(self.member[multi] > 0, 0.0, np.inf).reshape(len(multi), k)
        # per start: one past the last block a stage on two or more PUs may end at below the limit
        self._last = [max([a + 1] + [int(b) for m in multi for b in np.flatnonzero(self.run[m][a] < limit_s)])
                      for a in range(n)]
        self._templates: Dict[Tuple[int, int], Tuple[List[int], Tuple[Optional[int], ...]]] = {}
        # per cut: the live producers whose PUs the state keeps (of those kept at the cut before and the block just
        # before the cut, the KEEP_LIVE largest tensors, then the latest: once forgotten, a producer stays so); the
        # others may sit anywhere (the full mask: their transfers cost nothing, so the bound stays one)
        self._full = (1 << k) - 1
        self._kept: List[set] = []
        for b in range(n + 1):
            cand = [u for u in self.live[b] if u == b - 1 or (b and u in self._kept[b - 1])]
            size = {u: max((problem.edge_nbytes.get((u, v), 0.0) for v in problem.succs[u] if v >= b), default=0.0)
                    for u in cand}
            self._kept.append(set(sorted(cand, key=lambda u: (-size[u], -u))[:KEEP_LIVE]))
        self._chain_cache: Dict[Tuple[int, Tuple[int, ...]], Tuple[np.ndarray, np.ndarray]] = {}
        zero = np.zeros((1 << k, k))
        self._no_hop = (zero, np.zeros((1 << k, 1 << k)))
        self._build(budget, guide)

    def _hops(self, u: int, v: int) -> Tuple[np.ndarray, np.ndarray]:
        got = self.hop.get((u, v))
        return (got, self.hop_set[(u, v)]) if got is not None else self._no_hop

    def _build(self, budget: Optional[Budget], guide) -> None:
        n, limit = self.n, self.limit_s
        lam = np.zeros(self.k) if guide is None else np.asarray(guide[0], dtype=float)
        togo = np.zeros(n + 1) if guide is None else np.asarray(guide[1], dtype=float).copy()
        togo[n] = 0.0
        wg = self.member @ lam  # per mask index: λ of its PUs
        dist: List[float] = [0.0]  # per node: least λ-weighted cost of a path to it
        ids: List[Dict[Tuple[int, ...], int]] = [dict() for _ in range(n + 1)]
        ids[0][()] = 0
        cuts: List[int] = [0]
        src: List[int] = []
        dst: List[int] = []
        cost: List[float] = []
        group: List[int] = []
        out: Dict[int, Tuple[int, int]] = {}  # per node: its edges' slice
        start = budget.used if budget is not None else 0.0
        for a in range(n):
            _check(budget, f"block {a} of {n}")
            if budget is not None and budget.limit is not None and a >= PROJECT_FROM * n and (
                    start + (budget.used - start) * n / a > budget.limit):
                # the graph alone, extrapolated linearly over the blocks, would outrun the budget: leave it now
                budget.stop_point = f"reuse stage bound: graph projected past the budget at block {a} of {n}"
                raise BudgetExceeded(budget.stop_point, WORK)
            for state, node in list(ids[a].items()):
                slack = limit - dist[node]
                if slack <= togo[a]:
                    continue  # no path through this node stays below the limit in λ terms
                first = len(src)
                for g in self.masks:
                    moves = self.moves(a, state, g, (slack - togo) / wg[g] if wg[g] > 0 else None)
                    if budget is not None:
                        budget.spend(EDGE_UNITS * len(moves) + CALL_UNITS)
                    for b, c, nxt in moves:
                        d = dist[node] + c * wg[g]
                        at = ids[b].get(nxt)
                        if at is None:
                            at = ids[b][nxt] = len(cuts)
                            cuts.append(b)
                            dist.append(d)
                        elif d < dist[at]:
                            dist[at] = d
                        src.append(node)
                        dst.append(at)
                        cost.append(c)
                        group.append(g)
                out[node] = (first, len(src))
        self.out = out
        self.node_cut = np.array(cuts)
        self.src, self.dst = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
        self.cost, self.group = np.array(cost), np.array(group, dtype=np.int64)
        self.end = ids[n].get(())
        # per source cut: the slice of edges (edges were appended in cut order)
        src_cut = self.node_cut[self.src] if len(self.src) else np.zeros(0, dtype=np.int64)
        self.by_cut = np.searchsorted(src_cut, np.arange(n + 2))

    def stage_costs(self, a: int, state: Tuple[int, ...], g: int) -> np.ndarray:
        """(n + 1,): on one PU, the stage's time over blocks ``a..b-1`` from ``state`` (the PU masks of
        ``live[a]``); on a group, ``run + d`` plus its least input hand-off (module docstring); index ``b`` (``inf``
        where it cannot run)."""
        cost = self.run[g][a].copy()
        single = g & (g - 1) == 0
        q = g.bit_length() - 1
        for u, srcmask in zip(self.live[a], state):
            # every consumer in the stage receives the tensor on a PU of g that runs it, from a PU of the mask
            hop = np.zeros(self.n + 1)
            for v in self.problem.succs[u]:
                if v >= a:
                    per_pu, per_set = self._hops(u, v)
                    c = per_pu[srcmask, q] if single else per_set[srcmask, g & self.support[v]]
                    hop[v + 1:] = np.maximum(hop[v + 1:], c)
            cost += np.where(np.isfinite(hop), hop, 0.0)
        return cost

    def moves(self, a: int, state: Tuple[int, ...], g: int, below: Optional[np.ndarray] = None
              ) -> List[Tuple[int, float, Tuple[int, ...]]]:
        """``[(b, cost, next state)]``: the stages on the PU set ``g`` from cut ``a`` in ``state``, each stop
        ``b`` with a cost below the limit (and below ``below[b]`` when given), and the masks of ``live[b]`` after
        it (module docstring)."""
        limit = self.limit_s
        cost = self.stage_costs(a, state, g)
        cap = np.minimum(limit, below) if below is not None else limit
        stops = [b for b in np.flatnonzero(cost < cap).tolist() if b > a]
        if not stops:
            return []
        got = []
        if g & (g - 1) == 0:
            for b in stops:
                got.append((b, float(cost[b]), tuple(self._full if x is None else state[x] if x >= 0 else g
                                                     for x in self._template(a, b)[1])))
            return got
        finish, chain = self._chains(a, state)
        gi = self._multi[g]
        f_g = finish[gi]  # (blocks from a, k): inf off g
        for b in stops:
            base = max(float(cost[b]), float(chain[gi, b]))
            top = limit if below is None else min(limit, float(below[b]))
            if base >= top:
                continue
            outs, tmpl = self._template(a, b)
            # each live output on one PU of g that runs it: the stage lasts at least its finish there
            options = [[(1 << q, f) for q, f in enumerate(f_g[u - a].tolist()) if f < top] for u in outs]
            for pick in product(*options):
                c = max([base] + [f for _, f in pick])
                got.append((b, c, tuple(self._full if x is None else state[x] if x >= 0 else pick[-1 - x][0]
                                        for x in tmpl)))
        return got

    def state_at(self, b: int, pu_of: Dict[int, int]) -> Tuple[int, ...]:
        """The state at cut ``b`` of a mapping whose blocks run on ``pu_of[v]``: per block of ``live[b]``, the
        bit of its PU, or the full mask where the state forgets it (:data:`KEEP_LIVE`)."""
        return tuple(1 << pu_of[u] if u in self._kept[b] else self._full for u in self.live[b])

    def _template(self, a: int, b: int) -> Tuple[List[int], Tuple[Optional[int], ...]]:
        """``(outs, template)`` of a stage over ``a..b-1``: its blocks in ``live[b]`` whose PUs the state keeps,
        and per block of ``live[b]`` its position in ``live[a]`` (``>= 0``), ``-1 -`` its index in ``outs``, or
        None where the state forgets it (:data:`KEEP_LIVE`)."""
        got = self._templates.get((a, b))
        if got is None:
            pos = {u: x for x, u in enumerate(self.live[a])}
            kept = self._kept[b]
            outs = [u for u in self.live[b] if u >= a and u in kept]
            at = {u: i for i, u in enumerate(outs)}
            got = self._templates[(a, b)] = (outs, tuple(
                None if u not in kept else (pos[u] if u < a else -1 - at[u]) for u in self.live[b]))
        return got

    def _chains(self, a: int, state: Tuple[int, ...]) -> Tuple[np.ndarray, np.ndarray]:
        """For every PU set of two or more PUs (index :attr:`_multi`) at once: ``finish[i, v - a, q]`` = ``F[v][q]``
        (module docstring; ``inf`` for ``q`` outside the set), blocks ``a..`` up to the last stop any of them
        may reach below the limit, and ``chain[i, b] = max_{a <= v < b} min_q F[v][q]``."""
        key = (a, state)
        got = self._chain_cache.get(key)
        if got is not None:
            return got
        p, n = self.problem, self.n
        masks = dict(zip(self.live[a], state))
        off = self._off  # (sets, k): 0 on the set's PUs, inf elsewhere
        finish = np.full((len(off), n - a, self.k), np.inf)
        for v in range(a, self._last[a]):
            ready = np.zeros(off.shape)
            for u in p.preds[v]:
                per_pu, _ = self._hops(u, v)
                if u < a:
                    ready = np.maximum(ready, per_pu[masks[u]][None, :])
                else:
                    hop = (finish[:, u - a, :, None] + per_pu[self._single][None, :, :]).min(axis=1)
                    ready = np.maximum(ready, hop)
            finish[:, v - a, :] = ready + self.problem.time_s[v][None, :] + off
        chain = np.zeros((len(off), n + 1))
        chain[:, a + 1:] = np.maximum.accumulate(finish.min(axis=2), axis=1)
        got = self._chain_cache[key] = (finish, chain)
        return got

    def lagrange_value(self, lam: np.ndarray) -> Tuple[float, np.ndarray]:
        """``min over paths of λ · busy`` (inf when no path reaches the end below the limit) and the busy (k,)
        vector of a minimiser."""
        dist, arg = self._shortest(lam)
        if self.end is None or not np.isfinite(dist[self.end]):
            return np.inf, np.full(self.k, np.inf)
        busy = np.zeros(self.k)
        node = self.end
        while node != 0:
            e = arg[node]
            busy += self.cost[e] * self.member[self.group[e]]
            node = int(self.src[e])
        return float(dist[self.end]), busy

    def _shortest(self, lam: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        w = self.cost * (self.member @ lam)[self.group]
        dist = np.full(len(self.node_cut), np.inf)
        dist[0] = 0.0
        arg = np.full(len(self.node_cut), -1, dtype=np.int64)
        for a in range(self.n):
            lo, hi = self.by_cut[a], self.by_cut[a + 1]
            if lo == hi:
                continue
            tot = dist[self.src[lo:hi]] + w[lo:hi]
            d = self.dst[lo:hi]
            np.minimum.at(dist, d, tot)
            won = tot <= dist[d]
            arg[d[won]] = np.arange(lo, hi)[won]
        return dist, arg

    def cost_to_go(self, lam: np.ndarray) -> np.ndarray:
        """(N,): per node, the least ``λ``-weighted cost of a path from it to the end (inf where none)."""
        w = self.cost * (self.member @ lam)[self.group]
        h = np.full(len(self.node_cut), np.inf)
        if self.end is not None:
            h[self.end] = 0.0
        for a in range(self.n - 1, -1, -1):
            lo, hi = self.by_cut[a], self.by_cut[a + 1]
            if lo < hi:
                np.minimum.at(h, self.src[lo:hi], w[lo:hi] + h[self.dst[lo:hi]])
        return h

    def probe(self, grid: float = 0.0, budget: Optional[Budget] = None,
              guide: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> Optional[float]:
        """The least largest busy time over the paths, if below the limit, else None (then every mapping of the
        space has a period of at least the limit). ``grid > 0``: labels merged on that lattice (seconds).
        ``guide = (λ, cost_to_go(λ))`` also drops labels whose ``λ · busy`` plus their node's cost to go reaches
        the limit.

        Raises
        ------
        BudgetExceeded
            ``budget`` ran out.
        """
        n, k, limit = self.n, self.k, self.limit_s
        if self.end is None:
            return None
        labels: Dict[int, List[np.ndarray]] = {0: [np.zeros((1, k))]}
        best = np.inf
        cut_of = self.node_cut
        weight = self.cost[:, None] * self.member[self.group]  # (E, k): what each edge adds
        ends = cut_of[self.dst] == n
        bound_sum = self.rest[cut_of[self.dst]] - limit * k  # a label's sum must stay below -this
        alive = np.ones(len(self.cost), dtype=bool)
        togo_lam = None
        lam = np.zeros(k)
        if guide is not None:
            lam, h = guide
            togo_lam = h[self.dst] - limit
            # an edge on a path below the limit: the least λ-weighted path through it stays below the limit too
            dist, _ = self._shortest(lam)
            alive = dist[self.src] + weight @ lam + h[self.dst] < limit
        for a in range(n):
            _check(budget, f"block {a} of {n}")
            for node in [x for x in np.flatnonzero(cut_of == a).tolist() if x in labels]:
                parts = labels.pop(node)
                span = self.out.get(node)
                if span is None or not alive[span[0]:span[1]].any():
                    continue
                x = np.concatenate(parts) if len(parts) > 1 else parts[0]
                if len(x) > 1 and grid > 0:
                    x = meet_on_grid(x, grid)
                if len(x) > 1:
                    rows = len(x)
                    x = x[pareto_mask(x)]
                    if budget is not None:  # the filter's row-against-front comparisons
                        budget.spend(rows * len(x) * k / PARETO_UNIT)
                es = span[0] + np.flatnonzero(alive[span[0]:span[1]])
                y = x[None, :, :] + weight[es, None, :]  # (edges, labels, k)
                keep = (y.max(axis=2) < limit) & (y.sum(axis=2) + bound_sum[es, None] < 0)
                if togo_lam is not None:
                    keep &= y @ lam + togo_lam[es, None] < 0
                if budget is not None:
                    budget.spend(PROBE_ENTRY_UNITS * y.shape[0] * y.shape[1])
                for i in np.flatnonzero(keep.any(axis=1)).tolist():
                    ye = y[i][keep[i]]
                    e = int(es[i])
                    if ends[e]:
                        best = min(best, float(ye.max(axis=1).min()))
                    else:
                        labels.setdefault(int(self.dst[e]), []).append(ye)
        return best if best < limit else None


def reuse_period_bound(problem: MappingProblem, best_period_s: float, floor_s: float = 0.0,
                       budget: Optional[Budget] = None, dispatch: Optional[np.ndarray] = None,
                       certify_gap: float = 0.10, rtol: float = 1e-9,
                       guide: Optional[Tuple[np.ndarray, Sequence[float]]] = None,
                       cap_s: float = np.inf, runs: Optional[Dict[int, np.ndarray]] = None
                       ) -> Tuple[float, bool, str]:
    """The DP's bound on the period of the PU-reuse space, whether it proves ``best_period_s`` optimal, and
    which of its bounds gave it (``reuse-lagrangian``, ``reuse-dp`` or ``""`` for none above ``floor_s``).

    At the limit that certifies ``best_period_s`` within ``certify_gap`` (``X``): the graph, its Lagrangian
    bound, and, if that stays below ``X``, the probe guided by the Lagrangian's ``λ``; once ``X`` is certified,
    the same at ``(1 - rtol) × min(best_period_s, cap_s)`` (a proof of optimality, or the DP's own optimum),
    within what remains of ``budget`` (a graph whose build is projected past it stops early,
    :data:`PROJECT_FROM`). ``floor_s``: a bound already known (returned when the DP does no better or runs out of
    budget); ``cap_s``: no need to go beyond (the other space's bound); ``runs``:
    :func:`parapipe.search.stage_bound.stage_run_bounds` of ``problem`` when already computed.

    Returns
    -------
    (bound_s, proved, method)

    Raises
    ------
    ValueError
        More than :data:`MAX_PUS` PUs.
    """
    top = min(best_period_s, cap_s) * (1 - rtol)
    target = min(top, best_period_s * (1 + 1e-6) / (1 + certify_gap))
    lo, method = floor_s, ""
    n = max(problem.n_blocks, 1)
    if problem.n_pus > MAX_PUS:
        raise ValueError(f"{problem.n_pus} PUs: the reuse stage bound handles at most {MAX_PUS}")
    runs = runs if runs else stage_run_bounds(problem)
    for limit in ((target, top) if target < top else (top,)):
        if limit <= lo:
            continue
        try:
            dp = ReuseStageDP(problem, limit, dispatch, budget, guide, runs)
            lag, lam = kelley(dp.lagrange_value, dp.k, limit, budget=budget,
                              units_per_value=LAGRANGE_EDGE_UNITS * (len(dp.cost) + len(dp.node_cut)))
            if lag >= limit:
                lo, method = limit, "reuse-lagrangian"
                continue
            if lag > lo:
                lo, method = lag, "reuse-lagrangian"
            got = dp.probe(GRID_REL * limit / n, budget, (lam, dp.cost_to_go(lam)))
        except BudgetExceeded:
            break
        if got is not None:
            if got > lo:
                lo, method = got, "reuse-dp"
            break
        lo, method = limit, "reuse-dp"
    proved = lo >= best_period_s * (1 - rtol)
    return (best_period_s if proved else lo), proved, method
