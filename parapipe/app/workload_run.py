"""``parapipe run`` of a workload point: several models' points run at once on this machine, each model's
outputs checked against its own unsplit model, the PUs shared as mapped.

A workload point is, per model, a single-model point of that model's document (:class:`WorkloadMember`: the
model, its :class:`parapipe.mapping.ParetoDoc` view and :class:`parapipe.mapping.Point`, and its rate, frames per
workload frame); each member's plan is built as ``parapipe run`` builds one model's
(:func:`parapipe.app.run.load_point`), and the run is the board's verified workload run
(:func:`ppexec.workload_run.run_workload_verified`), fed in memory. The report
(:class:`ppexec.report.WorkloadReport`) holds every model's :class:`ppexec.report.RunReport` of the same run next
to its own predictions, and the workload's throughput next to the workload's prediction.

The ``runs`` table gets one row per model (:func:`record_workload_run`), each with the run's ``workload``
(:attr:`parapipe.profiledb.runs.RunRecord.workload`: a shared id, the rates, the workload's throughput).
"""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ppexec.report import WorkloadReport

from parapipe.errors import input_error
from parapipe.graph.zoo import LoadedModel
from parapipe.mapping import ParetoDoc, Point

log = logging.getLogger(__name__)

__all__ = ["WorkloadMember", "load_workload", "run_workload_local", "record_workload_run", "workload_predicted",
           "workload_members", "point_predicted", "is_workload_file", "run_workload_file"]


@dataclass(frozen=True)
class WorkloadMember:
    """One model of a workload point.

    Attributes
    ----------
    name : str
        The model's name in the workload (unique in it; the report's and trace's key).
    model : LoadedModel
        The model, loaded (its SHA-256 is checked against ``doc``'s).
    doc : ParetoDoc
        The model's single-model view of the workload document (its blocks, SoC, input shapes).
    point : Point
        The model's part of the workload point.
    rate : float
        Frames of this model per workload frame (> 0).
    source : str
        Where the point comes from (for messages).
    """

    name: str
    model: LoadedModel
    doc: ParetoDoc
    point: Point
    rate: float = 1.0
    source: str = "mapping"


def load_workload(members: Sequence[WorkloadMember], binds: Optional[Mapping[str, Sequence[int]]] = None,
                  frequencies_hz: Optional[Mapping[str, float]] = None) -> Dict[str, Any]:
    """Each member's :class:`parapipe.app.run.LoadedMapping` (plan built, blocks checked), by member name.

    Raises
    ------
    InputError
        No member, two members of one name, a rate that is not positive, a model other than its document's
        (SHA-256), block names that do not match the model, a bad ``--bind``; the message names the model.
    """
    from parapipe.app.run import load_point
    from parapipe.mapping import check_model

    if not members:
        raise input_error("workload", "models", "no model to run", "give the workload's models")
    seen: Dict[str, WorkloadMember] = {}
    for m in members:
        if m.name in seen:
            raise input_error(m.source, "models", f"model name {m.name!r} appears twice",
                              "give each model of a workload its own name")
        if not m.rate > 0:
            raise input_error(m.source, f"rates.{m.name}", f"must be a positive number, got {m.rate!r}",
                              "give frames of each model per workload frame, e.g. 1 or 3")
        seen[m.name] = m
    out = {}
    for m in members:
        check_model(m.doc, m.model, m.source)
        out[m.name] = load_point(m.model, m.doc, m.point, f"{m.source} (model {m.name})", binds, None, None,
                                 frequencies_hz)
    return out


def workload_predicted(members: Sequence[WorkloadMember], period_s: Optional[float] = None,
                       energy_j: Optional[float] = None, latency_s: Optional[float] = None) -> Dict[str, Any]:
    """The workload's predicted figures for the report: ``period_s`` (s per workload frame), ``throughput_per_s``,
    ``energy_j`` (J per workload frame), ``latency_s``. Without a workload prediction (``period_s`` None), the
    models' own points evaluated as if each ran alone: the period is the slowest ``rate · period`` and the
    energy ``Σ rate · energy`` (what separate ``optimize`` runs promise, ignoring the shared PUs)."""
    if period_s is None:
        period_s = max(m.rate * float(m.point.period_s) for m in members)
        if energy_j is None:
            energy_j = sum(m.rate * float(m.point.energy_j) for m in members)
        if latency_s is None:
            latency_s = max(float(m.point.latency_s) for m in members)
    out: Dict[str, Any] = {"period_s": float(period_s), "throughput_per_s": 1.0 / float(period_s)}
    if energy_j is not None:
        out["energy_j"] = float(energy_j)
    if latency_s is not None:
        out["latency_s"] = float(latency_s)
    return out


