"""PipelineExecutor on tiny hand-cut graphs: real ORT sessions, pinned to the host's cores 0 and 1."""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from ppexec.errors import PipelineError as ExecutionError, PlanError as InputError  # the executor's own errors
from ppexec.executor import PipelineExecutor, run_pipeline
from ppexec.metrics import write_chrome_trace
from ppexec.plan import ExecutionPlan, PUBinding
from ppexec.reference import max_abs_diff, reference_outputs
from runtime_models import (CPU_BINDINGS, chain_model, cut, diamond_model, frames, identity_model,
                            parapipe_threads, reshape_model, task)
from ppexec.plan import Task

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")


def _two_stage_chain():
    m = chain_model(4)
    plan = ExecutionPlan(stages=[[task(m, "s0", 0, "cpu0", ["x"], ["h1"])],
                                 [task(m, "s1", 1, "cpu1", ["h1"], ["y"])]],
                         model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    return m, plan


def test_two_stage_chain_matches_unsplit_model_in_order():
    m, plan = _two_stage_chain()
    fs = frames(50)
    ref = reference_outputs(m, fs)
    outs, metrics = run_pipeline(plan, fs, warmup=3)
    assert len(outs) == 50
    assert max_abs_diff(outs, ref) <= 1e-5
    # in order: each output is closest to its own frame's reference, not a neighbour's
    assert max_abs_diff(outs[1:], ref[:-1]) > 1e-3
    assert metrics.frames == 50
    assert metrics.latency_s.shape == (50,)
    assert np.all(metrics.latency_s > 0)
    assert metrics.latency_p50_s <= metrics.latency_p90_s <= metrics.latency_p99_s
    assert len(metrics.trace) == 100
    assert {(e.stage, e.pu) for e in metrics.trace} == {(0, "cpu0"), (1, "cpu1")}
    assert sorted({e.frame for e in metrics.trace}) == list(range(50))
    for e in metrics.trace:
        assert e.end_s >= e.start_s >= 0
    # stage 1 of a frame starts after its stage 0 ended
    ends0 = {e.frame: e.end_s for e in metrics.trace if e.stage == 0}
    assert all(e.start_s >= ends0[e.frame] for e in metrics.trace if e.stage == 1)
    assert set(metrics.pu_busy_s) == {"cpu0", "cpu1"}
    assert all(0 < u <= 1.0 + 1e-9 for u in metrics.pu_utilisation.values())
    assert len(metrics.stage_busy_s) == 2 and all(b > 0 for b in metrics.stage_busy_s)
    assert metrics.throughput_per_s == pytest.approx(50 / metrics.wall_s)
    assert parapipe_threads() == []


def test_workers_are_pinned_and_sessions_reused_across_runs():
    m, plan = _two_stage_chain()
    fs = frames(10)
    with PipelineExecutor(plan) as ex:
        assert ex.affinity == {(0, "cpu0"): frozenset({0}), (1, "cpu1"): frozenset({1})}
        first = list(ex.run(fs))
        second = list(ex.run(fs[::-1]))
        assert ex.metrics.frames == 10
    assert max_abs_diff(first, second[::-1]) == 0.0
    assert os.sched_getaffinity(0) >= {0, 1}  # the caller's own mask is untouched
    assert parapipe_threads() == []


def test_stage_with_parallel_branches_on_two_pus():
    m = diamond_model()
    stage1 = [task(m, "B", 1, "cpu0", ["a"], ["b"]),
              task(m, "C", 1, "cpu1", ["a"], ["c"]),
              task(m, "DE", 1, "cpu0", ["b", "c"], ["y"], deps=["B", "C"])]
    plan = ExecutionPlan(stages=[[task(m, "A", 0, "cpu0", ["x"], ["a"])], stage1],
                         model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    fs = frames(30, seed=1)
    outs, metrics = run_pipeline(plan, fs, warmup=2)
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-5
    by_task = {}
    for e in metrics.trace:
        by_task.setdefault(e.task, {})[e.frame] = e
    assert {e.pu for e in by_task["C"].values()} == {"cpu1"}
    for f in range(30):  # DE waits for both branches of its frame
        assert by_task["DE"][f].start_s >= max(by_task["B"][f].end_s, by_task["C"][f].end_s)
    assert metrics.pu_busy_s["cpu1"] > 0


def test_pu_serving_two_non_adjacent_stages():
    m = chain_model(6)
    plan = ExecutionPlan(stages=[[task(m, "s0", 0, "cpu0", ["x"], ["h1"])],
                                 [task(m, "s1", 1, "cpu1", ["h1"], ["h3"])],
                                 [task(m, "s2", 2, "cpu0", ["h3"], ["y"])]],
                         model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    fs = frames(40, seed=2)
    with PipelineExecutor(plan) as ex:
        assert ex.affinity[(0, "cpu0")] == ex.affinity[(2, "cpu0")] == frozenset({0})
        outs = list(ex.run(fs))
        metrics = ex.metrics
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-5
    busy0 = sum(e.end_s - e.start_s for e in metrics.trace if e.pu == "cpu0") / 40
    assert metrics.pu_busy_s["cpu0"] == pytest.approx(busy0)
    assert {e.stage for e in metrics.trace if e.pu == "cpu0"} == {0, 2}


def test_model_input_used_by_a_later_stage_is_forwarded():
    # stage 1 needs both h1 (from stage 0) and the model input x: y = h1 + x
    from onnx import TensorProto, helper
    from runtime_models import OPSET
    m = chain_model(2)
    add = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["h0", "x"], ["z"], name="add")], "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16]) for n in ("h0", "x")],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16])]), opset_imports=OPSET)
    plan = ExecutionPlan(stages=[[task(m, "s0", 0, "cpu0", ["x"], ["h0"])],
                                 [Task("s1", 1, "cpu1", add, ["h0", "x"], ["z"], [])]],
                         model_inputs=["x"], model_outputs=["z", "h0"], bindings=dict(CPU_BINDINGS))
    fs = frames(5, seed=3)
    outs, _ = run_pipeline(plan, fs, warmup=0)
    h0 = [r["h0"] for r in reference_outputs(cut(m, ["x"], ["h0"]), fs)]
    for f, o, h in zip(fs, outs, h0):
        assert set(o) == {"z", "h0"}
        np.testing.assert_allclose(o["h0"], h, atol=1e-6)
        np.testing.assert_allclose(o["z"], h + f["x"], atol=1e-6)


def _failing_plan():
    copy = identity_model("x", ("n", "k"), "y")
    plan = ExecutionPlan(stages=[[Task("copy", 0, "cpu0", copy, ["x"], ["y"], [])],
                                 [Task("reshape", 1, "cpu1", reshape_model("y", "z"), ["y"], ["z"], [])]],
                         model_inputs=["x"], model_outputs=["z"], bindings=dict(CPU_BINDINGS))
    good = [{"x": np.full((1, 16), i, np.float32)} for i in range(40)]
    good[12] = {"x": np.ones((1, 15), np.float32)}  # 15 elements cannot be reshaped to [4, -1]
    return plan, good


def test_failing_task_raises_execution_error_naming_stage_pu_and_task():
    plan, fs = _failing_plan()
    received = []
    with PipelineExecutor(plan) as ex:
        with pytest.raises(ExecutionError) as info:
            for out in ex.run(fs):
                received.append(out)
        with pytest.raises(ExecutionError, match="not running"):
            ex.run(fs)
    msg = str(info.value)
    assert "stage 1" in msg and "'cpu1'" in msg and "'reshape'" in msg and "frame 12" in msg
    assert "\n" not in msg
    assert info.value.__cause__ is not None
    assert len(received) <= 12
    for i, out in enumerate(received):
        np.testing.assert_array_equal(out["z"], np.full((4, 4), i, np.float32))
    assert parapipe_threads() == []


def test_input_shape_mismatch_is_an_execution_error():
    m = chain_model(2)
    plan = ExecutionPlan(stages=[[task(m, "s0", 0, "cpu0", ["x"], ["h0"])],
                                 [Task("s1", 1, "cpu1", chain_model(1, width=8), ["h0"], ["y"], [])]],
                         model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    plan.stages[1][0].model.graph.input[0].name = "h0"
    plan.stages[1][0].model.graph.node[0].input[0] = "h0"
    with pytest.raises(ExecutionError, match=r"stage 1, PU 'cpu1', task 's1'"):
        run_pipeline(plan, frames(5), warmup=0)
    assert parapipe_threads() == []


def test_keyboard_interrupt_in_caller_shuts_down_cleanly():
    m, plan = _two_stage_chain()
    fs = frames(20)

    def interrupted():
        for i, f in enumerate(fs):
            if i == 7:
                raise KeyboardInterrupt
            yield f

    with PipelineExecutor(plan) as ex:
        with pytest.raises(KeyboardInterrupt):
            list(ex.run(interrupted()))
        assert parapipe_threads() == []


def test_leaving_a_run_early_drains_and_keeps_the_executor_usable():
    m, plan = _two_stage_chain()
    fs = frames(20)
    with PipelineExecutor(plan) as ex:
        for i, _ in enumerate(ex.run(fs)):
            if i == 2:
                break
        outs = list(ex.run(fs[:5]))
        with pytest.raises(ExecutionError, match="no completed run"):
            PipelineExecutor(plan).metrics
    assert max_abs_diff(outs, reference_outputs(m, fs[:5])) <= 1e-5


def test_missing_model_input_in_a_frame_is_an_input_error():
    m, plan = _two_stage_chain()
    with pytest.raises(InputError, match=r"^frames: frame 1: missing model input\(s\) \['x'\]; give every"):
        run_pipeline(plan, [{"x": np.zeros((1, 16), np.float32)}, {"X": 0}], warmup=0)
    assert parapipe_threads() == []


def test_missing_provider_names_pu_and_provider_and_fallback_works():
    m, plan = _two_stage_chain()
    plan.bindings["cpu1"] = PUBinding(cpus=(1,), provider="NoSuchExecutionProvider")
    with pytest.raises(ExecutionError, match=r"PU 'cpu1': execution provider NoSuchExecutionProvider"):
        with PipelineExecutor(plan):
            pass
    outs, _ = run_pipeline(plan, frames(3), warmup=0, fallback_provider="CPUExecutionProvider")
    assert max_abs_diff(outs, reference_outputs(m, frames(3))) <= 1e-5
    assert parapipe_threads() == []


def test_bad_cpu_id_is_refused_naming_the_pu():
    m, plan = _two_stage_chain()
    plan.bindings["cpu1"] = PUBinding(cpus=(4095,))
    with pytest.raises(InputError, match=r"^PipelineExecutor: PU 'cpu1': is pinned to CPUs \[4095\] but this"):
        with PipelineExecutor(plan):
            pass
    assert parapipe_threads() == []


def test_chrome_trace_has_one_lane_per_pu(tmp_path):
    m, plan = _two_stage_chain()
    _, metrics = run_pipeline(plan, frames(6), warmup=1)
    path = tmp_path / "trace.json"
    write_chrome_trace(metrics, path)
    doc = json.loads(path.read_text())
    lanes = {e["args"]["name"]: e["tid"] for e in doc["traceEvents"] if e["ph"] == "M" and "tid" in e}
    assert set(lanes) == {"cpu0", "cpu1"} and lanes["cpu0"] != lanes["cpu1"]
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 12 and all(e["pid"] == 1 and e["dur"] >= 0 for e in xs)
    assert {e["tid"] for e in xs if e["name"] == "s1"} == {lanes["cpu1"]}
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_queue_depth_must_be_positive():
    _, plan = _two_stage_chain()
    with pytest.raises(InputError, match="queue_depth: must be >= 1"):
        PipelineExecutor(plan, queue_depth=0)


@pytest.fixture
def default_sigint():
    """SIGINT raises KeyboardInterrupt during the test: ``interrupt_main()`` does nothing while SIGINT is ignored,
    as it is in a job started in the background by a non-interactive shell."""
    import signal
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_the_caller_waits_on_outputs(default_sigint):
    import _thread
    import collections
    import itertools
    import threading
    m, plan = _two_stage_chain()
    endless = itertools.cycle(frames(4))  # the run only ends by the interrupt
    seen = threading.Event()
    deadline = time.monotonic() + 60.0

    def press_ctrl_c() -> None:  # again every 0.25 s until seen: CPython drops a KeyboardInterrupt that lands
        # inside a finalizer the main thread happens to run ("Exception ignored in ..."), as a user would press
        # Ctrl-C again; the executor must stop on whichever one it sees. After 60 s the last press is the
        # test's own failure: the run must not go on for ever (it once ran 45 minutes, into the OOM killer)
        first = True
        while not seen.wait(0.3 if first else 0.25) and not ex._closed:
            first = False
            if time.monotonic() > deadline:
                failed.append("no KeyboardInterrupt stopped the run within 60 s")
                stop_feeding.set()
                return
            _thread.interrupt_main()

    failed: list = []
    stop_feeding = threading.Event()
    endless = itertools.takewhile(lambda _: not stop_feeding.is_set(), endless)

    with PipelineExecutor(plan) as ex:
        presser = threading.Thread(target=press_ctrl_c, daemon=True)
        presser.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                # consumed in C: only the feed's check runs between outputs, so the interrupt lands inside run()
                collections.deque(ex.run(endless), maxlen=0)
        finally:
            seen.set()
            presser.join()
        assert not failed, failed
        assert parapipe_threads() == []
        with pytest.raises(ExecutionError, match="not running"):
            ex.run(frames(1))


def test_unstarted_run_holds_nothing_and_runs_do_not_interleave():
    m, plan = _two_stage_chain()
    fs = frames(4)
    with PipelineExecutor(plan) as ex:
        ex.run(fs)  # never iterated
        first = ex.run(fs)
        next(first)
        with pytest.raises(ExecutionError, match="another run is still active"):
            next(ex.run(fs))
        rest = list(first)
        assert len(rest) == 3
        assert len(list(ex.run(fs))) == 4


def test_frame_that_is_not_a_mapping_is_an_input_error():
    m, plan = _two_stage_chain()
    with pytest.raises(InputError, match=r"^frames: frame 0: is a ndarray, not a mapping; give each frame"):
        run_pipeline(plan, [np.zeros((1, 16), np.float32)], warmup=0)
    assert parapipe_threads() == []


def test_a_pu_spanning_two_cores_with_two_ort_threads():
    m = chain_model(4)
    plan = ExecutionPlan(stages=[[task(m, "all", 0, "big", ["x"], ["y"])]], model_inputs=["x"],
                         model_outputs=["y"], bindings={"big": PUBinding(cpus=(0, 1), threads=2)})
    fs = frames(8, seed=7)
    with PipelineExecutor(plan) as ex:
        assert ex.affinity == {(0, "big"): frozenset({0, 1})}
        outs = list(ex.run(fs))
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-5


def test_a_long_run_keeps_the_records_of_its_last_frames_only(monkeypatch):
    """An endless stream must not grow the run's trace and exit times without bound: the metrics cover the last
    MAX_RECORDED_FRAMES frames (here 10 of 40), every output still arrives, in order."""
    from ppexec import executor as executor_mod

    monkeypatch.setattr(executor_mod, "MAX_RECORDED_FRAMES", 10)
    m, plan = _two_stage_chain()
    fs = frames(40, seed=3)
    with PipelineExecutor(plan) as ex:
        outs = list(ex.run(fs))
        met = ex.metrics
    assert len(outs) == 40
    ref = reference_outputs(m, fs)
    assert max_abs_diff(outs, ref) == 0.0
    assert met.frames == 10 and len(met.latency_s) == 10
    assert len(met.trace) <= 2 * 10 * 2 and {e.frame for e in met.trace} >= set(range(30, 40))
    assert met.throughput_per_s > 0
