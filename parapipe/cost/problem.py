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

__all__ = ["SubmodelBlocks", "SubmodelKey", "OpChoice", "block_range", "is_block_range", "ProblemRows",
           "PUOperatingPoints", "MappingProblem"]

SubmodelBlocks = Tuple[int, ...]
"""The blocks of one sub-model: their indices in the problem's topological order, sorted, without repeats. A
single-PU stage's sub-model is a contiguous range (:func:`block_range`); a multi-PU stage's task may not be."""

SubmodelKey = Tuple[int, SubmodelBlocks]
"""``(pu, blocks)``: a sub-model on PU index ``pu``, the key of :attr:`MappingProblem.submodel_time_s`."""

OpChoice = Tuple[Tuple[int, int], ...]
"""``((pu, op), ...)``: PU indices with the index of the operating point each runs at (sorted by PU; PUs not
listed run at their highest point). The key of :meth:`MappingProblem.at_operating_points`."""


def block_range(start: int, stop: int) -> SubmodelBlocks:
    """The blocks ``start <= v < stop`` as a sub-model's blocks (what a single-PU stage over them runs).

    >>> block_range(2, 5)
    (2, 3, 4)
    """
    return tuple(range(start, stop))


def is_block_range(blocks: SubmodelBlocks) -> bool:
    """True when ``blocks`` (non-empty, sorted) are a contiguous range ``first..last``.

    >>> is_block_range((2, 3, 4)), is_block_range((0, 2))
    (True, False)
    """
    return bool(blocks) and blocks[-1] - blocks[0] + 1 == len(blocks)


@dataclass(frozen=True)
class ProblemRows:
    """Nested-list views of a :class:`MappingProblem`'s arrays for scalar-heavy loops (same units).

    ``dyn_power_w[v][p] = active_power_w[v, p] - idle_power_w[p]``.
    """

    time_s: List[List[float]]
    dyn_power_w: List[List[float]]
    alpha_s: List[List[float]]
    beta_bytes_per_s: List[List[float]]


