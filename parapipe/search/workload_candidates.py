"""Candidate mappings of one model of a workload (:mod:`parapipe.search.workload` combines them): every mapping of
a tiny problem (:func:`enumerate_mappings`), the per-PU fronts of the DP (:func:`dp_candidates`), each kept with
its busy time per PU, latency, active energy and operating-point signature, non-dominated per signature; and the
limits a workload point must meet (:func:`within_limits`)."""
from __future__ import annotations
import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple
import numpy as np
from ..cost.evaluate import evaluate
from ..cost.mapping import Mapping, ReplicaMapping, StageMapping
from ..cost.pipeline_terms import PipelineTerms
from ..cost.problem import MappingProblem
from ..cost.workload import WorkloadEvaluation, model_dyn_energy_j
from ..errors import InfeasibleError
from .options import SearchOptions
from .api import OBJECTIVE_DIGITS
from .listsched import schedule_ranges
from .pareto import pareto_mask

__all__ = ["EXACT_CANDIDATE_CELLS", "MAX_DP_CANDIDATES", "DP_CANDIDATE_S", "SPLIT_SEARCHED", "dp_candidates",
           "switch_pus", "count_op_mappings", "remap_mapping", "enumerate_mappings", "LatencyBoundError",
           "within_limits", "Candidates", "model_candidates", "canonical_ops", "grouped_pareto",
           "op_signature"]

EXACT_CANDIDATE_CELLS = 12
"""Blocks x PUs of a model's problem up to which every mapping of the DP's space is a candidate (3 blocks x 2
PUs: 48 mappings; 4 x 3: 3,087; the count grows as (2^k)^n)."""


def remap_mapping(mapping: Mapping, keep: Sequence[int]) -> Mapping:
    """A mapping over the PU indices of ``problem.restrict_pus(keep)`` as a mapping over the full problem's."""
    def pus(t):
        return tuple(keep[p] for p in t)
    return Mapping(tuple(StageMapping(st.start, st.stop, pus(st.pus), pus(st.assignment), st.order,
                                      tuple(ReplicaMapping(pus(r.pus), pus(r.assignment), r.order, r.ops)
                                            for r in st.replicas), st.ops)
                         for st in mapping.stages))


def enumerate_mappings(problem: MappingProblem, op_sets: Optional[Sequence[Sequence[int]]] = None) -> List[Mapping]:
    """Every mapping of the single-model DP's space with PUs reused (module docstring); with ``op_sets`` (point
    indices per PU) also every operating point of ``op_sets`` per stage PU, each stage list-scheduled at its
    points (highest points only without)."""
    n, k = problem.n_blocks, problem.n_pus
    groups = [tuple(p for p in range(k) if mask >> p & 1) for mask in range(1, 2 ** k)]
    variants: List[Tuple[Tuple[int, ...], Optional[Tuple[int, ...]]]] = []
    for g in groups:
        sets = [tuple(op_sets[p]) if op_sets is not None else (problem.max_op(p),) for p in g]
        for choice in itertools.product(*sets):
            norm = None if all(o == problem.max_op(p) for p, o in zip(g, choice)) else tuple(choice)
            variants.append((g, norm))

    @lru_cache(maxsize=None)
    def runs(a: int, vi: int):
        g, ops = variants[vi]
        pr = problem if ops is None else problem.at_operating_points(tuple(zip(g, ops)))
        return schedule_ranges(pr, a, g)

    out: List[Mapping] = []

    def extend(a: int, stages: List[StageMapping]) -> None:
        if a == n:
            out.append(Mapping(tuple(stages)))
            return
        for vi, (g, ops) in enumerate(variants):
            rs = runs(a, vi)
            for i in range(len(rs.makespan_s)):
                b = a + i + 1
                if not np.isfinite(rs.makespan_s[i]):
                    break
                extend(b, stages + [StageMapping(a, b, g, tuple(rs.assignment[:i + 1]), ops=ops)])

    extend(0, [])
    return out


def count_op_mappings(problem: MappingProblem, op_sets: Sequence[Sequence[int]]) -> int:
    """Upper bound on how many mappings :func:`enumerate_mappings` gives with ``op_sets``: ``V (1 + V)^(n-1)``
    with ``V`` the stage variants per block range (Σ over PU groups of Π points of its PUs)."""
    k = problem.n_pus
    v = sum(int(np.prod([len(op_sets[p]) for p in range(k) if mask >> p & 1])) for mask in range(1, 2 ** k))
    return v * (1 + v) ** (problem.n_blocks - 1)


