"""Replicated stages in the executor (ppexec): replicas pull frames as they become free (or take them dealt by
share), outputs in order, the plan checks and plan.json; real ORT sessions on the host's cores 0 and 1."""
from __future__ import annotations

import os

import pytest

from ppexec.executor import PipelineExecutor, run_pipeline
from ppexec.plan import ExecutionPlan, PUBinding, plan_from_doc, plan_to_doc, validate_plan
from ppexec.reference import max_abs_diff, reference_outputs
from ppexec.errors import PlanError as InputError
from ppexec.dispatch import SmoothWeightedRoundRobin
from runtime_models import CPU_BINDINGS, chain_model, diamond_model, frames, parapipe_threads, slow_chain_model, task

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")


def _replicated_whole(m, shares=(0.5, 0.5)):
    """The whole chain model as one stage, replicated on cpu0 (replica 0) and cpu1 (replica 1)."""
    r0 = task(m, "s0.cpu0.t0", 0, "cpu0", ["x"], ["y"])
    r1 = task(m, "s0.cpu1.t0", 0, "cpu1", ["x"], ["y"])
    r1.replica = 1
    return ExecutionPlan([[r0, r1]], ["x"], ["y"], dict(CPU_BINDINGS), {0: list(shares)})


def test_dealer_follows_the_shares():
    assert [SmoothWeightedRoundRobin([1, 1]).pick() for _ in range(1)] == [0]
    d = SmoothWeightedRoundRobin([2, 1])
    assert [d.pick() for _ in range(6)] == [0, 1, 0, 0, 1, 0]
    d = SmoothWeightedRoundRobin([7 / 13, 6 / 13])
    picks = [d.pick() for _ in range(1300)]
    assert picks.count(0) == 700 and max(len(s) for s in "".join(map(str, picks)).split("1")) <= 2
    with pytest.raises(ValueError):
        SmoothWeightedRoundRobin([1, 0])


def test_replicated_stage_deals_alternately_and_outputs_come_back_in_order():
    m = chain_model(4)
    plan = _replicated_whole(m)
    fs = frames(40)
    ref = reference_outputs(m, fs)
    outs, metrics = run_pipeline(plan, fs, warmup=0, dispatch="shares")
    assert max_abs_diff(outs, ref) <= 1e-5
    assert max_abs_diff(outs[1:], ref[:-1]) > 1e-3  # in order: not shifted by a frame
    lane = {e.frame: e.pu for e in metrics.trace}
    assert lane == {f: f"cpu{f % 2}" for f in range(40)}  # equal shares: frames alternate
    assert metrics.pu_busy_s["cpu0"] > 0 and metrics.pu_busy_s["cpu1"] > 0
    assert parapipe_threads() == []


def test_shares_two_to_one_and_sessions_pinned_per_replica():
    m = chain_model(4)
    plan = _replicated_whole(m, shares=(2.0, 1.0))
    fs = frames(30, seed=2)
    with PipelineExecutor(plan, dispatch="shares") as ex:
        assert ex.affinity == {(0, "cpu0"): frozenset({0}), (0, "cpu1"): frozenset({1})}
        outs = list(ex.run(fs))
        trace = ex.metrics.trace
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-5
    per_pu = {pu: sorted(e.frame for e in trace if e.pu == pu) for pu in ("cpu0", "cpu1")}
    assert len(per_pu["cpu0"]) == 20 and len(per_pu["cpu1"]) == 10
    assert per_pu["cpu1"] == list(range(1, 30, 3))


def test_replicas_pull_frames_in_proportion_to_their_speed():
    # Replica 1 computes the same y some 100x slower (a branch multiplied by 0): pulled, the frames go mostly to
    # the fast replica; dealt by the plan's equal shares, half of them wait for the slow one.
    m = chain_model(4)
    slow = task(slow_chain_model(4), "s0.cpu1.t0", 0, "cpu1", ["x"], ["y"])
    slow.replica = 1
    fs = frames(60, seed=4)
    ref = reference_outputs(m, fs)
    taken = {}
    for dispatch in ("pull", "shares"):
        plan = _replicated_whole(m)
        plan.stages[0][1] = slow
        outs, metrics = run_pipeline(plan, fs, warmup=2, dispatch=dispatch)
        assert max_abs_diff(outs, ref) <= 1e-5
        lanes = [e.pu for e in sorted(metrics.trace, key=lambda e: e.frame)]
        assert len(lanes) == 60
        taken[dispatch] = lanes.count("cpu0")
    assert taken["shares"] == 30
    assert taken["pull"] >= 45, taken  # ~100x faster: all but a few frames
    assert parapipe_threads() == []


