"""The workload cost model and search (parapipe/cost/workload.py, parapipe/search/workload.py) on tiny two-model
problems: the front against the front of every combination of every mapping, enumerated here."""
from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping, StageMapping
from parapipe.cost.pipeline_terms import PipelineTerms
from parapipe.cost.workload import evaluate_workload
from parapipe.search.api import search
from parapipe.search.pareto import pareto_mask
from parapipe.search.workload import workload_search
from search_cases import greedy_assignment, pu_groups, random_problem, sorted_rows


def every_mapping(pr):
    """Every composition into contiguous stages x every PU group per stage (PUs may repeat), each stage's
    assignment the greedy list schedule from its definition (search_cases), plus the single-model search's own
    points (its polished and replicated mappings): the candidates the workload search may combine."""
    groups = pu_groups(pr.n_pus)

    @lru_cache(maxsize=None)
    def stage(a, b, g):
        asg = greedy_assignment(pr, a, b, g)
        return None if asg is None else StageMapping(a, b, g, asg)

    out = []

    def extend(a, stages):
        if a == pr.n_blocks:
            out.append(Mapping(tuple(stages)))
            return
        for b in range(a + 1, pr.n_blocks + 1):
            for g in groups:
                st = stage(a, b, g)
                if st is not None:
                    extend(b, stages + [st])

    extend(0, [])
    return out + [p.mapping for p in search(pr).points]


def exhaustive_front(problems, rates, terms, axis):
    objs = np.array([evaluate_workload(problems, list(maps), rates, terms, axis).objectives()
                     for maps in itertools.product(*[every_mapping(pr) for pr in problems])])
    canon = np.array([[float(f"{v:.10g}") for v in row] for row in objs])
    return np.unique(canon[pareto_mask(canon)], axis=0)


TERMS = PipelineTerms(dispatch_s=2e-4, handoff_s=1e-4, invoke_s={"p1": 5e-4})


@pytest.mark.parametrize("seed, shapes, rates, terms, axis", [
    (1, ("chain", "dag"), (2.0, 1.0), None, "max"),
    (2, ("diamond", "chain"), (1.0, 3.0), TERMS, "weighted-mean"),
])
def test_front_equals_the_exhaustive_front(seed, shapes, rates, terms, axis):
    problems = [random_problem(3, 2, 10 * seed + i, shape) for i, shape in enumerate(shapes)]
    res = workload_search(problems, list(rates), terms=terms, latency_axis=axis)
    assert res.info["exact"] is True
    front = np.unique(np.array([[float(f"{v:.10g}") for v in p.objectives()] for p in res.front()]), axis=0)
    np.testing.assert_allclose(sorted_rows(front), sorted_rows(exhaustive_front(problems, list(rates), terms, axis)),
                               rtol=1e-9)
    # the bounds hold, and every baseline is a combination the front covers
    assert all(p.evaluation.period_s >= res.period_lb_s for p in res.points)
    assert all(p.evaluation.latency_s >= res.latency_lb_s * (1 - 1e-9) for p in res.points)
    assert {p.strategy for p in res.points} == {"parapipe", "separate", "split", "whole"}
    for b in res.points:
        assert any(all(x <= y * (1 + 1e-9) for x, y in zip(f.objectives(), b.objectives())) for f in res.front())


def test_one_model_is_the_single_model_cost_and_the_board_is_counted_once():
    pr = random_problem(4, 2, 7, "dag")
    res = search(pr)
    terms = PipelineTerms(dispatch_s=1e-4, contention=0.5, memory_bandwidth_bytes_per_s=1e9, sharing=0.1)
    for p in res.points[:6]:
        for t in (None, terms):
            ev = evaluate(pr, p.mapping, t)
            w = evaluate_workload([pr], [p.mapping], [1.0], t)
            if p.mapping.replicated and t is not None:
                continue
            np.testing.assert_allclose(w.objectives(), (ev.period_s, ev.latency_s, ev.energy_j), rtol=1e-12)
    # two models whole on their own PUs: idle and static power once per workload period, not once per model
    a, b = random_problem(3, 2, 8, "chain"), random_problem(3, 2, 9, "chain")
    a.time_s[:] = 1e-3
    b.time_s[:] = 1e-3
    b.idle_power_w = a.idle_power_w  # one SoC: one board
    ma, mb = (Mapping((StageMapping(0, 3, (p,), (p,) * 3),)) for p in (0, 1))
    w = evaluate_workload([a, b], [ma, mb], [1.0, 1.0])
    ea, eb = evaluate(a, ma), evaluate(b, mb)
    board_w = float(a.idle_power_w.sum()) + a.static_power_w
    assert w.period_s == pytest.approx(3e-3)
    assert w.energy_j == pytest.approx(ea.energy_j + eb.energy_j - board_w * 3e-3)
    # sharing one PU: busy is the rate-weighted sum
    w2 = evaluate_workload([a, b], [ma, ma], [2.0, 1.0])
    assert w2.period_s == pytest.approx(9e-3) and w2.latency_s_per_model == pytest.approx([3e-3, 3e-3])


