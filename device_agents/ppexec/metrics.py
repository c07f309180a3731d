"""Run metrics of the pipelined executor: task trace, throughput, latency percentiles, busy times, Chrome
trace. numpy and the standard library only (runs on a board).

All times are seconds from ``time.perf_counter()``, relative to the start of the run they belong to.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .files import write_json_atomic

__all__ = ["TraceEvent", "RunMetrics", "compute_metrics", "chrome_trace", "write_chrome_trace",
           "trace_events_from_chrome"]


@dataclass(frozen=True)
class TraceEvent:
    """One task execution: ``task`` of ``stage`` ran on ``pu`` for frame ``frame`` from ``start_s`` to
    ``end_s`` (seconds since the run started); ``model`` names the model in a workload's merged trace
    (:mod:`.workload`), None in a single model's run."""

    stage: int
    pu: str
    task: str
    frame: int
    start_s: float
    end_s: float
    model: Optional[str] = None


@dataclass
class RunMetrics:
    """Measured figures of one executor run (warm-up frames excluded).

    Attributes
    ----------
    frames : int
        Frames measured.
    wall_s : float
        Seconds from the first frame entering the pipeline (its first task starting) to the last frame leaving
        (its last stage finishing).
    throughput_per_s : float
        ``frames / wall_s`` (0 when no frame ran).
    latency_s : numpy.ndarray, shape (frames,)
        Per-frame seconds from entering (first task of stage 0 starts on it) to leaving (last stage done), in
        frame order. Time spent waiting in front of stage 0 is excluded: it depends only on how fast the
        caller feeds frames.
    latency_p50_s, latency_p90_s, latency_p99_s : float
        Percentiles of ``latency_s`` (``nan`` when no frame ran).
    stage_busy_s : list of float
        Per stage, the mean over frames of its makespan (last task end - first task start for that frame).
    pu_busy_s : dict of str to float
        Per PU, task seconds per frame (summed over every stage the PU serves).
    pu_utilisation : dict of str to float
        ``pu_busy_s * frames / wall_s``: fraction of the wall time the PU ran tasks. Busy time is wall time
        inside ``InferenceSession.run``; a PU serving several stages runs one task at a time by default
        (``PipelineExecutor(serialise_shared_pus=True)``), otherwise its stages' threads time-slice the core
        and both count the shared seconds: a value above 1 flags such an oversubscribed PU.
    trace : list of TraceEvent
        Every task execution, sorted by start time.
    origin_s : float
        ``time.perf_counter()`` of the run's time origin (every ``*_s`` time above counts from it), so that
        runs of several executors at once can be put on one time axis (:mod:`.workload`).
    """

    frames: int
    wall_s: float
    throughput_per_s: float
    latency_s: np.ndarray
    latency_p50_s: float
    latency_p90_s: float
    latency_p99_s: float
    stage_busy_s: List[float]
    pu_busy_s: Dict[str, float]
    pu_utilisation: Dict[str, float]
    trace: List[TraceEvent] = field(default_factory=list)
    origin_s: float = 0.0


def compute_metrics(trace: Sequence[TraceEvent], exit_s: Dict[int, float], n_stages: int,
                    pus: Sequence[str]) -> RunMetrics:
    """Derive :class:`RunMetrics` from a run's task trace and per-frame exit times.

    Parameters
    ----------
    trace : sequence of TraceEvent
        Task executions of the measured frames.
    exit_s : dict of int to float
        Frame number -> time its last stage finished. Frames with an exit time but no stage-0 task in ``trace``
        (records bounded by :data:`ppexec.executor.MAX_RECORDED_FRAMES`) are left out.
    n_stages : int
        Number of stages of the plan.
    pus : sequence of str
        PUs of the plan (all get an entry in the busy and utilisation dicts, idle ones 0).
    """
    enter_s: Dict[int, float] = {}
    span: Dict[tuple, List[float]] = {}
    pu_total = {pu: 0.0 for pu in pus}
    for ev in trace:
        if ev.stage == 0:
            enter_s[ev.frame] = min(enter_s.get(ev.frame, ev.start_s), ev.start_s)
        key = (ev.stage, ev.frame)
        lo_hi = span.setdefault(key, [ev.start_s, ev.end_s])
        lo_hi[0] = min(lo_hi[0], ev.start_s)
        lo_hi[1] = max(lo_hi[1], ev.end_s)
        pu_total[ev.pu] = pu_total.get(ev.pu, 0.0) + (ev.end_s - ev.start_s)
    frames = sorted(f for f in exit_s if f in enter_s)  # a bounded record may have dropped one end of a frame
    n = len(frames)
    latency = np.array([exit_s[f] - enter_s[f] for f in frames], dtype=np.float64)
    if n:
        wall_s = max(exit_s[f] for f in frames) - min(enter_s[f] for f in frames)
        p50, p90, p99 = (float(v) for v in np.percentile(latency, [50, 90, 99]))
    else:
        wall_s, p50, p90, p99 = 0.0, float("nan"), float("nan"), float("nan")
    stage_busy = []
    for s in range(n_stages):
        spans = [hi - lo for (st, _), (lo, hi) in span.items() if st == s]
        stage_busy.append(float(np.mean(spans)) if spans else 0.0)
    pu_busy = {pu: (t / n if n else 0.0) for pu, t in pu_total.items()}
    util = {pu: (t / wall_s if wall_s > 0 else 0.0) for pu, t in pu_total.items()}
    return RunMetrics(frames=n, wall_s=wall_s, throughput_per_s=(n / wall_s if wall_s > 0 else 0.0),
                      latency_s=latency, latency_p50_s=p50, latency_p90_s=p90, latency_p99_s=p99,
                      stage_busy_s=stage_busy, pu_busy_s=pu_busy, pu_utilisation=util,
                      trace=sorted(trace, key=lambda e: (e.start_s, e.stage, e.pu)))