def test_unknown_dispatch_is_refused():
    with pytest.raises(InputError, match="dispatch.*unknown policy 'random'"):
        PipelineExecutor(_replicated_whole(chain_model(2)), dispatch="random")


def test_two_stages_one_replicated_then_plain():
    # Stage 0 (x -> h1) on cpu0 | cpu1, stage 1 (h1 -> y) on cpu1: frames leave stage 0's replicas out of order
    # at times, stage 1 and the caller take them in frame order.
    m = chain_model(4)
    a = task(m, "a0", 0, "cpu0", ["x"], ["h1"])
    b = task(m, "a1", 0, "cpu1", ["x"], ["h1"])
    b.replica = 1
    plan = ExecutionPlan([[a, b], [task(m, "b", 1, "cpu1", ["h1"], ["y"])]], ["x"], ["y", "h1"],
                         dict(CPU_BINDINGS), {0: [0.6, 0.4]})
    fs = frames(50, seed=3)
    ref = reference_outputs(m, fs)
    # frames dealt 0.6 : 0.4 whatever the load (pull dispatch let one replica take every frame on a busy machine)
    outs, metrics = run_pipeline(plan, fs, warmup=2, dispatch="shares")
    assert max_abs_diff([{"y": o["y"]} for o in outs], [{"y": r["y"]} for r in ref]) <= 1e-5
    assert {(e.stage, e.pu) for e in metrics.trace} == {(0, "cpu0"), (0, "cpu1"), (1, "cpu1")}
    assert [e.frame for e in sorted(metrics.trace, key=lambda e: e.start_s) if e.stage == 1] == list(range(50))


@pytest.mark.parametrize("dispatch", ["pull", "shares"])
def test_replicas_that_are_pu_groups(dispatch):
    # The diamond's branch stage on two replicas of two PUs each (four PU names on the two cores): B and DE on
    # a0 / b0, C on a1 / b1; deps stay inside a replica, and all three tasks of a frame run in one replica.
    m = diamond_model()
    bindings = {"cpu0": PUBinding(cpus=(0,)), "a0": PUBinding(cpus=(0,)), "a1": PUBinding(cpus=(1,)),
                "b0": PUBinding(cpus=(1,)), "b1": PUBinding(cpus=(0,))}
    stage1 = []
    for r, (p, q) in enumerate([("a0", "a1"), ("b0", "b1")]):
        ts = [task(m, f"B{r}", 1, p, ["a"], ["b"]), task(m, f"C{r}", 1, q, ["a"], ["c"]),
              task(m, f"DE{r}", 1, p, ["b", "c"], ["y"], deps=[f"B{r}", f"C{r}"])]
        for t in ts:
            t.replica = r
        stage1 += ts
    plan = ExecutionPlan([[task(m, "A", 0, "cpu0", ["x"], ["a"])], stage1], ["x"], ["y"], bindings,
                         {1: [1.0, 1.0]})
    fs = frames(30, seed=1)
    outs, metrics = run_pipeline(plan, fs, warmup=0, dispatch=dispatch)
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-5
    replica_of = {}
    for e in metrics.trace:
        if e.stage == 1:
            replica_of.setdefault(e.frame, []).append(e.task[-1])
    assert sorted(replica_of) == list(range(30))
    assert all(len(rs) == 3 and len(set(rs)) == 1 for rs in replica_of.values()), replica_of
    if dispatch == "shares":
        assert all(rs[0] == str(f % 2) for f, rs in replica_of.items())


