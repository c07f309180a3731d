"""A period lower bound over mappings whose PUs each serve one stage: the disjoint and the replicated spaces.

In the replicated space (:mod:`.replicate`) and the disjoint-group space every PU belongs to at most one stage,
so a PU's busy time is its stage's period contribution and the period is the largest stage contribution. A
stage over blocks ``a..b-1`` on the PU set ``G`` contributes ``T`` (one replica, :mod:`parapipe.cost.evaluate`)
or ``1 / Σ_r 1/T_r`` (replicas on a partition of ``G``, :mod:`parapipe.cost.replication`), increasing in every
``T_r``; so with a lower bound ``lb(a, b, S)`` on the time ``T`` of one frame through the blocks on the PU set
``S``, the least largest stage bound over every cut into stages and every assignment of disjoint PU sets,

    ``f[b][U] = min over a < b, ∅ ≠ G ⊆ U of max(f[a][U \\ G], c(a, b, G))``,
    ``c(a, b, G) = min over partitions π of G of 1 / Σ_{S ∈ π} 1 / lb(a, b, S)``,

bounds the period of every such mapping (an exact DP over (block, PUs used): ``(n + 1) × 2^k`` states).
Transfers inside a stage that the bounds below leave out, and the other pipeline terms, only add time; with the
terms' ``dispatch`` table (:func:`parapipe.search.bounds.dispatch_table`) every stage and replica on the PU set
``S`` also pays ``d_S``, added to ``lb(a, b, S)``.

``lb(a, b, S) = in(a, b, S) + run(a, b, S)``:

* ``in``: the input hand-off. Every producer ``u < a`` of a block ``v`` of the stage sits on a PU outside ``S``,
  and for a replica on ``S`` of a stage on ``G``, outside ``G`` (PUs are disjoint between stages; a replicated producer's mean over its replicas is at least its least), and
  the stage receives each producer's tensor at least once: ``Σ_u min_v min_{p ∉ S runs u, q ∈ S runs v}
  alpha[p, q] + nbytes(u, v) / beta[p, q]`` over the edges ``u -> v`` that carry bytes (on one PU ``q``, every
  consumer is on ``q`` and the one transfer per producer carries its largest edge: ``max_v`` instead of
  ``min_v``).
* ``run`` on one PU ``p``: ``Σ_v t[v, p]`` (the blocks run one after the other; ``inf`` where ``p`` cannot run
  one). On a group ``S`` (list-scheduled, :mod:`.listsched`), the makespan is at least each of: a critical
  path that knows the PUs: ``L[v][q]``, the least finish time of ``v`` on
  ``q`` given its in-stage predecessors' least finish times on any PU plus the transfer to ``q``
  (:func:`_chain_bounds`), its largest least value over ``q``; the weighted work ``Σ_v min_{q ∈ S} λ_q t[v, q]``
  for weights ``λ`` on the simplex (the makespan is at least every PU's load, so at least ``Σ_q λ_q load_q``),
  with ``λ`` uniform and ``λ_q ∝ (1 / Σ_v t[v, q])^γ`` for each γ of :data:`WEIGHT_EXPONENTS` (PUs of unequal
  speeds); and, per PU ``q``, the blocks only
  ``q`` of ``S`` runs.

**Hand-off shares** (``target_s``, a period ``X``: the bound then speaks for "no mapping is faster than the
least of ``X`` and the value"). Replicas are dealt frames in shares ``w_r = P' / T_r``
(:mod:`parapipe.cost.replication`), and the next stage's mean input is the share-weighted mean of the hand-offs
from its producers' replicas, so ``in`` above, which takes the cheapest replica, is weak when that replica is
slow. For the first two stages, the first on blocks ``0..a-1`` over a partition ``π`` of ``G'`` (its replicas
``T_r >= lb_r = run(0, a, r) + d_r``, no input) and the second, one replica, on ``g`` over ``a..b-1``: if the
period is below ``X`` then ``P' < X``, so ``w_r <= X / lb_r``, and the second stage's time is at least
``run(a, b, g) + d_g + E(X)``, ``E(X) = min Σ_r w_r c_r`` over shares summing to 1 within those caps (cheapest
first), with ``c_r`` the least transfer of the boundary tensor ``a-1 -> a`` (when ``a`` reads it) from a PU of
``r`` that runs ``a-1`` to a PU of ``g`` that runs ``a``. So the larger of the two contributions is at least
``max(1 / Σ_r 1/lb_r, lb(a, b, g) + d_g, min(X, run(a, b, g) + d_g + E(X)))`` (``P' >= X`` or else ``E(X)``
holds), or, for a replicated second stage, ``max(1 / Σ_r 1/lb_r, c(a, b, g))``; the DP keeps prefixes of one stage apart and charges this pair when a second stage
follows (PU sets known: where the first stage holds every PU the second does not, it must start at block 0, the
case the cheapest-replica bound misses). Later stages keep the bound above.

Transfers inside a stage, every other pipeline term and operating-point switches only add time, and the
problem's times are taken at each block's fastest point (:func:`parapipe.search.bounds.fastest_problem`), so
the bound holds for every operating point.

Cost: ``O(n² · 2^k)`` for the stage table and ``O(n · 3^k)`` vector steps for the DP (about 20 ms for 48
blocks on 4 PUs); beyond :data:`MAX_PUS` PUs it is not built. The hand-off-share pairs add about 30 ms on 48
blocks × 4 PUs (``python benchmarks/search_bench.py``) and run up to :data:`PAIR_MAX_PUS` PUs.
"""
from __future__ import annotations

