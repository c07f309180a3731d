"""The workload search: co-map several models on one SoC, one front (cost model: :mod:`parapipe.cost.workload`).

**Per-model candidates.** Each model's candidate mappings are the points of its single-model search
(:func:`parapipe.search.api.search`: its front, polished and re-timed points and baselines) and, for problems
above :data:`EXACT_CANDIDATE_CELLS`, the single-model DP's fronts for every subset of the PUs at once
(:func:`dp_candidates`: the disjoint-group and PU-reuse passes with final labels kept per PU,
:attr:`parapipe.search.dp.DPOptions.per_pu_front`, so that a model can leave PUs or busy time to the others),
thinned to :data:`MAX_DP_CANDIDATES` each; problems of at most that many blocks x PUs instead add *every*
mapping of the single-model DP's space (every composition of the blocks into contiguous stages x every PU group
per stage, PUs may serve several stages, each stage list-scheduled by
:func:`parapipe.search.listsched.schedule_ranges`). Each candidate is evaluated alone
(:func:`parapipe.cost.evaluate.evaluate` with the terms) and kept when no other candidate of the model is at
least as good in every PU's busy time, the latency and the active energy (the workload's period, latency axis and
energy grow with each of them), and when it meets the model's latency bound. The search's cost is thus one
single-model search per model plus two DP passes with counted-work budgets (:data:`DP_CANDIDATE_S`) and the
combination; ``info["model_search_s"]`` gives the single-model searches' share.

**Combination.** Models are added one at a time: every kept partial combination x every candidate of the next
model, the rate-weighted busy vectors, latency (axis so far) and active energy summed, and the partial
combinations filtered to those non-dominated in (busy per PU, latency, energy) — exact, since the objectives are
monotone in each. At most :data:`MAX_PARTIAL` partial combinations are kept (the lowest-period ones and a spread
of the rest), which is what bounds the combination on large problems (``search.workload.bounded_by`` in
pareto.json). The front of the final combinations on (period, latency axis, energy) is then evaluated with the
full workload model (:func:`parapipe.cost.workload.evaluate_workload`: cross-model contention and sharing) and
filtered again.

**Operating points.** A PU shared by models at different points pays the hand-over switches of
:func:`parapipe.cost.workload.cross_switching_s`; they depend only on each model's first and last point on the
PU (and whether they differ), so candidates and partial combinations are compared only among those equal in
that on the PUs whose switches cost time (:func:`switch_pus`), and the combination adds the switches exactly.
Models within :data:`EXACT_CANDIDATE_CELLS` enumerate every mapping x every operating point the single-model
search would use (at most :data:`EXACT_OP_MAPPINGS`). For the others the per-PU DP candidates are at the highest
points, so a final round (:func:`_retime_round`) re-times each model's mappings of the front's combinations with
:func:`parapipe.search.dvfs.retime`, the shared PUs once free and once per joint point (every model at that one
point), and combines again; it runs on a counted-work budget (:data:`RETIME_ROUND_S`), and pareto.json
``search.workload.operating_point_round`` records what it did.

**Exactness.** The front is the exact front of every combination of every mapping x operating point when: each
model's problem is at most :data:`EXACT_CANDIDATE_CELLS` cells with its mappings x points enumerated (every
point of every table), no partial set was capped, and the terms have no cross-model interaction (no contention
``γ``, sharing ``ψ`` or overlap ``φ``); ``WorkloadResult.info["exact"]`` says so and ``info["bounded_by"]``
lists what bounded it otherwise.

**Bounds.** The workload period is at least each model's single-model period bound x its rate, and at least the
LP of the rate-weighted work of every block of every model spread over the PUs at their times
(:func:`workload_period_lp`), x the terms' slowdown ``κ`` when no PU has an overlap term. The latency axis is at
least the axis of the models' latency bounds.

**Baselines** (offered to the front too): ``separate`` — each model's best-throughput point of its own search,
run together; ``split`` — each model on its own PU subset (disjoint): the splits ranked by the models'
best-throughput candidates on their subsets, the best :data:`SPLIT_SEARCHED` of them searched with the single-model
search on each subset (what ``optimize --pus`` gives), the one of least workload period; ``whole`` — each model unsplit on one PU (PUs may be shared), the assignment of
least workload period.
"""
from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..cost.evaluate import evaluate
from ..cost.mapping import Mapping, StageMapping
from ..cost.pipeline_terms import DEFAULT_TERMS, PipelineTerms
from ..cost.problem import MappingProblem
from ..cost.workload import WorkloadEvaluation, evaluate_workload, workload_latency
from ..errors import InfeasibleError
from .options import SearchOptions
from .api import SearchResult, search
from .bounds import optimistic_problem
from .dvfs import resolve_operating_points
from .pareto import pareto_mask
from .workload_candidates import (DP_CANDIDATE_S, EXACT_CANDIDATE_CELLS, MAX_DP_CANDIDATES, SPLIT_SEARCHED,
                                  Candidates, LatencyBoundError, canonical_ops, count_op_mappings, dp_candidates,
                                  enumerate_mappings, grouped_pareto, model_candidates, remap_mapping, switch_pus,
                                  within_limits)

