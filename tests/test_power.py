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


class FakeClock:
    """Monotonic seconds set by the test: reads are timed without waiting, and the sampling thread (which only
    samples once the clock has moved an interval) stays idle unless the test moves it."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


RANGE_UJ = 262_143_328_850  # max_energy_range_uj of an Intel package zone (32-bit counter, 61 µJ units)


def rapl_tree(root: Path, psys: bool = False, mmio: bool = True) -> None:
    """Two packages with sub-zones (core, dram), optionally a psys zone, and the MMIO copy of package 0."""
    zones = {"intel-rapl:0": ("package-0", RANGE_UJ - 1_000),  # 1 mJ before the wrap
             "intel-rapl:0:0": ("core", 5), "intel-rapl:0:1": ("dram", 7),
             "intel-rapl:1": ("package-1", 2_000_000)}
    if psys:
        zones["intel-rapl:2"] = ("psys", 10_000_000)
    if mmio:
        zones["intel-rapl-mmio:0"] = ("package-0", 3)
    for zone, (name, value) in zones.items():
        put(root, f"class/powercap/{zone}/name", name)
        put(root, f"class/powercap/{zone}/energy_uj", value)
        put(root, f"class/powercap/{zone}/max_energy_range_uj", RANGE_UJ)


def test_powercap_counters_packages_only_and_a_wrap_around(tmp_path):
    rapl_tree(tmp_path)
    clock = FakeClock()
    meter = PowerMeter({"kind": "powercap", "interval_s": SLOW}, root=str(tmp_path), clock=clock).start()
    assert [os.path.basename(os.path.dirname(c.path)) for c in meter.counters] == ["intel-rapl:0", "intel-rapl:1"]
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 500)  # wrapped: 1000 + 500 µJ
    put(tmp_path, "class/powercap/intel-rapl:0:0/energy_uj", 9_000_000)  # a sub-zone: ignored
    put(tmp_path, "class/powercap/intel-rapl-mmio:0/energy_uj", 9_000_000)  # package 0 again: ignored
    put(tmp_path, "class/powercap/intel-rapl:1/energy_uj", 2_250_000)  # 250 000 µJ
    clock.now += 1.0
    result = meter.stop()
    assert result.unknown is None and result.energy_j == pytest.approx((1_500 + 250_000) * 1e-6)
    assert result.window_s == 1.0 and any("intel-rapl-mmio" in w for w in result.warnings)


def test_powercap_prefers_psys_which_contains_the_packages(tmp_path):
    rapl_tree(tmp_path, psys=True)
    clock = FakeClock()
    meter = PowerMeter({"kind": "powercap", "interval_s": SLOW}, root=str(tmp_path), clock=clock).start()
    assert [os.path.basename(os.path.dirname(c.path)) for c in meter.counters] == ["intel-rapl:2"]
    put(tmp_path, "class/powercap/intel-rapl:1/energy_uj", 9_000_000)
    put(tmp_path, "class/powercap/intel-rapl:2/energy_uj", 13_000_000)  # 3 J for the whole platform
    clock.now += 1.0
    result = meter.stop()
    assert result.energy_j == pytest.approx(3.0)
    assert any("read psys only: it contains intel-rapl:0, intel-rapl:1" in w for w in result.warnings)


def test_powercap_given_nested_paths_reads_the_outer_zone_once(tmp_path):
    rapl_tree(tmp_path, psys=True)
    clock = FakeClock()
    paths = [f"class/powercap/{z}/energy_uj" for z in ("intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1")]
    meter = PowerMeter({"kind": "powercap", "paths": paths, "interval_s": SLOW}, root=str(tmp_path),
                       clock=clock).start()
    assert len(meter.counters) == 1
    put(tmp_path, "class/powercap/intel-rapl:0:0/energy_uj", 1_000_005)
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 2_000_000)
    clock.now += 1.0
    result = meter.stop()
    assert result.energy_j == pytest.approx(2.001)
    assert "left out intel-rapl:0:0: it is a sub-zone of intel-rapl:0, which counts it already" in result.warnings
    paths = [f"class/powercap/{z}/energy_uj" for z in ("intel-rapl:2", "intel-rapl:1")]
    meter = PowerMeter({"kind": "powercap", "paths": paths}, root=str(tmp_path))
    assert len(meter.counters) == 1 and meter.notes == ["left out intel-rapl:1: psys contains it"]


def small_range_tree(root: Path, start_uj: int = 900_000) -> None:
    put(root, "class/powercap/intel-rapl:0/name", "package-0")
    put(root, "class/powercap/intel-rapl:0/energy_uj", start_uj)
    put(root, "class/powercap/intel-rapl:0/max_energy_range_uj", 1_000_000)  # 1 J: 0.1 s at 10 W


def test_poll_interval_is_chosen_from_the_range_and_each_wrap_adds_the_range_once(tmp_path):
    small_range_tree(tmp_path)
    clock = FakeClock()
    meter = PowerMeter({"kind": "powercap", "interval_s": SLOW, "max_power_w": 10}, root=str(tmp_path),
                       clock=clock).start()
    assert meter.interval_s == pytest.approx(0.05)  # half the 0.1 s the range lasts at 10 W
    for value in [200_000, 500_000, 900_000, 100_000]:  # two wraps
        put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", value)
        clock.now += 0.05
        meter._sample()  # what the sampling thread does every interval
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 400_000)
    clock.now += 0.05
    result = meter.stop()
    # 0.3 + 0.3 + 0.4 + 0.2 + 0.3 J: each of the two wraps adds the 1 J range once
    assert result.unknown is None and result.energy_j == pytest.approx(1.5)


def test_a_read_later_than_the_range_lasts_gives_energy_unknown_not_a_tiny_number(tmp_path):
    small_range_tree(tmp_path)
    clock = FakeClock()
    meter = PowerMeter({"kind": "powercap", "interval_s": SLOW, "max_power_w": 10}, root=str(tmp_path),
                       clock=clock).start()
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 950_000)  # looks like 0.05 J; 3 wraps could hide
    clock.now += 0.35  # the sampling thread stalled for 3.5 ranges
    result = meter.stop()
    assert result.energy_j is None and "the wraps in between cannot be counted" in result.unknown


def test_a_counter_without_its_range_gives_energy_unknown_with_the_reason(tmp_path):
    small_range_tree(tmp_path)
    (tmp_path / "class/powercap/intel-rapl:0/max_energy_range_uj").unlink()
    clock = FakeClock()
    meter = PowerMeter({"kind": "powercap"}, root=str(tmp_path), clock=clock).start()
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 950_000)
    clock.now += 1.0
    result = meter.stop()
    assert result.energy_j is None and "has no max_energy_range_uj" in result.unknown
    assert "cannot be told from a reset" in result.unknown


def test_an_implausible_reading_is_refused_with_its_value(tmp_path):
    small_range_tree(tmp_path, start_uj=1_000)
    put(tmp_path, "class/powercap/intel-rapl:0/max_energy_range_uj", RANGE_UJ)
    clock = FakeClock()
    meter = PowerMeter({"kind": "powercap"}, root=str(tmp_path), clock=clock).start()
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 1_000 + 2 ** 32)  # a 32-bit wrap misread as a jump
    clock.now += 0.001
    result = meter.stop()
    assert result.energy_j is None and result.unknown.startswith("implausible")
    assert "(4.29 MW, above the plausible 1000 W)" in result.unknown
    put(tmp_path, "class/hwmon/hwmon0/power1_input", int(4.29e12))  # µW
    meter = PowerMeter({"kind": "hwmon", "interval_s": SLOW}, root=str(tmp_path), clock=clock).start()
    clock.now += 1.0
    result = meter.stop()
    assert result.energy_j is None and "implausible: the sensor read 4.29 MW" in result.unknown


def test_a_window_shorter_than_two_sensor_updates_is_flagged(tmp_path):
    small_range_tree(tmp_path)
    put(tmp_path, "class/powercap/intel-rapl:0/max_energy_range_uj", RANGE_UJ)
    clock = FakeClock()
    meter = PowerMeter({"kind": "powercap"}, root=str(tmp_path), clock=clock).start()
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 900_010)
    clock.now += 0.0015  # 1.5 RAPL updates (one every ~1 ms)
    result = meter.stop()
    assert result.energy_j == pytest.approx(10e-6)
    assert any(w.startswith("short window: 0.0015 s is less than 2 sensor updates") for w in result.warnings)
    clock.now += 0.0015
    meter.start()
    clock.now += 0.5
    assert meter.stop().warnings == []
    ina3221_tree(tmp_path)
    put(tmp_path, "class/hwmon/hwmon2/update_interval", 1100)  # ms: 1.1 s between conversions
    meter = PowerMeter({"kind": "ina3221", "interval_s": SLOW}, root=str(tmp_path), clock=clock).start()
    clock.now += 0.5
    result = meter.stop()
    assert result.energy_j == pytest.approx(5.0) and "one every 60 s" in result.warnings[0]
    meter = PowerMeter({"kind": "ina3221", "interval_s": 0.1}, root=str(tmp_path), clock=clock).start()
    clock.now += 0.5
    assert "one every 1.1 s" in meter.stop().warnings[0]


_UNREADABLE = r"""
import json, os, sys
from ppexec.power import PowerMeter
if os.geteuid() == 0:  # root reads every file: read as nobody (imports done: the interpreter is root's)
    os.setegid(65534)
    os.seteuid(65534)
