"""Bundled SoC profiles: they load, every number has provenance, transfers/restrict/round-trip behave."""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from parapipe._paths import data_dir
from parapipe.errors import InputError
from parapipe.soc import PU, Execution, SoC, list_socs, load_soc
from parapipe.soc.loader import read_yaml, save_soc, soc_from_yaml_dict, soc_to_yaml_dict
from parapipe.soc.op_classes import OP_CLASSES, op_class

BUNDLED = ["amlogic_a311d", "black_sesame_a1000", "intel_core_ultra", "jetson_agx_orin", "jetson_orin_nano",
           "rockchip_rk3588"]
# Numbers in the file format that are counts or versions, not measured quantities.
PLAIN_INTEGER_FIELDS = {"schema_version", "cores", "threads", "cpus"}


def test_list_socs_names_the_bundled_profiles_and_no_host():
    assert list_socs() == BUNDLED
    assert not (data_dir("soc_profiles") / "host.yaml").exists()


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_profile_loads(name):
    soc = load_soc(name)
    assert soc.name == name
    assert soc.path == (data_dir("soc_profiles") / f"{name}.yaml").resolve()
    assert soc.pu_names and soc.static_power_w >= 0 and soc.memory_bandwidth_bytes_per_s > 0
    for pu in soc.pus.values():
        assert set(pu.efficiency) == set(OP_CLASSES)
        assert all(0 < e <= 1 for e in pu.efficiency.values())
        assert 0 <= pu.idle_power_w <= pu.active_power_w
        assert pu.peak_flops > 0 and pu.memory_bandwidth_bytes_per_s > 0


def _walk_numbers(node, path, sources, found):
    """Collect (path, problem) for every number in the raw YAML that lacks provenance."""
    if isinstance(node, dict):
        if "value" in node:
            found["quantities"] += 1
            if node.get("source") is not None:
                if node["source"] not in sources:
                    found["bad"].append((path, f"source {node['source']!r} not in sources"))
            elif node.get("confidence") != "low" or not node.get("note"):
                found["bad"].append((path, "neither source nor confidence: low with a note"))
            return
        if path and path[-1] == "operating_points":  # a table: its lists of numbers share the table's provenance
            if node.get("source") is not None:
                if node["source"] not in sources:
                    found["bad"].append((path, f"source {node['source']!r} not in sources"))
            elif node.get("confidence") != "low" or not node.get("note"):
                found["bad"].append((path, "table without source or confidence: low with a note"))
            node = {k: v for k, v in node.items() if not isinstance(v, list)}
        for key, value in node.items():
            _walk_numbers(value, path + [str(key)], sources, found)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _walk_numbers(value, path + [str(i)], sources, found)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        if not set(path) & PLAIN_INTEGER_FIELDS:
            found["bad"].append((path, f"bare number {node!r}"))


@pytest.mark.parametrize("name", BUNDLED)
def test_every_number_has_provenance(name):
    path = data_dir("soc_profiles") / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text())
    found = {"quantities": 0, "bad": []}
    _walk_numbers(raw, [], raw["sources"], found)
    assert found["bad"] == []
    assert found["quantities"] > 30
    # Every source key is used beyond its definition (a source: field, a note or the comment on a list), and
    # the loaded SoC knows the provenance of each number.
    text = path.read_text()
    for key in raw["sources"]:
        assert text.count(key) >= 2, key
    soc = load_soc(name)
    for pu_name in soc.pus:
        for field in ("peak_flops", "frequency_hz", "active_power_w", "efficiency.conv", "efficiency.depthwise"):
            assert f"pus.{pu_name}.{field}" in soc.provenance


def test_a311d_shape_and_op_support():
    soc = load_soc("amlogic_a311d")
    assert soc.pu_names == ["big", "little", "gpu", "npu"]
    assert soc.pus["big"].execution.cpus == (2, 3, 4, 5) and soc.pus["big"].execution.threads == 4
    assert soc.pus["little"].execution.cpus == (0, 1)
    npu = soc.pus["npu"]
    assert npu.precision == "int8" and npu.peak_flops == pytest.approx(5e12)
    assert npu.supports("Conv") and npu.supports("Concat") and not npu.supports("LRN")
    assert soc.pus["big"].supports("LRN") and soc.pus["big"].supported_ops is None


