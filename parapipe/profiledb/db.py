"""The profile database: measurements in one SQLite file, resumable and safe to kill.

One table, ``measurements``, with the columns of :class:`~parapipe.profiledb.records.Measurement` and
``UNIQUE(soc, pu, signature, batch, ort_version, kind)``; a newer measurement with the same key replaces the
older one. The schema version lives in ``PRAGMA user_version``. Each :meth:`ProfileDB.put` is one transaction,
so a run killed half-way keeps every batch it finished and nothing of the batch it was writing; a rerun skips
what :meth:`ProfileDB.has` already finds.
"""
from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any, Iterable, List, Optional, Union

from parapipe.errors import input_error
from parapipe.profiledb.records import Measurement

log = logging.getLogger(__name__)

#: Version of the table layout below, stored in PRAGMA user_version (0 means "not created yet").
SCHEMA_VERSION = 1
#: First 16 bytes of every SQLite 3 database file (https://www.sqlite.org/fileformat.html, section 1.3.1).
SQLITE_HEADER = b"SQLite format 3\x00"
#: Seconds to wait for another process's write lock before giving up (sqlite3.connect's timeout).
LOCK_TIMEOUT_S = 30.0

_COLUMNS = Measurement.field_names()
_KEY = ("soc", "pu", "signature", "batch", "ort_version", "kind")
_SCHEMA = """
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
    UNIQUE (soc, pu, signature, batch, ort_version, kind)
)
"""
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
            if version == 0 and not tables:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    version, tables = self._describe(conn)  # another process may have created it meanwhile
                    if version == 0 and not tables:
                        conn.execute(_SCHEMA)
                        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                        log.info("created profile database %s", self.path)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                version, tables = self._describe(conn)
            if version > SCHEMA_VERSION:
                raise input_error(str(self.path), None, f"written by a newer parapipe (schema {version}, "
                                  f"this one reads {SCHEMA_VERSION})",
                                  "upgrade parapipe or pass another --db")
            if version != SCHEMA_VERSION or "measurements" not in tables:
                raise self._not_ours(f"schema {version}, tables: {', '.join(sorted(tables)) or 'none'}")
            columns = [row[1] for row in conn.execute("PRAGMA table_info(measurements)")]
            missing = [c for c in _COLUMNS if c not in columns]
            if missing:
                raise self._not_ours(f"table measurements lacks {', '.join(missing)}")
        except sqlite3.DatabaseError as exc:
            raise self._not_ours(" ".join(str(exc).split())) from None

    @staticmethod
    def _describe(conn: sqlite3.Connection) -> tuple:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return version, tables

    # ------------------------------------------------------------------------------------------------writing
    def put(self, records: Iterable[Measurement]) -> int:
        """Insert or replace measurements, all in one transaction (all are written or none).

        Parameters
        ----------
        records : iterable of Measurement
            A record whose key is already stored replaces the stored one.

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
            rows.append(tuple(getattr(record, c) for c in _COLUMNS))
        if not rows:
            return 0
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(_UPSERT, rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise input_error(str(self.path), None, f"cannot write ({' '.join(str(exc).split())})",
                              "check that the file is writable, not locked by a hung run, and the disk has "
                              "space") from None
        return len(rows)

    # ------------------------------------------------------------------------------------------------reading
    def _query(self, where: str, args: tuple, suffix: str = "") -> List[Measurement]:
        cursor = self._conn.execute(f"{_SELECT} {where} {suffix}", args)
        return [Measurement(**dict(zip(_COLUMNS, row))) for row in cursor]

    def get(self, soc: str, pu: str, signature: str, batch: int = 1, kind: str = "op",
            ort_version: Optional[str] = None) -> Optional[Measurement]:
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

        Returns
        -------
        Measurement or None
        """
        where = "WHERE soc = ? AND pu = ? AND signature = ? AND batch = ? AND kind = ?"
        args: tuple = (soc, pu, signature, batch, kind)
        if ort_version is not None:
            where += " AND ort_version = ?"
            args += (ort_version,)
        found = self._query(where, args, "ORDER BY measured_at DESC, id DESC LIMIT 1")
        return found[0] if found else None

    def has(self, soc: str, pu: str, signature: str, batch: int = 1, kind: str = "op",
            ort_version: Optional[str] = None) -> bool:
        """Whether :meth:`get` would find a measurement (for resuming a profiling run)."""
        return self.get(soc, pu, signature, batch, kind, ort_version) is not None

    def all(self, soc: Optional[str] = None) -> List[Measurement]:
        """Every stored measurement (of one SoC if ``soc`` is given), sorted by soc, pu, kind, signature."""
        where, args = ("WHERE soc = ?", (soc,)) if soc is not None else ("", ())
        return self._query(where, args, "ORDER BY soc, pu, kind, signature, batch, ort_version")

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> "ProfileDB":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
