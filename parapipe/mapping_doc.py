"""The ``pareto.json`` document: writing a search result and reading it back with validation.

Schema (``schema_version`` 1)::

    {"schema_version": 1,
     "model": {"name": str, "sha256": str},
     "soc": str,
     "objectives": [str, ...],
     "search": {"max_blocks": int | null, "seed": int, "search_s": float, ..., "exact": bool,
                "exact_max_cells": int, "cells": int, "spaces": {name: {"exact": bool, ...}},
                "cpsat": {"time_unit_s": float, ...}, "bound": {"period_method": str, ...}},
     "blocks": {block name: [operator names]},
     "bounds": {"period_lb_s": float, "latency_lb_s": float},
     "points": [{"id", "strategy" (parapipe | pipeline | parallel | single), "pareto": bool,
                 "throughput_per_s", "period_s", "latency_s", "energy_j", "period_gap", "latency_gap",
                 "pu_busy_s": {pu: s},
                 "mapping": {"stages": [{"pus", "blocks", "time_s", "input_s", "makespan_s", "schedule",
                                         "assignment": {block: pu}, "order": [block],
                                         "block_start_s": {block: s}, "block_finish_s": {block: s}}]}}]}

``*_gap`` is ``value / lower_bound - 1`` (0 for a period proved optimal: ``search.bound.period_proved_optimal``).
``search.exact`` is true when the front is exact for every space searched; ``search.spaces`` says, per space,
what bounded it otherwise (:class:`parapipe.search.passes.SpaceReport`).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from .errors import input_error
from .search.api import Point, SearchResult

SCHEMA_VERSION = 1
STRATEGIES = ("parapipe", "pipeline", "parallel", "single")
SELECTORS = ("best-throughput", "best-latency", "best-energy")


def _point_doc(result: SearchResult, point: Point) -> Dict[str, Any]:
    pr = result.problem
    names, pus = pr.block_names, pr.pu_names
    ev = point.evaluation
    stages = []
    for st, res, kind in zip(point.mapping.stages, ev.stage_results, point.stage_schedules):
        blocks = [names[v] for v in range(st.start, st.stop)]
        stages.append({
            "pus": [pus[p] for p in st.pus],
            "blocks": blocks,
            "time_s": res.time_s,
            "input_s": res.input_s,
            "makespan_s": res.makespan_s,
            "schedule": kind,
            "assignment": {names[v]: pus[st.pu_of(v)] for v in range(st.start, st.stop)},
            "order": [names[v] for v in st.block_order()],
            "block_start_s": {names[v]: res.start_s[v] for v in range(st.start, st.stop)},
            "block_finish_s": {names[v]: res.finish_s[v] for v in range(st.start, st.stop)},
        })
    b = result.bounds
    return {
        "id": point.id,
        "strategy": point.strategy,
        "pareto": point.pareto,
        "origin": point.origin,
        "throughput_per_s": ev.throughput_per_s,
        "period_s": ev.period_s,
        "latency_s": ev.latency_s,
        "energy_j": ev.energy_j,
        "period_gap": ev.period_s / b.period_lb_s - 1 if b.period_lb_s > 0 else None,
        "latency_gap": ev.latency_s / b.latency_lb_s - 1 if b.latency_lb_s > 0 else None,
        "pu_busy_s": {pus[p]: float(ev.busy_s[p]) for p in range(len(pus)) if ev.busy_s[p] > 0},
        "mapping": {"stages": stages},
    }


def result_to_doc(result: SearchResult, model_name: str, model_sha256: str, soc_name: str,
                  blocks: Optional[Dict[str, List[str]]] = None, search: Optional[Dict[str, Any]] = None
                  ) -> Dict[str, Any]:
    """The pareto.json document of ``result`` (schema in the module docstring)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "model": {"name": model_name, "sha256": model_sha256},
        "soc": soc_name,
        "objectives": list(result.objectives),
        "search": dict(search or {}, **{k: float(v) for k, v in result.stats.items()}, **result.info),
        "blocks": blocks or {},
        "bounds": {"period_lb_s": result.bounds.period_lb_s, "latency_lb_s": result.bounds.latency_lb_s},
        "points": [_point_doc(result, p) for p in result.points],
    }


def default_file_mode() -> int:
    """Mode a newly created file gets under the current umask (0666 & ~umask), e.g. 0o644."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_json_atomic(doc: Any, path: Path) -> None:
    """Write ``doc`` as JSON to ``path`` via a temporary file in the same folder and a rename.

    The file gets the usual permissions (0666 minus the umask), not mkstemp's private 0600.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_doc(path: str) -> Dict[str, Any]:
    """Read and validate a pareto.json document.

    Raises
    ------
    InputError
        Missing/unreadable file, not JSON, wrong schema version, missing fields — naming the file and field.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise input_error(str(p), None, f"cannot read mapping file ({exc.strerror or exc})",
                          "pass the pareto.json written by 'parapipe optimize'") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise input_error(str(p), f"line {exc.lineno}", f"not valid JSON ({exc.msg})",
                          "pass the pareto.json written by 'parapipe optimize'") from None
    if not isinstance(doc, dict):
        raise input_error(str(p), None, "not a pareto.json object", "pass the pareto.json written by 'parapipe optimize'")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise input_error(str(p), "schema_version", f"expected {SCHEMA_VERSION}, got {doc.get('schema_version')!r}",
                          "re-run 'parapipe optimize' with this version of parapipe")
    for key, typ in (("model", dict), ("soc", str), ("points", list), ("blocks", dict)):
        if not isinstance(doc.get(key), typ):
            raise input_error(str(p), key, "missing or of the wrong type", "re-run 'parapipe optimize'")
    if not isinstance(doc["model"].get("sha256"), str):
        raise input_error(str(p), "model.sha256", "missing", "re-run 'parapipe optimize'")
    for i, pt in enumerate(doc["points"]):
        for key in ("id", "strategy", "period_s", "latency_s", "energy_j", "mapping"):
            if key not in pt:
                raise input_error(str(p), f"points[{i}].{key}", "missing", "re-run 'parapipe optimize'")
    return doc


def select_point(doc: Dict[str, Any], selector: str, source: str = "--point") -> Dict[str, Any]:
    """The point named by id, or by ``best-throughput`` | ``best-latency`` | ``best-energy`` (parapipe front).

    Raises
    ------
    InputError
        If no point has that id.
    """
    pts = doc["points"]
    if selector in SELECTORS:
        front = [p for p in pts if p["strategy"] == "parapipe"] or pts
        key = {"best-throughput": "period_s", "best-latency": "latency_s", "best-energy": "energy_j"}[selector]
        return min(front, key=lambda p: (p[key], p["period_s"], p["latency_s"], p["energy_j"]))
    for p in pts:
        if p["id"] == selector:
            return p
    ids = ", ".join(p["id"] for p in pts[:12]) + (", ..." if len(pts) > 12 else "")
    raise input_error(source, None, f"no point {selector!r} in the mapping file",
                      f"use one of {', '.join(SELECTORS)} or a point id ({ids})")
