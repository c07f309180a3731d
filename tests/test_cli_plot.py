"""``parapipe plot``: the predicted Gantt of a pareto.json point and the measured Gantt of a Chrome trace."""
from __future__ import annotations

import json
import os

import pytest

from parapipe.cli import main
from ppexec import ExecutionPlan, run_pipeline, write_chrome_trace
from parapipe.runtime.traces import read_chrome_trace
from runtime_models import CPU_BINDINGS, chain_model, frames, task

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def pareto(tmp_path_factory):
    out = tmp_path_factory.mktemp("opt")
    assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--out", str(out), "--no-plot",
                 "--time-limit", "5"]) == 0
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
    (["plot", "--out", "x.png"], "give exactly one of --gantt and --trace"),
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
