"""The cost model (parapipe/cost/evaluate.py) on tiny problems whose numbers are worked out by hand below.

Units: seconds, bytes, watts, joules (round numbers so that every expected value can be checked on paper).
Transfers: ``alpha[src, dst] + nbytes / beta[src, dst]``; the two directions differ on purpose so that a
swapped index shows up.
"""
from __future__ import annotations

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping, StageMapping, mapping_from_pu_list
from parapipe.cost.schedule import evaluate_stage
from parapipe.cost.rules import RuleViolation
from parapipe.cost.problem import MappingProblem
from parapipe.errors import InfeasibleError

# p0 -> p1: 0.5 s + bytes / 100 B/s;  p1 -> p0: 0.7 s + bytes / 50 B/s (diagonals unused).
ALPHA = [[0.0, 0.5], [0.7, 0.0]]
BETA = [[1.0, 100.0], [50.0, 1.0]]
IDLE = [0.1, 0.2]
STATIC = 1.0
IDLE_STATIC = 0.1 + 0.2 + 1.0  # ΣP_idle + P_static = 1.3 W


def chain3() -> MappingProblem:
    """b0 -> b1 -> b2 on PUs p0, p1.

    time_s (rows blocks, cols PUs): b0 [1, 2], b1 [2, 1], b2 [3, 4]; edges b0->b1 100 B, b1->b2 200 B;
    active power (W): b0 [2, 3], b1 [2.5, 3.5], b2 [1.5, 4].
    """
    return MappingProblem(
        block_names=["b0", "b1", "b2"], preds=[(), (0,), (1,)], edge_nbytes={(0, 1): 100.0, (1, 2): 200.0},
        pu_names=["p0", "p1"], time_s=[[1, 2], [2, 1], [3, 4]], active_power_w=[[2, 3], [2.5, 3.5], [1.5, 4]],
        idle_power_w=IDLE, static_power_w=STATIC, alpha_s=ALPHA, beta_bytes_per_s=BETA, name="chain3")


def diamond4() -> MappingProblem:
    """b0 -> {b1, b2} -> b3 on p0, p1; both directions 0.5 s + bytes / 100 B/s.

    time_s: b0 1, b1 4, b2 3, b3 1 (same on both PUs); edges b0->b1 100, b0->b2 150, b1->b3 100, b2->b3 50 B;
    active power 2 W on p0 and 3 W on p1 for every block.
    """
    return MappingProblem(
        block_names=["b0", "b1", "b2", "b3"], preds=[(), (0,), (0,), (1, 2)],
        edge_nbytes={(0, 1): 100.0, (0, 2): 150.0, (1, 3): 100.0, (2, 3): 50.0}, pu_names=["p0", "p1"],
        time_s=[[1, 1], [4, 4], [3, 3], [1, 1]], active_power_w=[[2, 3]] * 4, idle_power_w=IDLE,
        static_power_w=STATIC, alpha_s=[[0, 0.5], [0.5, 0]], beta_bytes_per_s=[[1, 100], [100, 1]],
        name="diamond4")


def objectives(ev):
    return ev.period_s, ev.latency_s, ev.energy_j


def test_one_stage_one_pu():
    # All on p0: T = 1 + 2 + 3 = 6 s = period = latency.
    # E_dyn = 1·(2 − 0.1) + 2·(2.5 − 0.1) + 3·(1.5 − 0.1) = 1.9 + 4.8 + 4.2 = 10.9 J
    # E = 10.9 + 1.3 · 6 = 18.7 J.  Same from the other form: Σ t·p_active = 2 + 5 + 4.5 = 11.5;
    # idle p0 0.1·(6 − 6) = 0, idle p1 0.2·6 = 1.2, static 1·6 = 6 → 18.7 J.
    pr = chain3()
    ev = evaluate(pr, Mapping((StageMapping(0, 3, (0,), (0, 0, 0)),)))
    assert objectives(ev) == pytest.approx((6.0, 6.0, 18.7))
    assert ev.throughput_per_s == pytest.approx(1 / 6)
    assert ev.busy_s.tolist() == pytest.approx([6.0, 0.0])
    (res,) = ev.stage_results
    assert res.input_s == 0.0 and res.makespan_s == pytest.approx(6.0)
    assert res.start_s == pytest.approx({0: 0.0, 1: 1.0, 2: 3.0})
    assert res.finish_s == pytest.approx({0: 1.0, 1: 3.0, 2: 6.0})


