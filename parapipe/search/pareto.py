"""Pareto filtering (minimisation) of objective vectors.

Checked against a plain O(m²) numpy reference in tests (shape of apache/tvm's cascader ``pareto.py`` test).
"""
from __future__ import annotations

import numpy as np


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
    if m == 0:
        return np.zeros(0, dtype=bool)
    # Lexicographic order (stable, so the first of equal rows comes first): a row can only be weakly dominated
    # by rows before it, and a row weakly dominated by any earlier row (kept or not) is weakly dominated by a
    # kept one (transitivity). So: keep a row iff no earlier row is <= it everywhere. Processed in chunks, each
    # checked against the kept front and against the earlier rows of its own chunk, all in numpy.
    order = np.lexsort(pts.T[::-1])
    sorted_pts = pts[order]
    if m <= 384:  # small sets: one (m, m, d) comparison beats the chunked loop
        weak = np.all(sorted_pts[None, :, :] <= sorted_pts[:, None, :], axis=2)  # weak[a, b]: b <= a
        keep_sorted = ~np.tril(weak, k=-1).any(axis=1)
        mask = np.zeros(m, dtype=bool)
        mask[order[keep_sorted]] = True
        return mask
    keep_sorted = np.zeros(m, dtype=bool)
    front = sorted_pts[:0]
    chunk = 128
    tri = np.tril(np.ones((chunk, chunk), dtype=bool), k=-1)  # tri[a, b]: b before a
    for lo in range(0, m, chunk):
        c = sorted_pts[lo:lo + chunk]
        nc = len(c)
        alive = np.ones(nc, dtype=bool)
        if len(front):
            alive &= ~np.all(front[None, :, :] <= c[:, None, :], axis=2).any(axis=1)
        within = np.all(c[None, :, :] <= c[:, None, :], axis=2) & tri[:nc, :nc]
        alive &= ~within.any(axis=1)
        keep_sorted[lo:lo + nc] = alive
        if alive.any():
            front = np.concatenate([front, c[alive]])
    mask = np.zeros(m, dtype=bool)
    mask[order[keep_sorted]] = True
    return mask


def dominates(a, b) -> bool:
    """True if objective vector ``a`` dominates ``b`` (minimisation)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    return bool(np.all(a <= b) and np.any(a < b))
