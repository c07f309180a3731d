"""Replicated stages in the cost model (parapipe/cost/replication.py, evaluate.py), worked out by hand.

Same conventions as tests/test_cost.py: round numbers, every expected value derivable on paper in the comments.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping, ReplicaMapping, StageMapping
from parapipe.cost.pipeline_terms import PipelineTerms
from parapipe.mapping.index import mapping_from_point, parse_pu_list
from parapipe.cost.problem import MappingProblem
from parapipe.cost.replication import (mean_and_worst_input_s, memory_violations, pu_weight_nbytes,
                                       replica_shares, replicated_energy_j, replicated_period_s)
from parapipe.errors import InputError
from tests.test_cost import IDLE_STATIC, chain3, objectives


def test_formulas_by_hand():
    # T = 6 s and 7 s: shares (1/6, 1/7) / (13/42) = 7/13, 6/13; period 42/13 s (busy time and latency of a
    # replicated stage are checked through evaluate in test_whole_model_replicated_on_two_pus).
    assert replica_shares([6, 7]) == pytest.approx((7 / 13, 6 / 13))
    assert replicated_period_s([6, 7]) == pytest.approx(42 / 13)
    assert replicated_energy_j([10.0, 20.0], [0.25, 0.75]) == pytest.approx(17.5)
    # One replica is the plain stage; a replica that cannot run gets no frames.
    assert (replicated_period_s([5.0]), replica_shares([5.0])) == (5.0, (1.0,))
    assert replica_shares([2.0, np.inf]) == (1.0, 0.0)
    assert replicated_period_s([2.0, np.inf]) == 2.0
    assert replicated_period_s([np.inf, np.inf]) == np.inf
    assert replica_shares([0.0, 3.0]) == (1.0, 0.0) and replicated_period_s([0.0, 3.0]) == 0.0
    with pytest.raises(ValueError):
        replica_shares([])
    with pytest.raises(ValueError):
        replica_shares([1.0, -1.0])


def test_mean_and_worst_input_by_hand():
    # Two tensors from stage 0 (replicas with shares 0.25/0.75: 1 s / 3 s and 2 s / 0 s from each replica)
    # and one from the non-replicated stage 1 (0.5 s).
    # mean = 0.25·1 + 0.75·3 + 0.25·2 + 0.75·0 + 0.5 = 0.25 + 2.25 + 0.5 + 0.5 = 3.5;
    # worst: stage 0 per replica 1 + 2 = 3 and 3 + 0 = 3 → 3 (not 3 + 2 = 5: one replica makes a frame's
    # tensors), plus 0.5 → 3.5.
    terms = [(0, (0.25, 0.75), (1.0, 3.0)), (0, (0.25, 0.75), (2.0, 0.0)), (1, (1.0,), (0.5,))]
    assert mean_and_worst_input_s(terms) == pytest.approx((3.5, 3.5))
    assert mean_and_worst_input_s([(0, (0.5, 0.5), (4.0, 0.0))]) == pytest.approx((2.0, 4.0))
    assert mean_and_worst_input_s([]) == (0.0, 0)


def test_whole_model_replicated_on_two_pus():
    # chain3 all on p0: 6 s (E_dyn 10.9 J, tests/test_cost.py); all on p1: 2 + 1 + 4 = 7 s,
    # E_dyn = 2·(3 − 0.2) + 1·(3.5 − 0.2) + 4·(4 − 0.2) = 5.6 + 3.3 + 15.2 = 24.1 J.
    # Shares 7/13 on p0, 6/13 on p1; period 42/13; both PUs busy 42/13; latency mean 84/13, worst 7;
    # E = (7/13·10.9 + 6/13·24.1) + 1.3·42/13 = (76.3 + 144.6 + 54.6)/13 = 275.5/13 J.
    pr = chain3()
    m = Mapping((StageMapping(0, 3, (0,), (0, 0, 0), replicas=(ReplicaMapping((1,), (1, 1, 1)),)),))
    ev = evaluate(pr, m)
    assert m.replicated
    assert objectives(ev) == pytest.approx((42 / 13, 84 / 13, 275.5 / 13))
    assert ev.latency_worst_s == pytest.approx(7.0)
    assert ev.busy_s.tolist() == pytest.approx([42 / 13, 42 / 13])
    # Each PU computes its share of the frames: p0 7/13·6 = 42/13, p1 6/13·7 = 42/13.
    assert ev.active_s.tolist() == pytest.approx([42 / 13, 42 / 13])
    (res,) = ev.stage_results
    assert res.shares == pytest.approx((7 / 13, 6 / 13))
    assert [r.time_s for r in res.replicas] == pytest.approx([6.0, 7.0])
    assert (res.period_s, res.time_s, res.worst_time_s) == pytest.approx((42 / 13, 84 / 13, 7.0))
    assert ev.throughput_per_s == pytest.approx(13 / 42)  # 1/6 + 1/7 frames per second
    # The unreplicated mapping is unchanged by the new fields.
    plain = evaluate(pr, Mapping((StageMapping(0, 3, (0,), (0, 0, 0)),)))
    assert objectives(plain) == pytest.approx((6.0, 6.0, 18.7)) and plain.latency_worst_s == plain.latency_s


def test_replicated_mapping_takes_slowdown_and_dispatch():
    # chain3 replicated on p0 (6 s) and p1 (7 s) with κ = 1.5, d = 0.5 s: T = 9.5 s and 11 s;
    # shares 11/20.5, 9.5/20.5; period 1 / (1/9.5 + 1/11) = 104.5/20.5; mean latency = 2 · period (each
    # replica's w·T is the period); E_dyn = 1.5 · (11·10.9 + 9.5·24.1)/20.5; E = E_dyn + 1.3 · period.
    # Sharing, hand-off and overlap do not arise (one stage, disjoint replicas): they change nothing.
    pr = chain3()
    m = Mapping((StageMapping(0, 3, (0,), (0, 0, 0), replicas=(ReplicaMapping((1,), (1, 1, 1)),)),))
    period = 104.5 / 20.5
    e_dyn = 1.5 * (11 * 10.9 + 9.5 * 24.1) / 20.5
    for extra in ({}, {"sharing": 0.3, "handoff_s": 2.0, "overlap": {"p0": 0.5}}):
        ev = evaluate(pr, m, PipelineTerms(slowdown=1.5, dispatch_s=0.5, **extra))
        assert objectives(ev) == pytest.approx((period, 2 * period, e_dyn + 1.3 * period))
        assert [r.time_s for r in ev.stage_results[0].replicas] == pytest.approx([9.5, 11.0])
    # A replicated stage feeding a plain one (the next test's case) with d = 0.25 s: replicas 1.25 s and 2.25 s,
    # shares 9/14, 5/14, period contribution 1.25·2.25/3.5; stage B: mean input 9/14 · 1.5 + 0.25, makespan 5.
    m2 = Mapping((StageMapping(0, 1, (0,), (0,), replicas=(ReplicaMapping((1,), (1,)),)), StageMapping(1, 3, (1,), (1, 1))))
    ev = evaluate(pr, m2, PipelineTerms(dispatch_s=0.25))
    t_b = 9 / 14 * 1.5 + 0.25 + 5
    assert ev.period_s == pytest.approx(1.25 * 2.25 / 3.5 + t_b)
    assert ev.latency_s == pytest.approx(2 * 1.25 * 2.25 / 3.5 + t_b)
    # default terms: the plain model, bit for bit
    assert objectives(evaluate(pr, m2, PipelineTerms())) == objectives(evaluate(pr, m2))


def test_replicated_stage_feeding_a_plain_stage():
    # Stage A = b0 replicated on p0 (1 s) and p1 (2 s): shares 2/3, 1/3; period contribution 2/3 s.
    # Stage B = b1, b2 on p1: b0's output comes from p0 on 2/3 of the frames (0.5 + 100/100 = 1.5 s) and is
    # already on p1 otherwise: mean input 1.0 s, worst 1.5 s; makespan 1 + 4 = 5 → T_B 6 (worst 6.5).
    # busy p0 = 2/3; busy p1 = 2/3 + 6 = 20/3 = period. latency mean 2/3·1 + 1/3·2 + 6 = 22/3, worst 2 + 6.5.
    # E_dyn = (2/3·1.9 + 1/3·5.6) + 3.3 + 15.2 = 9.4/3 + 18.5; E = E_dyn + 1.3·20/3 = 9.4/3 + 18.5 + 26/3 = 30.3.
    pr = chain3()
    m = Mapping((StageMapping(0, 1, (0,), (0,), replicas=(ReplicaMapping((1,), (1,)),)),
                 StageMapping(1, 3, (1,), (1, 1))))
    ev = evaluate(pr, m)
    assert objectives(ev) == pytest.approx((20 / 3, 22 / 3, 30.3))
    assert ev.latency_worst_s == pytest.approx(8.5)
    assert ev.busy_s.tolist() == pytest.approx([2 / 3, 20 / 3])
    a, b = ev.stage_results
    assert (b.input_s, b.makespan_s, b.time_s, b.worst_time_s) == pytest.approx((1.0, 5.0, 6.0, 6.5))
    # p1 receives for 2/3 of the frames 1.5 s: active = 1/3·2 (b0) + 1.0 (receive) + 5 (b1, b2) = 20/3.
    assert ev.active_s.tolist() == pytest.approx([2 / 3, 20 / 3])
    assert ev.energy_j == pytest.approx(sum(r.dyn_energy_j for r in ev.stage_results) + IDLE_STATIC * ev.period_s)


def quad_diamond() -> MappingProblem:
    """b0 -> {b1, b2} -> b3 on p0..p3 (times 1, 4, 3, 1 s on every PU), transfers 0.5 s + bytes / 100 B/s between
    any two PUs; edges b0->b1 100, b0->b2 150, b1->b3 100, b2->b3 50 B; 2 W active, 0.1 W idle, 1 W static."""
    k = 4
    alpha = np.full((k, k), 0.5)
    beta = np.full((k, k), 100.0)
    return MappingProblem(
        block_names=["b0", "b1", "b2", "b3"], preds=[(), (0,), (0,), (1, 2)],
        edge_nbytes={(0, 1): 100.0, (0, 2): 150.0, (1, 3): 100.0, (2, 3): 50.0}, pu_names=[f"p{i}" for i in range(k)],
        time_s=[[1] * k, [4] * k, [3] * k, [1] * k], active_power_w=[[2] * k] * 4, idle_power_w=[0.1] * k,
        static_power_w=1.0, alpha_s=alpha, beta_bytes_per_s=beta, name="quad_diamond")


def test_replicas_that_are_pu_groups():
    # Replica 0 on p0+p1, branches split (assignment 0, 0, 1, 0): makespan 8 (tests/test_cost.py's diamond);
    # replica 1 all on p2: 1 + 4 + 3 + 1 = 9 (p3 in its group but idle: the group still reserves it).
    # Shares 9/17, 8/17; period 72/17; every PU of both groups busy 72/17; latency 9/17·8 + 8/17·9 = 144/17,
    # worst 9; E_dyn = 9 s of blocks · 1.9 W on either replica = 17.1 J; E = 17.1 + (0.4 + 1)·72/17.
    pr = quad_diamond()
    m = Mapping((StageMapping(0, 4, (0, 1), (0, 0, 1, 0), replicas=(ReplicaMapping((2, 3), (2, 2, 2, 2)),)),))
    ev = evaluate(pr, m)
    assert objectives(ev) == pytest.approx((72 / 17, 144 / 17, 17.1 + 1.4 * 72 / 17))
    assert ev.busy_s.tolist() == pytest.approx([72 / 17] * 4)
    assert ev.latency_worst_s == pytest.approx(9.0)
    # Three single-PU replicas of the sequential 9 s stage and one plain stage on p3 after it: 1/3 of the
    # frames come from each of p0, p1, p2 to p3 (b3 needs b1: 0.5 + 1 and b2: 0.5 + 0.5, so 2.5 s each).
    three = Mapping((StageMapping(0, 3, (0,), (0, 0, 0), replicas=(ReplicaMapping((1,), (1, 1, 1)), ReplicaMapping((2,), (2, 2, 2)))),
                     StageMapping(3, 4, (3,), (3,))))
    ev3 = evaluate(pr, three)
    # Stage 1: 8 s per replica → period 8/3; stage 2: input 2.5 s + 1 s → 3.5 s; period max(8/3, 3.5) = 3.5.
    assert (ev3.period_s, ev3.latency_s) == pytest.approx((3.5, 8 + 3.5))
    assert ev3.busy_s.tolist() == pytest.approx([8 / 3, 8 / 3, 8 / 3, 3.5])


def test_replicas_must_not_share_a_pu():
    pr = chain3()
    m = Mapping((StageMapping(0, 3, (0,), (0, 0, 0), replicas=(ReplicaMapping((0,), (0, 0, 0)),)),))
    with pytest.raises(ValueError, match=r"^stages\[0\]\.replicas\[1\]\.pus: PU 'p0' is already in replica 0"):
        evaluate(pr, m)
    bad = Mapping((StageMapping(0, 3, (0,), (0, 0, 0), replicas=(ReplicaMapping((1,), (1, 0, 1)),)),))
    with pytest.raises(ValueError, match=r"^stages\[0\]\.replicas\[1\]\.assignment\.\w+: PU 'p0' is not one of "
                       r"the replica's PUs \['p1'\]"):
        evaluate(pr, bad)


def test_weights_held_once_per_replica_against_the_memory_limit():
    # Weights 10, 20, 30 B; p0 may hold 50 B, p1 unlimited. Whole model replicated: each PU holds 60 B
    # → p0 over its limit; b0, b1 on p0 (30 B) and b2 on p1 (30 B) fits.
    pr = chain3()
    pr = MappingProblem(block_names=pr.block_names, preds=pr.preds, edge_nbytes=pr.edge_nbytes,
                        pu_names=pr.pu_names, time_s=pr.time_s, active_power_w=pr.active_power_w,
                        idle_power_w=pr.idle_power_w, static_power_w=pr.static_power_w, alpha_s=pr.alpha_s,
                        beta_bytes_per_s=pr.beta_bytes_per_s, weight_nbytes=[10, 20, 30],
                        memory_bytes=[50, np.inf])
    rep = evaluate(pr, Mapping((StageMapping(0, 3, (0,), (0, 0, 0), replicas=(ReplicaMapping((1,), (1, 1, 1)),)),)))
    assert rep.weight_nbytes.tolist() == [60.0, 60.0]
    assert rep.memory_exceeded == (0,) and not rep.fits_memory
    split = evaluate(pr, parse_pu_list(pr, "p0,p0,p1"))
    assert split.weight_nbytes.tolist() == [30.0, 30.0] and split.fits_memory
    assert pu_weight_nbytes([10, 20], [(0, 1), (1, 1), (0, 0)], 2).tolist() == [10.0, 30.0]
    assert memory_violations([5, 5, 5], [4, np.inf, float("nan")]) == [0]
    assert pr.restrict_pus([1]).memory_bytes.tolist() == [np.inf]


def test_pu_list_with_replicated_entries():
    pr = chain3()
    m = parse_pu_list(pr, "p0|p1, p0|p1, p1")
    assert m == Mapping((StageMapping(0, 2, (0,), (0, 0), None, (ReplicaMapping((1,), (1, 1)),)),
                         StageMapping(2, 3, (1,), (1,))))
    assert not parse_pu_list(pr, "p0,p1,p1").replicated
    with pytest.raises(InputError, match="listed twice"):
        parse_pu_list(pr, "p0|p0,p0,p0")
    with pytest.raises(InputError, match="unknown PU 'p9'"):
        parse_pu_list(pr, "p0|p9,p0,p0")


def replicated_doc(stage_extra=None):
    """A pareto.json (dict) of chain3 with one point: b0, b1 replicated on p0/p1, then b2 on p1."""
    stage0 = {"pus": ["p0"], "blocks": ["b0", "b1"], "time_s": 1.0,
              "replicas": [{"pus": ["p0"], "share": 0.5}, {"pus": ["p1"], "share": 0.5}]}
    stage0.update(stage_extra or {})
    return {"schema_version": 2, "model": {"name": "chain3", "sha256": "x"},
            "soc": {"name": "toy", "pus": {"p0": {"kind": "cpu"}, "p1": {"kind": "cpu"}}},
            "blocks": {"b0": [], "b1": [], "b2": []}, "bounds": {"period_lb_s": 0, "latency_lb_s": 0},
            "points": [{"id": "r0", "strategy": "replicated", "throughput_per_s": 1, "period_s": 1,
                        "latency_s": 1, "energy_j": 1, "mapping": {"stages": [
                            stage0, {"pus": ["p1"], "blocks": ["b2"], "time_s": 1.0}]}}]}


def test_document_replicas_round_trip_and_evaluate(tmp_path):
    from parapipe.mapping import parse_pareto, read_pareto, write_pareto

    doc = parse_pareto(replicated_doc(), "pareto.json")
    point = doc.points[0]
    assert point.used_pus() == ["p0", "p1"]
    assert point.stages[1].replicas is None
    path = tmp_path / "pareto.json"
    write_pareto(doc, path)
    raw = json.loads(path.read_text())
    assert "replicas" not in raw["points"][0]["mapping"]["stages"][1]  # plain stages are written as before
    again = read_pareto(str(path))
    assert again == doc
    m = mapping_from_point(chain3(), again.points[0], str(path))
    assert m == parse_pu_list(chain3(), "p0|p1,p0|p1,p1")


@pytest.mark.parametrize("extra, field, match", [
    ({"replicas": [{"pus": ["p0"], "share": 1.0}]}, "replicas", "1 replica"),
    ({"replicas": [{"pus": ["p1"], "share": 0.5}, {"pus": ["p0"], "share": 0.5}]}, "replicas[0]",
     "differs from the stage"),
    ({"replicas": [{"pus": ["p0"], "share": 0.5}, {"pus": ["p0"], "share": 0.5}]}, "replicas[1].pus",
     "already in replica 0"),
    ({"replicas": [{"pus": ["p0"], "share": 0.5}, {"pus": ["p7"], "share": 0.5}]}, "replicas[1].pus",
     "not in SoC"),
    ({"replicas": [{"pus": ["p0"], "share": 0.5}, {"pus": ["p1"], "share": 0.4}]}, "replicas", "sum to 0.9"),
    ({"replicas": [{"pus": ["p0"], "share": 0.5}, {"pus": ["p1"], "share": 0.5,
                                                   "assignment": {"b2": "p1"}}]}, "assignment.b2",
     "not in this stage"),
    ({"replicas": [{"pus": ["p0"], "share": 0.5}, {"pus": ["p1"], "share": 0.5, "order": ["b0"]}]},
     "replicas[1].order", "exactly the stage's blocks"),
])
def test_document_replicas_refused(extra, field, match):
    from parapipe.mapping import parse_pareto

    with pytest.raises(InputError, match=match) as info:
        parse_pareto(replicated_doc(extra), "pareto.json")
    assert field in str(info.value) and "points[r0]" in str(info.value)


def three_pu_chain(memory_bytes=None, t_b2_p2=2.0) -> MappingProblem:
    """chain3 with a third PU p2 (times 3, 3, t_b2_p2 s; 5 W active, 0.3 W idle), weights 10, 20, 30 B."""
    pr = chain3()
    alpha = [[0.0, 0.5, 0.5], [0.7, 0.0, 0.5], [0.5, 0.5, 0.0]]
    beta = [[1.0, 100.0, 100.0], [50.0, 1.0, 100.0], [100.0, 100.0, 1.0]]
    return MappingProblem(block_names=pr.block_names, preds=pr.preds, edge_nbytes=pr.edge_nbytes,
                          pu_names=["p0", "p1", "p2"], time_s=[[1, 2, 3], [2, 1, 3], [3, 4, t_b2_p2]],
                          active_power_w=[[2, 3, 5], [2.5, 3.5, 5], [1.5, 4, 5]], idle_power_w=[0.1, 0.2, 0.3],
                          static_power_w=1.0, alpha_s=alpha, beta_bytes_per_s=beta, weight_nbytes=[10, 20, 30],
                          memory_bytes=memory_bytes)


def test_replicated_baseline():
    from parapipe.cost.replicated_baseline import (replicated_baseline, replicated_mapping, replicated_mappings,
                                                   whole_model_pus)

    # Whole model: p0 6 s, p1 7 s, p2 3 + 3 + 2 = 8 s → period 1 / (1/6 + 1/7 + 1/8) = 168/73 s.
    pr = three_pu_chain()
    mapping, ev = replicated_baseline(pr)
    assert mapping == parse_pu_list(pr, "p0|p1|p2,p0|p1|p2,p0|p1|p2")
    assert ev.period_s == pytest.approx(168 / 73)
    assert ev.stage_results[0].shares == pytest.approx((28 / 73, 24 / 73, 21 / 73))
    subsets = replicated_mappings(pr)
    assert len(subsets) == 4 and subsets[0][0] == mapping  # {p0,p1,p2}, then the three pairs
    assert [e.period_s for _, e in subsets[1:]] == pytest.approx([42 / 13, 48 / 14, 56 / 15])
    # p2 cannot run b2: only p0 and p1 serve frames.
    assert whole_model_pus(three_pu_chain(t_b2_p2=np.inf)) == [0, 1]
    assert replicated_baseline(three_pu_chain(t_b2_p2=np.inf))[1].period_s == pytest.approx(42 / 13)
    # p1 cannot hold the 60 B of weights, p2 can: p0 and p2 serve frames. With one able PU there is no baseline.
    assert whole_model_pus(three_pu_chain(memory_bytes=[np.inf, 59, 60])) == [0, 2]
    assert replicated_baseline(three_pu_chain(memory_bytes=[np.inf, 59, 59])) is None
    assert replicated_mappings(three_pu_chain(memory_bytes=[np.inf, 59, 59])) == []
    with pytest.raises(ValueError, match="cannot run every block"):
        replicated_mapping(three_pu_chain(t_b2_p2=np.inf), [0, 2])


def test_document_from_a_result_with_a_replicated_point(tmp_path):
    from types import SimpleNamespace

    from parapipe.cost.replicated_baseline import replicated_baseline
    from parapipe.mapping import doc_from_result, read_pareto, write_pareto

    pr = three_pu_chain()
    mapping, ev = replicated_baseline(pr)
    point = SimpleNamespace(id="r0", strategy="replicated", pareto=True, origin="baseline", mapping=mapping, evaluation=ev,
                            stage_schedules=["single-pu"])
    result = SimpleNamespace(problem=pr, objectives=("throughput",), stats={}, info={}, points=[point],
                             bounds=SimpleNamespace(period_lb_s=1.0, latency_lb_s=1.0))
    soc = {"name": "toy", "pus": {p: {"kind": "cpu"} for p in pr.pu_names}}
    doc = doc_from_result(result, "chain3", "x", soc)
    write_pareto(doc, tmp_path / "pareto.json")
    back = read_pareto(str(tmp_path / "pareto.json"))
    (stage,) = back.points[0].stages
    assert [r.pus for r in stage.replicas] == [["p0"], ["p1"], ["p2"]]
    assert [r.share for r in stage.replicas] == pytest.approx([28 / 73, 24 / 73, 21 / 73])
    assert [r.time_s for r in stage.replicas] == pytest.approx([6.0, 7.0, 8.0])
    assert stage.time_s == pytest.approx(3 * 168 / 73)  # mean over the dealt frames: Σ w_r T_r = R · period
    assert back.points[0].pu_busy_s == pytest.approx({p: 168 / 73 for p in pr.pu_names})
    again = evaluate(pr, mapping_from_point(pr, back.points[0], "pareto.json"))
    assert objectives(again) == pytest.approx(objectives(ev))


def test_stage_level_measurement_replaces_the_block_sum():
    # chain3 with blocks 0..2 measured as one sub-model on p0 at 5 s (block sum 6): all-on-p0 takes 5 s, its
    # blocks scaled by 5/6 (E_dyn 10.9 · 5/6); the two-copy mapping gets 1 / (1/5 + 1/7) = 35/12 s. A range
    # that is not a whole single-PU stage keeps its block sum.
    pr = chain3()
    pr.submodel_time_s = {(0, (0, 1, 2)): 5.0}
    one = evaluate(pr, parse_pu_list(pr, "p0,p0,p0"))
    assert (one.period_s, one.stage_results[0].finish_s[2]) == pytest.approx((5.0, 5.0))
    assert one.stage_results[0].finish_s[0] == pytest.approx(5 / 6)
    assert one.energy_j == pytest.approx(10.9 * 5 / 6 + IDLE_STATIC * 5.0)
    assert one.active_s.tolist() == pytest.approx([5.0, 0.0])
    assert evaluate(pr, parse_pu_list(pr, "p0|p1,p0|p1,p0|p1")).period_s == pytest.approx(35 / 12)
    assert evaluate(pr, parse_pu_list(pr, "p0,p0,p1")).period_s == pytest.approx(6.5)  # tests/test_cost.py
    assert pr.restrict_pus([1, 0]).submodel_time_s == {(1, (0, 1, 2)): 5.0}
    assert pr.restrict_pus([1]).submodel_time_s is None
