"""The executor's public API does not trust its caller: frames are copied at admission (a caller may refill one
buffer per frame), CPU bindings are checked against the CPUs this process may use before any thread starts, and
every stage sees frames in order, also after a replicated stage. Real ORT sessions on the host's cores 0 and 1."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from ppexec.errors import PlanError
from ppexec.executor import PipelineExecutor, run_pipeline
from ppexec.plan import ExecutionPlan, PUBinding
from ppexec.reference import max_abs_diff, reference_outputs
from runtime_models import CPU_BINDINGS, chain_model, frames, parapipe_threads, task

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")


def _two_stage_chain(slow_first: bool = False):
    m = chain_model(4)
    first = task(m, "s0", 0, "cpu0", ["x"], ["h1"])
    if slow_first:
        first.model = _slowed(first.model)
    plan = ExecutionPlan([[first], [task(m, "s1", 1, "cpu1", ["h1"], ["y"])]], ["x"], ["y"], dict(CPU_BINDINGS))
    return m, plan


# ------------------------------------------------------------------------------------------ frames are copied
@pytest.mark.parametrize("queue_depth", [1, 2, 4])
def test_one_buffer_refilled_per_frame_gives_the_outputs_of_fresh_arrays(queue_depth):
    # A camera loop: one input array, refilled before each frame. A slow first stage keeps frames waiting in the
    # queues while the caller refills the buffer for the next ones.
    m, plan = _two_stage_chain(slow_first=True)
    fs = frames(30, seed=5)
    ref = reference_outputs(m, fs)
    buf = np.empty_like(fs[0]["x"])

    def camera():
        for f in fs:
            buf[...] = f["x"]
            yield {"x": buf}

    with PipelineExecutor(plan, queue_depth=queue_depth) as ex:
        reused = list(ex.run(camera()))
        fresh = list(ex.run(fs))
    assert max_abs_diff(fresh, ref) <= 1e-5
    assert max_abs_diff(reused, ref) <= 1e-5
    np.testing.assert_array_equal(buf, fs[-1]["x"])  # the caller's buffer is read, never written
    assert parapipe_threads() == []


# ------------------------------------------------------------------------------------------ CPU bindings
def test_the_cpu_check_is_one_function_for_the_executor_and_the_cli():
    from ppexec.plan import binding_cpu_problem, cpu_ranges

    assert binding_cpu_problem(PUBinding(cpus=(0,)), [0, 1]) is None
    assert binding_cpu_problem(PUBinding(cpus=None, threads=4), [0]) is None
    assert binding_cpu_problem(PUBinding(cpus=(0,)), [1]) == (
        "cpus", "is pinned to CPUs [0] but the board allows 1 (CPUs [0] missing)")
    assert binding_cpu_problem(PUBinding(cpus=(1,), threads=2), [1], "this process may use") == (
        "threads", "runs 2 threads on 1 CPU(s) [1]")
    assert binding_cpu_problem(PUBinding(cpus=(1, 1), threads=2), [1])[0] == "threads"  # one core, named twice
    assert cpu_ranges([5, 0, 1, 2]) == "0-2,5" and cpu_ranges([]) == "none"


@pytest.mark.parametrize("binding, words", [
    (PUBinding(cpus=(4095,)), ["PipelineExecutor: PU 'cpu1': is pinned to CPUs [4095] but this process may use",
                               "(CPUs [4095] missing)", "bind the PU to CPUs of os.sched_getaffinity(0)"]),
    (PUBinding(cpus=(1,), threads=2), ["PipelineExecutor: PU 'cpu1': runs 2 threads on 1 CPU(s) [1]",
                                       "PUBinding.threads <= 1"]),
], ids=["cpu-outside-affinity", "threads-over-cpus"])
def test_unusable_bindings_are_refused_before_any_thread_starts(binding, words):
    m, plan = _two_stage_chain()
    plan.bindings["cpu1"] = binding
    before = threading.active_count()
    ex = PipelineExecutor(plan)
    with pytest.raises(PlanError) as info:
        ex.start()
    msg = str(info.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    assert ex.workers == [] and threading.active_count() == before and parapipe_threads() == []


_NARROWED = textwrap.dedent("""
    import os, sys
    sys.path[:0] = sys.argv[1:]
    os.sched_setaffinity(0, {1})  # as 'taskset -c 1' starts it
    from ppexec.errors import PlanError
    from ppexec.executor import PipelineExecutor
    from ppexec.plan import ExecutionPlan, PUBinding
    from runtime_models import chain_model, task
    m = chain_model(2)
    for binding in (PUBinding(cpus=(0,)), PUBinding(cpus=(1,))):
        plan = ExecutionPlan([[task(m, "s0", 0, "p", ["x"], ["y"])]], ["x"], ["y"], {"p": binding})
        try:
            with PipelineExecutor(plan) as ex:
                print("RAN", sorted(ex.affinity[(0, "p")]))
        except PlanError as exc:
            print("REFUSED", exc)
