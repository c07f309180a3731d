"""Every bad SoC profile gives one InputError line naming the file and the dotted field path."""
from __future__ import annotations

import copy

import pytest
import yaml

from parapipe._paths import data_dir
from parapipe.errors import InputError
from parapipe.soc import SoC, load_soc

BASE = yaml.safe_load((data_dir("soc_profiles") / "amlogic_a311d.yaml").read_text())


def _pair_index(raw, src, dst):
    return next(i for i, p in enumerate(raw["transfers"]["pairs"]) if (p["src"], p["dst"]) == (src, dst))


def _set(path, value):
    def mutate(raw):
        node = raw
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return mutate


def _drop(path):
    def mutate(raw):
        node = raw
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return mutate


def _pair_set(field, value):
    def mutate(raw):
        raw["transfers"]["pairs"][_pair_index(raw, "big", "gpu")][field] = value
    return mutate


def _duplicate_pair(raw):
    first = raw["transfers"]["pairs"][_pair_index(raw, "big", "gpu")]
    raw["transfers"]["pairs"].append({**first, "src": "gpu", "dst": "big", "symmetric": False})


def _rename_pu(raw):
    raw["pus"]["my gpu"] = raw["pus"].pop("gpu")


BIG_GPU = _pair_index(BASE, "big", "gpu")

# (id, mutation, field path expected in the message, words expected in the message)
CASES = [
    ("unknown key", _set(["pus", "big", "peak_flop"], 1), "pus.big.peak_flop", "unknown key"),
    ("unknown top-level key", _set(["extras"], 1), "extras", "unknown key"),
    ("missing field", _drop(["pus", "gpu", "peak_flops"]), "pus.gpu.peak_flops", "missing field"),
    ("missing transfers", _drop(["transfers"]), "transfers", "missing field"),
    ("missing schema_version", _drop(["schema_version"]), "schema_version", "missing field"),
    ("wrong type: string number", _set(["pus", "gpu", "peak_flops", "value"], "fast"),
     "pus.gpu.peak_flops.value", "expected a number"),
    ("wrong type: fractional cores", _set(["pus", "gpu", "cores"], 4.5), "pus.gpu.cores", "whole number"),
    ("wrong type: boolean value", _set(["static_power_w", "value"], True), "static_power_w.value", "a number"),
    ("wrong type: provider option", _set(["pus", "gpu", "execution", "provider_options"], {"x": 1}),
     "pus.gpu.execution.provider_options.x", "expected a string"),
    ("wrong type: bare number", _set(["pus", "gpu", "peak_flops"], 5), "pus.gpu.peak_flops", "provenance"),
    ("negative bandwidth", _set(["pus", "gpu", "memory_bandwidth_bytes_per_s", "value"], -1),
     "pus.gpu.memory_bandwidth_bytes_per_s", "must be > 0, got -1; give bytes per second"),
    ("zero SoC bandwidth", _set(["memory_bandwidth_bytes_per_s", "value"], 0), "memory_bandwidth_bytes_per_s",
     "must be > 0"),
    ("zero peak", _set(["pus", "npu", "peak_flops", "value"], 0), "pus.npu.peak_flops", "must be > 0"),
    ("negative frequency", _set(["pus", "big", "frequency_hz", "value"], -2.2e9), "pus.big.frequency_hz",
     "must be > 0"),
    ("zero transfer bandwidth", _set(["transfers", "default", "beta_bytes_per_s", "value"], 0),
     "transfers.default.beta_bytes_per_s", "must be > 0"),
    ("negative active power", _set(["pus", "gpu", "active_power_w", "value"], -1), "pus.gpu.active_power_w",
     "must be >= 0"),
    ("negative static power", _set(["static_power_w", "value"], -0.5), "static_power_w", "must be >= 0"),
    ("negative alpha", _pair_set("alpha_s", {"value": -1e-3, "source": "khadas_vim3"}),
     f"transfers.pairs.{BIG_GPU}.alpha_s", "must be >= 0"),
    ("idle above active", _set(["pus", "gpu", "idle_power_w", "value"], 5.0), "pus.gpu.idle_power_w",
     "must be <= active_power_w"),
    ("pair names unknown PU", _pair_set("dst", "tpu"), f"transfers.pairs.{BIG_GPU}.dst", "unknown PU 'tpu'"),
    ("pair from a PU to itself", _pair_set("dst", "big"), f"transfers.pairs.{BIG_GPU}", "both 'big'"),
    ("direction given twice", _duplicate_pair, f"transfers.pairs.{len(BASE['transfers']['pairs'])}",
     "already given"),
    ("no provenance", _drop(["pus", "gpu", "peak_flops", "source"]), "pus.gpu.peak_flops",
     "without provenance"),
    ("unknown source key", _set(["pus", "gpu", "peak_flops", "source"], "wikipedia"),
     "pus.gpu.peak_flops.source", "unknown source key 'wikipedia'"),
    ("low confidence without note", _drop(["pus", "npu", "idle_power_w", "note"]), "pus.npu.idle_power_w.note",
     "missing field"),
    ("other confidence level", _set(["pus", "npu", "idle_power_w", "confidence"], "high"),
     "pus.npu.idle_power_w.confidence", "must be one of"),
    ("efficiency above 1", _set(["pus", "big", "efficiency", "conv", "value"], 1.5), "pus.big.efficiency.conv",
     "(0, 1]"),
    ("unknown op class", _set(["pus", "big", "efficiency", "convolution"], {"value": 0.3, "source": "a311d_hw"}),
     "pus.big.efficiency.convolution", "unknown op class"),
    ("efficiency without other", _drop(["pus", "big", "efficiency", "other"]), "pus.big.efficiency.other",
     "missing field"),
    ("unknown op type", _set(["pus", "npu", "supported_ops"], ["Conv", "Covn"]), "pus.npu.supported_ops",
     "unknown ONNX op type 'Covn'; did you mean 'Conv'?"),
    ("supported_ops not a list", _set(["pus", "npu", "supported_ops"], "most"), "pus.npu.supported_ops",
     "'all' or a list"),
    ("unknown kind", _set(["pus", "npu", "kind"], "tpu"), "pus.npu.kind", "must be one of"),
    ("unknown precision", _set(["pus", "npu", "precision"], "int4"), "pus.npu.precision", "must be one of"),
    ("duplicate cpus", _set(["pus", "big", "execution", "cpus"], [2, 2]), "pus.big.execution.cpus", "distinct"),
    ("zero threads", _set(["pus", "big", "execution", "threads"], 0), "pus.big.execution.threads", ">= 1"),
    ("bad PU name", _rename_pu, "pus.my gpu", "not a valid PU name"),
    ("unsupported schema version", _set(["schema_version"], 2), "schema_version", "unsupported version 2"),
    ("sources not a mapping", _set(["sources"], ["a"]), "sources", "expected a mapping"),
]


