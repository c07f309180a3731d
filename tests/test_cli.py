"""The ``parapipe`` command, run in-process through ``parapipe.cli.main``: happy paths, the pareto.json
schema, and every bad input -> exit code 2, one ``parapipe: error:`` line naming the file/field, no traceback,
no files left behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from parapipe._paths import data_dir
from parapipe.cli import main
from parapipe.graph.zoo import light_models_dir

ZOO_MODELS = ["alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
              "squeezenet", "vgg19", "zfnet512"]
REPO = Path(__file__).resolve().parents[1]


def run_cli(capsys, *argv):
    """``main(argv)`` -> (exit code, stdout, stderr); output captured before the call is dropped."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code, out, err, *names):
    """Exit 2, one stderr line 'parapipe: error: ...' that mentions every string in ``names``."""
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("parapipe: error: "), err
    assert "Traceback" not in err and "Traceback" not in out
    for name in names:
        assert name in lines[0], (name, lines[0])


def files_under(path: Path):
    return sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).exists() else []


# ----------------------------------------------------------------------------------------- happy paths

def test_models_lists_the_nine_names(capsys):
    from parapipe.graph.zoo import list_models

    code, out, err = run_cli(capsys, "models")
    assert code == 0
    names = [line.split()[0] for line in out.strip().splitlines()]
    assert names == [m.name for m in list_models()]  # the whole registry, in its order
    assert [n for n in names if n in ZOO_MODELS] == ZOO_MODELS  # the nine onnx-wheel models among them
    code, out, _ = run_cli(capsys, "models", "--json")
    assert code == 0 and [m["name"] for m in json.loads(out)] == names


