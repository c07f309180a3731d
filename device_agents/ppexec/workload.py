"""Several models' execution plans run at once on one machine: a workload.

:class:`WorkloadExecutor` runs one :class:`.executor.PipelineExecutor` per model, each fed from a thread of its
own, with the PUs shared as the plans map them:

- a PU used by several models' plans gets one lock that every executor using it holds around each task
  (``PipelineExecutor(pu_locks=...)``), so the PU runs one task of any model at a time and its busy time per
  workload frame is the sum of the models' task times, as the cost model books a shared PU;
- frames are admitted in proportion to the workload's rates: model ``m``'s frame ``i`` belongs to workload
  frame ``floor(i / rate_m)`` (rate: frames of the model per workload frame, > 0), and a model's frame is
  admitted only while its workload frame is less than ``window`` ahead of the workload frames every model has
  admitted in full; so no model runs ahead of the slowest by more than ``window`` workload frames plus its own
  pipeline's frames in flight, and the measured mix is the requested one;
- every model's frames come out in order (each executor's own guarantee) and are handed to ``on_output`` in
  the model's feeder thread;
- one failure (a task, ``on_output``) stops every model: the error raised names the model, and the
  executor's message names stage, PU and task; Ctrl-C (``KeyboardInterrupt`` in the calling thread) stops
  every model's workers before it propagates.

Metrics (:class:`WorkloadMetrics`): each model's :class:`.metrics.RunMetrics` (throughput, loaded latency
percentiles, busy times), the workload's throughput (workload frames completed over the measured window: from
the first task of any model to the last frame of any model leaving its pipeline), each PU's busy seconds per
workload frame, and one merged trace on a common time axis with the model in every event
(:func:`.metrics.chrome_trace` draws each model as a process of its own).

Standard library, numpy and onnxruntime only (Python >= 3.8): it runs on boards.
"""
from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from .errors import PipelineError, PlanError, plan_error
from .executor import PipelineExecutor
from .metrics import RunMetrics, TraceEvent
from .plan import ExecutionPlan

__all__ = ["WorkloadExecutor", "WorkloadMetrics", "frames_for", "workload_frame_of"]

logger = logging.getLogger(__name__)

#: Workload frames a model may admit ahead of the workload frames every model has admitted in full (a parapipe
#: choice: 2 lets a model start its next workload frame while the slowest finishes the current one, and keeps
#: the measured mix within 2 workload frames of the requested one over the whole run).
DEFAULT_WINDOW = 2

#: Tolerance of the float division in :func:`workload_frame_of` (rates such as 0.1 are not exact in binary).
_EPS = 1e-9


def workload_frame_of(i: int, rate: float) -> int:
    """The workload frame model frame ``i`` belongs to at ``rate`` model frames per workload frame:
    ``floor(i / rate)``.

    >>> [workload_frame_of(i, 3) for i in range(7)], [workload_frame_of(i, 0.5) for i in range(3)]
    ([0, 0, 0, 1, 1, 1, 2], [0, 2, 4])
    """
    return int(math.floor(i / rate + _EPS))


def frames_for(workload_frames: int, rate: float) -> int:
    """Model frames that make ``workload_frames`` workload frames at ``rate``: ``ceil(workload_frames * rate)``
    (the frames ``i`` with ``floor(i / rate) < workload_frames``).

    >>> frames_for(10, 3), frames_for(10, 0.5), frames_for(3, 0.5)
    (30, 5, 2)
    """
    return int(math.ceil(workload_frames * rate - _EPS))


