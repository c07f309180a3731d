"""A period lower bound that accounts for op support and forced hand-offs: a min-max DP over a per-block
relaxation of every mapping.

**The relaxation.** Write any mapping (contiguous stages; a stage on one PU, or on a group ``G`` with any
assignment and order; :mod:`parapipe.cost.evaluate`) as one *mode* per block: ``p`` when its stage runs on PU
``p`` alone, ``(G, q)`` when its stage runs on a group ``G`` and ``q`` is the PU of the latest *spine* block of
the stage so far (the spine is one fixed longest path of the DAG, by fastest block times), each *expanded* by
``s``, the PU of the latest spine block of the whole mapping so far (in any stage). Along the blocks, a label
holds every PU's busy time from closed stages plus, for an open group stage, its input hand-offs, spine path
and work; each stage adds to its PUs no more than it costs in the real mapping:

* a stage on one PU ``p``: its blocks' times on ``p`` (infinite where ``p`` cannot run a block: op support);
* a stage on a group ``G``, to every PU of ``G``: ``max(path, work)``, where ``path`` runs along the stage's
  spine blocks, each on its PU, with a transfer between consecutive ones on different PUs (a chain of
  dependencies: the makespan is at least its length), and ``work = Σ_v min_{p ∈ G} μ_p t[v, p]`` for weights
  ``μ`` on ``G`` (the makespan is at least every PU's load, so at least ``Σ_p μ_p load_p``; ``μ_p`` in
  proportion to ``p``'s speed over the blocks all of ``G`` runs). The Lagrangian bound below, which needs costs
  that add up block by block, charges ``path`` only;
* the spine's transfers: a spine block ``v`` on PU ``q`` whose spine predecessor sat on ``s != q`` adds
  ``comm(s, q)`` of that edge to every PU of ``v``'s stage, on its path when the predecessor is in the same
  stage and as its input hand-off otherwise (``T_in`` of :mod:`parapipe.cost.evaluate`, every PU of the stage
  waits for it) — so a stage cannot hide the spine's input behind an earlier stage of a few off-spine blocks;
* at a stage boundary between ``v − 1`` and ``v`` where ``v`` is the first block that reads ``v − 1``'s output
  (and ``v − 1`` is not ``v``'s spine predecessor, charged above): one transfer into the new stage (its PUs'
  busy times) unless a PU the producer may sit on also runs ``v`` in the new stage — so an NPU that cannot run
  ``Add`` pays a hand-off at every residual. Other transfers are left out (a bound may leave costs out, never
  add them).

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

**Cost.** The expanded modes are ``k + 1`` times as many (``s`` unknown after a replicated stage's spine block;
up to :data:`CARRY_MAX_PUS` PUs, beyond which ``s`` is always unknown and the path charge falls back to the
mode's ``q``); the Lagrangian bound and its cost-to-go run on the modes without ``s`` (a relaxation that charges
no more, so its cost-to-go still prunes the probes soundly: :meth:`RelaxedDP.expand_togo`), the probes on the
expanded ones.
"""
from __future__ import annotations

from itertools import combinations
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..cost.problem import MappingProblem
from .budget import Budget, BudgetExceeded
from .lagrangian import cost_to_go, lagrangian_period_bound
from .pareto import meet_on_grid, pareto_mask
from .partitions import set_partitions

__all__ = ["MAX_PUS", "GRID_REL", "CARRY_MAX_PUS", "MOVES_CACHE_MODES", "STEP_UNITS", "PARETO_UNIT", "spine", "RelaxedDP", "Relaxed", "relaxed_period_bound"]

