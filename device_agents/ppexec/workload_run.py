"""The verified run of a workload: several models' plans at once (:class:`.workload.WorkloadExecutor`), each
model's outputs checked against its own unsplit model, as :func:`.bundle_run.run_verified` checks one model.

:func:`run_workload_verified` takes a :class:`WorkloadRunSpec` (one :class:`.bundle_run.RunSpec` per model, the
rates, the workload's point and predictions) and returns a :class:`.report.WorkloadReport` (each model's
:class:`.report.RunReport` of the same run, the workload's throughput) and the merged Chrome trace (one process
per model). ``parapipe run`` builds the spec in memory; a workload bundle (:func:`read_workload_bundle`) holds
one sub-folder per model, each laid out as a single model's bundle (``<model>/plan.json``, its task models and
reference), and a ``workload.json`` naming them with the rates. Standard library, numpy and onnxruntime only
(Python >= 3.8).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from . import dvfs, timing
from .bundle_run import (
    DISTINCT_FRAMES, MANIFEST, REPORT, TRACE, RunSpec, _Checked, _check_options, _host_info, _idle_latency_s,
    _Progress, _read_json, bundle_lock, read_plan_folder, verify_files)
from .errors import plan_error
from .files import write_json_atomic
from .metrics import chrome_trace
from .power import PowerMeter
from .report import WorkloadReport
from .workload import DEFAULT_WINDOW, WorkloadExecutor, frames_for

__all__ = ["WORKLOAD", "WorkloadRunSpec", "run_workload_verified", "read_workload_bundle", "run_workload_bundle"]

logger = logging.getLogger(__name__)

#: The file of a workload bundle naming its models (``{"point", "rates", "models": [name, ...], "predicted",
#: "power_sensor"?}``); each model's files lie in the sub-folder of its name.
WORKLOAD = "workload.json"


@dataclass(frozen=True)
class WorkloadRunSpec:
    """What a verified workload run needs, in memory.

    Attributes
    ----------
    models : dict of str to RunSpec
        Model name -> its spec (plan, reference, frames, its point's id and predictions).
    rates : dict of str to float
        Frames of each model per workload frame.
    point : str
        The workload point's id.
    predicted : dict
        The workload's predicted ``throughput_per_s``, ``period_s``, ``energy_j``, ``latency_s``.
    power_sensor : dict, optional
        The board's power sensor: the run measures energy per workload frame.
    bundle_id : str, optional
    """

    models: Dict[str, RunSpec]
    rates: Dict[str, float]
    point: str
    predicted: Dict[str, Any] = field(default_factory=dict)
    power_sensor: Optional[Dict[str, Any]] = None
    bundle_id: Optional[str] = None


def _frequency_requests(spec: WorkloadRunSpec) -> Tuple[Dict[str, Dict[str, Any]], bool, Dict[str, float]]:
    """The operating points every model's point asks for, merged (a PU asked at several: the highest), whether
    any was asked explicitly, and the merged ``{pu: Hz}``."""
    hz: Dict[str, float] = {}
    domains: Dict[str, Dict[str, Any]] = {}
    for s in spec.models.values():
        for pu, f in s.frequencies_hz.items():
            hz[pu] = max(hz.get(pu, 0.0), float(f))
            domains[pu] = s.frequency_domains[pu]
    required = any(s.frequencies_required and s.frequencies_hz for s in spec.models.values())
    return dvfs.requests_from(hz, domains), required, hz


def run_workload_verified(spec: WorkloadRunSpec, workload_frames: int = 100, warmup: int = 5, atol: float = 1e-5,
                          rtol: float = 1e-5, progress_interval_s: float = 0.5,
                          emit: Optional[Callable[[Dict[str, Any]], None]] = None, idle_frames: int = 10,
                          dispatch: str = "pull", window: int = DEFAULT_WINDOW,
                          started_s: Optional[float] = None) -> Tuple[WorkloadReport, Dict[str, Any]]:
    """Run ``workload_frames`` workload frames of ``spec`` with every model's outputs checked.

    Each model first pushes ``warmup`` frames through its own pipeline (one model after the other), then all
    run at once (:meth:`.workload.WorkloadExecutor.run`), then each model's idle latency is measured with
    ``idle_frames`` frames sent one at a time while the other models are idle. Tolerances and ``dispatch`` as
    for :func:`.bundle_run.run_verified`; ``window`` as for :class:`.workload.WorkloadExecutor`; progress events
    as :func:`.bundle_run.run_bundle`'s, counting workload frames. The operating points every model's point
    states are set for the run and restored after it (a PU two points run at different frequencies: the
    highest).

    Returns
    -------
    (WorkloadReport, dict)
        The report and the merged Chrome trace of the loaded run (one process per model).

    Raises
    ------
    PlanError
        A bad option or plan; ``.bundle_run.ReferenceRunError`` (a PlanError) when a model's unsplit model fails
        on its frames (the message names the model).
    dvfs.DvfsRefused
        An operating point asked for (``--frequency``) that cannot be set.
    PipelineError
        A failed task (the message names model, stage, PU and task).
    """
    _check_options(workload_frames, warmup, idle_frames, dispatch)
    requests, required, asked_hz = _frequency_requests(spec)
    unset: Dict[str, Dict[str, Any]] = {}
    if requests and not required:
        try:
            dvfs.plan_targets(requests)
        except dvfs.DvfsRefused as exc:
            logger.info("the points' operating points are not set (%s); the run uses the board's own settings", exc)
            unset = {pu: {"requested_hz": hz, "readback_hz": None, "readback_end_hz": None, "status": "refused",
                          "domain": None, "mode": None, "transition_latency_s": None, "reason": str(exc)}
                     for pu, hz in asked_hz.items()}
            requests = {}
    with dvfs.applied(requests) as state:
        report, trace = _run(spec, state, workload_frames, warmup, atol, rtol, progress_interval_s, emit,
                             idle_frames, dispatch, window, started_s)
    if unset:
        for r in report.models.values():
            r.frequencies.update({pu: dict(f) for pu, f in unset.items() if pu in r.pu_busy_s})
            r.predicted["applies"] = False
        report.predicted["applies"] = False
    return report, trace


def _run(spec: WorkloadRunSpec, state: dvfs.Applied, workload_frames: int, warmup: int, atol: float, rtol: float,
         progress_interval_s: float, emit: Optional[Callable[[Dict[str, Any]], None]], idle_frames: int,
         dispatch: str, window: int, started_s: Optional[float]) -> Tuple[WorkloadReport, Dict[str, Any]]:
    from .bundle_run import ReferenceRunError

    progress = _Progress(emit, workload_frames, progress_interval_s, started_s)
    progress("reference", 0, force=True)
    checked = {}
    for m, s in spec.models.items():
        try:
            checked[m] = _Checked(s, atol, rtol)
        except ReferenceRunError as exc:
            raise ReferenceRunError("model %r: %s" % (m, exc)) from exc.__cause__
    meter = PowerMeter(spec.power_sensor) if spec.power_sensor else None
    done = {m: 0 for m in spec.models}
    run_start = [0.0]
    measured = [False]

    def on_output(m: str, i: int, out) -> None:
        checked[m](i, out)
        if measured[0]:
            done[m] += 1
            w = min(int(done[k] / spec.rates[k] + 1e-9) for k in done)
            progress("run", w, rate=w / max(time.perf_counter() - run_start[0], 1e-9))

    with WorkloadExecutor({m: c.plan for m, c in checked.items()}, spec.rates, window=window,
                          dispatch=dispatch) as wl:
        for m, c in checked.items():
            c.start(wl.executors[m])
        progress("start", 0, force=True)
        pools = {m: c.pool for m, c in checked.items()}
        if warmup:
            for m, ex in wl.executors.items():
                pool = pools[m]
                for i, out in enumerate(ex.run(pool[i % len(pool)] for i in range(warmup))):
                    checked[m](i, out)
        before = timing.cpu_sample()
        if meter is not None:
            meter.start()
        run_start[0], measured[0] = time.perf_counter(), True
        metrics = wl.run(pools, workload_frames, on_output=on_output)
        energy = meter.stop() if meter is not None else None
        state.read_back(end=True)
        load = timing.load_between(before, timing.cpu_sample())
        progress("idle", workload_frames, force=True, rate=metrics.throughput_per_s)
        idle: Dict[str, Tuple[float, int]] = {}
        for m, ex in wl.executors.items():
            count = min(int(idle_frames), frames_for(workload_frames, spec.rates[m]))
            idle[m] = (_idle_latency_s(ex, pools[m], count), count)
    progress("done", workload_frames, force=True, rate=metrics.throughput_per_s)
    frequencies = state.report()
    energy_j = energy.energy_j / workload_frames if energy is not None and energy.energy_j is not None else None
    reports = {}
    for m, c in checked.items():
        mm = metrics.models[m]
        reports[m] = c.report(spec.models[m], mm, warmup, idle[m][0], idle[m][1],
                              {pu: f for pu, f in frequencies.items() if pu in mm.pu_busy_s}, dispatch,
                              load=None if load is None else load["load"])
    predicted = dict(spec.predicted)
    predicted["applies"] = all(r.predicted.get("applies", True) for r in reports.values())
    report = WorkloadReport(
        point=spec.point, rates=dict(spec.rates), workload_frames=metrics.workload_frames, warmup=warmup,
        throughput_per_s=metrics.throughput_per_s, wall_s=metrics.wall_s,
        period_s=1.0 / metrics.throughput_per_s if metrics.throughput_per_s > 0 else float("inf"),
        pu_busy_s=dict(metrics.pu_busy_s), pu_utilisation=dict(metrics.pu_utilisation),
        outputs_match=all(r.outputs_match for r in reports.values()), models=reports, predicted=predicted,
        energy_j=energy_j, energy_unknown=energy.unknown if energy is not None else None, host=_host_info(),
        bundle_id=spec.bundle_id, report_file=REPORT, trace_file=TRACE)
    info = {"workload": sorted(spec.models), "point": spec.point, "rates": dict(spec.rates),
            "frames": metrics.workload_frames, "throughput_per_s": metrics.throughput_per_s,
            "predicted": predicted, "outputs_match": report.outputs_match,
            "model": " + ".join(r.model.get("name", m) for m, r in reports.items())}
    return report, chrome_trace(metrics.as_run_metrics(), info)


def read_workload_bundle(folder: str, seed: int = 0, distinct_frames: int = DISTINCT_FRAMES,
                         verify: bool = True) -> WorkloadRunSpec:
    """The :class:`WorkloadRunSpec` of the workload bundle in ``folder`` (the caller holds its lock).

    Raises
    ------
    PlanError
        A missing or different file, an unreadable ``workload.json``, a model's bundle that does not read.
    """
    manifest = _read_json(os.path.join(folder, MANIFEST))
    if verify:
        verify_files(folder, manifest)
    doc = _read_json(os.path.join(folder, WORKLOAD))
    names = doc.get("models")
    if not isinstance(names, list) or not names:
        raise plan_error(WORKLOAD, "models", "is missing or empty", "re-run 'parapipe deploy'")
    folders = doc.get("folders") or {}
    models = {}
    for m in names:
        models[str(m)] = read_plan_folder(os.path.join(folder, str(folders.get(m, m))), seed, distinct_frames,
                                          manifest.get("bundle_id"))  # files checked against the bundle's manifest
    rates = {str(m): float(r) for m, r in (doc.get("rates") or {}).items()}
    return WorkloadRunSpec(models=models, rates=rates or {m: 1.0 for m in models}, point=str(doc.get("point")),
                           predicted=dict(doc.get("predicted") or {}), power_sensor=doc.get("power_sensor") or None,
                           bundle_id=manifest.get("bundle_id"))


def run_workload_bundle(folder: str, frames: int = 100, warmup: int = 5, seed: int = 0,
                        distinct_frames: int = DISTINCT_FRAMES, atol: float = 1e-5, rtol: float = 1e-5,
                        progress_interval_s: float = 0.5, emit: Optional[Callable[[Dict[str, Any]], None]] = None,
                        verify: bool = True, lock_wait_s: float = 30.0, idle_frames: int = 10,
                        dispatch: str = "pull") -> WorkloadReport:
    """Run the workload bundle in ``folder`` (``frames`` workload frames) as :func:`.bundle_run.run_bundle`
    runs a single model's: files verified, lock held, ``out/report.json`` (a :class:`.report.WorkloadReport`)
    and ``out/trace.json`` written.

    Raises
    ------
    PlanError, PipelineError
        A bad bundle or option; a failed task (naming model, stage, PU and task).
    """
    folder = os.path.abspath(folder)
    started = time.perf_counter()
    with bundle_lock(folder, lock_wait_s):
        if verify:
            _Progress(emit, frames, progress_interval_s, started)("verify", 0, force=True)
        spec = read_workload_bundle(folder, seed, distinct_frames, verify)
        report, trace = run_workload_verified(spec, workload_frames=frames, warmup=warmup, atol=atol, rtol=rtol,
                                              progress_interval_s=progress_interval_s, emit=emit,
                                              idle_frames=idle_frames, dispatch=dispatch, started_s=started)
        write_json_atomic(trace, os.path.join(folder, *TRACE.split("/")))
        write_json_atomic(report.to_json(), os.path.join(folder, *REPORT.split("/")))
        return report