from itertools import combinations
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..cost.problem import MappingProblem
from .partitions import set_partitions

__all__ = ["MAX_PUS", "PAIR_MAX_PUS", "WEIGHT_EXPONENTS", "stage_run_bounds", "stage_time_bounds", "stage_period_bound"]

WEIGHT_EXPONENTS = (0.5, 1.0, 1.5, 2.0, 3.0)
"""Exponents γ of the weighted-work bound's PU weights (any weights give a valid bound; these spread from near
uniform to the fastest PU's; measured on the zoo × A311D/A1000, ``python benchmarks/search_bench.py``)."""

MAX_PUS = 6
"""Largest PU count the bound is built for (the DP steps grow as 3^k; 6 PUs: 729 per block)."""


PAIR_MAX_PUS = 4
"""Largest PU count the hand-off-share refinement runs for (it walks every first-stage partition next to every
second-stage PU set: 135 pairs on 4 PUs, about 4000 on 6)."""


def _mask(pus) -> int:
    return sum(1 << p for p in pus)


def _range_sums(x: np.ndarray) -> np.ndarray:
    """(n + 1, n + 1): ``s[a, b] = Σ_{a <= v < b} x[v]`` (``inf`` when one is), 0 for ``b <= a``."""
    n = len(x)
    finite = np.isfinite(x)
    c = np.concatenate([[0.0], np.cumsum(np.where(finite, x, 0.0))])
    bad = np.concatenate([[0], np.cumsum(~finite)])
    s = c[None, :] - c[:, None]
    s = np.where(bad[None, :] - bad[:, None] > 0, np.inf, s)
    idx = np.arange(n + 1)
    s[idx[:, None] >= idx[None, :]] = 0.0
    return s


def _chain_bounds(problem: MappingProblem, t: np.ndarray, pus: Tuple[int, ...]) -> np.ndarray:
    """(n + 1, n + 1): ``c[a, b]``, a lower bound on the makespan of blocks ``a..b-1`` list-scheduled on ``pus``
    (any assignment; ``inf`` where a block runs on none of them), 0 for ``b <= a``.

    ``L[v][q] = t[v, q] + max over predecessors u in the stage of min over q' of (L[u][q'] + comm(q', q))`` is
    at most the finish time of ``v`` when it runs on ``q`` (by induction: ``v`` starts after each in-stage
    predecessor's output arrived), so the makespan is at least ``max_v min_q L[v][q]``."""
    n = t.shape[0]
    r = len(pus)
    starts = np.arange(n)
    times = t[:, list(pus)]  # (n, r)
    finish = np.zeros((n, n, r))  # [a, v, i]: L[v][pus[i]] in the stage starting at block a (v >= a)
    for v in range(n):
        ready = np.zeros((n, r))
        for u in problem.preds[v]:
            nb = problem.edge_nbytes.get((u, v), 0.0)
            hop = np.array([[problem.comm_s(p, q, nb) for q in pus] for p in pus])  # (r from, r to)
            arrive = (finish[:, u, :, None] + hop[None]).min(axis=1)  # (n, r to)
            ready = np.maximum(ready, np.where((starts <= u)[:, None], arrive, 0.0))
        finish[:, v, :] = ready + times[v][None, :]
    least = finish.min(axis=2)  # (a, v)
    least[starts[:, None] > starts[None, :]] = 0.0
    out = np.zeros((n + 1, n + 1))
    out[:n, 1:] = np.maximum.accumulate(least, axis=1)
    out[np.arange(n + 1)[:, None] >= np.arange(n + 1)[None, :]] = 0.0
    return out


