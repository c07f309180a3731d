"""Deterministic search budgets: counted work, with a wall-clock safety net.

Every bounded pass of the search counts its work in units that do not depend on the machine's load (DP label
candidates and transitions, relaxation label rows, CP-SAT deterministic time) and stops when the count passes its
budget, at a point that depends only on the inputs and the options: the same inputs and ``--seed`` give the same
front on a quiet or a loaded machine. Budgets are given in *deterministic seconds* (the options' ``*_time_limit_s``)
and converted to counts with the rates below.

A wall-clock limit (:data:`SAFETY_FACTOR` × the budget + :data:`SAFETY_FLOOR_S`) still stops a pass that runs far
longer than its budget should take, so a pathological input cannot hang the search; when it fires the result is no
longer reproducible and the search says so (``SearchResult.info["stopped_early"]``, pareto.json
``search.stopped_early``).

**Rates** (work units per second, the median over the zoo models × the bundled A311D, A1000 and Orin profiles and a
40-block table with parallel branches, of each pass's units over its process CPU seconds on an x86-64 core of the
development machine; re-measure with ``python benchmarks/search_bench.py --rates``): a pass's budget of ``S``
deterministic seconds therefore takes about ``S`` CPU seconds on such a core.
"""
from __future__ import annotations

import time
from typing import Optional

__all__ = ["DP_WORK_PER_S", "REPLICATED_WORK_PER_S", "RELAX_WORK_PER_S", "PERIOD_WORK_PER_S",
           "CPSAT_DET_PER_S", "SAFETY_FACTOR", "CPSAT_MODEL_S_PER_CELL", "SAFETY_FLOOR_S", "WALL", "WORK",
           "Budget", "BudgetExceeded"]

DP_WORK_PER_S = 7.0e5
"""DP passes (:mod:`.dp`): label candidates built plus transitions recorded, per CPU second."""

REPLICATED_WORK_PER_S = 7.0e4
"""Replicated pass (:mod:`.replicate`): labels pushed, per CPU second."""

RELAX_WORK_PER_S = 4.0e6
"""Bound relaxation (:mod:`.relaxation`): label rows built by probes, and ``blocks × modes²`` per Lagrangian
evaluation, per CPU second."""

PERIOD_WORK_PER_S = 3.5e5
"""Least-period DP pass (:func:`parapipe.search.passes.period_pass`: busy-time labels filtered by the relaxation's
guide, dearer per unit than the other DP passes): units per CPU second measured on the 40-block table
(``tests/search_cases.py:branchy_block_table``, A311D, ``--seed 1``: 1.6e6 units in about 4.6 CPU s)."""

CPSAT_DET_PER_S = 0.3
"""CP-SAT deterministic time per CPU second of its solves on the development machine (6.8 deterministic s in
about 20 CPU s of polish on that 40-block table): a polish budget of ``S`` seconds is ``0.3 S`` of CP-SAT's
deterministic time, so ``--time-limit S`` takes about ``S`` CPU seconds there."""

SAFETY_FACTOR = 50.0
"""Wall-clock safety net of a pass: this many times its budget in deterministic seconds (plus
:data:`SAFETY_FLOOR_S`). A pass gets about ``cores / (runnable processes)`` of a core: on a machine loaded to 3×
its cores a budget takes about 4× its seconds, so the net only catches runaway passes (a 2-core machine with
12 runnable processes, measured while developing this, still stayed below it)."""

CPSAT_MODEL_S_PER_CELL = 6.0e-4
"""CP-SAT polish: seconds charged per block × PU of a stage model, on top of CP-SAT's own
deterministic time, for building the model and the solver's set-up (which CP-SAT does not count): measured CPU
seconds per solve on a 40-block table, 0.004 s at 5 blocks × 2 PUs to 0.1 s at 40 × 4, against 0.00004-0.015 s
of CP-SAT deterministic time."""

SAFETY_FLOOR_S = 60.0
"""Seconds added to every wall-clock safety limit (short budgets on a busy machine)."""

WALL = "wall-clock safety limit"
WORK = "work budget"


class Budget:
    """A work budget (``limit`` units) with an optional wall-clock safety limit (``wall_s`` seconds from now).

    ``spend(n)`` counts work; ``over()`` says whether the pass must stop: :data:`WORK` once the count passes the
    limit (deterministic), :data:`WALL` once the safety limit passed first (``wall_stopped`` is then set), else
    None. ``stop_point`` is filled in by the pass that stopped (e.g. "block 8 of 40").
    """

    def __init__(self, limit: Optional[float], wall_s: Optional[float] = None):
        self.limit = limit
        self.used = 0.0
        self.wall_s = wall_s
        self._t_end = None if wall_s is None else time.monotonic() + wall_s
        self.wall_stopped = False
        self.stop_point = ""
        self.projected: Optional[float] = None

    @classmethod
    def of_seconds(cls, seconds: Optional[float], rate: float, safety_factor: float = SAFETY_FACTOR) -> "Budget":
        """The budget of ``seconds`` deterministic seconds at ``rate`` units per second (None: unbounded), with
        the wall-clock safety limit ``safety_factor × seconds + SAFETY_FLOOR_S`` (none if ``safety_factor <= 0``)."""
        if seconds is None:
            return cls(None, None)
        wall = safety_factor * seconds + SAFETY_FLOOR_S if safety_factor > 0 else None
        return cls(seconds * rate, wall)

    def spend(self, units: float) -> None:
        self.used += units

    def over(self) -> Optional[str]:
        if self.limit is not None and self.used > self.limit:
            return WORK
        if self._t_end is not None and time.monotonic() > self._t_end:
            self.wall_stopped = True
            return WALL
        return None

    def check(self, name: str, where: str) -> None:
        """Raise :class:`BudgetExceeded` (its message ``"<name> stopped at <where> (<reason>)"``) when
        :meth:`over`, with ``stop_point`` set to ``"<name> at <where>"``; for passes that stop at any point."""
        why = self.over()
        if why is not None:
            self.stop_point = f"{name} at {where}"
            raise BudgetExceeded(f"{name} stopped at {where} ({why})", why)

    def over_projected(self, done: int, total: int) -> Optional[str]:
        """:meth:`over`, or :data:`WORK` when the work counted after ``done`` of a pass's ``total`` steps,
        extrapolated linearly to ``total``, passes the limit (``projected`` is then set): for a pass that is of
        no use unless it finishes, and whose work per step grows as it goes (a DP whose label sets fill up), so
        that the projection stops early a pass that would run out anyway. Counted work only: deterministic."""
        why = self.over()
        if why is None and self.limit is not None and 0 < done < total and self.used * total / done > self.limit:
            self.projected = self.used * total / done
            return WORK
        return why

    def to_json(self) -> dict:
        out = {"work": int(self.used)}
        if self.limit is not None:
            out["work_limit"] = int(self.limit)
        if self.projected is not None:
            out["projected_work"] = int(self.projected)
        return out


class BudgetExceeded(Exception):
    """A pass stopped on its :class:`Budget` (``reason``: :data:`WORK` or :data:`WALL`)."""

    def __init__(self, message: str, reason: str = WORK):
        super().__init__(message)
        self.reason = reason