def run_workload_local(members: Sequence[WorkloadMember], point: str, predicted: Optional[Dict[str, Any]] = None,
                       frames: int = 100, warmup: int = 5, seed: int = 0,
                       binds: Optional[Mapping[str, Sequence[int]]] = None, atol: float = 1e-5, rtol: float = 1e-5,
                       idle_frames: int = 10, trace: Optional[str] = None,
                       on_event: Optional[Callable[[Dict[str, Any]], None]] = None, dispatch: str = "pull",
                       frequencies_hz: Optional[Mapping[str, float]] = None,
                       ) -> Tuple[Dict[str, Any], WorkloadReport]:
    """Run a workload point on this machine: every model's plan at once, PUs shared as mapped, every model's
    outputs and handed-over tensors checked against its own unsplit model.

    Parameters
    ----------
    members : sequence of WorkloadMember
    point : str
        The workload point's id (recorded in the report).
    predicted : dict, optional
        The workload's predicted figures (:func:`workload_predicted`; computed from the members' points when
        None).
    frames : int
        Workload frames measured (>= 1): ``ceil(frames · rate)`` frames of each model.
    warmup, seed, binds, atol, rtol, idle_frames, trace, on_event, dispatch, frequencies_hz
        As for :func:`parapipe.app.run.run_local` (``frequencies_hz`` applies to every model).

    Returns
    -------
    (dict of str to LoadedMapping, WorkloadReport)

    Raises
    ------
    InputError
        As :func:`load_workload`; a PU this machine cannot run as bound; inputs a model's unsplit model fails
        on (naming the model).
    ppexec.errors.PipelineError
        A task failed (naming model, stage, PU and task).
    """
    from ppexec.bundle_run import ReferenceRunError
    from ppexec.workload_run import WorkloadRunSpec, run_workload_verified

    from parapipe.app.run import check_dispatch, frequency_warnings, run_spec
    from parapipe.execution.facts import check_board, local_facts

    if frames < 1:
        raise input_error("--frames", None, f"must be >= 1, got {frames}", "give a positive frame count")
    check_dispatch(dispatch)
    loaded = load_workload(members, binds, frequencies_hz)
    facts = local_facts()
    for lm in loaded.values():
        check_board(lm.plan.bindings, facts, "this machine")
    specs = {name: run_spec(lm, seed) for name, lm in loaded.items()}
    first = next(iter(loaded.values()))
    spec = WorkloadRunSpec(models=specs, rates={m.name: float(m.rate) for m in members}, point=point,
                           predicted=dict(predicted or workload_predicted(members)),
                           power_sensor=first.doc.soc.power_sensor)
    try:
        report, trace_doc = run_workload_verified(spec, workload_frames=frames, warmup=warmup, atol=atol, rtol=rtol,
                                                  idle_frames=idle_frames, emit=on_event, dispatch=dispatch)
    except ReferenceRunError as exc:
        raise input_error("generated inputs", None, str(exc), "check the models' input shapes") from exc
    for name, r in report.models.items():
        for line in frequency_warnings(r):
            log.warning("model %s: %s", name, line)
    if trace:
        from parapipe.files import atomic_path

        with atomic_path(Path(trace)) as out, open(out, "w") as handle:
            json.dump(trace_doc, handle)
    return loaded, report


def record_workload_run(db_path: Optional[str], members: Sequence[WorkloadMember], report: WorkloadReport,
                        runner: str) -> List[int]:
    """Append one ``runs`` row per model of the workload run to ``db_path`` (None: keep nothing), each with the
    run's ``workload`` (one id for all); return the row ids."""
    if not db_path:
        return []
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import append_run, record_from_run

    workload = {"id": uuid.uuid4().hex, "point": report.point, "rates": dict(report.rates),
                "models": [m.name for m in members], "throughput_per_s": float(report.throughput_per_s),
                "predicted_period_s": report.predicted.get("period_s"), "energy_j": report.energy_j,
                "pu_busy_s": dict(report.pu_busy_s)}
    rows = []
    with ProfileDB(db_path) as db:
        for m in members:
            rows.append(append_run(db, record_from_run(m.doc, m.point, report.models[m.name], runner, workload)))
    log.info("recorded workload run %s as runs %s in %s", workload["id"], rows, db_path)
    return rows


