"""Runtime adapters of the board-side executor (device_agents/ppexec/runtimes.py): real ONNX Runtime and real
OpenVINO, alone and mixed in one pipelined plan, and the agent's view of them."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest

from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import import_onnx
from parapipe.graph.zoo import load_model
from runtime_models import chain_model, diamond_model, frames

AGENTS = Path(__file__).resolve().parents[1] / "device_agents"
if str(AGENTS) not in sys.path:
    sys.path.insert(0, str(AGENTS))
from ppexec.errors import PlanError, PipelineError  # noqa: E402  (the board-side package, as a board imports it)
from ppexec.executor import PipelineExecutor, run_pipeline  # noqa: E402
from ppexec.plan import ExecutionPlan, PUBinding, Task, plan_from_doc, plan_to_doc  # noqa: E402
from ppexec.reference import max_abs_diff, reference_outputs  # noqa: E402
from ppexec.runtimes import ADAPTERS, get_adapter, probe_all  # noqa: E402

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
ORT, OV = ADAPTERS["onnxruntime"], ADAPTERS["openvino"]


def on_pinned_thread(cpu, fn):
    """Run ``fn()`` on a new thread pinned to ``cpu`` (as a worker loads and runs); return its result."""
    box = {}

    def body():
        os.sched_setaffinity(0, {cpu})
        box["result"] = fn()

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    return box["result"]


def scaled_diff(got, ref) -> float:
    """max |got - ref| / max |ref| over a list of tensors (each scaled by its own largest magnitude)."""
    return max(float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), 1e-30)) for g, r in zip(got, ref))


def topo_stages(model: onnx.ModelProto, name: str, n: int):
    """The model's operator graph cut into ``n`` contiguous slices of its topological order (each convex),
    as (sub-model, inputs, outputs) from parapipe.graph.extract."""
    og = import_onnx(model, name)
    order = og.topo_order
    cuts = [round(k * len(order) / n) for k in range(n + 1)]
    return og, [extract_submodel(og, order[a:z], name=f"{name}_s{k}")
                for k, (a, z) in enumerate(zip(cuts, cuts[1:]))]


# ------------------------------------------------------------------------------------------------ registry
def test_registry_lists_both_runtimes_and_refuses_an_unknown_one_in_one_line():
    assert sorted(ADAPTERS) == ["ncnn", "onnxruntime", "openvino"]
    assert get_adapter("openvino") is OV and get_adapter("onnxruntime") is ORT
    with pytest.raises(PlanError) as info:
        get_adapter("tensorrt", pu="dla0")
    message = str(info.value)
    assert message.startswith("execution plan: bindings.dla0.runtime: runtime 'tensorrt' is not implemented "
                              "in this ppexec (runtimes: ncnn, onnxruntime, openvino); ")
    assert "ADAPTERS" in message and "README" in message and "\n" not in message
    probes = probe_all()
    assert probes["onnxruntime"]["available"] and "CPUExecutionProvider" in probes["onnxruntime"]["providers"]
    assert probes["openvino"]["available"] and "CPU" in probes["openvino"]["devices"]
    assert probes["openvino"]["version"] and probes["openvino"]["reason"] is None


def test_an_unknown_runtime_in_a_plan_is_refused_before_any_worker_starts():
    m = chain_model(2)
    plan = ExecutionPlan([[Task("t", 0, "npu", m, ["x"], ["y"], [])]], ["x"], ["y"],
                         {"npu": PUBinding(cpus=(0,), runtime="vendor_npu")})
    with pytest.raises(PlanError, match=r"runtime 'vendor_npu' is not implemented in this ppexec"):
        run_pipeline(plan, frames(2), warmup=0)
    assert not [t for t in threading.enumerate() if t.name.startswith("parapipe-")]


# ------------------------------------------------------------------------------------------------ checks
def test_check_refuses_a_missing_ort_provider_in_one_line_and_the_executor_raises_it():
    binding = PUBinding(cpus=None, provider="CUDAExecutionProvider")
    if "CUDAExecutionProvider" in ORT.probe()["providers"]:
        pytest.skip("this onnxruntime build has the CUDA provider")
    problem = ORT.check("gpu", binding)
    assert problem.startswith("PU 'gpu': execution provider CUDAExecutionProvider is not available in "
                              "onnxruntime ")
    assert "CPUExecutionProvider" in problem and "\n" not in problem
    assert ORT.check("cpu0", PUBinding(cpus=(0,))) is None
    m = chain_model(2)
    plan = ExecutionPlan([[Task("t", 0, "gpu", m, ["x"], ["y"], [])]], ["x"], ["y"], {"gpu": binding})
    with pytest.raises(PipelineError) as info:
        run_pipeline(plan, frames(2), warmup=0)
    assert str(info.value) == problem
    outs, _ = run_pipeline(plan, frames(2), warmup=0, fallback_provider="CPUExecutionProvider")
    assert len(outs) == 2


def test_check_refuses_bad_runtime_options_naming_the_pu_and_the_fix():
    ort_bad = {"optimisation": "all"}
    assert ORT.check("p", PUBinding(cpus=(0,), runtime_options=ort_bad)).startswith(
        "PU 'p': runtime_options ['optimisation'] are not options of runtime onnxruntime (known: ")
    assert "'some'" in ORT.check("p", PUBinding(cpus=(0,), runtime_options={"optimization": "some"}))
    cases = [
        (PUBinding(cpus=(1,), runtime="openvino", runtime_options={"device": "NPU"}),
         "PU 'p': OpenVINO device NPU is not available here (available: CPU"),
        (PUBinding(cpus=(1,), runtime="openvino", runtime_options={"NO_SUCH_PROPERTY": 1}),
         "PU 'p': runtime_options ['NO_SUCH_PROPERTY'] are not options of runtime openvino on CPU"),
        (PUBinding(cpus=(1,), runtime="openvino", provider="CUDAExecutionProvider"),
         "PU 'p': provider CUDAExecutionProvider applies to runtime onnxruntime only"),
        (PUBinding(cpus=(1,), threads=2, runtime="openvino"),
         "PU 'p': OpenVINO runs threads=2 on CPUs (1,) only partly"),
        (PUBinding(cpus=(1,), runtime="openvino", runtime_options={"ENABLE_CPU_PINNING": True}),
         "PU 'p': ENABLE_CPU_PINNING makes OpenVINO move the worker off CPUs (1,)"),
    ]
    for binding, start in cases:
        problem = OV.check("p", binding)
        assert problem is not None and problem.startswith(start), problem
        assert "\n" not in problem and ";" in problem  # a fix follows the problem
    assert OV.check("p", PUBinding(cpus=(1,), runtime="openvino")) is None
    assert OV.check("p", PUBinding(cpus=(1,), threads=2, runtime="openvino",
                                   runtime_options={"allow_unpinned_threads": True})) is None
    assert OV.check("p", PUBinding(cpus=(1,), runtime="openvino",
                                   runtime_options={"device": "CPU", "PERFORMANCE_HINT": "LATENCY"})) is None


# ------------------------------------------------------------------------------------------------ OpenVINO
def test_openvino_runs_a_tiny_model_like_onnx_runtime_on_the_pinned_thread():
    m = diamond_model()
    binding = PUBinding(cpus=(1,), runtime="openvino")
    x = frames(1, seed=3)[0]

    def load_and_run():
        ov_runner = OV.load(m, binding, "p")
        ort_runner = ORT.load(m.SerializeToString(), PUBinding(cpus=(1,)), "p")
        try:
            return (ov_runner.input_names, ov_runner.output_names, ov_runner.input_specs,
                    ov_runner.describe(), ov_runner.run(["y"], x), ort_runner.run(["y"], x),
                    os.sched_getaffinity(0))
        finally:
            ov_runner.close()
            ort_runner.close()

    names, outputs, specs, info, got, ref, mask = on_pinned_thread(1, load_and_run)
    assert names == ["x"] and outputs == ["y"] and specs == [("x", [1, 16], "float32")]
    assert info["runtime"] == "openvino" and info["device"] == "CPU" and info["threads"] == 1
    assert "f32" in info["inference_precision"] or "float32" in info["inference_precision"]
    assert mask == {1}  # OpenVINO left the worker's pin alone (ENABLE_CPU_PINNING off)
    assert got[0].dtype == np.float32 and got[0].shape == (1, 16)
    assert np.max(np.abs(got[0] - ref[0])) <= 1e-5
    assert np.max(np.abs(got[0])) > 1e-2  # not a trivially zero output


def test_openvino_runner_names_a_tensor_the_model_lacks():
    runner = OV.load(chain_model(2), PUBinding(cpus=None, runtime="openvino"), "p")
    with pytest.raises(KeyError, match=r"no tensors \['h0'\]"):
        runner.run(["h0"], frames(1)[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["inception_v1", "squeezenet"])
def test_openvino_matches_onnx_runtime_on_zoo_stage_sub_models(name):
    # Each stage gets the tensors ORT computed for the earlier stages; OpenVINO and ORT then run the same
    # sub-model. The light zoo models' constant weights blow activations up to ~1e10, so compare relative to
    # each tensor's largest magnitude (measured with OpenVINO 2026.4 / ORT 1.32: <= 2.1e-5 for inception_v1,
    # <= 4.4e-6 for squeezenet; fp32 summation-order differences of long dot products).
    og, subs = topo_stages(load_model(name).model, name, 3)
    (x,) = og.inputs
    tensors = {x: np.random.default_rng(0).standard_normal(og.tensors[x].shape).astype(np.float32)}
    binding = PUBinding(cpus=(1,), runtime="openvino")

    def run_all():
        worst = []
        for sub in subs:
            feeds = {t: tensors[t] for t in sub.inputs}
            ref = ORT.load(sub.model, PUBinding(cpus=(1,)), "p").run(sub.outputs, feeds)
            got = OV.load(sub.model, binding, "p").run(sub.outputs, feeds)
            assert [g.shape for g in got] == [r.shape for r in ref]
            worst.append(scaled_diff(got, ref))
            tensors.update(zip(sub.outputs, ref))
        return worst

    worst = on_pinned_thread(1, run_all)
    assert max(worst) <= 1e-4, worst


# ------------------------------------------------------------------------------------------------ pipeline
def _mixed_plan(subs, model_inputs, model_outputs):
    """Stage k of ``subs`` on PU "a" (ORT, CPU 0) for even k, on "b" (OpenVINO, CPU 1) for odd k."""
    stages = [[Task(f"s{k}", k, "ab"[k % 2], sub.model, list(sub.inputs), list(sub.outputs), [])]
              for k, sub in enumerate(subs)]
    bindings = {"a": PUBinding(cpus=(0,)), "b": PUBinding(cpus=(1,), runtime="openvino")}
    return ExecutionPlan(stages, list(model_inputs), list(model_outputs), bindings)


def test_a_plan_mixing_onnx_runtime_and_openvino_pus_matches_the_unsplit_model():
    m = diamond_model()
    og, subs = topo_stages(m, "diamond", 3)
    plan = _mixed_plan(subs, og.inputs, og.outputs)
    fs = frames(20, seed=5)
    ref = reference_outputs(m, fs)
    with PipelineExecutor(plan) as ex:
        assert ex.affinity == {(0, "a"): frozenset({0}), (1, "b"): frozenset({1}), (2, "a"): frozenset({0})}
        assert [type(w.models[0]).__name__ for w in ex.workers] == ["OnnxRuntimeModel", "OpenVINOModel",
                                                                      "OnnxRuntimeModel"]
        outs = list(ex.run(fs))
        metrics = ex.metrics
    assert max_abs_diff(outs, ref) <= 1e-5
    assert max_abs_diff(outs[1:], ref[:-1]) > 1e-3  # in order
    assert {(e.stage, e.pu) for e in metrics.trace} == {(0, "a"), (1, "b"), (2, "a")}
    assert metrics.frames == 20 and set(metrics.pu_busy_s) == {"a", "b"}


@pytest.mark.slow
def test_mobilenet_v2_split_over_an_onnx_runtime_and_an_openvino_pu_matches_the_unsplit_model():
    model = load_model("mobilenet_v2").model  # seeded random weights: a well-conditioned real network
    og, subs = topo_stages(model, "mobilenet_v2", 4)
    plan = _mixed_plan(subs, og.inputs, og.outputs)
    (x,) = og.inputs
    rng = np.random.default_rng(1)
    fs = [{x: rng.standard_normal(og.tensors[x].shape).astype(np.float32)} for _ in range(4)]
    ref = reference_outputs(model, fs)
    outs, metrics = run_pipeline(plan, fs, warmup=1)
    worst = max(scaled_diff([o[n] for n in og.outputs], [r[n] for n in og.outputs])
                for o, r in zip(outs, ref))
    assert worst <= 1e-4  # measured 3.7e-6 with OpenVINO 2026.4 / ORT 1.32
    assert {e.pu for e in metrics.trace} == {"a", "b"}


# ------------------------------------------------------------------------------------------------ plan.json
def test_plan_documents_carry_the_runtime_and_old_documents_load_with_the_default(tmp_path):
    m = chain_model(2)
    onnx.save(m, str(tmp_path / "t.onnx"))
    options = {"device": "CPU", "INFERENCE_PRECISION_HINT": "f32"}
    plan = ExecutionPlan([[Task("t", 0, "b", m, ["x"], ["y"], [])]], ["x"], ["y"],
                         {"b": PUBinding(cpus=(1,), runtime="openvino", runtime_options=options)})
    doc = json.loads(json.dumps(plan_to_doc(plan, {"t": "t.onnx"})))
    assert (doc["bindings"]["b"]["runtime"], doc["bindings"]["b"]["runtime_options"]) == ("openvino", options)
    back = plan_from_doc(doc, str(tmp_path))
    assert back.bindings == plan.bindings
    for key in ("runtime", "runtime_options"):
        del doc["bindings"]["b"][key]
    old = plan_from_doc(doc, str(tmp_path))
    assert (old.bindings["b"].runtime, old.bindings["b"].runtime_options) == ("onnxruntime", {})
    doc["bindings"]["b"]["runtime_options"] = ["device", "CPU"]
    with pytest.raises(PlanError, match=r"^plan.json: malformed plan \(ValueError"):
        plan_from_doc(doc, str(tmp_path))


# ------------------------------------------------------------------------------------------------ agent
def _agent_session(agent_py: Path, requests):
    lines = "".join(json.dumps(dict(r, id=i)) + "\n" for i, r in enumerate(requests)).encode()
    proc = subprocess.run([sys.executable, "-B", str(agent_py)], input=lines, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def test_agent_lists_runtimes_and_profiles_through_the_openvino_adapter():
    import base64
    model_b64 = base64.b64encode(chain_model(3).SerializeToString()).decode("ascii")
    hello, ov, unknown = _agent_session(AGENTS / "agent.py", [
        {"op": "hello"},
        {"op": "profile", "model_b64": model_b64, "repeats": 3, "pu": {"cpus": [1], "runtime": "openvino"}},
        {"op": "profile", "model_b64": model_b64, "pu": {"cpus": [1], "runtime": "tflite"}}])
    assert hello["runtimes"]["onnxruntime"]["providers"] == hello["providers"]
    assert hello["runtimes"]["openvino"]["available"] is True
    assert "CPU" in hello["runtimes"]["openvino"]["devices"]
    assert ov["ok"] and ov["runtime"] == "openvino" and ov["cpus"] == [1] and ov["repeats"] == 3
    assert ov["runtime_info"]["device"] == "CPU" and ov["runtime_info"]["threads"] == 1
    assert ov["provider"] is None and ov["inputs"] == {"x": {"shape": [1, 16], "dtype": "float32"}}
    assert 0 < ov["min_s"] <= ov["median_s"]
    assert unknown["error"]["type"] == "BadRequest"
    assert "runtime 'tflite' is not implemented in this ppexec" in unknown["error"]["message"]


def test_an_agent_without_ppexec_next_to_it_refuses_every_measuring_op_and_keeps_serving(tmp_path):
    import base64
    shutil.copyfile(AGENTS / "agent.py", tmp_path / "agent.py")  # ppexec/ missing: no upload path does this
    model_b64 = base64.b64encode(chain_model(3).SerializeToString()).decode("ascii")
    replies = _agent_session(tmp_path / "agent.py", [
        {"op": "hello"},
        {"op": "profile", "model_b64": model_b64, "repeats": 2, "pu": {"cpus": [0]}},
        {"op": "transfer", "nbytes": 1024, "src_cpus": [0], "dst_cpus": [0]},
        {"op": "bye"}])
    for reply in replies[:3]:
        assert reply["error"]["type"] == "BadRequest" and "ppexec/ is not next to" in reply["error"]["message"]
    assert replies[3]["ok"] and replies[3]["bye"]
