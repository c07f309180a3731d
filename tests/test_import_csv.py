"""``parapipe import``: long-format block measurements → block tables (round trip) and profile rows."""
from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from parapipe.cli import main
from parapipe.cost.blocktable import read_block_table
from parapipe.errors import InputError
from parapipe.profiledb.db import ProfileDB
from parapipe.profiledb.importer import read_long_csv, write_tables
from parapipe.soc.loader import load_soc

SOC = "amlogic_a311d"

LONG = """graph,pu,block,time_ms,power_mw,phase,deps,out_bytes
net,big,conv1,12.0,3000,task,,802816
net,big,conv1,1.0,,in,,
net,gpu,conv1,9.0,1200,,,
net,big,inc_a,2.0,3100,task,conv1,200704
net,gpu,inc_a,1.5,,task,conv1,
net,little,inc_b,4.0,900,task,conv1,100352
net,big,inc_b,2.5,,task,,
net,big,cat,0.25,,task,inc_a;inc_b,401408
net,gpu,cat,0.5,,out,inc_a;inc_b,
other,big,b0,1,,,,
other,big,b1,2,,,,
"""


@pytest.fixture(scope="module")
def soc():
    return load_soc(SOC)


def test_round_trip_through_the_block_table(tmp_path, soc):
    src = tmp_path / "long.csv"
    src.write_text(LONG)
    graphs = read_long_csv(src, soc)
    assert [g.name for g in graphs] == ["net", "other"]
    paths = write_tables(graphs, str(tmp_path / "tables"), str(src))
    assert [p.name for p in paths] == ["net.blocks.csv", "other.blocks.csv"]
    p = read_block_table(paths[0], soc)
    idx = {b: i for i, b in enumerate(p.block_names)}
    big, gpu, little = (p.pu_names.index(x) for x in ("big", "gpu", "little"))
    assert p.block_names == ["conv1", "inc_a", "inc_b", "cat"]
    assert p.time_s[idx["conv1"], big] == pytest.approx(0.013)  # task 12 ms + in 1 ms
    assert p.time_s[idx["conv1"], gpu] == pytest.approx(0.009)  # an empty phase is the task
    assert p.time_s[idx["cat"], gpu] == pytest.approx(0.0005)
    assert math.isinf(p.time_s[idx["inc_a"], little]) and math.isinf(p.time_s[idx["conv1"],
                                                                              p.pu_names.index("npu")])
    # power: time-weighted over the phases that give one (12 ms at 3 W, 1 ms without) -> 3 W; else defaults
    assert p.active_power_w[idx["conv1"], big] == pytest.approx(3.0)
    assert p.active_power_w[idx["inc_b"], little] == pytest.approx(0.9)
    assert p.active_power_w[idx["inc_b"], big] == pytest.approx(soc.pus["big"].active_power_w)
    assert p.preds[idx["cat"]] == (idx["inc_a"], idx["inc_b"]) and p.preds[idx["inc_a"]] == (idx["conv1"],)
    assert p.edge_nbytes[(idx["conv1"], idx["inc_a"])] == 802816
    assert p.edge_nbytes[(idx["inc_b"], idx["cat"])] == 100352
    apart = read_block_table(paths[1], soc)  # the file has a deps column and these rows give none: sources
    assert apart.block_names == ["b0", "b1"] and apart.preds == [(), ()]
    assert apart.time_s[0, big] == pytest.approx(0.001)


def test_cli_import_stores_rows_and_the_table_optimizes(tmp_path, capsys):
    src = tmp_path / "one.csv"
    src.write_text("graph,pu,block,time_s,power_w\ng,big,a,0.010,4\ng,gpu,a,0.008,\ng,big,b,0.004,\n"
                   "g,gpu,b,0.006,1.1\ng,little,c,0.003,\ng,big,c,0.002,\n")
    table = tmp_path / "g.csv"
    db = tmp_path / "p.sqlite"
    assert main(["import", str(src), "--soc", SOC, "--db", str(db), "--out", str(table)]) == 0
    assert "3 blocks" in capsys.readouterr().out
    with ProfileDB(db) as profile:
        rows = profile.all(SOC)
    assert len(rows) == 6 and {r.kind for r in rows} == {"block"}
    assert {r.signature for r in rows} == {"import:g/a", "import:g/b", "import:g/c"}
    assert [r.power_w for r in rows if r.signature == "import:g/a" and r.pu == "big"] == [4.0]
    rc = main(["optimize", "--blocks", str(table), "--soc", SOC, "--out", str(tmp_path / "o"), "--no-plot",
               "--time-limit", "2"])
    assert rc == 0 and (tmp_path / "o" / "pareto.json").is_file()
    chain = read_block_table(table, load_soc(SOC))  # no deps column: a chain in the order of first rows
    assert chain.block_names == ["a", "b", "c"] and chain.preds == [(), (0,), (1,)]