def workload_members(doc, point, source: str, models: Optional[Sequence[str]] = None) -> List[WorkloadMember]:
    """The members of workload point ``point`` of a workload document ``doc``
    (:class:`parapipe.mapping.WorkloadDoc`): each model's view (``doc.model_view``), its part of the point
    (``doc.point_view``) and its rate; each model loaded from ``models`` (registry names or .onnx paths, in any
    order: each is matched to the workload's model of the same SHA-256, else of the same name) or, without them,
    from the registry by the name the document stores.

    Raises
    ------
    InputError
        ``models`` not one per model of the workload, or one that matches no model of the workload by SHA-256 or
        name (naming the workload's models in its order); a model that cannot be loaded.
    """
    from parapipe.graph.zoo import load_model

    names = doc.model_names()
    if models and len(models) != len(names):
        raise input_error("models", None, f"{len(models)} given for a workload of {len(names)} "
                          f"({', '.join(names)})", "give one model per workload model (in any order), or none")
    rates = doc.rates()
    if not models:
        loaded = {name: load_model(name) for name in names}
    else:
        given = [load_model(m) for m in models]
        loaded = {}
        free = list(range(len(given)))
        for key in ("sha256", "name"):  # the same bytes first, then the same name (a model exported again)
            for name in names:
                want = doc.model_view(name).model.sha256 if key == "sha256" else name
                match = next((i for i in free if name not in loaded and getattr(given[i], key) == want), None)
                if match is not None:
                    loaded[name] = given[match]
                    free.remove(match)
        if free:
            lm = given[free[0]]
            if any(lm.sha256 == doc.model_view(n).model.sha256 or lm.name == n for n in names):
                raise input_error(source, "models", f"model {lm.name!r} given twice for a workload of "
                                  f"{', '.join(names)}", "give each model of the workload once (in any order)")
            raise input_error(source, "models", f"model {models[free[0]]!r} ({lm.name}, sha256 {lm.sha256[:12]}…) "
                              f"is none of the workload's models ({', '.join(names)}) by SHA-256 or name",
                              f"give the models the workload was optimized for ({', '.join(names)}, in any order), "
                              "or run 'parapipe optimize' on these models first")
    return [WorkloadMember(name, loaded[name], doc.model_view(name), doc.point_view(point, name),
                           float(rates[name]), source)
            for name in names]


def point_predicted(point) -> Dict[str, Any]:
    """The predicted figures of a workload point (:class:`parapipe.mapping.WorkloadPoint`) for the report."""
    return {"period_s": float(point.period_s), "throughput_per_s": float(point.throughput_per_s),
            "energy_j": float(point.energy_j), "latency_s": float(point.latency_s)}


def is_workload_file(path: str) -> bool:
    """Whether ``path`` holds a workload pareto.json (``"kind": "workload"``); False for anything else (a
    single model's document, an unreadable file: its reader then says what is wrong)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("kind") == "workload"


def run_workload_file(mapping_path: str, point: str, models: Sequence[str] = (), **options: Any
                      ) -> Tuple[List[WorkloadMember], WorkloadReport]:
    """``parapipe run --mapping workload-pareto.json``: read the workload document, select ``point`` (an id or
    ``best-throughput`` | ``best-latency`` | ``best-energy``, compared on the workload's figures), and run it
    (:func:`run_workload_local`, ``options`` passed on). ``models``: as :func:`workload_members`.

    Raises
    ------
    InputError
        As :func:`parapipe.mapping.read_workload`, :func:`workload_members`, :func:`run_workload_local`.
    """
    from parapipe.mapping import read_workload, select_workload_point

    doc = read_workload(mapping_path)
    pt = select_workload_point(doc, point, path=mapping_path)
    members = workload_members(doc, pt, mapping_path, list(models) or None)
    _, report = run_workload_local(members, pt.id, point_predicted(pt), **options)
    return members, report
