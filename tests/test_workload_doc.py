"""The typed workload document: round trip, each model's view as a single-model document, the two kinds of
pareto.json told apart in one line, and hand edits refused naming the point, the model and the field."""
from __future__ import annotations

import json

import pytest

from deploy_mappings import host_soc_ref
from parapipe.errors import InputError
from parapipe.mapping import (ParetoDoc, parse_mapping, parse_pareto, parse_workload, read_mapping, read_pareto,
                              read_workload, select_point, write_pareto)


def _stage(pu, blocks, t=0.01):
    return {"pus": [pu], "blocks": blocks, "time_s": t, "assignment": {b: pu for b in blocks}, "order": blocks}


def workload_dict():
    """Two tiny models (a: three blocks at rate 3, b: two blocks at rate 1) and two points on two host CPUs."""
    a, b = ["a0", "a1", "a2"], ["b0", "b1"]
    models = [{"model": {"name": "a", "sha256": "aa"}, "input_shapes": {"x": [1, 3, 8, 8]}, "rate": 3,
               "latency_bound_s": 0.5, "blocks": {n: ["Conv"] for n in a},
               "bounds": {"period_lb_s": 0.01, "latency_lb_s": 0.02}},
              {"model": {"name": "b", "sha256": "bb"}, "rate": 1, "blocks": {n: ["Gemm"] for n in b}}]
    common = {"period_gap": None, "latency_gap": None, "energy_j_per_model": {"a": 0.1, "b": 0.2}}
    points = [
        dict(common, id="w0", strategy="parapipe", pareto=True, throughput_per_s=10.0, period_s=0.1,
             latency_s=0.05, energy_j=1.0, latency_s_per_model={"a": 0.05, "b": 0.02},
             pu_busy_s={"cpu0": 0.09, "cpu1": 0.1}, pu_busy_s_per_model={"a": {"cpu0": 0.03}, "b": {"cpu1": 0.1}},
             mappings={"a": {"stages": [_stage("cpu0", a)]}, "b": {"stages": [_stage("cpu1", b)]}}),
        dict(common, id="w1", strategy="split", throughput_per_s=5.0, period_s=0.2, latency_s=0.03, energy_j=2.0,
             latency_s_per_model={"a": 0.03, "b": 0.03},
             mappings={"a": {"stages": [_stage("cpu0", a[:1]), _stage("cpu1", a[1:])]},
                       "b": {"stages": [_stage("cpu0", b)]}}),
    ]
    return {"schema_version": 2, "kind": "workload", "soc": host_soc_ref(), "models": models,
            "latency_axis": "max", "bounds": {"period_lb_s": 0.05, "latency_lb_s": 0.02}, "points": points}


def refused(data, *words):
    with pytest.raises(InputError) as info:
        parse_workload(data, "w.json")
    msg = str(info.value)
    assert msg.startswith("w.json: ") and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


def test_round_trip_and_model_view(tmp_path):
    doc = parse_workload(workload_dict(), "w.json")
    write_pareto(doc, tmp_path / "w.json")
    assert read_workload(str(tmp_path / "w.json")) == doc == read_mapping(str(tmp_path / "w.json"))
    assert select_point(doc, "best-throughput").id == "w0" and select_point(doc, "best-latency").id == "w0"
    view = doc.model_view("a")
    assert isinstance(view, ParetoDoc) and view.model.name == "a" and list(view.blocks) == ["a0", "a1", "a2"]
    assert view.input_shapes == {"x": [1, 3, 8, 8]} and view.bounds.period_lb_s == 0.01
    p0 = select_point(view, "w0")
    assert p0.period_s == pytest.approx(0.1 / 3) and p0.throughput_per_s == pytest.approx(30.0)
    assert p0.latency_s == 0.05 and p0.energy_j == 0.1 and p0.pu_busy_s == {"cpu0": 0.03}
    assert [st.pus for st in select_point(view, "w1").stages] == [["cpu0"], ["cpu1"]]
    assert view.search["workload"]["rates"] == [3, 1]
    # the view is an ordinary single-model document: it writes and reads back as one
    write_pareto(view, tmp_path / "a.json")
    assert read_pareto(str(tmp_path / "a.json")) == view


def test_the_two_kinds_are_told_apart_in_one_line(tmp_path):
    (tmp_path / "w.json").write_text(json.dumps(workload_dict()))
    with pytest.raises(InputError, match=r"w.json: kind: is a workload mapping of models a, b, not of one model"):
        read_pareto(str(tmp_path / "w.json"))
    with pytest.raises(InputError, match=r"'parapipe run', 'parapipe deploy', 'parapipe plot --front' or '--gantt'"):
        read_pareto(str(tmp_path / "w.json"))
    single = parse_workload(workload_dict(), "w.json").model_view("b").model_dump(mode="json")
    assert parse_mapping(single, "s.json").model.name == "b"
    refused(single, "w.json: kind: is the mapping of one model (b), not a workload")


def _edit(fn):
    d = workload_dict()
    fn(d)
    return d


