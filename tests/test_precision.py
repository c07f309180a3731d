"""Precision as the profile says: the PU's precision reaches its runtime adapter, the adapter reads back what the
runtime computes in, and the verified run checks each tensor at the tolerance of what actually ran
(device_agents/ppexec/precision.py, runtimes.py, reference.py, bundle_run.py)."""
from __future__ import annotations

import base64
import copy
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml

from parapipe._paths import data_dir
from parapipe.cli import main
from parapipe.measure.timer import pu_target
from parapipe.soc import load_soc
from runtime_models import chain_model, frames

AGENTS = Path(__file__).resolve().parents[1] / "device_agents"
if str(AGENTS) not in sys.path:
    sys.path.insert(0, str(AGENTS))
from ppexec.plan import ExecutionPlan, PUBinding, Task, validate_plan  # noqa: E402
from ppexec.errors import PlanError  # noqa: E402
from ppexec.precision import PRECISION_RTOL, loosest, normalise_precision, precision_tolerance  # noqa: E402
from ppexec.reference import softmax_bound, tensor_precisions, within_tolerance  # noqa: E402
from ppexec.runtimes import ADAPTERS  # noqa: E402

ORT, OV = ADAPTERS["onnxruntime"], ADAPTERS["openvino"]
needs_cpus = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="the PUs pin CPUs 0 and 1")


def openvino_cpu_bf16() -> bool:
    """Whether OpenVINO's CPU device computes in bf16 when asked to here (AVX512-BF16 or AMX)."""
    pytest.importorskip("openvino", reason="the test extra installs openvino")
    runner = OV.load(chain_model(2), PUBinding(cpus=None, runtime="openvino", precision="bf16"), "p")
    return runner.describe()["precision"] == "bf16"


# ------------------------------------------------------------------------------------------------ tolerance
def test_the_tolerance_follows_the_precision_that_ran():
    assert precision_tolerance("fp32", 1e-5, 1e-4) == (1e-5, 1e-4)
    assert precision_tolerance(None, 1e-5, 1e-4) == (1e-5, 1e-4)  # not reported: fp32
    assert precision_tolerance("int8", 1e-5, 1e-4) == (1e-5, 1e-4)  # a quantized model's own ops: fp32
    assert precision_tolerance("bf16", 1e-5, 1e-4) == (1e-5, PRECISION_RTOL["bf16"])
    assert precision_tolerance("fp16", 1e-5, 1e-4) == (1e-5, PRECISION_RTOL["fp16"])
    assert 1e-4 < PRECISION_RTOL["fp16"] < PRECISION_RTOL["bf16"] < 1.0
    assert precision_tolerance("bf16", 0.0, 0.9) == (0.0, 0.9)  # never tighter than asked
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        precision_tolerance("fp8", 0.0, 0.0)
    assert [normalise_precision(v) for v in ("f32", "<Type: 'bfloat16'>", "<Type: 'float32'>", "f16", "i8")] \
        == ["fp32", "bf16", "fp32", "fp16", None]
    assert loosest([]) == "fp32" and loosest(["fp32", None, "int8"]) == "fp32"
    assert loosest(["fp16", "fp32"]) == "fp16" and loosest(["fp16", "bf16", "fp32"]) == "bf16"


def test_a_tensor_carries_the_loosest_precision_of_the_tasks_upstream_of_it():
    # s0 on a (fp32) -> s1 on b (bf16) -> s2 on a (fp32); s2 also reads the model input directly
    plan = ExecutionPlan([[Task("t0", 0, "a", None, ["x"], ["h0"], [])],
                          [Task("t1", 1, "b", None, ["h0"], ["h1"], [])],
                          [Task("t2", 2, "a", None, ["h1", "x"], ["y"], []),
                           Task("t3", 2, "a", None, ["h0"], ["z"], [])]],
                         ["x"], ["y", "z"], {"a": PUBinding(cpus=None), "b": PUBinding(cpus=None)})
    found = tensor_precisions(plan, {"t0": "fp32", "t1": "bf16", "t2": "fp32", "t3": "fp32"})
    assert found == {"h0": "fp32", "h1": "bf16", "y": "bf16", "z": "fp32"}


