"""The search driver: parapipe front, baselines, CP-SAT polish, bounds — one call, one result.

``search(problem, options)`` runs the DP passes of :mod:`.passes` (hierarchical mappings with disjoint PU groups,
the pure-pipeline baseline, hierarchical mappings in which PUs serve several stages, and hierarchical mappings
with replicated stages) over one shared stage catalogue, polishes the multi-PU stages of front mappings with
CP-SAT (:mod:`.polish`), adds the other baselines
(:mod:`.baselines`; they lie in the search space, so they are also offered to the parapipe front), evaluates every
mapping exactly with :func:`parapipe.cost.evaluate.evaluate`, flags the points that are non-dominated among all,
and bounds the period (:mod:`.bounds`). Where the best period found is more than ``period_gap`` above the
relaxation's Lagrangian bound, it adds the pipelines of single-PU stages read off that relaxation
(:mod:`.relaxed_sequences`), takes the stage-cut DP's bound of the PU-reuse space
(:func:`.bounds.reuse_space_bound`), and, where the best period is still more than ``period_gap`` above both,
runs the least-period pass (:func:`.passes.period_pass`) below the best period so far. These take the best period
found before the CP-SAT polish as their reference (the polish re-schedules blocks inside multi-PU stages; on the
zoo models × bundled profiles it never lowered the best period), so that where :func:`.passes.pass_workers` gives
two processes or more, a forked worker (:mod:`.parallel`) polishes while this process bounds.

**Exactness.** Up to :data:`parapipe.search.options.EXACT_MAX_CELLS` blocks × PUs (e.g. 8 blocks on 4 PUs, 10 on
3, 16 on 2) the front is the exact Pareto front of the union of the spaces searched: pure pipelines in which PUs
may repeat, and hierarchical mappings (contiguous stages, each on one PU or on a PU group list-scheduled by :mod:`.listsched`,
PUs disjoint or shared between stages), hierarchical mappings with replicated stages (:mod:`.replicate`: a stage
run whole by >= 2 replicas — PUs or list-scheduled PU groups — on disjoint PUs, frames dealt in proportion to
speed; PUs disjoint between stages), plus CP-SAT-polished versions of their multi-PU stages. Above it the
passes are bounded (label grid, label cap, stage boundaries at narrow cuts, work budgets) and
``SearchResult.info["spaces"]`` says, per space, whether it was still exact and what bounded it; the polish
solves candidates most promising first and stops where it stops helping (``polish_patience``;
``info["cpsat"]`` says whether it did).

**Determinism.** Every budget is counted work (:mod:`.budget`: DP label candidates and transitions, relaxation
label rows, CP-SAT deterministic time with one worker), set in deterministic seconds by the ``*_time_limit_s``
options, so the same problem, options and seed give the same result whatever the machine's load. Wall-clock
limits (``wall_safety_factor`` × each budget + :data:`parapipe.search.budget.SAFETY_FLOOR_S`) are a safety net:
when one stops a pass, ``SearchResult.info["stopped_early"]`` lists where (the result may then differ on a rerun).

**Memory.** Mappings that do not fit ``MappingProblem.memory_bytes`` (``Evaluation.fits_memory``) are dropped
from the parapipe front (kept, with a warning, only if no candidate fits); the replicated pass never places a
run that exceeds a limit, so its front is exact over the mappings that fit.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..cost.evaluate import evaluate
from ..cost.mapping import Mapping, StageMapping
from ..cost.schedule import Evaluation
from ..cost.problem import MappingProblem
from ..cost.replicated_baseline import replicated_mappings
from ..errors import InfeasibleError
from .baselines import missing_single_pu, parallel_mappings, single_pu_mappings
from .bounds import PROOF_RTOL, Bounds, dispatch_table, lower_bounds, optimistic_problem, reuse_space_bound
from .dvfs import resolve_operating_points
from .budget import RELAX_WORK_PER_S, WALL, Budget
from .cpsat import TIME_UNIT_S
from .options import SearchOptions
from .op_variants import baselines_at_ops, governors, retimed
from .pareto import pareto_mask
from .passes import pass_workers, period_pass, run_passes
from .polish import Polisher, stage_kinds
from .points import OBJECTIVE_DIGITS, SearchPoint, SearchResult, objective_matrix
from .relaxed_sequences import relaxed_sequence_mappings
from .replicate import whole_model_group_replicas
from .transitions import StageCatalog

__all__ = ["SearchPoint", "SearchResult", "OBJECTIVE_DIGITS", "merge_same_pu_stages", "search"]

log = logging.getLogger(__name__)

def merge_same_pu_stages(mapping: Mapping) -> Mapping:
    """Merge consecutive single-PU stages on the same PU at the same operating point (never worse: no hand-off,
    same busy time, less latency); replicated stages are left as they are."""
    out: List[StageMapping] = []
    for st in mapping.stages:
        prev = out[-1] if out else None
        if (prev is not None and len(prev.pus) == 1 and prev.pus == st.pus and not prev.replicas
                and not st.replicas and prev.ops == st.ops):
            out[-1] = StageMapping(prev.start, st.stop, prev.pus, prev.assignment + st.assignment, ops=st.ops)
        else:
            out.append(st)
    return Mapping(tuple(out))



class _Evaluations:
    """:func:`parapipe.cost.evaluate.evaluate` of one problem, memoised per (mapping, terms): the passes, their
    CP-SAT polish, the baselines and the re-timed variants offer the same mappings several times (evaluations
    are never changed after they are made, so one object serves every point of a mapping)."""

    def __init__(self, problem: MappingProblem):
        self.problem = problem
        self._memo: Dict[Tuple[Mapping, int], Evaluation] = {}

    def __call__(self, problem: MappingProblem, mapping: Mapping, terms=None) -> Evaluation:
        if problem is not self.problem:
            return evaluate(problem, mapping, terms)
        key = (mapping, id(terms))
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = evaluate(problem, mapping, terms)
        return got


def _relaxation(problem: MappingProblem, best_period_s: float, budget: Budget, dispatch=None):
    """The relaxation without replicated-stage modes (:class:`parapipe.search.relaxation.Relaxed`: mappings
    without replicated stages, which is the space the least-period pass searches) with the pipeline terms'
    ``dispatch`` table, or None beyond its PU count. It guides that pass and gives the bound of its space;
    :func:`parapipe.search.bounds.lower_bounds` adds the replicated space's."""
    from .relaxation import MAX_PUS, Relaxed

    if problem.n_pus > MAX_PUS:
        return None
    return Relaxed(problem, best_period_s * (1 - PROOF_RTOL), budget, dispatch=dispatch)


