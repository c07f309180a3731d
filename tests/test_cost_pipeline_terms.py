"""The pipeline-level terms of the cost model (parapipe/cost/pipeline_terms.py): hand-worked numbers for each
term, and the defaults reproduce the plain model bit for bit on the zoo models."""
from __future__ import annotations

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping, StageMapping, mapping_from_pu_list
from parapipe.cost.pipeline_terms import DEFAULT_TERMS, PipelineTerms, terms_from_soc
from parapipe.cost.problem import MappingProblem


def shared_pu_problem() -> MappingProblem:
    """b0 -> b1 -> b2 with free hand-offs; mapped p0 | p1 | p0, the stage times are 2, 3 and 4 s.

    DRAM bytes per block 200, 300, 100; active power 2 W everywhere, idle 0.1 / 0.2 W, static 1 W.
    """
    inf = float("inf")
    return MappingProblem(
        block_names=["b0", "b1", "b2"], preds=[(), (0,), (1,)], edge_nbytes={(0, 1): 0.0, (1, 2): 0.0},
        pu_names=["p0", "p1"], time_s=[[2, 2], [3, 3], [4, 4]], active_power_w=[[2, 2]] * 3,
        idle_power_w=[0.1, 0.2], static_power_w=1.0, alpha_s=[[0, 0], [0, 0]], beta_bytes_per_s=[[inf] * 2] * 2,
        name="shared", block_nbytes=[[200, 200], [300, 300], [100, 100]])


MAPPING = mapping_from_pu_list(shared_pu_problem(), [0, 1, 0])


def figures(ev):
    return ev.period_s, ev.latency_s, ev.energy_j


def test_plain_model_of_the_example():
    # busy p0 = 2 + 4 = 6 s, p1 = 3 s; latency 9 s; E_dyn = 2·1.9 + 3·1.8 + 4·1.9 = 16.8 J; E = 16.8 + 1.3·6
    assert figures(evaluate(shared_pu_problem(), MAPPING)) == pytest.approx((6.0, 9.0, 24.6))


def test_overlap_puts_the_busy_time_between_the_largest_stage_and_the_sum():
    pr = shared_pu_problem()
    half = evaluate(pr, MAPPING, PipelineTerms(overlap={"p0": 0.5}))
    assert half.busy_s.tolist() == pytest.approx([4 + 0.5 * 2, 3.0])  # max + (1 - φ)(sum - max)
    assert half.latency_s == pytest.approx(9.0)  # one frame at a time: overlap changes nothing
    full = evaluate(pr, MAPPING, PipelineTerms(overlap={"p0": 1.0}))
    assert full.period_s == pytest.approx(4.0)
    assert full.energy_j == pytest.approx(16.8 + 1.3 * 4.0)
    other = evaluate(pr, MAPPING, PipelineTerms(overlap={"p1": 1.0}))  # p1 serves one stage: no effect
    assert figures(other) == pytest.approx((6.0, 9.0, 24.6))


def test_dispatch_is_paid_once_per_stage_and_slowdown_scales_the_work():
    pr = shared_pu_problem()
    ev = evaluate(pr, MAPPING, PipelineTerms(dispatch_s=0.1))
    assert [r.time_s for r in ev.stage_results] == pytest.approx([2.1, 3.1, 4.1])
    assert (ev.period_s, ev.latency_s) == pytest.approx((6.2, 9.3))
    assert ev.energy_j == pytest.approx(16.8 + 1.3 * 6.2)  # dispatch draws idle power only
    ev = evaluate(pr, MAPPING, PipelineTerms(slowdown=2.0))
    assert figures(ev) == pytest.approx((12.0, 18.0, 2 * 16.8 + 1.3 * 12.0))
    assert ev.stage_results[2].finish_s[2] == pytest.approx(8.0)


def test_invocation_cost_is_paid_per_stage_on_the_pu_and_a_multi_pu_stage_pays_its_largest():
    pr = shared_pu_problem()
    terms = PipelineTerms(dispatch_s=0.1, invoke_s={"p1": 0.5})
    ev = evaluate(pr, MAPPING, terms)  # p0 | p1 | p0: only the p1 stage invokes a costly runtime
    assert [r.time_s for r in ev.stage_results] == pytest.approx([2.1, 3.6, 4.1])
    assert (ev.period_s, ev.latency_s) == pytest.approx((6.2, 9.8))
    assert ev.energy_j == pytest.approx(16.8 + 1.3 * 6.2)  # the invocation draws idle power only
    both = Mapping((StageMapping(0, 2, (0, 1), (0, 1)), StageMapping(2, 3, (0,), (0,))))
    plain = evaluate(pr, both)
    ev = evaluate(pr, both, PipelineTerms(invoke_s={"p0": 0.2, "p1": 0.5}))
    assert ev.stage_results[0].time_s == pytest.approx(plain.stage_results[0].time_s + 0.5)
    assert ev.stage_results[1].time_s == pytest.approx(plain.stage_results[1].time_s + 0.2)
    assert terms.to_json()["invoke_s"] == {"p1": 0.5} and "invoke_s" not in DEFAULT_TERMS.to_json()
    assert PipelineTerms(invoke_s={"p0": 0.0}).is_default()
    with pytest.raises(ValueError, match="invoke_s"):
        PipelineTerms(invoke_s={"p0": -1.0})