MAX_PUS = 5
"""Largest PU count handled (modes grow as k · 2^(k-1); beyond it the other bounds of :mod:`.bounds` stand)."""
GRID_REL = 0.01
"""Label-merging lattice as a fraction of the probe limit, spread over the blocks: the bound loses at most 1 %."""
CARRY_MAX_PUS = 4
"""Largest PU count whose modes carry the spine PU across stages (NM = modes × (k + 1) expanded modes; at 5 PUs the
(NM, NM) move tables of :meth:`RelaxedDP.moves` cost ~2 MB each per block and the bound lost time, measured on a
5-PU block table)."""
MOVES_CACHE_MODES = 256
"""Expanded-mode count up to which :meth:`RelaxedDP.moves` keeps its tables (2 × NM² floats per block: 20 MB for
4 PUs and 48 blocks)."""
STEP_UNITS = 300.0
"""Units of :data:`parapipe.search.budget.RELAX_WORK_PER_S` a probe charges per (block, mode) step on top of its
rows: the fixed cost of a step's numpy calls, about 80 µs (Inception-v2 on the A1000 profile: 15,456 steps of
six probes took 1.2 s of CPU with few rows each; ``python -m cProfile`` on ``parapipe.search.api.search``)."""
PARETO_UNIT = 550.0
"""Row-against-front comparisons (rows in × rows kept × PUs) of a probe's Pareto filter counted as one unit of
:data:`parapipe.search.budget.RELAX_WORK_PER_S`: :func:`parapipe.search.pareto.pareto_mask` compares each row
with the front kept so far, so on large label sets it costs far more than the one unit per row built (ResNet-50
on the A311D profile: 50 filters of ~13,000 four-PU rows keeping ~1,200 took 31 ms each, 1.1e9 comparisons/s
against 4e6 units/s, about 275 comparisons per unit; the front kept grows during a filter, hence half of
rows × kept × PUs, or 550 per unit. Re-measure: time ``pareto_mask`` on the rows ``RelaxedDP.probe`` builds)."""


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


