"""``parapipe optimize --refine N`` (parapipe/refine.py): the loop converges on a board whose pipeline terms it
does not know (runs drawn from the full model with known terms), and runs for real on this machine."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from parapipe.mapping.index import mapping_from_point
from parapipe.cost.evaluate import evaluate
from parapipe.cost.pipeline_terms import PipelineTerms


def test_refine_converges_on_a_board_with_unknown_terms(tmp_path, monkeypatch):
    import parapipe.refine as refine_mod
    from parapipe.search.api import SearchOptions
    from parapipe.soc import load_soc
    from parapipe.workflow import prepare

    prep = prepare("squeezenet", "amlogic_a311d")
    board = PipelineTerms(overlap={"gpu": 0.5, "big": 0.3}, dispatch_s=2e-3, handoff_s=1e-3, slowdown=1.3,
                          memory_bandwidth_bytes_per_s=prep.soc.memory_bandwidth_bytes_per_s)
    ran = []

    def fake_run(model, out_dir, point, frames, host, python, rnd, input_shapes, feeds):
        doc = json.loads((out_dir / "pareto.json").read_text())
        from parapipe.mapping import parse_pareto

        pt = next(p for p in parse_pareto(doc, "pareto.json").points if p.id == point)
        ev = evaluate(prep.problem, mapping_from_point(prep.problem, pt, "pareto.json"), board)
        ran.append((rnd, point))
        return SimpleNamespace(throughput_per_s=1.0 / ev.period_s, idle_latency_s=ev.latency_s, energy_j=None), "fake"

    monkeypatch.setattr(refine_mod, "_run_point", fake_run)
    # replicate=False: the pipeline-level terms are fitted on plain pipelines (replicated mappings take only κ and d)
    options = SearchOptions(time_limit_s=1.0, reuse_time_limit_s=1.0, replicate=False)
    res = refine_mod.refine(prep, options, tmp_path, rounds=5, model="squeezenet", points=3, plot=False)
    first = [s for s in res.steps if s.round == 1]
    assert len(first) == 3 and max(abs(s.error) for s in first) > 0.05  # the plain model is off on this board
    assert res.converged and all(abs(s.error) <= 0.05 for s in res.steps if s.round == res.steps[-1].round)
    assert res.steps[-1].round > 1 and len(ran) == len(res.steps)
    for s in res.steps:  # every prediction was made before its run: the measured figure is the board's
        assert s.measured_period_s == pytest.approx(s.predicted_period_s / (1 + s.error))
    doc = json.loads((tmp_path / "pareto.json").read_text())
    traj = doc["search"]["refine"]
    assert traj["converged"] is True and len(traj["trajectory"]) == len(res.steps)
    assert set(traj["trajectory"][0]) == {"round", "point", "predicted_period_s", "measured_period_s",
                                          "predicted_latency_s", "measured_latency_s", "error"}
    assert traj["terms"]["slowdown"] == pytest.approx(res.terms.slowdown)
    cal = load_soc(str(res.calibrated))
    assert cal.provenance["pipeline.slowdown"].source == "runs" and cal.pipeline.slowdown == res.terms.slowdown
    assert prep.terms is res.terms  # what the search is to re-evaluate its points with


@pytest.mark.slow
@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="the host profile pins CPUs 0 and 1")
def test_refine_runs_points_here_and_records_them(tmp_path, capsys, chain_model):
    import onnx

    from parapipe.cli import main

    model = tmp_path / "chain.onnx"
    onnx.save(chain_model, model)
    db = tmp_path / "db.sqlite"
    capsys.readouterr()
    code = main(["optimize", str(model), "--soc", "host", "--refine", "2", "--refine-points", "2", "--frames", "20",
                 "--out", str(tmp_path / "o"), "--db", str(db), "--no-plot", "--time-limit", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads((tmp_path / "o" / "pareto.json").read_text())
    steps = doc["search"]["refine"]["trajectory"]
    assert 1 <= len(steps) <= 4 and "round" in out and "predicted ms" in out
    assert "refine round 1" in err
    assert main(["runs", "--db", str(db), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(steps) and all(r["outputs_match"] for r in rows)


def test_refine_needs_a_model(tmp_path, capsys):
    from parapipe.cli import main

    table = tmp_path / "t.csv"
    table.write_text("block,deps,out_bytes,t_big\nb0,,10,0.01\n")
    assert main(["optimize", "--blocks", str(table), "--soc", "amlogic_a311d", "--refine", "2"]) == 2
    assert "--refine: needs a model" in capsys.readouterr().err
    assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--host", "me@board"]) == 2
    assert "--host: is only used with --refine" in capsys.readouterr().err