@dataclass
class WorkloadMetrics:
    """Measured figures of one workload run (warm-up frames excluded). Seconds, frames per second.

    Attributes
    ----------
    workload_frames : int
        Workload frames measured.
    rates : dict of str to float
        Frames of each model per workload frame.
    wall_s : float
        From the first task of any model starting to the last frame of any model leaving its pipeline.
    throughput_per_s : float
        ``workload_frames / wall_s``: workload frames per second.
    models : dict of str to RunMetrics
        Each model's own figures (its frames, throughput, loaded latency percentiles, busy times); times relative
        to its own origin (``origin_s``).
    pu_busy_s : dict of str to float
        Per PU, task seconds per workload frame, summed over the models (``Σ_m rate_m · busy_m``).
    pu_utilisation : dict of str to float
        ``pu_busy_s * workload_frames / wall_s``.
    trace : list of TraceEvent
        Every model's task executions, ``model`` set, times from the workload's origin (the earliest model's
        origin), sorted by start time.
    """

    workload_frames: int
    rates: Dict[str, float]
    wall_s: float
    throughput_per_s: float
    models: Dict[str, RunMetrics]
    pu_busy_s: Dict[str, float]
    pu_utilisation: Dict[str, float]
    trace: List[TraceEvent] = field(default_factory=list)

    def as_run_metrics(self) -> RunMetrics:
        """The merged trace and busy times as a :class:`.metrics.RunMetrics` (for
        :func:`.metrics.chrome_trace`): frames are workload frames, latencies are left empty."""
        return RunMetrics(frames=self.workload_frames, wall_s=self.wall_s, throughput_per_s=self.throughput_per_s,
                          latency_s=np.zeros(0), latency_p50_s=float("nan"), latency_p90_s=float("nan"),
                          latency_p99_s=float("nan"), stage_busy_s=[], pu_busy_s=dict(self.pu_busy_s),
                          pu_utilisation=dict(self.pu_utilisation), trace=list(self.trace))


class _Stop(Exception):
    """Raised inside a feeder's frame generator when the workload stops."""


class _Admission:
    """The shared count of frames each model has admitted, and the rule that holds a model back."""

    def __init__(self, rates: Mapping[str, float], totals: Mapping[str, int], window: int, poll_s: float,
                 stop: threading.Event):
        self.rates, self.totals, self.window, self.poll_s, self.stop = dict(rates), dict(totals), window, poll_s, stop
        self.admitted = {m: 0 for m in rates}
        self.cond = threading.Condition()

    def _covered(self, m: str) -> float:
        """Workload frames model ``m`` has admitted in full (infinite once it admitted all its frames)."""
        if self.admitted[m] >= self.totals[m]:
            return math.inf
        return math.floor(self.admitted[m] / self.rates[m] + _EPS)

    def wait_turn(self, m: str, i: int) -> None:
        w = workload_frame_of(i, self.rates[m])
        with self.cond:
            while w >= min(self._covered(k) for k in self.rates) + self.window:
                if self.stop.is_set():
                    raise _Stop()
                self.cond.wait(self.poll_s)
            if self.stop.is_set():
                raise _Stop()

    def admitted_one(self, m: str) -> None:
        with self.cond:
            self.admitted[m] += 1
            self.cond.notify_all()