meter = PowerMeter({"kind": "powercap", "interval_s": 60}, root=sys.argv[1]).start()
result = meter.stop()
print(json.dumps({"energy_j": result.energy_j, "unknown": result.unknown}))
"""


def test_a_root_only_sensor_gives_energy_unknown_permission_denied_and_does_not_raise():
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:  # not tmp_path: its parents are closed to other users
        root = Path(folder)
        os.chmod(root, 0o755)
        small_range_tree(root)
        for path in root.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o444)
        os.chmod(root / "class/powercap/intel-rapl:0/energy_uj", 0o400)  # as on Linux >= 5.10 (root only)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        done = subprocess.run([sys.executable, "-c", _UNREADABLE, str(root)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, cwd="/", timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    result = json.loads(done.stdout)
    assert result["energy_j"] is None and result["unknown"].startswith("permission denied (")
    assert "energy_uj" in result["unknown"] and "no sensor" not in result["unknown"]


def test_hwmon_power_is_integrated_and_energy_inputs_are_counters(tmp_path):
    put(tmp_path, "class/hwmon/hwmon0/power1_input", 5_000_000)  # 5 W in µW
    meter = PowerMeter({"kind": "hwmon", "interval_s": 0.01}, root=str(tmp_path)).start()
    import time

    time.sleep(0.1)
    energy = meter.stop().energy_j
    span = meter.samples[-1][0] - meter.samples[0][0]
    assert len(meter.samples) > 2 and span > 0.09
    assert energy == pytest.approx(5.0 * span)
    put(tmp_path, "class/hwmon/hwmon1/energy1_input", 10)  # a counter (µJ) is preferred where a chip has one
    clock = FakeClock()
    meter = PowerMeter({"kind": "hwmon", "interval_s": SLOW}, root=str(tmp_path), clock=clock).start()
    put(tmp_path, "class/hwmon/hwmon1/energy1_input", 3_000_010)
    clock.now += 1.0
    assert meter.stop().energy_j == pytest.approx(3.0) and not meter.power_files


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


def jetpack4_iio_tree(root: Path) -> None:
    """Jetson Linux R32 (JetPack 4): NVIDIA's ina3221x IIO driver, powers in mW."""
    dev = "bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    for n, (label, mw, mv, ma) in enumerate([("VDD_IN", 7000, 5000, 1400), ("VDD_CPU_GPU_CV", 2500, 5000, 500),
                                             ("VDD_SOC", 1500, 5000, 300)]):
        put(root, f"{dev}/rail_name_{n}", label)
        put(root, f"{dev}/in_power{n}_input", mw)
        put(root, f"{dev}/in_voltage{n}_input", mv)
        put(root, f"{dev}/in_current{n}_input", ma)


