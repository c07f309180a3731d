"""Per-layer DVFS tables: a long CSV in the shape of published per-layer tables (graph, component, freq, layer,
metric, time, board power) imported, evaluated at operating points, board power counted once, and
``calibrate --runs`` fitting per-operating-point powers from measured energies."""
from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest

from parapipe.cli import main

from dvfs_profiles import TINY_DVFS_PROFILE

PROFILE = TINY_DVFS_PROFILE
BASELINE_W = 1.0 + 0.2 + 0.1  # static + idle of every PU: what a board meter reads with both units idle
LAYERS = ("conv1", "conv2", "conv3", "fc")
FREQS_MHZ = {"big": (1000, 1500, 2000), "little": (600, 1000)}
#: ground truth of the test: time at the highest point (ms) and memory-bound share per layer and unit
T_MAX_MS = {"big": (4.0, 3.0, 2.0, 1.0), "little": (9.0, 7.0, 5.0, 2.0)}
MEM_SHARE = (0.1, 0.2, 0.4, 0.6)


def time_ms(pu: str, layer: int, mhz: float) -> float:
    top = FREQS_MHZ[pu][-1]
    return T_MAX_MS[pu][layer] * (MEM_SHARE[layer] + (1 - MEM_SHARE[layer]) * top / mhz)


def board_mw(pu: str, layer: int, mhz: float) -> float:
    """The table's board readings (above the baseline by a per-layer amount growing with the clock)."""
    return 1000 * BASELINE_W + (400 + 100 * layer) * (mhz / 1000) * (1.5 if pu == "big" else 0.5)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("dvfs")
    (d / "soc.yaml").write_text(PROFILE)
    rows = ["graph,component,freq,layer,metric,time_ms,power_mw"]
    for pu, freqs in FREQS_MHZ.items():
        for f in freqs:
            for i, layer in enumerate(LAYERS):
                t = time_ms(pu, i, f)
                if i == 0:  # an input phase on the first layer: its time adds to the layer's, its power weighs in
                    rows.append(f"net,{pu},{f},{layer},input,{0.25:.6g},{board_mw(pu, i, f) + 50:.6g}")
                rows.append(f"net,{pu},{f},{layer},task,{t:.6g},{board_mw(pu, i, f):.6g}")
    (d / "layers.csv").write_text("\n".join(rows) + "\n")
    assert main(["import", str(d / "layers.csv"), "--soc", str(d / "soc.yaml"), "--out", str(d / "tables"),
                 "--board-power"]) == 0
    return d


def _evaluate(files, mapping, *extra):
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["evaluate", "--blocks", str(files / "tables" / "net.blocks.csv"), "--soc",
                     str(files / "soc.yaml"), "--mapping", mapping, "--json", *extra])
    assert code == 0
    return json.loads(out.getvalue().splitlines()[-1])