def _replicated_charge(t: np.ndarray, groups: List[Tuple[int, ...]]) -> np.ndarray:
    """``h[v, g]``: the least busy time block ``v`` adds to every PU of ``groups[g]`` in a stage replicated over
    them (module docstring), ``inf`` where no partition into >= 2 replicas runs ``v``."""
    n = t.shape[0]
    h = np.full((n, len(groups)), np.inf)
    for gi, g in enumerate(groups):
        parts = [p for p in set_partitions(tuple(g)) if len(p) >= 2]
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

    def __init__(self, problem: MappingProblem, replicated: bool = False,
                 dispatch: Optional[np.ndarray] = None, carry_spine: bool = True):
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
        self.problem = problem
        self.n, self.k, self.nm = n, k, nm
        self.rest = np.concatenate([np.cumsum(np.min(t, axis=1)[::-1])[::-1], [0.0]])
        # Busy added by block v in mode m without transfers: t on p, or, to every PU of G, t on q for a spine block
        # (the stage's path; the probes also charge its work).
        self.opened = np.where(single[None, :] | on_spine[:, None], np.isfinite(tq), np.isfinite(gmin))
        finite = np.isfinite(t)
        tq0 = np.where(np.isfinite(tq), tq, 0.0)
        node = np.where(single[None, :, None], tq0[:, :, None] * member_q[None],
                        member[None] * np.where(on_spine[:, None], tq0, 0.0)[:, :, None])
        if replicated:
            h = _replicated_charge(t, [g for g, _ in modes[n_plain:]])  # (n, groups)
            self.opened[:, repl] = np.isfinite(h)
            node[:, repl, :] = np.where(np.isfinite(h), h, 0.0)[:, :, None] * member[None, repl, :]
        self.node = node  # (n, nm, k)
        # The probe's group stages (plain group modes): the stage time is at least its spine path and at least its
        # work, Σ_v min_{p∈G} μ_p·t[v, p] for any weights μ on G (Σ_p μ_p·load_p <= the largest load); μ_p is
        # proportional to p's speed, 1 / (its time over the blocks every PU of G runs).
        is_group = ~single & ~repl
        path_inc = np.where(on_spine[:, None] & is_group[None, :], tq0, 0.0)  # (n, nm)
        work_inc = np.zeros((n, nm))
        for mi in np.flatnonzero(is_group).tolist():
            gp = list(modes[mi][0])
            common = np.all(finite[:, gp], axis=1)
            mu = 1.0 / np.maximum(t[common][:, gp].sum(axis=0), 1e-30) if common.any() else np.ones(len(gp))
            mu = mu / mu.sum()
            work_inc[:, mi] = np.min(np.where(finite[:, gp], t[:, gp] * mu[None, :], np.inf), axis=1)
        work_inc[~np.isfinite(work_inc)] = 0.0
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
        charge = np.where(repl[:, None], member / size[:, None], member.astype(float))
        # Forced hand-off of the edge (v - 1, v) into a new stage at v, per pair of base modes (module docstring).
        hand: List[Optional[np.ndarray]] = [None] * n
        spine_comm: List[Optional[np.ndarray]] = [None] * n  # (k, k) transfer along the spine edge into v
        for v in range(1, n):
            u = v - 1
            nb = problem.edge_nbytes.get((u, v), 0.0)
            if u in problem.preds[v] and min(problem.succs[u]) == v and nb > 0:
                comm = problem.comm_matrix_s(nb)
                # PUs the producer may sit on / that may run v: the mode's PU for a single-PU stage and for a
                # spine block of a group stage (it is the mode's q), else the group's PUs that support it.
                prod = np.where(repl[:, None] | ~on_spine[u], member, member_q) & finite[u][None, :]
                cons = np.where(repl[:, None] | ~on_spine[v], member, member_q) & finite[v][None, :]
                pair = prod[:, None, :, None] & cons[None, :, None, :]
                h = np.where(pair, comm[None, None], np.inf).min(axis=(2, 3))
                h[~np.isfinite(h)] = 0.0
                hand[v] = h
            if on_spine[v] and prev_spine[v] >= 0:
                spine_comm[v] = problem.comm_matrix_s(problem.edge_nbytes.get((prev_spine[v], v), 0.0))
        self._base: Dict[str, Any] = dict(nm=nm, member=member, single=single, pu=pu, gid=gid, repl=repl, hand=hand,
                          spine_comm=spine_comm, prev_spine=prev_spine)
        # Expanded modes (module docstring, "spine PU"): base mode m and s, the PU of the latest spine block
        # (k: unknown, after an R-mode spine block), as index m * (k + 1) + s.
        self.carry = carry_spine and k <= CARRY_MAX_PUS
        k1 = k + 1 if self.carry else 1
        self.unknown = k1 - 1  # the spine-PU index that says "unknown"
        rep = lambda a: np.repeat(a, k1, axis=0)  # noqa: E731 - per base mode -> per expanded mode
        self.base = np.repeat(np.arange(nm), k1)  # each expanded mode's base mode
        self.single = rep(single)  # each expanded mode: a stage on one PU ...
        self.pu = rep(pu)  # ... that PU (a group mode: its latest spine block's)
        spu = np.tile(np.arange(k1), nm)  # and its spine PU
        self.nm = nm * k1
        self.member = rep(member)
        self.node = np.repeat(node, k1, axis=1)  # (n, NM, k)
        self.is_group = rep(is_group)
        self.path_inc = np.repeat(path_inc, k1, axis=1)  # (n, NM)
        self.work_inc = np.repeat(work_inc, k1, axis=1)  # (n, NM)
        self.open = rep(self.open)
        self.charge = rep(charge)
        entry = np.where(on_spine[0] & ~repl & self.carry, pu, self.unknown)  # block 0 sets the spine PU if it is on the spine
        self.opened = np.repeat(self.opened, k1, axis=1)
        self.opened[0] &= spu == np.repeat(entry, k1)
        self.on_spine = on_spine
        self._moves_cache: List[Optional[Tuple[np.ndarray, np.ndarray]]] = [None] * n

    def expand_togo(self, h: np.ndarray) -> np.ndarray:
        """A cost-to-go table ``h`` (n, modes) of the relaxation without the spine PU (``carry_spine=False``)
        as one for this one's expanded modes (n, NM): a group mode takes the least over its group's spine PUs
        (its stage may not have met the spine yet, and from the spine PU ``s`` this relaxation charges no more
        than from the mode whose spine PU is the next spine block's), the others their own."""
        b = self._base
        h0 = h.copy()
        for g in np.unique(b["gid"][~b["single"]]):
            same = b["gid"] == g
            h0[:, same] = h[:, same].min(axis=1, keepdims=True)
        return h0[:, self.base]

    def moves(self, v: int) -> Tuple[np.ndarray, np.ndarray]:
        """``(A, B)``, each (NM, NM): the transfer block ``v`` adds when its expanded mode follows block
        ``v - 1``'s, in the same stage (``A``: times every PU of the mode's group, the stage's path or input
        hand-off) or as a new stage (``B``: times :attr:`charge`, the stage's input hand-off); ``inf`` where the
        move is not possible (the spine PU does not follow, or a single-PU stage "opening" on its own PU)."""
        got = self._moves_cache[v]
        if got is not None:
            return got
        b = self._base
        nm0, unknown = b["nm"], self.unknown
        k1 = unknown + 1
        member, single, pu, gid, repl = b["member"], b["single"], b["pu"], b["gid"], b["repl"]
        hand = b["hand"][v] if b["hand"][v] is not None else np.zeros((nm0, nm0))
        a0 = np.full((nm0, nm0), np.inf)
        a0[np.diag_indices(nm0)] = np.where(single, 0.0, np.inf)
        grp = (gid[:, None] == gid[None, :]) & ~single[:, None]
        if not self.on_spine[v]:
            grp &= pu[:, None] == pu[None, :]
        a0[grp] = 0.0
        b0 = hand.copy()
        b0[np.diag_indices(nm0)] = np.where(single, np.inf, b0[np.diag_indices(nm0)])
        # expand: src (m, s) -> dst (m2, s2)
        A = np.full((nm0, k1, nm0, k1), np.inf)
        B = np.full((nm0, k1, nm0, k1), np.inf)
        sc = b["spine_comm"][v]
        if not self.on_spine[v]:
            for s_ in range(k1):
                A[:, s_, :, s_] = a0
                B[:, s_, :, s_] = b0
        else:
            s2 = np.where(repl, unknown, pu) if self.carry else np.full(nm0, unknown)  # the spine PU after v
            adjacent = b["prev_spine"][v] == v - 1
            for s_ in range(k1):
                if sc is not None and s_ != unknown:  # the spine edge's transfer from s: path or input hand-off
                    sp = np.where(repl, 0.0, sc[s_, pu])[None, :]
                    a_s = a0 + sp
                    b_s = (b0 - (hand if adjacent else 0.0)) + sp  # it is the forced hand-off when adjacent
                    b_s = np.where(repl[None, :], b0, b_s)
                else:  # spine PU unknown: the path charge between the group's spine PUs, as without it
                    path = sc[pu][:, pu] if sc is not None else np.zeros((nm0, nm0))
                    a_s = a0 + np.where(single[None, :], 0.0, path)
                    b_s = b0
                A[:, s_, np.arange(nm0), s2] = a_s
                B[:, s_, np.arange(nm0), s2] = b_s
        got = (A.reshape(self.nm, self.nm), B.reshape(self.nm, self.nm))
        if self.nm <= MOVES_CACHE_MODES:
            self._moves_cache[v] = got
        return got

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
        member, rest, is_group = self.member, self.rest, self.is_group
        # A label: every PU's busy time from closed stages and the open stage's input hand-offs (k columns), then
        # the open group stage's spine path and work (0 for other modes); its busy vector is
        # busy + max(path, work) on every PU of the group.

        def effective(x: np.ndarray, m: int) -> np.ndarray:
            if not is_group[m]:
                return x[:, :k]
            return x[:, :k] + np.maximum(x[:, k], x[:, k + 1])[:, None] * member[m]

        def admit(x: np.ndarray, v: int, m: int) -> np.ndarray:
            if budget is not None:
                budget.spend(STEP_UNITS)
            e = effective(x, m)
            ok = (e.max(axis=1) < limit) & (e.sum(axis=1) + rest[v + 1] < limit * k)
            if guide is not None:  # the guide's relaxation charges the path only: busy + path, and its cost-to-go
                ok &= (x[:, :k] + x[:, k:k + 1] * member[m]) @ guide[0] + guide[1][v, m] < limit
            x = x[ok]
            if len(x) > 1 and grid > 0:
                x = meet_on_grid(x, grid)
            if len(x) <= 1:
                return x
            rows = len(x)
            x = x[pareto_mask(x)]
            if budget is not None:  # the filter's row-against-front comparisons (:data:`PARETO_UNIT`)
                budget.spend(rows * len(x) * (k + 2) / PARETO_UNIT)
            return x

        def start(v: int, m2: int) -> np.ndarray:
            """What block ``v`` opening a stage in mode ``m2`` adds to a label (before its hand-off)."""
            row = np.zeros(k + 2)
            row[:k] = self.open[m2]
            if is_group[m2]:
                row[k], row[k + 1] = self.path_inc[v, m2], self.work_inc[v, m2]
            else:
                row[:k] += self.node[v, m2]
            return row

        none = np.empty((0, k + 2))  # no label in a mode
        labels: List[np.ndarray] = [admit(start(0, m)[None], 0, m) if self.opened[0, m] else none
                                    for m in range(nm)]
        for v in range(1, n):
            _check(budget, v, n)
            srcs = [m for m in range(nm) if len(labels[m])]
            if not srcs:
                return None
            # (b) closes the source's stage: its labels' busy vectors, with path and work set to 0
            closed = np.concatenate([np.hstack([effective(labels[m], m), np.zeros((len(labels[m]), 2))])
                                     for m in srcs])
            cl = np.concatenate([labels[m] for m in srcs])
            src = np.repeat(np.array(srcs, dtype=int), [len(labels[m]) for m in srcs])
            move_a, move_b = self.moves(v)
            reach = np.isfinite(move_a[srcs]).any(axis=0) | np.isfinite(move_b[srcs]).any(axis=0)
            new: List[np.ndarray] = [none] * nm
            for m2 in np.flatnonzero(self.opened[v] & reach).tolist():
                _check(budget, v, n)
                parts = []
                cost = move_b[src, m2]  # (b) a new stage, with its input hand-off on every PU it charges
                keep = np.isfinite(cost)
                if keep.any():
                    x = closed[keep] + start(v, m2)
                    x[:, :k] += cost[keep][:, None] * self.charge[m2]
                    parts.append(x)
                cost = move_a[src, m2]  # (a) the same stage: the move's transfer is on the path (group)
                keep = np.isfinite(cost)
                if keep.any():
                    x = cl[keep].copy()
                    if is_group[m2]:
                        x[:, k] += self.path_inc[v, m2] + cost[keep]
                        x[:, k + 1] += self.work_inc[v, m2]
                    else:
                        x[:, :k] += self.node[v, m2] + cost[keep][:, None] * member[m2]
                    parts.append(x)
                if not parts:
                    continue
                cand = np.concatenate(parts)
                if budget is not None:
                    budget.spend(len(cand))
                new[m2] = admit(cand, v, m2)
            labels = new
        found = [float(effective(x, m).max(axis=1).min()) for m, x in enumerate(labels) if len(x)]
        return min(found) if found else None


