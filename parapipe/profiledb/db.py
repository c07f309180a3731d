"""The profile database: one SQLite file, one connection, one schema version for every table.

Tables: ``measurements`` (the columns of :class:`~parapipe.profiledb.records.Measurement`, ``frequency_hz``
(the operating point, :data:`BOARD_FREQUENCY` for the board's own settings) and ``UNIQUE(soc, pu, signature,
batch, ort_version, kind, frequency_hz)``; a newer measurement with the same key replaces the older one; every
read returns the rows at the board's own settings unless given another ``frequency_hz``), ``op_catalog`` and ``work_catalog`` (what each signature computes: :mod:`parapipe.profiledb.catalog`)
and ``runs`` (measured runs of mappings: :mod:`parapipe.profiledb.runs`). :class:`ProfileDB` owns the one
connection; the catalog and the runs table go through it (:meth:`ProfileDB.transaction`,
:meth:`ProfileDB.execute`). The schema version lives in ``PRAGMA user_version``: a new file gets every table at
:data:`SCHEMA_VERSION`; an older file is migrated when opened, one step per version (:data:`_MIGRATIONS`), in one
transaction, keeping every row. Each :meth:`ProfileDB.put` is one transaction, so a run killed half-way keeps
every batch it finished and nothing of the batch it was writing; a rerun skips what :meth:`ProfileDB.has` already
finds.

Versions: 1 had ``measurements`` only, with the catalog tables and ``runs`` created on first use by their own
modules (``work_catalog`` without ``boundary_nbytes`` before that column existed); 2 creates all four tables at
once; 3 gives ``runs`` the ``spread`` and ``load`` of each run (NULL for runs recorded before); 4 gives ``runs``
the ``frequencies`` that ran (JSON, ``{}`` before) and ``measurements`` its ``frequency_hz`` (rows before: the
board's own settings); 5 gives ``runs`` its ``workload`` (JSON: the workload run a row is one model of; NULL for
a single model's run, as every run before).
"""
from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
import contextlib
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

from parapipe.errors import input_error
from parapipe.profiledb.records import Measurement

log = logging.getLogger(__name__)

__all__ = ["ProfileDB", "SCHEMA_VERSION", "SQLITE_HEADER", "LOCK_TIMEOUT_S", "BOARD_FREQUENCY"]

#: Version of the table layout below, stored in PRAGMA user_version (0 means "not created yet").
SCHEMA_VERSION = 5
#: First 16 bytes of every SQLite 3 database file (https://www.sqlite.org/fileformat.html, section 1.3.1).
SQLITE_HEADER = b"SQLite format 3\x00"
#: Seconds to wait for another process's write lock before giving up (sqlite3.connect's timeout).
LOCK_TIMEOUT_S = 30.0

_COLUMNS = Measurement.field_names()  # frequency_hz last
_KEY = ("soc", "pu", "signature", "batch", "ort_version", "kind", "frequency_hz")
#: ``frequency_hz`` of a measurement taken at the board's own settings: the PU's profile frequency (every row
#: before schema 4, and every row ``parapipe profile`` takes without ``--frequencies``).
BOARD_FREQUENCY = 0.0
_MEASUREMENTS = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY,
    soc TEXT NOT NULL,
    pu TEXT NOT NULL,
    signature TEXT NOT NULL,
    op_type TEXT NOT NULL,
    batch INTEGER NOT NULL CHECK (batch >= 1),
    ort_version TEXT NOT NULL,
    median_s REAL NOT NULL CHECK (median_s >= 0),
    p90_s REAL NOT NULL CHECK (p90_s >= median_s),
    repeats INTEGER NOT NULL CHECK (repeats >= 1),
    measured_at TEXT NOT NULL,
    host TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('op', 'block', 'stage', 'transfer')),
    nbytes INTEGER NOT NULL CHECK (nbytes >= 0),
    power_w REAL,
    frequency_hz REAL NOT NULL DEFAULT 0 CHECK (frequency_hz >= 0),
    UNIQUE (soc, pu, signature, batch, ort_version, kind, frequency_hz)
)
"""
_OP_CATALOG = """
CREATE TABLE IF NOT EXISTS op_catalog (
    signature TEXT PRIMARY KEY, op_type TEXT NOT NULL, op_class TEXT NOT NULL, flops REAL NOT NULL,
    in_nbytes INTEGER NOT NULL, out_nbytes INTEGER NOT NULL, param_nbytes INTEGER NOT NULL)