def test_two_stages_boundary_transfer():
    # Stage 1 = b0, b1 on p0: T1 = 1 + 2 = 3 s.
    # Stage 2 = b2 on p1: input b1->b2 from p0 to p1 = 0.5 + 200/100 = 2.5 s, makespan 4 → T2 = 6.5 s.
    # period = max(3, 6.5) = 6.5, latency = 3 + 6.5 = 9.5.
    # E_dyn = 1.9 + 4.8 + 4·(4 − 0.2) = 21.9 J; E = 21.9 + 1.3 · 6.5 = 30.35 J.
    pr = chain3()
    m = Mapping((StageMapping(0, 2, (0,), (0, 0)), StageMapping(2, 3, (1,), (1,))))
    ev = evaluate(pr, m)
    assert objectives(ev) == pytest.approx((6.5, 9.5, 30.35))
    s1, s2 = ev.stage_results
    assert (s1.time_s, s1.input_s) == pytest.approx((3.0, 0.0))
    assert (s2.time_s, s2.input_s, s2.makespan_s) == pytest.approx((6.5, 2.5, 4.0))
    assert ev.busy_s.tolist() == pytest.approx([3.0, 6.5])
    # The same boundary the other way round (b0 on p1, then b1, b2 on p0) uses alpha/beta[p1, p0]:
    # T1 = 2; input b0->b1 = 0.7 + 100/50 = 2.7, makespan 2 + 3 = 5 → T2 = 7.7; period 7.7, latency 9.7.
    # E_dyn = 2·(3 − 0.2) + 2·(2.5 − 0.1) + 3·(1.5 − 0.1) = 5.6 + 4.8 + 4.2 = 14.6;
    # E = 14.6 + 1.3·7.7 = 24.61.
    back = Mapping((StageMapping(0, 1, (1,), (1,)), StageMapping(1, 3, (0,), (0, 0))))
    assert objectives(evaluate(pr, back)) == pytest.approx((7.7, 9.7, 24.61))


def test_one_stage_two_pus_diamond_overlaps_branches():
    # b0 on p0 [0, 1]; b1 on p0 [1, 5] (same PU, no transfer);
    # b2 on p1: ready 1 + (0.5 + 150/100) = 3 → [3, 6];
    # b3 on p0: ready max(5, 6 + 0.5 + 50/100) = 7 → [7, 8]. Makespan 8 s (< 9 s sequential on p0).
    # Both PUs reserved for the stage: busy [8, 8]; period = latency = 8.
    # E_dyn = (1 + 4 + 1)·(2 − 0.1) + 3·(3 − 0.2) = 11.4 + 8.4 = 19.8; E = 19.8 + 1.3·8 = 30.2 J.
    pr = diamond4()
    ev = evaluate(pr, Mapping((StageMapping(0, 4, (0, 1), (0, 0, 1, 0)),)))
    assert objectives(ev) == pytest.approx((8.0, 8.0, 30.2))
    (res,) = ev.stage_results
    assert res.start_s == pytest.approx({0: 0.0, 1: 1.0, 2: 3.0, 3: 7.0})
    assert res.finish_s == pytest.approx({0: 1.0, 1: 5.0, 2: 6.0, 3: 8.0})
    assert ev.busy_s.tolist() == pytest.approx([8.0, 8.0])
    assert ev.active_s.tolist() == pytest.approx([6.0, 3.0])
    sequential = evaluate(pr, Mapping((StageMapping(0, 4, (0,), (0, 0, 0, 0)),)))
    assert sequential.period_s == pytest.approx(9.0)
    # Schedule order b0, b2, b1, b3 gives the same times (b1 and b2 are on different PUs).
    reordered = evaluate(pr, Mapping((StageMapping(0, 4, (0, 1), (0, 0, 1, 0), order=(0, 2, 1, 3)),)))
    assert reordered.period_s == pytest.approx(8.0)
    # Both branches on p1, join on p0: b1 on p1 ready 1 + (0.5 + 1) = 2.5 → [2.5, 6.5]; b2 on p1 ready
    # 1 + (0.5 + 150/100) = 3 but p1 is busy → [6.5, 9.5];
    # b3 ready max(6.5 + 0.5 + 1, 9.5 + 0.5 + 0.5) = 10.5 → [10.5, 11.5].
    both = evaluate(pr, Mapping((StageMapping(0, 4, (0, 1), (0, 1, 1, 0)),)))
    assert both.period_s == pytest.approx(11.5)


