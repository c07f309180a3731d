"""Writing a search result as a :class:`~parapipe.mapping.model.ParetoDoc`, and the one reader of pareto.json."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from pydantic import ValidationError

from parapipe.errors import input_error
from parapipe.files import write_json_atomic
from parapipe.mapping.model import SCHEMA_VERSION, SELECTORS, DocBounds, ModelId, ParetoDoc, Point, SocRef
from parapipe.mapping.workload import WORKLOAD_KIND, WorkloadDoc, WorkloadPoint
from parapipe.soc.validation import to_input_error

__all__ = ["doc_from_result", "write_pareto", "parse_pareto", "read_pareto", "select_point", "check_model",
           "parse_workload", "read_workload", "parse_mapping", "read_mapping", "select_workload_point",
           "workload_doc_from_result"]

_FIX = "pass the pareto.json written by 'parapipe optimize'"


def _point_dict(result, point) -> Dict[str, Any]:
    pr = result.problem
    names, pus = pr.block_names, pr.pu_names
    ev = point.evaluation
    stages = []
    for st, res, kind in zip(point.mapping.stages, ev.stage_results, point.stage_schedules):
        stages.append({
            "pus": [pus[p] for p in st.pus],
            "blocks": [names[v] for v in range(st.start, st.stop)],
            "time_s": res.time_s, "input_s": res.input_s, "makespan_s": res.makespan_s, "schedule": kind,
            "assignment": {names[v]: pus[st.pu_of(v)] for v in range(st.start, st.stop)},
            "order": [names[v] for v in st.block_order()],
            "block_start_s": {names[v]: res.start_s[v] for v in range(st.start, st.stop)},
            "block_finish_s": {names[v]: res.finish_s[v] for v in range(st.start, st.stop)},
        })
        if st.ops is not None:
            stages[-1]["frequency_hz"] = _frequencies(pr, st)
        if st.replicas:
            stages[-1]["replicas"] = _replicas_dict(st, res, kind, names, pus, pr)
    b = result.bounds
    return {
        "id": point.id, "strategy": point.strategy, "pareto": point.pareto, "origin": point.origin,
        "throughput_per_s": ev.throughput_per_s, "period_s": ev.period_s, "latency_s": ev.latency_s,
        "energy_j": ev.energy_j,
        "period_gap": ev.period_s / b.period_lb_s - 1 if b.period_lb_s > 0 else None,
        "latency_gap": ev.latency_s / b.latency_lb_s - 1 if b.latency_lb_s > 0 else None,
        "pu_busy_s": {pus[p]: float(ev.busy_s[p]) for p in range(len(pus)) if ev.busy_s[p] > 0},
        "mapping": {"stages": stages},
    }


def _frequencies(problem, stage) -> Dict[str, float]:
    """``{pu: Hz}`` of a stage (or replica) that states operating points, for its PUs that have a table."""
    out = {}
    for p in stage.pus:
        f = problem.frequency_hz(p, stage.op_of(p))
        if f is not None:
            out[problem.pu_names[p]] = float(f)
    return out


def _replicas_dict(st, res, kind: str, names, pus, problem) -> List[Dict[str, Any]]:
    """The ``replicas`` of a replicated stage (:class:`parapipe.mapping.model.Replica`), the stage's own first."""
    out = []
    for r, (view, rr, share) in enumerate(zip(st.replica_stages(), res.replicas, res.shares)):
        entry: Dict[str, Any] = {
            "pus": [pus[p] for p in view.pus],
            "assignment": {names[v]: pus[view.pu_of(v)] for v in range(st.start, st.stop)},
            "order": [names[v] for v in view.block_order()], "share": share, "time_s": rr.time_s,
            "input_s": rr.input_s, "makespan_s": rr.makespan_s,
            "schedule": kind if r == 0 else ("single-pu" if len(view.pus) == 1 else "greedy")}
        if view.ops is not None:
            entry["frequency_hz"] = _frequencies(problem, view)
        out.append(entry)
    return out