BOUND_MODEL_FULL = ("full: the pipeline terms' slowdown scales every time and every stage or replica pays its "
                    "dispatch and invocation; hand-off, sharing and contention only add time")
"""pareto.json ``search.bound.model`` of a search with pipeline terms (``plain`` without)."""


def _overlap_factor(terms) -> float:
    """``1 - max φ_p``: with overlap a PU's busy time is at least this share of the sum of its stage times
    (:mod:`parapipe.cost.pipeline_terms`, step 3), so a bound on that sum times it bounds the period."""
    return 1.0 - max((float(v) for v in terms.overlap.values()), default=0.0) if terms is not None else 1.0


def _bounds_with_overlap(summed: Bounds, factor: float, best_period_s: float) -> Bounds:
    """Bounds on the sum of each PU's stage times carried to the period with overlap (``factor`` = ``1 - max
    φ``); proved optimal only when the best period found reaches the carried bound."""
    lb = summed.period_lb_s * factor
    proved = lb >= best_period_s * (1 - PROOF_RTOL)
    note = "; ".join(filter(None, [summed.note, f"bounds x (1 - the largest overlap term) = {factor:.4g}"]))
    spaces = {name: {**sp, "period_lb_s": sp["period_lb_s"] * factor} for name, sp in summed.spaces.items()}
    return Bounds(best_period_s if proved else lb, summed.latency_lb_s, summed.period_method, proved, note, spaces)