@pytest.mark.parametrize("text, words", [
    ("graph,pu,time_s\ng,big,1\n", "column 'block': missing"),
    ("graph,pu,block\ng,big,a\n", "exactly one of time_s and time_ms"),
    ("graph,pu,block,time_s,time_ms\ng,big,a,1,1\n", "exactly one of time_s and time_ms"),
    ("graph,pu,block,time_s,speed\ng,big,a,1,2\n", "column 'speed': unknown column"),
    ("graph,pu,block,time_s\ng,tpu,a,1\n", "row 2, column 'pu': SoC 'amlogic_a311d' has no PU 'tpu'"),
    ("graph,pu,block,time_s,phase\ng,big,a,1,prep\n", "unknown phase 'prep'"),
    ("graph,pu,block,time_s\ng,big,a,-1\n", "row 2, column 'time_s': must be a finite number >= 0"),
    ("graph,pu,block,time_s\ng,big,a,fast\n", "'fast' is not a number"),
    ("graph,pu,block,time_s\ng,big,a,1\ng,big,a,2\n", "duplicate measurement"),
    ("graph,pu,block,time_s,deps\ng,big,a,1,b\ng,big,b,1,a\n", "dependency cycle"),
    ("graph,pu,block,time_s,deps\ng,big,a,1,zz\n", "depends on 'zz'"),
    ("graph,pu,block,time_s,deps\ng,big,a,1,\ng,big,b,1,a\ng,gpu,b,1,c\ng,big,c,1,\n", "has deps"),
    ("graph,pu,block,time_s\n", "no rows"),
    ("graph,pu,block,time_s\ng,,a,1\n", "row 2, column 'pu': empty"),
])
def test_bad_csv_is_one_line_exit_2_and_the_database_unchanged(tmp_path, capsys, text, words):
    src = tmp_path / "bad.csv"
    src.write_text(text)
    db = tmp_path / "p.sqlite"
    ProfileDB(db).close()
    before = db.read_bytes()
    rc = main(["import", str(src), "--soc", SOC, "--db", str(db), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and words in err[0] and str(src) in err[0], err
    assert db.read_bytes() == before
    assert not (tmp_path / "t").exists()


def test_one_csv_path_for_two_graphs_is_refused(tmp_path, soc):
    src = tmp_path / "long.csv"
    src.write_text(LONG)
    with pytest.raises(InputError, match="holds 2 graphs"):
        write_tables(read_long_csv(src, soc), str(tmp_path / "x.csv"), str(src))


def test_host_soc_is_not_importable(tmp_path, capsys):
    src = tmp_path / "a.csv"
    src.write_text("graph,pu,block,time_s\ng,cpu0,a,1\n")
    assert main(["import", str(src), "--soc", "host"]) == 2
    assert "'host' is measured" in capsys.readouterr().err


def test_import_times_are_in_seconds_in_the_problem(tmp_path, soc):
    src = tmp_path / "s.csv"
    src.write_text("graph,pu,block,time_s\ng,npu,a,0.25\n")
    (graph,) = read_long_csv(src, soc)
    assert np.isfinite(graph.problem.time_s).sum() == 1
    assert graph.problem.time_s[0, soc.pu_names.index("npu")] == 0.25


def test_stage_level_times_travel_beside_the_block_table_and_set_the_stage_time(tmp_path, soc):
    from parapipe.cost.blocktable import submodel_table_path, write_block_table
    from parapipe.cost.evaluate import evaluate
    from parapipe.cost.mapping import mapping_from_pu_list

    src = tmp_path / "long.csv"
    src.write_text(LONG)
    path = write_tables(read_long_csv(src, soc), str(tmp_path / "tables"), str(src))[0]
    p = read_block_table(path, soc)
    big = p.pu_names.index("big")
    on_big = mapping_from_pu_list(p, [big] * 4)
    block_sum = evaluate(p, on_big).period_s
    assert block_sum == pytest.approx(0.013 + 0.002 + 0.0025 + 0.00025)
    # the whole range measured as one sub-model on big: 14 ms instead of the 17.75 ms block sum
    submodel_table_path(path).write_text("first,last,pu,time_s\nconv1,cat,big,0.014\n")
    q = read_block_table(path, soc)
    assert q.submodel_time_s == {(big, (0, 1, 2, 3)): 0.014}
    assert evaluate(q, on_big).period_s == pytest.approx(0.014)
    # written back with the table, and removed when the problem has none
    out = tmp_path / "again.blocks.csv"
    write_block_table(out, q)
    assert submodel_table_path(out).read_text().splitlines() == ["first,last,pu,time_s", "conv1,cat,big,0.014"]
    assert read_block_table(out, soc).submodel_time_s == {(big, (0, 1, 2, 3)): 0.014}
    write_block_table(out, p)
    assert not submodel_table_path(out).exists() and read_block_table(out, soc).submodel_time_s is None


@pytest.mark.parametrize("row, words", [
    ("conv1,nope,big,0.01", "column 'last': unknown block 'nope'"),
    ("cat,conv1,big,0.01", "block 'conv1' comes before 'cat'"),
    ("conv1,cat,dsp,0.01", "column 'pu': unknown PU 'dsp'"),
    ("conv1,cat,big,0", "must be a finite number of seconds > 0, got '0'"),
    ("conv1,cat,big,-1", "must be a finite number of seconds > 0, got '-1'"),
    ("conv1,cat,big,nan", "got 'nan'"),
    ("conv1,cat,big,fast", "got 'fast'"),
    ("conv1,cat,big,0.01,extra", "5 fields, the header has 4"),
    ("conv1,cat,big,0.01\nconv1,cat,big,0.02", "already on row 2"),
    ("conv1,cat,npu,0.01", "PU 'npu' cannot run block 'conv1'"),
])
def test_bad_range_table_is_one_line_naming_file_row_and_field(tmp_path, soc, row, words):
    from parapipe.cost.blocktable import submodel_table_path

    src = tmp_path / "long.csv"
    src.write_text(LONG)
    path = write_tables(read_long_csv(src, soc), str(tmp_path / "tables"), str(src))[0]
    ranges = submodel_table_path(path)
    ranges.write_text("first,last,pu,time_s\n" + row + "\n")
    with pytest.raises(InputError) as err:
        read_block_table(path, soc)
    msg = str(err.value)
    assert "\n" not in msg and str(ranges) in msg and ("row 2" in msg or "row 3" in msg) and words in msg


def test_empty_range_table_is_refused(tmp_path, soc):
    from parapipe.cost.blocktable import submodel_table_path

    src = tmp_path / "long.csv"
    src.write_text(LONG)
    path = write_tables(read_long_csv(src, soc), str(tmp_path / "tables"), str(src))[0]
    submodel_table_path(path).write_text("")
    with pytest.raises(InputError, match="no header"):
        read_block_table(path, soc)


def test_task_times_travel_in_the_range_table(tmp_path, soc, caplog):
    from parapipe.cost.blocktable import submodel_table_path, write_block_table

    src = tmp_path / "long.csv"
    src.write_text(LONG)
    path = write_tables(read_long_csv(src, soc), str(tmp_path / "tables"), str(src))[0]
    submodel_table_path(path).write_text("first,last,pu,time_s,blocks\nconv1,cat,big,0.014,\n"
                                         ",,gpu,0.002,inc_a;conv1\n,,big,0.003,inc_b;conv1\n")
    p = read_block_table(path, soc)
    big, gpu = p.pu_names.index("big"), p.pu_names.index("gpu")
    # one form: (PU, sorted block indices), a range being its blocks (conv1, inc_a, inc_b, cat are 0..3)
    assert p.submodel_time_s == {(big, (0, 1, 2, 3)): 0.014, (gpu, (0, 1)): 0.002, (big, (0, 2)): 0.003}
    out = tmp_path / "again.blocks.csv"
    write_block_table(out, p)
    q = read_block_table(out, soc)
    assert q.submodel_time_s == p.submodel_time_s
    # written back: contiguous blocks as a first,last range, the others as a blocks list
    assert submodel_table_path(out).read_text().splitlines() == [
        "first,last,pu,time_s,blocks", "conv1,inc_a,gpu,0.002,", "conv1,cat,big,0.014,", ",,big,0.003,conv1;inc_b"]
    # the same blocks on one PU listed twice are refused; once as a range and once listed (a table written when
    # ranges and tasks were kept apart) they are one sub-model: the earlier row's time stands
    submodel_table_path(path).write_text("first,last,pu,time_s,blocks\n,,gpu,0.002,conv1;inc_a\n"
                                         ",,gpu,0.003,inc_a;conv1\n")
    with pytest.raises(InputError, match="row 3: task conv1;inc_a on gpu is already on row 2"):
        read_block_table(path, soc)
    submodel_table_path(path).write_text("first,last,pu,time_s,blocks\nconv1,inc_a,gpu,0.002,\n"
                                         ",,gpu,0.003,inc_a;conv1\n")
    with caplog.at_level(logging.WARNING, logger="parapipe.cost.blocktable"):
        assert read_block_table(path, soc).submodel_time_s == {(gpu, (0, 1)): 0.002}
    assert "row(s) 3 give blocks already on an earlier row" in caplog.text
    submodel_table_path(path).write_text("first,last,pu,time_s,blocks\nconv1,,gpu,0.002,inc_a\n")
    with pytest.raises(InputError, match="row 2: gives both first/last and blocks"):
        read_block_table(path, soc)
    submodel_table_path(path).write_text("first,last,pu,time_s,blocks\n,,gpu,0.002,inc_a;zz\n")
    with pytest.raises(InputError, match="column 'blocks': unknown block 'zz'"):
        read_block_table(path, soc)