def chrome_trace(metrics: RunMetrics, info: Optional[Dict[str, Any]] = None) -> dict:
    """Return the Chrome trace (``chrome://tracing`` / Perfetto JSON) of a run: pid 1, one lane (tid) per PU;
    in a workload's merged trace (events with a ``model``), one process (pid) per model, named after it, with
    one lane per PU it uses and the model in every event's ``args``.

    Each task execution is a complete ("X") event with ``ts``/``dur`` in microseconds, named after the task,
    with the stage and frame in ``args``; lanes are named with "thread_name" metadata ("M") events (every
    replica of a replicated stage runs on its own PUs, so on its own lanes). ``info`` (JSON values: the model,
    point, measured throughput ...) goes to the trace's ``otherData``, which trace viewers show as metadata
    and ``parapipe plot --trace`` uses for its title.
    """
    pus = list(metrics.pu_busy_s) + sorted({e.pu for e in metrics.trace} - set(metrics.pu_busy_s))
    tid = {pu: i + 1 for i, pu in enumerate(pus)}
    models: List[Optional[str]] = []
    for e in metrics.trace:
        if e.model not in models:
            models.append(e.model)
    if not models or models == [None]:
        models = [None]
    pid = {m: i + 1 for i, m in enumerate(models)}
    events: List[dict] = []
    for m, p in pid.items():
        events.append({"name": "process_name", "ph": "M", "pid": p,
                       "args": {"name": "parapipe pipeline" if m is None else "model %s" % m}})
        used = pus if m is None else [pu for pu in pus if any(e.pu == pu and e.model == m for e in metrics.trace)]
        for pu in used:
            events.append({"name": "thread_name", "ph": "M", "pid": p, "tid": tid[pu], "args": {"name": pu}})
    for e in metrics.trace:
        args: Dict[str, Any] = {"stage": e.stage, "frame": e.frame}
        if e.model is not None:
            args["model"] = e.model
        events.append({"name": e.task, "cat": f"stage{e.stage}", "ph": "X", "pid": pid.get(e.model, 1),
                       "tid": tid[e.pu], "ts": e.start_s * 1e6, "dur": (e.end_s - e.start_s) * 1e6,
                       "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(info or {})}


def write_chrome_trace(metrics: RunMetrics, path, info: Optional[Dict[str, Any]] = None) -> None:
    """Write :func:`chrome_trace` of ``metrics`` (with ``info``) to ``path`` atomically, with the usual file
    mode (:func:`.files.write_json_atomic`).

    Raises
    ------
    OSError
        The folder cannot be written.
    """
    write_json_atomic(chrome_trace(metrics, info), path)


def trace_events_from_chrome(doc: dict) -> List[TraceEvent]:
    """The task executions of a Chrome trace written by :func:`chrome_trace` (its inverse, to the µs).

    Lanes are mapped back to PUs through the "thread_name" metadata events; ``stage``, ``frame`` and (in a
    workload's trace) ``model`` come from each event's ``args``.

    Raises
    ------
    ValueError
        ``doc`` is not such a trace (the message names the first bad event).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError("not a Chrome trace: no 'traceEvents' list")
    lanes: Dict[object, str] = {}
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name":
            lanes[e.get("tid")] = str((e.get("args") or {}).get("name", e.get("tid")))  # tid: one PU in every pid
    events = []
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            start = float(e["ts"]) * 1e-6
            events.append(TraceEvent(int(e["args"]["stage"]), lanes.get(e.get("tid"), str(e.get("tid"))),
                                     str(e["name"]), int(e["args"]["frame"]), start,
                                     start + float(e["dur"]) * 1e-6,
                                     None if e["args"].get("model") is None else str(e["args"]["model"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError("traceEvents[%d] is not a parapipe task event (%s: %s)"
                             % (i, type(exc).__name__, exc))
    return events
