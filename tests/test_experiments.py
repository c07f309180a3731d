"""experiments.reproduce: configuration checks, the tables' definitions, a small sweep on local processes and
on an in-process Dask cluster (same results), and bad inputs (exit code 2, one line, nothing written). The sweep
on a real scheduler and worker processes is in test_experiments_cluster.py."""
from __future__ import annotations

import csv
import io
import json
import socket
from pathlib import Path

import onnx
import pytest
import yaml

from conftest import make_diamond_model, make_two_branch_model
from experiments import reproduce, tables
from experiments.config import FULL_CONFIG, QUICK_CONFIG, load_config
from experiments.sweep import Job, JobResult, throughput_optimal
from parapipe.errors import InputError
from parapipe.mapping import ParetoDoc, Point

SOC = "amlogic_a311d"


def _write_config(path: Path, **doc) -> Path:
    base = {"name": "tiny", "models": [], "socs": [SOC], "workers": 2,
            "search": {"seed": 0, "time_limit_s": 10}}
    base.update(doc)
    path.write_text(yaml.safe_dump(base))
    return path


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("models")
    paths = []
    for make in (make_diamond_model, make_two_branch_model):
        m = make()
        paths.append(str(d / f"{m.graph.name}.onnx"))
        onnx.save(m, paths[-1])
    return _write_config(d / "tiny.yaml", models=paths)


def _csv(path: Path, drop=()) -> list:
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


# -- configuration ------------------------------------------------------------------------------------------
def test_bundled_configs_load():
    quick, full = load_config(QUICK_CONFIG), load_config(FULL_CONFIG)
    assert len(quick.models) == 3 and len(quick.socs) == 2
    assert {"mobilenet_v2", "yolo_detector", "transformer_encoder", "resnet50"} <= set(full.models)
    assert set(full.socs) == {"amlogic_a311d", "black_sesame_a1000", "jetson_agx_orin"}