__all__ = ["EXACT_CANDIDATE_CELLS", "MAX_PARTIAL", "MAX_DP_CANDIDATES", "DP_CANDIDATE_S", "SPLIT_SEARCHED", "dp_candidates",
           "EXACT_OP_MAPPINGS", "RETIME_MAX_COMBINATIONS", "RETIME_ROUND_S", "RETIME_WORK_PER_S", "switch_pus",
           "count_op_mappings", "WorkloadPoint", "WorkloadResult", "workload_search",
           "workload_period_lp", "remap_mapping", "enumerate_mappings", "LatencyBoundError", "within_limits"]

log = logging.getLogger(__name__)

MAX_PARTIAL = 4000
"""Most partial combinations kept between two models (each is a row of busy times; the filter is quadratic in
the worst case)."""


@dataclass
class WorkloadPoint:
    """One workload mapping: a mapping per model (index form over each model's problem) and its evaluation."""

    id: str
    strategy: str  # parapipe | separate | split | whole
    mappings: List[Mapping]
    evaluation: WorkloadEvaluation
    pareto: bool = False
    origin: str = ""

    def objectives(self) -> Tuple[float, float, float]:
        return self.evaluation.objectives()


@dataclass
class WorkloadResult:
    """The front (``parapipe`` points first), the baselines, the bounds and what the search recorded."""

    problems: List[MappingProblem]
    rates: List[float]
    latency_axis: str
    points: List[WorkloadPoint]
    period_lb_s: float
    latency_lb_s: float
    model_results: List[SearchResult]
    info: Dict[str, Any] = field(default_factory=dict)

    def front(self) -> List[WorkloadPoint]:
        return [p for p in self.points if p.strategy == "parapipe"]

    def best(self, objective: str, strategy: Optional[str] = "parapipe") -> WorkloadPoint:
        col = {"throughput": 0, "latency": 1, "energy": 2}[objective]
        pts = [p for p in self.points if strategy is None or p.strategy == strategy]
        return min(pts, key=lambda p: (p.objectives()[col],) + p.objectives())


