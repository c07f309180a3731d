"""Evaluated mappings of a search (:class:`SearchPoint`), the search's result (:class:`SearchResult`) and how their
objectives are compared (:func:`objective_matrix`, :func:`own_front`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..cost.mapping import Mapping
from ..cost.problem import MappingProblem
from ..cost.schedule import Evaluation
from .bounds import Bounds
from .pareto import pareto_mask

__all__ = ["SearchPoint", "SearchResult", "OBJECTIVE_DIGITS", "objective_matrix", "own_front"]


@dataclass
class SearchPoint:
    """One evaluated mapping. ``strategy`` is parapipe | pipeline | parallel | single | replicated | governor.

    ``origin`` says where a parapipe point came from: the DP pass over ``disjoint`` groups, with PU ``reuse`` or
    with ``replicated`` stages, the least-``period`` pass, the period bound's ``relaxation``
    (:mod:`parapipe.search.relaxed_sequences`), ``cp-sat`` (a DP mapping with CP-SAT-polished stages) or
    ``baseline`` (a baseline offered to the front); baselines have origin ``baseline``.
    """

    id: str
    strategy: str
    mapping: Mapping
    evaluation: Evaluation
    stage_schedules: List[str]  # per stage: "single-pu" | "greedy" | "cp-sat optimal" | "cp-sat feasible"
    pareto: bool = False
    origin: str = "baseline"

    def objectives(self) -> Tuple[float, float, float]:
        ev = self.evaluation
        return ev.period_s, ev.latency_s, ev.energy_j


@dataclass
class SearchResult:
    """Every point (parapipe front first, then baselines), the lower bounds and search statistics.

    ``stats``: numbers (seconds, state counts); ``info``: how the search was bounded, JSON-ready — ``exact``
    (bool), ``exact_max_cells``, ``cells``, ``spaces`` (per space, :class:`parapipe.search.passes.SpaceReport`),
    ``cpsat`` (``time_unit_s``, limits), ``bound`` (method of the period bound).
    """

    problem: MappingProblem
    points: List[SearchPoint]
    bounds: Bounds
    objectives: Tuple[str, ...]
    stats: Dict[str, float] = field(default_factory=dict)
    info: Dict[str, Any] = field(default_factory=dict)

    def front(self, strategy: str = "parapipe") -> List[SearchPoint]:
        return [p for p in self.points if p.strategy == strategy]

    def best(self, objective: str, strategy: Optional[str] = "parapipe") -> SearchPoint:
        """SearchPoint with the best ``objective`` (throughput | latency | energy), ties broken by the others."""
        col = {"throughput": 0, "latency": 1, "energy": 2}[objective]
        pts = [p for p in self.points if strategy is None or p.strategy == strategy]
        return min(pts, key=lambda p: (p.objectives()[col],) + p.objectives())


OBJECTIVE_DIGITS = 10
"""Significant digits objectives are compared on: values equal to 10 digits are ties, not a dominance (the same
mapping reached along different summation orders differs in the last bits)."""


def _canonical(x: float) -> float:
    return float(f"{x:.{OBJECTIVE_DIGITS}g}")


def objective_matrix(points: Sequence[SearchPoint], objectives: Sequence[str]) -> np.ndarray:
    """(len(points), len(objectives)): each point's objectives in that order, throughput as its period (less is
    better in every column), rounded to :data:`OBJECTIVE_DIGITS` significant digits."""
    cols = [{"throughput": 0, "latency": 1, "energy": 2}[o] for o in objectives]
    return np.array([[_canonical(p.objectives()[c]) for c in cols] for p in points]).reshape(len(points), len(cols))


def own_front(points: List[SearchPoint], objectives: Sequence[str]) -> List[SearchPoint]:
    """The points no other of the list dominates (equal vectors: the first)."""
    if len(points) < 2:
        return points
    return [points[i] for i in np.flatnonzero(pareto_mask(objective_matrix(points, objectives)))]
