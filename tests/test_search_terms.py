"""The search with pipeline terms (parapipe/cost/pipeline_terms.py): its DP labels are the full model's, and its
bounds hold for the full model, checked against independent enumerations (tests/search_cases.py) evaluated with
:func:`parapipe.cost.evaluate.evaluate` and the terms."""
from __future__ import annotations

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.pipeline_terms import PipelineTerms
from parapipe.search.bounds import dispatch_table, lower_bounds, optimistic_problem
from parapipe.search.dp import DPOptions, dp_front
from parapipe.search.pareto import pareto_mask
from parapipe.search.replicate import replicated_front
from parapipe.search.transitions import StageCatalog
from search_cases import (all_mapping_objectives, all_pipeline_objectives, all_replicated_objectives,
                          random_problem, sorted_rows, uncovered)


def _terms(pr, kappa: float = 1.0) -> PipelineTerms:
    """A bundled profile's kind of terms (dispatch, hand-off, per-PU invocation), on the random problems' ms
    scale; ``kappa`` the slowdown."""
    return PipelineTerms(dispatch_s=4e-4, handoff_s=6e-4, slowdown=kappa,
                         invoke_s={pr.pu_names[0]: 2e-3, pr.pu_names[-1]: 5e-4})


CASES = [(5, 3, "dag", 0, 1.0), (5, 3, "diamond", 1, 1.0), (5, 3, "dag", 2, 1.25), (4, 4, "dag", 3, 1.0)]


def _front(points: np.ndarray) -> np.ndarray:
    return sorted_rows(points[pareto_mask(points)])


@pytest.mark.parametrize("n, k, shape, seed, kappa", CASES, ids=[f"{s}{n}x{k}-{seed}-k{kp}" for n, k, s, seed, kp in CASES])
def test_dp_labels_are_the_full_model(n, k, shape, seed, kappa):
    """The disjoint, reuse and replicated passes on a catalogue with terms find the front of the full model
    (brute force with evaluate(terms)), and their labels are evaluate(terms)'s objectives."""
    pr = random_problem(n, k, 4400 + seed, shape)
    terms = _terms(pr, kappa)
    cat = StageCatalog(pr, None, terms)
    for reuse in (False, True):
        res = dp_front(cat.problem, DPOptions(reuse_pus=reuse), catalog=cat)
        brute = _front(all_mapping_objectives(pr, reuse, terms=terms))
        assert res.objectives.shape == brute.shape, (reuse, res.objectives, brute)
        np.testing.assert_allclose(sorted_rows(res.objectives), brute, rtol=1e-9, atol=0)
        for mapping, obj in zip(res.mappings, res.objectives):
            ev = evaluate(pr, mapping, terms)
            np.testing.assert_allclose([ev.period_s, ev.latency_s, ev.energy_j], obj, rtol=1e-9, atol=0)
    rep = replicated_front(cat.problem, cat)
    brute = _front(all_replicated_objectives(pr, terms=terms))
    got = np.array([[ev.period_s, ev.latency_s, ev.energy_j] for ev in (evaluate(pr, m, terms) for m in rep.mappings)])
    np.testing.assert_allclose(got, rep.objectives, rtol=1e-9)
    # the same front up to ties in the last bits (sums taken in another order)
    assert not len(uncovered(brute, rep.objectives)) and not len(uncovered(rep.objectives, brute))


BOUND_CASES = [(5, 3, "dag", 0, 1.0), (5, 3, "diamond", 1, 1.0), (5, 3, "chain", 2, 1.0), (4, 3, "dag", 3, 0.8)]


@pytest.mark.parametrize("n, k, shape, seed, kappa", BOUND_CASES,
                         ids=[f"{s}{n}x{k}-{seed}-k{kp}" for n, k, s, seed, kp in BOUND_CASES])
def test_bounds_hold_for_the_full_model(n, k, shape, seed, kappa):
    """lower_bounds with the terms' dispatch table, on the κ-scaled problem, lies below every mapping of the
    searched spaces evaluated with the terms (pipelines with repeated PUs, PU reuse, replicated stages), and
    proves only the true best period optimal; the search's own bound too."""
    from parapipe.search.options import SearchOptions
    from parapipe.search.api import search

    pr = random_problem(n, k, 5500 + seed, shape)
    pr.time_s = np.where(np.isfinite(pr.time_s), pr.time_s, 6e-3)  # every PU runs every block: replicas
    terms = _terms(pr, kappa)
    everything = np.concatenate([all_pipeline_objectives(pr, terms)[:, :2],
                                 all_mapping_objectives(pr, reuse=True, terms=terms)[:, :2],
                                 all_replicated_objectives(pr, terms=terms)[:, :2]])
    best = float(everything[:, 0].min())
    cat = StageCatalog(pr, None, terms)
    dispatch = dispatch_table(pr.pu_names, terms)
    plain = lower_bounds(pr, time_limit_s=None)
    for given in (None, best, best * 1.3):
        b = lower_bounds(optimistic_problem(cat.problem), best_period_s=given, time_limit_s=None, dispatch=dispatch)
        assert (everything[:, 0] >= b.period_lb_s * (1 - 1e-9)).all(), (given, b, best)
        assert (everything[:, 1] >= b.latency_lb_s * (1 - 1e-9)).all()
        if b.period_proved_optimal:
            assert given == best
        if given is None:  # every stage pays at least the dispatch: the stage DP's bound rises above the plain one
            assert b.spaces["replicated"]["period_lb_s"] > plain.spaces["replicated"]["period_lb_s"] * kappa
    res = search(pr, SearchOptions(time_limit_s=1.0), terms=terms)
    assert (everything[:, 0] >= res.bounds.period_lb_s * (1 - 1e-9)).all()
    assert (everything[:, 1] >= res.bounds.latency_lb_s * (1 - 1e-9)).all()
    found = min(p.evaluation.period_s for p in res.front())
    assert found == pytest.approx(best, rel=1e-9)  # exact size: the search finds the full model's best period
    assert res.bounds.period_proved_optimal == (res.bounds.period_lb_s >= found * (1 - 1e-9))
    assert res.info["bound"]["model"].startswith("full")
    # an overlap term can shorten a period below the sum of its stage times: the bound is scaled down by it
    lapped = terms.replace(overlap={pr.pu_names[0]: 0.5})
    res = search(pr, SearchOptions(time_limit_s=1.0), terms=lapped)
    for ev in (evaluate(pr, p.mapping, lapped) for p in res.points):
        assert ev.period_s >= res.bounds.period_lb_s * (1 - 1e-9)


