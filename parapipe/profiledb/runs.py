"""Measured runs of mappings, kept in the profile database's ``runs`` table.

Every ``parapipe run`` and ``parapipe deploy`` appends one row: what ran (model, SoC profile and their SHA-256,
the point and its mapping, the PU bindings substituted with ``--bind``), on which board (its facts), what was
measured (throughput, latency p50/p99 with the pipeline full, idle latency, per-PU busy time, measured energy
where a sensor was read) and what the cost model predicted. These rows are what calibrating the pipeline-level
terms of the cost model learns from; ``parapipe runs`` lists them and exports CSV.

The table belongs to the database's one schema (:mod:`parapipe.profiledb.db`: created with the file, added by
the migration to databases written before it existed); rows go through the database's connection, each insert
one transaction.
"""
from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional

from parapipe.files import atomic_path
from parapipe.profiledb.db import ProfileDB

__all__ = ["RunRecord", "record_from_run", "append_run", "list_runs", "write_runs_csv"]

#: JSON-encoded columns (dicts and lists).
_JSON_COLUMNS = ("mapping", "pu_busy_s", "substituted", "board", "frequencies", "workload")
#: What the ``frequencies`` column keeps of a report's ``frequencies`` (``ppexec.report.RunReport``), per PU.
_FREQUENCY_KEYS = ("requested_hz", "readback_hz", "readback_end_hz", "status", "domain")


@dataclass
class RunRecord:
    """One row of the ``runs`` table (seconds, joules; JSON columns as Python objects).

    Attributes
    ----------
    pu_list : str
        One PU per block in the document's block order, as ``parapipe evaluate --mapping`` takes it (a
        multi-PU stage lists each block's PU, so stage grouping is kept only in ``mapping``).
    mapping : list of dict
        The point's stages: ``pus``, ``blocks``, ``assignment``.
    period_s : float
        ``1 / throughput_per_s`` as measured.
    prediction_applies : bool
        False when PUs were substituted (the prediction is for the profile's bindings) or the board refused or
        throttled an operating point.
    runner : str
        ``local`` or the SSH host (``user@address:port``).
    board : dict
        The board's facts (hostname, machine, Python, onnxruntime, CPUs, runtimes).
    spread : float or None
        p90 / median - 1 of the run's period over windows of its frames (``RunReport.spread``); None for runs
        recorded before it was kept.
    load : float or None
        Share of the CPUs' time other processes used during the run (``RunReport.load``); None where unknown.
    frequencies : dict of str to dict
        Per PU whose operating point was set: ``requested_hz``, ``readback_hz``, ``readback_end_hz`` (Hz, what
        the kernel reported after setting it and at the end of the run), ``status`` (``ok``, ``throttled``,
        ``refused``), ``domain``; empty: the board ran at its own settings (every run recorded before).
    workload : dict or None
        For one model of a workload run (several models at once, PUs shared: ``parapipe run`` of a workload
        point): ``id`` (shared by the rows of that run), ``point``, ``rates`` (frames of each model per workload
        frame), ``models`` (the names, in the workload's order), ``throughput_per_s`` (workload frames per second,
        measured), ``predicted_period_s`` (s per workload frame), ``energy_j`` (J per workload frame, measured;
        None without a sensor), ``pu_busy_s`` (task seconds per workload frame, every model summed). The row's
        own figures are the model's in that run: its throughput with the other models running, its idle
        latency with them idle. None for a single model's run (every run recorded before).
    """

    recorded_at: str
    model: str
    model_sha256: str
    soc: str
    soc_sha256: str
    point: str
    pu_list: str
    mapping: List[Dict[str, Any]]
    frames: int
    throughput_per_s: float
    period_s: float
    latency_p50_s: float
    latency_p99_s: float
    idle_latency_s: float
    pu_busy_s: Dict[str, float]
    energy_j: Optional[float]
    predicted_period_s: Optional[float]
    predicted_latency_s: Optional[float]
    predicted_energy_j: Optional[float]
    prediction_applies: bool
    substituted: Dict[str, List[int]]
    outputs_match: bool
    runner: str
    board: Dict[str, Any]
    spread: Optional[float] = None
    load: Optional[float] = None
    frequencies: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    workload: Optional[Dict[str, Any]] = None
    id: Optional[int] = None


