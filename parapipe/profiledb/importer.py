"""``parapipe import``: block-level measurements taken with other tools → block tables (and profile rows).

Input: a CSV in long format, one row per (graph, PU, block[, phase]), with a header:

=============  ========  ==================================================================================
column         required  meaning
=============  ========  ==================================================================================
``graph``      yes       model/graph name; one block table is written per graph
``pu``         yes       PU name of the ``--soc`` profile
``block``      yes       block name (unique within its graph)
``time_s``     one of    time of the block (phase) on that PU, seconds
``time_ms``    the two   ... or milliseconds
``power_w``    no        mean power of the PU while it runs the block (phase), watts
``power_mw``   no        ... or milliwatts
``phase``      no        ``in`` (input preparation), ``task`` (block compute), ``out`` (output hand-off);
                         empty or absent means ``task``
``deps``       no        semicolon-separated predecessor blocks of the same graph; empty for a source
``out_bytes``  no        bytes of the block's output (moved along every edge leaving it; default 0)
=============  ========  ==================================================================================

What parapipe makes of it (its choices, documented here):

* A block's time on a PU is the sum of its phases (``in + task + out``): the work the PU does for that block
  in a pipeline, hand-off preparation included. Its power is the time-weighted mean of the phases that give
  one (the energy of the phases over their time); without any, the block table's ``p_<pu>`` is the profile's
  ``active_power_w``.
* Without a ``deps`` column, each graph's blocks form a chain in the order of their first row. With it, the
  ``deps`` (and ``out_bytes``) of a block may be given on any of its rows but must agree where repeated.
* A PU without a row for a block cannot run it (empty ``t_<pu>`` cell).
* The block table derives ``out_bytes`` from the edges leaving a block, so a sink's ``out_bytes`` is written
  as 0 (nothing moves inside the graph after it); the profile rows keep the given value.

Output: per graph, the block table of :mod:`parapipe.cost.blocktable` (``block, deps, out_bytes, t_<pu>...,
p_<pu>...``), readable by ``parapipe optimize --blocks FILE --soc SOC``. With a profile database, each block ×
PU also becomes a measurement row (kind ``block``, signature ``import:<graph>/<block>``, ``ort_version``
``import``, ``host`` ``import:<csv file name>``).
"""
from __future__ import annotations

import csv
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from parapipe.cost.blocktable import write_block_table
from parapipe.cost.problem import MappingProblem
from parapipe.errors import input_error
from parapipe.profiledb.records import Measurement, utc_now_iso
from parapipe.soc.profile import SoC

log = logging.getLogger(__name__)

__all__ = ["ImportedGraph", "read_long_csv", "write_tables", "to_measurements", "PHASES"]

#: Phases a row may describe: input preparation, block compute, output hand-off.
PHASES = ("in", "task", "out")
_KNOWN = {"graph", "pu", "block", "time_s", "time_ms", "power_w", "power_mw", "phase", "deps", "out_bytes"}


@dataclass
class ImportedGraph:
    """One graph of the CSV as a mapping problem, plus what the profile database needs."""

    name: str
    problem: MappingProblem
    out_bytes: Dict[str, float]
    power_w: Dict[Tuple[str, str], float]  # (block, pu) -> measured mean power, only where given


