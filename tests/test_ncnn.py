"""Runtime ncnn end to end on ncnn's CPU device: pnnx conversions checked against ONNX Runtime, a two-PU profile
(PU ``a`` ONNX Runtime on CPU 0, PU ``b`` ncnn on CPU 1) profiled over a real loopback sshd, optimised and
deployed with matching outputs, and the optimize-time refusal of an operator ncnn cannot take."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml

import sshd
from parapipe.cli import main
from parapipe.execution.ncnn_convert import convert, pack
from parapipe.graph.coarsen import coarsen
from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import import_onnx
from parapipe.graph.zoo import load_model
from ppexec.bundle_run import CROSS_RUNTIME_RTOL
from ppexec.ncnn_runtime import NcnnAdapter
from ppexec.plan import PUBinding

pytest.importorskip("ncnn")
sshd_server = sshd.sshd_server  # the session-scoped loopback sshd fixture

def _q(value: float) -> dict:
    return {"value": value, "source": "test"}


def _pu(flops: float, execution: dict) -> dict:
    return {"kind": "cpu", "cores": 1, "frequency_hz": _q(2.0e9), "peak_flops": _q(flops), "precision": "fp32",
            "memory_bandwidth_bytes_per_s": _q(1.0e10),
            "efficiency": {k: _q(0.2) for k in ("conv", "gemm", "pool", "elementwise", "other")},
            "op_overhead_s": _q(1.0e-5), "active_power_w": _q(2.0), "idle_power_w": _q(0.1),
            "supported_ops": "all", "execution": execution}


#: PU ``a`` ONNX Runtime on CPU 0, PU ``b`` ncnn's CPU device on CPU 1 (fp32).
PROFILE = yaml.safe_dump({
    "schema_version": 1, "name": "two_pu_ncnn", "description": "test profile: a on ONNX Runtime, b on ncnn",
    "sources": {"test": "written by tests/test_ncnn.py"}, "static_power_w": _q(1.0),
    "memory_bandwidth_bytes_per_s": _q(1.0e10),
    "pus": {"a": _pu(1.6e10, {"cpus": [0], "threads": 1}),
            "b": _pu(2.0e10, {"cpus": [1], "threads": 1, "runtime": "ncnn", "runtime_options": {"device": "cpu"}})},
    "transfers": {"default": {"alpha_s": _q(1.0e-5), "beta_bytes_per_s": _q(5.0e9)}}})


@pytest.mark.parametrize("model, blocks", [("squeezenet", (1, 3)), ("inception_v1", (2, 4)),
                                           ("mobilenet_v2", (2, 4))])
def test_stage_submodels_converted_by_pnnx_match_onnx_runtime(model, blocks):
    og = import_onnx(load_model(model).model, name=model)
    bg = coarsen(og, max_blocks=6)
    sub = extract_submodel(og, [o for b in bg.blocks[blocks[0]:blocks[1]] for o in b.ops])
    loaded = NcnnAdapter().load(pack(convert(sub.model, model)), PUBinding(cpus=None), "b")
    assert loaded.input_names == sub.inputs and loaded.output_names == sub.outputs
    info = loaded.describe()
    assert info["device"] == "cpu" and not info["fp16_storage"] and not info["fp16_arithmetic"]
    assert info["precision"] == "fp32" and info["precision_read_back"]  # what ncnn runs in, read back
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n, shape, _ in loaded.input_specs}
    ref = ort.InferenceSession(sub.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        sub.outputs, feeds)
    for got, want in zip(loaded.run(sub.outputs, feeds), ref):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.max(np.abs(got - want)) <= 1e-5 + CROSS_RUNTIME_RTOL * np.max(np.abs(want))
    with pytest.raises(ValueError, match="batch 1 only"):
        loaded.run(sub.outputs, {n: np.concatenate([v, v]) for n, v in feeds.items()})


def test_profile_over_ssh_optimize_and_deploy_with_pu_b_on_ncnn(sshd_server, tmp_path, capsys):
    soc = tmp_path / "two_pu_ncnn.yaml"
    soc.write_text(PROFILE)
    db, out = tmp_path / "profile.sqlite", tmp_path / "front"
    ssh = ["--host", sshd_server.host, "--identity", str(sshd_server.client_key),
           "--known-hosts", str(sshd_server.known_hosts), "--python", sys.executable]
    # PU b through the agent's ncnn adapter (a tenth of the operator signatures: the rest is predicted)
    rc = main(["profile", "squeezenet", "--soc", str(soc), "--db", str(db), "--pus", "b", "--budget", "0.1",
               "--max-blocks", "6", "--repeats", "2", "--warmup", "1", "--no-transfers", "--json"] + ssh)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    profiled = json.loads(captured.out)
    assert profiled["measured"] > 0 and not profiled["failed"] and profiled["host"] != "local"
    rc = main(["optimize", "squeezenet", "--soc", str(soc), "--db", str(db), "--max-blocks", "6",
               "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    front = json.loads((out / "pareto.json").read_text())
    assert front["soc"]["pus"]["b"]["execution"]["runtime_options"] == {"device": "cpu", "precision": "fp32"}
    with_b = [p for p in front["points"] if any("b" in s["pus"] for s in p["mapping"]["stages"])]
    assert with_b, "no point of the front uses PU b"
    point = with_b[0]["id"]
    rc = main(["deploy", "squeezenet", "--mapping", str(out / "pareto.json"), "--point", point, "--frames", "6",
               "--db", str(db), "--remote-dir", str(tmp_path / "remote"), "--out", str(tmp_path / "run"),
               "--json"] + ssh)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    report = json.loads(captured.out)
    assert report["outputs_match"] is True
    rc = main(["runs", "--db", str(db), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and any(r.get("point") == point for r in (rows if isinstance(rows, list) else rows["runs"]))


def test_an_operator_pnnx_cannot_take_is_refused_at_optimize_time(tmp_path, capsys):
    soc = tmp_path / "two_pu_ncnn.yaml"
    soc.write_text(PROFILE)
    rc = main(["optimize", "squeezenet", "--soc", str(soc), "--pus", "b", "--max-blocks", "6",
               "--out", str(tmp_path / "front")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "Softmax" in err[0] and "PU b runs ncnn" in err[0], err
    assert not (tmp_path / "front").exists()


def test_vulkan_without_a_device_is_named_in_one_line_and_bind_ncnn_cpu_keeps_the_pu_on_ncnn():
    import ncnn

    from parapipe.errors import InputError
    from parapipe.execution.bindings import RuntimeBind, bind_soc, parse_binds
    from parapipe.execution.facts import check_board, local_facts
    from parapipe.soc.loader import load_soc

    soc = load_soc("amlogic_a311d")  # its Mali GPU runs ncnn's Vulkan device
    gpu = soc.pus["gpu"].execution
    assert gpu.runtime == "ncnn" and gpu.runtime_options == {"device": "vulkan", "precision": "fp32"}
    if ncnn.get_gpu_count() == 0:
        with pytest.raises(InputError) as info:
            check_board({"gpu": PUBinding(cpus=None, runtime="ncnn", runtime_options=dict(gpu.runtime_options))},
                        local_facts(), "this machine")
        assert "no Vulkan device" in str(info.value) and "--bind gpu=ncnn:cpu" in str(info.value)
        assert "\n" not in str(info.value)
    binds = parse_binds(["gpu=ncnn:cpu", "big=0", "little=ncnn:cpu@1"])
    assert isinstance(binds["gpu"], RuntimeBind) and binds["gpu"] == () and binds["big"] == (0,)
    bound = bind_soc(soc, binds).pus
    assert bound["gpu"].execution.runtime_options == {"device": "cpu", "precision": "fp32"}
    assert bound["gpu"].execution.cpus is None and bound["big"].execution.runtime == "onnxruntime"
    assert bound["little"].execution.runtime == "ncnn" and bound["little"].execution.cpus == (1,)
    with pytest.raises(InputError, match="runtime:device"):
        parse_binds(["gpu=tensorrt:dla"])