def canonical_ops(x: np.ndarray) -> np.ndarray:
    return np.array([[float(f"{v:.{OBJECTIVE_DIGITS}g}") for v in row] for row in np.atleast_2d(x)])


def switch_pus(problems: Sequence[MappingProblem]) -> List[int]:
    """PU indices whose operating-point switches cost time (a table with ``transition_s > 0``): where models at
    different points on one PU pay the hand-over switches of :func:`parapipe.cost.workload.cross_switching_s`."""
    for pr in problems:
        if pr.operating_points is not None:
            return [p for p, t in enumerate(pr.operating_points) if t is not None and t.transition_s > 0]
    return []


def op_signature(problem: MappingProblem, mapping: Mapping, sw: Sequence[int]) -> np.ndarray:
    """Per PU of ``sw``: (first point used, last point used, 1 if they differ) in pipeline order, -1s when the
    mapping does not use the PU: all the cross-model switches depend on (module docstring)."""
    out = np.full((len(sw), 3), -1, dtype=np.int64)
    for i, p in enumerate(sw):
        ops: List[int] = []
        for st in mapping.stages:
            for view in st.replica_stages():
                if p in view.pus:
                    op = view.op_of(p)
                    ops.append(problem.max_op(p) if op is None else int(op))
        if ops:
            out[i] = (ops[0], ops[-1], int(ops[0] != ops[-1]))
    return out