class WorkloadExecutor:
    """Run several models' :class:`.plan.ExecutionPlan` at once, PUs shared as the plans map them.

    Use as a context manager: every model's sub-models are loaded on entry and kept across :meth:`run` calls.

    Parameters
    ----------
    plans : dict of str to ExecutionPlan
        Model name -> its plan (at least one). A PU name used by several plans is one PU: its binding must be
        the same in each (same CPUs, runtime, provider).
    rates : dict of str to float, optional
        Model name -> frames per workload frame (> 0; default 1 for each).
    window : int
        Workload frames a model may admit ahead of the slowest (>= 1; :data:`DEFAULT_WINDOW`).
    queue_depth, fallback_provider, poll_s, join_timeout_s, dispatch
        As for :class:`.executor.PipelineExecutor`, for every model.

    Raises
    ------
    PlanError
        No plan, a rate that is not a positive number or names no plan, a bad window, a PU bound differently by
        two plans; a plan the executor refuses (the message names the model).
    PipelineError
        On entry: a model's executor failed to start (the message names the model).
    """

    def __init__(self, plans: Mapping[str, ExecutionPlan], rates: Optional[Mapping[str, float]] = None,
                 window: int = DEFAULT_WINDOW, queue_depth: int = 2, fallback_provider: Optional[str] = None,
                 poll_s: float = 0.05, join_timeout_s: float = 5.0, dispatch: str = "pull"):
        if not plans:
            raise plan_error("WorkloadExecutor", "plans", "no model to run", "give at least one model's plan")
        rates = dict(rates or {m: 1.0 for m in plans})
        for m, r in rates.items():
            if m not in plans:
                raise plan_error("WorkloadExecutor", "rates", "names %r, which has no plan" % (m,),
                                 "give a rate for each of %s" % sorted(plans))
            try:
                r = float(r)
            except (TypeError, ValueError):
                r = float("nan")
            if not math.isfinite(r) or r <= 0:
                raise plan_error("WorkloadExecutor", "rates", "rate of %r must be a positive number, got %r"
                                 % (m, r), "give frames of each model per workload frame, e.g. 1 or 3")
        missing = sorted(set(plans) - set(rates))
        if missing:
            raise plan_error("WorkloadExecutor", "rates", "no rate for %s" % missing, "give every model a rate")
        if int(window) < 1:
            raise plan_error("WorkloadExecutor", "window", "must be >= 1, got %r" % (window,), "use the default 2")
        self.rates = {m: float(rates[m]) for m in plans}
        self.window, self.poll_s = int(window), float(poll_s)
        users: Dict[str, List[str]] = {}
        for m, plan in plans.items():
            for pu in plan.pus():
                if pu in users and plans[users[pu][0]].bindings[pu] != plan.bindings[pu]:
                    raise plan_error("WorkloadExecutor", "bindings", "PU %r is bound differently by models %r "
                                     "and %r" % (pu, users[pu][0], m), "bind a PU the same way for every model")
                users.setdefault(pu, []).append(m)
        #: PUs used by several models -> the lock their executors share.
        self.shared_pus = {pu: threading.Lock() for pu, ms in users.items() if len(ms) > 1}
        self.executors: Dict[str, PipelineExecutor] = {}
        for m, plan in plans.items():
            try:
                self.executors[m] = PipelineExecutor(
                    plan, queue_depth=queue_depth, fallback_provider=fallback_provider, poll_s=poll_s,
                    join_timeout_s=join_timeout_s, dispatch=dispatch,
                    pu_locks={pu: lock for pu, lock in self.shared_pus.items() if pu in plan.pus()})
            except PlanError as exc:
                raise PlanError("model %r: %s" % (m, exc)) from exc
        self._metrics: Optional[WorkloadMetrics] = None
        self._started = self._closed = False

    def __enter__(self) -> "WorkloadExecutor":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def start(self) -> None:
        """Start every model's executor (one after the other); on a failure close those started and raise it
        with the model's name."""
        if self._started:
            raise PipelineError("WorkloadExecutor.start: already started; create a new executor")
        self._started = True
        for m, ex in self.executors.items():
            try:
                ex.start()
            except (PlanError, PipelineError) as exc:
                self.close()
                raise type(exc)("model %r: %s" % (m, exc)) from exc
            except BaseException:
                self.close()
                raise
        logger.info("workload started: %d model(s), shared PUs %s", len(self.executors), sorted(self.shared_pus))

    def close(self) -> None:
        """Close every model's executor; idempotent."""
        if self._closed:
            return
        self._closed = True
        for ex in self.executors.values():
            ex.close()

    @property
    def metrics(self) -> WorkloadMetrics:
        """Metrics of the last completed :meth:`run` (PipelineError before one completed)."""
        if self._metrics is None:
            raise PipelineError("no completed workload run yet; call WorkloadExecutor.run first")
        return self._metrics

    def run(self, frames: Mapping[str, Sequence[Mapping[str, np.ndarray]]], workload_frames: int,
            on_output: Optional[Callable[[str, int, Dict[str, np.ndarray]], None]] = None) -> WorkloadMetrics:
        """Run ``workload_frames`` workload frames: ``frames_for(workload_frames, rate_m)`` frames of each model
        ``m``, taken cyclically from ``frames[m]``, admitted by the rule of the module docstring.

        Parameters
        ----------
        frames : dict of str to sequence of dict
            Model -> its distinct input frames (at least one), fed cyclically (frame ``i`` is
            ``frames[m][i % len(frames[m])]``).
        workload_frames : int
            Workload frames to run (>= 1).
        on_output : callable(model, i, outputs), optional
            Called with each model's outputs of its frame ``i``, in frame order, in that model's feeder thread
            (an exception it raises stops the workload and propagates).

        Returns
        -------
        WorkloadMetrics
            Also kept as :attr:`metrics`.

        Raises
        ------
        PlanError
            Frames missing for a model, a bad count.
        PipelineError
            A model's task failed or ``on_output`` raised (the message names the model; the first failure is
            raised, the others' stops are logged); the executors are closed.
        KeyboardInterrupt
            After every model's workers were stopped.
        """
        if not self._started or self._closed:
            raise PipelineError("WorkloadExecutor.run: not running; use it inside 'with'")
        if int(workload_frames) < 1:
            raise plan_error("WorkloadExecutor.run", "workload_frames", "must be >= 1, got %r" % (workload_frames,),
                             "give a positive count")
        for m in self.executors:
            if not frames.get(m):
                raise plan_error("WorkloadExecutor.run", "frames", "no frames for model %r" % (m,),
                                 "give every model at least one input frame")
        stop = threading.Event()
        totals = {m: frames_for(int(workload_frames), r) for m, r in self.rates.items()}
        gate = _Admission(self.rates, totals, self.window, self.poll_s, stop)
        errors: List[BaseException] = []
        lock = threading.Lock()

        def fail(m: str, exc: BaseException) -> None:
            with lock:
                first = not errors
                if first:
                    errors.append(exc if isinstance(exc, PipelineError) and str(exc).startswith("model ")
                                  else _model_error(m, exc))
            stop.set()
            if first:  # the failed model's executor too: a failed on_output leaves its pipeline running
                for ex in self.executors.values():
                    ex.abort("stopped: model %r failed" % (m,))

        def feed(m: str) -> None:
            pool, total, ex = list(frames[m]), totals[m], self.executors[m]

            def gated():
                for i in range(total):
                    gate.wait_turn(m, i)
                    gate.admitted_one(m)
                    yield pool[i % len(pool)]

            try:
                for i, out in enumerate(ex.run(gated())):
                    if on_output is not None:
                        on_output(m, i, out)
            except _Stop:
                ex.abort("stopped")
                logger.debug("model %s stopped: another model failed", m)
            except BaseException as exc:  # noqa: B902 - carried to the caller's thread
                if stop.is_set() and isinstance(exc, PipelineError) and str(exc).startswith("stopped"):
                    logger.debug("model %s stopped: %s", m, exc)
                else:
                    fail(m, exc)

        threads = [threading.Thread(target=feed, args=(m,), name="parapipe-feed-%s" % m, daemon=True)
                   for m in self.executors]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(self.poll_s)
        except BaseException:  # Ctrl-C in the caller's thread: stop every model, then re-raise
            stop.set()
            for ex in self.executors.values():
                ex.abort("stopped: interrupted")
            for t in threads:
                t.join()
            self.close()
            raise
        if errors:
            self.close()
            raise errors[0]
        self._metrics = _merge(self.rates, int(workload_frames), {m: ex.metrics for m, ex in self.executors.items()})
        return self._metrics


