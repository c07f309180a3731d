"""The mapping problem every search and evaluation works on: blocks × PUs, as plain arrays.

A :class:`MappingProblem` is independent of ONNX: it can come from an ONNX model and a SoC profile
(:func:`parapipe.cost.roofline.problem_from_blocks`), from a user's block table (``--blocks FILE``) or from tests.
Units are SI throughout (seconds, bytes, watts, bytes/second).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InfeasibleError


@dataclass
class MappingProblem:
    """Blocks in a topological order, their dependencies, and per-PU costs.

    Attributes
    ----------
    block_names : list of str, length n
        Blocks in a topological order; stages are contiguous ranges of this order.
    preds : list of tuple of int, length n
        ``preds[j]`` are the indices of the blocks whose outputs block ``j`` reads; every index is < j.
    edge_nbytes : dict (int, int) -> float
        Bytes moved along each dependency ``(i, j)`` (the tensors ``i`` produces that ``j`` reads).
    pu_names : list of str, length k
    time_s : ndarray, shape (n, k)
        Time of each block on each PU in seconds; ``inf`` where the PU cannot run the block.
    active_power_w : ndarray, shape (n, k)
        Power drawn by the PU while it runs that block (whole-PU draw, not an increment over idle).
    idle_power_w : ndarray, shape (k,)
        Power of each PU while idle.
    static_power_w : float
        Power of the rest of the SoC/board, paid for the whole period.
    alpha_s, beta_bytes_per_s : ndarray, shape (k, k)
        Transfer cost ``alpha + nbytes / beta`` between two different PUs (GUIDE §2); the diagonal is unused.
    name : str
        Label for logs and reports.
    block_nbytes : ndarray, shape (n, k), optional
        DRAM bytes each block reads and writes on each PU (operator inputs, outputs and weights at the PU's
        precision); the memory-contention term (:mod:`parapipe.cost.pipeline_terms`) uses them. None (block
        tables): the term falls back to the bytes on the block's edges.
    """

    block_names: List[str]
    preds: List[Tuple[int, ...]]
    edge_nbytes: Dict[Tuple[int, int], float]
    pu_names: List[str]
    time_s: np.ndarray
    active_power_w: np.ndarray
    idle_power_w: np.ndarray
    static_power_w: float
    alpha_s: np.ndarray
    beta_bytes_per_s: np.ndarray
    name: str = "problem"
    block_nbytes: Optional[np.ndarray] = None
    succs: List[Tuple[int, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n, k = len(self.block_names), len(self.pu_names)
        self.time_s = np.asarray(self.time_s, dtype=float).reshape(n, k)
        self.active_power_w = np.asarray(self.active_power_w, dtype=float).reshape(n, k)
        self.idle_power_w = np.asarray(self.idle_power_w, dtype=float).reshape(k)
        self.alpha_s = np.asarray(self.alpha_s, dtype=float).reshape(k, k)
        self.beta_bytes_per_s = np.asarray(self.beta_bytes_per_s, dtype=float).reshape(k, k)
        if self.block_nbytes is not None:
            self.block_nbytes = np.asarray(self.block_nbytes, dtype=float).reshape(n, k)
        succs: List[List[int]] = [[] for _ in range(n)]
        for j, ps in enumerate(self.preds):
            for i in ps:
                if not 0 <= i < j:
                    raise ValueError(f"block {self.block_names[j]!r}: predecessor index {i} is not earlier "
                                     "in the topological order")
                succs[i].append(j)
        self.succs = [tuple(s) for s in succs]
        for j in range(n):
            if not np.isfinite(self.time_s[j]).any():
                raise InfeasibleError(f"block {self.block_names[j]!r} cannot run on any of the PUs "
                                      f"{', '.join(self.pu_names)}; allow a PU that supports it (--pus) or "
                                      "add its op types to a PU's supported_ops")

    @property
    def n_blocks(self) -> int:
        return len(self.block_names)

    @property
    def n_pus(self) -> int:
        return len(self.pu_names)

    def comm_s(self, src: int, dst: int, nbytes: float) -> float:
        """Transfer time of ``nbytes`` from PU ``src`` to PU ``dst`` (0 on the same PU), in seconds."""
        if src == dst or nbytes <= 0:
            return 0.0
        return float(self.alpha_s[src, dst] + nbytes / self.beta_bytes_per_s[src, dst])

    def restrict_pus(self, keep: Sequence[int]) -> "MappingProblem":
        """Return the same problem over the PU indices ``keep`` (in that order).

        Raises
        ------
        InfeasibleError
            If some block cannot run on any kept PU.
        """
        keep = list(keep)
        return MappingProblem(
            block_names=list(self.block_names), preds=list(self.preds), edge_nbytes=dict(self.edge_nbytes),
            pu_names=[self.pu_names[p] for p in keep], time_s=self.time_s[:, keep],
            active_power_w=self.active_power_w[:, keep], idle_power_w=self.idle_power_w[keep],
            static_power_w=self.static_power_w, alpha_s=self.alpha_s[np.ix_(keep, keep)],
            beta_bytes_per_s=self.beta_bytes_per_s[np.ix_(keep, keep)], name=self.name,
            block_nbytes=None if self.block_nbytes is None else self.block_nbytes[:, keep])

    def pu_index(self, name: str, source: Optional[str] = None) -> int:
        """Index of PU ``name``; raises InputError naming ``source`` if unknown."""
        from ..errors import input_error
        try:
            return self.pu_names.index(name)
        except ValueError:
            raise input_error(source, None, f"unknown PU {name!r}",
                              f"choose from {', '.join(self.pu_names)}") from None