def test_the_per_pu_dp_front_holds_every_pu_subsets_front():
    """One DP pass with ``per_pu_front`` (disjoint groups) gives, for every subset S of the PUs, a mapping on
    PUs within S at least as good as each point of the DP's front restricted to S's groups."""
    from parapipe.search.dp import DPOptions, dp_front
    from search_cases import pu_groups

    pr = random_problem(5, 3, 4, "dag")
    wide = dp_front(pr, DPOptions(per_pu_front=10 ** 6))
    used = [{p for st in m.stages for p in st.all_pus()} for m in wide.mappings]
    for s in pu_groups(pr.n_pus):
        try:
            sub = dp_front(pr, DPOptions(groups=[g for g in pu_groups(pr.n_pus) if set(g) <= set(s)]))
        except Exception:
            continue
        for row in sub.objectives:
            assert any(u <= set(s) and np.all(o <= row * (1 + 1e-9)) for u, o in zip(used, wide.objectives)), s


def with_points(pr, seed, transition_s):
    """``pr`` with two operating points per PU: the lower at half the frequency, a block's time
    ``t·(c/0.5 + (1 - c))`` with a random compute share ``c``, dynamic power ∝ V²f with V 0.7 then 1."""
    from parapipe.cost.problem import MappingProblem, PUOperatingPoints

    rng = np.random.default_rng(seed)
    tables = []
    for p in range(pr.n_pus):
        rel, volt = np.array([0.5, 1.0]), np.array([0.7, 1.0])
        c = rng.uniform(0.3, 1.0, pr.n_blocks)[:, None]
        t = pr.time_s[:, p:p + 1] * (c / rel[None, :] + (1 - c))
        t[:, -1] = pr.time_s[:, p]
        dyn = (pr.active_power_w[:, p:p + 1] - pr.idle_power_w[p]) * (volt ** 2 * rel)[None, :]
        tables.append(PUOperatingPoints(tuple(1e9 * rel), t, dyn + pr.idle_power_w[p], transition_s))
    return MappingProblem(pr.block_names, pr.preds, pr.edge_nbytes, pr.pu_names, pr.time_s, pr.active_power_w,
                          pr.idle_power_w, pr.static_power_w, pr.alpha_s, pr.beta_bytes_per_s, name=pr.name,
                          operating_points=tables)


def every_mapping_at_points(pr):
    """Every composition into contiguous stages x every PU group per stage x every operating point of each of
    the stage's PUs, each stage list-scheduled greedily on the problem at its points (search_cases), plus the
    single-model search's own points."""
    groups = pu_groups(pr.n_pus)

    @lru_cache(maxsize=None)
    def stages(a, b, g):
        out = []
        for ops in itertools.product(*[range(pr.n_operating_points(p)) for p in g]):
            asg = greedy_assignment(pr.at_operating_points(tuple(zip(g, ops))), a, b, g)
            if asg is not None:
                top = all(o == pr.max_op(p) for p, o in zip(g, ops))
                out.append(StageMapping(a, b, g, asg, ops=None if top else tuple(ops)))
        return out

    out = []

    def extend(a, sts):
        if a == pr.n_blocks:
            out.append(Mapping(tuple(sts)))
            return
        for b in range(a + 1, pr.n_blocks + 1):
            for g in groups:
                for st in stages(a, b, g):
                    extend(b, sts + [st])

    extend(0, [])
    return out + [p.mapping for p in search(pr).points]


