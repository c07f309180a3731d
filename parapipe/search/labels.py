"""The label sets of the outer DP (:mod:`.dp`): per state, the Pareto set of its partial mappings' costs.

A label is a row ``(busy..., latency_s, dyn_energy_j)``: ``busy`` is one column (the largest stage time, when
every PU serves at most one stage) or one column per PU (when PUs serve several stages; a stage adds its time
``T_s`` times the run's ``busy_share`` to each PU); ``latency_s`` and ``dyn_energy_j`` are optional (the period
bound of :mod:`.bounds` keeps busy times only). A transition is recorded as the scalars ``(source state, T_s,
dynamic energy, run)``; :meth:`LabelStore.add` builds the candidate labels of a state from all its transitions
at once and keeps the non-dominated ones — in plain Python for small candidate sets, with numpy for large ones
(same arithmetic, same tie rule: of equal rows the first is kept).
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .pareto import front_indices, pareto_mask

__all__ = ["PY_MAX_CANDIDATES", "LabelStore", "prune_labels"]

PY_MAX_CANDIDATES = 64
"""Candidate sets up to this size are built and filtered in plain Python (cheaper than numpy's per-call
overhead below it; measured on the zoo models)."""


class LabelStore:
    """States of the DP: their keys, label sets and back-pointers.

    Parameters
    ----------
    per_pu : bool
        One busy column per PU (``n_pus`` columns), else one column holding the largest stage time.
    n_pus : int
    with_latency_energy : bool
        Keep the latency and dynamic-energy columns (False: busy columns only).
    shares : list of tuple of float
        ``shares[run]``: busy time charged to each PU per second of stage time (appended to by the caller as it
        creates runs).
    grid : ndarray or None, shape (d,)
        Epsilon grid: labels are compared on ``floor(label / grid)`` (None: exact comparison).
    max_labels : int
        Most labels kept per state (0: unbounded).
    admit_below : float or None
        Keep only labels whose largest busy time, and whose mean busy time once ``rest_s[j]`` more work is
        spread over the PUs, are below this (the period bound's pruning by the best known period; ``j`` is the
        first element of the state key). None: keep all.
    rest_s : list of float or None
        Per block position, a lower bound on the work still to place (seconds), for ``admit_below``.
    guide : (ndarray (k,), list of float) or None
        ``(λ, togo)``: also drop labels with ``λ · busy + togo[j] >= admit_below`` (``togo[j]`` a lower bound on
        the ``λ``-weighted busy time blocks ``j..n-1`` add, :func:`parapipe.search.lagrangian.cost_to_go`).
    """

    def __init__(self, per_pu: bool, n_pus: int, with_latency_energy: bool, shares: List[Tuple[float, ...]],
                 grid: Optional[np.ndarray] = None, max_labels: int = 0, admit_below: Optional[float] = None,
                 rest_s: Optional[List[float]] = None, guide=None):
        self.nb = n_pus if per_pu else 1
        self.k = n_pus
        self.per_pu = per_pu
        self.extra = with_latency_energy
        self.d = self.nb + (2 if with_latency_energy else 0)
        self.shares = shares
        self._share_arr = np.zeros((0, n_pus))
        # every label of the states the numpy path read, one row each (``_pool_off[sid]``: the first, -1: none)
        self._pool = np.empty((0, self.d))
        self._pool_n = 0
        self._pool_off = np.zeros(0, dtype=np.int64)
        self.grid = grid
        self.grid_list = None if grid is None else [g if g > 0 else 1.0 for g in grid.tolist()]
        self.max_labels = max_labels
        self.admit_below = admit_below
        if admit_below is not None and rest_s is None:
            raise ValueError("admit_below needs rest_s (the busy time the remaining blocks add)")
        self.rest_s: List[float] = list(rest_s) if rest_s is not None else []
        self.guide = guide
        self.keys: List[tuple] = []
        self.backs: List[Optional[tuple]] = []
        self._arrays: List[Optional[np.ndarray]] = []
        self._lists: List[Optional[list]] = []
        self.sizes: List[int] = []
        self.capped_states = 0
        self.n_labels = 0
        self.n_candidates = 0  # labels built before pruning (the DP's counted work)

    # ------------------------------------------------------------------ access
    def start(self, key: tuple) -> int:
        """Add the start state (one all-zero label) and return its id."""
        return self._store(key, [(0.0,) * self.d], None)

    def size(self, sid: int) -> int:
        """Number of labels of state ``sid``."""
        return self.sizes[sid]

    def array(self, sid: int) -> np.ndarray:
        """Labels of state ``sid``, shape (m, d)."""
        a = self._arrays[sid]
        if a is None:
            a = self._arrays[sid] = np.array(self._lists[sid], dtype=float).reshape(-1, self.d)
        return a

    def rows(self, sid: int) -> list:
        """Labels of state ``sid`` as a list of tuples."""
        lst = self._lists[sid]
        if lst is None:
            array = self._arrays[sid]
            assert array is not None  # _store keeps a list or an array of every state
            lst = self._lists[sid] = [tuple(r) for r in array.tolist()]
        return lst

    def _store(self, key: tuple, rows: Optional[list], back, array: Optional[np.ndarray] = None) -> int:
        sid = len(self.keys)
        self.keys.append(key)
        self._lists.append(rows)
        self._arrays.append(array)
        self.backs.append(back)
        assert rows is not None or array is not None
        m = len(rows) if rows is not None else len(array)  # type: ignore[arg-type]
        self.sizes.append(m)
        self.n_labels += m
        return sid

    # ------------------------------------------------------------------ building a state
    def add(self, key: tuple, rec: Sequence[tuple], prune: bool = True) -> int:
        """Build state ``key`` from its transitions ``rec = [(source id, T_s, dyn energy, run id[, switch])]``;
        ``switch`` (per-PU mode only) is a tuple of seconds added to each PU's busy time (operating-point switches).

        With ``prune`` the non-dominated labels are kept (on the grid, at most ``max_labels``); without, every
        candidate (final states, judged later on the final objectives). Returns the new state's id.
        """
        sizes = self.sizes
        total = sum([sizes[r[0]] for r in rec])
        self.n_candidates += total
        cap = self.max_labels
        if not prune or total > PY_MAX_CANDIDATES or (cap and total > 16 * cap):
            return self._add_numpy(key, rec, prune)
        cands, back = self._candidates_py(rec)
        if self.admit_below is not None:
            limit, nb = self.admit_below, self.nb
            room = limit * self.k - self.rest_s[key[0]]
            ok = [t for t, c in enumerate(cands) if max(c[:nb]) < limit and sum(c[:nb]) < room]
            if self.guide is not None:
                lam, togo = self.guide[0].tolist(), self.guide[1][key[0]]
                ok = [t for t in ok if sum(a * b for a, b in zip(cands[t][:nb], lam)) + togo < limit]
            cands = [cands[t] for t in ok]
            back = tuple([b[t] for t in ok] for b in back)
        if prune:
            keep, was_capped = self._prune_py(cands)
            self.capped_states += was_capped
            cands = [cands[t] for t in keep]
            back = tuple([b[t] for t in keep] for b in back)
        return self._store(key, cands, back)

    def _candidates_py(self, rec) -> Tuple[list, tuple]:
        cands: list = []
        srcs: list = []
        rows: list = []
        run_ids: list = []
        nb, k = self.nb, self.k
        for r in rec:
            sid, t_s, dyn, run = r[0], r[1], r[2], r[3]
            labels = self.rows(sid)
            if self.per_pu:
                sh = self.shares[run]
                sw = r[4] if len(r) > 4 else None
                for lab in labels:
                    busy = (tuple(lab[q] + t_s * sh[q] for q in range(k)) if sw is None
                            else tuple(lab[q] + t_s * sh[q] + sw[q] for q in range(k)))
                    cands.append(busy + ((lab[nb] + t_s, lab[nb + 1] + dyn) if self.extra else ()))
            else:
                for lab in labels:
                    a = lab[0]
                    cands.append(((a if a > t_s else t_s), lab[1] + t_s, lab[2] + dyn) if self.extra
                                 else ((a if a > t_s else t_s),))
            m = len(labels)
            srcs.extend([sid] * m)
            rows.extend(range(m))
            run_ids.extend([run] * m)
        return cands, (srcs, rows, run_ids)

    def _prune_py(self, cands: list) -> Tuple[list, bool]:
        """Plain-Python twin of :func:`prune_labels`: same keys, same tie rule, same cap rule."""
        g = self.grid_list
        keyvals = cands if g is None else [tuple(math.floor(x / gg) for x, gg in zip(c, g)) for c in cands]
        kept: list = []
        tails: list = []  # in lexicographic order a kept row's first column is <= the row's: compare the others
        if keyvals and len(keyvals[0]) == 3:
            for t in sorted(range(len(cands)), key=lambda r: (keyvals[r], r)):
                _, b, c = keyvals[t]
                for kb, kc in tails:
                    if kb <= b and kc <= c:
                        break
                else:
                    kept.append(t)
                    tails.append((b, c))
        else:
            kept = front_indices(keyvals)
        kept.sort()
        cap = self.max_labels
        if cap and len(kept) > cap:
            nb = self.nb
            period = np.array([max(cands[t][:nb]) for t in kept])
            order = np.array(kept)[np.argsort(period, kind="stable")]
            pick = np.unique(np.linspace(0, len(order) - 1, cap).round().astype(int))
            return sorted(order[pick].tolist()), True
        return kept, False

    def _pooled(self, src: np.ndarray) -> np.ndarray:
        """Offsets in the label pool of states ``src`` (the states not there yet are added)."""
        n = len(self.keys)
        if len(self._pool_off) < n:
            grown = np.full(max(2 * len(self._pool_off), n, 64), -1, dtype=np.int64)
            grown[:len(self._pool_off)] = self._pool_off
            self._pool_off = grown
        off = self._pool_off[src]
        if (off < 0).any():
            for sid in np.unique(src[off < 0]).tolist():
                a = self.array(sid)
                if self._pool_n + len(a) > len(self._pool):
                    grown_pool = np.empty((max(2 * len(self._pool), self._pool_n + len(a), 1024), self.d))
                    grown_pool[:self._pool_n] = self._pool[:self._pool_n]
                    self._pool = grown_pool
                self._pool[self._pool_n:self._pool_n + len(a)] = a
                self._pool_off[sid] = self._pool_n
                self._pool_n += len(a)
            off = self._pool_off[src]
        return off

    def _add_numpy(self, key: tuple, rec, prune: bool) -> int:
        try:  # (source, T_s, dyn, run) records, one row each
            arr = np.array(rec, dtype=float).reshape(-1, 4)
            switch = None
        except ValueError:  # some record carries a switching-time tuple (operating points, :mod:`.dp`)
            arr = np.array([r[:4] for r in rec], dtype=float).reshape(-1, 4)
            zero = (0.0,) * self.k
            switch = np.array([r[4] if len(r) > 4 else zero for r in rec], dtype=float).reshape(-1, self.k)
        src = arr[:, 0].astype(np.int64)
        counts = np.array(self.sizes, dtype=np.int64)[src] if len(rec) > len(self.sizes) else np.array(
            [self.sizes[s] for s in src.tolist()], dtype=np.int64)
        rep = np.repeat(np.arange(len(rec)), counts)
        rows = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
        at = self._pooled(src)[rep] + rows  # (grows the pool: before reading it)
        new = self._pool[at]  # every label of every source, in record order
        t_s = arr[rep, 1]
        run_id = arr[:, 3].astype(np.int64)
        nb = self.nb
        if self.per_pu:
            if len(self._share_arr) < len(self.shares):  # the caller appends runs as it builds them
                self._share_arr = np.array(self.shares, dtype=float).reshape(-1, self.k)
            new[:, :nb] += t_s[:, None] * self._share_arr[run_id[rep]]
            if switch is not None:
                new[:, :nb] += switch[rep]
        else:
            np.maximum(new[:, 0], t_s, out=new[:, 0])
        if self.extra:
            new[:, nb] += t_s
            new[:, nb + 1] += arr[rep, 2]
        back = (src[rep], rows, run_id[rep])
        if self.admit_below is not None:
            busy = new[:, :nb]
            ok = (busy.max(axis=1) < self.admit_below) & (busy.sum(axis=1)
                                                          < self.admit_below * self.k - self.rest_s[key[0]])
            if self.guide is not None:
                ok &= busy @ self.guide[0] + self.guide[1][key[0]] < self.admit_below
            new = new[ok]
            back = tuple(b[ok] for b in back)
        if prune and len(new):
            keep, was_capped = prune_labels(new, self.grid, self.max_labels, nb)
            self.capped_states += was_capped
            new = new[keep]
            back = tuple(b[keep] for b in back)
        return self._store(key, None, back, array=new)

    def back(self, sid: int, row: int) -> Optional[Tuple[int, int, int]]:
        """``(source state, source row, run)`` of label ``row`` of state ``sid`` (None for the start state)."""
        b = self.backs[sid]
        if b is None:
            return None
        return int(b[0][row]), int(b[1][row]), int(b[2][row])


def prune_labels(vals: np.ndarray, grid: Optional[np.ndarray], max_labels: int, nb: int) -> Tuple[np.ndarray, bool]:
    """Indices of the non-dominated labels (on the epsilon grid when given), at most ``max_labels`` of them,
    and whether the cap dropped non-dominated labels.

    With a cap and many candidates, a pre-selection keeps the ``4 · max_labels`` best candidates on each label
    column and on their normalised sum before the exact Pareto filter (the cap discards the rest anyway);
    this keeps large label sets (PU reuse: k + 2 columns) cheap.
    """
    keyvals = np.floor(vals / np.where(grid > 0, grid, 1.0)) if grid is not None else vals
    cand = np.arange(len(vals))
    capped = False
    if max_labels and len(vals) > 16 * max_labels:
        capped = True
        top = 4 * max_labels
        kt = np.ascontiguousarray(keyvals.T)  # one contiguous row per column: partitions without copies
        lo = kt.min(axis=1)
        span = kt.max(axis=1) - lo
        norm = (kt - lo[:, None]) / np.where(span > 0, span, 1.0)[:, None]
        kth = min(top, len(vals) - 1)
        pick = np.zeros(len(vals), dtype=bool)
        for col in (*kt, norm.sum(axis=0), norm[:nb].max(axis=0)):
            pick[np.argpartition(col, kth)[:top]] = True
        cand = np.flatnonzero(pick)
    idx = cand[pareto_mask(keyvals[cand])]
    if max_labels and len(idx) > max_labels:
        capped = True
        period = vals[idx, :nb].max(axis=1)
        order = idx[np.argsort(period, kind="stable")]
        spread = np.unique(np.linspace(0, len(order) - 1, max_labels).round().astype(int))
        idx = np.sort(order[spread])
    return idx, capped
