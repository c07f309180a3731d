"""The SQLite profile database and its measurement records."""
from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parapipe.errors import InputError
from parapipe.profiledb.db import SCHEMA_VERSION, ProfileDB
from parapipe.profiledb.records import Measurement, utc_now_iso


def make(signature: str = "conv:1x3x32x32", **overrides) -> Measurement:
    fields = dict(soc="a311d", pu="big", signature=signature, op_type="Conv", batch=1, ort_version="1.19.2",
                  median_s=0.010, p90_s=0.012, repeats=10, measured_at="2025-01-31T12:00:00+00:00",
                  host="root@127.0.0.1:22", kind="op", nbytes=12288, power_w=None)
    fields.update(overrides)
    return Measurement(**fields)


@pytest.fixture
def db(tmp_path):
    with ProfileDB(tmp_path / "sub" / "profile.sqlite") as database:
        yield database


def test_put_get_round_trip_keeps_every_field(db):
    record = make(power_w=3.25, nbytes=4096, batch=4)
    assert db.put([record]) == 1
    assert db.get("a311d", "big", "conv:1x3x32x32", batch=4) == record
    assert db.get("a311d", "big", "conv:1x3x32x32") is None  # batch 1 was not measured
    assert db.get("a311d", "LITTLE", "conv:1x3x32x32", batch=4) is None


def test_a_new_file_gets_the_schema_version_and_unique_key(tmp_path):
    path = tmp_path / "profile.sqlite"
    ProfileDB(path).close()
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    row = dataclasses.astuple(make())[:-1] + (0.0,)  # frequency_hz 0: the board's own settings
    columns = ", ".join(Measurement.field_names())
    marks = ", ".join("?" for _ in row)
    conn.execute(f"INSERT INTO measurements ({columns}) VALUES ({marks})", row)
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        conn.execute(f"INSERT INTO measurements ({columns}) VALUES ({marks})", row)
    conn.close()


def test_same_key_is_replaced_other_keys_are_kept(db):
    db.put([make(median_s=0.010, p90_s=0.011), make(kind="block"), make(batch=2)])
    db.put([make(median_s=0.020, p90_s=0.021, measured_at="2025-02-01T00:00:00+00:00")])
    assert len(db) == 3
    assert db.get("a311d", "big", "conv:1x3x32x32").median_s == 0.020
    assert db.get("a311d", "big", "conv:1x3x32x32", kind="block").median_s == 0.010
    assert db.has("a311d", "big", "conv:1x3x32x32", batch=2)
    assert not db.has("a311d", "big", "conv:1x3x32x32", kind="stage")


def test_ort_versions_are_kept_apart_and_the_newest_wins_without_one(db):
    db.put([make(ort_version="1.19.2", median_s=0.030, p90_s=0.031, measured_at="2025-03-01T00:00:00Z"),
            make(ort_version="1.23.2", median_s=0.020, p90_s=0.021, measured_at="2025-01-01T00:00:00Z")])
    assert len(db) == 2
    assert db.get("a311d", "big", "conv:1x3x32x32").ort_version == "1.19.2"  # measured last
    assert db.get("a311d", "big", "conv:1x3x32x32", ort_version="1.23.2").median_s == 0.020
    assert not db.has("a311d", "big", "conv:1x3x32x32", ort_version="1.17.0")


def test_all_filters_by_soc_and_sorts(db):
    db.put([make("b", pu="gpu"), make("a", pu="gpu"), make("a", soc="orin", pu="dla0"), make("a", pu="big")])
    assert [(m.soc, m.pu, m.signature) for m in db.all()] == [
        ("a311d", "big", "a"), ("a311d", "gpu", "a"), ("a311d", "gpu", "b"), ("orin", "dla0", "a")]
    assert [m.pu for m in db.all(soc="orin")] == ["dla0"]
    assert db.all(soc="nope") == []


