"""Inner level, exact: optimal makespan of one stage's blocks on its PU group with CP-SAT.

Model (shape of OR-Tools' ``line_balancing_sat.py``: data / variables / constraints / objective / solve):
one optional interval per (block, PU) with exactly one present, no-overlap per PU, precedence with the transfer
delay when producer and consumer sit on different PUs, makespan minimised. Times are integers in units of
``TIME_UNIT_S``, every duration and transfer rounded *up* to the unit (rounding to nearest turned ten 40 ns
blocks into zero-length intervals, so any schedule looked optimal); "optimal" therefore means optimal for the
rounded-up durations, within ``n · TIME_UNIT_S`` of the true optimum for ``n`` blocks. The greedy schedule is
passed as a hint; the search is deterministic: one worker, and a limit in CP-SAT's *deterministic time*
(``max_deterministic_time``, a count of the solver's work scaled to be close to seconds; OR-Tools' SatParameters),
so the same model and seed give the same schedule whatever the machine's load. A wall-clock limit
(:data:`parapipe.search.budget.SAFETY_FACTOR` × the budget + :data:`parapipe.search.budget.SAFETY_FLOOR_S`) is a
safety net only; ``report["wall_stopped"]`` says when it stopped the solver first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ..cost.problem import MappingProblem
from .budget import SAFETY_FACTOR, SAFETY_FLOOR_S

__all__ = ["TIME_UNIT_S", "ticks", "StageSchedule", "solve_stage"]

TIME_UNIT_S = 1e-7
"""Integer time resolution of the CP-SAT model, seconds (0.1 µs; chosen far below operator times). Durations are
rounded up to it; pareto.json records it as ``search.cpsat.time_unit_s``."""


def ticks(x_s: float) -> int:
    """``x_s`` seconds in units of :data:`TIME_UNIT_S`, rounded up (a relative 1e-9 absorbs float noise, so
    2e-7 s is 2 ticks, not 3)."""
    return max(0, int(math.ceil(x_s / TIME_UNIT_S * (1 - 1e-9))))


@dataclass
class StageSchedule:
    """Result of :func:`solve_stage`: PU per block (``start..stop``), schedule order, makespan, proof status.

    ``makespan_s`` is the model's makespan in whole ticks times :data:`TIME_UNIT_S` (durations rounded up), so it
    is at least the true makespan of the returned schedule; ``optimal`` is CP-SAT's proof for those ticks.
    """

    assignment: Tuple[int, ...]
    order: Tuple[int, ...]
    makespan_s: float
    optimal: bool


def solve_stage(problem: MappingProblem, start: int, stop: int, group: Sequence[int],
                hint: Optional[Sequence[int]] = None, time_limit_s: float = 1.0, seed: int = 0,
                report: Optional[Dict[str, Any]] = None) -> Optional[StageSchedule]:
    """Minimum-makespan schedule of blocks ``[start, stop)`` on PU indices ``group``.

    ``time_limit_s`` is CP-SAT deterministic time (seconds of its work measure, not of the clock). ``report``, if
    given, receives ``deterministic_s`` (deterministic time spent) and ``wall_stopped`` (the wall-clock safety
    limit, not the deterministic one, ended the solve).

    Returns
    -------
    StageSchedule or None
        None if CP-SAT found no solution within ``time_limit_s`` of deterministic time (or the stage is infeasible on ``group``).
    """
    from ortools.sat.python import cp_model  # ~0.2 s to import: only when a stage is solved

    blocks = list(range(start, stop))
    group = list(group)
    dur = {(v, p): ticks(problem.time_s[v, p]) for v in blocks for p in group if np.isfinite(problem.time_s[v, p])}
    horizon = sum(max((d for (v2, _), d in dur.items() if v2 == v), default=0) for v in blocks)
    comm = {}
    for v in blocks:
        for u in problem.preds[v]:
            if u >= start:
                nb = problem.edge_nbytes.get((u, v), 0.0)
                for p in group:
                    for q in group:
                        if p != q:
                            comm[(u, v, p, q)] = ticks(problem.comm_s(p, q, nb))
    horizon += sum(max([c for (u2, v2, _, _), c in comm.items() if v2 == v] or [0]) for v in blocks)

    m = cp_model.CpModel()
    s = {v: m.new_int_var(0, horizon, f"s{v}") for v in blocks}
    e = {v: m.new_int_var(0, horizon, f"e{v}") for v in blocks}
    x = {}
    per_pu: Dict[int, list] = {p: [] for p in group}
    for v in blocks:
        opts = [p for p in group if (v, p) in dur]
        if not opts:
            return None
        for p in opts:
            x[v, p] = m.new_bool_var(f"x{v}_{p}")
            per_pu[p].append(m.new_optional_interval_var(s[v], dur[v, p], e[v], x[v, p], f"i{v}_{p}"))
        m.add_exactly_one(x[v, p] for p in opts)
    for p in group:
        m.add_no_overlap(per_pu[p])
    for v in blocks:
        for u in problem.preds[v]:
            if u < start:
                continue
            m.add(s[v] >= e[u])
            for p in group:
                for q in group:
                    c = comm.get((u, v, p, q), 0)
                    if c > 0 and (u, p) in x and (v, q) in x:
                        m.add(s[v] >= e[u] + c).only_enforce_if([x[u, p], x[v, q]])
    makespan = m.new_int_var(0, horizon, "makespan")
    m.add_max_equality(makespan, [e[v] for v in blocks])
    m.minimize(makespan)
    if hint is not None:
        for v, hp in zip(blocks, hint):
            for p in group:
                if (v, p) in x:
                    m.add_hint(x[v, p], p == hp)
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = float(time_limit_s)
    wall_s = SAFETY_FACTOR * float(time_limit_s) + SAFETY_FLOOR_S
    solver.parameters.max_time_in_seconds = wall_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = int(seed)
    # CP-SAT's own SIGINT handler (on by default) resets SIGINT to the default action when the solve ends, so a
    # later Ctrl-C killed parapipe silently instead of raising KeyboardInterrupt (ortools/base/sigint.cc).
    solver.parameters.catch_sigint_signal = False
    status = solver.solve(m)
    if report is not None:
        det = float(solver.response_proto.deterministic_time)
        report["deterministic_s"] = det
        report["wall_stopped"] = (status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
                                  and solver.wall_time >= 0.99 * wall_s and det < float(time_limit_s))
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    assign = tuple(next(p for p in group if (v, p) in x and solver.value(x[v, p])) for v in blocks)
    order = tuple(sorted(blocks, key=lambda v: (solver.value(s[v]), v)))
    return StageSchedule(assignment=assign, order=order, makespan_s=solver.value(makespan) * TIME_UNIT_S,
                         optimal=status == cp_model.OPTIMAL)