def test_a311d_calibration_reproduces_googlenet_order_of_magnitude():
    # The calibration data (soc_profiles/README.md): GoogLeNet (~3.2 GFLOPs) takes 114 ms on big, 100 ms on the
    # GPU, 311 ms on LITTLE with Arm Compute Library fp32 on the Khadas VIM3.
    soc = load_soc("amlogic_a311d")
    for pu_name, measured_s in (("big", 0.114), ("gpu", 0.100), ("little", 0.311)):
        pu = soc.pus[pu_name]
        compute_s = 3.2e9 / (pu.peak_flops * pu.efficiency["conv"])
        assert 0.6 * measured_s < compute_s < 1.3 * measured_s, pu_name
    # LITTLE is the slowest CPU cluster, the NPU the fastest conv engine.
    rate = {n: p.peak_flops * p.efficiency["conv"] for n, p in soc.pus.items()}
    assert rate["little"] < rate["big"] < rate["npu"]


def test_accelerators_cannot_run_everything():
    a1000 = load_soc("black_sesame_a1000")
    assert not a1000.pus["dla"].supports("LRN") and not a1000.pus["dla"].supports("Softmax")
    assert a1000.pus["dsp0"].supports("LRN") and a1000.pus["dsp1"].supports("Softmax")
    dla_rate = a1000.pus["dla"].peak_flops * a1000.pus["dla"].efficiency["conv"]
    dsp_rate = a1000.pus["dsp0"].peak_flops * a1000.pus["dsp0"].efficiency["conv"]
    assert dla_rate > 10 * dsp_rate
    orin = load_soc("jetson_agx_orin")
    for dla in ("dla0", "dla1"):
        pu = orin.pus[dla]
        assert pu.precision in ("fp16", "int8")
        assert pu.supports("Conv") and pu.supports("LRN") and pu.supports("Softmax")
        assert not pu.supports("Reshape") and not pu.supports("Transpose")
    assert orin.pus["dla1"].execution.provider_options["trt_dla_core"] == "1"
    assert orin.memory_bandwidth_bytes_per_s == pytest.approx(204.8e9)


def test_transfer_lookup_symmetric_default_and_same_pu():
    soc = load_soc("amlogic_a311d")
    assert soc.transfer("big", "gpu") == soc.transfer("gpu", "big") == pytest.approx((9.5e-4, 5.26e8))
    assert soc.transfer("little", "big") == pytest.approx((5e-5, 1e9))
    assert soc.transfer("gpu", "gpu") == (0.0, math.inf)
    alpha, beta = soc.alpha_matrix(), soc.beta_matrix()
    assert alpha.shape == beta.shape == (4, 4)
    assert np.all(np.diag(alpha) == 0) and np.all(np.isinf(np.diag(beta)))
    i, j = soc.pu_names.index("gpu"), soc.pu_names.index("npu")
    assert alpha[i, j] == soc.transfer("gpu", "npu")[0] and beta[j, i] == soc.transfer("npu", "gpu")[1]
    with pytest.raises(KeyError, match="no PU 'tpu'"):
        soc.transfer("big", "tpu")


def _cpu(name, **extra):
    fields = dict(name=name, kind="cpu", cores=1, frequency_hz=2e9, peak_flops=1.6e10, precision="fp32",
                  memory_bandwidth_bytes_per_s=5e9, efficiency={"conv": 0.5, "other": 0.2}, op_overhead_s=1e-5,
                  active_power_w=2.0, idle_power_w=0.1)
    fields.update(extra)
    return PU(**fields)


def test_directed_pair_uses_default_in_reverse_and_from_values_defaults():
    pus = [_cpu("a", execution={"cpus": [0]}), _cpu("b", execution=Execution(cpus=(1,)))]
    soc = SoC.from_values("host", pus, 3.0, 1e10, default_transfer=(1e-4, 2e9),
                          pair_transfers={("a", "b"): (5e-5, 8e9)})
    assert soc.transfer("a", "b") == (5e-5, 8e9)
    assert soc.transfer("b", "a") == (1e-4, 2e9)
    assert soc.pus["a"].execution.threads == 1 and soc.pus["b"].execution.cpus == (1,)
    assert soc.pus["a"].efficiency["gemm"] == 0.2 and soc.pus["a"].efficiency["conv"] == 0.5
    shared = SoC.from_values("host", pus, 3.0, 1e10)
    assert shared.transfer("b", "a") == (0.0, 1e10)


