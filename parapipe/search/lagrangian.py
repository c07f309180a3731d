"""The Lagrangian bound of the relaxation of :mod:`.relaxation`: ``max over λ on the simplex of min over mode
sequences of λ · busy``, each value a period bound since ``max_q busy_q >= λ · busy``.

For fixed ``λ`` the inner minimum is a shortest path over (block, mode) with the relaxation's per-block costs
(:meth:`parapipe.search.relaxation.RelaxedDP.moves`), so it needs costs that add up block by block: a group
stage is charged its spine path only (the probes of :class:`~parapipe.search.relaxation.RelaxedDP` also charge
its work). The outer maximum is found by Kelley's cutting planes (the LPs solved with OR-Tools' GLOP); the
cost-to-go table of the best ``λ`` prunes the probes and the least-period pass (:mod:`.labels`).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from .budget import Budget

RelaxedDP = Any
"""A :class:`parapipe.search.relaxation.RelaxedDP` (not imported: that module imports this one)."""

__all__ = ["LAGRANGE_UNIT", "cost_to_go", "lagrangian_period_bound", "kelley"]

LAGRANGE_UNIT = 15.0
"""Entries of the (NM, NM) move tables per unit of :data:`parapipe.search.budget.RELAX_WORK_PER_S` in a Lagrangian
evaluation (``blocks × NM²`` entries; ResNet-50 on the A311D profile, NM = 160: 20 ms of CPU per evaluation,
1.2e6 entries, 8e4 units. Re-measure: ``time.process_time`` around ``_lagrange_value``)."""


def _step_costs(dp: RelaxedDP, lam: np.ndarray, v: int) -> Tuple[np.ndarray, np.ndarray]:
    """(NM, NM) λ-weighted cost of moving from expanded mode m (block v-1) to m2 (block v), and whether the
    cheaper way is the same stage (a) rather than a new stage (b)."""
    move_a, move_b = dp.moves(v)
    node = dp.node[v] @ lam
    with np.errstate(invalid="ignore"):
        a = node[None, :] + move_a * (dp.member @ lam)[None, :]
        b = (node + dp.open @ lam)[None, :] + move_b * (dp.charge @ lam)[None, :]
    a[~np.isfinite(move_a)] = np.inf
    b[~np.isfinite(move_b)] = np.inf
    cost = np.minimum(a, b)
    cost[:, ~dp.opened[v]] = np.inf
    return cost, a <= b


def _lagrange_value(dp: RelaxedDP, lam: np.ndarray) -> Tuple[float, np.ndarray]:
    """``min over mode sequences of λ · busy`` and the busy vector of a minimiser (a cutting plane)."""
    n, nm = dp.n, dp.nm
    val = np.where(dp.opened[0], (dp.node[0] + dp.open) @ lam, np.inf)
    choice = []
    for v in range(1, n):
        cost, use_a = _step_costs(dp, lam, v)
        tot = val[:, None] + cost
        arg = np.argmin(tot, axis=0)
        val = tot[arg, np.arange(nm)]
        choice.append((arg, use_a[arg, np.arange(nm)]))
    end = int(np.argmin(val))
    busy = np.zeros(dp.k)
    m = end
    for v in range(n - 1, 0, -1):
        arg, use_a = choice[v - 1]
        prev = int(arg[m])
        move_a, move_b = dp.moves(v)
        busy += dp.node[v, m]
        if use_a[m]:
            busy += move_a[prev, m] * dp.member[m]
        else:
            busy += dp.open[m] + move_b[prev, m] * dp.charge[m]
        m = prev
    busy += dp.node[0, m] + dp.open[m]
    return float(val[end]), busy


def cost_to_go(dp: RelaxedDP, lam: np.ndarray) -> np.ndarray:
    """(n, nm): least λ · busy the blocks after v add when block v is in mode m (for pruning probes)."""
    h = np.zeros((dp.n, dp.nm))
    for v in range(dp.n - 1, 0, -1):
        cost, _ = _step_costs(dp, lam, v)
        h[v - 1] = np.min(cost + h[v][None, :], axis=1)
    return h


def lagrangian_period_bound(dp: RelaxedDP, best_period_s: Optional[float] = None, iterations: int = 60,
                            budget: Optional[Budget] = None) -> Tuple[float, np.ndarray]:
    """``max over λ on the simplex of min over mode sequences of λ · busy`` (each value is a bound on the
    period, since ``max_q busy_q >= λ · busy``), by Kelley's cutting planes (:func:`kelley`).

    Returns
    -------
    (bound_s, λ of the best value)
    """
    return kelley(lambda lam: _lagrange_value(dp, lam), dp.k, best_period_s, iterations, budget,
                  dp.n * dp.nm * dp.nm / LAGRANGE_UNIT)


def kelley(value: Callable[[np.ndarray], Tuple[float, np.ndarray]], k: int, stop_at_s: Optional[float] = None,
           iterations: int = 60, budget: Optional[Budget] = None,
           units_per_value: float = 0.0) -> Tuple[float, np.ndarray]:
    """``max over λ on the simplex of value(λ)`` for a concave piecewise-linear ``value`` given as ``λ -> (min
    over some set of λ · busy, the busy (k,) vector of a minimiser)``, by Kelley's cutting planes: each minimiser
    is a plane ``z <= λ · busy``, and the next ``λ`` maximises ``z`` over the planes so far (an LP, OR-Tools'
    GLOP). Stops after ``iterations`` values, when the LP's optimum meets the best value (within 1e-6
    relative: the maximum), at ``stop_at_s`` (no need beyond), or when ``budget`` runs out (each value charges
    ``units_per_value``). The first ``λ`` is uniform.

    Returns
    -------
    (best value, λ that reached it)
    """
    from ortools.linear_solver import pywraplp

    lam = np.full(k, 1.0 / k)
    best, best_lam = 0.0, lam
    cuts: List[np.ndarray] = []
    for _ in range(iterations):
        val, busy = value(lam)
        if val > best:
            best, best_lam = val, lam
        cuts.append(busy)
        if budget is not None:
            budget.spend(units_per_value)
        if (stop_at_s is not None and best >= stop_at_s) or (budget is not None and budget.over()):
            break
        lp = pywraplp.Solver.CreateSolver("GLOP")
        x = [lp.NumVar(0.0, 1.0, f"l{q}") for q in range(k)]
        z = lp.NumVar(-lp.infinity(), lp.infinity(), "z")
        lp.Add(sum(x) == 1.0)
        for c in cuts:
            lp.Add(z <= sum(float(c[q]) * x[q] for q in range(k)))
        lp.Maximize(z)
        if lp.Solve() != pywraplp.Solver.OPTIMAL:
            break
        lam = np.array([max(0.0, xi.solution_value()) for xi in x])
        if z.solution_value() - best <= 1e-6 * max(best, 1e-12):
            break
    return best, best_lam
