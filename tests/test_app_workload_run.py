"""A workload point run in process (parapipe.app.workload_run): two models' points at once on cpu0 | cpu1, PUs
shared, each model's outputs checked against its own unsplit model, per-model and workload figures reported,
one ``runs`` row per model linked by the workload's id, a database of the schema before kept readable."""
from __future__ import annotations

import json
import os
import sqlite3

import pytest

from deploy_mappings import two_stage_doc
from parapipe.graph.zoo import load_model
from parapipe.mapping.io import parse_pareto

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="host mappings use CPUs 0, 1")


@pytest.fixture(scope="module")
def members():
    from parapipe.app.workload_run import WorkloadMember

    doc = parse_pareto(two_stage_doc("squeezenet", (0.3, 0.6)), "pareto.json")
    lm = load_model("squeezenet")
    return [WorkloadMember("a", lm, doc, doc.points[0], 1.0, "w.json"),
            WorkloadMember("b", lm, doc, doc.points[1], 2.0, "w.json")]


def test_a_workload_point_runs_checked_recorded_and_traced(members, tmp_path):
    from parapipe.app.workload_run import record_workload_run, run_workload_local
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import list_runs

    trace = tmp_path / "trace.json"
    loaded, rep = run_workload_local(members, "w0", frames=3, warmup=1, idle_frames=1, trace=str(trace))
    assert rep.outputs_match and set(rep.models) == {"a", "b"}
    assert rep.models["a"].frames == 3 and rep.models["b"].frames == 6  # rates 1 and 2
    assert all(r.outputs_match and r.checked_tensors >= 1 for r in rep.models.values())
    assert rep.throughput_per_s > 0 and rep.predicted["period_s"] == pytest.approx(2 * 0.02)  # nominal points
    assert rep.models["b"].predicted["period_s"] == pytest.approx(0.02)
    assert set(rep.pu_busy_s) == {"cpu0", "cpu1"}
    doc = json.loads(trace.read_text())
    assert {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"} == {"model a",
                                                                                                  "model b"}
    db = tmp_path / "p.sqlite"
    rows = record_workload_run(str(db), members, rep, "local")
    with ProfileDB(db) as pdb:
        runs = list_runs(pdb)
    assert [r.id for r in runs] == rows and len(rows) == 2
    assert runs[0].workload["id"] == runs[1].workload["id"] and runs[1].workload["rates"] == {"a": 1.0, "b": 2.0}
    assert runs[0].workload["throughput_per_s"] == pytest.approx(rep.throughput_per_s)
    assert [r.point for r in runs] == ["p0", "p1"] and runs[1].frames == 6


def test_a_database_of_schema_4_keeps_its_runs_readable(members, tmp_path):
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import RunRecord, append_run, list_runs

    path = tmp_path / "old.sqlite"
    record = RunRecord(recorded_at="2025-01-01T00:00:00+00:00", model="m", model_sha256="x", soc="host",
                       soc_sha256="y", point="p0", pu_list="cpu0", mapping=[], frames=1, throughput_per_s=1.0,
                       period_s=1.0, latency_p50_s=1.0, latency_p99_s=1.0, idle_latency_s=1.0, pu_busy_s={},
                       energy_j=None, predicted_period_s=None, predicted_latency_s=None, predicted_energy_j=None,
                       prediction_applies=True, substituted={}, outputs_match=True, runner="local", board={})
    with ProfileDB(path) as db:
        append_run(db, record)
    conn = sqlite3.connect(str(path))  # as schema 4 wrote it: no workload column
    conn.execute("ALTER TABLE runs DROP COLUMN workload")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    with ProfileDB(path) as db:
        (back,) = list_runs(db)
    assert back.workload is None and back.point == "p0"


def test_a_workload_member_refused_in_one_line(members):
    from parapipe.app.workload_run import WorkloadMember, load_workload
    from parapipe.errors import InputError

    a, b = members
    with pytest.raises(InputError, match="model name 'a' appears twice"):
        load_workload([a, a])
    with pytest.raises(InputError, match=r"rates.b: must be a positive number"):
        load_workload([a, WorkloadMember("b", b.model, b.doc, b.point, 0.0, "w.json")])


def test_run_of_a_workload_mapping_prints_each_model_and_the_workload(tmp_path, capsys):
    from deploy_mappings import two_model_workload_doc, write_doc
    from parapipe.cli import main
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import list_runs

    path = write_doc(two_model_workload_doc(), tmp_path / "workload-pareto.json")
    db, trace = tmp_path / "p.sqlite", tmp_path / "t.json"
    assert main(["run", "--mapping", str(path), "--point", "w0", "--frames", "3", "--db", str(db),
                 "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "workload point w0: 2 models (squeezenet cpu0 | cpu1; shufflenet cpu0 | cpu1), 3 workload frames" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert lines["squeezenet"].split()[1] == "1" and "match" in lines["squeezenet"]
    assert lines["shufflenet"].split()[1] == "2" and lines["workload"].split()[2] == "20.00"  # predicted
    assert "outputs_match: true" in out
    with ProfileDB(db) as pdb:
        assert [(r.model, r.frames) for r in list_runs(pdb)] == [("squeezenet", 3), ("shufflenet", 6)]
    assert main(["run", "squeezenet", "shufflenet", "--mapping", str(path), "--frames", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "workload" and doc["outputs_match"] and set(doc["models"]) == {"squeezenet", "shufflenet"}
    assert main(["run", "squeezenet", "--mapping", str(path)]) == 2  # one model for a workload of two
    assert "1 given for a workload of 2 (squeezenet, shufflenet)" in capsys.readouterr().err
    # the models in another order than the workload's: matched by SHA-256, run as the workload's
    assert main(["run", "shufflenet", "squeezenet", "--mapping", str(path), "--frames", "1", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["models"]) == {"squeezenet", "shufflenet"}
    assert main(["run", "squeezenet", "squeezenet", "--mapping", str(path)]) == 2
    assert "model 'squeezenet' given twice for a workload of squeezenet, shufflenet" in capsys.readouterr().err


def test_a_workload_run_counts_workload_frames_in_its_progress_and_chart_title():
    """Progress lines and the chart title of a workload run say workload frames/s, not inf/s."""
    from parapipe.app.deploy import describe_event
    from parapipe.report.gantt import trace_title

    event = {"event": "progress", "phase": "run", "frames_done": 3, "frames": 10, "throughput_per_s": 20.0}
    assert describe_event(event, workload=True) == "run 3/10 workload frames, 20.0 workload frames/s"
    assert describe_event(event) == "run 3/10 frames, 20.0 inf/s"
    events = [{"frame": f, "start_s": f * 0.1, "end_s": f * 0.1 + 0.05, "pu": "cpu0", "stage": 0} for f in range(4)]
    info = {"workload": ["a", "b"], "model": "a + b", "point": "w0", "throughput_per_s": 12.5,
            "predicted": {"throughput_per_s": 20.0}}
    assert trace_title(info, events, 0, 4).startswith("a + b: workload point w0 — 12.5 workload frames/s measured, "
                                                      "20.0 predicted")