@pytest.mark.parametrize("doc, field", [
    ({"models": ["resnet51"]}, "models[0]"),
    ({"models": ["squeezenet"], "socs": ["nosuch_soc"]}, "socs[0]"),
    ({"models": ["squeezenet"], "socs": ["host"]}, "socs[0]"),
    ({"models": ["squeezenet"], "colour": "red"}, "colour"),
    ({"models": ["squeezenet"], "search": {"speed": 3}}, "search.speed"),
    ({"models": ["squeezenet"], "search": {"time_limit_s": -1}}, "search"),
    ({"models": ["squeezenet"], "workers": 0}, "workers"),
    ({"models": "squeezenet"}, "models"),
])
def test_bad_configs_name_file_and_field(tmp_path, doc, field):
    path = _write_config(tmp_path / "bad.yaml", **doc)
    with pytest.raises(InputError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: {field}: ") and "\n" not in msg


# -- table definitions --------------------------------------------------------------------------------------
def _pt(pid, strategy, period, energy, latency=1.0, stages=(("big",),)):
    """A typed point; stage ``i`` runs block ``b<i>`` (on its first PU)."""
    return Point(id=pid, strategy=strategy, pareto=True, period_s=period, energy_j=energy, latency_s=latency,
                 throughput_per_s=1 / period,
                 mapping={"stages": [{"pus": list(s), "blocks": [f"b{i}"], "time_s": period,
                                      "assignment": {f"b{i}": s[0]}} for i, s in enumerate(stages)]})


def test_throughput_optimal_breaks_ties_by_energy():
    pts = [_pt("a", "parapipe", 2.0, 1.0), _pt("b", "parapipe", 1.0, 3.0), _pt("c", "parapipe", 1.0, 2.0),
           _pt("d", "pipeline", 0.5, 9.0)]
    assert throughput_optimal(pts, "parapipe").id == "c"
    assert throughput_optimal(pts, "single") is None


def test_efficiency_gains_break_even_and_average():
    doc = ParetoDoc(model={"name": "m", "sha256": "0" * 64}, soc={"name": "s"}, blocks={},
                    bounds={"period_lb_s": 0.0, "latency_lb_s": 0.0}, points=[
        _pt("p0", "parapipe", 1.0, 0.5, stages=(("big", "gpu"), ("npu",))),
        _pt("pipeline-0", "pipeline", 2.0, 1.0, stages=(("big",), ("npu",))),
        _pt("parallel-0", "parallel", 4.0, 0.4, stages=(("big", "gpu"),)),
        _pt("single-big", "single", 8.0, 2.0)])
    r = JobResult(job=Job("m", "s"), doc=doc, prepare_s=1.0, search_s=2.0, n_blocks=3, n_pus=3,
                  throughput_point="p0")
    [row] = tables.efficiency_rows([r])
    assert row["parapipe_inf_per_j"] == 2.0 and row["parapipe_shape"] == "hybrid"
    assert row["gain_vs_pipeline_pct"] == pytest.approx(100.0)  # 2 inf/J vs 1 inf/J
    assert row["gain_vs_parallel_pct"] == pytest.approx(-20.0)  # 2 vs 2.5
    assert row["gain_vs_single_pct"] == pytest.approx(300.0)
    avg = tables.average_row([row, dict(row, gain_vs_pipeline_pct=0.0)])
    assert avg["model"] == "average" and avg["gain_vs_pipeline_pct"] == pytest.approx(50.0)
    # At equal throughput: the only parapipe point (period 1 s) is at least as fast as every baseline.
    assert row["eqthr_gain_vs_pipeline_pct"] == pytest.approx(100.0)
    assert row["eqthr_gain_vs_parallel_pct"] == pytest.approx(-20.0)
    assert avg["eqthr_gain_vs_single_pct"] == pytest.approx(300.0)
    [be] = tables.break_even_rows([r])
    # best baseline period 2 s, parapipe 1 s: 1 s saved per inference repays 3 s after 3 inferences
    assert be["best_baseline"] == "pipeline-0" and be["break_even_inferences"] == 3
    assert be["break_even_time_s"] == pytest.approx(3.0)
    doc.points[1] = doc.points[1].model_copy(update={"period_s": 1.0})
    assert tables.break_even_rows([r])[0]["break_even_inferences"] is None


def test_report_names_the_break_even_baseline_its_text_describes_and_says_whose_target():
    """report.md: the break-even text lists the baselines the table's "best baseline" is drawn from (here the
    replicated one is the fastest); the legend defines ``replicated``; the target row says it is this project's
    goal, the paper's row cites the paper."""
    from experiments import markdown

    doc = ParetoDoc(model={"name": "m", "sha256": "0" * 64}, soc={"name": "s"}, blocks={},
                    bounds={"period_lb_s": 0.0, "latency_lb_s": 0.0}, points=[
        _pt("p0", "parapipe", 1.0, 0.5, stages=(("big", "gpu"), ("npu",))),
        _pt("pipeline-0", "pipeline", 4.0, 1.0, stages=(("big",), ("npu",))),
        _pt("parallel-0", "parallel", 4.0, 0.4, stages=(("big", "gpu"),)),
        _pt("single-big", "single", 8.0, 2.0),
        _pt("replicated-0", "replicated", 2.0, 1.0, stages=(("big", "gpu"),))])
    r = JobResult(job=Job("m", "s"), doc=doc, prepare_s=1.0, search_s=2.0, n_blocks=3, n_pus=3,
                  throughput_point="p0")
    [be] = tables.break_even_rows([r])
    assert be["best_baseline"] == "replicated-0" and be["break_even_inferences"] == 3
    text = "\n".join(markdown.break_even_section([be]))
    described = text.split("the fastest of the ", 1)[1].split(" baselines)", 1)[0]
    assert "replicated" in described.replace(",", " ").split()  # the table's best baseline is among them
    eff = "\n".join(markdown.efficiency_section(tables.efficiency_rows([r])))
    assert "*replicated*: one stage of the whole model run by several replicas" in eff
    assert "| this project's target (A311D and A1000) | ≥ 15 % | ≥ 30 % |" in eff
    assert "Para-Pipe paper (Zhang et al., IEEE TCAD 2025) | +11.0 % | +23.3 %" in eff
    assert "doi:10.1109/TCAD.2025.3568348" in eff and "it is not a published figure" in eff


def test_equal_throughput_picks_the_most_efficient_fast_enough_point():
    pts = [_pt("p0", "parapipe", 1.0, 4.0), _pt("p1", "parapipe", 2.0, 1.0), _pt("p2", "parapipe", 3.0, 0.5),
           _pt("pipeline-0", "pipeline", 2.0, 2.0), _pt("parallel-0", "parallel", 0.5, 1.0)]
    assert tables.equal_throughput_point(pts, pts[3]).id == "p1"  # p2 is too slow, p0 costs more
    assert tables.equal_throughput_point(pts, pts[4]) is None  # no parapipe point is that fast


# -- a small sweep, local and on Dask ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_run(tiny_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "local"
    rc = reproduce.main(["--config", str(tiny_config), "--out", str(out), "--workers", "2"])
    assert rc == 0
    return out


def test_local_sweep_writes_every_output(local_run, tiny_config):
    files = set(json.loads((local_run / "manifest.json").read_text())["files"])
    for name in ("points.csv", "energy_efficiency.csv", "search_times.csv", "break_even.csv", "report.md",
                 "figures/summary_energy_gains.png", "fronts/diamond__amlogic_a311d.pareto.json"):
        assert name in files and (local_run / name).is_file()
    for key in ("diamond__amlogic_a311d", "two_branch__amlogic_a311d"):
        for kind in ("front", "gantt", "utilisation"):
            assert (local_run / "figures" / f"{key}_{kind}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = _csv(local_run / "points.csv")
    assert list(points[0])[:9] == tables.POINT_COLUMNS[:9]
    assert {p["model"] for p in points} == {"diamond", "two_branch"}
    assert {"parapipe", "pipeline", "parallel", "single"} <= {p["strategy"] for p in points}
    eff = _csv(local_run / "energy_efficiency.csv")
    assert [r["model"] for r in eff] == ["diamond", "two_branch", "average"]
    gains = [float(r["gain_vs_pipeline_pct"]) for r in eff[:2]]
    assert float(eff[2]["gain_vs_pipeline_pct"]) == pytest.approx(sum(gains) / 2)
    report = (local_run / "report.md").read_text()
    assert "+11.0 %" in report and "+23.3 %" in report and "## Break-even" in report
    assert "figures/summary_energy_gains.png" in report
    assert not [p for p in local_run.parent.iterdir() if p.name.startswith(".local.")]  # no temp folders left


@pytest.mark.slow
def test_dask_cluster_gives_the_same_results_and_replaces_a_previous_result(local_run, tiny_config, tmp_path):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "dask"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"kind": reproduce.MANIFEST_KIND}))
    (out / "stale.txt").write_text("from an earlier run")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        rc = reproduce.main(["--config", str(tiny_config), "--out", str(out), "--scheduler",
                             cluster.scheduler_address])
    assert rc == 0
    assert not (out / "stale.txt").exists()
    assert _csv(out / "points.csv", drop={"search_s"}) == _csv(local_run / "points.csv", drop={"search_s"})
    assert _csv(out / "energy_efficiency.csv") == _csv(local_run / "energy_efficiency.csv")
    assert "Dask scheduler" in (out / "report.md").read_text()