def _input_bounds(problem: MappingProblem, t: np.ndarray, pus: Tuple[int, ...],
                  stage_pus: Optional[Tuple[int, ...]] = None) -> np.ndarray:
    """(n + 1, n + 1): ``in(a, b, S)`` of the module docstring for ``S = pus``, the producers on PUs outside
    ``stage_pus`` (default ``pus``: a replica's producers lie outside its whole stage's PUs)."""
    n, k = t.shape
    out = np.zeros((n + 1, n + 1))
    inside = np.zeros(k, dtype=bool)
    inside[list(pus)] = True
    stage = np.zeros(k, dtype=bool)
    stage[list(pus if stage_pus is None else stage_pus)] = True
    if stage.all() or not problem.edge_nbytes:
        return out  # no PU outside the stage: no mapping of this kind has an earlier stage (the bound stays 0)
    finite = np.isfinite(t)
    cost = np.full((n, n), np.inf)
    for (u, v), nb in problem.edge_nbytes.items():
        if not nb > 0:
            continue  # an empty tensor moves for free (MappingProblem.comm_s)
        src = np.flatnonzero(~stage & finite[u])
        dst = np.flatnonzero(inside & finite[v])
        if len(src) and len(dst):
            c = problem.alpha_s[np.ix_(src, dst)] + nb / problem.beta_bytes_per_s[np.ix_(src, dst)]
            cost[u, v] = min(cost[u, v], float(c.min()))
    single = len(pus) == 1
    if single:  # every consumer on the one PU: each producer's tensor goes once, with its largest edge
        cost = np.where(np.isfinite(cost), cost, 0.0)
    for a in range(1, n):
        block = cost[:a, a:]  # producers before the stage, consumers from its first block on
        run = np.maximum.accumulate(block, axis=1) if single else np.minimum.accumulate(block, axis=1)
        out[a, a + 1:] = np.where(np.isfinite(run), run, 0.0).sum(axis=0)
    return out


def stage_run_bounds(problem: MappingProblem) -> Dict[int, np.ndarray]:
    """``run(a, b, S)`` of the module docstring (the makespan alone, no input hand-off): per PU-set bit mask, an
    (n + 1, n + 1) array, seconds (``inf`` where a block runs on none of ``S``)."""
    t = problem.time_s
    n, k = t.shape
    out: Dict[int, np.ndarray] = {}
    for r in range(1, k + 1):
        for pus in combinations(range(k), r):
            sub = t[:, list(pus)]
            if r == 1:
                run = _range_sums(sub[:, 0])
            else:
                fastest = sub.min(axis=1)
                run = np.maximum(_chain_bounds(problem, t, pus), _range_sums(fastest) / r)
                work = np.where(np.isfinite(sub), sub, 0.0).sum(axis=0)
                if (work > 0).all():  # λ ∝ (1 / each PU's work over the model)^γ: weights of unequal speeds
                    for gamma in WEIGHT_EXPONENTS:
                        lam = work ** -gamma
                        lam /= lam.sum()
                        run = np.maximum(run, _range_sums((lam[None, :] * sub).min(axis=1)))
                able = np.isfinite(sub)
                only = able.sum(axis=1) == 1
                for i in range(r):
                    run = np.maximum(run, _range_sums(np.where(only & able[:, i], sub[:, i], 0.0)))
            out[_mask(pus)] = run
    return out


