"""``parapipe optimize --refine N`` (:mod:`parapipe.app.refine`): the loop converges on a board whose pipeline terms
it does not know (runs drawn from the full model with known terms), runs for real on this machine, and deploys to
``--host`` with its ``--ssh-timeout``."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from parapipe.mapping.index import mapping_from_point
from parapipe.cost.evaluate import evaluate
from parapipe.cost.pipeline_terms import PipelineTerms


def test_refine_converges_on_a_board_with_unknown_terms(tmp_path, monkeypatch):
    import parapipe.app.refine as refine_mod
    from parapipe.app.prepare import prepare
    from parapipe.search.options import SearchOptions
    from parapipe.soc import load_soc

    prep = prepare("squeezenet", "amlogic_a311d")
    board = PipelineTerms(overlap={"gpu": 0.5, "big": 0.3}, dispatch_s=2e-3, handoff_s=1e-3, slowdown=1.3,
                          memory_bandwidth_bytes_per_s=prep.soc.memory_bandwidth_bytes_per_s)
    ran = []
    board_s = {}  # (round, point) -> (period, latency) the board ran it at
    first_round_s = {}  # point -> period the starting terms predict, computed here, apart from the loop

    ids_to_stages, stage_keys = {}, {}

    def fake_run(model, out_dir, point, frames, host, python, rnd, input_shapes, feeds):
        doc = json.loads((out_dir / "pareto.json").read_text())
        from parapipe.mapping import parse_pareto

        pt = next(p for p in parse_pareto(doc, "pareto.json").points if p.id == point)
        ids_to_stages[rnd, point] = pt.stages
        stage_keys[rnd, point] = json.dumps([[st.pus, st.blocks, st.assignment] for st in pt.stages])
        m = mapping_from_point(prep.problem, pt, "pareto.json")
        ev = evaluate(prep.problem, m, board)
        ran.append((rnd, point))
        board_s[rnd, point] = (ev.period_s, ev.latency_s)
        if rnd == 1:
            first_round_s[point] = evaluate(prep.problem, m, prep.terms).period_s
        return SimpleNamespace(throughput_per_s=1.0 / ev.period_s, idle_latency_s=ev.latency_s, energy_j=None), "fake"

    monkeypatch.setattr(refine_mod, "_run_point", fake_run)
    # replicate=False: the pipeline-level terms are fitted on plain pipelines (replicated mappings take only κ and d)
    options = SearchOptions(time_limit_s=1.0, reuse_time_limit_s=1.0, replicate=False)
    res = refine_mod.refine(prep, options, tmp_path, rounds=5, model="squeezenet", points=3, plot=False)
    first = [s for s in res.steps if s.round == 1]
    assert len(first) == 3 and max(abs(s.error) for s in first) > 0.05  # the plain model is off on this board
    assert res.converged and all(abs(s.error) <= 0.05 for s in res.steps if s.round == res.steps[-1].round)
    assert res.steps[-1].round > 1 and len(ran) == len(res.steps)
    for s in res.steps:  # the measured figures are the board's, the error is the prediction's against them
        period_s, latency_s = board_s[s.round, s.point]
        assert s.measured_period_s == pytest.approx(period_s) and s.measured_latency_s == pytest.approx(latency_s)
        assert s.error == pytest.approx(s.predicted_period_s / period_s - 1.0)
    # the first round predicts with the profile's own terms, before any run (out of sample)
    assert {s.point: s.predicted_period_s for s in first} == pytest.approx(first_round_s)
    doc = json.loads((tmp_path / "pareto.json").read_text())
    traj = doc["search"]["refine"]
    assert traj["converged"] is True and len(traj["trajectory"]) == len(res.steps)
    assert set(traj["trajectory"][0]) == {"round", "point", "predicted_period_s", "measured_period_s",
                                          "predicted_latency_s", "measured_latency_s", "error", "mapping"}
    assert traj["stop_reason"] == "converged" and "within 5%" in traj["stopped"] and traj["next"]
    # one mapping, one id, whatever its point id in each round's document
    for s in res.steps:
        assert s.mapping == refine_mod.mapping_id(ids_to_stages[s.round, s.point])
    by_id = {}
    for s in res.steps:
        by_id.setdefault(s.mapping, set()).add(stage_keys[s.round, s.point])
    assert all(len(keys) == 1 for keys in by_id.values())
    table = refine_mod.trajectory_table(res.steps)
    assert all(s.mapping in table for s in res.steps) and "mapping" in table.splitlines()[0]
    assert traj["terms"]["slowdown"] == pytest.approx(res.terms.slowdown)
    cal = load_soc(str(res.calibrated))
    assert cal.provenance["pipeline.slowdown"].source == "runs" and cal.pipeline.slowdown == res.terms.slowdown
    assert res.prepared.terms is res.terms  # what the search is to re-evaluate its points with
    assert prep.terms is not res.terms  # the prepared problem passed in is left as it was


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


def test_refine_on_a_host_deploys_with_the_ssh_timeout(tmp_path, capsys, monkeypatch):
    """``optimize --refine N --host H --ssh-timeout S``: every deploy of the loop gets the board with ``S`` as its
    SSH deadline and ``S`` as the options' connect and command timeouts, as ``parapipe deploy --ssh-timeout S``."""
    import parapipe.app.deploy as deploy_mod
    from parapipe.cli import main

    seen = []

    def fake_deploy(model, mapping, point, spec, out_dir, options=None, on_event=None, binds=None,
                    input_shapes=None, feeds=None):
        seen.append((spec, options))
        report = SimpleNamespace(throughput_per_s=100.0, idle_latency_s=0.01, energy_j=None)
        return SimpleNamespace(report=report, host=str(spec))

    monkeypatch.setattr(deploy_mod, "deploy", fake_deploy)
    monkeypatch.setattr("parapipe.app.run.record_run", lambda *args: None)  # no RunReport to record
    code = main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--refine", "1", "--refine-points", "1",
                 "--host", "me@board:2222", "--ssh-timeout", "7.5", "--python", "/opt/py3", "--frames", "5",
                 "--out", str(tmp_path / "o"), "--no-plot", "--time-limit", "1"])
    assert code == 0, capsys.readouterr().err
    assert len(seen) == 1
    spec, options = seen[0]
    assert (spec.user, spec.address, spec.port, spec.timeout_s) == ("me", "board", 2222, 7.5)
    assert options.connect_timeout_s == options.command_timeout_s == 7.5
    assert options.frames == 5 and options.python == "/opt/py3"


