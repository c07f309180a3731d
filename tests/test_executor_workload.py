"""Several models' plans run at once (ppexec.workload): a PU two models use runs one task of either at a time,
frames are admitted at the workload's rates, every model's outputs stay in order, one failure stops all."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ppexec.errors import PipelineError, PlanError
from ppexec.metrics import chrome_trace, trace_events_from_chrome
from ppexec.plan import ExecutionPlan
from ppexec.reference import reference_outputs
from ppexec.workload import WorkloadExecutor, frames_for
from runtime_models import CPU_BINDINGS, chain_model, frames, parapipe_threads, reshape_model, slow_chain_model, task

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")


def _two_models():
    """``a``: cpu0 -> cpu1 (slow, 256 wide); ``b``: cpu0 alone (fast, 16 wide): cpu0 is shared."""
    ma = chain_model(4, width=256)
    mb = chain_model(3, width=16)
    pa = ExecutionPlan(stages=[[task(ma, "a0", 0, "cpu0", ["x"], ["h1"])], [task(ma, "a1", 1, "cpu1", ["h1"], ["y"])]],
                       model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    pb = ExecutionPlan(stages=[[task(mb, "b0", 0, "cpu0", ["x"], ["y"])]], model_inputs=["x"], model_outputs=["y"],
                       bindings={"cpu0": CPU_BINDINGS["cpu0"]})
    return (ma, pa), (mb, pb)


def _overlaps(trace, pu):
    spans = sorted((e.start_s, e.end_s) for e in trace if e.pu == pu)
    return sum(1 for (_, end), (start, _) in zip(spans, spans[1:]) if start < end)


def test_two_models_share_a_pu_at_their_rates_in_order():
    (ma, pa), (mb, pb) = _two_models()
    pools = {"a": frames(3, width=256, seed=1), "b": frames(4, width=16, seed=2)}
    refs = {"a": reference_outputs(ma, pools["a"]), "b": reference_outputs(mb, pools["b"])}
    seen = {"a": [], "b": []}

    def check(model, i, out):
        seen[model].append(i)
        np.testing.assert_allclose(out["y"], refs[model][i % len(pools[model])]["y"], rtol=1e-4, atol=1e-5)

    with WorkloadExecutor({"a": pa, "b": pb}, rates={"a": 1, "b": 3}) as wl:
        assert set(wl.shared_pus) == {"cpu0"}
        metrics = wl.run(pools, 12, on_output=check)
    assert seen == {"a": list(range(12)), "b": list(range(36))}  # in order, at the rates
    assert metrics.models["a"].frames == frames_for(12, 1) and metrics.models["b"].frames == 36
    assert metrics.throughput_per_s > 0 and metrics.wall_s > 0
    assert {e.model for e in metrics.trace} == {"a", "b"}
    assert _overlaps(metrics.trace, "cpu0") == 0  # one task of either model at a time on the shared PU
    assert metrics.pu_utilisation["cpu0"] <= 1.0 + 1e-6
    busy = metrics.models["a"].pu_busy_s["cpu0"] + 3 * metrics.models["b"].pu_busy_s["cpu0"]
    assert metrics.pu_busy_s["cpu0"] == pytest.approx(busy)
    doc = chrome_trace(metrics.as_run_metrics())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == {"model a", "model b"}
    back = trace_events_from_chrome(doc)
    assert {(e.model, e.task) for e in back} == {("a", "a0"), ("a", "a1"), ("b", "b0")}
    assert parapipe_threads() == []


def test_a_fast_model_does_not_run_ahead_of_a_slow_one():
    slow = slow_chain_model(2, width=16, busy_rows=64, busy_layers=2)
    fast = chain_model(2, width=16)
    ps = ExecutionPlan(stages=[[task(slow, "s0", 0, "cpu1", ["x"], ["y"])]], model_inputs=["x"],
                       model_outputs=["y"], bindings={"cpu1": CPU_BINDINGS["cpu1"]})
    pf = ExecutionPlan(stages=[[task(fast, "f0", 0, "cpu0", ["x"], ["y"])]], model_inputs=["x"],
                       model_outputs=["y"], bindings={"cpu0": CPU_BINDINGS["cpu0"]})
    done = {"slow": 0, "fast": 0}
    lead = []

    def count(model, i, out):
        done[model] += 1
        if model == "fast":
            lead.append(done["fast"] - done["slow"])

    with WorkloadExecutor({"slow": ps, "fast": pf}, window=1) as wl:
        limit = wl.executors["slow"]._limit
        wl.run({"slow": frames(2), "fast": frames(2)}, 40, on_output=count)
    # the fast model admits frame i only once the slow one admitted frame i - 1: it leads by at most the slow
    # pipeline's frames in flight plus the window
    assert max(lead) <= limit + 2, lead


def test_one_failure_stops_every_model_and_names_it():
    (ma, pa), _ = _two_models()
    bad = ExecutionPlan(stages=[[task(reshape_model(rows=4), "bad", 0, "cpu0", ["y"], ["z"])]],
                        model_inputs=["y"], model_outputs=["z"], bindings={"cpu0": CPU_BINDINGS["cpu0"]})
    pools = {"a": frames(2, width=256), "bad": [{"y": np.ones((1, 5), np.float32)}]}  # 5 rows: Reshape fails
    with pytest.raises(PipelineError, match=r"model 'bad'.*stage 0, PU 'cpu0', task 'bad'"):
        with WorkloadExecutor({"a": pa, "bad": bad}) as wl:
            wl.run(pools, 50)
    assert parapipe_threads() == []


def test_bad_rates_and_bindings_are_refused():
    (ma, pa), (mb, pb) = _two_models()
    with pytest.raises(PlanError, match="rate of 'b' must be a positive number"):
        WorkloadExecutor({"a": pa, "b": pb}, rates={"a": 1, "b": 0})
    other = ExecutionPlan(stages=pb.stages, model_inputs=["x"], model_outputs=["y"],
                          bindings={"cpu0": CPU_BINDINGS["cpu1"]})
    with pytest.raises(PlanError, match="PU 'cpu0' is bound differently by models 'a' and 'b'"):
        WorkloadExecutor({"a": pa, "b": other})