def test_stage_input_transfer_largest_edge_per_pu_and_one_per_pu():
    # Stage 1 = b0 on p0 (T1 = 1).  Stage 2 = b1, b2, b3 on p1 only: b0's output goes to p1 once, sized by
    # the larger edge (150 B): 0.5 + 150/100 = 2 s; makespan 4 + 3 + 1 = 8 → T2 = 10; latency 11; period 10.
    pr = diamond4()
    ev = evaluate(pr, Mapping((StageMapping(0, 1, (0,), (0,)), StageMapping(1, 4, (1,), (1, 1, 1)))))
    assert ev.stage_results[1].input_s == pytest.approx(2.0)
    assert (ev.period_s, ev.latency_s) == pytest.approx((10.0, 11.0))
    # Stage 2 on p0 + p1 with b1 on p0 and b2 on p1: only the p1 copy costs a transfer (p0 → p0 is free):
    # input 2 s; b1 on p0 [0, 4], b2 on p1 [0, 3], b3 on p0 ready max(4, 3 + 0.5 + 0.5) = 4 → [4, 5];
    # T2 = 2 + 5 = 7; busy p0 = 1 + 7 = 8, busy p1 = 7 → period 8, latency 8.
    ev2 = evaluate(pr, Mapping((StageMapping(0, 1, (0,), (0,)), StageMapping(1, 4, (0, 1), (0, 1, 0)))))
    assert ev2.stage_results[1].input_s == pytest.approx(2.0)
    assert (ev2.period_s, ev2.latency_s) == pytest.approx((8.0, 8.0))
    assert ev2.busy_s.tolist() == pytest.approx([8.0, 7.0])


def test_pu_serving_two_non_adjacent_stages():
    # b0 on p0 (T1 = 1); b1 on p1: input 0.5 + 100/100 = 1.5, makespan 1 → T2 = 2.5;
    # b2 on p0: input from p1: 0.7 + 200/50 = 4.7, makespan 3 → T3 = 7.7.
    # busy p0 = T1 + T3 = 8.7 > every single stage time; busy p1 = 2.5; period 8.7;
    # latency 1 + 2.5 + 7.7 = 11.2.
    # E_dyn = 1·1.9 + 1·(3.5 − 0.2) + 3·1.4 = 1.9 + 3.3 + 4.2 = 9.4; E = 9.4 + 1.3·8.7 = 20.71 J.
    # Other form: Σ t·p_active = 2 + 3.5 + 4.5 = 10; idle p0 0.1·(8.7 − 4) = 0.47,
    # idle p1 0.2·(8.7 − 1) = 1.54,
    # static 8.7 → 10 + 0.47 + 1.54 + 8.7 = 20.71 J.
    pr = chain3()
    m = Mapping((StageMapping(0, 1, (0,), (0,)), StageMapping(1, 2, (1,), (1,)),
                 StageMapping(2, 3, (0,), (0,))))
    ev = evaluate(pr, m)
    assert objectives(ev) == pytest.approx((8.7, 11.2, 20.71))
    assert ev.busy_s.tolist() == pytest.approx([8.7, 2.5])
    assert max(r.time_s for r in ev.stage_results) == pytest.approx(7.7)
    assert ev.period_s > 7.7 + 0.5
    dyn = sum(r.dyn_energy_j for r in ev.stage_results)
    assert dyn == pytest.approx(9.4)
    assert ev.energy_j == pytest.approx(dyn + IDLE_STATIC * ev.period_s)


def test_mapping_from_pu_list_runs_form_stages():
    pr = diamond4()
    m = mapping_from_pu_list(pr, [1, 1, 0, 1])
    assert [(s.start, s.stop, s.pus, s.assignment) for s in m.stages] == [
        (0, 2, (1,), (1, 1)), (2, 3, (0,), (0,)), (3, 4, (1,), (1,))]
    assert m.block_pus() == [1, 1, 0, 1]
    assert len(mapping_from_pu_list(pr, [0, 0, 0, 0]).stages) == 1
    # The three-stage chain mapping of test_pu_serving_two_non_adjacent_stages, from its PU list.
    ev = evaluate(chain3(), mapping_from_pu_list(chain3(), [0, 1, 0]))
    assert objectives(ev) == pytest.approx((8.7, 11.2, 20.71))
    with pytest.raises(ValueError, match="one PU per block"):
        mapping_from_pu_list(pr, [0, 1, 0])


