"""How far measurements can be trusted (:mod:`parapipe.measure.trust`, :mod:`ppexec.timing`'s load and spread).

* the load: :func:`ppexec.timing.cpu_sample` reads a fake ``/proc/stat``; :func:`~ppexec.timing.load_between`
  and :func:`~ppexec.timing.combine_loads` on injected snapshots;
* a pipeline run's spread over windows of its frames (:func:`ppexec.timing.window_spread`);
* the one-line warning on injected measurements: silent on a quiet machine, naming threshold, reason, the
  front's lead and the remedy on a loaded or scattered one;
* pareto.json's ``search.measurement`` from the host search (measurements injected, no real load);
* the runs table: a schema-2 database gains ``spread`` and ``load`` when opened, keeping its rows;
* progress bars: drawn on a (forced) terminal, hidden with ``--quiet``.
"""
from __future__ import annotations

import io
import json
import sqlite3
import sys

import pytest

from ppexec import timing

from parapipe.measure.trust import LOAD_HIGH, SPREAD_HIGH, MeasureLog, front_gap, summary_text, warning


def _snap(wall, busy, own, cpus=2):
    return {"wall_s": wall, "busy_s": busy, "own_s": own, "cpus": cpus}


def test_cpu_sample_reads_the_allowed_cpus_of_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice (jiffies)
    stat.write_text("cpu  900 0 100 1000 0 0 0 0 0 0\n"
                    "cpu0 300 0 50 500 20 0 0 10 0 0\n"
                    "cpu1 600 0 50 500 0 0 0 0 0 0\n"
                    "cpu7 5000 0 0 0 0 0 0 0 0 0\n"
                    "intr 1 2 3\n")
    hz = timing.os.sysconf("SC_CLK_TCK")
    one = timing.cpu_sample([0], str(stat))
    assert one["cpus"] == 1 and one["busy_s"] == pytest.approx((300 + 50 + 10) / hz)  # steal is busy, iowait not
    both = timing.cpu_sample([0, 1, 3], str(stat))  # cpu3 is not listed: counted out
    assert both["cpus"] == 2 and both["busy_s"] == pytest.approx((360 + 650) / hz)
    assert timing.cpu_sample([0], str(tmp_path / "missing")) is None


def test_load_is_the_share_other_processes_took():
    # 10 s on 2 CPUs: 12 CPU-seconds busy, 4 of them ours -> others took 8 of 20
    load = timing.load_between(_snap(0.0, 100.0, 1.0), _snap(10.0, 112.0, 5.0))
    assert load["load"] == pytest.approx(0.4) and load["foreign_s"] == pytest.approx(8.0)
    assert timing.load_between(_snap(0.0, 100.0, 1.0), _snap(1.0, 101.0, 3.0))["load"] == 0.0  # only us
    assert timing.load_between(None, _snap(1.0, 1.0, 0.0)) is None
    assert timing.load_between(_snap(1.0, 1.0, 0.0), _snap(1.0, 2.0, 0.0)) is None  # empty window
    # windows weigh by their length: 1 s at 1.0 and 3 s at 0.0 on 2 CPUs -> 0.25
    both = timing.combine_loads([{"load": 1.0, "foreign_s": 2.0, "window_s": 1.0, "cpus": 2}, None,
                                 {"load": 0.0, "foreign_s": 0.0, "window_s": 3.0, "cpus": 2}])
    assert both["load"] == pytest.approx(0.25) and both["window_s"] == 4.0
    assert timing.combine_loads([None]) is None


def test_time_model_reports_the_load():
    from onnx import TensorProto, helper

    from ppexec.plan import PUBinding

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    import numpy as np

    out = timing.time_model(model, PUBinding(cpus=(timing.allowed_cpus()[0],), threads=1), 1, 3,
                            lambda specs: {"x": np.ones((1, 64), np.float32)})
    assert set(out["load"]) == {"load", "foreign_s", "window_s", "cpus"} and 0.0 <= out["load"]["load"] <= 1.0


def test_window_spread_of_a_run():
    steady = [0.01 * (i + 1) for i in range(100)]
    assert timing.window_spread(0.0, steady) == pytest.approx(0.0, abs=1e-9)
    # the last fifth of the frames came out at half the rate: the nearest-rank p90 of the ten windows (the 9th)
    # is one of them; a single slow window of ten stays below p90
    hiccup = steady[:80] + [0.8 + 0.02 * (i + 1) for i in range(20)]
    assert timing.window_spread(0.0, hiccup) == pytest.approx(1.0)
    one = steady[:90] + [0.9 + 0.02 * (i + 1) for i in range(10)]
    assert timing.window_spread(0.0, one) == pytest.approx(0.0, abs=1e-9)
    assert timing.window_spread(0.0, [0.1, 0.2, 0.3]) is None  # fewer than two frames in two windows