"""
_WORK_CATALOG = """
CREATE TABLE IF NOT EXISTS work_catalog (
    signature TEXT PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('block', 'pair', 'span', 'stage')),
    parts TEXT NOT NULL, label TEXT NOT NULL, boundary_nbytes INTEGER NOT NULL)
"""
_RUNS = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    recorded_at TEXT NOT NULL,
    model TEXT NOT NULL,
    model_sha256 TEXT NOT NULL,
    soc TEXT NOT NULL,
    soc_sha256 TEXT NOT NULL,
    point TEXT NOT NULL,
    pu_list TEXT NOT NULL,
    mapping TEXT NOT NULL,
    frames INTEGER NOT NULL CHECK (frames >= 1),
    throughput_per_s REAL NOT NULL,
    period_s REAL NOT NULL,
    latency_p50_s REAL NOT NULL,
    latency_p99_s REAL NOT NULL,
    idle_latency_s REAL NOT NULL,
    pu_busy_s TEXT NOT NULL,
    energy_j REAL,
    predicted_period_s REAL,
    predicted_latency_s REAL,
    predicted_energy_j REAL,
    prediction_applies INTEGER NOT NULL,
    substituted TEXT NOT NULL,
    outputs_match INTEGER NOT NULL,
    runner TEXT NOT NULL,
    board TEXT NOT NULL,
    spread REAL,
    load REAL,
    frequencies TEXT NOT NULL DEFAULT '{}',
    workload TEXT
)
"""
#: Every table of the current layout (:data:`SCHEMA_VERSION`), as created in a new file.
_SCHEMA = (_MEASUREMENTS, _OP_CATALOG, _WORK_CATALOG, _RUNS)


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    """Version 1 -> 2: create the catalog and runs tables where missing; give ``work_catalog`` its
    ``boundary_nbytes`` column (0: unknown) where it was created before that column existed."""
    for statement in (_OP_CATALOG, _WORK_CATALOG, _RUNS):
        conn.execute(statement)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(work_catalog)")}
    if "boundary_nbytes" not in columns:
        conn.execute("ALTER TABLE work_catalog ADD COLUMN boundary_nbytes INTEGER NOT NULL DEFAULT 0")