def test_invocation_cost_reaches_every_replica_of_a_replicated_stage():
    from parapipe.cost.mapping import ReplicaMapping

    pr = shared_pu_problem()
    rep = Mapping((StageMapping(0, 3, (0,), (0, 0, 0), replicas=(ReplicaMapping((1,), (1, 1, 1)),)),))
    plain, with_invoke = evaluate(pr, rep), evaluate(pr, rep, PipelineTerms(invoke_s={"p0": 1.0, "p1": 1.0}))
    assert [r.time_s for r in with_invoke.stage_results[0].replicas] == pytest.approx(
        [r.time_s + 1.0 for r in plain.stage_results[0].replicas])


def test_profile_invoke_s_loads_saves_and_names_unknown_pus(tmp_path):
    from parapipe.errors import InputError
    from parapipe.soc import load_soc
    from parapipe.soc.loader import save_soc

    soc = load_soc("amlogic_a311d")
    assert dict(soc.pipeline.invoke_s) == {"gpu": 1.0e-3, "npu": 5.0e-4}
    assert terms_from_soc(soc).invoke_s == {"gpu": 1.0e-3, "npu": 5.0e-4}
    path = save_soc(soc, tmp_path / "a.yaml")
    again = load_soc(str(path))
    assert again.pipeline == soc.pipeline and again.provenance["pipeline.invoke_s.gpu"].confidence == "low"
    assert dict(soc.restrict(["big", "gpu"]).pipeline.invoke_s) == {"gpu": 1.0e-3}
    bad = path.read_text().replace("invoke_s:\n    gpu:", "invoke_s:\n    tpu:")
    (tmp_path / "b.yaml").write_text(bad)
    with pytest.raises(InputError, match=r"pipeline.invoke_s.tpu: unknown PU 'tpu'"):
        load_soc(str(tmp_path / "b.yaml"))


def test_contention_from_the_bandwidth_co_running_stages_demand():
    # P0 = 6 s, B = 100 B/s. Stage 0 (p0) runs with stage 1 (p1, 300 B): ρ = 300 / 600 = 0.5, f = 1.5.
    # Stage 1 runs with stages 0 and 2 (300 B): ρ = 0.5. Stage 2 with stage 1: 0.5.
    # T' = 3, 4.5, 6 → busy p0 = 9, p1 = 4.5; idle latency has no co-runner: 9 s; E_dyn × 1.5 = 25.2 J.
    pr = shared_pu_problem()
    ev = evaluate(pr, MAPPING, PipelineTerms(contention=1.0, memory_bandwidth_bytes_per_s=100.0))
    assert [r.time_s for r in ev.stage_results] == pytest.approx([3.0, 4.5, 6.0])
    assert figures(ev) == pytest.approx((9.0, 9.0, 25.2 + 1.3 * 9.0))
    single = mapping_from_pu_list(pr, [0, 0, 0])  # one stage: nothing runs at once with it
    assert figures(evaluate(pr, single, PipelineTerms(contention=1.0, memory_bandwidth_bytes_per_s=100.0))) \
        == pytest.approx(figures(evaluate(pr, single)))


def test_contention_without_block_bytes_uses_the_edges():
    pr = shared_pu_problem()
    pr.block_nbytes = None
    pr.edge_nbytes = {(0, 1): 60.0, (1, 2): 30.0}
    pr.alpha_s = np.zeros((2, 2))
    # traffic: stage0 = out 60; stage1 = in 60 + out 30 = 90; stage2 = in 30. P0 = 6 s, B = 10 B/s.
    ev = evaluate(pr, MAPPING, PipelineTerms(contention=1.0, memory_bandwidth_bytes_per_s=10.0))
    rho = [90 / 60, (60 + 30) / 60, 90 / 60]
    assert [r.time_s for r in ev.stage_results] == pytest.approx([t * (1 + r) for t, r in zip([2, 3, 4], rho)])