def grouped_pareto(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Pareto mask of ``values`` (minimised) within each group of equal ``keys`` rows."""
    if keys.shape[1] == 0 or len(values) == 0:
        return pareto_mask(values)
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    mask = np.zeros(len(values), dtype=bool)
    for g in np.unique(inv):
        sel = np.flatnonzero(inv == g)
        mask[sel[pareto_mask(values[sel])]] = True
    return mask


@dataclass
class Candidates:
    mappings: List[Mapping]
    busy: np.ndarray  # (c, k) per inference
    latency: np.ndarray
    dyn: np.ndarray
    sig: np.ndarray  # (c, len(sw), 3): op_signature


class LatencyBoundError(InfeasibleError):
    """No mapping of model ``model_index`` meets its latency bound ``bound_s`` (s); ``best_latency_s`` is the
    least latency of its candidates within the stage limit (s; None when it has none)."""

    def __init__(self, message: str, model_index: int, bound_s: float, best_latency_s: Optional[float]) -> None:
        super().__init__(message)
        self.model_index = model_index
        self.bound_s = bound_s
        self.best_latency_s = best_latency_s


def within_limits(problems: Sequence[MappingProblem], maps: Sequence[Mapping], evaluation: WorkloadEvaluation,
                  latency_bounds_s: Sequence[Optional[float]], max_stages: Optional[int]) -> List[str]:
    """What a workload point breaks: one phrase per model latency bound it exceeds and per model with more than
    ``max_stages`` stages (empty when it meets them all)."""
    out: List[str] = []
    for pr, mp, lat, bound in zip(problems, maps, evaluation.latency_s_per_model, latency_bounds_s):
        if bound is not None and lat > bound * (1 + 1e-9):
            out.append(f"{pr.name}'s latency bound ({lat * 1e3:.4g} ms > {bound * 1e3:.4g} ms)")
        if max_stages is not None and len(mp.stages) > max_stages:
            out.append(f"the stage limit for {pr.name} ({len(mp.stages)} stages > --max-stages {max_stages})")
    return out


def model_candidates(problem: MappingProblem, maps: List[Mapping], terms: PipelineTerms,
                latency_bound_s: Optional[float], sw: Sequence[int] = (),
                prior: Optional[Candidates] = None, max_stages: Optional[int] = None,
                model_index: int = 0) -> Tuple[Candidates, int]:
    """Evaluate ``maps`` alone and keep the non-dominated ones within ``max_stages`` stages and the latency
    bound (module docstring; among mappings of equal :func:`op_signature` on the switching PUs ``sw``), together
    with ``prior``'s (not re-evaluated); also returns how many were evaluated.

    Raises
    ------
    LatencyBoundError
        No mapping within the stage limit meets ``latency_bound_s``.
    InfeasibleError
        No mapping within the stage limit.
    """
    seen: Dict[Mapping, None] = {}
    known = set(prior.mappings) if prior is not None else set()
    for m in maps:
        if m not in known and (max_stages is None or len(m.stages) <= max_stages):
            seen.setdefault(m, None)
    best_latency = float("inf")
    k = problem.n_pus
    rows, kept, sigs = [], [], []
    if prior is not None:
        kept += prior.mappings
        rows += [list(b) + [lt, d] for b, lt, d in zip(prior.busy, prior.latency, prior.dyn)]
        sigs += list(prior.sig)
    for m in seen:
        ev = evaluate(problem, m, terms)
        best_latency = min(best_latency, ev.latency_s)
        if latency_bound_s is not None and ev.latency_s > latency_bound_s:
            continue
        kept.append(m)
        rows.append(list(ev.busy_s) + [ev.latency_s, model_dyn_energy_j(problem, ev)])
        sigs.append(op_signature(problem, m, sw))
    if not rows:
        stages = "" if max_stages is None else f" within {max_stages} stage(s)"
        if latency_bound_s is not None and np.isfinite(best_latency):
            raise LatencyBoundError(
                f"{problem.name}: no mapping{stages} meets its latency bound of {latency_bound_s * 1e3:.4g} ms "
                f"(the least latency it reaches is {best_latency * 1e3:.4g} ms)", model_index, latency_bound_s,
                best_latency)
        raise InfeasibleError(f"{problem.name}: no mapping{stages} on these PUs")
    arr = np.array(rows)
    sig = np.array(sigs, dtype=np.int64).reshape(len(rows), len(sw), 3)
    mask = grouped_pareto(canonical_ops(arr), sig.reshape(len(rows), -1))
    idx = np.flatnonzero(mask)
    return Candidates([kept[i] for i in idx], arr[idx, :k], arr[idx, k], arr[idx, k + 1], sig[idx]), len(seen)


MAX_DP_CANDIDATES = 96
"""Most mappings taken from each of a model's two per-PU DP fronts (disjoint groups, PUs reused) above
:data:`EXACT_CANDIDATE_CELLS`: the fronts are thinned on a grid to this many (:func:`parapipe.search.pareto.spread_rows`)
before they are evaluated (the PU-reuse front of a 48-block model on 4 PUs holds 1,000-15,000 mappings; evaluating one costs about
0.6 ms, measured with ``python -m cProfile`` on the zoo models and the A311D profile)."""

SPLIT_SEARCHED = 2
"""The ``split`` baseline: how many of the best PU splits (ranked by the models' candidates) are then searched
with the single-model search on each model's PUs."""

DP_CANDIDATE_S = 1.0
"""Work budget of each per-PU DP pass, in deterministic seconds (:mod:`parapipe.search.budget`)."""


def dp_candidates(problem: MappingProblem, opts: SearchOptions, cap: int = MAX_DP_CANDIDATES
                  ) -> Tuple[List[Mapping], List[str]]:
    """A model's candidates for every subset of the PUs at once: the single-model DP's disjoint-group and
    PU-reuse passes run with :attr:`parapipe.search.dp.DPOptions.per_pu_front` (final labels non-dominated per PU,
    not on the period), highest operating points, with the single-model search's label grid, caps and cut rule
    above its ``exact_max_cells`` and a work budget of :data:`DP_CANDIDATE_S` each; each front thinned to ``cap``
    mappings (:func:`parapipe.search.pareto.spread_rows`). Returns the mappings and what bounded them (one line each, empty if nothing)."""
    from dataclasses import replace

    from .budget import DP_WORK_PER_S, Budget
    from .dp import DPDeadline, DPOptions, dp_front
    from .transitions import StageCatalog

    small = problem.n_blocks * problem.n_pus <= opts.exact_max_cells
    catalog = StageCatalog(problem, None)
    base = DPOptions(max_stages=opts.max_stages, per_pu_front=cap)
    if not small:
        base = replace(base, epsilon=opts.epsilon, max_labels=opts.max_labels, max_cut_tensors=opts.max_cut_tensors)
    reuse = replace(base, reuse_pus=True)
    if not small:
        reuse = replace(reuse, epsilon=max(opts.epsilon, opts.reuse_epsilon), max_labels=opts.reuse_max_labels)
    out: List[Mapping] = []
    notes: List[str] = []
    for name, dpo in (("disjoint", base), ("reuse", reuse)):
        dpo = replace(dpo, budget=Budget.of_seconds(DP_CANDIDATE_S, DP_WORK_PER_S, opts.wall_safety_factor))
        try:
            res = dp_front(problem, dpo, catalog=catalog)
        except DPDeadline as exc:
            notes.append(f"{problem.name}: per-PU {name} candidates skipped ({exc})")
            continue
        except InfeasibleError:
            continue
        out += res.mappings
        if not res.exact(dpo.epsilon) or res.thinned:
            notes.append(f"{problem.name}: per-PU {name} candidates {len(res.mappings)}"
                         + (f" spread over {res.thinned} non-dominated" if res.thinned else "")
                         + ("" if res.exact(dpo.epsilon) else " (label grid, cap or cut rule)"))
    return out, notes