class Relaxed:
    """The relaxation of a problem with its Lagrangian bound: ``bound_s``, the weights ``lam`` that reach it and
    the cost-to-go table for pruning (:func:`cost_to_go`)."""

    def __init__(self, problem: MappingProblem, best_period_s: Optional[float] = None,
                 budget: Optional[Budget] = None, replicated: bool = False, dispatch: Optional[np.ndarray] = None):
        self.replicated = replicated
        self.dispatch = dispatch
        # The Lagrangian runs on the modes without the spine PU (NM = k + 1 times fewer; its move tables cost
        # NM² per block and evaluation), the probes on the expanded ones, guided by its cost-to-go
        # (:meth:`RelaxedDP.expand_togo`).
        plain = RelaxedDP(problem, replicated=replicated, dispatch=dispatch, carry_spine=False)
        self.dp = RelaxedDP(problem, replicated=replicated, dispatch=dispatch)
        self.bound_s, self.lam = lagrangian_period_bound(plain, best_period_s, budget=budget)
        self.h = cost_to_go(plain, self.lam)
        self.h_probe = self.dp.expand_togo(self.h)

    def guide(self) -> Tuple[np.ndarray, List[float]]:
        """``(λ, togo)`` with ``togo[j]`` the least λ-weighted busy time blocks ``j..n-1`` add (``togo[0] = 0``,
        ``togo[n] = 0``), for :class:`parapipe.search.labels.LabelStore`."""
        togo = [0.0] + self.h.min(axis=1).tolist()
        togo[-1] = 0.0
        return self.lam, togo


