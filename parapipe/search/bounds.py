"""Lower bounds on the period and the latency of any mapping (GUIDE §2), used to report optimality gaps."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.problem import MappingProblem


@dataclass
class Bounds:
    """``period_s >= period_lb_s`` and ``latency_s >= latency_lb_s`` for every mapping of the problem."""

    period_lb_s: float
    latency_lb_s: float


def period_lower_bound(problem: MappingProblem) -> float:
    """max(slowest block on its fastest PU, fractional load balance).

    The balance term is the LP relaxation ``min P s.t. Σ_b x_bp·t_bp <= P for every PU, Σ_p x_bp = 1, x >= 0``
    (blocks split fractionally across PUs, no transfers), solved with OR-Tools' GLOP.
    """
    t = problem.time_s
    single = float(np.min(t, axis=1).max())
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    n, k = t.shape
    period = solver.NumVar(0, solver.infinity(), "P")
    x = {(b, p): solver.NumVar(0, 1, f"x{b}_{p}") for b in range(n) for p in range(k) if np.isfinite(t[b, p])}
    for b in range(n):
        solver.Add(sum(x[b, p] for p in range(k) if (b, p) in x) == 1)
    for p in range(k):
        terms = [x[b, p] * float(t[b, p]) for b in range(n) if (b, p) in x]
        if terms:
            solver.Add(sum(terms) <= period)
    solver.Minimize(period)
    status = solver.Solve()
    balance = period.solution_value() if status == pywraplp.Solver.OPTIMAL else 0.0
    return max(single, float(balance) * (1 - 1e-9))


def latency_lower_bound(problem: MappingProblem) -> float:
    """Critical path with every block on its fastest PU and free transfers."""
    fastest = np.min(problem.time_s, axis=1)
    finish = np.zeros(problem.n_blocks)
    for v in range(problem.n_blocks):
        ready = max((finish[u] for u in problem.preds[v]), default=0.0)
        finish[v] = ready + fastest[v]
    return float(finish.max()) if len(finish) else 0.0


def lower_bounds(problem: MappingProblem) -> Bounds:
    """Both bounds (see :func:`period_lower_bound`, :func:`latency_lower_bound`)."""
    return Bounds(period_lb_s=period_lower_bound(problem), latency_lb_s=latency_lower_bound(problem))