def test_no_warning_on_a_quiet_machine_one_line_on_a_busy_one():
    quiet = {"measurements": 40, "spread": 0.03, "load": 0.02, "cpus": 2}
    assert warning(quiet, gap=0.05) is None
    assert "spread 3.0 %" in summary_text(quiet) and "load 0.02" in summary_text(quiet)
    busy = {"measurements": 40, "spread": 0.03, "load": 0.6, "cpus": 2}
    line = warning(busy, gap=0.05, remedy="more --rounds")
    assert line and "\n" not in line
    assert f"> {LOAD_HIGH:.2f}" in line and "half speed" in line and "more --rounds" in line
    assert "leads the next by 5.0%, so they can swap" in line
    scattered = {"measurements": 40, "spread": 0.2, "load": 0.05, "cpus": 2}
    line = warning(scattered, gap=0.3)
    assert f"> {SPREAD_HIGH:.0%}" in line and "so they can swap" not in line  # a 30 % lead survives 20 %
    assert warning({"spread": None, "load": None}) is None  # nothing measured, nothing to say
    assert front_gap([10.0, 8.0, 10.0]) == pytest.approx(0.25) and front_gap([5.0]) is None


def test_measure_log_summary():
    record = MeasureLog()
    record.add_times([1.0] * 8 + [1.5, 1.5])  # nearest-rank p90 1.5 -> spread 0.5
    record.add_times([1.0] * 10, {"load": 0.5, "foreign_s": 1.0, "window_s": 1.0, "cpus": 2})
    record.add_reply({"spread": 0.1, "load": None})
    summary = record.summary()
    assert summary["measurements"] == 3 and summary["spread"] == pytest.approx(0.1)
    assert summary["load"] == pytest.approx(0.5) and summary["cpus"] == 2
    assert MeasureLog().summary()["spread"] is None


def test_pareto_json_keeps_the_measurement(tmp_path):
    """The host search writes ``search.measurement`` (spread, load, gap, warning) into pareto.json; a loaded
    measurement's warning is kept there."""
    from test_stage_timing import _two_cores

    from parapipe.app.optimize import search_prepared
    from parapipe.app.prepare import Prepared
    from parapipe.mapping import doc_from_result, read_pareto, write_pareto
    from parapipe.mapping.model import SocRef
    from parapipe.search.options import SearchOptions

    record = MeasureLog()
    for _ in range(5):
        record.add(0.02, {"load": 0.9, "foreign_s": 1.8, "window_s": 1.0, "cpus": 2})
    pr = _two_cores()
    prep = Prepared(None, None, None, None, pr, None, host=True, measure_log=record)

    def measure(submodels, loaded):
        record.add(0.04, {"load": 0.9, "foreign_s": 1.8, "window_s": 1.0, "cpus": 2})
        return {b: len(b) * 1e-3 for b in submodels}

    result = search_prepared(prep, SearchOptions(time_limit_s=1.0), measure=measure)
    info = result.info["measurement"]
    assert info["load"] == pytest.approx(0.9) and info["spread"] == pytest.approx(0.02)
    assert info["spread_high"] == SPREAD_HIGH and info["load_high"] == LOAD_HIGH
    assert "load 0.90 > 0.25" in info["warning"] and "--time-stages" in info["warning"]
    doc = doc_from_result(result, "chain", "0" * 64, SocRef(name="host", sha256="0" * 64),
                          blocks={b: [] for b in pr.block_names}, search={"seed": 0})
    write_pareto(doc, tmp_path / "pareto.json")
    back = read_pareto(tmp_path / "pareto.json")
    assert back.search["measurement"]["load"] == pytest.approx(0.9)
    assert "stage_timing" in back.search  # the existing key is kept
    quiet_prep = Prepared(None, None, None, None, pr, None, host=True, measure_log=MeasureLog())
    quiet_prep.measure_log.add(0.02, {"load": 0.01, "foreign_s": 0.02, "window_s": 1.0, "cpus": 2})
    quiet = search_prepared(quiet_prep, SearchOptions(time_limit_s=1.0), time_stages=0)
    assert quiet.info["measurement"]["warning"] is None