def _model_error(model: str, exc: BaseException) -> PipelineError:
    detail = str(exc) if isinstance(exc, PipelineError) else " ".join(("%s: %s" % (type(exc).__name__, exc)).split())
    err = PipelineError("model %r: %s" % (model, detail))
    err.__cause__ = exc
    return err


def _merge(rates: Mapping[str, float], workload_frames: int, per_model: Mapping[str, RunMetrics]) -> WorkloadMetrics:
    """One :class:`WorkloadMetrics` from each model's :class:`.metrics.RunMetrics` of the same run."""
    origin = min(mm.origin_s for mm in per_model.values())
    starts: List[float] = []
    ends: List[float] = []
    trace: List[TraceEvent] = []
    busy: Dict[str, float] = {}
    for m, mm in per_model.items():
        shift = mm.origin_s - origin
        first = [e.start_s for e in mm.trace if e.stage == 0]
        if first and mm.frames:
            starts.append(min(first) + shift)
            ends.append(min(first) + shift + mm.wall_s)
        trace.extend(TraceEvent(e.stage, e.pu, e.task, e.frame, e.start_s + shift, e.end_s + shift, m)
                     for e in mm.trace)
        for pu, b in mm.pu_busy_s.items():
            busy[pu] = busy.get(pu, 0.0) + rates[m] * b
    wall_s = max(ends) - min(starts) if starts else 0.0
    util = {pu: (b * workload_frames / wall_s if wall_s > 0 else 0.0) for pu, b in busy.items()}
    trace.sort(key=lambda e: (e.start_s, e.model or "", e.stage, e.pu))
    return WorkloadMetrics(workload_frames=workload_frames, rates=dict(rates), wall_s=wall_s,
                           throughput_per_s=workload_frames / wall_s if wall_s > 0 else 0.0,
                           models=dict(per_model), pu_busy_s=busy, pu_utilisation=util, trace=trace)