def test_replicas_of_different_shapes():
    # a single-PU replica beside a PU-group replica (the search offers the whole model so): only what later
    # stages read must be the same; b and c stay inside replica 1, so they are not handed-over tensors to check
    from ppexec.reference import handed_over_tensors

    m = diamond_model()
    bindings = {"cpu0": PUBinding(cpus=(0,)), "a0": PUBinding(cpus=(0,)), "b0": PUBinding(cpus=(1,)),
                "b1": PUBinding(cpus=(0,))}
    whole = task(m, "BCDE0", 1, "a0", ["a"], ["y"])
    group = [task(m, "B1", 1, "b0", ["a"], ["b"]), task(m, "C1", 1, "b1", ["a"], ["c"]),
             task(m, "DE1", 1, "b0", ["b", "c"], ["y"], deps=["B1", "C1"])]
    for t in group:
        t.replica = 1
    plan = ExecutionPlan([[task(m, "A", 0, "cpu0", ["x"], ["a"])], [whole] + group], ["x"], ["y"], bindings,
                         {1: [1.0, 2.0]})
    validate_plan(plan)
    assert handed_over_tensors(plan) == ["a"]
    fs = frames(20, seed=2)
    outs, metrics = run_pipeline(plan, fs, warmup=0, dispatch="shares")  # frames dealt 1:2, whatever the load
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-5
    assert {e.pu for e in metrics.trace if e.stage == 1} == {"a0", "b0", "b1"}  # both replicas took frames
    # a replica that does not make what a later stage reads is still refused
    bad = ExecutionPlan([[task(m, "A", 0, "cpu0", ["x"], ["a"])], [task(m, "B0", 1, "a0", ["a"], ["b"])] + group],
                        ["x"], ["y"], bindings, {1: [1.0, 1.0]})
    with pytest.raises(InputError, match="give every replica of a stage the same sub-models"):
        validate_plan(bad)


def _plan_with(m, **change):
    plan = _replicated_whole(m)
    for key, value in change.items():
        if key == "shares":
            plan.replica_shares = value
        else:
            setattr(plan.stages[0][1], key, value)
    return plan


@pytest.mark.parametrize("change, match", [
    ({"replica": 2}, "replica 2 but the stage has 2"),
    ({"pu": "cpu0"}, "serves two replicas"),
    ({"shares": {0: [1.0, 0.0]}}, "share > 0"),
    ({"shares": {3: [1.0, 1.0]}}, "share > 0"),
    ({"shares": {0: [1.0, 1.0, 1.0]}}, r"replicas \[2\] have no task"),
    ({"outputs": ["z"]}, "replica 1 produces"),
    ({"deps": ["s0.cpu0.t0"]}, "same stage and replica"),
])
def test_bad_replicated_plans_are_refused(change, match):
    m = chain_model(2)
    with pytest.raises(InputError, match=match):
        validate_plan(_plan_with(m, **change))


def test_plan_doc_round_trip_keeps_the_replicas(tmp_path):
    m = chain_model(2)
    plan = _replicated_whole(m, shares=(0.7, 0.3))
    files = {}
    for t in plan.stages[0]:
        (tmp_path / f"{t.name}.onnx").write_bytes(t.model.SerializeToString())
        files[t.name] = f"{t.name}.onnx"
    doc = plan_to_doc(plan, files)
    assert doc["replica_shares"] == {"0": [0.7, 0.3]}
    assert "replica" not in doc["stages"][0][0] and doc["stages"][0][1]["replica"] == 1
    back = plan_from_doc(doc, str(tmp_path))
    assert back.replica_shares == {0: [0.7, 0.3]}
    assert [t.replica for t in back.stages[0]] == [0, 1]
    assert [[t.name for t in r] for r in back.replicas(0)] == [["s0.cpu0.t0"], ["s0.cpu1.t0"]]
    fs = frames(6)
    outs, _ = run_pipeline(back, fs, warmup=0)
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-5


def test_frame_check_reuses_the_verdict_of_a_bit_identical_output_only():
    import numpy as np

    from ppexec.bundle_run import FrameCheck

    ref = [{"y": np.full(4, float(i), np.float32), "h": np.full(3, 10.0 + i, np.float32)} for i in range(2)]
    check = FrameCheck(ref, ["y"], ["h"], atol=1e-5, rtol=1e-5)
    near = [{"y": r["y"] + 1e-6, "h": r["h"].copy()} for r in ref]
    assert check(0, near[0])[2] and check(1, near[1])[2] and check.full_checks == 2
    assert check(0, {k: v.copy() for k, v in near[0].items()}) == check(0, near[0]) and check.full_checks == 2
    # out of order (frame 1's output where frame 0's belongs) or wrong: checked in full, and refused
    assert not check(0, near[1])[2] and check.full_checks == 3
    wrong = {"y": near[0]["y"], "h": near[0]["h"] + 1.0}
    diff, scaled, ok = check(0, wrong)
    assert not ok and scaled == pytest.approx(1.0 / 10.0) and check.full_checks == 4
    nan = {"y": np.full(4, np.nan, np.float32), "h": near[0]["h"]}
    assert not check(0, nan)[2] and not check(0, nan)[2] and check.full_checks == 6  # NaN never equals itself