def doc_from_result(result, model_name: str, model_sha256: str, soc: SocRef,
                    blocks: Optional[Dict[str, List[str]]] = None,
                    search: Optional[Dict[str, Any]] = None,
                    input_shapes: Optional[Dict[str, List[int]]] = None,
                    cost_notes: Optional[Dict[str, Any]] = None) -> ParetoDoc:
    """The document of a :class:`parapipe.search.api.SearchResult`.

    Parameters
    ----------
    result : SearchResult
    model_name, model_sha256 : str
    soc : SocRef
        From :func:`parapipe.app.resolve.soc_ref` of the profile searched.
    blocks : dict, optional
        Block name -> its operators, in the problem's block order (default: the problem's blocks, no ops).
    search : dict, optional
        Settings to record next to the search's own statistics.
    input_shapes, cost_notes : dict, optional
        The model's input shapes and cost notes (:func:`parapipe.app.prepare.model_notes`).
    """
    pr = result.problem
    return ParetoDoc(
        model=ModelId(name=model_name, sha256=model_sha256), soc=soc, objectives=list(result.objectives),
        search=dict(search or {}, **{k: float(v) for k, v in result.stats.items()}, **result.info),
        blocks=blocks if blocks is not None else {b: [] for b in pr.block_names},
        bounds=DocBounds(period_lb_s=result.bounds.period_lb_s, latency_lb_s=result.bounds.latency_lb_s),
        points=[Point.model_validate(_point_dict(result, p)) for p in result.points],
        input_shapes=input_shapes, cost_notes=cost_notes or {})


def write_pareto(doc: Union[ParetoDoc, WorkloadDoc], path: Path) -> None:
    """Write ``doc`` to ``path`` as JSON, atomically."""
    write_json_atomic(doc.model_dump(mode="json"), Path(path))


def parse_pareto(data: Any, source: str) -> ParetoDoc:
    """Validate a decoded pareto.json object (see :class:`ParetoDoc`).

    Raises
    ------
    InputError
        Wrong schema version, a missing or mistyped field, an inconsistent point — one line naming
        ``source`` and the field.
    """
    _check_version(data, source)
    if data.get("kind") == WORKLOAD_KIND:
        raise input_error(source, "kind", f"is a workload mapping of {_model_names(data)}, not of one model",
                          "pass it to a command that takes a workload ('parapipe run', 'parapipe deploy', "
                          "'parapipe plot --front' or '--gantt'), or optimize the model alone")
    try:
        return ParetoDoc.model_validate(data)
    except ValidationError as exc:
        raise to_input_error(exc, source, ParetoDoc, default_fix=_FIX) from None


def _check_version(data: Any, source: str) -> None:
    if not isinstance(data, dict):
        raise input_error(source, None, "not a pareto.json object", _FIX)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise input_error(source, "schema_version", f"expected {SCHEMA_VERSION}, got {version!r}",
                          "re-run 'parapipe optimize' with this version of parapipe")


def _model_names(data: Dict[str, Any]) -> str:
    """``models a, b`` of a decoded workload document, as far as it names them (for error messages)."""
    names = [m.get("model", {}).get("name", "?") if isinstance(m, dict) else "?" for m in data.get("models") or []]
    return "models " + ", ".join(map(str, names)) if names else "several models"


def parse_workload(data: Any, source: str) -> WorkloadDoc:
    """Validate a decoded workload pareto.json object (see :class:`parapipe.mapping.workload.WorkloadDoc`).

    Raises
    ------
    InputError
        A single-model document, a wrong schema version, a missing or mistyped field, an inconsistent point or
        model mapping — one line naming ``source`` and the field.
    """
    _check_version(data, source)
    if data.get("kind") != WORKLOAD_KIND:
        name = (data.get("model") or {}).get("name", "?") if isinstance(data.get("model"), dict) else "?"
        raise input_error(source, "kind", f"is the mapping of one model ({name}), not a workload",
                          "pass it to a command that takes one model, or optimize the workload's models "
                          "together (parapipe optimize A B ...)")
    try:
        return WorkloadDoc.model_validate(data)
    except ValidationError as exc:
        raise to_input_error(exc, source, WorkloadDoc, default_fix=_FIX) from None


