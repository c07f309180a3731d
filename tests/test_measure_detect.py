"""``parapipe soc detect`` on this machine: real agent, real ONNX Runtime micro-benchmarks, loadable YAML."""
from __future__ import annotations

import os

import pytest
import yaml

from parapipe.cli import main
from parapipe.measure.detect import _cpu_pus, detect_soc
from parapipe.measure.agent_timer import open_agent_timer
from parapipe.soc.loader import load_soc

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def detected(tmp_path_factory):
    out = tmp_path_factory.mktemp("detect") / "this.yaml"
    assert main(["soc", "detect", "--out", str(out)]) == 0
    return out


def test_detected_profile_loads_and_is_measured(detected):
    soc = load_soc(str(detected))
    cpus = sorted(os.sched_getaffinity(0))
    assert soc.name.startswith("detected_")
    assert sorted(c for pu in soc.pus.values() for c in pu.execution.cpus) == cpus
    for pu in soc.pus.values():
        assert pu.kind == "cpu" and pu.execution.threads == len(pu.execution.cpus) == pu.cores
        assert 1e9 < pu.peak_flops < 1e14  # a GEMM on real cores: GFLOPS to tens of TFLOPS
        assert 1e8 < pu.memory_bandwidth_bytes_per_s < 1e13
        assert 0 < pu.op_overhead_s < 1e-3
    raw = yaml.safe_load(detected.read_text())
    first = next(iter(raw["pus"].values()))
    assert first["peak_flops"]["source"] == "detected"
    assert first["active_power_w"]["confidence"] == "low"
    if len(cpus) >= 2:
        t = soc.transfers.default
        assert 0 < t.alpha_s < 1e-2 and t.beta_bytes_per_s > 1e7


def test_per_core_profile_has_one_pu_per_core():
    with open_agent_timer() as runner:
        soc = detect_soc(runner, name="cores", per_core=True, repeats=2)
    cpus = sorted(os.sched_getaffinity(0))
    assert soc.pu_names == [f"cpu{c}" for c in cpus]
    assert all(pu.execution.cpus == (int(n[3:]),) and pu.execution.threads == 1 for n, pu in soc.pus.items())


def test_clusters_become_big_and_little():
    hello = {"cpus_allowed": [0, 1, 2, 3, 4, 5],
             "cpu_clusters": [{"cpus": [2, 3, 4, 5], "max_freq_hz": 2.2e9}, {"cpus": [0, 1],
                                                                             "max_freq_hz": 1.8e9}]}
    assert _cpu_pus(hello, per_core=False) == [("big", [2, 3, 4, 5], 2.2e9), ("little", [0, 1], 1.8e9)]
    assert [n for n, _, _ in _cpu_pus(hello, per_core=True)] == ["cpu2", "cpu3", "cpu4", "cpu5", "cpu0",
                                                                 "cpu1"]


def test_out_must_be_yaml(tmp_path, capsys):
    assert main(["soc", "detect", "--out", str(tmp_path / "x.txt")]) == 2
    assert "is not a .yaml file" in capsys.readouterr().err