def test_handoff_costs_every_tensor_handed_inside_a_multi_pu_stage_and_reschedules_it():
    pr = shared_pu_problem()
    pr.edge_nbytes = {(0, 1): 100.0, (1, 2): 100.0}  # free (alpha 0, beta inf) but real hand-offs
    ev = evaluate(pr, MAPPING, PipelineTerms(handoff_s=0.5))  # between stages: the dispatch's part, not this
    assert figures(ev) == figures(evaluate(pr, MAPPING))
    # one stage on {p0, p1}: b0 -> {b1 on p1, b2} -> b3 (times 1, 4, 3, 1 s): b1 starts at 1 + h and b3 waits for
    # b1's output to come back: makespan 6 + 2h
    inf = float("inf")
    diamond = MappingProblem(
        block_names=["b0", "b1", "b2", "b3"], preds=[(), (0,), (0,), (1, 2)],
        edge_nbytes={(0, 1): 8.0, (0, 2): 8.0, (1, 3): 8.0, (2, 3): 8.0}, pu_names=["p0", "p1"],
        time_s=[[1, 1], [4, 4], [3, 3], [1, 1]], active_power_w=[[2, 2]] * 4, idle_power_w=[0, 0],
        static_power_w=0.0, alpha_s=[[0, 0], [0, 0]], beta_bytes_per_s=[[inf] * 2] * 2)
    par = Mapping((StageMapping(0, 4, (0, 1), (0, 1, 0, 0)),))
    assert evaluate(diamond, par).period_s == pytest.approx(6.0)
    ev = evaluate(diamond, par, PipelineTerms(handoff_s=0.5))
    assert ev.period_s == pytest.approx(7.0) and ev.stage_results[0].start_s[1] == pytest.approx(1.5)
    assert ev.stage_results[0].active_s.tolist() == pytest.approx([1 + 3 + 1, 4])  # compute only, as evaluate
    two = Mapping((StageMapping(0, 1, (0,), (0,)), StageMapping(1, 4, (0, 1), (1, 0, 0))))  # b0 | {b1 on p1, b2, b3}
    ev = evaluate(diamond, two, PipelineTerms(handoff_s=0.5))
    plain = evaluate(diamond, two)
    assert ev.stage_results[1].input_s == plain.stage_results[1].input_s  # the hop into the stage keeps its cost
    assert ev.stage_results[1].makespan_s == pytest.approx(plain.stage_results[1].makespan_s + 0.5)


def test_sharing_slows_only_the_stages_of_a_pu_that_serves_several():
    pr = shared_pu_problem()
    ev = evaluate(pr, MAPPING, PipelineTerms(sharing=0.5))
    # p0 serves stages 0 and 2 (x 1.5); p1 only stage 1
    assert [r.time_s for r in ev.stage_results] == pytest.approx([3.0, 3.0, 6.0])
    assert ev.busy_s.tolist() == pytest.approx([9.0, 3.0])
    assert (ev.period_s, ev.latency_s) == pytest.approx((9.0, 12.0))
    assert ev.energy_j == pytest.approx(2 * 1.9 * 1.5 + 3 * 1.8 + 4 * 1.9 * 1.5 + 1.3 * 9.0)
    own = mapping_from_pu_list(pr, [0, 1, 1])  # p0 | p1 (merged): no PU serves two stages
    assert figures(evaluate(pr, own, PipelineTerms(sharing=0.5))) == pytest.approx(figures(evaluate(pr, own)))
    with pytest.raises(ValueError, match="sharing"):
        PipelineTerms(sharing=-0.1)
    assert not PipelineTerms(sharing=0.1).is_default()


def test_terms_validation():
    with pytest.raises(ValueError, match="overlap"):
        PipelineTerms(overlap={"p0": 1.5})
    with pytest.raises(ValueError, match="memory_bandwidth"):
        PipelineTerms(contention=0.5)
    with pytest.raises(ValueError, match="slowdown"):
        PipelineTerms(slowdown=0.0)
    assert DEFAULT_TERMS.is_default() and not PipelineTerms(dispatch_s=1e-4).is_default()


def _random_mappings(problem: MappingProblem, rng: np.random.Generator, count: int):
    """Random PU lists (a PU may serve several stages) and random two-PU stages (intra-stage parallelism)."""
    feasible = [np.flatnonzero(np.isfinite(problem.time_s[j])) for j in range(problem.n_blocks)]
    out = []
    for i in range(count):
        pus = [int(rng.choice(f)) for f in feasible]
        if i % 2:
            out.append(mapping_from_pu_list(problem, pus))
            continue
        cuts = sorted(rng.choice(np.arange(1, problem.n_blocks), size=min(3, problem.n_blocks - 1), replace=False))
        stages, start = [], 0
        for stop in list(cuts) + [problem.n_blocks]:
            assign = tuple(pus[start:stop])
            stages.append(StageMapping(start, stop, tuple(sorted(set(assign))), assign))
            start = stop
        out.append(Mapping(tuple(stages)))
    return out


@pytest.mark.parametrize("model,soc", [("squeezenet", "amlogic_a311d"), ("inception_v1", "black_sesame_a1000"),
                                       ("resnet50", "amlogic_a311d")])