def stage_time_bounds(problem: MappingProblem, runs: Optional[Dict[int, np.ndarray]] = None
                      ) -> Dict[int, np.ndarray]:
    """``lb(a, b, S)`` of the module docstring: per PU-set bit mask, an (n + 1, n + 1) array, seconds. ``runs``:
    :func:`stage_run_bounds` of ``problem`` when already computed."""
    runs = runs or stage_run_bounds(problem)
    return {m: _input_bounds(problem, problem.time_s, tuple(p for p in range(problem.n_pus) if m >> p & 1)) + run
            for m, run in runs.items()}


def stage_period_bound(problem: MappingProblem, dispatch: Optional[np.ndarray] = None,
                       target_s: Optional[float] = None, runs: Optional[Dict[int, np.ndarray]] = None) -> float:
    """The bound of the module docstring, seconds: no mapping in which each PU serves at most one stage
    (replicated stages included) has a shorter period. ``dispatch``: ``d_S`` per PU-set bit mask (module
    docstring; None: 0). ``target_s`` (a period, e.g. the best one a search found): with at most
    :data:`PAIR_MAX_PUS` PUs, the second stage after a first stage is bounded from the first stage's frame shares
    (module docstring, "Hand-off shares"); the bound then never exceeds ``target_s``. ``runs``:
    :func:`stage_run_bounds` of ``problem`` when already computed.

    Raises
    ------
    ValueError
        More than :data:`MAX_PUS` PUs.
    """
    n, k = problem.n_blocks, problem.n_pus
    if k > MAX_PUS:
        raise ValueError(f"{k} PUs: the stage bound handles at most {MAX_PUS}")
    runs = runs or stage_run_bounds(problem)
    lb = stage_time_bounds(problem, runs)
    if dispatch is not None:
        lb = {m: x + float(dispatch[m]) for m, x in lb.items()}
    full = (1 << k) - 1
    # c(a, b, G): one replica on G, or replicas on a partition of G (>= 2 parts), each replica's producers on
    # PUs outside G (its input bound taken so: PUs are disjoint between stages)
    contrib: Dict[int, np.ndarray] = {}
    repl: Dict[int, np.ndarray] = {}  # the replicated ways alone (>= 2 replicas)
    for g in range(1, full + 1):
        pus = tuple(p for p in range(k) if g >> p & 1)
        best = np.full_like(lb[g], np.inf)
        speed: Dict[int, np.ndarray] = {}
        for part in set_partitions(pus):
            if len(part) < 2:
                continue
            for s in part:
                m = _mask(s)
                if m not in speed:
                    x = _input_bounds(problem, problem.time_s, s, pus) + runs[m] + (
                        0.0 if dispatch is None else float(dispatch[m]))
                    with np.errstate(divide="ignore"):
                        speed[m] = np.where(np.isfinite(x), 1.0 / x, 0.0)
            total = sum(speed[_mask(s)] for s in part)
            with np.errstate(divide="ignore"):
                best = np.minimum(best, np.where(total > 0, 1.0 / np.where(total > 0, total, 1.0), np.inf))
        repl[g] = best
        contrib[g] = np.minimum(lb[g], best)
    pairs: List[Tuple[int, int]] = [(u, g) for u in range(1, full + 1) for g in range(1, full + 1) if g & u == g]
    first = None
    if target_s is not None and k <= PAIR_MAX_PUS and n > 1:
        first = _first_pairs(problem, lb, runs, repl, dispatch, float(target_s))
    f = np.full((n + 1, full + 1), np.inf)  # with `first`: prefixes of >= 2 stages (one stage: `one`)
    one = np.full((n + 1, full + 1), np.inf)  # prefixes of exactly one stage, on a subset of the mask
    if first is None:
        f[0, :] = 0.0  # PUs may stay unused
    for b in range(1, n + 1):
        for u, g in pairs:
            val = float(np.maximum(f[:b, u ^ g], contrib[g][:b, b]).min())
            if first is not None:
                one[b, u] = min(one[b, u], float(contrib[g][0, b]))
                if u ^ g and b > 1:
                    val = min(val, float(first[g][u ^ g][1:b, b].min()))
            if val < f[b, u]:
                f[b, u] = val
    return float(min(f[n].min(), one[n].min()))


