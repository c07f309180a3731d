"""``parapipe soc detect`` on this machine: real agent, real ONNX Runtime micro-benchmarks, loadable YAML."""
from __future__ import annotations

import os

import pytest
import yaml

from parapipe.cli import main
from parapipe.measure.detect import _cpu_pus, cpu_grouping, detect_soc
from parapipe.measure.agent_timer import open_agent_timer
from parapipe.soc.loader import load_soc

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def detected(tmp_path_factory):
    out = tmp_path_factory.mktemp("detect") / "this.yaml"
    assert main(["soc", "detect", "--out", str(out)]) == 0
    return out


def test_default_grouping_is_pipelineable_and_said(tmp_path, capsys):
    """Without --per-core/--per-cluster: one PU per core where every core is in one cluster (this machine, as
    sysfs groups it), so the profile has PUs to pipeline across; the output says which and how to get the other."""
    from ppexec.timing import machine_facts

    facts = machine_facts()
    per_core, _ = cpu_grouping(facts)
    capsys.readouterr()
    out = tmp_path / "d.yaml"
    assert main(["soc", "detect", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    soc = load_soc(str(out))
    if len(facts["cpu_clusters"]) == 1 and len(os.sched_getaffinity(0)) > 1:
        assert per_core and len(soc.pus) == len(os.sched_getaffinity(0)) >= 2
        assert "PUs: one PU per core" in text and "--per-cluster" in text
    assert main(["soc", "detect", "--out", str(out), "--per-cluster"]) == 0
    text = capsys.readouterr().out
    assert "PUs: one PU per CPU cluster, as --per-cluster asked (--per-core for one PU per core)" in text
    assert len(load_soc(str(out)).pus) == len(facts["cpu_clusters"])


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


def test_grouping_per_cluster_on_big_little_per_core_on_one_cluster():
    two = {"cpus_allowed": [0, 1, 2, 3], "cpu_clusters": [{"cpus": [2, 3]}, {"cpus": [0, 1]}]}
    one = {"cpus_allowed": [0, 1, 2, 3], "cpu_clusters": [{"cpus": [0, 1, 2, 3]}]}
    single = {"cpus_allowed": [1], "cpu_clusters": [{"cpus": [0, 1, 2, 3]}]}
    assert cpu_grouping(two)[0] is False and "--per-core" in cpu_grouping(two)[1]
    assert cpu_grouping(one)[0] is True and "nothing to pipeline" in cpu_grouping(one)[1]
    assert cpu_grouping(single)[0] is False


def test_out_must_be_yaml(tmp_path, capsys):
    assert main(["soc", "detect", "--out", str(tmp_path / "x.txt")]) == 2
    assert "is not a .yaml file" in capsys.readouterr().err