def test_inspect_squeezenet(capsys):
    code, out, err = run_cli(capsys, "inspect", "squeezenet", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["model"] == "squeezenet" and len(info["sha256"]) == 64
    assert info["operators"] > info["blocks"] > 1
    assert len(info["block_list"]) == info["blocks"]
    # Fire modules: two parallel 1x1 / 3x3 expand branches.
    assert info["widest_parallel_section"] >= 2
    # SqueezeNet 1.0 at 224x224: ~0.7 GFLOPs (two per multiply-add), 1.25 M fp32 parameters (~5 MB).
    assert 0.5e9 < info["flops"] < 1e9
    assert 4e6 < info["param_nbytes"] < 6e6
    code, out, err = run_cli(capsys, "inspect", "squeezenet")
    assert code == 0
    assert "squeezenet" in out
    assert f"operators  {info['operators']}" in out and f"blocks {info['blocks']}" in out
    assert f"FLOPs      {info['flops'] / 1e9:.3f} G" in out


def _check_schema(doc, model, soc):
    assert doc["schema_version"] == 2
    assert doc["model"]["name"] == model and len(doc["model"]["sha256"]) == 64
    assert doc["soc"]["name"] == soc and len(doc["soc"]["sha256"]) == 64
    assert doc["soc"]["pus"] and all("execution" in pu for pu in doc["soc"]["pus"].values())
    assert doc["points"]
    strategies = {p["strategy"] for p in doc["points"]}
    assert "parapipe" in strategies and strategies <= {"parapipe", "pipeline", "parallel", "single", "replicated"}
    # >= 1: on two equal cores the whole model replicated can dominate every other mapping
    assert sum(p["strategy"] == "parapipe" and p["pareto"] for p in doc["points"]) >= 1
    ids = [p["id"] for p in doc["points"]]
    assert len(ids) == len(set(ids))
    all_blocks = list(doc["blocks"])
    for p in doc["points"]:
        assert isinstance(p["pareto"], bool)
        for key in ("throughput_per_s", "period_s", "latency_s", "energy_j"):
            assert isinstance(p[key], float) and p[key] > 0, key
        assert p["throughput_per_s"] == pytest.approx(1 / p["period_s"])
        stages = p["mapping"]["stages"]
        assert stages
        covered = [b for st in stages for b in st["blocks"]]
        assert covered == all_blocks  # every block once, in order
        for st in stages:
            assert st["pus"] and all(isinstance(u, str) for u in st["pus"])
            assert st["time_s"] > 0 and (bool(st.get("replicas")) or st["time_s"] <= p["period_s"] * (1 + 1e-9))
            assert set(st["assignment"]) == set(st["blocks"])
            assert set(st["assignment"].values()) <= set(st["pus"])
        assert sum(st["time_s"] for st in stages) == pytest.approx(p["latency_s"])


def test_optimize_writes_pareto_json_and_png(capsys, tmp_path):
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "optimize", "squeezenet", "--soc", "black_sesame_a1000",
                             "--out", out_dir, "--time-limit", "2")
    assert code == 0, err
    assert sorted(p.name for p in files_under(out_dir)) == ["pareto.json", "pareto.png"]
    doc = json.loads((out_dir / "pareto.json").read_text())
    _check_schema(doc, "squeezenet", "black_sesame_a1000")
    assert (out_dir / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "pareto.json" in out and "p0" in out


@pytest.fixture
def early_workers(monkeypatch):
    """The plot processes ``parapipe optimize`` starts, and the order of their start and the model's reading;
    ``optimize`` itself must not start one of its own (the command hands over the one it started)."""
    import parapipe.app.optimize as app_optimize
    import parapipe.app.plot_worker as plot_worker
    import parapipe.app.prepare as app_prepare

    events, workers = [], []
    real_start, real_prepare = plot_worker.start_plot_worker, app_prepare.prepare

    def start():
        events.append("plot process")
        worker = real_start()
        workers.append(worker)
        return worker

    def prepare(*args, **kwargs):
        events.append("read the model")
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(plot_worker, "start_plot_worker", start)
    monkeypatch.setattr(app_prepare, "prepare", prepare)
    monkeypatch.setattr(app_optimize, "start_plot_worker", lambda: pytest.fail("optimize started a second one"))
    return events, workers


def test_optimize_starts_the_plot_process_before_it_reads_the_model(capsys, tmp_path, early_workers, monkeypatch):
    """matplotlib loads in the plot process while this one reads and coarsens the model (single-threaded),
    not during the search; that process draws pareto.png and has exited when the command returns."""
    import parapipe.report.plots as plots

    events, workers = early_workers
    real_plot = plots.plot_pareto

    def drawn_here(*args, **kwargs):  # right only where no plot process started (one CPU)
        assert workers[0] is None, "drawn in this process, not by the plot process"
        return real_plot(*args, **kwargs)

    monkeypatch.setattr(plots, "plot_pareto", drawn_here)
    code, _, err = run_cli(capsys, "optimize", "squeezenet", "--soc", "black_sesame_a1000",
                           "--out", tmp_path / "out", "--time-limit", "2")
    assert code == 0, err
    assert events == ["plot process", "read the model"]
    if workers[0] is not None:
        assert workers[0].proc.returncode is not None  # reaped
    assert (tmp_path / "out" / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_model_that_cannot_be_read_ends_the_early_plot_process(capsys, tmp_path, early_workers):
    events, workers = early_workers
    code, out, err = run_cli(capsys, "optimize", tmp_path / "missing.onnx", "--soc", "black_sesame_a1000",
                             "--out", tmp_path / "out")
    assert code == 2 and "missing.onnx" in err and "Traceback" not in err
    assert events == ["plot process", "read the model"]
    if workers[0] is not None:
        assert workers[0].proc.returncode is not None  # reaped: no process left behind
    assert not (tmp_path / "out").exists()


def test_no_plot_and_host_measurements_start_no_early_plot_process(capsys, tmp_path, early_workers):
    events, _ = early_workers
    code, _, err = run_cli(capsys, "optimize", "squeezenet", "--soc", "black_sesame_a1000",
                           "--out", tmp_path / "out", "--time-limit", "2", "--no-plot")
    assert code == 0, err
    assert events == ["read the model"]


# ------------------------------------------------------------------------------------------- bad inputs

@pytest.fixture
def light_file():
    return lambda name: light_models_dir() / f"light_{name}.onnx"


def _optimize_fails(capsys, tmp_path, model, soc, *names, extra=()):
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "optimize", model, "--soc", soc, "--out", out_dir, *extra)
    assert_user_error(code, out, err, *names)
    assert files_under(out_dir) == []
    return err


def test_missing_model_path(capsys, tmp_path):
    missing = tmp_path / "nowhere" / "model.onnx"
    _optimize_fails(capsys, tmp_path, missing, "amlogic_a311d", str(missing), "not found")


def test_truncated_onnx(capsys, tmp_path, light_file):
    bad = tmp_path / "trunc.onnx"
    bad.write_bytes(light_file("squeezenet").read_bytes()[:100])
    _optimize_fails(capsys, tmp_path, bad, "amlogic_a311d", str(bad), "not a valid ONNX model")


def test_text_file_named_onnx(capsys, tmp_path):
    bad = tmp_path / "x.onnx"
    bad.write_text("this is not a protobuf\n")
    _optimize_fails(capsys, tmp_path, bad, "amlogic_a311d", str(bad), "not a valid ONNX model")


def test_unknown_model_name(capsys, tmp_path):
    _optimize_fails(capsys, tmp_path, "squeezenet2", "amlogic_a311d", "'squeezenet2'", "squeezenet")


def test_unknown_soc_name(capsys, tmp_path):
    _optimize_fails(capsys, tmp_path, "squeezenet", "exynos9", "'exynos9'", "amlogic_a311d", "'host'")


def _edit(*keys, value=None, delete=False):
    def mutate(raw):
        node = raw
        for key in keys[:-1]:
            node = node[key]
        if delete:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return mutate


PROFILE_CASES = [
    ("unknown-key", _edit("pus", "big", "peak_flop", value=1.0), ["pus.big.peak_flop", "unknown key"]),
    ("missing-field", _edit("pus", "gpu", "peak_flops", delete=True), ["pus.gpu.peak_flops", "missing"]),
    ("wrong-type", _edit("pus", "big", "cores", value="four"), ["pus.big.cores", "wrong type"]),
    ("negative-bandwidth", _edit("memory_bandwidth_bytes_per_s", "value", value=-1.0e9),
     ["memory_bandwidth_bytes_per_s", "> 0"]),
    ("negative-pu-bandwidth", _edit("pus", "little", "memory_bandwidth_bytes_per_s", "value", value=-2.6e9),
     ["pus.little.memory_bandwidth_bytes_per_s", "> 0"]),
    ("negative-transfer-bandwidth", _edit("transfers", "pairs", 0, "beta_bytes_per_s", "value", value=-5e8),
     ["transfers.pairs.0.beta_bytes_per_s", "> 0"]),
]


@pytest.mark.parametrize("mutate, names", [c[1:] for c in PROFILE_CASES], ids=[c[0] for c in PROFILE_CASES])
def test_bad_profile_yaml(capsys, tmp_path, mutate, names):
    raw = yaml.safe_load((data_dir("soc_profiles") / "amlogic_a311d.yaml").read_text())
    mutate(raw)
    profile = tmp_path / "my_soc.yaml"
    profile.write_text(yaml.safe_dump(raw, sort_keys=False))
    _optimize_fails(capsys, tmp_path, "squeezenet", profile, "my_soc.yaml", *names)


def test_unedited_profile_copy_works(capsys, tmp_path):
    # The control for test_bad_profile_yaml: the same copy, unedited, loads and optimises.
    raw = yaml.safe_load((data_dir("soc_profiles") / "amlogic_a311d.yaml").read_text())
    profile = tmp_path / "my_soc.yaml"
    profile.write_text(yaml.safe_dump(raw, sort_keys=False))
    code, out, err = run_cli(capsys, "optimize", "alexnet", "--soc", profile, "--out", tmp_path / "out",
                             "--no-plot", "--time-limit", "1")
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "pareto.json").read_text())["soc"]["name"] == "amlogic_a311d"