@pytest.mark.parametrize("seed, rates, axis", [(3, (1.0, 2.0), "max"), (5, (2.0, 1.0), "weighted-mean")])
def test_front_with_operating_points_equals_the_exhaustive_front(seed, rates, axis):
    """Two points per PU and 1 ms per switch (about a block's time): models sharing a PU at different points pay
    the hand-over switches, so the front must weigh running a shared PU at one point."""
    problems = [with_points(random_problem(2, 2, 10 * seed + i, shape), seed + i, 1e-3)
                for i, shape in enumerate(("chain", "dag"))]
    res = workload_search(problems, list(rates), latency_axis=axis)
    assert res.info["exact"] is True
    assert res.info["operating_point_round"]["done"] is False  # every mapping x point was a candidate
    objs = np.array([evaluate_workload(problems, list(maps), list(rates), None, axis).objectives()
                     for maps in itertools.product(*[every_mapping_at_points(pr) for pr in problems])])
    canon = np.array([[float(f"{v:.10g}") for v in row] for row in objs])
    expect = np.unique(canon[pareto_mask(canon)], axis=0)
    front = np.unique(np.array([[float(f"{v:.10g}") for v in p.objectives()] for p in res.front()]), axis=0)
    np.testing.assert_allclose(sorted_rows(front), sorted_rows(expect), rtol=1e-9)
    # the front uses the lower points somewhere (else the test would not test them)
    assert any(mp.has_ops for p in res.front() for mp in p.mappings)


def test_front_points_meet_the_latency_bounds_and_the_stage_limit():
    """A baseline that breaks a model's latency bound stays a baseline (never Pareto-marked, never copied into
    the front, recorded in ``baselines_breaking``); with ``max_stages`` every point of the front, and every
    point of a single-model search, has at most that many stages."""
    from parapipe.search.options import SearchOptions

    problems = [random_problem(4, 3, 10, "chain"), random_problem(4, 3, 11, "dag")]
    bounds = []
    for pr in problems:  # halfway between the least latency and the best-throughput point's
        r = search(pr)
        bounds.append((r.best("throughput").evaluation.latency_s + r.best("latency").evaluation.latency_s) / 2)
    res = workload_search(problems, [1.0, 1.0], latency_bounds_s=bounds)
    sep = next(p for p in res.points if p.strategy == "separate")
    assert any(lat > b for lat, b in zip(sep.evaluation.latency_s_per_model, bounds))
    assert not sep.pareto and "separate" in res.info["baselines_breaking"]
    assert all(lat <= b * (1 + 1e-9) for p in res.front() for lat, b in zip(p.evaluation.latency_s_per_model, bounds))
    assert all(tuple(p.mappings) != tuple(sep.mappings) for p in res.front())
    for p in res.points:
        if p.strategy in res.info["baselines_breaking"]:
            assert not p.pareto
    res1 = workload_search(problems, [1.0, 1.0], SearchOptions(max_stages=1))
    assert res1.front() and all(len(m.stages) == 1 for p in res1.front() for m in p.mappings)
    assert all(len(m.stages) == 1 for p in res1.points if p.pareto for m in p.mappings)
    assert all(len(p.mapping.stages) == 1 for p in search(problems[0], SearchOptions(max_stages=1)).points)


def test_an_infeasible_latency_bound_gives_the_least_latency_and_a_missing_baseline_says_why():
    from parapipe.search.workload import LatencyBoundError

    problems = [random_problem(4, 3, 20, "chain"), random_problem(4, 3, 21, "dag")]
    with pytest.raises(LatencyBoundError) as err:
        workload_search(problems, [1.0, 1.0], latency_bounds_s=[None, 1e-6])
    assert err.value.model_index == 1 and err.value.best_latency_s > 1e-6
    assert "least latency it reaches is" in str(err.value)
    for pr in problems:  # both models need p0 and p1: no split of the PUs runs them both
        pr.time_s[0, 1:] = np.inf
        pr.time_s[1, [0, 2]] = np.inf
    res = workload_search(problems, [1.0, 1.0])
    assert "split" in res.info["baselines_missing"] and "split" not in {p.strategy for p in res.points}