def _first_pairs(problem: MappingProblem, lb: Dict[int, np.ndarray], runs: Dict[int, np.ndarray],
                 repl: Dict[int, np.ndarray], dispatch: Optional[np.ndarray], target_s: float
                 ) -> Dict[int, Dict[int, np.ndarray]]:
    """``out[g][W][a, b]``: a lower bound on the larger period contribution of the first two stages when the first
    stage runs blocks ``0..a-1`` on a non-empty PU set inside ``W`` and the second blocks ``a..b-1`` on ``g``
    (module docstring, "Hand-off shares"); ``inf`` for ``a = 0``."""
    n, k = problem.n_blocks, problem.n_pus
    t = problem.time_s
    full = (1 << k) - 1
    d = (lambda m: 0.0) if dispatch is None else (lambda m: float(dispatch[m]))
    finite = np.isfinite(t)
    # per a in 1..n-1: the boundary tensor a-1 -> a (0 bytes: no hand-off to count)
    nb = np.array([problem.edge_nbytes.get((a - 1, a), 0.0) if (a - 1) in problem.preds[a] else 0.0
                   for a in range(1, n)])

    def hand(src: Tuple[int, ...], dst_mask: int) -> np.ndarray:
        """(n + 1,): the least time of the boundary tensor from a PU of ``src`` that runs block a-1 to a PU of
        ``dst_mask`` that runs block a (``inf`` where none; 0 without bytes), index a."""
        out = np.full(n + 1, np.inf)
        dst = [q for q in range(k) if dst_mask >> q & 1]
        for i, a in enumerate(range(1, n)):
            if not nb[i] > 0:
                out[a] = 0.0
                continue
            for p in src:
                if not finite[a - 1, p]:
                    continue
                for q in dst:
                    if finite[a, q]:
                        out[a] = min(out[a], problem.comm_s(p, q, float(nb[i])))
        return out

    plain = lb  # a plain stage on g: its bound with its own input and dispatch
    out: Dict[int, Dict[int, np.ndarray]] = {}
    hand_cache: Dict[Tuple[Tuple[int, ...], int], np.ndarray] = {}
    for g in range(1, full + 1):
        base = runs[g] + d(g)  # (a, b): the second stage's makespan and dispatch, without its input
        per_first: Dict[int, np.ndarray] = {}
        for h in range(1, full + 1):
            if h & g:
                continue
            pus = tuple(p for p in range(k) if h >> p & 1)
            best = np.full((n + 1, n + 1), np.inf)
            for part in set_partitions(pus):
                lbs = np.stack([runs[_mask(r)][0] + d(_mask(r)) for r in part])  # (R, n + 1): T_r >= lb_r, index a
                with np.errstate(divide="ignore"):
                    p_lb = 1.0 / np.sum(1.0 / lbs, axis=0)  # the first stage's contribution, at least
                costs = []
                for r in part:
                    key = (r, g)
                    if key not in hand_cache:
                        hand_cache[key] = hand(r, g)
                    costs.append(hand_cache[key])
                cost = np.stack(costs)  # (R, n + 1)
                # E(target): the least share-weighted hand-off, shares w_r <= target / lb_r summing to 1
                with np.errstate(divide="ignore", invalid="ignore"):
                    cap = np.where(lbs > 0, target_s / lbs, np.inf)
                order = np.argsort(cost, axis=0, kind="stable")
                left = np.ones(n + 1)
                e = np.zeros(n + 1)
                cols = np.arange(n + 1)
                for j in range(len(part)):
                    r = order[j]
                    w = np.minimum(cap[r, cols], left)
                    c = cost[r, cols]
                    with np.errstate(invalid="ignore"):
                        e = e + np.where(w > 0, w * c, 0.0)
                    left = left - w
                e = np.where(left > 1e-12, np.inf, e)  # the shares cannot reach 1: the first stage is slower
                second = np.maximum(plain[g], np.minimum(target_s, base + e[:, None]))
                val = np.maximum(p_lb[:, None], np.minimum(second, repl[g]))  # the second stage plain or replicated
                best = np.minimum(best, val)
            best[0, :] = np.inf
            per_first[h] = best
        # W: every superset of a first set h (PUs may stay unused)
        out[g] = {}
        for w_mask in range(1, full + 1):
            if w_mask & g:
                continue
            acc = np.full((n + 1, n + 1), np.inf)
            for h, arr in per_first.items():
                if h & w_mask == h:
                    acc = np.minimum(acc, arr)
            out[g][w_mask] = acc
    return out