def test_hand_edits_are_refused_naming_point_model_and_field():
    refused(_edit(lambda d: d["points"][0]["mappings"]["b"]["stages"][0]["blocks"].pop()),
            "points[w0].mappings.b.stages", "block(s) in no stage")
    refused(_edit(lambda d: d["points"][1]["mappings"]["a"]["stages"][0]["blocks"].append("b0")),
            "points[w1].mappings.a.stages[0].blocks", "unknown block 'b0'")
    refused(_edit(lambda d: d["points"][0]["mappings"].pop("a")), "points[w0].mappings", "no entry for model 'a'")
    refused(_edit(lambda d: d["points"][0]["latency_s_per_model"].update(c=1.0)),
            "points[w0].latency_s_per_model.c", "not a model of the workload")
    refused(_edit(lambda d: d["models"][1]["model"].update(name="a")), "models[1].model.name", "listed twice")
    refused(_edit(lambda d: d["models"][0].update(rate=0)), "models.0.rate")
    refused(_edit(lambda d: d["points"][0]["mappings"]["a"]["stages"][0].update(pus=["npu"], assignment={})),
            "points[w0].mappings.a.stages[0].pus", "PU 'npu' is not in SoC 'host'")


def test_a_model_that_cannot_join_is_refused_in_one_line(tmp_path):
    from parapipe.app.workload import WorkloadSpec, check_models, read_app_file

    spec = WorkloadSpec(["squeezenet", "alexnet"], [1.0, 1.0], [None, {"nope": (1, 3, 224, 224)}], [None, None])
    with pytest.raises(InputError) as info:
        check_models(spec, "amlogic_a311d")
    msg = str(info.value)
    assert msg.startswith("model alexnet: cannot join the workload: ") and "\n" not in msg
    app = tmp_path / "app.yaml"
    app.write_text("models:\n  - model: squeezenet\n    rate: 0\n")
    with pytest.raises(InputError, match=r"app.yaml: models\[0\].rate: must be a number > 0, got 0; give frames"):
        read_app_file(str(app))


def test_plot_draws_a_workload_front_and_gantt_and_refuses_graph(tmp_path, capsys):
    """``parapipe plot --front`` / ``--gantt`` on a workload document write PNGs (each model its colour);
    ``--graph`` names the models in one line."""
    from parapipe.cli import main

    path = tmp_path / "wl.json"
    path.write_text(json.dumps(workload_dict()))
    for flag in ("--front", "--gantt"):
        out = tmp_path / f"{flag[2:]}.png"
        assert main(["plot", flag, "--mapping", str(path), "--out", str(out)]) == 0
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", "--graph", "--mapping", str(path), "--out", str(tmp_path / "g.png")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a workload of a, b" in err[0]


def test_workload_option_and_app_file_errors_name_the_field(tmp_path, capsys):
    """--rates names the rate that is not positive; --objectives is refused for a workload; a bad input_shapes
    and an infeasible latency bound name the app file's field (and the least latency), never the zoo's file."""
    from parapipe.app.workload import parse_rates
    from parapipe.cli import main

    with pytest.raises(InputError, match=r"rate 2 \(-3\) is not a positive number"):
        parse_rates("1,-3", 2)
    out = ["--soc", "amlogic_a311d", "--max-blocks", "4", "--no-plot", "--out", str(tmp_path / "o")]
    assert main(["optimize", "squeezenet", "shufflenet", "--objectives", "throughput", *out]) == 2
    assert "--objectives" in capsys.readouterr().err
    app = tmp_path / "app.yaml"
    app.write_text("models:\n  - model: shufflenet\n  - model: squeezenet\n    input_shapes: {nope: [1, 3, 224, 224]}\n")
    assert main(["optimize", "--workload", str(app), *out]) == 2
    err = capsys.readouterr().err.strip()
    assert "app.yaml: models[1].input_shapes: nope" in err and "site-packages" not in err and ".onnx" not in err
    app.write_text("models:\n  - model: squeezenet\n    latency_bound_s: 0.000001\n  - model: shufflenet\n")
    assert main(["optimize", "--workload", str(app), *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "app.yaml: models[0].latency_bound_s: no mapping of squeezenet meets 1e-06 s" in err[0]
    assert "least latency it reaches on these PUs is" in err[0] and "raise the bound" in err[0]


def test_workload_gantt_deals_a_replicated_stages_frames_to_its_replicas():
    """Each frame of a replicated stage runs whole on one replica (dealt by share), for the replica's time."""
    from parapipe.mapping import parse_workload
    from parapipe.report.workload import _bars

    d = workload_dict()
    a = ["a0", "a1", "a2"]
    reps = [{"pus": [pu], "assignment": {b: pu for b in a}, "order": a, "share": 0.5, "time_s": 0.06}
            for pu in ("cpu0", "cpu1")]
    d["points"][0]["mappings"]["a"] = {"stages": [dict(_stage("cpu0", a, 0.03), replicas=reps)]}
    doc = parse_workload(d, "w.json")
    bars = [b for b in _bars(doc, doc.points[0], 2) if b[3] == 0]
    assert len(bars) == 6  # 3 frames of a per workload frame x 2 workload frames, one bar each
    assert sorted(b[0] for b in bars) == ["cpu0"] * 3 + ["cpu1"] * 3
    assert all(b[2] == pytest.approx(0.06) for b in bars)