def thor_tree(root: Path) -> None:
    """Jetson Linux R38 (JetPack 7, Thor): an INA238 on the module input (power1_input, µW) besides INA3221s."""
    put(root, "class/hwmon/hwmon4/name", "ina238")
    put(root, "class/hwmon/hwmon4/in1_input", 19_000)  # bus voltage, mV
    put(root, "class/hwmon/hwmon4/curr1_input", 2_000)
    put(root, "class/hwmon/hwmon4/power1_input", 38_000_000)  # 38 W in µW


def test_jetson_rails_of_the_last_three_jetpack_generations(tmp_path):
    jetpack4_iio_tree(tmp_path / "jp4")
    meter = PowerMeter({"kind": "ina3221"}, root=str(tmp_path / "jp4"))
    assert meter.unknown is None and meter.watts() == pytest.approx(7.0)  # in_power0_input, mW
    both = PowerMeter({"kind": "ina3221", "rails": ["VDD_CPU_GPU_CV", "VDD_SOC"]}, root=str(tmp_path / "jp4"))
    assert both.watts() == pytest.approx(4.0)
    (tmp_path / "jp4/bus/i2c/drivers/ina3221x/6-0040/iio:device0/in_power1_input").unlink()  # V x I instead
    both = PowerMeter({"kind": "ina3221", "rails": ["VDD_CPU_GPU_CV", "VDD_SOC"]}, root=str(tmp_path / "jp4"))
    assert both.watts() == pytest.approx(2.5 + 1.5)
    ina3221_tree(tmp_path / "jp5")
    put(tmp_path / "jp5", "class/hwmon/hwmon2/in7_label", "sum of shunt voltages")  # not a rail
    put(tmp_path / "jp5", "class/hwmon/hwmon2/in4_input", 80_000)  # channel 1's shunt voltage, µV
    put(tmp_path / "jp5", "class/hwmon/hwmon2/curr4_input", 3200)  # sum of currents: not a rail
    every = PowerMeter({"kind": "ina3221", "rails": ["VDD_IN", "VDD_SOC"]}, root=str(tmp_path / "jp5"))
    assert every.watts() == pytest.approx(12.0)
    assert sorted(r.label for r in PowerMeter({"kind": "ina3221"}, root=str(tmp_path / "jp5")).rails) == ["VDD_IN"]
    thor_tree(tmp_path / "jp7")
    ina3221_tree(tmp_path / "jp7")
    (tmp_path / "jp7/class/hwmon/hwmon2/in1_label").write_text("VDD_GPU\n")  # Thor's INA3221s: no VDD_IN
    thor = PowerMeter({"kind": "ina3221", "rails": ["ina238:1"]}, root=str(tmp_path / "jp7"))
    assert thor.watts() == pytest.approx(38.0)
    default = PowerMeter({"kind": "ina3221"}, root=str(tmp_path / "jp7"))  # the input monitor, not its sub-rails too
    assert [r.label for r in default.rails] == ["ina238:1"] and default.watts() == pytest.approx(38.0)
    missing = PowerMeter({"kind": "ina3221", "rails": ["VDD_IN"]}, root=str(tmp_path / "jp7"))
    assert missing.unknown.startswith("no rail VDD_IN (the board has ")


