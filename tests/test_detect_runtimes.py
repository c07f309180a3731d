"""``parapipe soc detect`` names the runtimes it finds (ONNX Runtime providers, OpenVINO devices, ncnn with or
without a Vulkan device) and binds a PU to each accelerator they offer."""
from __future__ import annotations

import importlib.util

from parapipe.measure.detect import runtime_bindings, runtime_findings

_ORT = {"available": True, "version": "1.19.2", "providers": ["CPUExecutionProvider"]}


def _hello(openvino=None, ncnn=None, providers=("CPUExecutionProvider",)):
    runtimes = {"onnxruntime": dict(_ORT, providers=list(providers))}
    if openvino is not None:
        runtimes["openvino"] = openvino
    if ncnn is not None:
        runtimes["ncnn"] = ncnn
    return {"providers": list(providers), "runtimes": runtimes}


def test_openvino_gpu_and_npu_and_ncnn_vulkan_become_pus():
    hello = _hello(openvino={"available": True, "version": "2025.3", "devices": ["CPU", "GPU.0", "NPU"]},
                   ncnn={"available": True, "version": "1.0.20250503", "gpu_count": 1, "gpus": ["Mali-G610"]},
                   providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
    bound = [(kind, e.runtime, dict(e.runtime_options), e.provider) for kind, e, _ in runtime_bindings(hello)]
    assert bound == [("gpu", "onnxruntime", {}, "CUDAExecutionProvider"),
                     ("gpu", "openvino", {"device": "GPU.0"}, "CPUExecutionProvider"),
                     ("npu", "openvino", {"device": "NPU"}, "CPUExecutionProvider"),
                     ("gpu", "ncnn", {"device": "vulkan"}, "CPUExecutionProvider")]
    lines = runtime_findings(hello)
    assert lines[0] == "onnxruntime 1.19.2: providers CUDAExecutionProvider, CPUExecutionProvider"
    assert "openvino 2025.3: devices CPU, GPU.0, NPU" in lines
    assert "ncnn 1.0.20250503: 1 Vulkan device(s) Mali-G610" in lines


def test_missing_runtimes_and_ncnn_without_vulkan_bind_nothing_and_say_why():
    hello = _hello(openvino={"available": False, "version": None, "reason": "No module named 'openvino'"},
                   ncnn={"available": True, "version": "1.0.20261020", "gpu_count": 0, "gpus": []})
    assert runtime_bindings(hello) == []
    lines = runtime_findings(hello)
    assert "openvino: not usable (No module named 'openvino')" in lines
    assert any(line.startswith("ncnn 1.0.20261020: no Vulkan device") for line in lines)
    assert runtime_findings({"providers": ["CPUExecutionProvider"]}) == [
        "onnxruntime ?: providers CPUExecutionProvider"]  # an older agent's hello: no runtimes entry


def test_this_machines_hello_reports_ncnn():
    """The agent's facts carry an ncnn entry (imported only when installed) with its Vulkan device count."""
    from ppexec.timing import machine_facts

    facts = machine_facts()
    entry = facts["runtimes"]["ncnn"]
    installed = importlib.util.find_spec("ncnn") is not None
    assert entry["available"] == installed
    assert isinstance(entry["gpu_count"], int) and len(entry["gpus"]) == entry["gpu_count"]
    found = runtime_findings(facts)
    assert any(line.startswith("ncnn") for line in found)
    bound = {e.runtime for _, e, _ in runtime_bindings(facts)}
    assert ("ncnn" in bound) == (installed and entry["gpu_count"] > 0)
