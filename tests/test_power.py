"""Measured energy (device_agents/ppexec/power.py) on fake sysfs trees: RAPL counters with a wrap-around,
hwmon power and energy inputs, a Jetson's INA3221 rails, a command printing watts; the profile's
``power_sensor`` carried to a real run, into the report, the ``runs`` table and the printed table."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ppexec.errors import PlanError
from ppexec.power import PowerMeter, detect_sensor

SLOW = 60.0  # interval_s: no sample between start() and stop() unless a test wants one


def put(root: Path, rel: str, value) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")
    return path


def rapl_tree(root: Path) -> None:
    put(root, "class/powercap/intel-rapl:0/energy_uj", 262_143_000_000 - 1_000)  # 1 mJ before the wrap
    put(root, "class/powercap/intel-rapl:0/max_energy_range_uj", 262_143_000_000)
    put(root, "class/powercap/intel-rapl:0:0/energy_uj", 5)  # a sub-zone: already in its parent
    put(root, "class/powercap/intel-rapl:1/energy_uj", 2_000_000)


def test_powercap_counters_top_zones_only_and_a_wrap_around(tmp_path):
    rapl_tree(tmp_path)
    meter = PowerMeter({"kind": "powercap", "interval_s": SLOW}, root=str(tmp_path)).start()
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 500)  # wrapped: 1000 + 500 µJ
    put(tmp_path, "class/powercap/intel-rapl:0:0/energy_uj", 9_000_000)  # ignored
    put(tmp_path, "class/powercap/intel-rapl:1/energy_uj", 2_250_000)  # 250 000 µJ
    assert meter.stop() == pytest.approx((1_500 + 250_000) * 1e-6)


def test_powercap_counter_read_between_samples_sees_each_wrap(tmp_path):
    rapl_tree(tmp_path)
    meter = PowerMeter({"kind": "powercap", "paths": ["class/powercap/intel-rapl:0/energy_uj"],
                        "interval_s": SLOW}, root=str(tmp_path)).start()
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 262_142_000_000)  # a wrap and nearly a full range
    meter._sample()  # what the sampling thread does every interval
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 1_000)
    # (max - start) + 262 142 000 000, then (max - 262 142 000 000) + 1 000
    assert meter.stop() == pytest.approx((1_000 + 262_142_000_000 + 1_000_000 + 1_000) * 1e-6, rel=1e-12)


def test_hwmon_power_is_integrated_and_energy_inputs_are_counters(tmp_path):
    put(tmp_path, "class/hwmon/hwmon0/power1_input", 5_000_000)  # 5 W in µW
    meter = PowerMeter({"kind": "hwmon", "interval_s": 0.01}, root=str(tmp_path)).start()
    import time

    time.sleep(0.1)
    energy = meter.stop()
    span = meter.samples[-1][0] - meter.samples[0][0]
    assert len(meter.samples) > 2 and span > 0.09
    assert energy == pytest.approx(5.0 * span)
    put(tmp_path, "class/hwmon/hwmon1/energy1_input", 10)  # a counter (µJ) is preferred where a chip has one
    meter = PowerMeter({"kind": "hwmon", "interval_s": SLOW}, root=str(tmp_path)).start()
    put(tmp_path, "class/hwmon/hwmon1/energy1_input", 3_000_010)
    assert meter.stop() == pytest.approx(3.0) and not meter.power_files


def ina3221_tree(root: Path) -> None:
    dev = "class/hwmon/hwmon2"
    put(root, f"{dev}/name", "ina3221")
    for n, (label, mv, ma) in enumerate([("VDD_IN", 5000, 2000), ("VDD_CPU_GPU_CV", 5000, 800),
                                         ("VDD_SOC", 5000, 400)], start=1):
        put(root, f"{dev}/in{n}_label", label)
        put(root, f"{dev}/in{n}_input", mv)
        put(root, f"{dev}/curr{n}_input", ma)
    put(root, "class/hwmon/hwmon3/name", "cpu_thermal")


def test_ina3221_board_input_rail_by_default_or_the_named_rails(tmp_path):
    ina3221_tree(tmp_path)
    assert PowerMeter({"kind": "ina3221"}, root=str(tmp_path)).watts() == pytest.approx(10.0)  # 5 V x 2 A
    rails = PowerMeter({"kind": "ina3221", "rails": ["VDD_CPU_GPU_CV", "VDD_SOC"]}, root=str(tmp_path))
    assert rails.watts() == pytest.approx(4.0 + 2.0)


def test_command_printing_watts(tmp_path):
    meter = PowerMeter({"kind": "command", "command": [sys.executable, "-c", "print('board: 3.5 W')"]})
    assert meter.watts() == pytest.approx(3.5)


@pytest.mark.parametrize("spec,match", [
    ({"kind": "powercap"}, "power_sensor: powercap: cannot read the sensor (no powercap sensor found under"),
    ({"kind": "hwmon", "paths": ["class/hwmon/hwmon9/power1_input"]}, "cannot read the sensor"),
    ({"kind": "command", "command": [sys.executable, "-c", "print('n/a')"]}, "printed no number"),
    ({"kind": "command", "command": [sys.executable, "-c", "import sys; sys.exit(3)"]}, "cannot read the sensor"),
    ({"kind": "thermocouple"}, "power_sensor: kind: unknown kind 'thermocouple'"),
])
def test_a_sensor_that_cannot_be_read_fails_before_the_run(tmp_path, spec, match):
    with pytest.raises(PlanError, match=match.replace("(", r"\(")):
        PowerMeter(spec, root=str(tmp_path))


def test_detect_sensor(tmp_path, monkeypatch):
    assert detect_sensor(str(tmp_path)) is None
    ina3221_tree(tmp_path)
    assert detect_sensor(str(tmp_path))["kind"] == "ina3221"
    rapl_tree(tmp_path)
    assert detect_sensor(str(tmp_path))["kind"] == "powercap"
    monkeypatch.setenv("PPEXEC_SYSFS_ROOT", str(tmp_path))
    assert detect_sensor()["kind"] == "powercap"


def test_profile_power_sensor_section_round_trips_and_travels_in_the_soc_ref(tmp_path):
    from parapipe.soc import load_soc
    from parapipe.soc.loader import save_soc, soc_to_yaml_dict
    from parapipe.app.resolve import soc_ref

    soc = load_soc("jetson_agx_orin")
    assert soc.power_sensor is None and soc_ref(soc).power_sensor is None
    raw = soc_to_yaml_dict(soc)
    raw["power_sensor"] = {"kind": "ina3221", "rails": ["VDD_IN"], "interval_s": 0.05}
    from parapipe.soc.loader import soc_from_yaml_dict

    with_sensor = soc_from_yaml_dict(raw)
    save_soc(with_sensor, tmp_path / "orin.yaml")
    again = load_soc(str(tmp_path / "orin.yaml"))
    assert again.power_sensor == with_sensor.power_sensor
    assert soc_ref(again).power_sensor == {"kind": "ina3221", "paths": [], "rails": ["VDD_IN"], "command": [],
                                           "interval_s": 0.05}


@pytest.mark.slow
@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="the host mapping pins CPUs 0 and 1")
def test_run_measures_energy_with_the_profile_sensor_and_records_it(tmp_path, capsys):
    from deploy_mappings import two_stage_doc, write_doc

    from parapipe.cli import main

    power = put(tmp_path / "sys", "class/hwmon/hwmon0/power1_input", 4_000_000)  # a steady 4 W
    doc = two_stage_doc("squeezenet")
    doc["soc"]["power_sensor"] = {"kind": "hwmon", "paths": [str(power)], "rails": [], "command": [],
                                  "interval_s": 0.02}
    path = write_doc(doc, tmp_path / "pareto.json")
    db = tmp_path / "db.sqlite"
    capsys.readouterr()
    assert main(["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "40", "--json",
                 "--db", str(db)]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["energy_j"] == pytest.approx(4.0 * rep["wall_s"] / rep["frames"], rel=0.25)
    assert rep["predicted"]["energy_j"] == 0.5  # the document's figure, printed next to the measurement
    assert main(["runs", "--db", str(db), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["energy_j"] == rep["energy_j"] and row["predicted_energy_j"] == 0.5
    assert main(["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "20", "--db", ""]) == 0
    assert "measured with the profile's power sensor" in capsys.readouterr().out
    del doc["soc"]["power_sensor"]
    write_doc(doc, path)
    assert main(["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "20", "--db", ""]) == 0
    assert "estimate: the profile names no power sensor" in capsys.readouterr().out
