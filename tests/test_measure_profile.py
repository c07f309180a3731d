"""``parapipe profile`` on this machine: real agent, real ONNX Runtime, squeezenet, a real SQLite database."""
from __future__ import annotations

import math
import sqlite3

import pytest
import yaml

from parapipe.cli import main
from parapipe.errors import InputError
from parapipe.measure import plan
from parapipe.profiledb.catalog import Catalog, OpFeatures
from parapipe.profiledb.db import ProfileDB
from parapipe.app.profiling import load_graph, profile_job
from parapipe.measure.profile import ProfileOptions
from parapipe.measure.agent_timer import open_agent_timer

pytestmark = pytest.mark.slow

FAST = dict(pus=["cpu0"], warmup=1, repeats=3)
COUNT = "SELECT COUNT(*), MAX(measured_at) FROM measurements"


@pytest.fixture(scope="module")
def squeezenet():
    return load_graph("squeezenet")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """squeezenet on --soc host, core cpu0, into a fresh database: (report, db path)."""
    path = tmp_path_factory.mktemp("prof") / "profile.sqlite"
    report = profile_job("squeezenet", "host", path, options=ProfileOptions(**FAST, transfers=False))
    return report, path


def test_profile_fills_the_database(first_run, squeezenet):
    report, path = first_run
    _, og, bg = squeezenet
    signatures = {og.op(n).signature for n in og.topo_order}
    blocks = plan.distinct_blocks(og, bg)
    pairs = {e.signature for e in plan.pair_items(og, bg, host_soc_stub(), ["cpu0"], bg.blocks)[1]}
    validation = plan.stage_ranges(bg, (1, 2, 4))
    spans = {e.signature for e in plan.span_items(og, bg, host_soc_stub(), ["cpu0"], validation)[1]}
    assert len(spans) >= 5 and all(s.startswith("span:") for s in spans)
    assert report.signatures == len(signatures) == 38 and report.operators == 66
    assert len(pairs) >= len(blocks)  # consecutive pairs of squeezenet's 30 blocks, deduplicated
    assert report.measured == report.planned == len(signatures) + len(blocks) + len(pairs) + len(spans)
    assert not report.failed
    with ProfileDB(path) as db:
        rows = db.all("host")
        catalog = Catalog(db)
        catalog_ops, work = catalog.ops(), catalog.work()
    ops = [r for r in rows if r.kind == "op"]
    assert {r.signature for r in ops} == signatures
    assert {r.pu for r in rows} == {"cpu0"} and {r.host for r in rows} == {"local"}
    assert {r.signature for r in rows if r.kind == "block"} == set(blocks) | pairs | spans
    assert all(0 < r.median_s <= r.p90_s and r.repeats == 3 and r.batch == 1 for r in rows)
    conv = max((r for r in ops if r.op_type == "Conv"), key=lambda r: r.median_s)
    relu = min((r for r in ops if r.op_type == "Relu"), key=lambda r: r.median_s)
    assert conv.median_s > 5 * relu.median_s  # the 7x7 stem conv is real work, a tiny Relu is not
    assert set(catalog_ops) == signatures
    assert {s for s, e in work.items() if e.kind == "block"} == set(blocks)
    assert {s for s, e in work.items() if e.kind == "pair"} == pairs
    assert {s for s, e in work.items() if e.kind == "span"} == spans
    assert all(e.boundary_nbytes > 0 for e in work.values())
    fused = [f for e in work.values() for _, f in e.parts]
    assert any(fused) and not all(fused)  # Conv+Relu blocks: the Relu is fused away in a graph


def test_second_run_measures_nothing(first_run):
    report, path = first_run
    before = sqlite3.connect(str(path)).execute(COUNT).fetchone()
    again = profile_job("squeezenet", "host", path, options=ProfileOptions(**FAST, transfers=False))
    assert again.measured == 0 and again.skipped == again.planned == report.planned
    after = sqlite3.connect(str(path)).execute(COUNT).fetchone()
    assert after == before


def host_soc_stub():
    from parapipe.measure.local import local_soc

    return local_soc(n_cpus=1, transfer=(1e-5, 1e10))


class Stop(Exception):
    pass


def test_interrupted_profile_resumes(tmp_path):
    path = tmp_path / "p.sqlite"
    calls = []

    def progress(done, total):
        calls.append((done, total))
        if done == 12:
            raise Stop

    options = ProfileOptions(**FAST, blocks=False, transfers=False)
    with pytest.raises(Stop):
        profile_job("squeezenet", "host", path, options=options, progress=progress)
    with ProfileDB(path) as db:
        assert len(db) == 12  # every finished measurement was committed, nothing of the one in flight
    total = calls[0][1]
    rest = profile_job("squeezenet", "host", path, options=options)
    assert rest.skipped == 12 and rest.measured == total - 12 == 38 - 12
    with ProfileDB(path) as db:
        assert len(db) == 38


def test_budget_measures_a_tenth_and_reports_the_holdout_error(tmp_path):
    rep = profile_job("squeezenet", "host", tmp_path / "b.sqlite",
                      options=ProfileOptions(**FAST, budget=0.1, transfers=False))
    assert rep.selected_signatures == math.ceil(0.1 * 38) == 4
    assert rep.holdout_signatures == 3 and rep.holdout_measurements == 3
    assert rep.holdout_mape_percent is not None and 0 <= rep.holdout_mape_percent < 1e4
    with ProfileDB(tmp_path / "b.sqlite") as db:
        ops = [r for r in db.all() if r.kind == "op"]
        blocks = [r for r in db.all() if r.kind == "block"]
    single = [r for r in blocks if not r.signature.startswith("pair:")]
    assert len(ops) == 4 + 3 and len(single) == math.ceil(0.1 * 22)