def parse_mapping(data: Any, source: str) -> Union[ParetoDoc, WorkloadDoc]:
    """A decoded pareto.json of either kind: :class:`WorkloadDoc` when ``kind`` is ``workload``, else
    :class:`ParetoDoc`. Raises InputError as :func:`parse_pareto` and :func:`parse_workload` do."""
    _check_version(data, source)
    if data.get("kind") == WORKLOAD_KIND:
        return parse_workload(data, source)
    return parse_pareto(data, source)


def read_pareto(path: str) -> ParetoDoc:
    """Read and validate a pareto.json file of one model.

    Raises
    ------
    InputError
        Missing/unreadable file, not text, not JSON, a workload document, or :func:`parse_pareto`'s errors
        (naming the file and field).
    """
    return parse_pareto(_read_json(path), str(path))


def read_workload(path: str) -> WorkloadDoc:
    """Read and validate a workload pareto.json file (:func:`parse_workload`; a single-model document is
    refused in one line). Raises InputError as :func:`read_pareto`."""
    return parse_workload(_read_json(path), str(path))


def read_mapping(path: str) -> Union[ParetoDoc, WorkloadDoc]:
    """Read a pareto.json file of either kind (:func:`parse_mapping`). Raises InputError as
    :func:`read_pareto`."""
    return parse_mapping(_read_json(path), str(path))


def _read_json(path: str) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise input_error(str(p), None, f"cannot read mapping file ({exc.strerror or exc})", _FIX) from None
    except UnicodeDecodeError:
        raise input_error(str(p), None, "is not a text file (not UTF-8), so not a pareto.json", _FIX) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise input_error(str(p), f"line {exc.lineno}", f"not valid JSON ({exc.msg})", _FIX) from None
    return data


def select_point(doc: Union[ParetoDoc, WorkloadDoc], selector: str, source: str = "--point",
                 path: Optional[str] = None) -> Any:
    """The point named by id, or by ``best-throughput`` | ``best-latency`` | ``best-energy`` among the
    ``parapipe`` points (all points when there are none). ``source`` names the option in errors, ``path`` the
    file. A :class:`Point` of a :class:`ParetoDoc`, a :class:`WorkloadPoint` of a :class:`WorkloadDoc`
    (:func:`select_workload_point` is the typed form).

    Raises
    ------
    InputError
        If no point has that id.
    """
    pts = doc.points
    if selector in SELECTORS:
        front = [p for p in pts if p.strategy == "parapipe"] or pts
        if not front:
            raise input_error(source, None, "the mapping file has no points", "re-run 'parapipe optimize'")
        key = {"best-throughput": "period_s", "best-latency": "latency_s", "best-energy": "energy_j"}[selector]
        return min(front, key=lambda p: (getattr(p, key), p.period_s, p.latency_s, p.energy_j))
    for p in pts:
        if p.id == selector:
            return p
    ids = ", ".join(p.id for p in pts[:12]) + (", ..." if len(pts) > 12 else "")
    raise input_error(source, None, f"no point {selector!r} in {path or 'the mapping file'}",
                      f"use one of {', '.join(SELECTORS)} or a point id ({ids})")


def select_workload_point(doc: WorkloadDoc, selector: str, source: str = "--point",
                          path: Optional[str] = None) -> WorkloadPoint:
    """:func:`select_point` of a workload document (selectors compare the workload's figures)."""
    point: WorkloadPoint = select_point(doc, selector, source, path)
    return point


