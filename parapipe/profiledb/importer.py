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
``freq``       no        operating point the row was measured at, MHz (``frequency_hz``: the same in Hz);
                         empty or absent: the PU's profile frequency
=============  ========  ==================================================================================

Column names are read case-insensitively, and the names of published per-layer DVFS tables are taken as
aliases: ``component`` for ``pu``, ``layer`` for ``block``, ``metric`` for ``phase`` (whose values may also be
written ``input``/``output``), e.g. ``graph,component,freq,layer,metric,time_ms,power_mw``.

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
* **Frequencies.** A PU whose rows give ``freq`` gets one ``t_<pu>@<MHz>``/``p_<pu>@<MHz>`` column per
  frequency (:mod:`parapipe.cost.blocktable`): those frequencies are its operating points in the block table.
  A PU's rows give a frequency on every row or on none, and a block the PU runs has rows at each of the PU's
  frequencies.
* Only measured powers are written (the other ``p_`` cells are left empty: the block table's defaults).
* ``board_power`` (``--board-power``): the powers are whole-board readings; each is checked against the board's
  baseline (the profile's static power + every PU's idle power) and kept as read, so that
  ``evaluate``/``optimize``/``calibrate --board-power`` take the baseline off once
  (:mod:`parapipe.cost.blocktable`).

Output: per graph, the block table of :mod:`parapipe.cost.blocktable` (``block, deps, out_bytes, t_<pu>...,
p_<pu>...``), readable by ``parapipe optimize --blocks FILE --soc SOC``. With a profile database, each block ×
PU also becomes a measurement row (kind ``block``, signature ``import:<graph>/<block>``, ``ort_version``
``import``, ``host`` ``import:<csv file name>``); a row measured at a frequency has ``@<MHz>`` at the end of its
signature and records it in ``frequency_hz``.
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
from parapipe.cost.problem import MappingProblem, PUOperatingPoints
from parapipe.errors import input_error
from parapipe.profiledb.records import Measurement, utc_now_iso
from parapipe.soc.operating_points import format_mhz
from parapipe.soc.profile import SoC

log = logging.getLogger(__name__)

__all__ = ["ImportedGraph", "read_long_csv", "write_tables", "to_measurements", "PHASES"]

#: Phases a row may describe: input preparation, block compute, output hand-off.
PHASES = ("in", "task", "out")
_KNOWN = {"graph", "pu", "block", "time_s", "time_ms", "power_w", "power_mw", "phase", "deps", "out_bytes", "freq",
          "frequency_hz"}
#: Column names of published per-layer DVFS tables, read as ours.
ALIASES = {"component": "pu", "layer": "block", "metric": "phase"}
#: Phase names of such tables, read as ours.
_PHASE_ALIASES = {"input": "in", "output": "out"}


@dataclass
class ImportedGraph:
    """One graph of the CSV as a mapping problem, plus what the profile database needs."""

    name: str
    problem: MappingProblem
    out_bytes: Dict[str, float]
    power_w: Dict[Tuple[str, str, Optional[float]], float]  # (block, pu, frequency_hz) -> mean power, where given
    powers_given: Dict[int, np.ndarray]  # PU index -> (blocks, points) cells with a measured power


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


def read_long_csv(path, soc: SoC, board_power: bool = False) -> List[ImportedGraph]:
    """Read a long-format measurement CSV (see the module docstring) into one problem per graph.

    Parameters
    ----------
    path : path
        The CSV file.
    soc : SoC
        Profile whose PU names the ``pu`` column must use; idle/static power and transfer costs come from it.
    board_power : bool
        The powers are whole-board readings: refuse one below the board's baseline (module docstring).

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
        phase, frequency); conflicting or unknown ``deps``; a dependency cycle; a PU with and without
        frequencies; a block missing at one of its PU's frequencies; with ``board_power``, a reading below the
        baseline. Each message names the file, the row or column, and the fix.
    """
    src = str(path)
    try:
        # utf-8-sig: spreadsheet programs start CSVs with a byte-order mark; newline="": CRLF rows read as rows
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            raw_header = [(h or "").strip() for h in (reader.fieldnames or [])]
            rows = list(reader)
    except OSError as exc:
        raise input_error(src, None, f"cannot read ({exc.strerror or exc})", "check the path") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise input_error(src, None, f"not a UTF-8 CSV file ({exc})",
                          "write a comma-separated table with a header") \
            from None
    if not raw_header:
        raise input_error(src, None, "no header", "start with a header: graph,pu,block,time_s")
    header = [ALIASES.get(h.lower(), h.lower()) for h in raw_header]
    rename = dict(zip(raw_header, header))
    phase_column = next((raw for raw, h in zip(raw_header, header) if h == "phase"), "phase")  # as the file names it
    twice = [raw for raw, h in zip(raw_header, header) if header.count(h) > 1]
    if twice:
        raise input_error(src, f"column {twice[-1]!r}", f"names the same column as {twice[0]!r}",
                          "keep one of them")
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
    if "freq" in header and "frequency_hz" in header:
        raise input_error(src, "columns", "has both freq and frequency_hz", "keep one frequency column")
    freq_col = "freq" if "freq" in header else "frequency_hz" if "frequency_hz" in header else None
    baseline = float(soc.static_power_w + sum(pu.idle_power_w for pu in soc.pus.values()))
    if not rows:
        raise input_error(src, None, "no rows", "add one row per graph, PU and block")
    time_col, time_scale = time_cols[0], (1.0 if time_cols[0] == "time_s" else 1e-3)
    power_col = power_cols[0] if power_cols else None
    power_scale = 1.0 if power_col == "power_w" else 1e-3
    graphs: "OrderedDict[str, dict]" = OrderedDict()
    for line, raw in enumerate(rows, start=2):
        row = {rename.get((k or "").strip(), (k or "").strip()): (v or "").strip() for k, v in raw.items()
               if k is not None}
        graph, pu, block = row.get("graph", ""), row.get("pu", ""), row.get("block", "")
        for column, value in (("graph", graph), ("pu", pu), ("block", block)):
            if not value:
                raise input_error(src, f"row {line}, column {column!r}", "empty", f"give the {column} name")
        if pu not in soc.pus:
            raise input_error(src, f"row {line}, column 'pu'", f"SoC {soc.name!r} has no PU {pu!r}",
                              f"use one of {', '.join(soc.pu_names)}, or the --soc they were measured on")
        phase = (row.get("phase", "") or "task").lower()
        phase = _PHASE_ALIASES.get(phase, phase)
        if phase not in PHASES:
            raise input_error(src, f"row {line}, column '{phase_column}'", f"unknown phase {phase!r}",
                              "use in, task or out (or leave it empty for task)")
        if not row.get(time_col):
            raise input_error(src, f"row {line}, column {time_col!r}", "empty", "give the measured time")
        seconds = _number(src, line, time_col, row[time_col], "the time") * time_scale
        watts = None
        frequency = None
        if freq_col and row.get(freq_col):
            frequency = _number(src, line, freq_col, row[freq_col], "the frequency" + (
                " in MHz" if freq_col == "freq" else " in Hz")) * (1e6 if freq_col == "freq" else 1.0)
            if frequency <= 0:
                raise input_error(src, f"row {line}, column {freq_col!r}", "must be > 0",
                                  "give the operating point's frequency, or leave it empty")
        if power_col and row.get(power_col):
            watts = _number(src, line, power_col, row[power_col], "the power") * power_scale
            if board_power and watts < baseline:
                raise input_error(src, f"row {line}, column {power_col!r}", f"board power {watts:g} W of graph "
                                  f"{graph!r}, block {block!r} on {pu} is below the board's baseline {baseline:g} W "
                                  f"(static {soc.static_power_w:g} W + idle of every PU of {soc.name}) that "
                                  "--board-power takes off", "check that it is a whole-board reading, or drop "
                                  "--board-power if it is the PU's own draw")
        g = graphs.setdefault(graph, {"order": OrderedDict(), "cells": {}, "deps": {}, "out": {}, "freqs": {}})
        g["order"].setdefault(block, line)
        known = g["freqs"].setdefault(pu, (frequency is not None, line))
        if known[0] != (frequency is not None):
            raise input_error(src, f"row {line}, column {freq_col!r}", f"PU {pu!r} of graph {graph!r} has a "
                              f"frequency on row {known[1] if known[0] else line} but none on row "
                              f"{line if known[0] else known[1]}", "give a frequency on every row of the PU or "
                              "on none")
        key = (block, pu, frequency, phase)
        if key in g["cells"]:
            at = "" if frequency is None else f", {frequency / 1e6:g} MHz"
            raise input_error(src, f"row {line}",
                              f"duplicate measurement of graph {graph!r}, block {block!r}, "
                              f"PU {pu!r}{at}, phase {phase!r} (first on row {g['cells'][key][2]})",
                              "give each graph, block, PU, frequency and phase once")
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
    n, k = len(topo), len(soc.pu_names)
    freqs: Dict[str, List[Optional[float]]] = {}
    for (_block, pu, f, _phase) in g["cells"]:
        freqs.setdefault(pu, [])
        if f not in freqs[pu]:
            freqs[pu].append(f)
    for pu in freqs:
        freqs[pu].sort(key=lambda f: -1.0 if f is None else f)
    t_ops = {pu: np.full((n, len(fs)), np.inf) for pu, fs in freqs.items()}
    energy: Dict[Tuple[str, str, Optional[float]], List[float]] = {}
    lines: Dict[Tuple[str, str], int] = {}
    for (block, pu, f, _phase), (seconds, watts, line) in g["cells"].items():
        i, o = pos[block], freqs[pu].index(f)
        lines.setdefault((block, pu), line)
        t_ops[pu][i, o] = seconds if not np.isfinite(t_ops[pu][i, o]) else t_ops[pu][i, o] + seconds
        if watts is not None:
            acc = energy.setdefault((block, pu, f), [0.0, 0.0])
            acc[0] += watts * seconds
            acc[1] += seconds
    for pu, fs in freqs.items():
        ran = np.isfinite(t_ops[pu])
        partial = np.where(ran.any(axis=1) & ~ran.all(axis=1))[0]
        if partial.size:
            b = topo[int(partial[0])]
            missing = [f for f, x in zip(fs, ran[partial[0]]) if not x and f is not None]
            raise input_error(src, f"row {lines[(b, pu)]}", f"block {b!r} of graph {name!r} has rows on {pu} but "
                              f"none at {missing[0] / 1e6:g} MHz", f"give its time at every frequency of {pu} "
                              f"({', '.join(f'{x / 1e6:g}' for x in fs if x is not None)} MHz)")
    time_s = np.full((n, k), np.inf)
    power = np.tile(np.array([soc.pus[p].active_power_w for p in soc.pu_names]), (n, 1))
    tables: List[Optional[PUOperatingPoints]] = [None] * k
    given: Dict[int, np.ndarray] = {}
    p_ops = {pu: np.full((n, len(fs)), soc.pus[pu].active_power_w) for pu, fs in freqs.items()}
    measured_power: Dict[Tuple[str, str, Optional[float]], float] = {}
    for pu, fs in freqs.items():
        given[soc.pu_names.index(pu)] = np.zeros((n, len(fs)), dtype=bool)
    for (block, pu, f), (joules, seconds) in energy.items():
        if seconds > 0:
            measured_power[(block, pu, f)] = joules / seconds
            i, o = pos[block], freqs[pu].index(f)
            p_ops[pu][i, o] = joules / seconds
            given[soc.pu_names.index(pu)][i, o] = True
    for pu, fs in freqs.items():
        j = soc.pu_names.index(pu)
        time_s[:, j], power[:, j] = t_ops[pu][:, -1], p_ops[pu][:, -1]
        if fs[-1] is not None:
            spec = soc.pus[pu].operating_points
            tables[j] = PUOperatingPoints(frequency_hz=tuple(float(f) for f in fs if f is not None),
                                          time_s=t_ops[pu], active_power_w=p_ops[pu],
                                          transition_s=spec.transition_s if spec is not None else 0.0)
    out_bytes = {b: float(g["out"].get(b, 0.0)) for b in topo}
    problem = MappingProblem(
        block_names=topo, preds=[tuple(sorted(pos[d] for d in deps[b])) for b in topo],
        edge_nbytes={(pos[d], pos[b]): out_bytes[d] for b in topo for d in deps[b]},
        pu_names=list(soc.pu_names), time_s=time_s, active_power_w=power,
        idle_power_w=np.array([soc.pus[p].idle_power_w for p in soc.pu_names]),
        static_power_w=soc.static_power_w,
        alpha_s=soc.alpha_matrix(), beta_bytes_per_s=soc.beta_matrix(), name=name,
        operating_points=tables if any(t is not None for t in tables) else None)
    if problem.operating_points is None:  # one point per PU: the table gets plain columns
        given = {j: m[:, -1:] for j, m in given.items()}
    return ImportedGraph(name, problem, out_bytes, measured_power, given)


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
        write_block_table(path, graph.problem, powers_given=graph.powers_given)
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
                table = p.operating_points[j] if p.operating_points is not None else None
                points = [(None, float(p.time_s[i, j]))] if table is None else [
                    (f, float(table.time_s[i, o])) for o, f in enumerate(table.frequency_hz)]
                for f, t in points:
                    if np.isfinite(t):
                        at = "" if f is None else f"@{format_mhz(f)}"
                        rows.append(Measurement(soc.name, pu, f"import:{graph.name}/{block}{at}", "imported", 1,
                                                "import", t, t, 1, now, f"import:{Path(src).name}", "block",
                                                int(graph.out_bytes.get(block, 0.0)),
                                                graph.power_w.get((block, pu, f)), f))
    return rows