def test_refine_stops_when_the_search_proposes_only_measured_mappings(tmp_path, monkeypatch):
    """A board the terms cannot describe (every run measured 3x slower, then 0.3x, alternately): with one point
    per round the search keeps proposing the mapping already measured, and the loop stops saying so."""
    import parapipe.app.refine as refine_mod
    from parapipe.app.prepare import prepare
    from parapipe.search.options import SearchOptions

    prep = prepare("squeezenet", "amlogic_a311d")
    calls = []

    def fake_run(model, out_dir, point, frames, host, python, rnd, input_shapes, feeds):
        from parapipe.mapping import parse_pareto

        doc = parse_pareto(json.loads((out_dir / "pareto.json").read_text()), "pareto.json")
        pt = next(p for p in doc.points if p.id == point)
        calls.append(rnd)
        period = pt.period_s * (3.0 if len(calls) % 2 else 0.3)
        return SimpleNamespace(throughput_per_s=1.0 / period, idle_latency_s=pt.latency_s, energy_j=None), "fake"

    monkeypatch.setattr(refine_mod, "_run_point", fake_run)
    options = SearchOptions(time_limit_s=1.0, reuse_time_limit_s=1.0, replicate=False)
    res = refine_mod.refine(prep, options, tmp_path, rounds=6, model="squeezenet", points=1, plot=False)
    assert not res.converged
    info = json.loads((tmp_path / "pareto.json").read_text())["search"]["refine"]
    assert info["stop_reason"] in ("unchanged", "rounds") and info["stop_reason"] == res.stop_reason
    if res.stop_reason == "unchanged":
        assert res.steps[-1].round < 6 and res.steps[-1].mapping in {s.mapping for s in res.steps[:-1]}
        assert "--refine-points" in info["next"]
    else:
        assert res.steps[-1].round == 6


def test_refine_searches_with_the_database_it_records_into(tmp_path, capsys, monkeypatch):
    """``optimize --refine`` without --db: the search and the runs use profile.sqlite alike (where it exists); with
    --db, that database for both."""
    import parapipe.app.prepare as prepare_mod
    from parapipe.cli import main

    from parapipe.errors import input_error

    seen = []

    def fake_prepare(*args, **kwargs):  # stops the command there (one error line, exit 2)
        seen.append(kwargs.get("db"))
        raise input_error("stop", None, "here", "-")

    monkeypatch.setattr(prepare_mod, "prepare", fake_prepare)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profile.sqlite").write_bytes(b"")
    for argv, db in ((["--refine", "1"], "profile.sqlite"), (["--refine", "1", "--db", "board.sqlite"], None),
                     ([], None)):
        assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--no-plot", *argv]) == 2
        assert seen.pop() == db  # board.sqlite does not exist yet: nothing measured to search with
    (tmp_path / "board.sqlite").write_bytes(b"")
    assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--refine", "1", "--db", "board.sqlite"]) == 2
    assert seen.pop() == "board.sqlite"