def _table(files):
    with open(files / "tables" / "net.blocks.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_import_writes_one_column_per_frequency_and_evaluates_per_layer_frequencies(files):
    rows = _table(files)
    assert [r["block"] for r in rows] == list(LAYERS)
    assert {"t_big@1000", "t_big@1500", "t_big@2000", "t_little@600", "t_little@1000", "p_big@1000",
            "p_little@600"} <= set(rows[0])
    assert float(rows[1]["t_big@1500"]) == pytest.approx(time_ms("big", 1, 1500) * 1e-3)
    # the first layer: input + task phases, time-weighted board power, kept as read (a board reading)
    t_in, t_task = 0.25e-3, time_ms("big", 0, 1000) * 1e-3
    assert float(rows[0]["t_big@1000"]) == pytest.approx(t_in + t_task)
    p0 = board_mw("big", 0, 1000) * 1e-3
    assert float(rows[0]["p_big@1000"]) == pytest.approx((t_in * (p0 + 0.05) + t_task * p0) / (t_in + t_task))
    # per-layer mappings with frequencies: stages stated by brackets, each at its own point
    low = _evaluate(files, "[big@1000][big@1000][little@600][little@600]", "--board-power")
    high = _evaluate(files, "[big@2000][big@2000][little@1000][little@1000]", "--board-power")
    mixed = _evaluate(files, "big@2000,big@1500,little@1000,little@600", "--board-power")
    assert low["stages"] == high["stages"] == mixed["stages"] == 4
    assert low["period_s"] > high["period_s"] and low["energy_j"] != high["energy_j"]
    assert high["period_s"] < mixed["period_s"] < low["period_s"] + 1e-3


def test_single_unit_energy_is_board_power_times_time(files):
    rows = _table(files)
    for pu, f in (("big", 1500), ("little", 600), ("big", 2000)):
        t = np.array([float(r[f"t_{pu}@{f}"]) for r in rows])
        p = np.array([float(r[f"p_{pu}@{f}"]) for r in rows])
        for mapping in (",".join([f"{pu}@{f}"] * 4), "".join(f"[{pu}@{f}]" for _ in rows)):
            got = _evaluate(files, mapping, "--board-power")
            assert got["period_s"] == pytest.approx(t.sum(), rel=1e-12)
            assert got["energy_j"] == pytest.approx(float((t * p).sum()), rel=1e-12)
        # without --board-power the same watts are the PU's own draw: static and idle come on top
        own = _evaluate(files, ",".join([f"{pu}@{f}"] * 4))
        assert own["energy_j"] == pytest.approx(float((t * p).sum()) + BASELINE_W * t.sum()
                                                - {"big": 0.2, "little": 0.1}[pu] * t.sum(), rel=1e-9)


def test_a_missing_frequency_is_refused_listing_the_points(files, capsys):
    code = main(["evaluate", "--blocks", str(files / "tables" / "net.blocks.csv"), "--soc", str(files / "soc.yaml"),
                 "--mapping", "big@1200,big@1000,little@600,little@600"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "no operating point at 1200 MHz" in err and "1000, 1500, 2000 MHz" in err


def test_a_board_reading_below_the_baseline_is_refused(files, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("graph,component,freq,layer,metric,time_ms,power_mw\nnet,big,1000,conv1,task,1.0,1200\n")
    code = main(["import", str(bad), "--soc", str(files / "soc.yaml"), "--out", str(tmp_path / "t"),
                 "--board-power"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "baseline 1.3 W" in err and "conv1" in err


#: ground truth of the runs: each unit's power above idle at each point (W), unlike the table's readings
TRUE_DYN_W = {("big", 1000): 0.6, ("big", 1500): 1.4, ("big", 2000): 2.9, ("little", 600): 0.25,
              ("little", 1000): 0.7}
RUNS = ("big@2000,big@2000,big@2000,big@2000", "big@1000,big@1000,big@1000,big@1000",
        "big@1500,big@1500,big@1500,big@1500", "little@600,little@600,little@600,little@600",
        "little@1000,little@1000,little@1000,little@1000", "big@2000,big@2000,little@1000,little@1000",
        "big@1500,big@1500,little@600,little@600", "[big@1000][big@2000][little@1000][little@600]",
        "big@1000,little@1000,little@1000,little@1000", "big@2000,big@1500,big@1500,little@600")


def test_calibrate_runs_fits_per_operating_point_powers(files, tmp_path, capsys):
    from parapipe.cost.blocktable import read_block_table, write_block_table
    from parapipe.cost.evaluate import evaluate
    from parapipe.mapping.index import parse_pu_list
    from parapipe.soc.loader import load_soc

    soc = load_soc(str(files / "soc.yaml"))
    truth = read_block_table(files / "tables" / "net.blocks.csv", soc, board_power=True)
    for p, table in enumerate(truth.operating_points):
        name = truth.pu_names[p]
        for o, f in enumerate(table.frequency_hz):
            table.active_power_w[:, o] = truth.idle_power_w[p] + TRUE_DYN_W[(name, round(f / 1e6))]
        truth.active_power_w[:, p] = table.active_power_w[:, -1]
    write_block_table(tmp_path / "truth.blocks.csv", truth)
    truth = read_block_table(tmp_path / "truth.blocks.csv", soc)
    lines = ["model,soc,mapping,period_s,latency_s,energy_j"]
    for m in RUNS:
        ev = evaluate(truth, parse_pu_list(truth, m))
        lines.append(f"net,tiny_dvfs,\"{m}\",{float(ev.period_s)!r},{float(ev.latency_s)!r},{float(ev.energy_j)!r}")
    (tmp_path / "runs.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "fitted.yaml"
    capsys.readouterr()
    assert main(["calibrate", "--soc", str(files / "soc.yaml"), "--runs", str(tmp_path / "runs.csv"), "--blocks",
                 str(files / "tables"), "--board-power", "--fit", "slowdown", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for key, dyn in TRUE_DYN_W.items():
        line = next(x for x in text.splitlines() if x.startswith(f"power.delta_w.{key[0]}@{key[1]} "))
        assert float(line.split()[1]) == pytest.approx(dyn, rel=1e-3)
    energy = {}
    for label in ("before (profile)", "after (in sample)", "leave-one-out"):
        line = next(x for x in text.splitlines() if x.strip().startswith(label))
        energy[label] = float(re.findall(r"(-|[\d.]+) / ", line)[-1])
    assert energy["after (in sample)"] < 0.1 < energy["before (profile)"]
    after = next(x for x in text.splitlines() if x.strip().startswith("after (in sample)"))
    assert after.split(")")[1].split()[0] == "0.0"  # period: the fit's model pays the operating-point switches
    assert energy["leave-one-out"] < 1.0
    fitted = load_soc(str(out))  # the fitted points go into the profile's operating-point table
    assert fitted.pus["big"].operating_points.active_power_w == pytest.approx(
        tuple(fitted.pus["big"].idle_power_w + TRUE_DYN_W[("big", f)] for f in (1000, 1500, 2000)), rel=1e-3)


def test_a_board_power_import_on_a_profile_with_more_pus_evaluates(tmp_path):
    """The table covers two of the A311D's four PUs: the written table gives no powers for the others (a default
    would read back as a board reading below the baseline), so --board-power takes it."""
    lines = ["graph,component,freq,layer,metric,time_ms,power_mw"]
    for pu, freqs in (("big", (1000, 2208)), ("little", (1000, 1800))):
        for i, layer in enumerate(("conv1", "conv2", "fc")):
            for mhz in freqs:
                lines.append(f"net,{pu},{mhz},{layer},task,{(3 - i) * 2000 / mhz:.4f},{3000 + mhz:.0f}")
    (tmp_path / "layers.csv").write_text("\n".join(lines) + "\n")
    assert main(["import", str(tmp_path / "layers.csv"), "--soc", "amlogic_a311d", "--out", str(tmp_path / "t"),
                 "--board-power"]) == 0
    written = next((tmp_path / "t").glob("*.blocks.csv"))
    header, first = (row.split(",") for row in written.read_text().splitlines()[:2])
    assert [c for c in header if c.startswith("p_")] and all(
        first[i] == "" for i, c in enumerate(header) if c.startswith(("p_gpu", "p_npu")))
    assert main(["evaluate", "--blocks", str(written), "--soc", "amlogic_a311d", "--mapping",
                 "big@1000,big,little", "--board-power"]) == 0
