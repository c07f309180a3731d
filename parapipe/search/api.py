"""The search driver: parapipe front, baselines, CP-SAT polish, bounds — one call, one result.

``search(problem, options)`` runs the outer DP (:mod:`.dp`) with greedy stage schedules (:mod:`.listsched`),
polishes the multi-PU stages of front mappings with CP-SAT (:mod:`.cpsat`), adds the baselines
(:mod:`.baselines`; they lie in the search space, so they are also offered to the parapipe front), evaluates every
mapping exactly with :func:`parapipe.cost.evaluate.evaluate`, and flags the points that are non-dominated among all.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..cost.evaluate import Evaluation, Mapping, StageMapping, evaluate
from ..cost.problem import MappingProblem
from ..errors import InfeasibleError, input_error
from .baselines import parallel_mappings, pipeline_mappings, single_pu_mappings
from .bounds import Bounds, lower_bounds
from .cpsat import solve_stage
from .dp import DPDeadline, DPOptions, dp_front
from .pareto import pareto_mask

log = logging.getLogger(__name__)

OBJECTIVES = ("throughput", "latency", "energy")


@dataclass
class SearchOptions:
    """Options of :func:`search`.

    Attributes
    ----------
    objectives : tuple of str
        Subset of ``("throughput", "latency", "energy")`` the front is computed on.
    max_stages : int or None
        Most pipeline stages.
    time_limit_s : float
        Budget for the CP-SAT polish (the DP itself is polynomial and not interrupted).
    seed : int
        CP-SAT random seed (with one worker, same seed → same front).
    epsilon : float or None
        Label-merging grid of the DP (None: 0 up to ``exact_blocks`` blocks, else 2e-3).
    max_labels : int or None
        Label cap per DP state (None: unbounded up to ``exact_blocks`` blocks, else 64).
    exact_blocks : int
        Problems with at most this many blocks are searched exactly.
    polish : bool
        Re-schedule multi-PU stages of front mappings with CP-SAT.
    cpsat_max_blocks : int
        Largest stage (in blocks) handed to CP-SAT.
    cpsat_stage_limit_s : float
        CP-SAT time limit per stage (within ``time_limit_s`` overall).
    max_cut_tensors : int
        On problems above ``exact_blocks``: stage boundaries only where at most this many producers are live
        (see :class:`parapipe.search.dp.DPOptions`).
    reuse_pus, reuse_epsilon, reuse_max_labels, reuse_time_limit_s, reuse_max_blocks : bool, float, int, float, int
        Also search the space where a PU serves several non-adjacent stages, with this label grid, label cap
        and time limit, on problems of at most ``reuse_max_blocks`` blocks (or when no disjoint mapping exists) (measured on the zoo models: 0.6–3 s, and up to 37 % shorter periods, e.g. inception_v1
        on the A311D 19.5 → 12.2 ms).
    """

    objectives: Tuple[str, ...] = OBJECTIVES
    max_stages: Optional[int] = None
    time_limit_s: float = 20.0
    seed: int = 0
    epsilon: Optional[float] = None
    max_labels: Optional[int] = None
    exact_blocks: int = 24
    polish: bool = True
    cpsat_max_blocks: int = 40
    cpsat_stage_limit_s: float = 0.5
    max_cut_tensors: int = 2
    reuse_pus: bool = True
    reuse_epsilon: float = 1e-2
    reuse_max_labels: int = 16
    reuse_time_limit_s: float = 10.0
    reuse_max_blocks: int = 64

    def __post_init__(self) -> None:
        bad = [o for o in self.objectives if o not in OBJECTIVES]
        if bad or not self.objectives:
            raise input_error("--objectives", None, f"unknown objective(s) {', '.join(bad) or '(none)'}",
                              f"choose among {', '.join(OBJECTIVES)}, comma-separated")
        if self.max_stages is not None and self.max_stages < 1:
            raise input_error("--max-stages", None, f"must be >= 1, got {self.max_stages}", "give a positive count")
        if self.time_limit_s <= 0:
            raise input_error("--time-limit", None, f"must be > 0, got {self.time_limit_s}", "give seconds")


@dataclass
class Point:
    """One evaluated mapping. ``strategy`` is parapipe | pipeline | parallel | single."""

    id: str
    strategy: str
    mapping: Mapping
    evaluation: Evaluation
    stage_schedules: List[str]  # per stage: "single-pu" | "greedy" | "cp-sat optimal" | "cp-sat feasible"
    pareto: bool = False

    def objectives(self) -> Tuple[float, float, float]:
        ev = self.evaluation
        return ev.period_s, ev.latency_s, ev.energy_j


@dataclass
class SearchResult:
    """Every point (parapipe front first, then baselines), the lower bounds and search statistics."""

    problem: MappingProblem
    points: List[Point]
    bounds: Bounds
    objectives: Tuple[str, ...]
    stats: Dict[str, float] = field(default_factory=dict)

    def front(self, strategy: str = "parapipe") -> List[Point]:
        return [p for p in self.points if p.strategy == strategy]

    def best(self, objective: str, strategy: Optional[str] = "parapipe") -> Point:
        """Point with the best ``objective`` (throughput | latency | energy), ties broken by the others."""
        col = {"throughput": 0, "latency": 1, "energy": 2}[objective]
        pts = [p for p in self.points if strategy is None or p.strategy == strategy]
        return min(pts, key=lambda p: (p.objectives()[col],) + p.objectives())


OBJECTIVE_DIGITS = 10
"""Significant digits objectives are compared on: values equal to 10 digits are ties, not a dominance (the same
mapping reached along different summation orders differs in the last bits)."""


def _canonical(x: float) -> float:
    return float(f"{x:.{OBJECTIVE_DIGITS}g}")


def _objective_matrix(points: Sequence[Point], objectives: Sequence[str]) -> np.ndarray:
    cols = [{"throughput": 0, "latency": 1, "energy": 2}[o] for o in objectives]
    return np.array([[_canonical(p.objectives()[c]) for c in cols] for p in points]).reshape(len(points), len(cols))


def merge_same_pu_stages(mapping: Mapping) -> Mapping:
    """Merge consecutive single-PU stages on the same PU (never worse: no hand-off, same busy time, less latency)."""
    out: List[StageMapping] = []
    for st in mapping.stages:
        prev = out[-1] if out else None
        if prev is not None and len(prev.pus) == 1 and prev.pus == st.pus:
            out[-1] = StageMapping(prev.start, st.stop, prev.pus, prev.assignment + st.assignment)
        else:
            out.append(st)
    return Mapping(tuple(out))


def _stage_kinds(mapping: Mapping) -> List[str]:
    return ["single-pu" if len(st.pus) == 1 else "greedy" for st in mapping.stages]


class _Polisher:
    """CP-SAT re-scheduling of multi-PU stages, memoised per (start, stop, group), within a time budget."""

    def __init__(self, problem: MappingProblem, options: SearchOptions, deadline: float):
        self.problem = problem
        self.options = options
        self.deadline = deadline
        self.memo: Dict[tuple, object] = {}

    def polish(self, mapping: Mapping) -> Tuple[Mapping, List[str]]:
        stages, kinds = [], []
        for st in mapping.stages:
            kind = "single-pu" if len(st.pus) == 1 else "greedy"
            new = st
            if len(st.pus) > 1 and st.stop - st.start <= self.options.cpsat_max_blocks:
                key = (st.start, st.stop, st.pus)
                if key not in self.memo:
                    left = self.deadline - time.monotonic()
                    self.memo[key] = None if left <= 0.05 else solve_stage(
                        self.problem, st.start, st.stop, st.pus, hint=st.assignment,
                        time_limit_s=min(left, self.options.cpsat_stage_limit_s), seed=self.options.seed)
                sol = self.memo[key]
                if sol is not None:
                    cand = StageMapping(st.start, st.stop, tuple(sorted(set(sol.assignment))), sol.assignment,
                                        sol.order)
                    new = cand
                    kind = "cp-sat optimal" if sol.optimal else "cp-sat feasible"
            stages.append(new)
            kinds.append(kind)
        return Mapping(tuple(stages)), kinds


def search(problem: MappingProblem, options: Optional[SearchOptions] = None,
           progress: Optional[Callable[[int], None]] = None) -> SearchResult:
    """Search hierarchical mappings of ``problem`` and return the front next to the baselines.

    Raises
    ------
    parapipe.errors.InfeasibleError
        If no mapping exists on the problem's PUs.
    """
    opts = options or SearchOptions()
    t0 = time.monotonic()
    exact = problem.n_blocks <= opts.exact_blocks
    eps = opts.epsilon if opts.epsilon is not None else (0.0 if exact else 2e-3)
    cap = opts.max_labels if opts.max_labels is not None else (0 if exact else 64)
    dpo = DPOptions(max_stages=opts.max_stages, epsilon=eps, max_labels=cap,
                    max_cut_tensors=None if exact else opts.max_cut_tensors)
    try:
        dp = dp_front(problem, dpo, progress=progress)
        dp_mappings = list(dp.mappings)
        n_states = dp.n_states
    except InfeasibleError:
        dp_mappings, n_states = [], 0
    # Second space: a PU may serve several non-adjacent stages (labels carry every PU's busy time; bounded by an
    # epsilon grid, a label cap and a deadline). Its mappings join the candidates; if it runs out of time the
    # disjoint-group front stands alone.
    reuse_opts = DPOptions(max_stages=opts.max_stages, epsilon=max(eps, opts.reuse_epsilon),
                           max_labels=opts.reuse_max_labels, max_cut_tensors=dpo.max_cut_tensors, reuse_pus=True,
                           deadline=time.monotonic() + (opts.reuse_time_limit_s if dp_mappings else 10 * opts.reuse_time_limit_s))
    reuse_done = False
    if opts.reuse_pus and (problem.n_blocks <= opts.reuse_max_blocks or not dp_mappings):
        try:
            rdp = dp_front(problem, reuse_opts)
            dp_mappings += rdp.mappings
            n_states += rdp.n_states
            reuse_done = True
        except DPDeadline as exc:
            log.info("%s: PU-reuse search skipped: %s", problem.name, exc)
        except InfeasibleError:
            pass
    if not dp_mappings:
        raise InfeasibleError(f"{problem.name}: no mapping exists on PUs {', '.join(problem.pu_names)}: some block "
                              "cannot run on any of them; allow a PU that supports it (--pus)")
    t_dp = time.monotonic() - t0
    deadline = time.monotonic() + opts.time_limit_s
    polisher = _Polisher(problem, opts, deadline)

    candidates: List[Tuple[str, Mapping, List[str]]] = []
    for m in dp_mappings:
        m = merge_same_pu_stages(m)
        candidates.append(("parapipe", m, _stage_kinds(m)))
    baseline: List[Tuple[str, str, Mapping]] = []
    for name, m in single_pu_mappings(problem):
        baseline.append(("single", f"single-{name}", m))
    for i, m in enumerate(pipeline_mappings(problem, dpo)):
        baseline.append(("pipeline", f"pipeline-{i}", m))
    for i, m in enumerate(parallel_mappings(problem)):
        baseline.append(("parallel", f"parallel-{i}", m))

    points: List[Point] = []
    for strategy, pid, m in baseline:
        kinds = _stage_kinds(m)
        if strategy == "parallel" and opts.polish:
            m, kinds = polisher.polish(m)
        points.append(Point(pid, strategy, m, evaluate(problem, m), kinds))
    # Parapipe candidates: the DP front, its CP-SAT polished versions, and every baseline (all in the space).
    cand_points: List[Point] = []
    for _, m, kinds in candidates:
        cand_points.append(Point("", "parapipe", m, evaluate(problem, m), kinds))
        if opts.polish and any(len(st.pus) > 1 for st in m.stages):
            pm, pk = polisher.polish(m)
            cand_points.append(Point("", "parapipe", pm, evaluate(problem, pm), pk))
    for b in points:
        cand_points.append(Point("", "parapipe", b.mapping, b.evaluation, b.stage_schedules))
    mat = _objective_matrix(cand_points, opts.objectives)
    front = [cand_points[i] for i in np.flatnonzero(pareto_mask(mat))]  # equal vectors: the first is kept
    front.sort(key=lambda p: p.objectives())
    for i, p in enumerate(front):
        p.id = f"p{i}"
    all_points = front + points
    mask = pareto_mask(_objective_matrix(all_points, opts.objectives))
    # Equal objective vectors: pareto_mask keeps the first; a baseline equal to a front point is on the front too.
    objs = [tuple(row) for row in _objective_matrix(all_points, opts.objectives)]
    on_front = {objs[j] for j in np.flatnonzero(mask)}
    for i, p in enumerate(all_points):
        p.pareto = objs[i] in on_front
    bounds = lower_bounds(problem)
    stats = {"search_s": time.monotonic() - t0, "dp_s": t_dp, "dp_states": n_states, "reuse_searched": float(reuse_done),
             "epsilon": eps, "max_labels": cap, "exact": float(eps == 0 and cap == 0)}  # disjoint-group space searched exactly
    log.info("search %s: %d blocks x %d PUs, front %d points, %.2fs (DP %.2fs, %d states)", problem.name,
             problem.n_blocks, problem.n_pus, len(front), stats["search_s"], t_dp, n_states)
    return SearchResult(problem=problem, points=all_points, bounds=bounds, objectives=tuple(opts.objectives),
                        stats=stats)