def test_select_informative_spreads_over_classes():
    feats = ([OpFeatures(f"conv{i}", "Conv", "conv", 10.0 ** i, 100, 100, 100) for i in range(1, 9)]
             + [OpFeatures(f"relu{i}", "Relu", "elementwise", 10.0 * i, 100 * i, 100 * i,
                           0) for i in range(1, 5)]
             + [OpFeatures("cat", "Concat", "other", 0.0, 500, 500, 0)])
    picked = plan.select_informative(feats, 0.4)
    assert len(picked) == math.ceil(0.4 * 13)
    assert picked[:3] == ["conv5", "relu3", "cat"]  # the typical (median) one of each class, heaviest first
    assert picked[3:5] == ["conv8", "relu1"]  # then the farthest from it in log work (an extreme)
    assert plan.select_informative(feats, 1.0) == [f.signature for f in feats]
    with pytest.raises(ValueError):
        plan.select_informative(feats, 0.0)


def test_batch_two_is_profiled_at_batch_two(tmp_path):
    rep = profile_job("squeezenet", "host", tmp_path / "b2.sqlite", batch=2,
                      options=ProfileOptions(**FAST, budget=0.05, blocks=False, transfers=False))
    assert rep.batch == 2
    with ProfileDB(tmp_path / "b2.sqlite") as db:
        rows = db.all()
    assert rows and all(r.batch == 2 and "float32[2," in r.signature for r in rows)


def test_cli_profile_prints_a_summary(tmp_path, capsys):
    db = tmp_path / "cli.sqlite"
    rc = main(["profile", "squeezenet", "--soc", "host", "--db", str(db), "--pus", "cpu0", "--repeats", "2",
               "--warmup", "0", "--budget", "0.05", "--no-blocks"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "38 signatures" in out and "held-out" in out and "MAPE" in out


# ------------------------------------------------------------------------------------------------ bad input
def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("parapipe: error: "), err
    assert "Traceback" not in err[0]
    return err[0]


def test_corrupt_database_is_refused_and_left_alone(tmp_path, capsys):
    db = tmp_path / "corrupt.sqlite"
    data = b"SQLite format 3\x00" + bytes(range(256)) * 16
    db.write_bytes(data)
    rc = main(["profile", "squeezenet", "--soc", "host", "--db", str(db), "--pus", "cpu0"])
    assert rc == 2
    line = _error_line(capsys)
    assert str(db) in line and "--db" in line
    assert db.read_bytes() == data


@pytest.mark.parametrize("args, words", [
    (["--pus", "cpu9"], "unknown PU 'cpu9'"),
    (["--budget", "0"], "--budget"),
    (["--budget", "1.5"], "--budget"),
    (["--batch", "0"], "--batch"),
])
def test_bad_options_exit_2_without_a_database(tmp_path, capsys, args, words):
    db = tmp_path / "never.sqlite"
    rc = main(["profile", "squeezenet", "--soc", "host", "--db", str(db)] + args)
    assert rc == 2 and words in _error_line(capsys)
    assert not db.exists()


def _soc_yaml(tmp_path, execution: dict) -> str:
    """A one-PU profile whose PU runs as ``execution`` (built from the measured host profile)."""
    from parapipe.measure.local import local_soc
    from parapipe.soc.loader import soc_to_yaml_dict
    soc = local_soc(n_cpus=1, transfer=(1e-5, 1e10))
    pu = soc.pus["cpu0"]
    raw = soc_to_yaml_dict(soc)
    raw["pus"]["cpu0"]["execution"] = execution
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert pu.name == "cpu0"
    return str(path)


def test_missing_execution_provider_is_refused_before_measuring(tmp_path, capsys):
    soc = _soc_yaml(tmp_path, {"provider": "CUDAExecutionProvider", "threads": 1})
    db = tmp_path / "ep.sqlite"
    rc = main(["profile", "squeezenet", "--soc", soc, "--db", str(db)])
    assert rc == 2
    line = _error_line(capsys)
    assert "CUDAExecutionProvider" in line and "cpu0" in line and "install" in line
    assert not db.exists()


def test_cpus_the_host_lacks_are_refused(tmp_path, capsys):
    soc = _soc_yaml(tmp_path, {"cpus": [250], "threads": 1})
    rc = main(["profile", "squeezenet", "--soc", soc, "--db", str(tmp_path / "x.sqlite")])
    assert rc == 2 and "[250]" in _error_line(capsys)


def test_runner_check_pus_names_the_provider():
    from parapipe.soc.loader import load_soc

    soc = load_soc("amlogic_a311d")
    with open_agent_timer() as runner:
        with pytest.raises(InputError, match=r"PU gpu: runtime ncnn: device vulkan asked, but ncnn finds no Vulkan "
                           r"device.*--bind gpu=ncnn:cpu"):
            runner.check_pus(soc, ["gpu"])  # the Mali GPU runs ncnn's Vulkan device, which this machine lacks
        with pytest.raises(InputError, match=r"PU npu: needs execution provider VSINPUExecutionProvider"):
            runner.check_pus(soc, ["npu"])
        with pytest.raises(InputError):
            profile_job("squeezenet", "amlogic_a311d", "/nonexistent/x.sqlite",
                        options=ProfileOptions(pus=["nope"]))