def _polish_candidates(polisher: Polisher, cands: List[SearchPoint], todo: List[int], objectives: Sequence[str],
                       patience: int, patience_s: float, evaluate: Callable[[Mapping], Evaluation],
                       period_s: Callable[[SearchPoint], float]) -> Dict[int, SearchPoint]:
    """CP-SAT-polished versions of the candidates at positions ``todo`` of ``cands``, by position.

    The candidates are polished in order of promise: by how far the front of ``cands`` (those that fit memory)
    dominates them, the relative margin ``max_f min_k (1 - f_k / c_k)`` (0 for a candidate on that front), ties
    in their order. A polished mapping *helps* when no candidate so far weakly dominates it on ``objectives``
    (the full model's, as the front is judged) or its period is the least so far (the bound's reference). After ``patience`` CP-SAT solves in a row that helped nothing (0: no such limit), or once such
    solves in a row spent ``patience_s`` of the polish budget (deterministic seconds, :class:`Polisher`; 0: no
    such limit), no further stage is solved: the remaining candidates get the schedules already solved
    (:meth:`Polisher.polish` ``solve=False``). Counted in solves and deterministic time: deterministic.

    Measured on the zoo models x bundled profiles (``python benchmarks/search_bench.py``): the polished points
    that reach the front come from candidates on, or within 1 % of, the unpolished front, and their solves come
    early in this order (at most 6 solves, 0.62 deterministic s, in a row helped nothing before one that
    helped: ResNet-50 on the A311D); the profiles whose pipeline terms penalise cross-PU hand-offs gain nothing
    from CP-SAT (it schedules without the hand-off term), which the patience cuts short.
    """
    known = [p for p in cands if p.evaluation.fits_memory] or cands
    mat = objective_matrix(known, objectives)
    front = mat[pareto_mask(mat)]
    rows = objective_matrix([cands[i] for i in todo], objectives)
    tiny = np.finfo(float).tiny
    margins = [float(np.max(np.min(1.0 - front / np.maximum(r, tiny), axis=1))) for r in rows]
    best_period = min(period_s(p) for p in cands)
    out: Dict[int, SearchPoint] = {}
    streak, streak_s = 0, 0.0
    for t in sorted(range(len(todo)), key=lambda t: (margins[t], t)):
        pos = todo[t]
        before, spent = polisher.n_solves, polisher.spent_s
        solve = (patience <= 0 or streak < patience) and (patience_s <= 0 or streak_s < patience_s)
        pm, pk = polisher.polish(cands[pos].mapping, solve=solve)
        p = out[pos] = SearchPoint("", "parapipe", pm, evaluate(pm), pk, origin="cp-sat")
        period = period_s(p)
        row = objective_matrix([p], objectives)[0]
        helps = period < best_period or ((p.evaluation.fits_memory or not known[0].evaluation.fits_memory)
                                       and not bool(np.any(np.all(front <= row, axis=1))))
        best_period = min(best_period, period)
        if helps:
            front = np.vstack([front[~np.all(row <= front, axis=1)], row[None, :]])
        if polisher.n_solves > before:
            streak = 0 if helps else streak + polisher.n_solves - before
            streak_s = 0.0 if helps else streak_s + polisher.spent_s - spent
        log.debug("polish candidate %d (margin %.4f): %d solve(s), %.4f s, helps %s", pos, margins[t],
                  polisher.n_solves - before, polisher.spent_s - spent, helps)
    polisher.patience_stop = streak >= patience > 0 or streak_s >= patience_s > 0
    return out