def test_a_batch_is_written_whole_or_not_at_all(db):
    db.put([make("kept")])
    # Bypass the record's validation to make the database itself reject the third row (CHECK on kind).
    broken = make("third")
    object.__setattr__(broken, "kind", "bogus")
    with pytest.raises(InputError, match="cannot write"):
        db.put([make("first"), make("second"), broken])
    assert [m.signature for m in db.all()] == ["kept"]
    with pytest.raises(TypeError, match="Measurement"):
        db.put([make("fourth"), ("not", "a", "record")])
    assert len(db) == 1


def test_a_killed_run_keeps_finished_batches_and_resumes(tmp_path):
    path = tmp_path / "profile.sqlite"
    child = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_profiledb import make
        from parapipe.profiledb.db import ProfileDB, _UPSERT, _COLUMNS
        db = ProfileDB({str(path)!r})
        db.put([make("op0"), make("op1")])            # batch 1: committed
        rows = [tuple(getattr(make(s), c) for c in _COLUMNS[:-1]) + (0.0,) for s in ("op2", "op3")]  # frequency_hz
        with db.transaction() as conn:                # batch 2: killed half-way through its transaction
            conn.executemany(_UPSERT, rows)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = subprocess.run([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == -9, result.stdout.decode()
    with ProfileDB(path) as db:
        assert [m.signature for m in db.all()] == ["op0", "op1"]
        todo = [s for s in ("op0", "op1", "op2", "op3") if not db.has("a311d", "big", s)]
        assert todo == ["op2", "op3"]  # a rerun measures only what is missing
        db.put([make(s) for s in todo])
        assert len(db) == 4


def _assert_refused_unchanged(path: Path, why: str):
    before = path.read_bytes()
    with pytest.raises(InputError) as info:
        ProfileDB(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a parapipe profile database (")
    assert why in message
    assert message.endswith("; move it away or pass another --db")
    assert "\n" not in message
    assert path.read_bytes() == before


def test_a_text_file_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("profile results: conv 10 ms\n")
    _assert_refused_unchanged(path, "no SQLite header")


def test_a_corrupt_sqlite_file_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "profile.sqlite"
    with ProfileDB(path) as db:
        db.put([make(f"op{i}:" + "x" * 200) for i in range(400)])  # several pages
    data = bytearray(path.read_bytes())
    data[100:len(data) // 2] = b"\x5a" * (len(data) // 2 - 100)  # keep the header, smash the pages
    path.write_bytes(bytes(data))
    _assert_refused_unchanged(path, "malformed")


def test_another_programs_sqlite_file_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(str(path))
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.commit()
    conn.close()
    _assert_refused_unchanged(path, "songs")


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "profile.sqlite"
    ProfileDB(path).close()
    conn = sqlite3.connect(str(path))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="newer parapipe.*upgrade parapipe or pass another --db"):
        ProfileDB(path)


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(InputError, match="it is a folder"):
        ProfileDB(tmp_path)


@pytest.mark.parametrize("field, value, words", [
    ("kind", "layer", "kind"),
    ("batch", 0, "batch"),
    ("repeats", 2.5, "repeats"),
    ("median_s", float("nan"), "median_s"),
    ("median_s", -1.0, "median_s"),
    ("p90_s", 0.001, "p90_s"),
    ("nbytes", -1, "nbytes"),
    ("power_w", float("inf"), "power_w"),
    ("measured_at", "2025-01-31T12:00:00+02:00", "UTC"),
    ("measured_at", "yesterday", "measured_at"),
    ("signature", "", "signature"),
])
def test_measurement_validation(field, value, words):
    with pytest.raises(InputError, match=words) as info:
        make(**{field: value})
    assert str(info.value).startswith(f"measurement: {field}: ")


def test_utc_now_is_accepted():
    assert make(measured_at=utc_now_iso()).measured_at.endswith("+00:00")


#: The layout parapipe wrote before schema 2 (version 1): measurements made by ProfileDB; the catalog tables
#: (work_catalog without boundary_nbytes in the first releases) and runs made on first use by their modules.
_V1_MEASUREMENTS = """CREATE TABLE measurements (
    id INTEGER PRIMARY KEY, soc TEXT NOT NULL, pu TEXT NOT NULL, signature TEXT NOT NULL, op_type TEXT NOT NULL,
    batch INTEGER NOT NULL CHECK (batch >= 1), ort_version TEXT NOT NULL,
    median_s REAL NOT NULL CHECK (median_s >= 0), p90_s REAL NOT NULL CHECK (p90_s >= median_s),
    repeats INTEGER NOT NULL CHECK (repeats >= 1), measured_at TEXT NOT NULL, host TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('op', 'block', 'stage', 'transfer')),
    nbytes INTEGER NOT NULL CHECK (nbytes >= 0), power_w REAL,
    UNIQUE (soc, pu, signature, batch, ort_version, kind))"""
_V1_OP_CATALOG = """CREATE TABLE op_catalog (signature TEXT PRIMARY KEY, op_type TEXT NOT NULL,
    op_class TEXT NOT NULL, flops REAL NOT NULL, in_nbytes INTEGER NOT NULL, out_nbytes INTEGER NOT NULL,
    param_nbytes INTEGER NOT NULL)"""
_V1_WORK_CATALOG_OLDEST = """CREATE TABLE work_catalog (signature TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('block', 'pair', 'span', 'stage')), parts TEXT NOT NULL,
    label TEXT NOT NULL)"""


def _v1_file(path, catalog: bool):
    conn = sqlite3.connect(str(path))
    conn.execute(_V1_MEASUREMENTS)
    v1 = [c for c in Measurement.field_names() if c != "frequency_hz"]  # (schema 4 added it)
    row = tuple(getattr(make(), c) for c in v1)
    conn.execute(f"INSERT INTO measurements ({', '.join(v1)}) "
                 f"VALUES ({', '.join('?' for _ in row)})", row)
    if catalog:
        conn.execute(_V1_OP_CATALOG)
        conn.execute(_V1_WORK_CATALOG_OLDEST)
        conn.execute("INSERT INTO op_catalog VALUES ('conv:1x3x32x32', 'Conv', 'conv', 1e6, 12288, 32768, 432)")
        conn.execute("""INSERT INTO work_catalog VALUES ('block:ab', 'block', '[["conv:1x3x32x32", false]]',
                        'm/b0')""")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("catalog", [False, True], ids=["measurements-only", "with-oldest-catalog"])
def test_a_version_1_database_is_migrated_keeping_its_rows(tmp_path, catalog):
    from parapipe.profiledb.catalog import Catalog, OpFeatures, WorkEntry
    from parapipe.profiledb.runs import list_runs

    path = tmp_path / "old.sqlite"
    _v1_file(path, catalog)
    with ProfileDB(path) as db:
        assert db.all() == [make()]
        assert list_runs(db) == []
        cat = Catalog(db)
        if catalog:
            assert cat.ops() == {"conv:1x3x32x32": OpFeatures("conv:1x3x32x32", "Conv", "conv", 1e6, 12288,
                                                              32768, 432)}
            assert cat.work() == {"block:ab": WorkEntry("block:ab", "block", (("conv:1x3x32x32", False),),
                                                        "m/b0", 0)}
        else:
            assert cat.ops() == {} and cat.work() == {}
        cat.add_work([WorkEntry("block:cd", "block", (("x", True),), "m/b1", 64)])
        assert cat.work()["block:cd"].boundary_nbytes == 64
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"measurements", "op_catalog", "work_catalog", "runs"} <= tables
    conn.close()
    with ProfileDB(path) as db:  # opening again: nothing left to migrate
        assert len(db) == 1


def test_a_new_file_holds_every_table_at_once(tmp_path):
    path = tmp_path / "new.sqlite"
    ProfileDB(path).close()
    conn = sqlite3.connect(str(path))
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"measurements", "op_catalog", "work_catalog", "runs"}
    conn.close()