def workload_period_lp(problems: Sequence[MappingProblem], rates: Sequence[float]) -> float:
    """LP bound on the workload period, s: every block of every model placed fractionally on the PUs that run
    it, at its (optimistic) time x its model's rate; the period is at least the most loaded PU's work."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    k = problems[0].n_pus
    period = solver.NumVar(0, solver.infinity(), "P")
    load: List[list] = [[] for _ in range(k)]
    for m, pr in enumerate(problems):
        t = optimistic_problem(pr).time_s
        for b in range(pr.n_blocks):
            xs = []
            for p in range(k):
                if np.isfinite(t[b, p]):
                    x = solver.NumVar(0, 1, f"x{m}_{b}_{p}")
                    xs.append(x)
                    load[p].append(x * float(rates[m] * t[b, p]))
            solver.Add(sum(xs) == 1)
    for p in range(k):
        if load[p]:
            solver.Add(sum(load[p]) <= period)
    solver.Minimize(period)
    status = solver.Solve()
    value = period.solution_value() if status == pywraplp.Solver.OPTIMAL else 0.0
    return float(value) * (1 - 1e-9)


def _spread(n: int, keep: int, order: np.ndarray) -> np.ndarray:
    """``keep`` rows of ``n``: the first half of ``order``'s best, then a spread of the rest."""
    head = order[: keep // 2]
    rest = order[keep // 2:]
    pick = rest[np.linspace(0, len(rest) - 1, keep - len(head)).round().astype(int)] if len(rest) else rest
    return np.unique(np.concatenate([head, pick]))


def _combine(cands: List[Candidates], rates: Sequence[float], axis: str, idle_w: float, max_partial: int,
             sw: Sequence[int] = (), transition_s: Sequence[float] = ()) -> Tuple[np.ndarray, bool]:
    """Index rows (one candidate per model) of the combinations on the front (module docstring) and whether
    a partial set was capped. ``sw``: the PUs whose switches cost ``transition_s`` each; the hand-over switches
    between models (:func:`parapipe.cost.workload.cross_switching_s`) are added to their busy times, partial
    combinations compared only among those of equal (first point, last point, switches so far) on them."""
    capped = False
    s_n = len(sw)
    sw_idx = np.asarray(sw, dtype=int)
    idx = np.arange(len(cands[0].mappings))[:, None]
    busy = rates[0] * cands[0].busy
    lat = cands[0].latency * (1.0 if axis == "max" else rates[0])
    dyn = rates[0] * cands[0].dyn
    first, last = cands[0].sig[:, :, 0].copy(), cands[0].sig[:, :, 1].copy()
    acc = np.where(first >= 0, -cands[0].sig[:, :, 2], 0)
    for m in range(1, len(cands)):
        c = cands[m]
        a, b = len(idx), len(c.mappings)
        ia, ib = np.repeat(np.arange(a), b), np.tile(np.arange(b), a)
        busy = busy[ia] + rates[m] * c.busy[ib]
        lat = np.maximum(lat[ia], c.latency[ib]) if axis == "max" else lat[ia] + rates[m] * c.latency[ib]
        dyn = dyn[ia] + rates[m] * c.dyn[ib]
        idx = np.hstack([idx[ia], ib[:, None]])
        if s_n:
            f0, l0, a0 = first[ia], last[ia], acc[ia]
            fm, lm, om = c.sig[ib, :, 0], c.sig[ib, :, 1], c.sig[ib, :, 2]
            uses, had = fm >= 0, f0 >= 0
            acc = np.where(uses & had, a0 + (l0 != fm) - om, np.where(uses, -om, a0))
            first = np.where(had, f0, fm)
            last = np.where(uses, lm, l0)
        if m < len(cands) - 1:
            # prefilter cheaply on (period, lat, dyn) order, then the exact filter in (busy, lat, dyn)
            vals = canonical_ops(np.column_stack([busy, lat, dyn]))
            mask = grouped_pareto(vals, np.hstack([first, last, acc])) if s_n else pareto_mask(vals)
            sel = np.flatnonzero(mask)
            if len(sel) > max_partial:
                capped = True
                order = sel[np.argsort(busy[sel].max(axis=1), kind="stable")]
                sel = _spread(len(order), max_partial, order)
            idx, busy, lat, dyn = idx[sel], busy[sel], lat[sel], dyn[sel]
            first, last, acc = first[sel], last[sel], acc[sel]
    if s_n:
        extra = np.where(first >= 0, np.maximum(0, acc + (last != first)), 0)
        busy = busy.copy()
        busy[:, sw_idx] += extra * np.asarray(transition_s, dtype=float)[None, :]
    period = busy.max(axis=1)
    latency = lat if axis == "max" else lat / float(sum(rates))
    energy = dyn + idle_w * period
    mask = pareto_mask(canonical_ops(np.column_stack([period, latency, energy])))
    return idx[np.flatnonzero(mask)], capped


RETIME_MAX_COMBINATIONS = 8
"""Combinations of the workload front re-timed in the operating-point round (:func:`_retime_round`): the
lowest-energy and the lowest-period ones first, then a spread along the period axis."""

EXACT_OP_MAPPINGS = 20000
"""Most mappings x operating points enumerated for a model within :data:`EXACT_CANDIDATE_CELLS`
(:func:`count_op_mappings`: 3 blocks x 2 PUs with 2 points each give at most 648); above it the model's mappings
are enumerated at the highest points and re-timed."""

RETIME_ROUND_S = 2.0
"""Work budget of the operating-point round, in deterministic seconds (:mod:`parapipe.search.budget`)."""

RETIME_WORK_PER_S = 1.5e4
"""Operating-point round: work units per CPU second, a unit being one block costed once (a re-timing charges
Σ over its stages of the stage's blocks x its point choices; evaluating a variant, the model's blocks). Measured
as the units of the round over the process CPU seconds it added to the search (the second combination
included), ``python benchmarks/workload_bench.py --socs amlogic_a311d`` on resnet50 + shufflenet (21,808 units,
about 2 s) and inception_v1 + squeezenet (15,274 units, about 0.7 s) on an x86-64 core of the development machine."""


def _retime_round(problems: Sequence[MappingProblem], front: List[WorkloadPoint], cands: List[Candidates],
                  opts: SearchOptions, terms: PipelineTerms, sw: Sequence[int],
                  bounds_s: Sequence[Optional[float]]) -> Tuple[List[Candidates], Dict[str, Any]]:
    """The operating-point round: for up to :data:`RETIME_MAX_COMBINATIONS` combinations of the first front,
    each model's mapping re-timed (:func:`parapipe.search.dvfs.retime`, over the points
    :func:`parapipe.search.dvfs.resolve_operating_points` gives a re-timed search) once with each model's points
    free (a PU shared by models at different points then pays the hand-over switches of the cost model) and
    once per joint choice of the shared PUs' points (every model runs a shared PU at that one point: no
    hand-over switch), plus each mapping with only the shared PUs moved to that point
    (:func:`parapipe.search.dvfs.with_ops`). The variants join the models' candidates (returned) for a second
    combination. Counted work, :data:`RETIME_ROUND_S` deterministic seconds at :data:`RETIME_WORK_PER_S`; returns
    the candidates and the record of what the round did (pareto.json ``search.workload.operating_point_round``)."""
    from .budget import Budget
    from .dvfs import RETIME_MAX_CHOICES, retime, with_ops

    spaces = [resolve_operating_points(pr, opts.operating_points, False) for pr in problems]
    info: Dict[str, Any] = {"done": True, "points_per_pu": [sp.to_json() for sp in spaces]}
    if all(sp.op_sets is None for sp in spaces):
        return cands, {"done": False, "why": "no PU has several operating points in use"}
    budget = Budget.of_seconds(RETIME_ROUND_S, RETIME_WORK_PER_S, opts.wall_safety_factor)
    order = sorted(range(len(front)), key=lambda i: front[i].objectives())
    picks: List[int] = []
    if order:
        picks = [min(order, key=lambda i: (front[i].objectives()[2], front[i].objectives())), order[0]]
        rest = [i for i in order if i not in picks]
        want = max(0, RETIME_MAX_COMBINATIONS - len(set(picks)))
        if rest and want:
            picks += [rest[j] for j in np.unique(np.linspace(0, len(rest) - 1, min(want, len(rest))).round()
                                                 .astype(int))]
    picks = list(dict.fromkeys(picks))
    caches: List[dict] = [{} for _ in problems]
    memo: Dict[tuple, List[Mapping]] = {}
    new: List[List[Mapping]] = [[] for _ in problems]
    stopped = ""
    done = retimings = choices_tried = 0
    for n_pick, i in enumerate(picks):
        maps = front[i].mappings
        used = [{p for st in mp.stages for p in st.all_pus()} for mp in maps]
        base_sets = spaces[0].op_sets
        shared = [p for p in range(problems[0].n_pus)
                  if sum(p in u for u in used) > 1 and base_sets is not None and len(base_sets[p]) > 1]
        sets = [tuple(base_sets[p]) for p in shared] if base_sets is not None else []
        joint = list(itertools.product(*sets)) if shared else []
        if len(joint) > RETIME_MAX_CHOICES:  # the shared PUs move together (i-th point of each)
            levels = max(len(x) for x in sets)
            joint = [tuple(x[min(j * len(x) // levels, len(x) - 1)] for x in sets) for j in range(levels)]
        for fixed in [None] + joint:
            choices_tried += 1
            for m, (pr, mp) in enumerate(zip(problems, maps)):
                op_sets = spaces[m].op_sets
                if op_sets is None:
                    continue
                pin = {} if fixed is None else {p: o for p, o in zip(shared, fixed) if p in used[m]}
                key = (m, mp, tuple(sorted(pin.items())))
                if key in memo:
                    continue
                reason = budget.over()
                if reason:
                    stopped = (f"{reason} reached at combination {n_pick + 1} of {len(picks)} "
                               f"({budget.to_json()['work']} units)")
                    break
                sets_m = [(pin[p],) if p in pin else tuple(op_sets[p]) for p in range(pr.n_pus)]
                budget.spend(sum((st.stop - st.start) * min(RETIME_MAX_CHOICES, int(np.prod(
                    [len(sets_m[p]) for v in st.replica_stages() for p in v.pus]))) for st in mp.stages))
                got = retime(pr, mp, sets_m, caches[m])
                retimings += 1
                if pin:
                    got.append(with_ops(pr, mp, pin))
                memo[key] = got
                budget.spend(pr.n_blocks * len(got))
                new[m] += got
            if stopped:
                break
        if stopped:
            break
        done += 1
    out: List[Candidates] = []
    added = 0
    for m, pr in enumerate(problems):
        before = len(cands[m].mappings)
        if new[m]:
            c, n_eval = model_candidates(pr, new[m], terms, bounds_s[m], sw, prior=cands[m], max_stages=opts.max_stages,
                                    model_index=m)
            added += n_eval
            out.append(c)
        else:
            out.append(cands[m])
        log.debug("workload round: %s candidates %d -> %d", pr.name, before, len(out[-1].mappings))
    info.update({"combinations": len(picks), "combinations_done": done, "point_choices": choices_tried,
                 "retimings": retimings, "variants_added": added,
                 "candidates": [len(c.mappings) for c in out], **budget.to_json(),
                 "budget_s": RETIME_ROUND_S})
    if stopped:
        info["stopped"] = stopped
    if budget.wall_stopped:
        info["stopped_early"] = True
    return out, info


def workload_search(problems: Sequence[MappingProblem], rates: Sequence[float], options: Optional[SearchOptions] = None,
                    terms: Optional[PipelineTerms] = None, latency_axis: str = "max",
                    latency_bounds_s: Optional[Sequence[Optional[float]]] = None,
                    max_partial: int = MAX_PARTIAL) -> WorkloadResult:
    """Search a workload (module docstring): ``problems`` one per model over the same PUs, ``rates`` frames of
    each per workload frame, ``latency_bounds_s`` an optional latency bound per model (s).

    Raises
    ------
    parapipe.errors.InfeasibleError
        A model has no mapping on the PUs, or none within its latency bound.
    """
    opts = options or SearchOptions()
    terms = terms or DEFAULT_TERMS
    t0 = time.monotonic()
    bounds_s = list(latency_bounds_s or [None] * len(problems))
    idle_w = float(problems[0].idle_power_w.sum()) + problems[0].static_power_w
    sw = switch_pus(problems)
    tables0 = next((pr.operating_points for pr in problems if pr.operating_points is not None), None)
    tr = [float(getattr(tables0[p], "transition_s", 0.0)) for p in sw] if tables0 is not None else []
    results: List[SearchResult] = []
    cands: List[Candidates] = []
    evaluated = 0
    exact = True
    bounded_by: List[str] = []
    model_s = 0.0
    enumerated_ops = []
    for m, pr in enumerate(problems):
        t_m = time.monotonic()
        res = search(pr, opts, terms=terms)
        model_s += time.monotonic() - t_m
        results.append(res)
        maps = [p.mapping for p in res.points]
        if pr.n_blocks * pr.n_pus <= EXACT_CANDIDATE_CELLS:
            space = resolve_operating_points(pr, opts.operating_points, True)
            sets = space.op_sets
            if sets is not None and count_op_mappings(pr, sets) > EXACT_OP_MAPPINGS:
                exact = False
                bounded_by.append(f"{pr.name}: every mapping enumerated at the highest operating points only "
                                  f"(more than {EXACT_OP_MAPPINGS} with the points); the others by re-timing")
                sets = None
            elif space.op_sets is not None and not space.exact:
                exact = False
                bounded_by.append(f"{pr.name}: operating points {space.bounded_by}")
            enumerated_ops.append(sets is not None or pr.operating_points is None)
            maps += enumerate_mappings(pr, sets)
        else:
            exact = False
            enumerated_ops.append(False)
            extra, notes = dp_candidates(pr, opts)
            maps += extra
            bounded_by.append(f"{pr.name}: candidates from the single-model search and the per-PU DP fronts "
                              f"({pr.n_blocks} blocks x {pr.n_pus} PUs > {EXACT_CANDIDATE_CELLS} cells)")
            bounded_by += notes
        c, n_eval = model_candidates(pr, maps, terms, bounds_s[m], sw, max_stages=opts.max_stages, model_index=m)
        evaluated += n_eval
        cands.append(c)
    cross = terms.contention > 0 or terms.sharing > 0 or any(terms.overlap.values())
    if cross:
        exact = False
        bounded_by.append("the pipeline terms act across models (contention, sharing or overlap): combinations "
                          "are ranked without them, the front evaluated with them")
    rows, capped = _combine(cands, rates, latency_axis, idle_w, max_partial, sw, tr)
    if capped:
        exact = False
        bounded_by.append(f"at most {max_partial} partial combinations kept between models")

    def ev_of(maps: Sequence[Mapping]) -> WorkloadEvaluation:
        return evaluate_workload(problems, maps, rates, terms, latency_axis)

    def points_of(rows: np.ndarray, cs: List[Candidates], origin: str) -> List[WorkloadPoint]:
        return [WorkloadPoint("", "parapipe", [cs[m].mappings[i] for m, i in enumerate(row)],
                              ev_of([cs[m].mappings[i] for m, i in enumerate(row)]), origin=origin)
                for row in rows]

    def breaks(p: WorkloadPoint) -> List[str]:
        return within_limits(problems, p.mappings, p.evaluation, bounds_s, opts.max_stages)

    cand_points = points_of(rows, cands, "combination")
    baselines, missing = _baselines(problems, rates, results, cands, ev_of, opts, terms,
                                    lambda maps: not within_limits(problems, maps, ev_of(maps), bounds_s,
                                                                   opts.max_stages))
    broken = {b.strategy: breaks(b) for b in baselines}
    broken = {k: v for k, v in broken.items() if v}
    for name, why in broken.items():
        log.info("workload: the %s baseline breaks %s: shown as a baseline, not on the front", name,
                 " and ".join(why))
    for name, reason in missing.items():
        log.info("workload: no %s baseline: %s", name, reason)
    cand_points += [WorkloadPoint("", "parapipe", b.mappings, b.evaluation, origin="baseline") for b in baselines
                    if b.strategy not in broken]

    def fitting(pts: List[WorkloadPoint]) -> List[WorkloadPoint]:
        fits = [p for p in pts if p.evaluation.fits_memory]
        return fits or pts

    # final round: the front's combinations re-timed over the operating points, combined again
    first = fitting([p for p in cand_points if not breaks(p)] or cand_points)
    mat0 = canonical_ops(np.array([p.objectives() for p in first]))
    front0 = [first[i] for i in np.flatnonzero(pareto_mask(mat0))]
    if all(enumerated_ops):
        round_info: Dict[str, Any] = {"done": False, "why": "every mapping x operating point was a candidate"}
    else:
        cands2, round_info = _retime_round(problems, front0, cands, opts, terms, sw, bounds_s)
        if round_info.get("variants_added"):
            rows2, capped2 = _combine(cands2, rates, latency_axis, idle_w, max_partial, sw, tr)
            seen = {tuple(p.mappings) for p in cand_points}
            new_rows = [r for r in rows2 if tuple(cands2[m].mappings[i] for m, i in enumerate(r)) not in seen]
            cand_points += points_of(np.array(new_rows, dtype=int).reshape(len(new_rows), len(problems)), cands2,
                                     "retimed")
            round_info["combinations_ranked"] = len(rows2)
            round_info["combinations_new"] = len(new_rows)
            if capped2 and not capped:
                bounded_by.append(f"at most {max_partial} partial combinations kept between models")
        if round_info.get("stopped"):
            bounded_by.append(f"operating-point round: {round_info['stopped']}")
    # the cross-model terms can lengthen a model's latency past its bound: the front keeps the points within it
    within = [p for p in cand_points if not breaks(p)]
    if not within:
        raise InfeasibleError("workload: no combination meets every model's latency bound and the stage limit "
                              "once the models share the PUs")
    cand_points = within
    fits = [p for p in cand_points if p.evaluation.fits_memory]
    if fits:
        cand_points = fits
    else:
        log.warning("workload: no combination found fits the PUs' memory limits; the front shows ones that do not")
    mat = canonical_ops(np.array([p.objectives() for p in cand_points]))
    front = [cand_points[i] for i in np.flatnonzero(pareto_mask(mat))]
    front.sort(key=lambda p: p.objectives())
    for i, p in enumerate(front):
        p.id = f"w{i}"
    all_points = front + baselines
    objs = [tuple(r) for r in canonical_ops(np.array([p.objectives() for p in all_points]))]
    ok = [i for i, p in enumerate(all_points) if p.strategy not in broken]  # a broken baseline is never marked
    on_front = {objs[ok[j]] for j in np.flatnonzero(pareto_mask(np.array([objs[i] for i in ok])))}
    for i, p in enumerate(all_points):
        p.pareto = i in ok and objs[i] in on_front
    kappa = float(terms.slowdown) if not any(terms.overlap.values()) else 1.0
    lp = workload_period_lp(problems, rates) * kappa
    own = max(r * res.bounds.period_lb_s for r, res in zip(rates, results))
    period_lb = max(lp, own)
    latency_lb = workload_latency(latency_axis, [res.bounds.latency_lb_s for res in results], rates)
    info: Dict[str, Any] = {
        "exact": exact, "bounded_by": bounded_by, "exact_candidate_cells": EXACT_CANDIDATE_CELLS,
        "candidates": [len(c.mappings) for c in cands], "candidates_evaluated": evaluated,
        "combinations_ranked": len(rows), "max_partial": max_partial, "operating_point_round": round_info,
        "period_bound": {"lp_s": lp, "models_s": own, "method": "lp" if lp >= own else "models"},
        "baselines_breaking": {k: v for k, v in broken.items()}, "baselines_missing": dict(missing),
        "model_search_s": model_s, "search_s": time.monotonic() - t0}
    log.info("workload search: %d models, front %d points, %.2fs, exact %s", len(problems), len(front),
             info["search_s"], exact)
    return WorkloadResult(list(problems), list(rates), latency_axis, all_points, period_lb, latency_lb, results, info)


def _baselines(problems, rates, results: List[SearchResult], cands: List[Candidates], ev_of,
               opts: SearchOptions, terms: PipelineTerms, meets=lambda maps: True
               ) -> Tuple[List[WorkloadPoint], Dict[str, str]]:
    """The ``separate``, ``split`` and ``whole`` baselines (module docstring; of the ``split`` and ``whole``
    choices, those where ``meets(mappings)`` first), and why each missing one could not be built."""
    k = problems[0].n_pus
    n_models = len(problems)
    out: List[WorkloadPoint] = []
    missing: Dict[str, str] = {}
    sep = [res.best("throughput").mapping for res in results]
    out.append(WorkloadPoint("separate", "separate", sep, ev_of(sep), origin="baseline"))

    def fastest(res: SearchResult) -> Mapping:  # of the points within the stage limit, if any
        pts = [p for p in res.points if opts.max_stages is None or len(p.mapping.stages) <= opts.max_stages]
        return min(pts or res.points, key=lambda p: (p.objectives()[0],) + p.objectives()).mapping

    def best_within(m: int, keep: Tuple[int, ...]) -> Optional[Mapping]:
        if len(keep) == k:
            return fastest(results[m])
        allowed = set(keep)
        c = cands[m]
        ok = [i for i, mp in enumerate(c.mappings)
              if {p for st in mp.stages for p in st.all_pus()} <= allowed]
        if not ok:
            return None
        i = min(ok, key=lambda i: (float(c.busy[i].max()), float(c.latency[i]), float(c.dyn[i])))
        return c.mappings[i]

    ranked: List[Tuple[float, Tuple[Tuple[int, ...], ...]]] = []
    if k >= n_models:
        for labels in itertools.product(range(n_models + 1), repeat=k):  # PU -> model (n_models: unused)
            groups = [tuple(p for p in range(k) if labels[p] == m) for m in range(n_models)]
            if any(not g for g in groups):
                continue
            found = [best_within(m, g) for m, g in enumerate(groups)]
            maps = [mp for mp in found if mp is not None]
            if len(maps) < n_models:
                continue
            # disjoint PUs: the period is the largest rate x own period (of the candidates, to rank the splits)
            key = max(rates[m] * float(evaluate(problems[m], mp).busy_s.max()) for m, mp in enumerate(maps))
            ranked.append((key, tuple(groups)))
    ranked.sort()
    # the best SPLIT_SEARCHED splits by the candidates, each model then searched on its PUs as a user would
    # (``optimize --pus``: the single-model search with the options of the workload's)
    memo: Dict[Tuple[int, Tuple[int, ...]], Optional[Mapping]] = {}

    def searched(m: int, keep: Tuple[int, ...]) -> Optional[Mapping]:
        if (m, keep) not in memo:
            if len(keep) == k:
                memo[(m, keep)] = fastest(results[m])
            else:
                try:
                    sub = search(problems[m].restrict_pus(keep), opts, terms=terms)
                    memo[(m, keep)] = remap_mapping(fastest(sub), keep)
                except InfeasibleError:
                    memo[(m, keep)] = None
        return memo[(m, keep)]

    def rank(maps: List[Mapping], ev: WorkloadEvaluation) -> tuple:
        return (not meets(maps),) + tuple(ev.objectives())

    best_split: Optional[Tuple[tuple, WorkloadPoint]] = None
    for _, split in ranked[:SPLIT_SEARCHED]:
        found = [searched(m, g) for m, g in enumerate(split)]
        if any(mp is None for mp in found):
            continue
        maps = [mp for mp in found if mp is not None]
        ev = ev_of(maps)
        if best_split is None or rank(maps, ev) < best_split[0]:
            best_split = (rank(maps, ev), WorkloadPoint("split", "split", maps, ev, origin="baseline"))
    if best_split is not None:
        out.append(best_split[1])
    elif k < n_models:
        missing["split"] = f"fewer PUs ({k}) than models ({n_models}): no split gives each model its own PUs"
    elif not ranked:
        missing["split"] = ("every split of the PUs leaves some model on PUs that cannot run all its operators "
                            "(or without a mapping on them)")
    else:
        missing["split"] = "the single-model search found no mapping on the PUs of the best splits"
    best_whole: Optional[Tuple[tuple, WorkloadPoint]] = None
    for pus in itertools.product(range(k), repeat=n_models):
        if any(not np.isfinite(problems[m].time_s[:, p]).all() for m, p in enumerate(pus)):
            continue
        maps = [Mapping((StageMapping(0, problems[m].n_blocks, (p,), (p,) * problems[m].n_blocks),))
                for m, p in enumerate(pus)]
        ev = ev_of(maps)
        if best_whole is None or rank(maps, ev) < best_whole[0]:
            best_whole = (rank(maps, ev), WorkloadPoint("whole", "whole", maps, ev, origin="baseline"))
    if best_whole is not None:
        out.append(best_whole[1])
    else:
        alone = [pr.name for pr in problems if not any(np.isfinite(pr.time_s[:, p]).all() for p in range(k))]
        missing["whole"] = (f"no single PU runs every block of {', '.join(alone)}" if alone
                            else "no PU assignment runs every model whole")
    return out, missing