def relaxed_period_bound(problem: MappingProblem, best_period_s: float, floor_s: float = 0.0,
                         budget: Optional[Budget] = None, rtol: float = 1e-9, grid_rel: float = GRID_REL,
                         relaxed: Optional[Relaxed] = None, replicated: bool = False,
                         dispatch: Optional[np.ndarray] = None, certify_gap: float = 0.10) -> Tuple[float, bool]:
    """The relaxation's bound on the period, and whether it proves ``best_period_s`` optimal.

    Probes rise from ``floor_s`` (a known bound) to ``(1 - rtol) × best_period_s``: the first at the limit that
    certifies the best period within ``certify_gap`` (the search's ``period_gap``), then halfway to the best
    period each time; a low limit prunes hard and answers fast, and the first probe that finds a mode sequence
    returns the relaxation's optimum (``dispatch``: the pipeline terms' ``d_S``, module docstring). Stops when
    ``budget`` (:mod:`.budget`) runs out, with the best limit proved so far. Labels are merged on a lattice of
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
    guide = (rel.lam, rel.h_probe)
    lo, hi = min(max(floor_s, lag), top), top
    # First probe: the limit that certifies the best period within ``certify_gap`` (one probe answers whether the
    # bound reaches it), then halfway towards the best period.
    target = min(top, best_period_s * (1 + 1e-6) / (1 + certify_gap))  # a hair above: the gap then rounds below
    probe = top if floor_s >= top else (target if lo < target else 0.5 * (lo + hi))
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
    if budget is not None:
        budget.check("relaxed bound", f"block {v} of {n}")