def test_pus_unknown(capsys, tmp_path):
    _optimize_fails(capsys, tmp_path, "squeezenet", "black_sesame_a1000", "--pus", "'npu'", "dsp0",
                    extra=("--pus", "cpu,npu"))


def test_pus_exclude_every_pu_of_a_block(capsys, tmp_path):
    # SqueezeNet ends in Softmax, which the A1000 DLA does not run (soc_profiles/black_sesame_a1000.yaml).
    from parapipe.errors import InfeasibleError
    from parapipe.app.prepare import prepare

    with pytest.raises(InfeasibleError):
        prepare("squeezenet", "black_sesame_a1000", pus=["dla"])
    _optimize_fails(capsys, tmp_path, "squeezenet", "black_sesame_a1000", "Softmax", "--pus",
                    extra=("--pus", "dla"))
    # Inception v1 has LRN, which the DLA does not run either.
    _optimize_fails(capsys, tmp_path, "inception_v1", "black_sesame_a1000", "LRN", extra=("--pus", "dla"))


def test_unwritable_out(capsys, tmp_path):
    regular = tmp_path / "a_file"
    regular.write_text("x")
    out_dir = regular / "out"
    code, out, err = run_cli(capsys, "optimize", "alexnet", "--soc", "amlogic_a311d", "--out", out_dir)
    assert_user_error(code, out, err, "--out", str(out_dir))
    assert regular.read_text() == "x" and sorted(tmp_path.iterdir()) == [regular]


# ------------------------------------------------------------------------------------ run: bad mappings

@pytest.fixture(scope="module")
def squeezenet_a311d_doc(tmp_path_factory):
    """pareto.json of squeezenet on amlogic_a311d (no plot), as a dict."""
    out_dir = tmp_path_factory.mktemp("sq_a311d")
    assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--out", str(out_dir), "--no-plot",
                 "--time-limit", "1"]) == 0
    return json.loads((out_dir / "pareto.json").read_text())