_V2_RUNS = """CREATE TABLE runs (id INTEGER PRIMARY KEY, recorded_at TEXT NOT NULL, model TEXT NOT NULL,
    model_sha256 TEXT NOT NULL, soc TEXT NOT NULL, soc_sha256 TEXT NOT NULL, point TEXT NOT NULL,
    pu_list TEXT NOT NULL, mapping TEXT NOT NULL, frames INTEGER NOT NULL CHECK (frames >= 1),
    throughput_per_s REAL NOT NULL, period_s REAL NOT NULL, latency_p50_s REAL NOT NULL,
    latency_p99_s REAL NOT NULL, idle_latency_s REAL NOT NULL, pu_busy_s TEXT NOT NULL, energy_j REAL,
    predicted_period_s REAL, predicted_latency_s REAL, predicted_energy_j REAL, prediction_applies INTEGER NOT NULL,
    substituted TEXT NOT NULL, outputs_match INTEGER NOT NULL, runner TEXT NOT NULL, board TEXT NOT NULL)"""


def test_a_schema_2_runs_table_gains_spread_and_load(tmp_path):
    from parapipe.profiledb import db as dbmod
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import RunRecord, append_run, list_runs

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(str(path))
    for statement in (dbmod._MEASUREMENTS, dbmod._OP_CATALOG, dbmod._WORK_CATALOG, _V2_RUNS):
        conn.execute(statement)
    conn.execute("INSERT INTO runs VALUES (1, '2026-01-01T00:00:00+00:00', 'net', 'a', 'host', 'b', 'p0', 'cpu0', "
                 "'[]', 10, 5.0, 0.2, 0.2, 0.3, 0.2, '{}', NULL, 0.2, 0.2, 1.0, 1, '{}', 1, 'local', '{}')")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    with ProfileDB(path) as db:
        (old,) = list_runs(db)
        assert old.model == "net" and old.spread is None and old.load is None and old.frequencies == {}
        new = RunRecord(**{**old.__dict__, "id": None, "spread": 0.04, "load": 0.7})
        append_run(db, new)
        assert [(r.spread, r.load) for r in list_runs(db)] == [(None, None), (0.04, 0.7)]
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == dbmod.SCHEMA_VERSION == 5
    assert {"spread", "load", "frequencies"} <= {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    conn.close()


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal (what a user's shell gives)."""

    def isatty(self) -> bool:
        return True


def test_progress_drawn_on_a_terminal_hidden_with_quiet_or_a_pipe(monkeypatch):
    from parapipe.cli import build_parser, common

    for quiet, terminal, shown in ((False, True, True), (True, True, False), (False, False, False)):
        err = _Terminal() if terminal else io.StringIO()
        monkeypatch.setattr(sys, "stderr", err)
        common.set_quiet(quiet)
        try:
            steps = common.StepBars()
            steps.status("starting the agent")
            steps("timing stages", 1, 4)
            steps("timing stages", 4, 4)
            steps.close()
        finally:
            common.set_quiet(False)
        assert ("timing stages" in err.getvalue() and "starting the agent" in err.getvalue()) is shown, (quiet, terminal)
    # --quiet before or after the command
    assert build_parser().parse_args(["--quiet", "socs"]).quiet is True
    assert build_parser().parse_args(["optimize", "m", "--soc", "host", "-q"]).quiet is True
    assert build_parser().parse_args(["soc", "detect", "--out", "x.yaml", "--quiet"]).quiet is True
    assert build_parser().parse_args(["socs"]).quiet is False


def test_run_report_prints_spread_load_and_the_warning(capsys):
    from ppexec.report import RunReport

    from parapipe.cli.common import print_run_report

    base = dict(model={"name": "m", "sha256": "0"}, point="p0", frames=100, warmup=5, stages=2,
                throughput_per_s=10.0, wall_s=10.0, latency_p50_s=0.2, latency_p90_s=0.2, latency_p99_s=0.3,
                idle_latency_s=0.2, idle_frames=10, stage_busy_s=[0.1, 0.1], pu_busy_s={}, pu_utilisation={},
                outputs_match=True, max_abs_diff=0.0, checked_tensors=0, max_scaled_diff=0.0, atol=1e-5, rtol=1e-5)
    print_run_report("head", RunReport(**base, spread=0.02, load=0.01))
    out = capsys.readouterr()
    assert "measurement: spread 2.0 %" in out.out and "warning" not in out.err
    print_run_report("head", RunReport(**base, spread=0.3, load=0.8))
    out = capsys.readouterr()
    assert out.err.count("warning:") == 1 and "--frames" in out.err
    assert json.loads(json.dumps(RunReport(**base).to_json()))["spread"] is None  # older reports: None