def test_default_terms_reproduce_the_plain_model_bit_for_bit(zoo_opgraph, model, soc):
    from parapipe.cost.roofline import problem_from_blocks
    from parapipe.graph.coarsen import coarsen
    from parapipe.soc import load_soc

    soc_obj = load_soc(soc)
    problem = problem_from_blocks(coarsen(zoo_opgraph(model), max_blocks=48), soc_obj, name=model)
    # bundled profiles carry priors in their pipeline: section; without one, a profile gives the default terms
    assert not terms_from_soc(soc_obj).is_default()
    terms = terms_from_soc(soc_obj.model_copy(update={"pipeline": None}))
    assert terms.is_default() and terms.memory_bandwidth_bytes_per_s == soc_obj.memory_bandwidth_bytes_per_s
    for m in _random_mappings(problem, np.random.default_rng(3), 40):
        plain, full = evaluate(problem, m), evaluate(problem, m, terms)
        assert (full.period_s, full.latency_s, full.energy_j) == (plain.period_s, plain.latency_s, plain.energy_j)
        assert full.busy_s.tolist() == plain.busy_s.tolist() and full.active_s.tolist() == plain.active_s.tolist()
        for a, b in zip(full.stage_results, plain.stage_results):
            assert (a.time_s, a.input_s, a.makespan_s, a.dyn_energy_j) == (b.time_s, b.input_s, b.makespan_s,
                                                                          b.dyn_energy_j)
            assert a.start_s == b.start_s and a.finish_s == b.finish_s
        # and a non-default value does move the figures (the comparison above can fail)
        if len(m.stages) > 1:
            assert evaluate(problem, m, terms.replace(dispatch_s=1e-3)).latency_s > plain.latency_s


def test_search_reports_every_point_under_the_full_model():
    """The search reports (and Pareto-filters) under the terms it is given."""
    from search_cases import random_problem

    from parapipe.search.options import SearchOptions
    from parapipe.search.api import search

    pr = random_problem(6, 3, 5, "diamond")
    opts = SearchOptions(time_limit_s=10, polish=False)
    plain = search(pr, opts)
    terms = PipelineTerms(dispatch_s=2e-4, slowdown=1.3, overlap={pr.pu_names[0]: 0.5})
    full = search(pr, opts, terms=terms)
    assert full.info["cost_terms"]["dispatch_s"] == 2e-4 and "cost_terms" not in plain.info
    changed = 0
    for p in full.points:
        want = evaluate(pr, p.mapping, terms)
        assert (p.evaluation.period_s, p.evaluation.latency_s) == (want.period_s, want.latency_s)
        changed += p.evaluation.period_s != evaluate(pr, p.mapping).period_s
    assert changed > 0
    # default terms: the same front as no terms at all
    same = search(pr, opts, terms=DEFAULT_TERMS)
    assert [q.objectives() for q in same.points] == [q.objectives() for q in plain.points]


@pytest.mark.parametrize("seed", range(4))
def test_search_bounds_hold_under_the_terms(seed):
    """The reported bounds are of the full model: at least the plain model's × κ (every stage also pays its
    dispatch), and every point found (pipelines, replicated, baselines) under the terms lies above them; with an
    overlap term they are scaled down by (1 - φ) and still hold."""
    from parapipe.search.options import SearchOptions
    from parapipe.search.api import search
    from search_cases import random_problem

    pr = random_problem(6, 3, 7300 + seed, "dag")
    pr.time_s = np.where(np.isfinite(pr.time_s), pr.time_s, 5e-3)  # every PU runs the whole model: replicas
    opts = SearchOptions(time_limit_s=1.0)
    plain = search(pr, opts)
    terms = PipelineTerms(slowdown=1.2, dispatch_s=1e-3, sharing=0.1, handoff_s=2e-4)
    res = search(pr, opts, terms=terms)
    assert res.bounds.period_lb_s >= 1.2 * plain.bounds.period_lb_s * (1 - 1e-9) or res.bounds.period_proved_optimal
    assert res.bounds.latency_lb_s >= 1.2 * plain.bounds.latency_lb_s + 1e-3 * (1 - 1e-9)
    assert any(p.mapping.replicated for p in res.points)
    for p in res.points:
        assert p.evaluation.period_s >= res.bounds.period_lb_s * (1 - 1e-9)
        assert p.evaluation.latency_s >= res.bounds.latency_lb_s * (1 - 1e-9)
    best = min(p.evaluation.period_s for p in res.front())
    assert res.bounds.period_proved_optimal == (res.bounds.period_lb_s >= best * (1 - 1e-9))
    overlapped = search(pr, opts, terms=terms.replace(overlap={"p0": 0.5}))
    for p in overlapped.points:
        assert p.evaluation.period_s >= overlapped.bounds.period_lb_s * (1 - 1e-9)
