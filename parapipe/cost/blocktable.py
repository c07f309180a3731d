"""Block tables: pose a mapping problem without ONNX, from a CSV of per-block measurements.

Format (one row per block, header required)::

    block,deps,out_bytes,t_big,t_gpu,p_big,p_gpu
    conv1,,802816,0.0121,0.0093,,
    inc3a_1x1,conv1,200704,0.0011,0.0009,3.1,1.2
    inc3a_cat,inc3a_1x1;inc3a_3x3,802816,0.0002,,,

* ``block``: unique name; ``deps``: semicolon-separated predecessor blocks (empty for a source);
* ``out_bytes``: bytes of the block's output (moved along every edge leaving it);
* ``t_<pu>``: seconds on that PU; empty = the PU cannot run the block;
* ``p_<pu>`` (optional): watts the PU draws while running that block (default: the PU's ``active_power_w``);
* ``dram_nbytes`` (optional): bytes the block reads and writes in DRAM (operator inputs, outputs and weights),
  for the memory-contention term of :mod:`parapipe.cost.pipeline_terms` (without it: the bytes on its edges).

**Operating points** (DVFS, :mod:`parapipe.soc.operating_points`): a PU's times and powers per frequency go in
columns ``t_<pu>@<MHz>`` and ``p_<pu>@<MHz>`` (``t_big@1000,t_big@1800,p_big@1000,p_big@1800``) instead of
``t_<pu>``/``p_<pu>``. The table's frequencies of a PU ARE its operating points in the problem, ascending; the
highest is the one :attr:`MappingProblem.time_s` holds, and ``evaluate --mapping big@1000,...`` names them. A
block the PU cannot run leaves every ``t_<pu>@`` cell empty. The profile's ``transition_s`` of the PU (when the
profile gives the PU an ``operating_points`` table; else 0) and its static and idle powers still apply. A
missing ``p_<pu>@<MHz>`` cell (or column) takes: when the profile's table of the PU has a point at that
frequency, the power scaled from the block's given power at the highest frequency of the table that has one and
matches a profile point, by the ratio of the two points'
:meth:`~parapipe.soc.operating_points.OperatingPoints.dynamic_ratio` (the profile's active power at that point
when the block gives none); otherwise the PU's ``active_power_w``. A PU without ``@`` columns has one point (a
profile table of that PU is then not used: a block table has no FLOPs to scale times by).

**What the watts are** (``board_power``; ``--board-power`` on ``evaluate``, ``optimize``, ``calibrate`` and
``import``):

* default: ``p_`` is the PU's own draw while it runs the block; the cost model adds the board's static power and
  every PU's idle power for the whole period (:mod:`parapipe.cost.evaluate`).
* ``board_power=True``: ``p_`` is a whole-board reading taken while that PU ran the block (what a power meter
  on the board's supply gives). The model then adds nothing on top: the block's power above its PU's idle becomes
  ``p_board − B`` with the baseline ``B = static_power_w + Σ_all PUs idle_power_w`` (of the profile, over the
  PUs of the problem), i.e. its whole-PU power is ``p_board − B + idle_power_w[pu]``. With the energy model
  ``E = Σ t·(p − P_idle) + B·P``, a mapping that runs on one PU at a time with no gap (period ``P = Σ t``)
  costs exactly ``Σ t·p_board``. A reading below ``B`` is refused. Only given cells are readings: a missing
  cell keeps the PU-draw default above.

PU names must exist in the SoC profile given with ``--soc``; idle/static power and transfer costs come from it.
Rows may come in any order; they are sorted topologically (ties in file order).

**Stage-level times** (optional): ``<name>.ranges.csv`` beside ``<name>.blocks.csv``, one row per set of blocks
timed as one sub-model on one PU (:func:`parapipe.measure.submodels.measure_submodels`; a stage's sub-model keeps
the fusions its isolated blocks lose)::

    first,last,pu,time_s
    conv1,inc3a_cat,big,0.0131

``first``..``last``: the sub-model's first and last block in the table's (topological) order, every block
between them included; ``time_s``: seconds on ``pu``. An optional ``blocks`` column (``;``-separated block names,
``first`` and ``last`` left empty) lists the blocks instead, for a sub-model that is not a contiguous range (a
task of a multi-PU stage, :func:`parapipe.cost.tasks.stage_tasks`). Both read into
:attr:`MappingProblem.submodel_time_s`; a stage or task that runs exactly those blocks as one sub-model on that PU
takes this time instead of its block sum. :func:`write_block_table` writes the table when the problem has such
times.
"""
from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import networkx as nx
import numpy as np