def _migrate_2_to_3(conn: sqlite3.Connection) -> None:
    """Version 2 -> 3: give ``runs`` its ``spread`` and ``load`` columns (NULL: not measured then)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    for column in ("spread", "load"):
        if column not in columns:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {column} REAL")


def _migrate_3_to_4(conn: sqlite3.Connection) -> None:
    """Version 3 -> 4: give ``runs`` its ``frequencies`` column (JSON; ``{}``: the board's own settings, as every
    run before it ran), and ``measurements`` its ``frequency_hz`` (part of the key; every row kept, at
    :data:`BOARD_FREQUENCY`: measured at the PU's profile frequency). SQLite cannot change a UNIQUE constraint
    in place, so the table is rebuilt (https://www.sqlite.org/lang_altertable.html, "other kinds of table
    schema changes")."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    if "frequencies" not in columns:
        conn.execute("ALTER TABLE runs ADD COLUMN frequencies TEXT NOT NULL DEFAULT '{}'")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(measurements)")}
    if "frequency_hz" not in columns:
        old = [c for c in _COLUMNS if c != "frequency_hz"]
        conn.execute("ALTER TABLE measurements RENAME TO measurements_v3")
        conn.execute(_MEASUREMENTS)
        conn.execute(f"INSERT INTO measurements (id, {', '.join(old)}) SELECT id, {', '.join(old)} "
                     "FROM measurements_v3")
        conn.execute("DROP TABLE measurements_v3")


def _migrate_4_to_5(conn: sqlite3.Connection) -> None:
    """Version 4 -> 5: give ``runs`` its ``workload`` column (JSON; NULL: a single model's run, as every run
    before)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    if "workload" not in columns:
        conn.execute("ALTER TABLE runs ADD COLUMN workload TEXT")


#: ``{version: step}``: the step that takes a file of that version to the next; run in order on open.
_MIGRATIONS: Dict[int, Callable[[sqlite3.Connection], None]] = {1: _migrate_1_to_2, 2: _migrate_2_to_3,
                                                               3: _migrate_3_to_4, 4: _migrate_4_to_5}

_UPSERT = (f"INSERT INTO measurements ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) "
           f"ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET "
           + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in _KEY))
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM measurements"


class ProfileDB:
    """A SQLite profile database of :class:`~parapipe.profiledb.records.Measurement` rows.

    Parameters
    ----------
    path : str or Path
        Database file; created (with its folder) if missing. An empty file is initialised.

    Raises
    ------
    InputError
        ``"<file>: not a parapipe profile database (...); move it away or pass another --db"`` for a file
        that is not SQLite, is corrupt, or holds other tables; also for a database written by a newer
        parapipe. The file is left unchanged.

    Examples
    --------
    >>> import tempfile, os
    >>> from parapipe.profiledb.records import Measurement
    >>> db = ProfileDB(os.path.join(tempfile.mkdtemp(), "profile.sqlite"))
    >>> m = Measurement("a311d", "big", "conv:1x3x224x224", "Conv", 1, "1.19.2", 0.012, 0.013, 10,
    ...                 "2025-01-31T12:00:00+00:00", "local", "op", 602112)
    >>> db.put([m])
    1
    >>> db.get("a311d", "big", "conv:1x3x224x224").median_s
    0.012
    >>> db.close()
    """

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        self._conn = self._open()

    # ------------------------------------------------------------------------------------------------opening
    def _not_ours(self, why: str) -> Exception:
        return input_error(str(self.path), None, f"not a parapipe profile database ({why})",
                           "move it away or pass another --db")

    def _open(self) -> sqlite3.Connection:
        path = self.path
        if path.is_dir():
            raise self._not_ours("it is a folder")
        if path.exists():
            with open(path, "rb") as handle:
                header = handle.read(len(SQLITE_HEADER))
            if header and header != SQLITE_HEADER:
                raise self._not_ours("no SQLite header")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per put().
        conn = sqlite3.connect(str(path), timeout=LOCK_TIMEOUT_S, isolation_level=None)
        try:
            self._check_or_create(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_or_create(self, conn: sqlite3.Connection) -> None:
        try:
            version, tables = self._describe(conn)
            status = conn.execute("PRAGMA quick_check").fetchone()[0]  # read-only: a corrupt file stays as is
            if status != "ok":
                raise self._not_ours(f"corrupt: {status}")
            if version > SCHEMA_VERSION:
                raise input_error(str(self.path), None, f"written by a newer parapipe (schema {version}, "
                                  f"this one reads {SCHEMA_VERSION})",
                                  "upgrade parapipe or pass another --db")
            if (version == 0 and tables) or (version != 0 and "measurements" not in tables):
                raise self._not_ours(f"schema {version}, tables: {', '.join(sorted(tables)) or 'none'}")
            if version < SCHEMA_VERSION:
                self._create_or_migrate(conn)
            columns = [row[1] for row in conn.execute("PRAGMA table_info(measurements)")]
            missing = [c for c in _COLUMNS if c not in columns]
            if missing:
                raise self._not_ours(f"table measurements lacks {', '.join(missing)}")
        except sqlite3.DatabaseError as exc:
            raise self._not_ours(" ".join(str(exc).split())) from None

    def _create_or_migrate(self, conn: sqlite3.Connection) -> None:
        """Create every table in an empty file, or migrate an older one step by step, in one transaction
        (another process may have done it meanwhile: the version is read again under the lock)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            version, tables = self._describe(conn)
            if version == 0 and not tables:
                for statement in _SCHEMA:
                    conn.execute(statement)
                log.info("created profile database %s", self.path)
            elif 0 < version < SCHEMA_VERSION:
                for step in range(version, SCHEMA_VERSION):
                    _MIGRATIONS[step](conn)
                log.info("migrated profile database %s from schema %d to %d", self.path, version,
                         SCHEMA_VERSION)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            conn.execute("ROLLBACK")
            raise input_error(str(self.path), None, f"cannot bring the database to schema {SCHEMA_VERSION} "
                              f"({' '.join(str(exc).split())})",
                              "check that the file is writable and not locked by a hung run") from None
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _describe(conn: sqlite3.Connection) -> tuple:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return version, tables

    # ------------------------------------------------------------------------------------------------writing
    @contextlib.contextmanager
    def transaction(self, table: Optional[str] = None) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``, ``ROLLBACK`` on any error): yields the
        connection to write with. The one way the catalog and the runs table write to this file.

        Raises
        ------
        InputError
            The file cannot be written (read-only, disk full, locked longer than :data:`LOCK_TIMEOUT_S`);
            nothing of the transaction is written. ``table`` names what was being written in the message.
        """
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise input_error(str(self.path), table, f"cannot write ({' '.join(str(exc).split())})",
                              "check that the file is writable, not locked by a hung run, and the disk has "
                              "space") from None

    def execute(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Cursor:
        """Run one read query on the connection (the catalog and runs modules read through this)."""
        return self._conn.execute(sql, tuple(args))

    def put(self, records: Iterable[Measurement], frequency_hz: float = BOARD_FREQUENCY) -> int:
        """Insert or replace measurements, all in one transaction (all are written or none).

        Parameters
        ----------
        records : iterable of Measurement
            A record whose key is already stored replaces the stored one.
        frequency_hz : float
            The operating point they were taken at, Hz (``parapipe profile --frequencies``), for records whose
            own ``frequency_hz`` is None; default :data:`BOARD_FREQUENCY`: the board's own settings.

        Returns
        -------
        int
            Number of records written.

        Raises
        ------
        TypeError
            If an item is not a Measurement (a bug in the caller).
        InputError
            If the file cannot be written (read-only, disk full, locked longer than 30 s); nothing is written.
        """
        rows = []
        for record in records:
            if not isinstance(record, Measurement):
                raise TypeError(f"ProfileDB.put takes Measurement records, got {type(record).__name__}")
            at = record.frequency_hz if record.frequency_hz is not None else frequency_hz
            rows.append(tuple(getattr(record, c) for c in _COLUMNS[:-1]) + (float(at),))
        if not rows:
            return 0
        with self.transaction() as conn:
            conn.executemany(_UPSERT, rows)
        return len(rows)

    # ------------------------------------------------------------------------------------------------reading
    def _query(self, where: str, args: tuple, suffix: str = "",
               frequency_hz: float = BOARD_FREQUENCY) -> List[Measurement]:
        where = f"{where} AND frequency_hz = ?" if where else "WHERE frequency_hz = ?"
        cursor = self.execute(f"{_SELECT} {where} {suffix}", args + (float(frequency_hz),))
        return [Measurement(**dict(zip(_COLUMNS[:-1], row[:-1])), frequency_hz=float(row[-1]) or None)
                for row in cursor]

    def get(self, soc: str, pu: str, signature: str, batch: int = 1, kind: str = "op",
            ort_version: Optional[str] = None, frequency_hz: float = BOARD_FREQUENCY) -> Optional[Measurement]:
        """The stored measurement for a key, or None.

        Parameters
        ----------
        soc, pu, signature : str
            As in :class:`~parapipe.profiledb.records.Measurement`.
        batch : int
            Batch size (default 1).
        kind : str
            ``"op"`` (default), ``"block"``, ``"stage"`` or ``"transfer"``.
        ort_version : str, optional
            ONNX Runtime version; None returns the most recently measured of any version.
        frequency_hz : float
            Operating point, Hz (default :data:`BOARD_FREQUENCY`, the board's own settings).

        Returns
        -------
        Measurement or None
        """
        where = "WHERE soc = ? AND pu = ? AND signature = ? AND batch = ? AND kind = ?"
        args: tuple = (soc, pu, signature, batch, kind)
        if ort_version is not None:
            where += " AND ort_version = ?"
            args += (ort_version,)
        found = self._query(where, args, "ORDER BY measured_at DESC, id DESC LIMIT 1", frequency_hz)
        return found[0] if found else None

    def has(self, soc: str, pu: str, signature: str, batch: int = 1, kind: str = "op",
            ort_version: Optional[str] = None, frequency_hz: float = BOARD_FREQUENCY) -> bool:
        """Whether :meth:`get` would find a measurement (for resuming a profiling run)."""
        return self.get(soc, pu, signature, batch, kind, ort_version, frequency_hz) is not None

    def all(self, soc: Optional[str] = None, frequency_hz: float = BOARD_FREQUENCY) -> List[Measurement]:
        """Every stored measurement at one operating point (default the board's own settings; of one SoC if
        ``soc`` is given), sorted by soc, pu, kind, signature."""
        where, args = ("WHERE soc = ?", (soc,)) if soc is not None else ("", ())
        return self._query(where, args, "ORDER BY soc, pu, kind, signature, batch, ort_version", frequency_hz)

    def frequencies(self, soc: Optional[str] = None) -> Dict[str, List[float]]:
        """PU -> the operating points (Hz, ascending) it has measurements at besides the board's own settings
        (``parapipe profile --frequencies``); read each with :meth:`all` / :meth:`get` ``frequency_hz=``."""
        where, args = ("WHERE frequency_hz > 0" + (" AND soc = ?" if soc is not None else ""),
                       (soc,) if soc is not None else ())
        out: Dict[str, List[float]] = {}
        for pu, hz in self.execute(f"SELECT DISTINCT pu, frequency_hz FROM measurements {where} "
                                   "ORDER BY pu, frequency_hz", args):
            out.setdefault(pu, []).append(float(hz))
        return out

    def __len__(self) -> int:
        return self.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> "ProfileDB":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
