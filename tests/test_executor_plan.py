"""validate_plan's messages on hand-written plans, and max_abs_diff / reference_outputs."""
from __future__ import annotations

import numpy as np
import pytest

from ppexec.errors import PlanError as InputError  # the executor's own error for bad plans
from ppexec.plan import ExecutionPlan, PUBinding, Task, validate_plan
from ppexec.reference import max_abs_diff, reference_outputs
from runtime_models import CPU_BINDINGS, chain_model, diamond_model, frames, task


def _diamond_plan(deps_de=("B", "C"), b_pu="cpu0"):
    m = diamond_model()
    return ExecutionPlan(
        stages=[[task(m, "A", 0, "cpu0", ["x"], ["a"])],
                [task(m, "B", 1, b_pu, ["a"], ["b"]), task(m, "C", 1, "cpu1", ["a"], ["c"]),
                 task(m, "DE", 1, "cpu0", ["b", "c"], ["y"], deps=list(deps_de))]],
        model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))


def test_a_good_plan_passes():
    validate_plan(_diamond_plan())


def test_missing_dep_is_named_with_the_fix():
    with pytest.raises(InputError, match=r"^execution plan: stages\[1\]\.DE\.deps: input 'c' comes from 'C', "
                                         r"not in deps; add 'C' to the task's deps$"):
        validate_plan(_diamond_plan(deps_de=("B",)))


def test_unbound_pu():
    plan = _diamond_plan()
    del plan.bindings["cpu1"]
    with pytest.raises(InputError, match=r"stages\[1\]\.C: PU 'cpu1' has no binding"):
        validate_plan(plan)


def test_input_from_a_later_stage_is_rejected():
    m = chain_model(2)
    plan = ExecutionPlan(stages=[[task(m, "late", 0, "cpu0", ["h0"], ["y"])],
                                 [task(m, "early", 1, "cpu1", ["x"], ["h0"])]],
                         model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    with pytest.raises(InputError,
                       match=r"stages\[0\]\.late: input 'h0' is produced by no task of stages 0\.\.0"):
        validate_plan(plan)


def test_wait_cycle_between_pu_order_and_deps_is_rejected():
    # DE listed before B on cpu0 but DE waits on B: cpu0 would run DE first and wait forever
    plan = _diamond_plan()
    b, c, de = plan.stages[1]
    plan.stages[1] = [de, c, b]
    with pytest.raises(InputError, match=r"stages\[1\]: tasks wait on each other in a cycle"):
        validate_plan(plan)


def test_wrong_stage_index_duplicate_names_and_missing_outputs():
    plan = _diamond_plan()
    plan.stages[1][0].stage = 0
    with pytest.raises(InputError, match="task says stage 0 but is filed under stage 1"):
        validate_plan(plan)
    plan = _diamond_plan()
    plan.stages[1][1].name = "B"
    with pytest.raises(InputError, match=r"stages\[1\]\.B: duplicate task name"):
        validate_plan(plan)
    plan = _diamond_plan()
    plan.model_outputs = ["y", "nope"]
    with pytest.raises(InputError, match=r"model_outputs: outputs \['nope'\] are produced by no task"):
        validate_plan(plan)
    plan = _diamond_plan()
    plan.stages.append([])
    with pytest.raises(InputError, match="empty stage"):
        validate_plan(plan)


def test_tensor_produced_twice():
    m = chain_model(2)
    plan = ExecutionPlan(stages=[[task(m, "a", 0, "cpu0", ["x"], ["h0"]),
                                  task(m, "b", 0, "cpu1", ["x"], ["h0"])]],
                         model_inputs=["x"], model_outputs=["h0"], bindings=dict(CPU_BINDINGS))
    with pytest.raises(InputError, match=r"stages\[0\]\.b: tensor 'h0' is produced twice"):
        validate_plan(plan)


def test_max_abs_diff():
    a = [{"y": np.array([1.0, 2.0, np.nan, np.inf], np.float32)}]
    assert max_abs_diff(a, a) == 0.0
    b = [{"y": np.array([1.0, 2.5, np.nan, np.inf], np.float32)}]
    assert max_abs_diff(a, b) == pytest.approx(0.5)
    assert max_abs_diff(a, [{"y": np.array([1.0, 2.0, 0.0, np.inf], np.float32)}]) == float("inf")
    assert max_abs_diff([{"k": np.array([True])}], [{"k": np.array([False])}]) == float("inf")
    with pytest.raises(ValueError, match="1 frames vs 0"):
        max_abs_diff(a, [])
    with pytest.raises(ValueError, match=r"frame 0 has outputs \['y'\] vs \['z'\]"):
        max_abs_diff(a, [{"z": a[0]["y"]}])
    with pytest.raises(ValueError, match=r"shape \(4,\) vs \(2,\)"):
        max_abs_diff(a, [{"y": np.zeros(2)}])


def test_reference_outputs_runs_the_unsplit_model_per_frame():
    m = chain_model(2)
    fs = frames(3)
    ref = reference_outputs(m, [dict(f, extra=np.zeros(1)) for f in fs], threads=2)
    w0, w1 = (np.frombuffer(t.raw_data, np.float32).reshape(16, 16) for t in m.graph.initializer)
    for f, r in zip(fs, ref):
        assert set(r) == {"y"}
        expected = np.maximum(np.maximum(f["x"] @ w0, 0) @ w1, 0)
        np.testing.assert_allclose(r["y"], expected, rtol=1e-5, atol=1e-5)


def test_pu_binding_defaults():
    b = PUBinding(cpus=(0,))
    assert (b.threads, b.provider, b.provider_options) == (1, "CPUExecutionProvider", {})
    assert PUBinding(cpus=None).provider_options is not PUBinding(cpus=None).provider_options
    t = Task("t", 0, "cpu0", chain_model(1), ["x"], ["y"], [])
    assert ExecutionPlan([[t]], ["x"], ["y"], {"cpu0": b}).pus() == ["cpu0"]