def test_a_softmax_output_matches_within_the_bound_of_its_input():
    # logits equal up to float32 rounding at 7e9 (one ulp is 512): the softmax may be anything
    z = np.full((1, 1000), 6.9e9, np.float32)
    ref_s = np.full((1, 1000), 1e-3, np.float32)
    got_s = np.zeros((1, 1000), np.float32)
    got_s[0, :8] = 0.125
    out, ref = {"s": got_s}, {"s": ref_s, "z": z}
    assert not within_tolerance(out, ref, ["s"], 1e-5, 1e-4)
    assert within_tolerance(out, ref, ["s"], 1e-5, 1e-4, softmax_inputs={"s": ("z", "Softmax")})
    assert not within_tolerance({"s": np.full((1, 1000), np.nan, np.float32)}, ref, ["s"], 1e-5, 1e-4,
                                softmax_inputs={"s": ("z", "Softmax")})
    # well-conditioned logits (|z| <= 4): the bound stays tight and a wrong softmax is refused
    z = np.linspace(-4, 4, 1000, dtype=np.float32)[None]
    ref_s = (np.exp(z) / np.exp(z).sum()).astype(np.float32)
    assert not within_tolerance({"s": ref_s[:, ::-1].copy()}, {"s": ref_s, "z": z}, ["s"], 1e-5, 1e-4,
                                softmax_inputs={"s": ("z", "Softmax")})
    assert softmax_bound("Softmax", 1e-4, 0.5) == pytest.approx(0.5 * np.expm1(2e-4))
    assert softmax_bound("LogSoftmax", 1e-4, 0.5) == 2e-4 and softmax_bound("Softmax", 1e3, 0.5) == 1.0
    # per-tensor tolerances: a bf16 tensor passes at bf16 tolerance, not at fp32's
    r = np.linspace(-1, 1, 64, dtype=np.float32)
    o = r + np.float32(0.01)
    assert not within_tolerance({"h": o}, {"h": r}, ["h"], 1e-5, 1e-4)
    assert within_tolerance({"h": o}, {"h": r}, ["h"], 1e-5, 1e-4,
                            tolerances={"h": precision_tolerance("bf16", 1e-5, 1e-4)})


def test_a_plan_with_an_unknown_precision_is_refused_in_one_line():
    plan = ExecutionPlan([[Task("t0", 0, "a", chain_model(2), ["x"], ["y"], [])]], ["x"], ["y"],
                         {"a": PUBinding(cpus=None, precision="fp8")})
    with pytest.raises(PlanError, match=r"bindings\.a\.precision: unknown precision 'fp8'.*fp32, fp16, bf16"):
        validate_plan(plan)


# ------------------------------------------------------------------------------------------------ adapters
def test_onnx_runtime_reports_fp32_and_says_once_when_the_profile_asked_for_less(caplog):
    with caplog.at_level(logging.WARNING, logger="ppexec.runtimes"):
        for _ in range(2):
            runner = ORT.load(chain_model(2), PUBinding(cpus=None, precision="fp16"), "gpu_like")
            assert runner.describe()["precision"] == "fp32"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "PU gpu_like: its profile says fp16" in lines[0]
    assert "CPUExecutionProvider has no option for it" in lines[0]