# -- bad inputs: exit 2, one line, nothing written -----------------------------------------------------------
def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("experiments: error: ") and "Traceback" not in err
    return err


def test_unknown_model_in_config(tmp_path, capsys):
    cfg = _write_config(tmp_path / "c.yaml", models=["squeezenet", "resnet51"])
    out = tmp_path / "out"
    assert reproduce.main(["--config", str(cfg), "--out", str(out)]) == 2
    assert "models[1]" in _one_line_error(capsys) and not out.exists()


def test_unwritable_output_folder(tiny_config, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert reproduce.main(["--config", str(tiny_config), "--out", str(blocker / "out")]) == 2
    assert "--out" in _one_line_error(capsys)
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_foreign_non_empty_output_folder_is_left_alone(tiny_config, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    assert reproduce.main(["--config", str(tiny_config), "--out", str(out)]) == 2
    assert "non-empty" in _one_line_error(capsys)
    assert [p.name for p in out.iterdir()] == ["thesis.tex"] and len(list(tmp_path.iterdir())) == 1


def test_dask_address_that_does_not_answer(tiny_config, tmp_path, capsys):
    pytest.importorskip("distributed")
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    rc = reproduce.main(["--config", str(tiny_config), "--out", str(out), "--scheduler",
                         f"tcp://127.0.0.1:{port}", "--scheduler-timeout", "1"])
    assert rc == 2
    assert "no Dask scheduler answers" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_scheduler_without_workers_is_refused_in_one_line(tiny_config, tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "out"
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        rc = reproduce.main(["--config", str(tiny_config), "--out", str(out), "--scheduler",
                             cluster.scheduler_address, "--scheduler-timeout", "1"])
    assert rc == 2
    assert "no Dask worker joined within 1 s" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_jobs_name_model_and_profile_files_by_absolute_path(tmp_path, monkeypatch):
    """A Dask worker runs in its own folder: a relative path of the configuration must not reach it."""
    m = make_diamond_model()
    (tmp_path / "net.onnx").write_bytes(m.SerializeToString())
    monkeypatch.chdir(tmp_path)
    cfg = load_config(_write_config(tmp_path / "c.yaml", models=["net.onnx", "squeezenet"]))
    jobs = reproduce.make_jobs(cfg)
    assert [j.model for j in jobs] == [str(tmp_path / "net.onnx"), "squeezenet"]
    assert [j.soc for j in jobs] == [SOC, SOC] and jobs[0].key == "net__" + SOC


def test_a_job_that_fails_in_a_worker_leaves_nothing(tiny_config, tmp_path, capsys):
    bad = tmp_path / "broken.onnx"
    bad.write_text("not a model\n" * 10)
    models = [str(bad)] + yaml.safe_load(tiny_config.read_text())["models"]
    cfg = _write_config(tmp_path / "c.yaml", models=models)
    out = tmp_path / "out"
    assert reproduce.main(["--config", str(cfg), "--out", str(out), "--workers", "2"]) == 2
    assert "broken.onnx" in _one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.onnx", "c.yaml"]


def test_shapes_and_stage_text_tell_replicated_stages_apart():
    from parapipe.mapping import stages_text

    rep = {"pus": ["dsp0"], "blocks": ["a", "b"], "replicas": [{"pus": ["dsp0"], "share": 0.5},
                                                              {"pus": ["dsp1"], "share": 0.5}]}
    par = {"pus": ["big", "gpu"], "blocks": ["c"]}
    one = {"pus": ["dla"], "blocks": ["c"]}

    def point(*stages):
        return Point(id="p", strategy="parapipe", period_s=1.0, latency_s=1.0, energy_j=1.0, throughput_per_s=1.0,
                     mapping={"stages": [dict(st, time_s=1.0) for st in stages]})

    assert tables.mapping_shape(point(rep)) == "replicated"
    assert tables.mapping_shape(point(one, rep)) == "hybrid"
    assert tables.mapping_shape(point(one, one)) == "pipeline"
    assert tables.mapping_shape(point(par)) == "parallel"
    assert stages_text([one, par, rep]) == "dla | big+gpu | {dsp0,dsp1}"