@pytest.mark.parametrize("spec,match", [
    ({"kind": "powercap"}, "no powercap sensor found under"),
    ({"kind": "hwmon", "paths": ["class/hwmon/hwmon9/power1_input"]}, "no sensor file ("),
    ({"kind": "command", "command": [sys.executable, "-c", "print('n/a')"]}, "printed no number"),
    ({"kind": "command", "command": [sys.executable, "-c", "import sys; sys.exit(3)"]}, "exited with status 3"),
])
def test_a_sensor_that_cannot_be_read_gives_energy_unknown_and_never_raises(tmp_path, spec, match):
    meter = PowerMeter(spec, root=str(tmp_path)).start()
    assert match in meter.unknown
    result = meter.stop()
    assert result.energy_j is None and match in result.unknown


@pytest.mark.parametrize("spec,match", [
    ({"kind": "thermocouple"}, "power_sensor: kind: unknown kind 'thermocouple'"),
    ({"kind": "command"}, "power_sensor: kind: unknown kind 'command' (or command without a program)"),
    ({"kind": "powercap", "max_power_w": -3}, "power_sensor: max_power_w: must be a positive number"),
])
def test_a_wrong_spec_is_a_plan_error(tmp_path, spec, match):
    with pytest.raises(PlanError, match=match.replace("(", r"\(").replace(")", r"\)")):
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
    gone = tmp_path / "sys" / "class/hwmon/hwmon7/power1_input"  # a sensor that cannot be read: the run completes
    doc["soc"]["power_sensor"]["paths"] = [str(gone)]
    write_doc(doc, path)
    assert main(["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "20", "--json",
                 "--db", ""]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["energy_j"] is None and rep["energy_unknown"] == f"no sensor file ({gone})"
    assert main(["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "20", "--db", ""]) == 0
    assert f"unknown     500.00  (the power sensor gave no energy: no sensor file ({gone}))" in capsys.readouterr().out
    del doc["soc"]["power_sensor"]
    write_doc(doc, path)
    assert main(["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "20", "--db", ""]) == 0
    assert "estimate: the profile names no power sensor" in capsys.readouterr().out