@dataclass(frozen=True)
class PUOperatingPoints:
    """The operating points of one PU in a problem (:mod:`parapipe.soc.operating_points` states the models).

    Attributes
    ----------
    frequency_hz : tuple of float, length m
        Ascending; the last is the point :attr:`MappingProblem.time_s` and ``active_power_w`` are given at.
    time_s : ndarray, shape (n, m)
        Time of each block at each point, s (``inf`` where the PU cannot run the block).
    active_power_w : ndarray, shape (n, m)
        Power the PU draws while running each block at each point, W.
    transition_s : float
        Seconds a switch from one point to another costs (:mod:`parapipe.cost.evaluate`).
    """

    frequency_hz: Tuple[float, ...]
    time_s: np.ndarray
    active_power_w: np.ndarray
    transition_s: float = 0.0

    def __len__(self) -> int:
        return len(self.frequency_hz)


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
        Transfer cost ``alpha + nbytes / beta`` between two different PUs; the diagonal is unused.
    name : str
        Label for logs and reports.
    weight_nbytes : ndarray, shape (n,), optional
        Constant (weight) bytes of each block (default zeros): each PU running a block holds its weights, once per
        stage replica (:mod:`parapipe.cost.replication`).
    memory_bytes : ndarray, shape (k,), optional
        Memory each PU may fill with weights, bytes (default ``inf``: no limit; from the profile's
        ``memory_bytes`` where it gives one).
    submodel_time_s : dict (pu, blocks) -> float, optional
        Measured time of the blocks ``blocks`` (a :data:`SubmodelBlocks`: sorted block indices) run as ONE
        sub-model on PU index ``pu``, s: a stage-level measurement, which includes the fusions and layout
        changes ONNX Runtime makes across the blocks (isolated block times miss them). The executor runs one
        sub-model per single-PU stage or replica (its blocks ``start..stop-1``, a contiguous range) and one per
        task of a multi-PU stage (:func:`parapipe.cost.tasks.stage_tasks`); wherever those blocks run as one
        sub-model on that PU, the cost model takes this time instead of their block sum, the blocks keeping
        their proportions (:func:`parapipe.cost.schedule.evaluate_stage`). Default none.
    block_nbytes : ndarray, shape (n, k), optional
        DRAM bytes each block reads and writes on each PU (operator inputs, outputs and weights at the PU's
        precision); the memory-contention term (:mod:`parapipe.cost.pipeline_terms`) uses them. None (block
        tables): the term falls back to the bytes on the block's edges.
    operating_points : list of (PUOperatingPoints or None), length k, optional
        Per PU, its operating points (None: one point, the arrays above). A stage runs each of its PUs at one
        point (:attr:`parapipe.cost.mapping.StageMapping.ops`); :meth:`at_operating_points` gives the problem
        with those PUs' columns at those points. Default none: every PU at its one point.
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
    # None at construction means the default; __post_init__ makes both arrays, so they are typed as arrays.
    weight_nbytes: np.ndarray = None  # type: ignore[assignment]
    memory_bytes: np.ndarray = None  # type: ignore[assignment]
    block_nbytes: Optional[np.ndarray] = None
    submodel_time_s: Optional[Dict[SubmodelKey, float]] = None
    operating_points: Optional[List[Optional[PUOperatingPoints]]] = None
    succs: List[Tuple[int, ...]] = field(init=False, repr=False)
    _rows: Optional["ProblemRows"] = field(init=False, repr=False, default=None, compare=False)
    _at_ops: Dict[OpChoice, Tuple[np.ndarray, np.ndarray, "MappingProblem"]] = field(init=False, repr=False, default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        n, k = len(self.block_names), len(self.pu_names)
        self.time_s = np.asarray(self.time_s, dtype=float).reshape(n, k)
        self.active_power_w = np.asarray(self.active_power_w, dtype=float).reshape(n, k)
        self.idle_power_w = np.asarray(self.idle_power_w, dtype=float).reshape(k)
        self.alpha_s = np.asarray(self.alpha_s, dtype=float).reshape(k, k)
        self.beta_bytes_per_s = np.asarray(self.beta_bytes_per_s, dtype=float).reshape(k, k)
        self.weight_nbytes = (np.zeros(n) if self.weight_nbytes is None
                              else np.asarray(self.weight_nbytes, dtype=float).reshape(n))
        self.memory_bytes = (np.full(k, np.inf) if self.memory_bytes is None
                             else np.asarray(self.memory_bytes, dtype=float).reshape(k))
        if self.block_nbytes is not None:
            self.block_nbytes = np.asarray(self.block_nbytes, dtype=float).reshape(n, k)
        if self.operating_points is not None:
            self._check_operating_points()
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

    def _check_operating_points(self) -> None:
        n, k = len(self.block_names), len(self.pu_names)
        ops = list(self.operating_points or [])
        if len(ops) != k:
            raise ValueError(f"operating_points: {len(ops)} entries for {k} PUs")
        for p, table in enumerate(ops):
            if table is None:
                continue
            m = len(table.frequency_hz)
            if table.time_s.shape != (n, m) or table.active_power_w.shape != (n, m):
                raise ValueError(f"operating_points[{self.pu_names[p]}]: arrays of shape {table.time_s.shape}, "
                                 f"{table.active_power_w.shape}; need ({n}, {m})")
            same = np.isclose(table.time_s[:, -1], self.time_s[:, p], rtol=1e-9, atol=0.0) | (
                np.isinf(table.time_s[:, -1]) & np.isinf(self.time_s[:, p]))
            if not same.all():
                raise ValueError(f"operating_points[{self.pu_names[p]}]: the highest point's times differ from "
                                 "time_s; time_s is the highest point's column")
        if all(t is None or len(t) == 1 for t in ops):
            self.operating_points = None

    def n_operating_points(self, pu: int) -> int:
        """How many operating points PU index ``pu`` has (1 without a table)."""
        table = self.operating_points[pu] if self.operating_points is not None else None
        return 1 if table is None else len(table)

    def max_op(self, pu: int) -> int:
        """Index of PU ``pu``'s highest operating point (the one :attr:`time_s` holds)."""
        return self.n_operating_points(pu) - 1

    def frequency_hz(self, pu: int, op: Optional[int] = None) -> Optional[float]:
        """Frequency of PU ``pu`` at point ``op`` (None: its highest), Hz; None for a PU without a table."""
        table = self.operating_points[pu] if self.operating_points is not None else None
        if table is None:
            return None
        return table.frequency_hz[-1 if op is None else op]

    def at_operating_points(self, choice: OpChoice) -> "MappingProblem":
        """This problem with the PUs of ``choice`` (``((pu, op), ...)``) at those operating points: their
        columns of ``time_s`` and ``active_power_w`` come from their tables, and a measured sub-model time
        on such a PU scales as its blocks' sum does. Cached per choice; ``self`` for an empty choice or one
        that names every PU's highest point.

        Raises
        ------
        IndexError
            An operating-point index outside the PU's table.
        """
        choice = tuple(sorted((p, o) for p, o in choice if o != self.max_op(p)))
        if not choice:
            return self
        cached = self._at_ops.get(choice)
        if cached is not None and cached[0] is self.alpha_s and cached[1] is self.beta_bytes_per_s:
            return cached[2]  # (a shallow copy with other transfer costs shares this cache: rebuild for it)
        tables = self.operating_points or []
        time_s, power = self.time_s.copy(), self.active_power_w.copy()
        ratio: Dict[int, np.ndarray] = {}
        for p, o in choice:
            table = tables[p]
            if table is None or not 0 <= o < len(table):
                raise IndexError(f"PU {self.pu_names[p]!r} has {self.n_operating_points(p)} operating point(s), "
                                 f"not an index {o}")
            time_s[:, p], power[:, p] = table.time_s[:, o], table.active_power_w[:, o]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio[p] = np.where(self.time_s[:, p] > 0, time_s[:, p] / self.time_s[:, p], 1.0)
        submodel = None
        if self.submodel_time_s:
            submodel = {}
            for (p, blocks), t in self.submodel_time_s.items():
                if p in ratio:
                    rows = list(blocks)
                    base = float(self.time_s[rows, p].sum())
                    t = t * (float(time_s[rows, p].sum()) / base if base > 0 else 1.0)
                submodel[(p, blocks)] = t
        got = MappingProblem(
            block_names=self.block_names, preds=self.preds, edge_nbytes=self.edge_nbytes, pu_names=self.pu_names,
            time_s=time_s, active_power_w=power, idle_power_w=self.idle_power_w,
            static_power_w=self.static_power_w, alpha_s=self.alpha_s, beta_bytes_per_s=self.beta_bytes_per_s,
            name=self.name, weight_nbytes=self.weight_nbytes, memory_bytes=self.memory_bytes,
            block_nbytes=self.block_nbytes, submodel_time_s=submodel)
        self._at_ops[choice] = (self.alpha_s, self.beta_bytes_per_s, got)
        return got

    def rows(self) -> "ProblemRows":
        """The arrays as nested Python lists (built once; scalar access is ~10x cheaper than numpy's)."""
        if self._rows is None:
            self._rows = ProblemRows(time_s=self.time_s.tolist(),
                                     dyn_power_w=(self.active_power_w - self.idle_power_w[None, :]).tolist(),
                                     alpha_s=self.alpha_s.tolist(), beta_bytes_per_s=self.beta_bytes_per_s.tolist())
        return self._rows

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

    def comm_matrix_s(self, nbytes: float) -> np.ndarray:
        """(k, k): :meth:`comm_s` of ``nbytes`` for every (source, destination) PU pair, seconds (0 on the
        diagonal, and everywhere for an empty tensor)."""
        k = self.n_pus
        if nbytes <= 0:
            return np.zeros((k, k))
        c = np.asarray(self.alpha_s + nbytes / self.beta_bytes_per_s, dtype=float)
        c[np.eye(k, dtype=bool)] = 0.0
        return c

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
            weight_nbytes=self.weight_nbytes, memory_bytes=self.memory_bytes[keep],
            block_nbytes=None if self.block_nbytes is None else self.block_nbytes[:, keep],
            submodel_time_s={(keep.index(p), blocks): t for (p, blocks), t in (self.submodel_time_s or {}).items()
                             if p in keep} or None,
            operating_points=None if self.operating_points is None else [self.operating_points[p] for p in keep])
