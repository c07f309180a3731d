"""The options of the search (:func:`parapipe.search.api.search`): :class:`SearchOptions`, its objectives and
the size up to which it is exact; every default is the CLI's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ..errors import input_error
from .budget import SAFETY_FACTOR

__all__ = ["OBJECTIVES", "EXACT_MAX_CELLS", "SearchOptions"]

OBJECTIVES = ("throughput", "latency", "energy")

EXACT_MAX_CELLS = 32
"""Blocks × PUs up to which every space is searched exactly (measured on random tables: the exact PU-reuse pass
takes at most 0.14 s at 32 cells, up to 3 s at 40-48; tests/test_search.py checks the exact fronts against brute
force up to 7 blocks × 3 PUs)."""


@dataclass
class SearchOptions:
    """Options of :func:`parapipe.search.api.search` (the defaults are the CLI's).

    Attributes
    ----------
    objectives : tuple of str
        Subset of ``("throughput", "latency", "energy")`` the front is computed on.
    max_stages : int or None
        Most pipeline stages.
    time_limit_s : float
        Budget for the CP-SAT polish, in CP-SAT deterministic time (seconds of its work measure; about wall
        seconds on the machine :mod:`parapipe.search.budget` names).
    seed : int
        CP-SAT random seed (one worker and deterministic budgets: same seed → same front).
    exact_max_cells : int
        Problems of at most this many blocks × PUs are searched exactly (:data:`EXACT_MAX_CELLS`).
    epsilon, max_labels : float, int
        Above ``exact_max_cells``: label grid (fraction of the total work; 0 = none) and label cap per state (0 =
        none) of the disjoint-group and pipeline passes.
    max_cut_tensors : int
        Above ``exact_max_cells``: stage boundaries only where at most this many producers are live (see
        :class:`parapipe.search.dp.DPOptions`).
    reuse_pus, reuse_epsilon, reuse_max_labels, reuse_time_limit_s, reuse_max_blocks : bool, float, int, float, int
        Also search the space where a PU serves several non-adjacent stages; above ``exact_max_cells`` with this
        label grid and label cap, on problems of at most ``reuse_max_blocks`` blocks (or when no disjoint mapping
        exists); always within this work budget in deterministic seconds (:mod:`.budget`) (measured on the zoo models: up to 37 % shorter periods, e.g.
        inception_v1 on the A311D 19.5 → 12.2 ms).
    polish : bool
        Re-schedule multi-PU stages of front mappings with CP-SAT.
    cpsat_max_blocks : int
        Largest stage (in blocks) handed to CP-SAT.
    cpsat_stage_limit_s : float
        CP-SAT deterministic time limit per stage (within ``time_limit_s`` overall).
    polish_patience, polish_patience_s : int, float
        Above ``exact_max_cells``: stop solving new stages after this many CP-SAT solves in a row, or once solves
        in a row took this many deterministic seconds of ``time_limit_s``, that put no new point on the front
        (candidates polished most promising first, by :func:`parapipe.search.api.search`); 0: no such limit.
    bound_time_limit_s : float
        Work budget (deterministic seconds) of the period lower bounds (:func:`parapipe.search.bounds.lower_bounds`:
        the relaxation that also guides the period pass, the stage-cut DP of the PU-reuse space, the relaxation's
        min-max DP).
    replicate, replicate_time_limit_s : bool, float
        Also search mappings with replicated stages (:mod:`parapipe.search.replicate`), within this work budget
        (deterministic seconds).
    replicate_large_time_limit_s, replicate_max_labels, replicate_max_cut_tensors : float, int, int
        Above ``exact_max_cells``: the replicated pass's work budget, label cap and stage boundaries (at most this
        many live tensors, except that the last stage may start at any boundary after the last such one), one PU
        per replica, states keyed on replica PUs (not exact).
    period_gap, period_epsilon, period_time_limit_s : float, float, float
        The least-period pass (:func:`parapipe.search.passes.period_pass`) runs when the period found is more than
        ``period_gap`` above the relaxation's bound, with this label grid above ``exact_max_cells`` and this
        work budget (deterministic seconds); before it, under the same condition and with ``reuse_pus``, the
        relaxation's sequences (:mod:`parapipe.search.relaxed_sequences`).
    operating_points : str
        Operating points searched (:mod:`parapipe.search.dvfs`): ``auto`` (default: every point where the DP's
        catalogue stays small, exact up to ``exact_max_cells``), ``all``, ``max`` (highest points only: the fronts
        of a profile without tables) or a number of points per PU spread over each table (the highest included).
    workers : int
        Processes the DP passes run in (:func:`parapipe.search.passes.pass_workers`): 0 (default) automatic (up
        to 3 where the CPUs allow and the problem is large enough to gain), 1 all in this process; 2 or 3 fork the
        replicated and reuse passes whatever the size; from 2 the CP-SAT polish is forked too, next to the bounds.
        The results are the same whatever the value.
    wall_safety_factor : float
        Wall-clock safety limit of every budget: this many times its deterministic seconds, plus
        :data:`parapipe.search.budget.SAFETY_FLOOR_S` (0: none). Only a runaway pass on a badly overloaded machine
        reaches it; ``SearchResult.info["stopped_early"]`` then says so.
    """

    objectives: Tuple[str, ...] = OBJECTIVES
    max_stages: Optional[int] = None
    time_limit_s: float = 20.0
    seed: int = 0
    exact_max_cells: int = EXACT_MAX_CELLS
    epsilon: float = 0.0
    max_labels: int = 256
    max_cut_tensors: int = 2
    reuse_pus: bool = True
    reuse_epsilon: float = 1e-2
    reuse_max_labels: int = 16
    reuse_time_limit_s: float = 10.0
    reuse_max_blocks: int = 64
    replicate: bool = True
    replicate_time_limit_s: float = 5.0
    replicate_large_time_limit_s: float = 2.0
    replicate_max_labels: int = 4
    replicate_max_cut_tensors: int = 1
    polish: bool = True
    cpsat_max_blocks: int = 40
    cpsat_stage_limit_s: float = 0.5
    polish_patience: int = 8
    polish_patience_s: float = 1.0
    bound_time_limit_s: float = 0.6
    period_gap: float = 0.10
    period_epsilon: float = 0.01
    period_time_limit_s: float = 2.0
    wall_safety_factor: float = SAFETY_FACTOR
    operating_points: str = "auto"
    workers: int = 0

    def __post_init__(self) -> None:
        bad = [o for o in self.objectives if o not in OBJECTIVES]
        if bad or not self.objectives:
            raise input_error("--objectives", None, f"unknown objective(s) {', '.join(bad) or '(none)'}",
                              f"choose among {', '.join(OBJECTIVES)}, comma-separated")
        if self.max_stages is not None and self.max_stages < 1:
            raise input_error("--max-stages", None, f"must be >= 1, got {self.max_stages}", "give a positive count")
        if self.time_limit_s <= 0:
            raise input_error("--time-limit", None, f"must be > 0, got {self.time_limit_s}", "give seconds")
        if self.workers < 0:
            raise input_error("workers", None, f"must be >= 0, got {self.workers}",
                              "give 0 (automatic), 1 (one process) or more")
        text = str(self.operating_points).strip().lower()
        if text not in ("auto", "all", "max") and not (text.isdigit() and int(text) >= 1):
            raise input_error("--operating-points", None, f"unknown value {self.operating_points!r}",
                              "give auto, all, max or a number of points per PU (>= 1)")