def test_openvino_computes_at_the_profile_precision_and_reads_it_back():
    pytest.importorskip("openvino", reason="the test extra installs openvino")
    import openvino as ov

    default = normalise_precision(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT"))
    fp32 = OV.load(chain_model(2), PUBinding(cpus=None, runtime="openvino"), "p").describe()
    assert fp32["precision"] == "fp32" and fp32["precision_read_back"] is True  # whatever the default (here
    # bf16 on CPUs with AVX512-BF16 or AMX)
    bf16 = OV.load(chain_model(2), PUBinding(cpus=None, runtime="openvino", precision="bf16"), "p").describe()
    assert bf16["precision"] == ("bf16" if default == "bf16" else bf16["precision"])
    assert bf16["precision"] in ("bf16", "fp32")  # a CPU without bf16 arithmetic computes fp32 and says so
    problem = OV.check("p", PUBinding(cpus=None, runtime="openvino",
                                      runtime_options={"INFERENCE_PRECISION_HINT": "bf16"}))
    assert problem == ("PU 'p': runtime_options.INFERENCE_PRECISION_HINT 'bf16' contradicts the PU's precision "
                       "fp32; remove it and set the PU's precision in the profile instead")
    assert OV.check("p", PUBinding(cpus=None, runtime="openvino", precision="bf16",
                                   runtime_options={"INFERENCE_PRECISION_HINT": "bf16"})) is None


# ------------------------------------------------------------------------------------------------ profiling
def test_profiling_measures_at_the_profile_precision(tmp_path):
    soc = load_soc(write_profile(tmp_path, "bf16"))
    assert pu_target(soc.pus["b"])["precision"] == "bf16"
    assert "precision" not in pu_target(soc.pus["a"])  # fp32: the request stays as before
    if not openvino_cpu_bf16():
        pytest.skip("OpenVINO's CPU device computes no bf16 on this CPU")
    model_b64 = base64.b64encode(chain_model(3).SerializeToString()).decode("ascii")
    lines = "".join(json.dumps(dict(r, id=i)) + "\n" for i, r in enumerate([
        {"op": "profile", "model_b64": model_b64, "repeats": 2, "pu": pu_target(soc.pus["b"])},
        {"op": "profile", "model_b64": model_b64, "repeats": 1, "pu": {"cpus": [0], "precision": "fp8"}}]))
    proc = subprocess.run([sys.executable, "-B", str(AGENTS / "agent.py")], input=lines.encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    bf16, bad = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert bf16["ok"] and bf16["runtime_info"]["precision"] == "bf16"
    assert bad["error"]["type"] == "BadRequest" and "pu.precision 'fp8' is not one of" in bad["error"]["message"]


# ------------------------------------------------------------------------------------------------ runs
def write_profile(tmp_path: Path, b_precision: str) -> Path:
    """PU ``a`` (ONNX Runtime, CPU 0) and PU ``b`` (OpenVINO's CPU device, CPU 1, ``b_precision``)."""
    raw = yaml.safe_load((data_dir("soc_profiles") / "amlogic_a311d.yaml").read_text())
    a, b = copy.deepcopy(raw["pus"]["little"]), copy.deepcopy(raw["pus"]["little"])
    a["cores"] = b["cores"] = 1
    a["execution"] = {"cpus": [0], "threads": 1}
    b["execution"] = {"cpus": [1], "threads": 1, "runtime": "openvino", "runtime_options": {"device": "CPU"}}
    b["precision"] = b_precision
    for pu in (a, b):
        pu.pop("operating_points", None)
    raw.pop("pipeline", None)
    raw.update(name=f"two_cores_{b_precision}", pus={"a": a, "b": b})
    raw["transfers"] = {"default": raw["transfers"]["default"]}
    path = tmp_path / f"two_cores_{b_precision}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_point(tmp_path: Path, capsys, precision: str, wanted) -> dict:
    """Optimize squeezenet for the two-PU profile, run the first point whose stage PUs satisfy ``wanted``."""
    out = tmp_path / precision
    assert main(["optimize", "squeezenet", "--soc", str(write_profile(tmp_path, precision)), "--out", str(out),
                 "--no-plot", "--time-limit", "1"]) == 0
    doc = json.loads((out / "pareto.json").read_text())
    assert doc["soc"]["pus"]["b"].get("precision", "fp32") == precision
    assert "precision" not in doc["soc"]["pus"]["a"]  # fp32 PUs are written as before
    stages = {p["id"]: [sorted(st["pus"]) for st in p["mapping"]["stages"]] for p in doc["points"]}
    point = next((pid for pid, s in stages.items() if wanted(s)), None)
    assert point is not None, stages
    capsys.readouterr()
    code = main(["run", "squeezenet", "--mapping", str(out / "pareto.json"), "--point", point, "--frames", "8",
                 "--json", "--db", ""])
    stdout, err = capsys.readouterr()
    assert code in (0, 1), err
    return json.loads(stdout)


@pytest.mark.slow
@needs_cpus
def test_squeezenet_with_its_last_stage_on_an_openvino_fp32_pu_matches(tmp_path, capsys):
    # OpenVINO's CPU device defaults to bf16 on CPUs with AVX512-BF16 or AMX; the profile says fp32, so the PU
    # runs fp32. The light zoo squeezenet's logits are equal up to rounding at ~7e9, where OpenVINO's other
    # summation order moves its softmax output by up to 0.124: that output is checked through its logits.
    pytest.importorskip("openvino", reason="the test extra installs openvino")
    rep = run_point(tmp_path, capsys, "fp32", lambda s: len(s) >= 2 and s[-1] == ["b"])
    assert rep["precisions"] == {"a": "fp32", "b": "fp32"} and rep["bindings"]["b"]["precision"] == "fp32"
    assert rep["outputs_match"] is True, rep


@pytest.mark.slow
@needs_cpus
def test_a_bf16_pu_runs_in_bf16_and_is_checked_at_bf16_tolerance(tmp_path, capsys):
    if not openvino_cpu_bf16():
        pytest.skip("OpenVINO's CPU device computes no bf16 on this CPU")
    rep = run_point(tmp_path, capsys, "bf16", lambda s: len(s) >= 2 and s[0] == ["b"] and ["a"] in s[1:])
    assert rep["precisions"] == {"a": "fp32", "b": "bf16"} and rep["bindings"]["b"]["precision"] == "bf16"
    assert rep["outputs_match"] is True, rep
    # the handed-over tensors differ by bf16 rounding: far beyond the fp32 tolerance, within bf16's
    assert rep["rtol"] < rep["max_scaled_diff"] <= PRECISION_RTOL["bf16"]