def check_model(doc: ParetoDoc, loaded, source: str) -> None:
    """Refuse a document computed for another model than ``loaded`` (a :class:`LoadedModel`), by SHA-256.

    Raises
    ------
    InputError
        Naming both models and the fix.
    """
    if doc.model.sha256 != loaded.sha256:
        raise input_error(source, "model.sha256",
                          f"mapping was computed for model {doc.model.name!r} (sha256 {doc.model.sha256[:12]}…), "
                          f"not {loaded.name!r} ({loaded.sha256[:12]}…)", "run 'parapipe optimize' on this model first")


def workload_doc_from_result(result, models: List[Dict[str, Any]], soc: SocRef,
                             search: Optional[Dict[str, Any]] = None) -> WorkloadDoc:
    """The document of a :class:`parapipe.search.workload.WorkloadResult`.

    ``models``: one dict per model, in the result's order, with ``name``, ``sha256`` and optionally
    ``input_shapes``, ``blocks`` (name -> operators; default the problem's blocks, no operators),
    ``latency_bound_s``, ``cost_notes`` and ``search`` (settings of that model's preparation). ``search``:
    settings recorded next to the workload search's own record (``result.info``).
    """
    from types import SimpleNamespace

    from parapipe.mapping.workload import WorkloadModel
    from parapipe.search.polish import stage_kinds

    names = [m["name"] for m in models]
    entries = []
    for m, (info, pr, res) in enumerate(zip(models, result.problems, result.model_results)):
        entries.append(WorkloadModel(
            model=ModelId(name=info["name"], sha256=info["sha256"]), input_shapes=info.get("input_shapes"),
            rate=result.rates[m], latency_bound_s=info.get("latency_bound_s"),
            blocks=info.get("blocks") or {b: [] for b in pr.block_names},
            bounds=DocBounds(period_lb_s=res.bounds.period_lb_s, latency_lb_s=res.bounds.latency_lb_s),
            search=dict(info.get("search") or {}), cost_notes=dict(info.get("cost_notes") or {})))
    points = []
    for p in result.points:
        ev = p.evaluation
        mappings = {}
        for m, (pr, mp) in enumerate(zip(result.problems, p.mappings)):
            view = SimpleNamespace(problem=pr, bounds=SimpleNamespace(period_lb_s=0.0, latency_lb_s=0.0))
            one = SimpleNamespace(id=p.id, strategy="parapipe", pareto=p.pareto, origin=p.origin, mapping=mp,
                                  evaluation=ev.evaluations[m], stage_schedules=stage_kinds(mp))
            mappings[names[m]] = _point_dict(view, one)["mapping"]
        pus = result.problems[0].pu_names
        lb = result.period_lb_s
        points.append(WorkloadPoint.model_validate({
            "id": p.id, "strategy": p.strategy, "pareto": p.pareto, "origin": p.origin,
            "throughput_per_s": ev.throughput_per_s, "period_s": ev.period_s, "latency_s": ev.latency_s,
            "energy_j": ev.energy_j,
            "period_gap": ev.period_s / lb - 1 if lb > 0 else None,
            "latency_gap": ev.latency_s / result.latency_lb_s - 1 if result.latency_lb_s > 0 else None,
            "latency_s_per_model": dict(zip(names, map(float, ev.latency_s_per_model))),
            "energy_j_per_model": dict(zip(names, map(float, ev.dyn_energy_j_per_model))),
            "pu_busy_s": {pus[q]: float(ev.busy_s[q]) for q in range(len(pus)) if ev.busy_s[q] > 0},
            "pu_busy_s_per_model": {names[m]: {pus[q]: float(b[q]) for q in range(len(pus)) if b[q] > 0}
                                    for m, b in enumerate(ev.busy_s_per_model)},
            "mappings": mappings}))
    return WorkloadDoc(soc=soc, models=entries, latency_axis=result.latency_axis,
                       search=dict(search or {}, workload=result.info),
                       bounds=DocBounds(period_lb_s=result.period_lb_s, latency_lb_s=result.latency_lb_s),
                       points=points)