def _write(tmp_path, doc, name="pareto.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _run_fails(capsys, tmp_path, monkeypatch, argv, *names):
    monkeypatch.chdir(tmp_path)
    before = files_under(tmp_path)
    code, out, err = run_cli(capsys, "run", *argv)
    assert_user_error(code, out, err, *names)
    assert files_under(tmp_path) == before


def test_run_a311d_point_this_machine_cannot_bind_names_the_pu_and_bind(capsys, tmp_path, monkeypatch,
                                                                      squeezenet_a311d_doc):
    # The A311D's GPU needs the ncnn adapter slot, its NPU the VSINPU provider, its big cluster CPUs 2-5: this
    # machine has none of them, so the run is refused before anything runs, naming the PU and --bind.
    path = _write(tmp_path, squeezenet_a311d_doc)
    _run_fails(capsys, tmp_path, monkeypatch, ["squeezenet", "--mapping", path, "--frames", "5", "--db", ""],
               "this machine: PU ", "--bind")


def test_run_mapping_for_another_model(capsys, tmp_path, monkeypatch, squeezenet_a311d_doc):
    path = _write(tmp_path, squeezenet_a311d_doc)
    _run_fails(capsys, tmp_path, monkeypatch, ["alexnet", "--mapping", path, "--frames", "5"],
               str(path), "model.sha256", "'squeezenet'", "'alexnet'")


def test_run_unknown_point(capsys, tmp_path, monkeypatch, squeezenet_a311d_doc):
    path = _write(tmp_path, squeezenet_a311d_doc)
    _run_fails(capsys, tmp_path, monkeypatch,
               ["squeezenet", "--mapping", path, "--point", "p999", "--frames", "5"],
               "--point", "'p999'", str(path), "best-throughput")


@pytest.mark.parametrize("content, names", [
    (None, ["cannot read"]),
    ("{not json", ["not valid JSON"]),
    (json.dumps({"schema_version": 7}), ["schema_version"]),
    (json.dumps({"schema_version": 2, "model": {"name": "m", "sha256": "0" * 64}, "soc": {"name": "host"},
                 "blocks": {}, "bounds": {"period_lb_s": 0, "latency_lb_s": 0}}), ["points"]),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ["not a text file"]),
], ids=["missing", "not-json", "schema-version", "no-points", "binary"])
def test_run_bad_mapping_file(capsys, tmp_path, monkeypatch, content, names):
    path = tmp_path / "pareto.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    _run_fails(capsys, tmp_path, monkeypatch, ["squeezenet", "--mapping", path], str(path), *names)


def _evaluate_fails(capsys, argv, *names):
    code, out, err = run_cli(capsys, "evaluate", *argv)
    assert_user_error(code, out, err, *names)


def test_evaluate_mapping_of_another_model_is_named_as_such(capsys, tmp_path, squeezenet_a311d_doc):
    # shufflenet's input is not squeezenet's: the stored input shapes must not be applied (and fail) before the
    # model check says what is wrong
    path = _write(tmp_path, squeezenet_a311d_doc)
    _evaluate_fails(capsys, ["shufflenet", "--soc", "amlogic_a311d", "--mapping", path], str(path),
                    "model.sha256", "'squeezenet'")


def test_evaluate_bad_mapping_arguments(capsys, tmp_path, squeezenet_a311d_doc):
    png = tmp_path / "pareto.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    _evaluate_fails(capsys, ["squeezenet", "--soc", "amlogic_a311d", "--mapping", png], str(png), "not a text file")
    path = _write(tmp_path, squeezenet_a311d_doc)
    _evaluate_fails(capsys, ["squeezenet", "--soc", "amlogic_a311d", "--mapping", path, "--point", "p999"],
                    str(path), "'p999'")
    n = len(squeezenet_a311d_doc["blocks"])
    _evaluate_fails(capsys, ["squeezenet", "--soc", "amlogic_a311d", "--mapping", ",".join(["big"] * n),
                             "--point", "p1"], "--point", "pareto.json mapping only")
    _evaluate_fails(capsys, ["squeezenet", "--soc", "amlogic_a311d", "--mapping",
                             ",".join(["big"] * (n - 1) + ["big|"])], f"entry {n}", "empty PU name in 'big|'")


