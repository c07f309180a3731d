"""Calibration: the fit recovers known parameters; on real squeezenet measurements it beats the uncalibrated
profile, reports stage MAPE, writes a loadable profile; ``optimize --db`` uses the measurements."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from parapipe.cli import main
from parapipe.cost.roofline import block_time_s
from parapipe.calibration.calibrate import (PUParams, Sample, fit_boundary, fit_cache, fit_pu, fit_transfer,
                                          op_time, predict)
from parapipe.calibration.calibrated import CALIBRATION_SOURCE, Calibration, calibrated_soc
from parapipe.profiledb.catalog import OpFeatures
from parapipe.profiledb.db import ProfileDB
from parapipe.profiledb.catalog import block_signature
from parapipe.measure.local import local_soc
from parapipe.app.profiling import profile_job
from parapipe.measure.profile import ProfileOptions
from parapipe.soc.loader import load_soc, save_soc
from parapipe.soc.profile import PU

TRUE = PUParams({"conv": 0.4, "gemm": 0.7, "depthwise": 0.1, "pool": 0.05, "elementwise": 0.02,
                 "normalization": 0.03, "other": 0.01}, 5e-6, 1e10)


def _pu(**kw) -> PU:
    values = dict(name="c", kind="cpu", cores=1, frequency_hz=1e9, peak_flops=1e11, precision="fp32",
                  memory_bandwidth_bytes_per_s=5e10, efficiency={"other": 1.0}, op_overhead_s=1e-6,
                  active_power_w=1.0, idle_power_w=0.5)
    values.update(kw)
    return PU(**values)


def _synthetic_ops(seed: int = 1):
    rng = np.random.default_rng(seed)
    ops = []
    for cls, op_type in [("conv", "Conv"), ("gemm", "Gemm"), ("pool", "MaxPool"), ("elementwise", "Relu"),
                         ("other", "Concat")]:
        for i in range(12):
            flops = 0.0 if cls == "other" else 10 ** rng.uniform(4, 9)
            nbytes = int(10 ** rng.uniform(3, 7))
            ops.append(OpFeatures(f"{cls}{i}", op_type, cls, flops, nbytes, nbytes, 0))
    return ops, rng


def test_fit_recovers_known_parameters_from_noisy_operators():
    pu = _pu()
    ops, rng = _synthetic_ops()
    samples = [Sample(((op, False),), op_time(op, pu, TRUE) * math.exp(rng.normal(0, 0.03))) for op in ops]
    fit = fit_pu(samples, pu)
    for cls in ("conv", "gemm", "pool", "elementwise"):
        assert fit.efficiency[cls] == pytest.approx(TRUE.efficiency[cls], rel=0.1), cls
    assert fit.op_overhead_s == pytest.approx(5e-6, rel=0.15)
    assert fit.memory_bandwidth_bytes_per_s == pytest.approx(1e10, rel=0.1)
    assert fit.efficiency["depthwise"] == 1.0 and "efficiency.depthwise" not in fit.fitted  # not exercised
    assert fit.samples == len(ops)


def test_fit_is_robust_to_a_few_disturbed_measurements():
    pu = _pu()
    ops, rng = _synthetic_ops(2)
    samples = [Sample(((op, False),), op_time(op, pu, TRUE) * (3.0 if i % 10 == 0 else 1.0))
               for i, op in enumerate(ops)]
    fit = fit_pu(samples, pu)
    assert fit.efficiency["conv"] == pytest.approx(0.4, rel=0.1)


def test_in_graph_fit_ignores_fused_operators():
    pu = _pu()
    conv = OpFeatures("conv", "Conv", "conv", 1e8, 1000, 1000, 1000)
    relu = OpFeatures("relu", "Relu", "elementwise", 1e5, 10**6, 10**6, 0)
    params = PUParams({**TRUE.efficiency}, 2e-6, 1e10)
    block = ((conv, False), (relu, True))
    assert predict(block, pu, params, in_graph=True) == pytest.approx(op_time(conv, pu, params))
    assert predict(block, pu, params, in_graph=False) > predict(block, pu, params, in_graph=True)
    assert predict(((relu, True),), pu, params, in_graph=True) == pytest.approx(2e-6)  # one dispatch at least


def test_boundary_fit_from_pairs_with_an_outlier():
    saved_nbytes = [1e5, 3e5, 1e6, 2e6, 4e6, 8e6]
    saved_s = [4e-6 + n / 1e10 for n in saved_nbytes]
    saved_s[2] *= 5  # one disturbed pair
    run, bandwidth = fit_boundary(saved_s, saved_nbytes)
    assert run == pytest.approx(4e-6, rel=0.1) and bandwidth == pytest.approx(1e10, rel=0.05)
    assert fit_boundary([1e-5, 2e-5], [1e5, 2e5]) is None  # too few pairs
    run, bandwidth = fit_boundary([5e-6] * 4, [1e5, 2e5, 3e5, 4e5])  # bytes cost nothing measurable
    assert run == pytest.approx(5e-6) and bandwidth == math.inf


def test_cache_term_only_when_it_explains_the_spans():
    weights = [[4e6] * 12, [4e6] * 6, [4e6] * 3, [1e6] * 8, [2e6] * 5]
    base = [0.012, 0.006, 0.003, 0.004, 0.005]
    slow = [b + (sum(w) / 5e9 if sum(w) > 2**24 else 0.0) for b, w in zip(base, weights)]
    size, bandwidth = fit_cache(slow, base, weights)
    assert size == 2**24 and bandwidth == pytest.approx(5e9, rel=1e-6)
    assert fit_cache(base, base, weights) is None  # spans as fast as their blocks: no cache term
    params = PUParams(dict(TRUE.efficiency), 1e-6, 1e10, cache_nbytes=2**24, cold_bandwidth_bytes_per_s=5e9)
    assert params.cache_s([4e6] * 3) == 0.0 and params.cache_s([4e6] * 6) == pytest.approx(24e6 / 5e9)
    assert params.cache_s([4e6, 3e7]) == pytest.approx(4e6 / 5e9)  # a block too big for the cache alone


def test_transfer_fit():
    sizes = [1024, 65536, 2**20, 2**22]
    fit = fit_transfer(sizes, [3e-5 + n / 5e9 for n in sizes], 1e10)
    assert fit.alpha_s == pytest.approx(3e-5, rel=1e-6) and fit.beta_bytes_per_s == pytest.approx(5e9,
                                                                                                  rel=1e-6)
    flat = fit_transfer(sizes, [3e-5] * 4, 1e10)  # larger is not slower: the fallback bandwidth
    assert flat.beta_bytes_per_s == 1e10 and flat.alpha_s == pytest.approx(3e-5 - 1024 / 1e10)


def test_transfer_fit_leaves_out_times_below_the_clock_resolution(caplog):
    """A median hand-off time of 0 (a busy machine's clock ticks, or a hand-off faster than its resolution) or a
    failed one (nan) once made the least-squares fit raise LinAlgError: it is left out, with a warning."""
    sizes = [1024, 65536, 2**20, 2**22]
    times = [0.0] + [3e-5 + n / 5e9 for n in sizes[1:-1]] + [float("nan")]
    with caplog.at_level("WARNING"):
        fit = fit_transfer(sizes, times, 1e10)
    assert fit.alpha_s == pytest.approx(3e-5, rel=1e-6) and fit.beta_bytes_per_s == pytest.approx(5e9, rel=1e-6)
    assert "2 of 4 hand-off times are zero or not finite" in caplog.text
    none = fit_transfer(sizes, [0.0] * 4, 1e10)
    assert none.alpha_s == 0.0 and none.beta_bytes_per_s == 1e10


def test_calibrated_soc_keeps_predictions_when_efficiency_exceeds_one(tmp_path):
    soc = local_soc(transfer=(1e-5, 1e10))
    pu = soc.pus["cpu0"]
    fast = PUParams({**{c: 1.0 for c in pu.efficiency}, "conv": 2.0, "pool": 0.3}, 3e-6, 2e10, samples=10,
                    fitted=("efficiency.conv", "efficiency.pool", "op_overhead_s",
                            "memory_bandwidth_bytes_per_s"))
    same = {n: PUParams.of(p) for n, p in soc.pus.items()}
    cal = Calibration(soc, {**same, "cpu0": fast}, {**same, "cpu0": fast}, {})
    new = calibrated_soc(cal, "test")
    out = new.pus["cpu0"]
    assert out.peak_flops == pytest.approx(2 * pu.peak_flops) and max(out.efficiency.values()) == 1.0
    conv = OpFeatures("c", "Conv", "conv", 1e9, 10, 10, 10)
    pool = OpFeatures("p", "MaxPool", "pool", 1e7, 10, 10, 0)
    for op in (conv, pool):
        assert op_time(op, out, PUParams.of(out)) == pytest.approx(op_time(op, pu, fast))
    assert new.pus["cpu1"] == soc.pus["cpu1"]  # no samples: untouched
    path = save_soc(new, tmp_path / "cal.yaml")
    again = load_soc(str(path))
    assert again.pus["cpu0"].op_overhead_s == pytest.approx(3e-6)
    assert yaml.safe_load(path.read_text())["pus"]["cpu0"]["op_overhead_s"]["source"] == CALIBRATION_SOURCE


# ------------------------------------------------------------------------------------------ real measurements
@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """squeezenet profiled on core cpu0 (operators, blocks), then calibrated with stages timed."""
    folder = tmp_path_factory.mktemp("cal")
    db = folder / "profile.sqlite"
    profile_job("squeezenet", "host", db, options=ProfileOptions(pus=["cpu0"], warmup=2, repeats=5,
                                                                 transfers=False))
    return folder, db


@pytest.mark.slow
def test_calibrate_reports_operator_and_stage_mape(measured, capsys):
    folder, db = measured
    out = folder / "calibrated.yaml"
    rc = main(["calibrate", "--soc", "host", "--db", str(db), "--model", "squeezenet", "--pus", "cpu0",
               "--splits", "1,2", "--repeats", "5", "--out", str(out), "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    cpu0 = next(p for p in report["pus"] if p["pu"] == "cpu0")
    assert report["stages_measured"] == 3 and cpu0["stages"] == 3
    assert cpu0["ops"] == 38 and cpu0["blocks"] > 22  # the 22 blocks and the pairs of consecutive blocks
    for key in ("stage_mape_model", "stage_mape_measured", "stage_mape_prior", "op_mape_calibrated"):
        assert report[key] is not None and 0 <= report[key] < 1e4, key
    assert cpu0["op_mape_calibrated"] < cpu0["op_mape_prior"]  # fitting beats the uncalibrated roofline
    soc = load_soc(str(out))
    assert soc.name == "host" and soc.provenance["pus.cpu0.op_overhead_s"].source == CALIBRATION_SOURCE
    again = main(["calibrate", "--soc", "host", "--db", str(db), "--model", "squeezenet", "--pus", "cpu0",
                  "--splits", "1,2", "--json"])
    assert again == 0 and json.loads(capsys.readouterr().out)["stages_measured"] == 0  # resumable: all there


@pytest.mark.slow
def test_optimize_db_uses_measurements_and_the_calibrated_model(measured, tmp_path):
    from parapipe.app.prepare import prepare

    folder, db = measured
    soc_path = tmp_path / "host.yaml"
    save_soc(local_soc(transfer=(3e-5, 1e10)), soc_path)  # a saved host profile: rows of soc 'host' apply
    plain = prepare("squeezenet", str(soc_path))
    prep = prepare("squeezenet", str(soc_path), db=str(db))
    cpu0, cpu1 = prep.problem.pu_names.index("cpu0"), prep.problem.pu_names.index("cpu1")
    og = prep.opgraph
    graph_io = set(og.inputs) | set(og.outputs)
    measured_total = 0.0
    with ProfileDB(db) as profile:
        for i, block in enumerate(prep.block_graph.blocks):
            row = profile.get("host", "cpu0", block_signature(og, block), kind="block")
            assert row is not None
            measured_total += row.median_s
            touches_io = any(t in graph_io for n in block.ops for t in og.op(n).inputs + og.op(n).outputs)
            if not touches_io:  # its measurement less the session boundary it paid when timed alone
                assert 0.1 * row.median_s <= prep.problem.time_s[i, cpu0] < row.median_s
    # a whole-model stage pays one boundary, not one per block
    assert prep.problem.time_s[:, cpu0].sum() < measured_total
    assert prep.soc.transfer("cpu0", "cpu1") != plain.soc.transfer("cpu0", "cpu1")  # boundary in the hand-off
    # cpu1 has no measurement: the profile's own roofline, as without --db
    assert np.allclose(prep.problem.time_s[:, cpu1], plain.problem.time_s[:, cpu1])
    assert not np.allclose(prep.problem.time_s[:, cpu0], plain.problem.time_s[:, cpu0])
    for i, block in enumerate(prep.block_graph.blocks):
        assert plain.problem.time_s[i, cpu1] == pytest.approx(block_time_s(block, prep.opgraph,
                                                                           plain.soc.pus["cpu1"]))
    assert main(["optimize", "squeezenet", "--soc", str(soc_path), "--db", str(db), "--out",
                 str(tmp_path / "o"),
                 "--no-plot", "--time-limit", "2"]) == 0


def test_calibrate_bad_inputs(tmp_path, capsys):
    missing = tmp_path / "missing.sqlite"
    assert main(["calibrate", "--soc", "amlogic_a311d", "--db", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err and not missing.exists()
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"not a database at all" * 10)
    before = corrupt.read_bytes()
    assert main(["calibrate", "--soc", "amlogic_a311d", "--db", str(corrupt)]) == 2
    assert "not a parapipe profile database" in capsys.readouterr().err and corrupt.read_bytes() == before
    assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--db", str(missing), "--no-plot",
                 "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    ProfileDB(tmp_path / "empty.sqlite").close()
    assert main(["calibrate", "--soc", "amlogic_a311d", "--db", str(tmp_path / "empty.sqlite"), "--out",
                 str(tmp_path / "x.json")]) == 2
    assert ".yaml" in capsys.readouterr().err


def test_calibrate_on_an_empty_database_keeps_the_profile(tmp_path, capsys):
    db = tmp_path / "empty.sqlite"
    ProfileDB(db).close()
    before = db.read_bytes()
    out = tmp_path / "same.yaml"
    assert main(["calibrate", "--soc", "amlogic_a311d", "--db", str(db), "--out", str(out)]) == 0
    assert db.read_bytes() == before  # reading never writes (no catalog tables created)
    assert load_soc(str(out)).pus == load_soc("amlogic_a311d").pus
