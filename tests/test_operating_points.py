"""Operating points (DVFS) in profiles, the cost model and the mapping syntax.

The expected figures are computed here by hand from the stated models (power ∝ V²f above idle, compute time ∝ 1/f,
memory time constant, transition time per switch), independently of the code under test.
"""
import json

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping, StageMapping
from parapipe.cost.problem import MappingProblem, PUOperatingPoints
from parapipe.errors import InputError
from parapipe.mapping.index import parse_pu_list
from parapipe.soc.loader import load_soc, soc_from_yaml_dict, soc_to_yaml_dict

from dvfs_profiles import TINY_DVFS_PROFILE

TINY = TINY_DVFS_PROFILE


@pytest.fixture
def tiny_profile(tmp_path):
    path = tmp_path / "tiny_dvfs.yaml"
    path.write_text(TINY)
    return path


def test_profile_table_round_trips_and_is_checked(tiny_profile, tmp_path):
    soc = load_soc(str(tiny_profile))
    ops = soc.pus["big"].operating_points
    assert ops.frequency_hz == (1e9, 1.5e9, 2e9) and ops.transition_s == 1e-4
    assert soc.pus["little"].operating_points is None
    assert soc_from_yaml_dict(soc_to_yaml_dict(soc)).pus == soc.pus
    # V²f above idle: (0.7² · 1) / (1² · 2) = 0.245 at 1 GHz
    assert ops.dynamic_ratio(3.0, 0.2)[0] == pytest.approx(0.245)
    bad = TINY.replace("frequency_hz: [1.0e9, 1500000000, 2.0e9]", "frequency_hz: [1.0e9, 1500000000, 1.9e9]")
    (tmp_path / "bad.yaml").write_text(bad)
    with pytest.raises(InputError, match=r"pus\.big\.operating_points\.frequency_hz.*frequency_hz"):
        load_soc(str(tmp_path / "bad.yaml"))
    no_source = TINY.replace("      source: dt\n  little:", "  little:")
    (tmp_path / "no_source.yaml").write_text(no_source)
    with pytest.raises(InputError, match="operating_points.*provenance"):
        load_soc(str(tmp_path / "no_source.yaml"))


def _two_block_problem():
    """Two blocks on one PU with three points; times and powers written out by hand."""
    t = np.array([[0.010], [0.020]])
    table = PUOperatingPoints(frequency_hz=(1e9, 1.5e9, 2e9),
                              time_s=np.array([[0.020, 0.015, 0.010], [0.030, 0.025, 0.020]]),
                              active_power_w=np.array([[1.0, 2.0, 4.0], [1.5, 2.5, 4.0]]), transition_s=0.002)
    return MappingProblem(block_names=["a", "b"], preds=[(), (0,)], edge_nbytes={(0, 1): 0.0}, pu_names=["big"],
                          time_s=t, active_power_w=np.array([[4.0], [4.0]]), idle_power_w=np.array([0.5]),
                          static_power_w=1.0, alpha_s=np.zeros((1, 1)), beta_bytes_per_s=np.full((1, 1), np.inf),
                          operating_points=[table])


def test_evaluate_at_operating_points_and_switching():
    pr = _two_block_problem()
    one = evaluate(pr, Mapping((StageMapping(0, 2, (0,), (0, 0), ops=(0,)),)))
    assert one.period_s == pytest.approx(0.050) and one.latency_s == pytest.approx(0.050)
    # E = Σ t·(p − idle) + (idle + static)·P
    assert one.energy_j == pytest.approx(0.020 * 0.5 + 0.030 * 1.0 + 1.5 * 0.050)
    # two stages on the same PU at points 2 and 0: two switches per inference (there and back)
    two = evaluate(pr, Mapping((StageMapping(0, 1, (0,), (0,), ops=(2,)), StageMapping(1, 2, (0,), (0,), ops=(0,)))))
    assert two.period_s == pytest.approx(0.010 + 0.030 + 2 * 0.002)
    assert two.latency_s == pytest.approx(0.040)
    assert two.energy_j == pytest.approx(0.010 * 3.5 + 0.030 * 1.0 + 1.5 * two.period_s)
    # the same point twice: no switch; None means the highest point
    same = evaluate(pr, Mapping((StageMapping(0, 1, (0,), (0,), ops=(2,)), StageMapping(1, 2, (0,), (0,)))))
    assert same.period_s == pytest.approx(0.030)
    plain = evaluate(pr, Mapping((StageMapping(0, 2, (0,), (0, 0)),)))
    assert plain.period_s == pytest.approx(0.030)
    with pytest.raises(ValueError, match="operating point"):
        evaluate(pr, Mapping((StageMapping(0, 2, (0,), (0, 0), ops=(3,)),)))


def test_measured_submodel_scales_with_its_blocks():
    pr = _two_block_problem()
    pr.submodel_time_s = {(0, (0, 1)): 0.024}  # measured at the highest point: 0.8 × the block sum
    at_low = evaluate(pr, Mapping((StageMapping(0, 2, (0,), (0, 0), ops=(0,)),)))
    assert at_low.period_s == pytest.approx(0.024 * 0.050 / 0.030)


