"""Pareto filtering (minimisation) of objective vectors.

Checked against a plain O(m²) numpy reference in tests (shape of apache/tvm's cascader ``pareto.py`` test).
"""
from __future__ import annotations

import numpy as np

__all__ = ["SMALL_SET", "SWEEPS", "CHUNK", "pareto_mask", "meet_on_grid", "front_indices", "dominates", "spread_rows"]

SMALL_SET = 12
"""Up to this many rows the filter runs in plain Python (cheaper than numpy's per-call overhead; measured)."""
SWEEPS = 8
CHUNK = 256
_TRI = np.tril(np.ones((CHUNK, CHUNK), dtype=bool), k=-1)  # _TRI[a, b]: row b comes before row a


def front_indices(rows: list) -> list:
    """Plain-Python Pareto filter of a few ``rows`` (sequences of equal length, minimised): the indices of the
    rows no earlier row (in lexicographic order, ties by index) weakly dominates, in that order; equal rows keep
    the first, as :func:`pareto_mask` does."""
    kept: list = []
    tails: list = []  # in lexicographic order a kept row's first column is <= the row's: compare the others
    for i in sorted(range(len(rows)), key=lambda r: (rows[r], r)):
        row = rows[i][1:]
        for u in tails:
            if all(a <= b for a, b in zip(u, row)):
                break
        else:
            kept.append(i)
            tails.append(row)
    return kept


def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Mask of the non-dominated rows of ``points`` (all objectives minimised).

    Parameters
    ----------
    points : ndarray, shape (m, d)

    Returns
    -------
    ndarray of bool, shape (m,)
        ``True`` for rows that no other row dominates (``<=`` everywhere and ``<`` somewhere). Of several equal
        rows only the first is kept.

    Examples
    --------
    >>> pareto_mask(np.array([[1.0, 2.0], [2.0, 1.0], [2.0, 2.0], [1.0, 2.0]])).tolist()
    [True, True, False, False]
    """
    pts = np.asarray(points, dtype=float)
    m = len(pts)
    mask = np.zeros(m, dtype=bool)
    if m <= SMALL_SET:
        mask[front_indices(pts.tolist())] = True
        return mask
    # Lexicographic order (stable, so the first of equal rows comes first): a row can only be weakly dominated
    # by rows before it, and a row weakly dominated by an earlier removed row is weakly dominated by a kept one
    # (transitivity). So a row is kept iff no earlier row is <= it everywhere.
    order = np.lexsort(pts.T[::-1])
    cols = [np.ascontiguousarray(c) for c in pts[order].T]  # one array per objective: fast 1-D/2-D compares
    pos = np.arange(m)
    keep = []
    # First a few sweeps: the first remaining row is kept and every row it weakly dominates is dropped (cheap
    # when few rows survive, the common case of DP label sets) ...
    for _ in range(SWEEPS):
        if not len(pos):
            break
        keep.append(pos[0])
        alive = cols[0] < cols[0][0]
        for c in cols[1:]:
            alive |= c < c[0]
        cols = [c[alive] for c in cols]
        pos = pos[alive]
    # ... then the remaining rows in chunks, each checked against the rows kept so far and against the earlier
    # rows of its own chunk (cheap when many rows survive).
    front = [c[:0] for c in cols] if not keep else [c for c in pts[order[keep]].T]
    for lo in range(0, len(pos), CHUNK):
        chunk = [c[lo:lo + CHUNK] for c in cols]
        nc = len(chunk[0])
        dominated = _TRI[:nc, :nc].copy()  # [a, b]: row b of the chunk (earlier) is <= row a everywhere
        for c in chunk:
            dominated &= c[None, :] <= c[:, None]
        alive = ~dominated.any(axis=1)
        if len(front[0]):
            by_front = np.ones((nc, len(front[0])), dtype=bool)
            for c, f in zip(chunk, front):
                by_front &= f[None, :] <= c[:, None]
            alive &= ~by_front.any(axis=1)
        keep.extend(pos[lo:lo + nc][alive].tolist())
        front = [np.concatenate([f, c[alive]]) for f, c in zip(front, chunk)]
    mask[order[keep]] = True
    return mask


def dominates(a, b) -> bool:
    """True if objective vector ``a`` dominates ``b`` (minimisation)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    return bool(np.all(a <= b) and np.any(a < b))


def spread_rows(rows: np.ndarray, cap: int) -> np.ndarray:
    """Indices (ascending) of at most ``cap`` rows of ``rows`` (minimised columns) spread over their range: rows
    are snapped to a grid of ``eps`` x each column's range, one row per cell (the lexicographically least), the
    cells' non-dominated rows kept; ``eps`` grows from 1/256 by 1.5x until at most ``cap`` remain (the grid of
    ε-dominance, Laumanns et al., Evolutionary Computation 10(3), 2002). Deterministic."""
    n = len(rows)
    if n <= cap:
        return np.arange(n)
    lo = rows.min(axis=0)
    span = rows.max(axis=0) - lo
    span[span <= 0] = 1.0
    order = np.lexsort(rows.T[::-1])
    eps = 1 / 256
    while True:
        q = np.floor((rows[order] - lo) / (span * eps))
        _, first = np.unique(q, axis=0, return_index=True)
        first = np.sort(first)
        keep = first[pareto_mask(q[first])]
        if len(keep) <= cap or eps > 1:
            return np.sort(order[keep[:cap]])
        eps *= 1.5


def meet_on_grid(x: np.ndarray, grid: float) -> np.ndarray:
    """Rows of ``x`` (m, d) in the same cell of a ``grid``-wide lattice replaced by their componentwise minimum:
    a row below each of them, so a lower bound computed from the result is still one, lowered by at most one
    cell per component. Returns (m', d), m' <= m, in lexicographic order of the cells."""
    keys = np.floor(x / grid)
    order = np.lexsort(keys.T[::-1])
    ks = keys[order]
    starts = np.flatnonzero(np.r_[True, np.any(ks[1:] != ks[:-1], axis=1)])
    return np.minimum.reduceat(x[order], starts, axis=0)
