"""Lower bounds on the period and the latency of any mapping, used to report optimality gaps.

* **Period** of mappings without replicated stages, the largest of:

  - the slowest block on its fastest PU, ``max_v min_p t[v, p]``;
  - the LP load balance: blocks split fractionally across the PUs that support them, no transfers
    (``min P s.t. Σ_b x_bp t_bp <= P``, ``Σ_p x_bp = 1``, ``x >= 0``), solved with OR-Tools' GLOP;
  - the relaxed min-max DP of :mod:`.relaxation`: per-block PU choice with op support, the hand-offs that
    unsupported ops force, and what a multi-PU stage costs every PU of its group (longest spine path or
    balanced work); exact for chains mapped one PU per stage.

  - the Lagrangian bound of that relaxation (``max_λ min over mode sequences of λ · busy``; the relaxation the
    search builds to guide its least-period pass, :class:`.relaxation.Relaxed`);
  - the stage-cut DP of :mod:`.reuse_bound` (``reuse-lagrangian``, ``reuse-dp``): stages over block ranges
    whose states keep the PUs each live tensor may sit on, so it charges the hand-offs of edges that skip a
    stage (a residual's shortcut), which the per-block relaxation cannot see. It runs first, within
    :data:`REUSE_SHARE` of the budget, where the bounds above leave the best period more than
    :data:`CERTIFIED_GAP` above them and the other space's bound does not; then the per-block relaxation's
    min-max DP gets what remains (only :data:`PROOF_ONLY_WORK` where the gap is certified already, or where
    the other space's bound keeps it out of reach).

  With replicated stages in the space (``replicated=True``, the default) the bound is the lesser of that one
  (the **reuse** space: no replicated stage, PUs may serve several stages) and the bound of the **replicated**
  space (each PU serves one stage, a stage may be replicated: :mod:`.replicate`, and the disjoint-group space
  too), the largest of: the slowest block replicated over every PU that runs it, ``max_v 1 / Σ_p 1/t[v, p]``
  (a fraction ``x_p`` of the frames runs ``v`` on ``p``, ``Σ x_p = 1``, and ``x_p t[v, p] <= busy_p <= P``);
  the LP (valid for them too: ``x_bp`` is then the share of frames that run ``b`` on ``p``); the stage DP of
  :mod:`.stage_bound` (an exact DP over stage cuts and disjoint PU sets, each stage's contribution bounded from
  its replicas' hand-offs and work; given the best period found, the second stage's input weighed by the first
  stage's frame shares); and, on small problems, the relaxation with replicated-stage modes
  (:mod:`.relaxation`, which holds even where PUs repeat across replicated stages).

  When it reaches the best period a search found (within :data:`PROOF_RTOL`), that period is **proved optimal**:
  no mapping of the searched spaces is faster. :meth:`Bounds.info` records which bound certified what.

  Operating points: every bound is taken on :func:`fastest_problem` (each block at its fastest point; switching
  costs only add time), so it holds for every point.
* **Latency**: critical path with every block on its fastest PU and free transfers.

**Pipeline terms** (``dispatch``: per PU-set bit mask ``S``, the ``d_S`` = ``dispatch_s`` + the largest
``invoke_s`` of ``S`` a stage on exactly the PUs ``S`` adds, :func:`dispatch_table`): every bound above adds what
every stage pays (the block bound: ``d_{p}`` to ``t[v, p]``; the stage DP and the relaxations: ``d_S`` per stage,
:mod:`.stage_bound`, :mod:`.relaxation`; the latency: the least ``d_{p}``). Taken on the ``κ``-scaled problem
(:func:`parapipe.cost.pipeline_terms.search_problems`) they bound the full model of
:mod:`parapipe.cost.pipeline_terms`: the hand-off ``h``, sharing ``ψ`` and contention ``γ`` only add time.

Stage-level measurements (``MappingProblem.submodel_time_s``) may make a stage faster than its blocks' sum; every
bound is then taken on :func:`optimistic_problem`, whose block times are scaled down as far as any measured
sub-model that contains them (a measured sub-model's blocks take ``t[v, p] · measured / block sum``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..cost.problem import MappingProblem
from .budget import RELAX_WORK_PER_S, Budget

__all__ = ["BOUND_COVERS", "PROOF_RTOL", "CERTIFIED_GAP", "PROOF_ONLY_WORK", "REUSE_SHARE",
           "REPLICATED_RELAXATION_MAX_CELLS", "Bounds", "lp_period_bound", "fastest_problem", "optimistic_problem",
           "dispatch_table", "latency_lower_bound", "block_period_bound", "reuse_space_bound", "lower_bounds"]

PROOF_RTOL = 1e-9
"""Relative tolerance of "proved optimal": the bound is at least ``(1 - PROOF_RTOL) ×`` the best period found
(the same sums taken in another order differ in the last bits)."""


CERTIFIED_GAP = 0.10
"""Gap (best period / bound - 1) the project's target certifies. Once the cheap bounds (block, LP, Lagrangian,
stage DP) certify it, the min-max relaxed DP, which may still prove the best period optimal, gets only
:data:`PROOF_ONLY_WORK` of the budget; so it does where the other space's bound is more than this gap below the
best period (the DP could raise this space's bound no higher than that one, which cannot certify)."""

PROOF_ONLY_WORK = 0.05 * RELAX_WORK_PER_S
"""Work (units of :data:`parapipe.search.budget.RELAX_WORK_PER_S`: 0.05 deterministic s) of a proof attempt when
the gap is already certified (:data:`CERTIFIED_GAP`), or out of reach of the min-max DP. Measured on the zoo ×
A311D/A1000 (``python benchmarks/search_bench.py``): with the whole budget the DP took 0.4-1 s of CPU to prove
DenseNet-121 optimal on the A1000, where the Lagrangian bound already certified a 1.7 % gap. Out of reach, on the
zoo × the six bundled profiles (``search`` in one process, CPU seconds): inception_v2 0.68 s less on the A311D and
0.47 s less on the RK3588, inception_v1 on the A311D 0.23 s less; one reported bound changed, inception_v2 on the
RK3588, 6.94 → 6.82 ms (gap 24.6 → 26.9 %, uncertified either way)."""

REUSE_SHARE = 0.8
"""Share of what remains of the bound budget the stage-cut DP of :mod:`.reuse_bound` may spend on the PU-reuse
space before the per-block relaxation's min-max DP gets the rest. Measured on the zoo × bundled profiles (``python
benchmarks/search_bench.py``; the DP's work with ``time.process_time`` around it): where it certifies a 10 % gap
the other bounds do not, it spent 0.3-0.45 deterministic s of the 0.6 s default budget
(:class:`parapipe.search.options.SearchOptions` ``bound_time_limit_s``); where its graph would not fit, its build
stops early (:data:`parapipe.search.reuse_bound.PROJECT_FROM`) and leaves the rest to the relaxation, which
certified Inception-v1 on the A311D profile with it."""

REPLICATED_RELAXATION_MAX_CELLS = 32
"""Largest problem (blocks × PUs) on which the relaxation with replicated-stage modes runs. Measured on the zoo
(8 models × A311D/A1000, 48 blocks): given 5 s it never rose above the LP bound, while it took the whole bound
budget; on small problems it does (forced hand-offs) and is fast. Re-measure with
``python benchmarks/search_bench.py``, which prints each model's bound, the bound's method and the search time."""


#: What a period bound speaks for (pareto.json ``search.bound.covers``): the spaces the search covers.
BOUND_COVERS = ("mappings without replicated stages, and mappings in which each PU serves one stage (replicated "
                "stages included); a replicated mapping whose PUs also serve other stages is neither searched nor "
                "bounded")


@dataclass
class Bounds:
    """``period_s >= period_lb_s`` and ``latency_s >= latency_lb_s`` for every mapping of the problem.

    ``period_method``: which bound is the largest (``block``, ``lp``, ``lagrangian``, ``relaxed-dp``,
    ``reuse-lagrangian``, ``reuse-dp`` or ``stage-dp``, with `` (replicated)`` when the replicated space's bound is
    the lesser); ``period_proved_optimal``: the best period found reaches the bound (``period_lb_s`` is then that
    period); ``note``: why the relaxed DP bound is missing, if it is.
    """

    period_lb_s: float
    latency_lb_s: float
    period_method: str = "lp"
    period_proved_optimal: bool = False
    note: str = ""
    spaces: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    def info(self) -> Dict[str, Any]:
        """The bound's provenance for pareto.json ``search.bound``: ``period_method`` (the bound that certifies
        ``period_lb_s``), ``period_lb_s``, ``period_proved_optimal``, ``covers`` (:data:`BOUND_COVERS`: the
        mappings the bound, and so "proved optimal", speaks for), ``note`` (when there is one) and ``spaces``:
        per space bounded (``reuse``: mappings without replicated stages; ``replicated``: mappings in which each
        PU serves one stage, replicated stages included), its ``method``, ``period_lb_s`` and whether its own
        min-max DP ``proved`` the best period optimal; the period bound is the least of them."""
        out: Dict[str, Any] = {"period_method": self.period_method, "period_lb_s": float(self.period_lb_s),
                               "period_proved_optimal": self.period_proved_optimal, "covers": BOUND_COVERS}
        if self.note:
            out["note"] = self.note
        if self.spaces:
            out["spaces"] = {k: dict(v) for k, v in self.spaces.items()}
        return out


def lp_period_bound(problem: MappingProblem) -> float:
    """The LP load-balance bound (module docstring), seconds."""
    from ortools.linear_solver import pywraplp

    t = problem.time_s
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
    return float(balance) * (1 - 1e-9)  # GLOP's tolerance must not lift it above the true optimum


def fastest_problem(problem: MappingProblem) -> MappingProblem:
    """``problem`` with each block's time on each PU at its fastest operating point (the least over the PU's
    table; the problem itself when that is the highest point everywhere, as the frequency models of
    :mod:`parapipe.soc.operating_points` give). Every stage runs its PUs at some point and a switch between points
    only adds time, so bounds on it hold for every operating point; it has no operating points of its own."""
    if problem.operating_points is None:
        return problem
    fastest = problem.time_s.copy()
    for p, table in enumerate(problem.operating_points):
        if table is not None:
            times = np.where(np.isnan(table.time_s), np.inf, table.time_s)  # NaN: a point without a time
            fastest[:, p] = np.minimum(fastest[:, p], np.min(times, axis=1))
    if (fastest >= problem.time_s).all():
        return problem
    import copy

    out = copy.copy(problem)
    out.time_s = fastest
    out.operating_points = None
    out._rows = None
    out._at_ops = {}
    if problem.submodel_time_s:  # a measured sub-model scales with its blocks' sum, as at_operating_points does
        sub = {}
        for (p, blocks), t in problem.submodel_time_s.items():
            rows = list(blocks)
            base = float(problem.time_s[rows, p].sum())
            sub[(p, blocks)] = t * (float(fastest[rows, p].sum()) / base if base > 0 else 1.0)
        out.submodel_time_s = sub
    return out


def optimistic_problem(problem: MappingProblem) -> MappingProblem:
    """``problem`` with ``t[v, p]`` scaled by the least ``measured / block sum`` ratio (at most 1) over the
    measured sub-models on ``p`` that contain ``v``: no mapping runs a block faster, so bounds on it hold for
    ``problem`` (the problem itself when it has no sub-model faster than its block sum)."""
    if not problem.submodel_time_s:
        return problem
    scale = np.ones_like(problem.time_s)
    for (p, blocks), t in problem.submodel_time_s.items():
        rows = list(blocks)
        block_sum = float(problem.time_s[rows, p].sum())
        if block_sum > 0 and np.isfinite(block_sum) and t < block_sum:
            scale[rows, p] = np.minimum(scale[rows, p], t / block_sum)
    if (scale == 1.0).all():
        return problem
    import copy

    out = copy.copy(problem)
    out.time_s = problem.time_s * scale
    out.submodel_time_s = None
    out._rows = None
    return out


def dispatch_table(pu_names, terms) -> Optional[np.ndarray]:
    """Per PU-set bit mask ``S`` (index ``1 .. 2^k - 1``; 0 at index 0), the ``d_S`` a stage on exactly the PUs
    ``S`` pays per inference (:meth:`parapipe.cost.pipeline_terms.PipelineTerms.stage_dispatch_s`), seconds;
    None without terms or when every ``d_S`` is 0."""
    if terms is None:
        return None
    k = len(pu_names)
    out = np.zeros(1 << k)
    for mask in range(1, 1 << k):
        out[mask] = terms.stage_dispatch_s(pu_names, [p for p in range(k) if mask >> p & 1])
    return out if out.any() else None


def _per_pu(dispatch: Optional[np.ndarray], k: int) -> np.ndarray:
    """``d_{p}`` per PU (zeros without ``dispatch``)."""
    return np.zeros(k) if dispatch is None else np.array([dispatch[1 << p] for p in range(k)])


def latency_lower_bound(problem: MappingProblem, dispatch: Optional[np.ndarray] = None) -> float:
    """Critical path with every block on its fastest PU and free transfers, plus the least ``d_{p}`` (one stage
    at least), seconds."""
    fastest = np.min(problem.time_s, axis=1)
    finish = np.zeros(problem.n_blocks)
    for v in range(problem.n_blocks):
        ready = max((finish[u] for u in problem.preds[v]), default=0.0)
        finish[v] = ready + fastest[v]
    return (float(finish.max()) if len(finish) else 0.0) + float(_per_pu(dispatch, problem.n_pus).min())


def block_period_bound(problem: MappingProblem, replicated: bool = True,
                       dispatch: Optional[np.ndarray] = None) -> float:
    """The block bound (module docstring), seconds: ``max_v min_p t[v, p] + d_{p}``, or ``max_v 1 / Σ_p 1/(t[v, p]
    + d_{p})`` when a block may be replicated (the stage or replica that runs ``v`` on ``p`` pays at least
    ``d_{p}``)."""
    t = problem.time_s + _per_pu(dispatch, problem.n_pus)[None, :]
    if not replicated:
        return float(np.min(t, axis=1).max())
    return float((1.0 / np.sum(1.0 / t, axis=1)).max())


def lower_bounds(problem: MappingProblem, best_period_s: Optional[float] = None,
                 time_limit_s: Optional[float] = 5.0, relaxed=None, replicated: bool = True,
                 budget: Optional[Budget] = None, dispatch: Optional[np.ndarray] = None,
                 reuse: Optional[Tuple[float, bool, str]] = None) -> Bounds:
    """Both bounds (module docstring).

    With ``replicated`` the period bound is the lesser of two: the bound of the PU-reuse space (mappings without
    replicated stages: block, LP, the plain relaxation's Lagrangian and min-max DP) and the bound of the spaces
    in which each PU serves one stage, replicated stages included (``max_v 1 / Σ_p 1/t[v, p]``, LP, the stage DP
    of :mod:`.stage_bound` and, on problems of at most :data:`REPLICATED_RELAXATION_MAX_CELLS` blocks × PUs, the
    relaxation with replicated-stage modes). The second is computed first: the min-max DP of the first runs only
    up to it, within what remains of ``time_limit_s``.

    Parameters
    ----------
    problem : MappingProblem
    best_period_s : float, optional
        Best period a search found, seconds: the relaxed DP prunes at it and proves it optimal if it can.
    time_limit_s : float or None
        Budget of the relaxed DPs in deterministic seconds (counted work at
        :data:`parapipe.search.budget.RELAX_WORK_PER_S`; None: unbounded); past it the other bounds stand.
    budget : parapipe.search.budget.Budget, optional
        The budget itself (what remains of the search's bound budget), instead of ``time_limit_s``.
    relaxed : parapipe.search.relaxation.Relaxed, optional
        The plain relaxation already built by the search on this ``problem`` (its Lagrangian bound is reused;
        dropped when stage-level times make the bounds take :func:`optimistic_problem` of it).
    replicated : bool
        Bound the searched space including replicated stages (True), or only mappings without them (False).
    dispatch : ndarray, optional
        :func:`dispatch_table` of the pipeline terms (module docstring); None: the plain model. ``relaxed``
        must have been built with the same table.
    reuse : tuple, optional
        :func:`reuse_space_bound` already taken on ``problem`` with the same ``dispatch`` (dropped, like
        ``relaxed``, when stage-level times or operating points make the bounds take another problem).
    """
    if budget is None:
        budget = Budget.of_seconds(time_limit_s, RELAX_WORK_PER_S)
    if relaxed is not None and getattr(relaxed, "replicated", False):
        relaxed = None
    bound_problem = optimistic_problem(fastest_problem(problem))
    if bound_problem is not problem:  # a relaxation built on ``problem`` itself would not bound faster times
        problem, relaxed, reuse = bound_problem, None, None
    from .stage_bound import MAX_PUS as STAGE_MAX_PUS, stage_run_bounds

    runs = stage_run_bounds(problem) if problem.n_pus <= STAGE_MAX_PUS else None
    rep = None
    if replicated:
        small = problem.n_blocks * problem.n_pus <= REPLICATED_RELAXATION_MAX_CELLS
        rep = _space_bound(problem, best_period_s, budget, None, replicated=True, relax=small, dispatch=dispatch,
                           runs=runs)
    plain = _space_bound(problem, best_period_s, budget, relaxed, replicated=False,
                         stop_s=np.inf if rep is None else rep[1], dispatch=dispatch, runs=runs, reuse=reuse)
    spaces = {"reuse": _space_info(plain)}
    if rep is not None:
        spaces["replicated"] = _space_info(rep)
        if rep[1] < plain[1]:
            method, lb, proved, note = rep
            note = note or "a mapping with replicated stages may be faster than the PU-reuse space's bound"
            return _finish(problem, best_period_s, f"{method} (replicated)", lb, proved, note, spaces, dispatch)
    method, lb, proved, note = plain
    return _finish(problem, best_period_s, method, lb, proved, note, spaces, dispatch)


def _space_info(bound) -> Dict[str, Any]:
    method, lb, proved, _ = bound
    return {"method": method, "period_lb_s": float(lb), "proved": bool(proved)}


def reuse_space_bound(problem: MappingProblem, best_period_s: float, floor_s: float, budget: Budget,
                      relaxed=None, dispatch: Optional[np.ndarray] = None, stop_s: float = np.inf,
                      runs: Optional[Dict[int, np.ndarray]] = None) -> Optional[Tuple[float, bool, str]]:
    """The stage-cut DP's bound on the PU-reuse space (:func:`parapipe.search.reuse_bound.reuse_period_bound`:
    ``(bound_s, proved, method)``, method ``""`` when it did no better than ``floor_s``) within
    :data:`REUSE_SHARE` of what remains of ``budget``, guided by ``relaxed`` (the plain
    :class:`parapipe.search.relaxation.Relaxed` of ``problem``, or None); None where it does not run: more PUs
    than it handles, ``floor_s`` already within :data:`CERTIFIED_GAP` of ``best_period_s``, ``stop_s`` (the other
    space's bound) keeping the gap out of reach, or no budget left. A bound whatever the best period found
    later: the search takes it before its least-period pass (skipped where it certifies the gap) and hands it to
    :func:`lower_bounds`."""
    from .reuse_bound import MAX_PUS as REUSE_MAX_PUS, reuse_period_bound

    if (problem.n_pus > REUSE_MAX_PUS or floor_s * (1 + CERTIFIED_GAP) >= best_period_s
            or stop_s * (1 + CERTIFIED_GAP) < best_period_s or budget.over() is not None):
        return None
    limit = budget.limit
    if limit is not None:
        budget.limit = budget.used + REUSE_SHARE * (limit - budget.used)
    try:
        return reuse_period_bound(problem, best_period_s, floor_s, budget, dispatch, CERTIFIED_GAP, PROOF_RTOL,
                                  relaxed.guide() if relaxed is not None else None, stop_s, runs)
    finally:
        budget.limit = limit


def _space_bound(problem: MappingProblem, best_period_s: Optional[float], budget: Budget, relaxed,
                 replicated: bool, stop_s: float = np.inf, relax: bool = True,
                 dispatch: Optional[np.ndarray] = None, runs: Optional[Dict[int, np.ndarray]] = None,
                 reuse: Optional[Tuple[float, bool, str]] = None):
    """(method, bound_s, proved, note) over the mappings without replicated stages (``replicated=False``: PUs
    may serve several stages) or over those in which each PU serves one stage (``replicated=True``, replicated
    stages included); the relaxed min-max DP runs (if ``relax``) only while the other bounds stay below
    ``stop_s`` (no need beyond). ``runs``: :func:`parapipe.search.stage_bound.stage_run_bounds` of ``problem``
    (shared by the stage DPs of both spaces), or None; ``reuse``: :func:`reuse_space_bound` already taken on
    ``problem`` (then not run again)."""
    from .relaxation import relaxed_period_bound

    candidates = {"block": block_period_bound(problem, replicated, dispatch), "lp": lp_period_bound(problem)}
    note, proved = "", False
    if replicated:
        from .stage_bound import stage_period_bound

        try:
            candidates["stage-dp"] = stage_period_bound(problem, dispatch, best_period_s, runs)
        except ValueError as exc:
            note = str(exc)
    elif relaxed is not None:
        candidates["lagrangian"] = float(relaxed.bound_s)
    floor = max(candidates.values())
    if not replicated and best_period_s is not None:
        # the stage-cut DP that counts skip edges' hand-offs (:mod:`.reuse_bound`), within a share of the budget,
        # where the bounds so far do not certify the target gap and the other space's bound does not keep it out
        # of reach (the relaxation's min-max DP below makes a short proof attempt once it is certified)
        got = reuse if reuse is not None else reuse_space_bound(problem, best_period_s, floor, budget, relaxed,
                                                                dispatch, stop_s, runs)
        if got is not None and got[2]:
            lb, _, how = got
            candidates[how] = lb
            proved = lb >= best_period_s * (1 - PROOF_RTOL) and stop_s >= best_period_s
        floor = max(candidates.values())
    if (relax and not proved and best_period_s is not None and floor < min(stop_s, best_period_s)
            and budget.over() is None):
        top = min(best_period_s, stop_s)
        limit = budget.limit
        if limit is not None and (min(floor, stop_s) * (1 + CERTIFIED_GAP) >= best_period_s
                                  or stop_s * (1 + CERTIFIED_GAP) < best_period_s):
            # the gap is certified, or the other space's bound keeps it out of reach: a short attempt only
            budget.limit = min(limit, budget.used + PROOF_ONLY_WORK)
        try:
            candidates["relaxed-dp"], proved = relaxed_period_bound(
                problem, top, floor, budget=budget, rtol=PROOF_RTOL, relaxed=relaxed, replicated=replicated,
                dispatch=dispatch, certify_gap=CERTIFIED_GAP)
            proved = proved and top >= best_period_s
        except ValueError as exc:
            note = str(exc)
        finally:
            budget.limit = limit
    method = max(candidates, key=lambda m: candidates[m])
    return method, candidates[method], proved, note


def _finish(problem: MappingProblem, best_period_s: Optional[float], method: str, lb: float, proved: bool,
            note: str, spaces: Optional[Dict[str, Dict[str, Any]]] = None,
            dispatch: Optional[np.ndarray] = None) -> Bounds:
    proved = proved or (best_period_s is not None and lb >= best_period_s * (1 - PROOF_RTOL))
    if proved and best_period_s is not None:
        lb = best_period_s
    return Bounds(lb, latency_lower_bound(problem, dispatch), method, proved, note, dict(spaces or {}))