""")


def test_a_pu_outside_the_process_affinity_is_refused_under_taskset():
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _NARROWED, str(repo / "tests"), str(repo / "device_agents")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith("REFUSED PipelineExecutor: PU 'p': is pinned to CPUs [0] but this process may "
                               "use 1 (CPUs [0] missing);"), lines[0]
    assert lines[1] == "RAN [1]"


# ------------------------------------------------------------------------------------------ frame order
def _replicated_then_plain(slow_replica: int):
    """Stage 0 (x -> h1) on cpu0 | cpu1, one replica ~100x slower than the other; stage 1 (h1 -> y) on cpu1."""
    m = chain_model(4)
    a = task(m, "a0", 0, "cpu0", ["x"], ["h1"])
    b = task(m, "a1", 0, "cpu1", ["x"], ["h1"])
    b.replica = 1
    slow = (a, b)[slow_replica]
    slow.model = _slowed(slow.model)
    plan = ExecutionPlan([[a, b], [task(m, "b", 1, "cpu1", ["h1"], ["y"])]], ["x"], ["y"], dict(CPU_BINDINGS),
                         {0: [0.5, 0.5]})
    return m, plan


@pytest.mark.parametrize("dispatch", ["pull", "shares"])
def test_the_stage_after_a_replicated_stage_sees_frames_in_order(dispatch):
    # The slow replica still holds frame k while the fast one finishes k+1, k+2, ...: stage 1 must take them in
    # frame order all the same (a stateful stage, a trace reader).
    m, plan = _replicated_then_plain(slow_replica=0)
    fs = frames(40, seed=8)
    ref = reference_outputs(m, fs)
    with PipelineExecutor(plan, dispatch=dispatch) as ex:
        for _ in range(2):  # a second run starts again at frame 0
            outs = list(ex.run(fs))
            trace = ex.metrics.trace
            assert max_abs_diff(outs, ref) <= 1e-5
            seen = [e.frame for e in sorted(trace, key=lambda e: e.start_s) if e.stage == 1]
            assert seen == list(range(40))
            if dispatch == "shares":  # dealt: the slow replica holds every other frame
                assert {e.frame for e in trace if e.pu == "cpu0"} == set(range(0, 40, 2))
    assert parapipe_threads() == []


def test_a_replicated_stage_between_two_stages_keeps_order_downstream():
    # stage 0 plain, stage 1 replicated on p0 | p1 (replica 1 ~100x slower), stage 2 plain: stages 1 (by replica)
    # and 2 take the frames in order, the outputs match the unsplit model.
    m = chain_model(4)
    r0 = task(m, "r0", 1, "p0", ["h0"], ["h2"])
    r1 = task(m, "r1", 1, "p1", ["h0"], ["h2"])
    r1.model, r1.replica = _slowed(r1.model), 1
    bindings = {"p0": PUBinding(cpus=(0,)), "p1": PUBinding(cpus=(1,)), "q": PUBinding(cpus=(0,)),
                "z": PUBinding(cpus=(1,))}
    plan = ExecutionPlan([[task(m, "a", 0, "q", ["x"], ["h0"])], [r0, r1], [task(m, "c", 2, "z", ["h2"], ["y"])]],
                         ["x"], ["y"], bindings, {1: [0.5, 0.5]})
    fs = frames(30, seed=9)
    outs, metrics = run_pipeline(plan, fs, warmup=0)
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-5
    trace = sorted(metrics.trace, key=lambda e: e.start_s)
    for pu in ("q", "p0", "p1", "z"):  # every worker takes its frames in order
        seen = [e.frame for e in trace if e.pu == pu]
        assert seen == sorted(seen), (pu, seen)
    assert [e.frame for e in trace if e.stage == 2] == list(range(30))


def _slowed(sub, rows: int = 128, width: int = 512, layers: int = 3):
    """``sub`` (one input, one output, float [1, 16]) computing the same output with ~100x the work: a branch of
    ``layers`` MatMuls on a tiled copy of the input, reduced, multiplied by 0 and added to the output (ONNX
    Runtime does not fold a product with 0 that depends on an input)."""
    import onnx
    from onnx import helper, numpy_helper

    graph = sub.graph
    x, y = graph.input[0].name, graph.output[0].name
    for node in graph.node:
        node.output[:] = [f"{y}_fast" if o == y else o for o in node.output]
    graph.initializer.extend([numpy_helper.from_array(np.array([rows, width // 16], np.int64), "busy_reps"),
                              numpy_helper.from_array(np.zeros((), np.float32), "busy_zero")])
    nodes = [helper.make_node("Tile", [x, "busy_reps"], ["busy_in"], name="busy_tile")]
    prev = "busy_in"
    for i in range(layers):
        w = np.random.default_rng(100 + i).standard_normal((width, width)) / np.sqrt(width)
        graph.initializer.append(numpy_helper.from_array(w.astype(np.float32), f"busy_w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"busy_w{i}"], [f"busy_m{i}"], name=f"busy_mm{i}"),
                  helper.make_node("Relu", [f"busy_m{i}"], [f"busy_h{i}"], name=f"busy_relu{i}")]
        prev = f"busy_h{i}"
    nodes += [helper.make_node("ReduceSum", [prev], ["busy_sum"], name="busy_reduce", keepdims=1),
              helper.make_node("Mul", ["busy_sum", "busy_zero"], ["busy_nil"], name="busy_nil"),
              helper.make_node("Add", [f"{y}_fast", "busy_nil"], [y], name="busy_add")]
    graph.node.extend(nodes)
    onnx.checker.check_model(sub)
    return sub