def search(problem: MappingProblem, options: Optional[SearchOptions] = None,
           progress: Optional[Callable[[int], None]] = None, terms=None) -> SearchResult:
    """Search hierarchical mappings of ``problem`` and return the front next to the baselines.

    ``terms`` (:class:`parapipe.cost.pipeline_terms.PipelineTerms`, optional: a profile's ``pipeline:`` section
    or what ``calibrate --runs`` fitted) are the pipeline-level terms of the cost model; ``info["cost_terms"]``
    records them. Every candidate and baseline is evaluated with the full model before the Pareto filter. The DP
    passes rank candidates with the terms' slowdown, hand-off, dispatch and invocation costs in their stage times (:class:`parapipe.search.transitions.StageCatalog`: the
    full model exactly when sharing, contention and overlap are 0), and the bounds are of the full model (every
    stage pays its dispatch; with overlap, × ``1 - max φ``).

    Raises
    ------
    parapipe.errors.InfeasibleError
        If no mapping exists on the problem's PUs.
    """
    opts = options or SearchOptions()
    t0 = time.monotonic()
    evaluate = _Evaluations(problem)
    small = problem.n_blocks * problem.n_pus <= opts.exact_max_cells
    op_space = resolve_operating_points(problem, opts.operating_points, small)
    catalog = StageCatalog(problem, op_space.op_sets if op_space.where == "dp" else None, terms)
    labels_problem = catalog.problem  # the problem whose stage times are the full model's (κ-scaled)
    found, spaces, n_states = run_passes(labels_problem, opts, catalog, progress)
    if not found["disjoint"] and not found["reuse"] and not found["replicated"]:
        raise InfeasibleError(f"{problem.name}: no mapping exists on PUs {', '.join(problem.pu_names)}: some block "
                              "cannot run on any of them; allow a PU that supports it (--pus)")
    t_dp = time.monotonic() - t0
    polisher = Polisher(problem, opts.cpsat_max_blocks, opts.cpsat_stage_limit_s, opts.time_limit_s, opts.seed)
    # up to exact_max_cells every DP candidate is polished (module docstring); above, the polish stops where it
    # stops helping
    patience = (0, 0.0) if small else (opts.polish_patience, opts.polish_patience_s)

    points: List[SearchPoint] = []
    baseline = [("single", f"single-{name}", m) for name, m in single_pu_mappings(problem)]
    baseline += [("pipeline", f"pipeline-{i}", m) for i, m in enumerate(found["pipeline"])]
    baseline += [("parallel", f"parallel-{i}", m) for i, m in enumerate(parallel_mappings(problem))]
    baseline += [("replicated", f"replicated-{i}", m) for i, (m, _) in enumerate(replicated_mappings(problem))]
    for strategy, pid, m in baseline:
        p = SearchPoint(pid, strategy, m, evaluate(problem, m, terms), stage_kinds(m))
        if strategy == "parallel" and opts.polish and polisher.wants(m):
            pm, pk = polisher.polish(m)
            polished = SearchPoint(pid, strategy, pm, evaluate(problem, pm, terms), pk)
            if polished.objectives() <= p.objectives():  # CP-SAT's rounded ticks may favour a worse schedule
                p = polished
        points.append(p)
    retime_cache: dict = {}
    if op_space.op_sets is not None:  # every baseline at its own best operating points
        points = baselines_at_ops(problem, points, op_space, terms, retime_cache, opts.objectives, evaluate)
    # Parapipe candidates: the DP fronts, their CP-SAT polished versions, and every baseline (all in the space).
    cand_points: List[SearchPoint] = []
    to_polish: List[int] = []  # positions in cand_points of the DP candidates with stages to polish
    for origin in ("disjoint", "reuse", "replicated"):
        for m in found[origin]:
            m = merge_same_pu_stages(m)
            cand_points.append(SearchPoint("", "parapipe", m, evaluate(problem, m, terms), stage_kinds(m), origin=origin))
            if opts.polish and polisher.wants(m):
                to_polish.append(len(cand_points) - 1)
    if opts.replicate and not small:  # group replicas: beyond the replicated pass's space above the exact size
        for m in whole_model_group_replicas(catalog):
            cand_points.append(SearchPoint("", "parapipe", m, evaluate(problem, m, terms), stage_kinds(m),
                                           origin="replicated"))
    n_dp = len(cand_points)
    for b in points:  # baselines lie in the space (replicated ones only when replicated stages are searched)
        if b.strategy != "replicated" or opts.replicate:
            cand_points.append(SearchPoint("", "parapipe", b.mapping, b.evaluation, b.stage_schedules, origin="baseline"))
    full = terms is not None and not terms.is_default()
    # the bounds are of the full model's period summed over each PU's stages; with overlap a period is at least
    # ``overlap`` × that sum (_overlap_factor), so the sum of the best mapping found is at most best / overlap
    overlap = _overlap_factor(terms)

    def best_period_s(points: Sequence[SearchPoint]) -> float:
        best = min(p.evaluation.period_s for p in points)
        return best / overlap if overlap > 0 else best

    # the bounds' reference: the best period before the polish (module docstring), so that it can run meanwhile
    best_period = best_period_s(cand_points)
    # the bounds' problem: stage-level measurements may beat block sums, so bound (and guide the period pass,
    # which then never prunes a mapping the cost model could still reach) on the optimistic times
    bound_problem = optimistic_problem(labels_problem)
    dispatch = dispatch_table(problem.pu_names, terms)
    bound_budget = Budget.of_seconds(opts.bound_time_limit_s, RELAX_WORK_PER_S, opts.wall_safety_factor)

    def bound_and_period() -> Tuple[Any, Optional[Tuple[float, bool, str]], Optional[Dict[str, Any]],
                                    List[SearchPoint], float]:
        """The relaxation, the stage-cut DP's bound of the PU-reuse space (where it runs), the least-period
        pass's report (pareto.json: search.spaces.period; None where it does not run), the mappings read off
        them, and the seconds taken."""
        t = time.monotonic()
        best, extra, reuse, report = best_period, [], None, None
        relaxed = _relaxation(bound_problem, best, bound_budget, dispatch)
        if relaxed is not None and opts.reuse_pus and best > relaxed.bound_s * (1 + opts.period_gap):
            # pipelines of single-PU stages read off the relaxation (a primal heuristic, module relaxed_sequences):
            # a faster best period also tightens the least-period pass below
            for _, m in relaxed_sequence_mappings(relaxed.dp, best, (relaxed.lam, relaxed.h_probe),
                                                  max_stages=opts.max_stages):
                extra.append(SearchPoint("", "parapipe", m, evaluate(problem, m, terms), stage_kinds(m),
                                         origin="relaxation"))
            if extra:
                best = min(best, best_period_s(extra))
        # where the stage-cut DP's bound of the PU-reuse space certifies the gap, no least-period pass: that pass
        # finds the least period of the PU-reuse space, exactly, guided by the relaxation
        if relaxed is not None and best > relaxed.bound_s * (1 + opts.period_gap):
            reuse = reuse_space_bound(bound_problem, best, relaxed.bound_s, bound_budget, relaxed, dispatch)
            if reuse is None or best > reuse[0] * (1 + opts.period_gap):
                eps = 0.0 if problem.n_blocks * problem.n_pus <= opts.exact_max_cells else opts.period_epsilon
                period_m, report = period_pass(labels_problem, best, catalog, relaxed.guide(),
                                               opts.period_time_limit_s, eps, opts.wall_safety_factor,
                                               max_stages=opts.max_stages)
                if period_m is not None:
                    m = merge_same_pu_stages(period_m)
                    extra.append(SearchPoint("", "parapipe", m, evaluate(problem, m, terms), stage_kinds(m),
                                             origin="period"))
        return relaxed, reuse, report, extra, time.monotonic() - t

    def polish() -> Tuple[Dict[int, SearchPoint], Dict[str, Any]]:
        got = _polish_candidates(polisher, cand_points, to_polish, opts.objectives, *patience,
                                 lambda m: evaluate(problem, m, terms), lambda p: p.evaluation.period_s)
        return got, polisher.outcome()

    polished_at: Dict[int, SearchPoint] = {}
    if to_polish and pass_workers(problem, opts) >= 2:
        from .parallel import run_in_workers

        relaxed, reuse, period_report, extra, chain_s, forked = run_in_workers({"polish": (polish, ())}, 1,
                                                                                bound_and_period)
        polished_at, outcome = forked["polish"] if "polish" in forked else polish()
        polisher.adopt(outcome)
    else:
        relaxed, reuse, period_report, extra, chain_s = bound_and_period()
        if to_polish:
            polished_at, _ = polish()
    # each polished candidate right after its DP mapping (the order ties are broken in)
    cand_points = [q for i, p in enumerate(cand_points[:n_dp])
                   for q in ((p, polished_at[i]) if i in polished_at else (p,))] + cand_points[n_dp:] + extra
    if op_space.op_sets is not None:  # the governors' points lie in the space too
        govs = governors(problem, cand_points, terms, evaluate)
        points += govs
        cand_points += [SearchPoint("", "parapipe", g.mapping, g.evaluation, g.stage_schedules, origin="baseline")
                        for g in govs]
    if op_space.where == "retime":  # operating points per stage of the highest-point front (module dvfs)
        cand_points += retimed(problem, cand_points, op_space, terms, retime_cache, opts.objectives, evaluate)
    fits = [p for p in cand_points if p.evaluation.fits_memory]
    if fits:
        cand_points = fits
    else:
        log.warning("%s: no mapping found fits the PUs' memory limits; the front shows mappings that do not",
                    problem.name)
    mat = objective_matrix(cand_points, opts.objectives)
    front = [cand_points[i] for i in np.flatnonzero(pareto_mask(mat))]  # equal vectors: the first is kept
    front.sort(key=lambda p: p.objectives())
    for i, p in enumerate(front):
        p.id = f"p{i}"
    all_points = front + points
    objs = [tuple(row) for row in objective_matrix(all_points, opts.objectives)]
    # Equal objective vectors: pareto_mask keeps the first; a baseline equal to a front point is on the front too.
    on_front = {objs[j] for j in np.flatnonzero(pareto_mask(np.array(objs)))}
    for i, p in enumerate(all_points):
        p.pareto = objs[i] in on_front
    t_lb = time.monotonic()
    bounds = lower_bounds(bound_problem, best_period_s=best_period_s(front), relaxed=relaxed,
                          replicated=opts.replicate, budget=bound_budget, dispatch=dispatch, reuse=reuse)
    if overlap < 1.0:
        bounds = _bounds_with_overlap(bounds, overlap, min(p.evaluation.period_s for p in front))
    stats = {"search_s": time.monotonic() - t0, "dp_s": t_dp, "dp_states": n_states,
             "bound_s": chain_s + time.monotonic() - t_lb}
    cells = problem.n_blocks * problem.n_pus
    claimed = ["disjoint", "pipeline"] + (["reuse"] if opts.reuse_pus else []) + (
        ["replicated"] if opts.replicate else [])
    info: Dict[str, Any] = {"exact": all(spaces[s].exact for s in claimed), "exact_max_cells": opts.exact_max_cells,
            "cells": cells, "spaces": {**{name: rep.to_json() for name, rep in spaces.items()},
                                       **({"period": period_report} if period_report is not None else {})},
            "cpsat": {"time_unit_s": TIME_UNIT_S, "rounding": "up", "time_limit_s": opts.time_limit_s,
                      "stage_limit_s": opts.cpsat_stage_limit_s, "max_blocks": opts.cpsat_max_blocks,
                      "limits": "deterministic time", "deterministic_s": round(polisher.spent_s, 6),
                      "solves": polisher.n_solves, "patience": patience[0], "patience_s": patience[1],
                      "patience_stopped": polisher.patience_stop},
            "bound": {**bounds.info(), **bound_budget.to_json(),
                      "model": BOUND_MODEL_FULL if full else "plain"}, "operating_points": op_space.to_json()}
    stopped = [{"space": name, "reason": WALL, "at": rep.skipped} for name, rep in spaces.items()
               if rep.stopped_by == WALL]
    if period_report is not None and period_report.get("stopped_by") == WALL:
        stopped.append({"space": "period", "reason": WALL, "at": period_report.get("skipped", "")})
    if bound_budget.wall_stopped:
        stopped.append({"space": "bound", "reason": WALL, "at": bound_budget.stop_point or "between probes"})
    if polisher.wall_stops:
        stopped.append({"space": "cp-sat", "reason": WALL, "at": "stages " + ", ".join(polisher.wall_stops)})
    if stopped:
        info["stopped_early"] = stopped
        log.warning("%s: a wall-clock safety limit stopped the search early (%s); the front may differ on a rerun",
                    problem.name, "; ".join(f"{s['space']}: {s['at']}" for s in stopped))
    missing = missing_single_pu(problem)
    if missing:
        info["baselines_missing"] = missing
    if full:
        info["cost_terms"] = terms.to_json()
    log.info("search %s: %d blocks x %d PUs, front %d points, %.2fs (DP %.2fs, %d states), exact %s",
             problem.name, problem.n_blocks, problem.n_pus, len(front), stats["search_s"], t_dp, n_states,
             info["exact"])
    return SearchResult(problem=problem, points=all_points, bounds=bounds, objectives=tuple(opts.objectives),
                        stats=stats, info=info)