@pytest.mark.parametrize("stages, match", [
    ([StageMapping(0, 2, (0,), (0, 0))], r"^stages: 1 block\(s\) in no stage, e\.g\. \['b2'\]"),  # last block missing
    ([StageMapping(0, 1, (0,), (0,)), StageMapping(2, 3, (0,), (0,))], r"^stages: 1 block\(s\) in no stage, e\.g\. \['b1'\]"),
    ([StageMapping(0, 2, (0,), (0, 0)), StageMapping(1, 3, (1,), (1, 1))],
     r"^stages\[1\]\.blocks: block 'b1' is already in stage 0"),  # overlap
    ([StageMapping(1, 3, (0,), (0, 0)), StageMapping(0, 1, (0,), (0,))], r"^stages\[1\]\.blocks: stages out of order"),
    ([], r"^stages: 3 block\(s\) in no stage"),
    ([StageMapping(0, 3, (0,), (0, 1, 0))], r"^stages\[0\]\.assignment\.b1: PU 'p1' is not one of the stage's PUs"),
    ([StageMapping(0, 3, (0, 1), (0, 1, 0), order=(1, 0, 2))],
     r"^stages\[0\]\.order: block 'b1' comes before its producer 'b0'"),
    ([StageMapping(0, 3, (0, 1), (0, 1, 0), order=(0, 1))], r"^stages\[0\]\.order: does not list exactly"),  # short
    ([StageMapping(0, 3, (0, 1), (0, 1, 0), order=(0, 1, 1))], r"^stages\[0\]\.order: does not list exactly"),
    ([StageMapping(0, 3, (0, 1), (0, 1, 0), order=(0, 1, 2, 2))], r"^stages\[0\]\.order: does not list exactly"),
    ([StageMapping(0, 2, (0, 1), (0, 1), order=(0, 2)), StageMapping(2, 3, (0,), (0,))],
     r"^stages\[0\]\.order: does not list exactly"),  # a block of another stage
])
def test_evaluate_rejects_bad_mappings(stages, match):
    with pytest.raises(RuleViolation, match=match):
        evaluate(chain3(), Mapping(tuple(stages)))


@pytest.mark.parametrize("start, stop, assignment", [(0, 3, (0, 0)), (0, 0, ()), (2, 1, ())])
def test_a_stage_needs_blocks_and_one_pu_per_block(start, stop, assignment):
    with pytest.raises(ValueError, match="needs one PU per block"):
        StageMapping(start, stop, (0,), assignment)


def test_evaluate_stage_matches_evaluate():
    pr = chain3()
    st = StageMapping(1, 3, (0, 1), (1, 0))
    res = evaluate_stage(pr, st, {0: 0})
    # b1 on p1 needs b0 from p0: input 1.5 s; b1 [0, 1]; b2 on p0: 1 + (0.7 + 200/50) = 5.7 → [5.7, 8.7].
    assert (res.input_s, res.makespan_s, res.time_s) == pytest.approx((1.5, 8.7, 10.2))


def test_problem_validation():
    kwargs = dict(block_names=["a", "b"], edge_nbytes={}, pu_names=["p0", "p1"],
                  active_power_w=[[1, 1], [1, 1]],
                  idle_power_w=IDLE, static_power_w=STATIC, alpha_s=ALPHA, beta_bytes_per_s=BETA)
    with pytest.raises(ValueError, match="not earlier"):
        MappingProblem(preds=[(1,), ()], time_s=[[1, 1], [1, 1]], **kwargs)
    with pytest.raises(InfeasibleError, match="'b' cannot run"):
        MappingProblem(preds=[(), (0,)], time_s=[[1, 1], [np.inf, np.inf]], **kwargs)
    pr = MappingProblem(preds=[(), (0,)], time_s=[[1, np.inf], [2, 3]], **kwargs)
    assert pr.comm_s(0, 0, 1e6) == 0.0 and pr.comm_s(1, 0, 0) == 0.0
    assert pr.comm_s(1, 0, 100) == pytest.approx(0.7 + 2.0)
    with pytest.raises(InfeasibleError):
        pr.restrict_pus([1])  # block a runs on p0 only
    sub = pr.restrict_pus([1, 0])
    assert sub.pu_names == ["p1", "p0"] and sub.comm_s(0, 1, 100) == pytest.approx(2.7)