def test_error_line_from_a_real_process(tmp_path, light_file):
    # The same contract seen from outside: python -m parapipe, real stderr (logging and tqdm included).
    bad = tmp_path / "trunc.onnx"
    bad.write_bytes(light_file("squeezenet").read_bytes()[:100])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "parapipe", "optimize", str(bad), "--soc", "amlogic_a311d",
            "--out", str(tmp_path / "out")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, str(bad))
    assert not (tmp_path / "out").exists()



# -------------------------------------------------------------------------------------- run: end to end

@pytest.fixture(scope="module")
def host_mapping(tmp_path_factory):
    """pareto.json of squeezenet measured on this machine (``--soc host``; a few seconds of measurement)."""
    out_dir = tmp_path_factory.mktemp("sq_host")
    assert main(["optimize", "squeezenet", "--soc", "host", "--out", str(out_dir), "--no-plot",
                 "--time-limit", "2"]) == 0
    return out_dir / "pareto.json"


RUN_KEYS = ("throughput_per_s", "latency_p50_s", "latency_p99_s", "idle_latency_s", "predicted",
            "outputs_match", "max_abs_diff", "substituted", "host")


@pytest.mark.slow
def test_run_host_mapping_end_to_end(capsys, host_mapping, tmp_path):
    doc = json.loads(host_mapping.read_text())
    _check_schema(doc, "squeezenet", "host")
    # the leading points' stages were timed as sub-models (the replicated model's whole range at least)
    timing = doc["search"]["stage_timing"]
    assert timing["rounds"] >= 1 and timing["points_timed"] >= 1 and timing["ranges"] >= 1
    db = tmp_path / "profile.sqlite"
    code, out, err = run_cli(capsys, "run", "squeezenet", "--mapping", host_mapping,
                             "--point", "best-throughput", "--frames", "20", "--json", "--db", db)
    assert code == 0, err
    rep = json.loads(out)
    for key in RUN_KEYS:
        assert key in rep, key
    assert rep["outputs_match"] is True
    assert 0.0 <= rep["max_abs_diff"] <= 1e-5
    assert rep["frames"] == 20
    assert rep["throughput_per_s"] > 0 and 0 < rep["latency_p50_s"] <= rep["latency_p99_s"]
    best = min((p for p in doc["points"] if p["strategy"] == "parapipe"),
               key=lambda p: (p["period_s"], p["latency_s"], p["energy_j"]))
    assert rep["point"] == best["id"]
    assert rep["predicted"]["throughput_per_s"] == pytest.approx(1 / best["period_s"])
    assert rep["predicted"]["latency_s"] == pytest.approx(best["latency_s"])
    assert rep["predicted"]["applies"] is True and rep["substituted"] == {}
    assert 0 < rep["idle_latency_s"] and rep["idle_frames"] == 10
    # the run is kept in the database's runs table, and 'parapipe runs' exports it
    code, out, err = run_cli(capsys, "runs", "--db", db, "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["point"] == best["id"] and row["model"] == "squeezenet" and row["soc"] == "host"
    assert row["throughput_per_s"] == pytest.approx(rep["throughput_per_s"])
    assert row["predicted_period_s"] == pytest.approx(best["period_s"]) and row["outputs_match"] is True
    assert len(row["pu_list"].split(",")) == len(doc["blocks"])


@pytest.mark.slow
def test_run_host_mapping_errors(capsys, tmp_path, monkeypatch, host_mapping):
    _run_fails(capsys, tmp_path, monkeypatch, ["squeezenet", "--mapping", host_mapping, "--point", "nope"],
               "--point", "'nope'")
    _run_fails(capsys, tmp_path, monkeypatch, ["resnet50", "--mapping", host_mapping], str(host_mapping),
               "model.sha256")
    _run_fails(capsys, tmp_path, monkeypatch, ["squeezenet", "--mapping", host_mapping, "--frames", "0"],
               "--frames")


@pytest.mark.slow
def test_run_replica_dispatch_shares_deals_frames_by_the_mapping_shares(capsys, host_mapping, tmp_path):
    # replicated-0 of the host mapping, its shares edited to 3:1: dealt by shares, 40 consecutive frames of the
    # smooth weighted round robin (period 4) give cpu0 exactly 30 and cpu1 10, which pulling on two equal
    # cores would not; the report says which policy ran
    from ppexec.metrics import trace_events_from_chrome

    doc = json.loads(host_mapping.read_text())
    (stage,) = next(p for p in doc["points"] if p["id"] == "replicated-0")["mapping"]["stages"]
    replicas = stage["replicas"]
    assert [r["pus"] for r in replicas] == [["cpu0"], ["cpu1"]]
    replicas[0]["share"], replicas[1]["share"] = 0.75, 0.25
    path = _write(tmp_path, doc)
    counts = {}
    for policy in ("shares", "pull"):
        trace = tmp_path / f"{policy}.json"
        code, out, err = run_cli(capsys, "run", "squeezenet", "--mapping", path, "--point", "replicated-0",
                                 "--frames", "40", "--json", "--db", "", "--trace", trace,
                                 "--replica-dispatch", policy)
        assert code == 0, err
        rep = json.loads(out)
        assert rep["dispatch"] == policy and rep["outputs_match"] is True
        events = trace_events_from_chrome(json.loads(trace.read_text()))
        assert sorted(e.frame for e in events) == list(range(40))
        counts[policy] = {pu: sum(e.pu == pu for e in events) for pu in ("cpu0", "cpu1")}
    assert counts["shares"] == {"cpu0": 30, "cpu1": 10}, counts
    assert sum(counts["pull"].values()) == 40
    # the table says how the replicas got their frames; a point without replicated stages records no policy
    code, out, err = run_cli(capsys, "run", "squeezenet", "--mapping", path, "--point", "replicated-0",
                             "--frames", "8", "--db", "", "--replica-dispatch", "shares")
    assert code == 0 and "replicated stages: dealt in the predicted shares (--replica-dispatch shares)" in out
    code, out, err = run_cli(capsys, "run", "squeezenet", "--mapping", path, "--point", "single-cpu0",
                             "--frames", "8", "--db", "", "--replica-dispatch", "shares", "--json")
    assert code == 0 and json.loads(out)["dispatch"] is None


def test_a_bad_option_value_is_one_line_naming_the_option(capsys, tmp_path, monkeypatch):
    # argparse's own errors (a non-integer count, an unknown command) are one line too, not the usage block
    monkeypatch.chdir(tmp_path)
    for argv, names in ((["run", "squeezenet", "--mapping", "m.json", "--frames", "ten"], ("--frames", "ten")),
                        (["optimize", "squeezenet", "--soc", "host", "--time-stages", "x"], ("--time-stages",)),
                        (["frobnicate"], ("frobnicate", "optimize")),
                        (["run", "squeezenet", "--mapping", "m.json", "--replica-dispatch", "random"],
                         ("--replica-dispatch", "random", "pull", "shares"))):
        capsys.readouterr()
        try:
            code = main(argv)  # parapipe's own input errors return 2
        except SystemExit as exc:  # argparse's exit
            code = exc.code
        out, err = capsys.readouterr()
        assert code == 2 and out == "", (argv, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("parapipe") and " error: " in lines[0], (argv, err)
        for name in names:
            assert name in lines[0], (name, lines[0])
    assert files_under(tmp_path) == []


def test_front_table_lists_each_mapping_once_and_explains_gap():
    from parapipe.cli.optimize import front_table
    from parapipe.mapping import ParetoDoc

    def pt(pid, strategy, pus):
        blocks = [["b0", "b1"]] if len(pus) == 1 else [["b0"], ["b1"]]
        return {"id": pid, "strategy": strategy, "pareto": True, "throughput_per_s": 10.0, "period_s": 0.1,
                "period_gap": 0.25, "latency_s": 0.2, "energy_j": 1.0,
                "mapping": {"stages": [{"pus": [p], "blocks": b, "time_s": 0.1} for p, b in zip(pus, blocks)]}}

    doc = ParetoDoc.model_validate({
        "model": {"name": "m", "sha256": "0" * 64},
        "soc": {"name": "toy", "pus": {"gpu": {"kind": "gpu"}, "big": {"kind": "cpu"}}},
        "blocks": {"b0": [], "b1": []},
        "points": [pt("p0", "parapipe", ["gpu", "big"]), pt("pipeline-0", "pipeline", ["gpu", "big"]),
                   pt("single-gpu", "single", ["gpu"]), pt("parallel-0", "parallel", ["gpu"])],
        "bounds": {"period_lb_s": 0.08, "latency_lb_s": 0.1},
        "search": {"search_s": 1.0, "exact": True, "bound": {"period_method": "relaxed-dp"}}})
    lines = front_table(doc).splitlines()
    assert lines[0].startswith("gap = period / period lower bound - 1 (bound 80.000 ms, relaxed-dp)")
    rows = [ln.split()[0] for ln in lines[2:-1]]
    assert rows == ["p0", "single-gpu"]
    assert lines[2].endswith("pipeline-0") and lines[3].endswith("parallel-0")
    assert "25%" in lines[2] and lines[-1].endswith("exact front")


def test_a_long_front_table_shows_the_extremes_a_spread_and_every_baseline():
    import numpy as np

    from types import SimpleNamespace

    from parapipe.cli.optimize import TABLE_PARETO_ROWS, omitted_line, shown_points

    rng = np.random.default_rng(3)
    front = [SimpleNamespace(id=f"p{i}", pareto=True, throughput_per_s=float(t), latency_s=float(lat),
                             energy_j=float(e))
             for i, (t, lat, e) in enumerate(zip(rng.uniform(1, 100, 40), rng.uniform(1, 9, 40),
                                                 rng.uniform(1, 9, 40)))]
    baselines = [SimpleNamespace(id=f"b{i}", pareto=False, throughput_per_s=1.0, latency_s=9.0, energy_j=9.0)
                 for i in range(3)]
    points = front[:20] + baselines + front[20:]
    shown, omitted, omitted_baselines = shown_points(points)
    listed = [p for p in shown if p.pareto]
    assert len(listed) == TABLE_PARETO_ROWS and omitted == 40 - TABLE_PARETO_ROWS
    assert all(b in shown for b in baselines)
    for best in (max(front, key=lambda p: p.throughput_per_s), min(front, key=lambda p: p.latency_s),
                 min(front, key=lambda p: p.energy_j)):
        assert best in shown
    assert [p.id for p in shown] == [p.id for p in points if p in shown]  # the document's order
    assert omitted_baselines == 0
    assert shown_points(points, show_all=True) == (points, 0, 0) and shown_points(front[:5]) == (front[:5], 0, 0)
    assert "28 more Pareto-optimal points" in omitted_line(omitted)[0] and omitted_line(0) == []
    # many baselines of one strategy: its best throughput, latency and energy are listed, the rest counted
    pipes = [SimpleNamespace(id=f"pipeline-{i}", strategy="pipeline", pareto=False, throughput_per_s=float(t),
                             latency_s=float(lat), energy_j=float(e))
             for i, (t, lat, e) in enumerate(zip(rng.uniform(1, 100, 10), rng.uniform(1, 9, 10),
                                                 rng.uniform(1, 9, 10)))]
    single = SimpleNamespace(id="single-cpu", strategy="single", pareto=False, throughput_per_s=1.0, latency_s=9.0,
                             energy_j=9.0)
    shown, omitted, omitted_baselines = shown_points(front[:5] + pipes + [single])
    best = {max(pipes, key=lambda p: p.throughput_per_s).id, min(pipes, key=lambda p: p.latency_s).id,
            min(pipes, key=lambda p: p.energy_j).id}
    assert {p.id for p in shown} == {p.id for p in front[:5]} | best | {"single-cpu"}
    assert omitted == 0 and omitted_baselines == 10 - len(best)
    assert f"{10 - len(best)} more baselines" in omitted_line(0, omitted_baselines)[0]


def test_a_thinned_front_table_keeps_a_baseline_with_its_twin_not_alone():
    """A baseline whose mapping a front point also has is named in that point's row, listed or not: never a
    row of its own that makes a baseline look Pareto-optimal beside parapipe."""
    from parapipe.cli.optimize import TABLE_PARETO_ROWS, front_table
    from parapipe.mapping import ParetoDoc

    n = 3 * TABLE_PARETO_ROWS
    blocks = {f"b{i}": [] for i in range(n)}

    def pt(pid, strategy, cut, thr):  # two stages, cut after block ``cut``: a distinct mapping per cut
        names = list(blocks)
        return {"id": pid, "strategy": strategy, "pareto": True, "throughput_per_s": thr, "period_s": 1 / thr,
                "latency_s": 0.1 + thr / 1e3, "energy_j": 1.0 / thr,
                "mapping": {"stages": [{"pus": ["gpu"], "blocks": names[:cut], "time_s": 0.01},
                                       {"pus": ["big"], "blocks": names[cut:], "time_s": 0.01}]}}

    front = [pt(f"p{c}", "parapipe", c, 10.0 + c) for c in range(1, n)]
    twins = [pt(f"pipeline-{c}", "pipeline", c, 10.0 + c) for c in range(1, n)]
    doc = ParetoDoc.model_validate({
        "model": {"name": "m", "sha256": "0" * 64},
        "soc": {"name": "toy", "pus": {"gpu": {"kind": "gpu"}, "big": {"kind": "cpu"}}},
        "blocks": blocks, "points": front + twins,
        "bounds": {"period_lb_s": 0.01, "latency_lb_s": 0.1}, "search": {"search_s": 1.0}})
    rows = [ln.split() for ln in front_table(doc).splitlines() if ln.startswith(("p", "pipeline-"))]
    assert len(rows) == TABLE_PARETO_ROWS
    for row in rows:
        assert row[0].startswith("p") and not row[0].startswith("pipeline"), row
        assert row[-1] == f"pipeline-{row[0][1:]}", row  # its twin named beside it
    assert len(front_table(doc, show_all=True).splitlines()) == len(front_table(doc).splitlines()) + n - 1 \
        - TABLE_PARETO_ROWS - 1


def test_executor_errors_are_one_line_and_other_errors_keep_their_traceback(monkeypatch, capsys):
    """An executor error (ppexec.errors) is one line, exit 2; any other exception is our bug and propagates
    as itself (not as an AttributeError of the check)."""
    import parapipe.cli.socs as socs_cli
    from ppexec.errors import PlanError

    def plan_error(args):
        raise PlanError("stage 1: bad\n  plan")

    monkeypatch.setattr(socs_cli, "handle", plan_error)
    assert main(["socs"]) == 2
    assert capsys.readouterr().err.strip() == "parapipe: error: stage 1: bad plan"

    def bug(args):
        raise RuntimeError("our bug")

    monkeypatch.setattr(socs_cli, "handle", bug)
    with pytest.raises(RuntimeError, match="our bug"):
        main(["socs"])


def test_inspect_blocks_marks_cut_names_and_op_lists(capsys):
    """``inspect --blocks``: a block name or op list longer than its 40-character column ends in an ellipsis."""
    code, out, _ = run_cli(capsys, "inspect", "squeezenet", "--max-blocks", "4", "--json")
    blocks = json.loads(out)["block_list"]
    code, out, _ = run_cli(capsys, "inspect", "squeezenet", "--max-blocks", "4", "--blocks")
    rows = out.splitlines()[-len(blocks):]
    cut = 0
    for block, row in zip(blocks, rows):
        for full, cell in ((block["name"], row[:40].rstrip()), ("+".join(block["ops"]), row[41:81].rstrip())):
            if len(full) <= 40:
                assert cell == full
            else:
                cut += 1
                assert len(cell) == 40 and cell == full[:39] + "…", (cell, full)
    assert cut >= 1  # the last block's op list at least


def test_runs_table_has_the_period_error_and_says_what_it_is(tmp_path, capsys):
    """``runs``: an ``err %`` column, (predicted - measured) / measured period, and a line defining it."""
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import RunRecord, append_run

    with ProfileDB(str(tmp_path / "db.sqlite")) as db:
        for point, predicted in (("p0", 0.011), ("p1", None)):
            append_run(db, RunRecord(
                recorded_at="2025-01-01T00:00:00+00:00", model="squeezenet", model_sha256="x", soc="host",
                soc_sha256="y", point=point, pu_list="cpu0", mapping=[], frames=100, throughput_per_s=100.0,
                period_s=0.010, latency_p50_s=0.02, latency_p99_s=0.03, idle_latency_s=0.02, pu_busy_s={},
                energy_j=None, predicted_period_s=predicted, predicted_latency_s=None, predicted_energy_j=None,
                prediction_applies=True, substituted={}, outputs_match=True, runner="local", board={}))
    code, out, err = run_cli(capsys, "runs", "--db", tmp_path / "db.sqlite")
    assert code == 0
    header, first, second = out.splitlines()
    column = header.split().index("err")
    assert header.split()[column + 1] == "%"
    assert first.split()[column] == "+10.0" and second.split()[column] == "-"  # 11 ms predicted, 10 measured
    assert "err %: relative error of the predicted period, (predicted - measured) / measured" in err


def test_ctrl_c_inside_an_extension_import_is_an_interrupt(monkeypatch, tmp_path, capsys):
    # pybind11 modules (OR-Tools' pywraplp, imported lazily mid-search) turn a Ctrl-C during their initialisation
    # into "ImportError: initialization failed" caused by the KeyboardInterrupt: an interrupt, not our bug
    def interrupted_import(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    parser_args = ["optimize", "squeezenet", "--soc", "amlogic_a311d", "--out", str(tmp_path / "out")]
    import parapipe.cli as cli

    real_build = cli.build_parser

    def build():
        parser = real_build()
        for action in parser._subparsers._group_actions:  # route 'optimize' to the stand-in
            action.choices["optimize"].set_defaults(func=interrupted_import)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    assert main(parser_args) == 130
    assert "interrupted" in capsys.readouterr().err

    # an ImportError of our own stays a traceback (our bug)
    def broken(args):
        raise ImportError("no module named x")

    def build_broken():
        parser = real_build()
        for action in parser._subparsers._group_actions:
            action.choices["optimize"].set_defaults(func=broken)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_broken)
    with pytest.raises(ImportError):
        main(parser_args)