def test_mapping_syntax():
    pr = _two_block_problem()
    m = parse_pu_list(pr, "big@1000,big@1500")
    assert [(st.start, st.stop, st.ops) for st in m.stages] == [(0, 1, (0,)), (1, 2, (1,))]
    m = parse_pu_list(pr, "big@1000,big@1000")
    assert [(st.start, st.stop, st.ops) for st in m.stages] == [(0, 2, (0,))]
    m = parse_pu_list(pr, "[big@1500][big@1500]")
    assert [(st.start, st.stop, st.ops) for st in m.stages] == [(0, 1, (1,)), (1, 2, (1,))]
    m = parse_pu_list(pr, "big,big@2000")
    assert [(st.start, st.stop, st.ops) for st in m.stages] == [(0, 2, (2,))]
    with pytest.raises(InputError, match=r"no operating point at 1200 MHz; choose one of 1000, 1500, 2000 MHz"):
        parse_pu_list(pr, "big@1200,big")
    with pytest.raises(InputError, match="two operating points in one stage"):
        parse_pu_list(pr, "[big@1000,big@1500]")
    with pytest.raises(InputError, match="outside square brackets"):
        parse_pu_list(pr, "[big]big")


def test_cli_evaluate_with_frequencies_and_roofline_scaling(tiny_profile, capsys):
    """squeezenet (30 blocks) whole on big at 1 GHz instead of 2 GHz: compute and per-operator overhead take twice
    as long, memory-bound time does not, the power above idle falls by V²f; a bare PU runs at its highest point."""
    from parapipe.cli import main

    def run(mapping):
        capsys.readouterr()
        assert main(["evaluate", "squeezenet", "--soc", str(tiny_profile), "--mapping", mapping, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    n = 30
    fast, bare = run(",".join(["big@2000"] * n)), run(",".join(["big"] * n))
    slow = run(",".join(["big@1000"] * n))
    assert fast == {**bare, "mapping": fast["mapping"]}
    ratio = slow["period_s"] / fast["period_s"]
    assert 1.0 < ratio <= 2.0 + 1e-9
    assert slow["energy_j"] < fast["energy_j"]


def test_block_times_measured_at_an_operating_point_replace_the_scaled_ones(tiny_profile, tmp_path):
    """A block measured whole at 1 GHz (as ``profile --frequencies`` stores it) takes that time at big@1000; the
    other blocks keep the roofline-scaled time."""
    from parapipe.app.prepare import prepare
    from parapipe.calibration.predict import block_times_at_frequencies
    from parapipe.profiledb.catalog import block_signature
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.records import Measurement

    plain = prepare("squeezenet", str(tiny_profile)).problem
    prep = prepare("squeezenet", str(tiny_profile))
    block = prep.block_graph.blocks[3]
    db_path = tmp_path / "profile.sqlite"
    row = Measurement("tiny_dvfs", "big", block_signature(prep.opgraph, block), "Conv", 1, "1.0", 0.5, 0.6, 5,
                      "2026-01-01T00:00:00Z", "board", "block", 0, None, 1.0e9)
    with ProfileDB(db_path) as db:
        db.put([row])
    same = [i for i, b in enumerate(prep.block_graph.blocks)  # blocks computing the same (equal signatures)
            if block_signature(prep.opgraph, b) == row.signature]
    assert 3 in same and len(same) < prep.problem.n_blocks
    assert block_times_at_frequencies(prep.block_graph, prep.soc, db_path) == {
        (prep.block_graph.blocks[i].name, "big", 1.0e9): 0.5 for i in same}
    problem = prepare("squeezenet", str(tiny_profile), db=str(db_path)).problem
    big = problem.pu_names.index("big")
    table, plain_table = problem.operating_points[big], plain.operating_points[big]
    assert (table.time_s[same, 0] == 0.5).all() and (plain_table.time_s[same, 0] != 0.5).all()
    others = [i for i in range(problem.n_blocks) if i not in same]
    assert np.isfinite(table.time_s[others, 0]).all() and (table.time_s[others, 0] > table.time_s[others, -1]).all()


def test_calibrate_fits_how_times_scale_with_frequency(tiny_profile, tmp_path, capsys):
    """Blocks measured at 2, 1.5 and 1 GHz with 30 % of their time memory bound (times written by the test from
    that truth): calibrate recovers the share, prints before / after / leave-one-out, writes it into the profile,
    and a block not measured at a point then scales with it."""
    import yaml

    from parapipe.cli import main
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.records import Measurement

    mu, t_max = 0.3, {"block:a": 0.010, "block:b": 0.004, "block:c": 0.020, "block:d": 0.0015}
    rows = []
    for sig, t in t_max.items():
        for f in (None, 1.5e9, 1.0e9):  # None: the board's own settings (the highest point)
            at = t if f is None else t * ((1 - mu) * 2.0e9 / f + mu)
            rows.append(Measurement("tiny_dvfs", "big", sig, "Conv", 1, "1.0", at, at * 1.05, 5,
                                    "2026-01-01T00:00:00Z", "board", "block", 0, None, f))
    db_path = tmp_path / "board.sqlite"
    with ProfileDB(db_path) as db:
        db.put(rows)
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", "--soc", str(tiny_profile), "--db", str(db_path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("frequency scaling big"))
    assert "memory-bound share 0.300" in line and "after 0.0%" in line and "leave-one-out 0.0%" in line
    assert "before 0.0%" not in line  # time ∝ 1/f misses the memory-bound share
    table = yaml.safe_load(out.read_text())["pus"]["big"]["operating_points"]
    assert table["memory_bound_fraction"]["value"] == pytest.approx(0.3)
    from parapipe.app.prepare import prepare

    problem = prepare("squeezenet", str(out)).problem
    big = problem.pu_names.index("big")
    ops = problem.operating_points[big]
    np.testing.assert_allclose(ops.time_s[:, 0], problem.time_s[:, big] * ((1 - 0.3) * 2.0 + 0.3))
