"""``parapipe plot``: the predicted Gantt of a pareto.json point and the measured Gantt of a Chrome trace."""
from __future__ import annotations

import json
import os

import pytest

from parapipe.cli import main
from ppexec.executor import run_pipeline
from ppexec.metrics import write_chrome_trace
from ppexec.plan import ExecutionPlan
from parapipe.execution.traces import read_chrome_trace
from runtime_models import CPU_BINDINGS, chain_model, frames, task

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def pareto(tmp_path_factory):
    from unittest import mock

    out = tmp_path_factory.mktemp("opt")
    with mock.patch("parapipe.app.optimize.start_plot_worker", side_effect=AssertionError("--no-plot started one")):
        assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--out", str(out), "--no-plot",
                     "--time-limit", "5"]) == 0  # and started no plot process
    return out / "pareto.json"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    m = chain_model(4)
    plan = ExecutionPlan(stages=[[task(m, "s0", 0, "cpu0", ["x"], ["h1"])],
                                 [task(m, "s1", 1, "cpu1", ["h1"], ["y"])]],
                         model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    _, metrics = run_pipeline(plan, frames(8), warmup=1)
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    write_chrome_trace(metrics, path)
    return path, metrics


def test_predicted_gantt_of_a_point(pareto, tmp_path, capsys):
    out = tmp_path / "gantt.png"
    argv = ["plot", "--gantt", "--mapping", str(pareto), "--point", "best-throughput", "--out", str(out)]
    assert main(argv) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC and f"wrote {out}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["gantt.png"]  # no temporary left


def test_measured_gantt_of_a_trace_and_the_trace_reads_back(trace, tmp_path):
    path, metrics = trace
    events = read_chrome_trace(path)
    assert len(events) == len(metrics.trace) == 16
    for got, want in zip(sorted(events, key=lambda e: (e.start_s, e.pu)), metrics.trace):
        assert (got.stage, got.pu, got.task, got.frame) == (want.stage, want.pu, want.task, want.frame)
        assert got.start_s == pytest.approx(want.start_s, abs=1e-9)
        assert got.end_s == pytest.approx(want.end_s, abs=1e-9)
    out = tmp_path / "measured.png"
    assert main(["plot", "--trace", str(path), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("argv, message", [
    (["plot", "--out", "x.png"], "give exactly one of --gantt, --graph, --front and --trace"),
    (["plot", "--gantt", "--out", "x.png"], "--mapping: is required with --gantt"),
    (["plot", "--gantt", "--mapping", "{pareto}", "--point", "nope", "--out", "x.png"], "no point 'nope'"),
    (["plot", "--trace", "{bad}", "--out", "x.png"], "not valid JSON"),
    (["plot", "--trace", "{empty}", "--out", "x.png"], "traceEvents: no task events"),
])
def test_bad_plot_requests_are_one_line_errors(pareto, tmp_path, capsys, monkeypatch, argv, message):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    argv = [a.format(pareto=pareto, bad=bad, empty=empty) for a in argv]
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x.png").exists()


def test_trace_window_and_title(trace, tmp_path, monkeypatch):
    # The trace of a 30-frame run written with the run's facts (as run_bundle writes it): the chart draws the
    # window asked for (default: 20 frames from the middle) and is titled with model, point and throughput.
    from parapipe.files import default_file_mode
    from parapipe.report import gantt

    m = chain_model(4)
    plan = ExecutionPlan(stages=[[task(m, "s0", 0, "cpu0", ["x"], ["h1"])],
                                 [task(m, "s1", 1, "cpu1", ["h1"], ["y"])]],
                         model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    _, metrics = run_pipeline(plan, frames(30), warmup=0)
    path = tmp_path / "trace.json"
    write_chrome_trace(metrics, path, {"model": "chain", "point": "p3", "throughput_per_s": 123.4,
                                       "predicted": {"throughput_per_s": 150.0, "applies": True}})
    assert json.loads(path.read_text())["otherData"]["point"] == "p3"
    drawn = []
    real_draw = gantt._draw
    monkeypatch.setattr(gantt, "_draw", lambda bars, lanes, title, out, names, *a, **kw: (
        drawn.append((sorted({b.frame for b in bars}), title)), real_draw(bars, lanes, title, out, names, *a, **kw)))
    out = tmp_path / "window.png"
    assert main(["plot", "--trace", str(path), "--frames-window", "3:7", "--out", str(out)]) == 0
    assert drawn[-1] == ([3, 4, 5, 6], "chain: point p3 — 123.4 inf/s measured, 150.0 predicted — frames 3–6 of 30")
    assert main(["plot", "--trace", str(path), "--out", str(out)]) == 0
    assert drawn[-1][0] == list(range(5, 25))  # 20 frames from the middle of 30
    assert main(["plot", "--trace", str(path), "--frames-window", "25:", "--out", str(out)]) == 0
    assert drawn[-1][0] == list(range(25, 30))
    # trace and plot get the mode pareto.json gets (the umask's), not mkstemp's 0600
    for p in (path, out):
        assert os.stat(p).st_mode & 0o777 == default_file_mode()


def test_trace_title_without_run_facts(trace):
    from parapipe.report.gantt import trace_frame_window, trace_title

    _, metrics = trace
    events = metrics.trace
    span = max(e.end_s for e in events) - min(e.start_s for e in events)
    assert trace_title({}, events, 0, 8) == f"?: point ? — ≈{8 / span:.1f} inf/s measured — frames 0–7 of 8"
    assert trace_frame_window([0, 1, 2]) == (0, 3)


@pytest.mark.parametrize("window, message", [
    ("3", "is not FIRST:STOP"), ("5:2", "is not FIRST:STOP"), ("a:b", "is not FIRST:STOP"),
    ("100:200", "holds none of the run's frames"),
])
def test_bad_frame_windows_are_one_line_errors(trace, tmp_path, capsys, window, message):
    path, _ = trace
    out = tmp_path / "x.png"
    assert main(["plot", "--trace", str(path), "--frames-window", window, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("parapipe: error: --frames-window") and not out.exists()