def test_stage_bound_prices_a_replicas_input_from_outside_its_stage():
    """A replica's producers sit outside its whole stage's PUs: a cheap hand-off between two replicas of one
    stage does not lower the bound (stage DP: each replica's input is taken from PUs outside the stage)."""
    from parapipe.cost.mapping import Mapping, ReplicaMapping, StageMapping
    from parapipe.cost.problem import MappingProblem
    from parapipe.search.stage_bound import stage_period_bound

    inf = np.inf
    alpha = np.array([[0.0, 1e-3, 1e-3], [1e-3, 0.0, 0.0], [1e-3, 0.0, 0.0]])  # p1 <-> p2 free, p0 -> them 1 ms
    pr = MappingProblem(["b0", "b1"], [(), (0,)], {(0, 1): 1.0}, ["p0", "p1", "p2"],
                        [[1e-4, 1e-2, 1e-2], [inf, 2e-3, 2e-3]], np.full((2, 3), 2.0), np.full(3, 0.1), 1.0,
                        alpha, np.full((3, 3), 1e15))
    best = Mapping((StageMapping(0, 1, (0,), (0,)),
                    StageMapping(1, 2, (1,), (1,), None, (ReplicaMapping((2,), (2,)),))))
    period = evaluate(pr, best).period_s
    assert period == pytest.approx(1.5e-3, rel=1e-6)
    assert stage_period_bound(pr) == pytest.approx(period, rel=1e-6)


def test_search_offers_whole_model_replicas_on_pu_groups_above_the_exact_size():
    """Above the exact size the replicated pass takes single-PU replicas only; the search still offers the whole
    model replicated over PU groups: here {p0, p1} (each runs every other block) beside p2, with a dispatch cost
    that makes many-stage pipelines pay, is the least period."""
    from parapipe.cost.mapping import Mapping, ReplicaMapping, StageMapping
    from parapipe.cost.problem import MappingProblem
    from parapipe.search.options import SearchOptions
    from parapipe.search.api import search

    n, inf = 12, np.inf
    t = np.array([[1e-3, inf, 1e-3] if v % 2 == 0 else [inf, 1e-3, 1e-3] for v in range(n)])
    pr = MappingProblem([f"b{v}" for v in range(n)], [()] + [(v - 1,) for v in range(1, n)],
                        {(v - 1, v): 1.0 for v in range(1, n)}, ["p0", "p1", "p2"], t, np.full((n, 3), 2.0),
                        np.full(3, 0.1), 1.0, np.full((3, 3), 1e-6), np.full((3, 3), 1e12))
    terms = PipelineTerms(dispatch_s=2e-3)
    whole = Mapping((StageMapping(0, n, (0, 1), tuple(v % 2 for v in range(n)), None,
                                  (ReplicaMapping((2,), (2,) * n),)),))
    want = evaluate(pr, whole, terms).period_s
    res = search(pr, SearchOptions(time_limit_s=1.0), terms=terms)
    best = min(res.front(), key=lambda p: p.objectives())
    assert best.evaluation.period_s <= want * (1 + 1e-9)
    assert any(len(view.pus) > 1 for st in best.mapping.stages for view in st.replica_stages()) and \
        best.mapping.replicated


def test_stage_bound_charges_a_single_pu_stage_its_largest_input_edge():
    """Every consumer of a single-PU stage sits on its one PU, so each producer's tensor goes once with its largest
    edge to the stage: the stage DP charges that edge, not the smallest."""
    from parapipe.cost.mapping import Mapping, StageMapping
    from parapipe.cost.problem import MappingProblem
    from parapipe.search.stage_bound import stage_time_bounds

    inf = np.inf
    pr = MappingProblem(["b0", "b1", "b2"], [(), (0,), (0,)], {(0, 1): 1.0, (0, 2): 1e6}, ["p0", "p1"],
                        [[1e-4, inf], [inf, 1e-3], [inf, 1e-3]], np.full((3, 2), 2.0), np.full(2, 0.1), 1.0,
                        np.full((2, 2), 1e-5), np.full((2, 2), 1e9))
    only = Mapping((StageMapping(0, 1, (0,), (0,)), StageMapping(1, 3, (1,), (1, 1))))
    period = evaluate(pr, only).period_s
    assert period == pytest.approx(1e-5 + 1e-3 + 2e-3, rel=1e-6)
    assert stage_time_bounds(pr)[0b10][1, 3] == pytest.approx(period, rel=1e-6)  # lb(b1..b2 on p1) is exact