def _columns() -> List[str]:
    return [f.name for f in fields(RunRecord) if f.name != "id"]


def record_from_run(doc, point, report, runner: str, workload: Optional[Dict[str, Any]] = None) -> RunRecord:
    """The row of one verified run.

    Parameters
    ----------
    doc : parapipe.mapping.ParetoDoc
    point : parapipe.mapping.Point
    report : ppexec.report.RunReport
    runner : str
        ``local`` or the SSH host.
    workload : dict, optional
        The workload run this model's report belongs to (:attr:`RunRecord.workload`).
    """
    pu_list = ",".join(st.pu_of(b) for st in point.stages for b in st.blocks)
    mapping = [dict({"pus": list(st.pus), "blocks": list(st.blocks),
                     "assignment": {b: st.pu_of(b) for b in st.blocks}},
                    **({"replicas": [r.model_dump(mode="json") for r in st.replicas]} if st.replicas else {}))
               for st in point.stages]
    board = dict(report.host, bindings=report.bindings)
    return RunRecord(
        recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), model=doc.model.name,
        model_sha256=doc.model.sha256, soc=doc.soc.name, soc_sha256=doc.soc.sha256, point=point.id,
        pu_list=pu_list, mapping=mapping, frames=int(report.frames),
        throughput_per_s=float(report.throughput_per_s), period_s=1.0 / float(report.throughput_per_s),
        latency_p50_s=float(report.latency_p50_s), latency_p99_s=float(report.latency_p99_s),
        idle_latency_s=float(report.idle_latency_s), pu_busy_s=dict(report.pu_busy_s), energy_j=report.energy_j,
        predicted_period_s=float(point.period_s), predicted_latency_s=float(point.latency_s),
        predicted_energy_j=float(point.energy_j),
        prediction_applies=bool(report.predicted.get("applies", not report.substituted)),
        substituted=dict(report.substituted), outputs_match=bool(report.outputs_match), runner=runner,
        board=board, spread=getattr(report, "spread", None), load=getattr(report, "load", None),
        frequencies={pu: {k: f.get(k) for k in _FREQUENCY_KEYS}
                     for pu, f in (getattr(report, "frequencies", None) or {}).items()},
        workload=None if workload is None else dict(workload))


def append_run(db: ProfileDB, record: RunRecord) -> int:
    """Append ``record`` to the ``runs`` table of ``db``; return its row id.

    Raises
    ------
    InputError
        The database cannot be written (read-only, locked, disk full); nothing is written.
    """
    cols = _columns()
    values = [json.dumps(getattr(record, c)) if c in _JSON_COLUMNS else getattr(record, c) for c in cols]
    with db.transaction("runs") as conn:
        cursor = conn.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                              values)
    if cursor.lastrowid is None:  # sqlite3 sets it on every INSERT that succeeded
        raise RuntimeError("sqlite3 gave no row id for the run just inserted")
    return int(cursor.lastrowid)


def list_runs(db: ProfileDB, model: Optional[str] = None, soc: Optional[str] = None) -> List[RunRecord]:
    """Every run in ``db`` (oldest first), optionally of one model and/or SoC name."""
    cols = _columns()
    where, args = [], []
    for column, value in (("model", model), ("soc", soc)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    sql = f"SELECT id, {', '.join(cols)} FROM runs" + (f" WHERE {' AND '.join(where)}" if where else "")
    out = []
    for row in db.execute(sql + " ORDER BY id", args):
        values = dict(zip(["id"] + cols, row))
        for c in _JSON_COLUMNS:
            values[c] = None if values[c] is None else json.loads(values[c])
        values["prediction_applies"] = bool(values["prediction_applies"])
        values["outputs_match"] = bool(values["outputs_match"])
        out.append(RunRecord(**values))
    return out


def write_runs_csv(runs: List[RunRecord], path: Path) -> None:
    """Write ``runs`` as CSV (one row each; JSON columns as JSON text) to ``path``, atomically."""
    cols = ["id"] + _columns()
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=cols)
            writer.writeheader()
            for r in runs:
                row = asdict(r)
                for c in _JSON_COLUMNS:
                    row[c] = json.dumps(row[c], sort_keys=True)
                writer.writerow({c: row[c] for c in cols})