def _number(src: str, line: int, column: str, text: str, unit: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise input_error(src, f"row {line}, column {column!r}", f"{text!r} is not a number",
                          f"give {unit} as a number") from None
    if not math.isfinite(value) or value < 0:
        raise input_error(src, f"row {line}, column {column!r}",
                          f"must be a finite number >= 0, got {text!r}",
                          f"give {unit} >= 0")
    return value


def read_long_csv(path, soc: SoC) -> List[ImportedGraph]:
    """Read a long-format measurement CSV (see the module docstring) into one problem per graph.

    Parameters
    ----------
    path : path
        The CSV file.
    soc : SoC
        Profile whose PU names the ``pu`` column must use; idle/static power and transfer costs come from it.

    Returns
    -------
    list of ImportedGraph
        In the order graphs first appear.

    Raises
    ------
    InputError
        Unreadable file; no rows; a missing ``graph``/``pu``/``block`` column or neither ``time_s`` nor
        ``time_ms``; both ``time_s`` and ``time_ms`` (or both power columns); an unknown column; an unknown
        PU; an unknown phase; an empty name; a negative or non-numeric value; a duplicate (graph, pu, block,
        phase); conflicting or unknown ``deps``; a dependency cycle. Each message names the file, the row or
        column, and the fix.
    """
    src = str(path)
    try:
        # utf-8-sig: spreadsheet programs start CSVs with a byte-order mark; newline="": CRLF rows read as rows
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip() for h in (reader.fieldnames or [])]
            rows = list(reader)
    except OSError as exc:
        raise input_error(src, None, f"cannot read ({exc.strerror or exc})", "check the path") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise input_error(src, None, f"not a UTF-8 CSV file ({exc})",
                          "write a comma-separated table with a header") \
            from None
    if not header:
        raise input_error(src, None, "no header", "start with a header: graph,pu,block,time_s")
    for column in ("graph", "pu", "block"):
        if column not in header:
            raise input_error(src, f"column {column!r}", "missing",
                              "the header needs graph,pu,block and time_s or "
                              "time_ms")
    unknown = [c for c in header if c not in _KNOWN]
    if unknown:
        raise input_error(src, f"column {unknown[0]!r}", "unknown column",
                          f"use only {', '.join(sorted(_KNOWN))}")
    time_cols = [c for c in ("time_s", "time_ms") if c in header]
    power_cols = [c for c in ("power_w", "power_mw") if c in header]
    if len(time_cols) != 1:
        raise input_error(src, "columns", "needs exactly one of time_s and time_ms, got "
                          f"{', '.join(time_cols) or 'neither'}", "keep one time column")
    if len(power_cols) > 1:
        raise input_error(src, "columns", "has both power_w and power_mw", "keep one power column")
    if not rows:
        raise input_error(src, None, "no rows", "add one row per graph, PU and block")
    time_col, time_scale = time_cols[0], (1.0 if time_cols[0] == "time_s" else 1e-3)
    power_col = power_cols[0] if power_cols else None
    power_scale = 1.0 if power_col == "power_w" else 1e-3
    graphs: "OrderedDict[str, dict]" = OrderedDict()
    for line, raw in enumerate(rows, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        graph, pu, block = row.get("graph", ""), row.get("pu", ""), row.get("block", "")
        for column, value in (("graph", graph), ("pu", pu), ("block", block)):
            if not value:
                raise input_error(src, f"row {line}, column {column!r}", "empty", f"give the {column} name")
        if pu not in soc.pus:
            raise input_error(src, f"row {line}, column 'pu'", f"SoC {soc.name!r} has no PU {pu!r}",
                              f"use one of {', '.join(soc.pu_names)}, or the --soc they were measured on")
        phase = row.get("phase", "") or "task"
        if phase not in PHASES:
            raise input_error(src, f"row {line}, column 'phase'", f"unknown phase {phase!r}",
                              "use in, task or out (or leave it empty for task)")
        if not row.get(time_col):
            raise input_error(src, f"row {line}, column {time_col!r}", "empty", "give the measured time")
        seconds = _number(src, line, time_col, row[time_col], "the time") * time_scale
        watts = None
        if power_col and row.get(power_col):
            watts = _number(src, line, power_col, row[power_col], "the power") * power_scale
        g = graphs.setdefault(graph, {"order": OrderedDict(), "cells": {}, "deps": {}, "out": {}})
        g["order"].setdefault(block, line)
        key = (block, pu, phase)
        if key in g["cells"]:
            raise input_error(src, f"row {line}",
                              f"duplicate measurement of graph {graph!r}, block {block!r}, "
                              f"PU {pu!r}, phase {phase!r} (first on row {g['cells'][key][2]})",
                              "give each graph, block, PU and phase once")
        g["cells"][key] = (seconds, watts, line)
        if "deps" in header:
            deps = tuple(d.strip() for d in row.get("deps", "").split(";") if d.strip())
            _agree(src, line, g["deps"], block, deps, "deps", graph)
        if row.get("out_bytes"):
            _agree(src, line, g["out"], block, _number(src, line, "out_bytes", row["out_bytes"], "bytes"),
                   "out_bytes", graph)
    return [_build(src, name, g, soc, "deps" in header) for name, g in graphs.items()]


def _agree(src: str, line: int, store: dict, block: str, value, column: str, graph: str) -> None:
    """Record ``value`` for ``block``: an empty value never overrides; a different non-empty one is an
    error."""
    old = store.get(block)
    if old is None or old in ((), 0.0):
        store[block] = value
    elif value not in ((), 0.0) and value != old:
        raise input_error(src, f"row {line}, column {column!r}", f"block {block!r} of graph {graph!r} has "
                          f"{column} {value!r} here but {old!r} on an earlier row",
                          f"give the same {column} on every row of a block (or only on one)")


def _build(src: str, name: str, g: dict, soc: SoC, has_deps: bool) -> ImportedGraph:
    import networkx as nx

    order = list(g["order"])
    index = {b: i for i, b in enumerate(order)}
    if has_deps:
        deps = {b: g["deps"].get(b, ()) for b in order}
        for b, ds in deps.items():
            for d in ds:
                if d not in index:
                    raise input_error(src, f"row {g['order'][b]}, column 'deps'",
                                      f"block {b!r} of graph {name!r} "
                                      f"depends on {d!r}, which has no row", "name blocks of the same graph")
    else:
        deps = {b: ((order[i - 1],) if i else ()) for i, b in enumerate(order)}
    dag = nx.DiGraph()
    dag.add_nodes_from(order)
    dag.add_edges_from((d, b) for b, ds in deps.items() for d in ds)
    if not nx.is_directed_acyclic_graph(dag):
        cycle = nx.find_cycle(dag)
        raise input_error(src, "deps", f"graph {name!r} has a dependency cycle "
                          f"{' -> '.join(u for u, _ in cycle)} -> {cycle[0][0]}",
                          "the blocks must form a DAG")
    topo = list(nx.lexicographical_topological_sort(dag, key=index.__getitem__))
    pos = {b: i for i, b in enumerate(topo)}
    k = len(soc.pu_names)
    time_s = np.full((len(topo), k), np.inf)
    power = np.tile(np.array([soc.pus[p].active_power_w for p in soc.pu_names]), (len(topo), 1))
    energy: Dict[Tuple[str, str], List[float]] = {}
    for (block, pu, _phase), (seconds, watts, _line) in g["cells"].items():
        i, j = pos[block], soc.pu_names.index(pu)
        time_s[i, j] = seconds if not np.isfinite(time_s[i, j]) else time_s[i, j] + seconds
        if watts is not None:
            acc = energy.setdefault((block, pu), [0.0, 0.0])
            acc[0] += watts * seconds
            acc[1] += seconds
    measured_power = {}
    for (block, pu), (joules, seconds) in energy.items():
        if seconds > 0:
            measured_power[(block, pu)] = joules / seconds
            power[pos[block], soc.pu_names.index(pu)] = joules / seconds
    out_bytes = {b: float(g["out"].get(b, 0.0)) for b in topo}
    problem = MappingProblem(
        block_names=topo, preds=[tuple(sorted(pos[d] for d in deps[b])) for b in topo],
        edge_nbytes={(pos[d], pos[b]): out_bytes[d] for b in topo for d in deps[b]},
        pu_names=list(soc.pu_names), time_s=time_s, active_power_w=power,
        idle_power_w=np.array([soc.pus[p].idle_power_w for p in soc.pu_names]),
        static_power_w=soc.static_power_w,
        alpha_s=soc.alpha_matrix(), beta_bytes_per_s=soc.beta_matrix(), name=name)
    return ImportedGraph(name, problem, out_bytes, measured_power)


def write_tables(graphs: List[ImportedGraph], out: Optional[str], src: str) -> List[Path]:
    """Write one block table per graph.

    ``out`` ending in ``.csv`` names the file (one graph only); otherwise it is a folder (created) that gets
    ``<graph>.blocks.csv`` per graph. Default: the folder ``out``.

    Raises
    ------
    InputError
        A ``.csv`` path for several graphs; a folder that cannot be created.
    """
    target = Path(out or "out")
    if target.suffix.lower() == ".csv":
        if len(graphs) != 1:
            raise input_error("--out", None,
                              f"{src} holds {len(graphs)} graphs ({', '.join(g.name for g in graphs)})"
                              f" but {target} is one file",
                              "give a folder; each graph goes to <graph>.blocks.csv")
        paths = [target]
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise input_error("--out", str(target), f"cannot create the folder ({exc.strerror or exc})",
                              "choose a writable folder") from None
        paths = [target / f"{_safe(g.name)}.blocks.csv" for g in graphs]
    for graph, path in zip(graphs, paths):
        write_block_table(path, graph.problem)
        log.info("wrote %s (%d blocks)", path, graph.problem.n_blocks)
    return paths


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "graph"


def to_measurements(graphs: List[ImportedGraph], soc: SoC, src: str) -> List[Measurement]:
    """Profile-database rows: one per block × PU that has a time (kind ``block``; see the module
    docstring)."""
    now = utc_now_iso()
    rows = []
    for graph in graphs:
        p = graph.problem
        for i, block in enumerate(p.block_names):
            for j, pu in enumerate(p.pu_names):
                t = float(p.time_s[i, j])
                if np.isfinite(t):
                    rows.append(Measurement(soc.name, pu, f"import:{graph.name}/{block}", "imported", 1,
                                            "import",
                                            t, t, 1, now, f"import:{Path(src).name}", "block",
                                            int(graph.out_bytes.get(block, 0.0)),
                                            graph.power_w.get((block, pu))))
    return rows