@pytest.mark.parametrize("mutate, field, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_profile_gives_one_line_with_file_and_field(tmp_path, mutate, field, words):
    raw = copy.deepcopy(BASE)
    mutate(raw)
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(InputError) as info:
        load_soc(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert words in message
    assert "\n" not in message and "pydantic" not in message and "validation error" not in message
    assert "; " in message  # a fix is given


def test_unreadable_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("schema_version: 1\nname: x\npus: [big, gpu\ntransfers: {}\n")
    with pytest.raises(InputError, match=r"broken\.yaml: line 4, column \d+: invalid YAML"):
        load_soc(str(path))


def test_duplicate_yaml_key_is_rejected(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("schema_version: 1\nname: a\nname: b\n")
    with pytest.raises(InputError, match=r"dup\.yaml: name: duplicate key 'name' \(lines 2 and 3\); keep one"):
        load_soc(str(path))


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(InputError, match=r"list\.yaml: expected a mapping at the top level"):
        load_soc(str(path))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match=r"nope\.yaml: cannot read the file"):
        load_soc(str(tmp_path / "nope.yaml"))
    with pytest.raises(InputError, match="is a directory"):
        load_soc(str(tmp_path) + "/")


def test_unknown_profile_name_lists_bundled():
    with pytest.raises(InputError) as info:
        load_soc("raspberry_pi_9")
    message = str(info.value)
    assert "unknown SoC profile 'raspberry_pi_9'" in message
    assert "amlogic_a311d, black_sesame_a1000, intel_core_ultra, jetson_agx_orin, jetson_orin_nano, rockchip_rk3588" in message
    with pytest.raises(InputError, match="unknown SoC profile 'host'"):
        load_soc("host")


def test_from_values_reports_the_field():
    bad_pu = dict(name="cpu0", kind="cpu", cores=1, frequency_hz=2e9, peak_flops=1e10, precision="fp32",
                  memory_bandwidth_bytes_per_s=-5, efficiency={"other": 0.5}, op_overhead_s=0.0,
                  active_power_w=1.0, idle_power_w=0.0)
    with pytest.raises(InputError, match=r"^SoC 'host': pus\.cpu0\.memory_bandwidth_bytes_per_s: must be > 0"):
        SoC.from_values("host", [bad_pu], 1.0, 1e10)
    good_pu = {**bad_pu, "memory_bandwidth_bytes_per_s": 5e9}
    with pytest.raises(InputError, match=r"^SoC 'host': transfers\.pairs\.0\.dst: unknown PU 'cpu9'"):
        SoC.from_values("host", [good_pu], 1.0, 1e10, pair_transfers={("cpu0", "cpu9"): (0.0, 1e9)})


@pytest.mark.parametrize("word", ["no", "No", "yes", "on", "OFF", "y", "n", "N"])
def test_a_yaml_11_boolean_word_as_a_name_is_refused_in_one_line(tmp_path, word):
    text = yaml.safe_dump(BASE, sort_keys=False)
    path = tmp_path / "board.yaml"
    path.write_text(text.replace(f"name: {BASE['name']}\n", f"name: {word}\n", 1))
    with pytest.raises(InputError) as info:
        load_soc(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: name: '{word}' is a YAML 1.1 boolean"), message
    assert message.endswith(f'quote it: name: "{word}"') and "\n" not in message
    path.write_text(text.replace(f"name: {BASE['name']}\n", f'name: "{word}"\n', 1))  # quoted: a name
    assert load_soc(str(path)).name == word
    path.write_text(text.replace("\n  gpu:", f"\n  {word}:", 1))  # a PU name too
    with pytest.raises(InputError, match=rf"board\.yaml: pus\.{word}: '{word}' is a YAML 1\.1 boolean"):
        load_soc(str(path))


def test_a_name_that_loads_as_a_boolean_is_refused_and_saved_names_stay_strings(tmp_path):
    from parapipe.soc.loader import save_soc

    text = yaml.safe_dump(BASE, sort_keys=False)
    path = tmp_path / "board.yaml"
    path.write_text(text.replace(f"name: {BASE['name']}\n", "name: false\n", 1))
    with pytest.raises(InputError, match=r'board\.yaml: name: false is a boolean, not a name; quote it if it is '
                                         r'the name: name: "false"'):
        load_soc(str(path))
    for word in ("n", "no"):
        path.write_text(text.replace(f"name: {BASE['name']}\n", f"name: '{word}'\n", 1))
        saved = save_soc(load_soc(str(path)), tmp_path / "saved.yaml")  # written quoted, loads back
        assert load_soc(str(saved)).name == word
