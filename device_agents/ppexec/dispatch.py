"""Dealing frames to the replicas of a replicated stage: smooth weighted round robin.

The cost model gives each replica ``r`` a share ``w_r = (1/T_r) / Σ_j 1/T_j`` of the frames (parapipe's
``parapipe/cost/replication.py``). With ``PipelineExecutor(dispatch="shares")`` the executor deals frames in
that proportion with the smooth weighted round robin of nginx (``ngx_http_upstream_get_peer``,
src/http/ngx_http_upstream_round_robin.c): on every pick each replica's current weight grows by its share, the
largest current weight wins and gives back the total. Over any
``n`` consecutive picks replica ``r`` gets ``n · w_r`` frames give or take one, and the picks are spread out
(shares 2:1 deal ``0, 1, 0, 0, 1, 0``, not ``0, 0, 1``), so no replica idles while another has a burst queued.
Deterministic: the same shares deal the same sequence. (By default the replicas pull frames from one queue
instead, which follows their speed as they run.) Standard library only (Python >= 3.8).
"""
from __future__ import annotations

from typing import List, Sequence

__all__ = ["SmoothWeightedRoundRobin"]


class SmoothWeightedRoundRobin:
    """Deal picks among ``len(shares)`` replicas in proportion to ``shares``.

    Parameters
    ----------
    shares : sequence of float
        One weight > 0 per replica (normalised here; need not sum to 1).

    Raises
    ------
    ValueError
        No share, or a share that is not > 0.
    """

    def __init__(self, shares: Sequence[float]):
        weights = [float(w) for w in shares]
        if not weights or any(not w > 0 for w in weights):
            raise ValueError("replica shares must be > 0, got %r" % (list(shares),))
        total = sum(weights)
        self.shares: List[float] = [w / total for w in weights]
        self._current: List[float] = [0.0] * len(weights)

    def pick(self) -> int:
        """The replica that gets the next frame (ties go to the lowest index)."""
        if len(self.shares) == 1:
            return 0
        current = self._current
        best = 0
        for r, w in enumerate(self.shares):
            current[r] += w
            if current[r] > current[best]:
                best = r
        current[best] -= 1.0
        return best