from ..errors import input_error
from .problem import MappingProblem, PUOperatingPoints, SubmodelKey, is_block_range

__all__ = ["read_block_table", "write_block_table", "submodel_table_path", "read_submodel_table",
           "board_baseline_w"]

log = logging.getLogger(__name__)


def _number(src: str, where: str, text: str, what: str, fix: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise input_error(src, where, f"{what} {text!r} is not a number", fix) from None
    if math.isnan(v) or v < 0 or math.isinf(v):
        raise input_error(src, where, f"{what} must be a finite number >= 0, got {text!r}", fix)
    return v


def _read_csv(path, what: str) -> tuple:
    """``(rows as dicts, header)`` of a CSV table; InputError naming the file if it cannot be read."""
    src = str(path)
    try:
        # utf-8-sig: spreadsheet programs start CSVs with a byte-order mark; newline="": CRLF rows read as rows
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except OSError as exc:
        raise input_error(src, None, f"cannot read {what} ({exc.strerror or exc})", "check the path") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise input_error(src, None, f"not a CSV file ({exc})", "write a comma-separated table with a header") from None
    return rows, header


def board_baseline_w(problem: MappingProblem) -> float:
    """The baseline a whole-board reading includes, W: ``static_power_w + Σ idle_power_w`` over the problem's PUs
    (module docstring, ``board_power``)."""
    return float(problem.static_power_w + problem.idle_power_w.sum())


def _split_column(src: str, column: str, soc) -> Tuple[str, str, Optional[float]]:
    """``t_big@1800`` -> ``("t", "big", 1.8e9)``; ``p_gpu`` -> ``("p", "gpu", None)``."""
    from ..soc.operating_points import parse_mhz

    if not (column.startswith("t_") or column.startswith("p_")):
        raise input_error(src, f"column {column!r}", "unknown column",
                          "use block, deps, out_bytes, t_<pu>[@<MHz>], p_<pu>[@<MHz>], dram_nbytes")
    pu, at, mhz = column[2:].partition("@")
    if pu not in soc.pus:
        raise input_error(src, f"column {column!r}", f"SoC {soc.name!r} has no PU {pu!r}",
                          f"use PUs of the SoC: {', '.join(soc.pu_names)}")
    if not at:
        return column[0], pu, None
    try:
        return column[0], pu, parse_mhz(mhz)
    except ValueError:
        raise input_error(src, f"column {column!r}", f"{mhz!r} is not a frequency in MHz",
                          f"write {column[:2]}{pu}@<MHz>, e.g. {column[:2]}{pu}@1800") from None


def _pu_columns(src: str, header: Sequence[str], soc) -> Dict[str, Tuple[List[Optional[float]], Dict, Dict]]:
    """Per PU with a ``t_`` column: ``(frequencies, {frequency: t column}, {frequency: p column})``; frequencies
    ascending, ``[None]`` for a PU with a plain ``t_<pu>`` column (its one point)."""
    from ..soc.operating_points import MHZ_MATCH_RTOL, format_mhz

    times: Dict[str, Dict[Optional[float], str]] = {}
    powers: Dict[str, Dict[Optional[float], str]] = {}
    for c in header:
        if c in ("block", "deps", "out_bytes", "dram_nbytes"):
            continue
        kind, pu, f = _split_column(src, c, soc)
        into = (times if kind == "t" else powers).setdefault(pu, {})
        same = [g for g in into if g is not None and f is not None and abs(g - f) <= MHZ_MATCH_RTOL * g]
        if c in into.values() or (f is None and None in into) or same:
            raise input_error(src, f"column {c!r}", "given twice", "keep one column per PU and frequency")
        into[f] = c
    out: Dict[str, Tuple[List[Optional[float]], Dict, Dict]] = {}
    for pu, cols in times.items():
        if None in cols and len(cols) > 1:
            raise input_error(src, f"column 't_{pu}'", f"given with t_{pu}@<MHz> columns",
                              f"give either t_{pu} (one operating point) or one t_{pu}@<MHz> column per frequency")
        out[pu] = (sorted(cols, key=lambda f: -1.0 if f is None else f), cols, {})
    for pu, cols in powers.items():
        freqs = out[pu][0] if pu in out else [None]
        for f, c in cols.items():
            match = [g for g in freqs if (g is None and f is None) or (
                g is not None and f is not None and abs(g - f) <= MHZ_MATCH_RTOL * g)]
            if not match:
                want = f"t_{pu}" if f is None else f"t_{pu}@{format_mhz(f)}"
                raise input_error(src, f"column {c!r}", f"no {want} column for it",
                                  f"give the times at that frequency ({want}) or drop the column")
            if pu in out:
                out[pu][2][match[0]] = c
    return out


def read_block_table(path, soc, name: Optional[str] = None, board_power: bool = False) -> MappingProblem:
    """Read a block table CSV into a :class:`MappingProblem` on ``soc`` (a ``parapipe.soc.SoC``).

    ``board_power``: the ``p_`` cells are whole-board readings (module docstring); default the PUs' own draw.

    Raises
    ------
    InputError
        Unreadable file; missing ``block``/``deps``/``out_bytes`` column; no ``t_<pu>`` column; a PU column the
        SoC lacks; a column given twice; ``t_<pu>`` next to ``t_<pu>@<MHz>``; a ``p_`` column without its
        ``t_`` column; a block with times at some of a PU's frequencies only; duplicate block; unknown
        dependency; a cycle; a negative or non-numeric value; with ``board_power``, a reading below the board's
        baseline — each naming the file, row/column or block, and the fix.
    InfeasibleError
        A block that no PU can run (every ``t_`` cell empty).
    """
    src = str(path)
    rows, header = _read_csv(path, "block table")
    if not rows:
        raise input_error(src, None, "no rows", "add a header and one row per block")
    for col in ("block", "deps", "out_bytes"):
        if col not in header:
            raise input_error(src, f"column {col!r}", "missing", "header must have block,deps,out_bytes,t_<pu>…")
    columns = _pu_columns(src, header, soc)
    if not columns:
        raise input_error(src, "columns", "no t_<pu> column", "add one column of seconds per PU, e.g. t_gpu")
    names: List[str] = []
    seen: Dict[str, int] = {}
    for i, r in enumerate(rows, start=2):
        b = (r.get("block") or "").strip()
        if not b:
            raise input_error(src, f"row {i}, column 'block'", "empty block name", "give every block a name")
        if b in seen:
            raise input_error(src, f"row {i}, block {b!r}", f"duplicate block (first on row {seen[b]})",
                              "give every block a unique name")
        seen[b] = i
        names.append(b)
    g = nx.DiGraph()
    g.add_nodes_from(names)
    deps: Dict[str, List[str]] = {}
    for i, (b, r) in enumerate(zip(names, rows), start=2):
        ds = [d.strip() for d in (r.get("deps") or "").split(";") if d.strip()]
        for d in ds:
            if d not in seen:
                raise input_error(src, f"row {i}, block {b!r}, column 'deps'", f"unknown dependency {d!r}",
                                  "name blocks defined in the 'block' column")
            g.add_edge(d, b)
        deps[b] = ds
    try:
        cycle = nx.find_cycle(g)
        raise input_error(src, "deps", f"dependency cycle {' -> '.join(u for u, _ in cycle)} -> {cycle[0][0]}",
                          "the blocks must form a DAG")
    except nx.NetworkXNoCycle:
        pass
    order = list(nx.lexicographical_topological_sort(g, key=lambda b: seen[b]))
    index = {b: k for k, b in enumerate(order)}
    row_of = {b: r for b, r in zip(names, rows)}
    n, k = len(order), len(soc.pu_names)
    idle = np.array([soc.pus[p].idle_power_w for p in soc.pu_names])
    baseline = float(soc.static_power_w + idle.sum())
    # per PU: times and powers (own draw; NaN = no cell) at each of its points
    t_ops = {pu: np.full((n, len(fs)), np.inf) for pu, (fs, _, _) in columns.items()}
    p_ops = {pu: np.full((n, len(fs)), np.nan) for pu, (fs, _, _) in columns.items()}
    out_bytes = np.zeros(n)
    dram = np.zeros(n) if "dram_nbytes" in header else None
    for b in order:
        j, r, line = index[b], row_of[b], seen[b]
        out_bytes[j] = _number(src, f"row {line}, column 'out_bytes'", (r["out_bytes"] or "0").strip(),
                               "out_bytes", "give bytes as a number")
        if dram is not None:
            dram[j] = _number(src, f"row {line}, column 'dram_nbytes'", (r["dram_nbytes"] or "0").strip(),
                              "dram_nbytes", "give bytes as a number")
        for pu, (freqs, tcols, pcols) in columns.items():
            given = []
            for o, f in enumerate(freqs):
                cell = (r.get(tcols[f]) or "").strip()
                if cell:
                    t_ops[pu][j, o] = _number(src, f"row {line}, column {tcols[f]!r}", cell, "time",
                                              "give seconds >= 0, or leave empty if the PU cannot run it")
                given.append(bool(cell))
                pcell = (r.get(pcols[f]) or "").strip() if f in pcols else ""
                if pcell:
                    where = f"row {line}, block {b!r}, column {pcols[f]!r}"
                    watts = _number(src, where, pcell, "power", "give watts >= 0")
                    if board_power:
                        if watts < baseline:
                            raise input_error(src, where, f"board power {watts:g} W is below the board's baseline "
                                              f"{baseline:g} W (static {soc.static_power_w:g} W + idle of "
                                              f"{', '.join(soc.pu_names)} {idle.sum():g} W) that --board-power "
                                              "takes off", "check that it is a whole-board reading, or drop "
                                              "--board-power if it is the PU's own draw")
                        watts = watts - baseline + idle[soc.pu_names.index(pu)]
                    p_ops[pu][j, o] = watts
            if any(given) and not all(given):
                missing = [tcols[f] for f, x in zip(freqs, given) if not x]
                raise input_error(src, f"row {line}, block {b!r}, column {missing[0]!r}", f"empty while other "
                                  f"t_{pu}@ columns give a time", f"give the block's time at every frequency of "
                                  f"{pu}, or none if {pu} cannot run it")
    t = np.full((n, k), np.inf)
    pw = np.tile(np.array([soc.pus[p].active_power_w for p in soc.pu_names]), (n, 1))
    tables: List[Optional[PUOperatingPoints]] = [None] * k
    for pu, (freqs, _, _) in columns.items():
        p = soc.pu_names.index(pu)
        power = _fill_powers(p_ops[pu], freqs, soc.pus[pu])
        t[:, p], pw[:, p] = t_ops[pu][:, -1], power[:, -1]
        if freqs[-1] is not None:
            spec = soc.pus[pu].operating_points
            tables[p] = PUOperatingPoints(frequency_hz=tuple(float(f) for f in freqs if f is not None),
                                          time_s=t_ops[pu], active_power_w=power,
                                          transition_s=spec.transition_s if spec is not None else 0.0)
    preds = [tuple(sorted(index[d] for d in deps[b])) for b in order]
    edges = {(index[d], index[b]): float(out_bytes[index[d]]) for b in order for d in deps[b]}
    for b in order:
        if not np.isfinite(t[index[b]]).any():
            from ..errors import InfeasibleError

            raise InfeasibleError(f"{src}: row {seen[b]}, block {b!r}: no PU can run it (every t_ cell is empty); "
                                  "give its time on at least one PU")
    problem = MappingProblem(block_names=order, preds=preds, edge_nbytes=edges, pu_names=list(soc.pu_names),
                             time_s=t, active_power_w=pw, idle_power_w=idle,
                             static_power_w=soc.static_power_w, alpha_s=soc.alpha_matrix(),
                             beta_bytes_per_s=soc.beta_matrix(), name=name or Path(src).stem,
                             block_nbytes=None if dram is None else np.outer(dram, np.ones(k)),
                             operating_points=tables if any(x is not None for x in tables) else None)
    submodels = submodel_table_path(path)
    if submodels.is_file():
        problem.submodel_time_s = read_submodel_table(submodels, problem) or None
    return problem


def _fill_powers(given: np.ndarray, freqs: Sequence[Optional[float]], spec) -> np.ndarray:
    """A PU's powers per block and point (own draw, W) with the missing cells (NaN) filled as the module
    docstring says: scaled along the profile's operating points where they match, else ``active_power_w``."""
    out = given.copy()
    table = spec.operating_points
    ratio = table.dynamic_ratio(spec.active_power_w, spec.idle_power_w) if table is not None and len(table) > 1 \
        else None
    at = [table.index_of(f) if table is not None and ratio is not None and f is not None else None for f in freqs]
    idle, active = spec.idle_power_w, spec.active_power_w
    if ratio is None:
        return np.where(np.isnan(out), active, out)
    known = [(o, i) for o, i in enumerate(at) if i is not None and ratio[i] > 0]
    for j in range(out.shape[0]):
        ref = next(((o, i) for o, i in reversed(known) if not np.isnan(given[j, o])), None)
        for o, i in enumerate(at):
            if not np.isnan(out[j, o]):
                continue
            if i is None:
                out[j, o] = active
            elif ref is not None:
                out[j, o] = idle + (given[j, ref[0]] - idle) * ratio[i] / ratio[ref[1]]
            else:
                out[j, o] = idle + (active - idle) * ratio[i]
    return out


def _table_stem(path: Path) -> str:
    name = path.name
    for suffix in (".blocks.csv", ".csv"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def submodel_table_path(blocks_path: Union[str, Path]) -> Path:
    """``DIR/<name>.ranges.csv`` for ``DIR/<name>.blocks.csv`` (or ``DIR/<name>.csv``)."""
    path = Path(blocks_path)
    return path.with_name(_table_stem(path) + ".ranges.csv")


def read_submodel_table(path: Union[str, Path], problem: MappingProblem) -> Dict[SubmodelKey, float]:
    """Read a stage-level time table (``<name>.ranges.csv``, module docstring) for ``problem``:
    ``{(pu index, sorted block indices): seconds}``, the form of :attr:`MappingProblem.submodel_time_s`.

    Raises
    ------
    InputError
        Unreadable file, a missing column, an unknown block or PU, ``last`` before ``first``, a row with both or
        neither of ``first``/``last`` and ``blocks``, a time that is not a finite number > 0, the same blocks on
        the same PU on two ``first,last`` rows or on two ``blocks`` rows — naming the file, row and field. The
        same blocks on the same PU once as each (tables written when the two were kept apart) take the earlier
        row's time, with a warning logged.
    """
    src = str(path)
    rows, header = _read_csv(path, "range table")
    if not header:
        raise input_error(src, None, "no header", "start the file with the line first,last,pu,time_s")
    for col in ("first", "last", "pu", "time_s"):
        if col not in header:
            raise input_error(src, f"column {col!r}", "missing", "header must be first,last,pu,time_s[,blocks]")
    index = {b: i for i, b in enumerate(problem.block_names)}
    times: Dict[SubmodelKey, float] = {}
    seen: Dict[SubmodelKey, Tuple[int, bool]] = {}  # first row of each sub-model, and whether it listed blocks
    twice: List[int] = []
    for i, r in enumerate(rows, start=2):
        where = f"row {i}"
        if r.get(None):  # csv.DictReader keeps the fields beyond the header under None
            raise input_error(src, where, f"{len(header) + len(r[None])} fields, the header has {len(header)}",
                              f"give {','.join(header)} on every row")
        listed = [b.strip() for b in (r.get("blocks") or "").split(";") if b.strip()]
        if listed:
            if (r.get("first") or "").strip() or (r.get("last") or "").strip():
                raise input_error(src, where, "gives both first/last and blocks",
                                  "a row is a range (first,last) or a task (blocks), not both")
            for b in listed:
                if b not in index:
                    raise input_error(src, f"{where}, column 'blocks'", f"unknown block {b!r}",
                                      "name blocks of the block table beside it")
            members = sorted({index[b] for b in listed})
            what = "task " + ";".join(problem.block_names[v] for v in members)
        else:
            ends = []
            for col in ("first", "last"):
                b = (r.get(col) or "").strip()
                if b not in index:
                    raise input_error(src, f"{where}, column {col!r}", f"unknown block {b!r}",
                                      "name blocks of the block table beside it")
                ends.append(index[b])
            if ends[1] < ends[0]:
                raise input_error(src, where, f"block {r['last']!r} comes before {r['first']!r} in the table's "
                                  "order", "give the range's first block first")
            members = list(range(ends[0], ends[1] + 1))
            what = f"range {r['first'].strip()}..{r['last'].strip()}"
        pu = (r.get("pu") or "").strip()
        if pu not in problem.pu_names:
            raise input_error(src, f"{where}, column 'pu'", f"unknown PU {pu!r}",
                              f"use PUs of the SoC: {', '.join(problem.pu_names)}")
        p = problem.pu_names.index(pu)
        cannot = [problem.block_names[v] for v in members if not np.isfinite(problem.time_s[v, p])]
        if cannot:
            raise input_error(src, f"{where}, column 'pu'", f"PU {pu!r} cannot run block {cannot[0]!r} of the range "
                              "(no time for it in the block table)", "time the range on a PU that runs all its blocks")
        text = (r.get("time_s") or "").strip()
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not (v > 0 and math.isfinite(v)):
            raise input_error(src, f"{where}, column 'time_s'", f"must be a finite number of seconds > 0, got {text!r}",
                              "give the range's measured time in seconds")
        key = (p, tuple(members))
        if key in seen:
            row, was_listed = seen[key]
            if was_listed == bool(listed):
                raise input_error(src, where, f"{what} on {pu} is already on row {row}",
                                  "give each range and PU once")
            twice.append(i)  # once as first,last and once as blocks: the first row's time stands
            continue
        seen[key] = (i, bool(listed))
        times[key] = v
    if twice:
        log.warning("%s: row(s) %s give blocks already on an earlier row, once as first,last and once as a "
                    "blocks list (one sub-model on one PU); the earlier row's time is used", src,
                    ", ".join(map(str, twice[:5])) + (f" and {len(twice) - 5} more" if len(twice) > 5 else ""))
    return times


def write_block_table(path: Union[str, Path], problem: MappingProblem, pus: Optional[Sequence[str]] = None,
                      powers_given: Optional[Dict[int, np.ndarray]] = None) -> None:
    """Write ``problem`` as a block table CSV (atomically: temporary file, then rename), and its stage-level
    times (:attr:`~parapipe.cost.problem.MappingProblem.submodel_time_s`, on ``pus``) as the range table beside it
    (an old range table there is removed when the problem has none): a contiguous sub-model as a
    ``first,last`` row, any other with a ``blocks`` list.

    ``out_bytes`` of a block is the largest of its outgoing edges; ``dram_nbytes`` (written when the problem
    has :attr:`~parapipe.cost.problem.MappingProblem.block_nbytes`) the largest over the PUs. A PU with
    operating points (:attr:`~parapipe.cost.problem.MappingProblem.operating_points`) gets one ``t_<pu>@<MHz>``
    and one ``p_<pu>@<MHz>`` column per point; the watts are the problem's (the PU's own draw).
    ``powers_given``: per PU index, a boolean array (blocks, the PU's points) of the power cells to write; the
    others, and every cell of a PU it does not list, are left empty (they read back as the defaults of the module
    docstring). Default (None or empty): every cell.
    """
    pus = list(pus or problem.pu_names)
    _write_rows(Path(path), _block_rows(problem, pus, powers_given or {}))
    times = [(p, blocks, t) for (p, blocks), t in (problem.submodel_time_s or {}).items()
             if problem.pu_names[p] in pus]
    ranges = sorted((blocks[0], blocks[-1] + 1, p, t) for p, blocks, t in times if is_block_range(blocks))
    tasks = sorted((p, blocks, t) for p, blocks, t in times if not is_block_range(blocks))
    if ranges or tasks:
        _write_rows(submodel_table_path(path), [["first", "last", "pu", "time_s"] + (["blocks"] if tasks else [])] + [
            [problem.block_names[a], problem.block_names[b - 1], problem.pu_names[p], repr(float(t))]
            + ([""] if tasks else []) for a, b, p, t in ranges] + [
            ["", "", problem.pu_names[p], repr(float(t)), ";".join(problem.block_names[v] for v in blocks)]
            for p, blocks, t in tasks])
    else:  # a range table left from an earlier problem would be read with this one
        submodel_table_path(path).unlink(missing_ok=True)


def _write_rows(path: Path, rows: List[list]) -> None:
    from ..files import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as fh:
            csv.writer(fh).writerows(rows)


def _block_rows(problem: MappingProblem, pus: List[str], powers_given: Dict[int, np.ndarray]) -> List[list]:
    from ..soc.operating_points import format_mhz

    idx = [problem.pu_names.index(p) for p in pus]
    out = np.zeros(problem.n_blocks)
    for (u, _), nb in problem.edge_nbytes.items():
        out[u] = max(out[u], nb)
    dram = problem.block_nbytes[:, idx].max(axis=1) if problem.block_nbytes is not None else None
    # per written PU: (column suffixes, times (n, m), powers (n, m))
    cols = []
    for i in idx:
        table = problem.operating_points[i] if problem.operating_points is not None else None
        if table is None:
            cols.append(([problem.pu_names[i]], problem.time_s[:, i:i + 1], problem.active_power_w[:, i:i + 1]))
        else:
            cols.append(([f"{problem.pu_names[i]}@{format_mhz(f)}" for f in table.frequency_hz], table.time_s,
                         table.active_power_w))
    rows = [["block", "deps", "out_bytes"] + [f"t_{c}" for names, _, _ in cols for c in names]
            + [f"p_{c}" for names, _, _ in cols for c in names] + (["dram_nbytes"] if dram is not None else [])]
    for j, b in enumerate(problem.block_names):
        times = ["" if not np.isfinite(tt[j, o]) else repr(float(tt[j, o])) for _, tt, _ in cols
                 for o in range(tt.shape[1])]
        # with powers_given, only measured cells (a PU without any measured power writes none: a default would
        # read back as a measurement, and as a board reading under --board-power)
        powers = [repr(float(pp[j, o])) if (powers_given[i][j, o] if i in powers_given else not powers_given)
                  else "" for i, (_, _, pp) in zip(idx, cols) for o in range(pp.shape[1])]
        rows.append([b, ";".join(problem.block_names[d] for d in problem.preds[j]), repr(float(out[j]))]
                    + times + powers + ([repr(float(dram[j]))] if dram is not None else []))
    return rows