def test_restrict_keeps_file_order_pairs_and_provenance():
    soc = load_soc("amlogic_a311d")
    sub = soc.restrict(["npu", "big"])
    assert sub.pu_names == ["big", "npu"]
    assert [(p.src, p.dst) for p in sub.transfers.pairs] == [("big", "npu")]
    assert sub.transfer("npu", "big") == soc.transfer("npu", "big")
    assert sub.alpha_matrix().shape == (2, 2)
    original = next(i for i, p in enumerate(soc.transfers.pairs) if (p.src, p.dst) == ("big", "npu"))
    assert sub.provenance["transfers.pairs.0.alpha_s"] == soc.provenance[f"transfers.pairs.{original}.alpha_s"]
    assert not any(k.startswith("pus.gpu.") for k in sub.provenance)
    assert soc.pu_names == ["big", "little", "gpu", "npu"]  # the original is unchanged


@pytest.mark.parametrize("names, message", [
    (["big", "tpu"], "--pus: unknown PU 'tpu'; choose from big, little, gpu, npu"),
    ([], "--pus: no PU given"),
    (["gpu", "gpu"], "--pus: PU 'gpu' given twice"),
])
def test_restrict_rejects_bad_names(names, message):
    with pytest.raises(InputError) as info:
        load_soc("amlogic_a311d").restrict(names)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("name", BUNDLED)
def test_to_yaml_dict_round_trips(name, tmp_path):
    soc = load_soc(name)
    raw = soc_to_yaml_dict(soc)
    assert raw["pus"][soc.pu_names[0]]["peak_flops"]["value"] == soc.pus[soc.pu_names[0]].peak_flops
    again = soc_from_yaml_dict(yaml.safe_load(yaml.safe_dump(raw)), "round-trip")
    assert again.model_dump(exclude={"path"}) == soc.model_dump(exclude={"path"})
    saved = load_soc(save_soc(soc, tmp_path / f"{name}.yaml"))
    assert saved.model_dump(exclude={"path"}) == soc.model_dump(exclude={"path"})
    assert [p.name for p in tmp_path.iterdir()] == [f"{name}.yaml"]  # no temporary file left behind


def test_to_yaml_dict_marks_python_values_generated():
    soc = SoC.from_values("host", [_cpu("cpu0", execution={"cpus": [0]}), _cpu("cpu1")], 4.0, 2e10,
                          description="measured")
    raw = soc_to_yaml_dict(soc)
    assert raw["pus"]["cpu0"]["peak_flops"] == {"value": 1.6e10, "source": "generated"}
    assert "generated" in raw["sources"]
    again = soc_from_yaml_dict(raw)
    assert again.model_dump(exclude={"provenance", "sources"}) == soc.model_dump(exclude={"provenance", "sources"})
    assert again.provenance["static_power_w"].source == "generated"


def test_models_are_frozen_and_hashable():
    soc = load_soc("jetson_agx_orin")
    with pytest.raises(Exception):
        soc.pus["gpu"].peak_flops = 1.0
    assert len({soc.pus["dla0"], soc.pus["dla0"], soc.pus["dla1"]}) == 2
    assert hash(soc) == hash(load_soc("jetson_agx_orin"))


def test_loader_reads_unsigned_exponent_as_number(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("a: 1e10\nb: 2.5E-3\nc: '1e10'\nd: 7\n")
    assert read_yaml(path, "e.yaml") == {"a": 1e10, "b": 2.5e-3, "c": "1e10", "d": 7}


def test_op_class():
    assert op_class("Conv") == "conv" and op_class("Gemm") == "gemm" and op_class("LRN") == "normalization"
    assert op_class("Conv", group=32, in_channels=32) == "depthwise"
    assert op_class("Conv", group=2, in_channels=96) == "conv"
    assert op_class("Concat") == "other" and op_class("Relu") == "elementwise"
