"""The pipelined executor: one pinned worker thread per (stage, PU), bounded queues between stages.

Shape after torchgpipe's ``worker.py`` (kakaobrain/torchgpipe): workers live inside a context manager, take
work from input queues, stop on a sentinel, and carry exceptions back to the caller, which re-raises them.
Here:

- every (stage, PU) pair of the plan gets a thread that pins itself (``os.sched_setaffinity``) and then
  loads its sub-models through the PU's runtime adapter (:mod:`.runtimes`: ONNX Runtime sessions by
  default, whose own threads inherit the mask, :mod:`.session`);
- the caller's tensors are copied when a frame is admitted (:meth:`PipelineExecutor.run`), so the caller may
  refill its arrays at once; bindings are checked against the CPUs this process may use before any thread
  starts (:func:`.plan.check_cpu_bindings`);
- a frame enters a stage as a :class:`.worker.Frame` (a per-frame tensor dict and a
  Condition) put into the queue of each of the stage's workers; a replicated stage's frames go by default into
  one queue of the stage, from which each replica's lead worker takes the next frame when it is free and hands
  it to the replica's other workers (``dispatch="pull"``: work-conserving, so every replica gets frames in
  proportion to its speed as it runs, the shares the cost model assumes; measured on squeezenet with a
  background load taking 30 % of core 1: 252 frames/s against 220/s for frames dealt alternately), or are dealt
  by :class:`.dispatch.SmoothWeightedRoundRobin` with the plan's ``replica_shares`` (``dispatch="shares"``:
  deterministic); frames that leave a stage's replicas out of order are put back in order before the next
  stage (:class:`_InOrder`) and at the output, so every worker takes its frames in frame order; a worker runs
  its tasks in plan order,
  waiting on the Condition for same-stage deps; the worker that finishes the frame last passes on only the
  tensors later stages or the caller need;
- stage queues are bounded (``queue_depth``, default 2; :class:`.queues.BoundedQueue`, whose waits run in C: the
  caller's thread then spends ~45 µs of CPU per frame instead of ~62 µs with ``queue.Queue``, measured on
  squeezenet's replicated host mapping); the output queue is unbounded but the caller keeps at
  most ``Σ_stages replicas · (queue_depth + 2) + 1`` frames in flight, so no put can block forever;
- a PU that serves several stages runs one task at a time (a lock per such PU around ``run``), so the
  stages' threads do not time-slice its cores; several executors sharing a PU (the models of a workload,
  :mod:`.workload`) share its lock (``pu_locks``), so the PU runs one task of any of them at a time;
- every blocking call uses a timeout (``poll_s``) and checks a stop flag, so a failed peer never hangs the
  rest; a task error is re-raised in the caller as an execution error naming stage, PU and task.

``InferenceSession.run`` (and OpenVINO's ``InferRequest.infer``) release the GIL, so workers of one process
run truly in parallel (the Python binding releases it around the run: ``py::gil_scoped_release`` in
onnxruntime's ``onnxruntime/python/onnxruntime_pybind_state.cc``).

This module is the one implementation of the executor: it lives in ``device_agents/ppexec`` so that it ships
to boards in deploy bundles (standard library, numpy and onnxruntime only; Python >= 3.8). It raises
:class:`.errors.PlanError` (a bad plan, frame or option) and :class:`.errors.PipelineError` (a failed run).
Workers see the executor only through a :class:`.worker.WorkerContext` (its stop flag, poll interval, queue
depth and the three callbacks they need), never through its attributes.

One piece (about 500 lines) because :class:`PipelineExecutor` is one lifecycle: start the workers, admit
frames under the in-flight bound, forward and deal them between stages, put outputs back in order, and on any
failure stop every thread and re-raise; these share the executor's run state and lock. The workers
(:mod:`.worker`), queues (:mod:`.queues`), dealing policy (:mod:`.dispatch`) and metrics (:mod:`.metrics`)
are modules of their own.
"""
from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections import abc
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

import numpy as np

from .dispatch import SmoothWeightedRoundRobin
from .errors import PipelineError, PlanError, plan_error
from .metrics import RunMetrics, compute_metrics
from .plan import ExecutionPlan, PUBinding, Task, check_cpu_bindings, validate_plan
from .queues import BoundedQueue
from .runtimes import RuntimeAdapter, get_adapter
from .session import provider_problem
from .worker import STOP, Frame, Run, Stopped, Worker, WorkerContext

DISPATCH_POLICIES = ("pull", "shares")
"""How a replicated stage's frames reach its replicas: ``"pull"`` (default), each replica takes the next frame
when it is free; ``"shares"``, frames are dealt by smooth weighted round robin with the plan's
``replica_shares``."""

MAX_RECORDED_FRAMES = 100_000
"""A run's metrics and trace cover its last this many frames: a run over an endless stream would otherwise grow
without bound (a two-stage chain at ~10,000 frames/s filled 24 GB in 45 minutes; each task execution costs
~200 bytes, so 100,000 frames of a few tasks hold tens of MB)."""

__all__ = ["DISPATCH_POLICIES", "MAX_RECORDED_FRAMES", "PipelineExecutor", "run_pipeline"]

logger = logging.getLogger(__name__)


class PipelineExecutor:
    """Run an :class:`.plan.ExecutionPlan` as a software pipeline of pinned workers (one runtime per PU).

    Use as a context manager: sub-models are loaded on entry (one thread per (stage, PU)) and kept across
    :meth:`run` calls; threads are stopped and joined on exit.

    Parameters
    ----------
    plan : ExecutionPlan
        Checked with :func:`.plan.validate_plan`.
    queue_depth : int
        Capacity of each stage's input queue (default 2, enough to hide hand-over jitter between stages).
    fallback_provider : str, optional
        Provider used (without provider options) for an ``onnxruntime`` PU whose bound provider is missing;
        without it a missing provider is an error.
    poll_s : float
        Longest a worker or the caller blocks before checking for failure or shutdown (default 0.05 s, so an
        error reaches the caller well within a second).
    join_timeout_s : float
        Time allowed for all workers to exit on close (default 5 s; a task stuck inside its runtime cannot be
        interrupted: such a daemon thread is logged and abandoned).
    serialise_shared_pus : bool
        A PU that serves several stages (e.g. cpu0 -> cpu1 -> cpu0) runs one task at a time, as the cost
        model books it, instead of letting the stages' threads time-slice the core (default True: measured
        on inception_v1's five-stage host mapping, +22 % throughput, since time-slicing evicts each stage's
        weights from the core's caches and lets a short stage wait behind a long one's slices).
    dispatch : str
        How a replicated stage's frames reach its replicas (:data:`DISPATCH_POLICIES`): ``"pull"`` (default),
        each replica takes the next frame when it is free; ``"shares"``, dealt by smooth weighted round robin
        with the plan's ``replica_shares`` (the same sequence on every run).
    pu_locks : dict of str to threading.Lock, optional
        PU -> a lock shared with other executors running at the same time (the models of a workload,
        :class:`.workload.WorkloadExecutor`): every task of this plan on that PU runs holding it, so the PU
        runs one task of any of the executors at a time and its busy time is the sum of theirs, as the cost
        model books a shared PU. Used whatever ``serialise_shared_pus`` says; PUs the plan does not use are
        ignored.

    Raises
    ------
    PlanError
        Invalid plan, ``queue_depth`` or ``dispatch``; on entry, before any thread starts, a PU pinned to CPUs
        this process may not use or running more threads than its CPUs (:func:`.plan.check_cpu_bindings`), a
        PU bound to a runtime this ppexec has no adapter for.
    PipelineError
        On entry: a binding its runtime refuses here (``adapter.check``: a missing provider, device or
        runtime), CPU ids the OS refuses to pin to, a sub-model that cannot be loaded. In :meth:`run`: a task
        failed (the message names stage, PU and task; the runtime's error is chained as ``__cause__``).

    Examples
    --------
    >>> with PipelineExecutor(plan) as ex:                       # doctest: +SKIP
    ...     outputs = list(ex.run(frames))
    ...     print(ex.metrics.throughput_per_s)
    """

    def __init__(self, plan: ExecutionPlan, queue_depth: int = 2, fallback_provider: Optional[str] = None,
                 poll_s: float = 0.05, join_timeout_s: float = 5.0,
                 serialise_shared_pus: bool = True, dispatch: str = "pull",
                 pu_locks: Optional[Mapping[str, threading.Lock]] = None):
        validate_plan(plan)
        if dispatch not in DISPATCH_POLICIES:
            raise plan_error("PipelineExecutor", "dispatch", f"unknown policy {dispatch!r}",
                             f"use one of {list(DISPATCH_POLICIES)}")
        self.dispatch = dispatch
        if int(queue_depth) < 1:
            raise plan_error("PipelineExecutor", "queue_depth", f"must be >= 1, got {queue_depth}",
                             "use the default 2")
        self.plan, self.queue_depth, self.fallback_provider = plan, int(queue_depth), fallback_provider
        self.poll_s, self.join_timeout_s = float(poll_s), float(join_timeout_s)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._error: Optional[Tuple[int, str, Optional[str], str, BaseException]] = None
        self._workers: List[List[Worker]] = []
        self._started = self._closed = False
        self._active: Optional[Run] = None
        self._metrics: Optional[RunMetrics] = None
        n = len(plan.stages)
        self._keep: List[Set[str]] = []
        later: Set[str] = set(plan.model_outputs)
        for s in range(n - 1, -1, -1):
            self._keep.append(set(later))
            for task in plan.stages[s]:
                later.update(task.inputs)
        self._keep.reverse()  # _keep[s]: tensors stage s must pass on
        replicas = [plan.replica_count(s) for s in range(n)]
        # Frames admitted and not yet yielded: enough to fill every queue and worker, and a bound on the outputs
        # held back for reordering (a slow or stalled replica cannot make them pile up).
        self._limit = sum(r * (self.queue_depth + 2) for r in replicas) + 1
        # One lock per stage around dealing a frame into it: the last workers of two frames of a replicated
        # stage may forward at once, and every worker of the next stage must see the frames in one order.
        self._deal_locks = [threading.Lock() for _ in range(n)]
        # "pull": one queue per replicated stage that every replica's lead worker takes frames from; the other
        # stages' frames are dealt (to their only replica, or by share)
        self._pull_q: Dict[int, BoundedQueue] = {
            s: BoundedQueue(self.queue_depth * r) for s, r in enumerate(replicas)
            if r > 1 and dispatch == "pull"}
        self._dealers: Dict[int, SmoothWeightedRoundRobin] = {
            s: SmoothWeightedRoundRobin(plan.replica_shares.get(s) or [1.0]) for s in range(n)
            if s not in self._pull_q}
        self._replica_workers: List[List[List[Worker]]] = []  # stage -> replica -> workers
        self.serialise_shared_pus = bool(serialise_shared_pus)
        self._pu_locks: Dict[str, threading.Lock] = {}  # PU -> lock, for PUs serving several stages
        self._shared_locks = {pu: lock for pu, lock in (pu_locks or {}).items() if pu in plan.bindings}
        self._aborted: Optional[str] = None  # why abort() stopped the run, raised in the caller's thread

    # ----------------------------------------------------------------------------------------- life cycle
    def __enter__(self) -> "PipelineExecutor":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _check_binding(self, pu: str) -> Tuple[RuntimeAdapter, PUBinding]:
        """The adapter and the binding ``pu`` runs with: ``adapter.check`` passed, or the ORT fallback
        provider substituted (logged); else the check's one-line problem as an execution error."""
        binding = self.plan.bindings[pu]
        adapter = get_adapter(binding.runtime, pu)
        problem = adapter.check(pu, binding)
        fallback = self.fallback_provider
        if (problem is not None and binding.runtime == "onnxruntime"
                and fallback not in (None, binding.provider)):
            substitute = dataclasses.replace(binding, provider=fallback, provider_options={})
            if adapter.check(pu, substitute) is None:
                logger.warning("PU %s: %s; falling back to %s", pu, problem, fallback)
                return adapter, substitute
            problem = provider_problem(pu, binding, fallback) or problem
        if problem is not None:
            raise PipelineError(problem)
        return adapter, binding

    def start(self) -> None:
        """Check every PU's binding with its runtime adapter, start the workers and wait until every
        sub-model is loaded.

        Raises
        ------
        PlanError
            Before any thread starts: a PU pinned to CPUs outside ``os.sched_getaffinity(0)`` (``taskset``
            and cgroup limits: a thread could widen its mask beyond ``taskset``'s, so pinning alone would not
            refuse them) or running more threads than its CPUs (:func:`.plan.check_cpu_bindings`, the check
            parapipe's CLI applies to a board's facts); a PU bound to a runtime without adapter in this ppexec.
        PipelineError
            A binding its adapter refuses (missing provider, device, runtime), CPU ids the OS refuses or a
            sub-model that cannot be loaded (workers are joined first).
        """
        if self._started:
            raise PipelineError("PipelineExecutor.start: already started; create a new executor")
        self._started = True
        check_cpu_bindings({pu: self.plan.bindings[pu] for pu in self.plan.pus()})
        checked = {pu: self._check_binding(pu) for pu in self.plan.pus()}
        groups = [[_tasks_by_pu(tasks) for tasks in self.plan.replicas(s)] for s in range(len(self.plan.stages))]
        if self.serialise_shared_pus:  # a PU with a worker in several (stage, replica) groups
            workers_of: Dict[str, int] = {}
            for by_pu in (g for stage in groups for g in stage):
                for pu in by_pu:
                    workers_of[pu] = workers_of.get(pu, 0) + 1
            self._pu_locks = {pu: threading.Lock() for pu, k in workers_of.items() if k > 1}
        self._pu_locks.update(self._shared_locks)  # shared with other executors: one task of any at a time
        context = WorkerContext(stop=self._stop, poll_s=self.poll_s, queue_depth=self.queue_depth,
                                fail=self._fail, put=self._put, forward=self._forward)
        try:
            for s, stage in enumerate(groups):
                per_replica = []
                for by_pu in stage:
                    workers = [Worker(context, s, pu, ts, *checked[pu], self._pu_locks.get(pu))
                               for pu, ts in by_pu.items()]
                    if s in self._pull_q:  # the lead takes frames from the stage's queue and hands them on
                        workers[0].in_q, workers[0].siblings = self._pull_q[s], workers[1:]
                    per_replica.append(workers)
                self._replica_workers.append(per_replica)
                self._workers.append([w for ws in per_replica for w in ws])
            for w in self.workers:
                w.start()
            for w in self.workers:
                while not w.ready.wait(self.poll_s):
                    if self._error is not None:
                        break
            self._raise_if_failed()
        except BaseException:
            self.close()
            raise
        logger.info("pipeline started: %d stage(s), %d worker(s)", len(self._workers), len(self.workers))

    def close(self) -> None:
        """Stop all workers (sentinel + stop flag) and join them; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for w in self.workers:
            try:
                w.in_q.put_nowait(STOP)
            except queue.Full:
                pass  # the stop flag ends it at its next poll
        deadline = time.monotonic() + self.join_timeout_s
        for w in self.workers:
            w.join(timeout=max(0.0, deadline - time.monotonic()))
        alive = [w.name for w in self.workers if w.is_alive()]
        if alive:
            logger.warning("workers still inside their runtime after %.1f s, abandoned: %s",
                           self.join_timeout_s, alive)
        for w in self.workers:
            models, w.models = w.models, []
            if not w.is_alive():  # an abandoned worker may still be inside one of its models
                for model in models:
                    model.close()

    @property
    def workers(self) -> List[Worker]:
        """All worker threads, stage by stage."""
        return [w for stage in self._workers for w in stage]

    @property
    def affinity(self) -> Dict[Tuple[int, str], frozenset]:
        """(stage, PU) -> CPU set the worker thread actually runs on (read back after pinning)."""
        return {(w.stage, w.pu): w.affinity for w in self.workers}

    @property
    def metrics(self) -> RunMetrics:
        """Metrics of the last completed :meth:`run`.

        Raises
        ------
        ExecutionError
            No run has completed yet.
        """
        if self._metrics is None:
            raise PipelineError("no completed run yet; iterate PipelineExecutor.run(frames) to the end first")
        return self._metrics

    # ----------------------------------------------------------------------------------------- failures
    def _fail(self, stage: int, pu: str, task: Optional[str], doing: str, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = (stage, pu, task, doing, exc)
        self._stop.set()

    def abort(self, reason: str) -> None:
        """Stop the run from another thread (another model of a workload failed, Ctrl-C): the workers stop at
        their next poll and the thread iterating :meth:`run` gets a :class:`.errors.PipelineError` saying
        ``reason``; the executor is closed by that thread. Idempotent; the first reason is kept."""
        with self._lock:
            if self._aborted is None:
                self._aborted = reason
        self._stop.set()

    def _raise_if_failed(self) -> None:
        if self._error is None:
            if self._aborted is not None:
                self.close()
                raise PipelineError(self._aborted)
            return
        stage, pu, task, doing, exc = self._error
        self.close()
        if isinstance(exc, (PipelineError, PlanError)):  # already names the PU and says how to fix it
            raise PipelineError(f"stage {stage}: {exc}") from exc
        what = f"stage {stage}, PU {pu!r}" + (f", task {task!r}" if task else "")
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise PipelineError(f"{what} failed while {doing}: {detail}; check the task's sub-model and "
                            "the frame's tensors (shapes, dtypes)") from exc

    def _put(self, q: BoundedQueue, item: object) -> None:
        """Put with a timeout loop; gives up (``Stopped``) when the executor stops."""
        while True:
            if self._stop.is_set():
                raise Stopped()
            try:
                q.put(item, timeout=self.poll_s)
                return
            except queue.Full:
                continue

    def _deal(self, run: Run, seq: int, stage: int, tensors: Dict[str, np.ndarray], put) -> None:
        """Hand frame ``seq`` to ``stage``: into the stage's queue that its replicas pull from
        (``dispatch="pull"``), else to every worker of the replica its dealer picks (the only one for a stage
        without replicas), in the same order for all of them."""
        with self._deal_locks[stage]:
            pull_q = self._pull_q.get(stage)
            if pull_q is not None:  # the replica whose lead is free first takes it (Worker._pulled)
                put(pull_q, (run, seq, tensors))
                return
            workers = self._replica_workers[stage][self._dealers[stage].pick()]
            frame = Frame(run, seq, stage, tensors, len(workers))
            for w in workers:
                put(w.in_q, frame)

    def _forward(self, frame: Frame) -> None:
        """Called (through the :class:`.worker.WorkerContext`) by the last worker to finish ``frame``: pass the
        needed tensors on."""
        run, s = frame.run, frame.stage
        if s + 1 < len(self._workers):
            keep = self._keep[s]
            tensors = {k: v for k, v in frame.tensors.items() if k in keep}
            in_order = run.in_order.get(s)
            if in_order is None:  # one replica: its frames leave in the order they came
                self._deal(run, frame.seq, s + 1, tensors, self._put)
            else:  # replicas finish in any order: the next stage takes them in frame order
                in_order.release(frame.seq, tensors, lambda seq, ts: self._deal(run, seq, s + 1, ts, self._put))
        else:
            out = {k: frame.tensors[k] for k in self.plan.model_outputs}
            run.exit_s.append((frame.seq, time.perf_counter() - run.t0))
            run.out_q.put((frame.seq, out))

    # ----------------------------------------------------------------------------------------- running
    def run(self, frames: Iterable[Mapping[str, np.ndarray]]) -> Iterator[Dict[str, np.ndarray]]:
        """Stream ``frames`` through the pipeline; yield each frame's outputs, in input order.

        Parameters
        ----------
        frames : iterable of dict of str to numpy.ndarray
            Each frame maps every name of ``plan.model_inputs`` to its tensor (extra keys are ignored). The
            executor owns copies: each numpy array is copied (C order) when its frame is admitted, so the caller
            may refill one buffer per frame as soon as the iterator asks for the next one; values of other types
            (which ONNX Runtime converts itself) are passed as given. The copy of squeezenet's float32
            1x3x224x224 input (602 kB) took 16-50 µs where one inference of that model on one core took ~25 ms,
            about 0.1-0.2 % (re-measure the copy: ``python -m timeit -s "import numpy as np; a = np.zeros((1, 3,
            224, 224), np.float32)" "np.array(a, copy=True, order='C')"``).

        Yields
        ------
        dict of str to numpy.ndarray
            ``plan.model_outputs`` of each frame. After the last one, :attr:`metrics` describes the run.
            Leaving the loop early drains the frames in flight; the executor stays usable.

        Raises
        ------
        InputError
            A frame lacks a model input.
        ExecutionError
            The executor is not started, closed or failed, another run is active, or a task failed.
        """
        if not self._started or self._closed:
            raise PipelineError("PipelineExecutor.run: the executor is not running; use it inside 'with'")
        return self._stream(iter(frames))

    def _admit(self, run: Run, seq: int, frame: Mapping[str, np.ndarray]) -> None:
        if type(frame) is not dict and not isinstance(frame, abc.Mapping):  # a dict: the fast path
            raise plan_error("frames", f"frame {seq}", f"is a {type(frame).__name__}, not a mapping",
                             f"give each frame as a dict {{name: numpy array}} for {self.plan.model_inputs}")
        missing = [n for n in self.plan.model_inputs if n not in frame]
        if missing:
            raise plan_error("frames", f"frame {seq}", f"missing model input(s) {missing}",
                             f"give every frame the tensors {self.plan.model_inputs}")
        tensors = {}
        for n in self.plan.model_inputs:  # copied: the caller may refill its arrays for the next frame
            value = frame[n]
            tensors[n] = np.array(value, copy=True, order="C") if isinstance(value, np.ndarray) else value
        self._deal(run, seq, 0, tensors, self._put_admit)

    def _put_admit(self, q: BoundedQueue, item: object) -> None:
        """The caller's put into stage 0: waits while the queue is full, raising a worker's failure."""
        while True:
            self._raise_if_failed()
            try:
                q.put(item, timeout=self.poll_s)
                return
            except queue.Full:
                continue

    def _stream(self, it: Iterator) -> Iterator[Dict[str, np.ndarray]]:
        if self._active is not None:  # checked on the first next(): an unstarted generator holds nothing
            raise PipelineError("PipelineExecutor.run: another run is still active; finish it first")
        per_frame = sum(max(sum(len(w.tasks) for w in replica) for replica in stage)
                        for stage in self._replica_workers)
        in_order = [s for s in range(len(self._workers) - 1) if self.plan.replica_count(s) > 1]
        self._active = run = Run(MAX_RECORDED_FRAMES, per_frame, in_order)
        pending: Dict[int, Dict[str, np.ndarray]] = {}
        fed = received = yielded = 0
        exhausted = False
        try:
            while True:
                self._raise_if_failed()
                if not exhausted and fed - yielded < self._limit:
                    try:
                        frame = next(it)
                    except StopIteration:
                        exhausted = True
                    else:
                        self._admit(run, fed, frame)
                        fed += 1
                if exhausted and received == fed:
                    break
                blocking = exhausted or fed - yielded >= self._limit
                try:
                    seq, out = run.out_q.get(timeout=self.poll_s) if blocking else run.out_q.get_nowait()
                except queue.Empty:
                    continue
                pending[seq] = out
                received += 1
                while yielded in pending:
                    out = pending.pop(yielded)
                    yielded += 1
                    yield out
        except GeneratorExit:
            self._drain(run, fed - received)
            raise
        except BaseException:  # task failure, bad frame, KeyboardInterrupt: stop everything, then re-raise
            self.close()
            raise
        finally:
            self._active = None
        self._metrics = compute_metrics(list(run.trace), dict(run.exit_s), len(self._workers), self.plan.pus())
        self._metrics.origin_s = run.t0

    def _drain(self, run: Run, in_flight: int) -> None:
        """Wait for frames still in flight after the caller left a run early (closes on failure)."""
        while in_flight > 0:
            if self._error is not None or self._aborted is not None or self._closed:
                logger.warning("run abandoned with %d frame(s) in flight after a failure", in_flight)
                self.close()
                return
            try:
                run.out_q.get(timeout=self.poll_s)
                in_flight -= 1
            except queue.Empty:
                continue


def _tasks_by_pu(tasks: List[Task]) -> Dict[str, List[Task]]:
    """The tasks of one (stage, replica) group by PU, each PU's in plan order: one worker per key."""
    by_pu: Dict[str, List[Task]] = {}
    for task in tasks:
        by_pu.setdefault(task.pu, []).append(task)
    return by_pu


def run_pipeline(plan: ExecutionPlan, frames: Iterable[Mapping[str, np.ndarray]], warmup: int = 5,
                 queue_depth: int = 2, fallback_provider: Optional[str] = None,
                 dispatch: str = "pull") -> Tuple[List[Dict[str, np.ndarray]], RunMetrics]:
    """Run ``frames`` through ``plan`` once, after ``warmup`` unmeasured frames; return outputs and metrics.

    Parameters
    ----------
    plan : ExecutionPlan
    frames : iterable of dict of str to numpy.ndarray
        Materialised into a list; the warm-up frames are taken from it cyclically (``frames[i % n]``).
    warmup : int
        Frames pushed through (and discarded) before the measured run (default 5: enough for ORT's first-run
        allocations and the pipeline fill, observed here; ``0`` for none).
    queue_depth, fallback_provider, dispatch
        As for :class:`PipelineExecutor`.

    Returns
    -------
    outputs : list of dict of str to numpy.ndarray
        One dict per frame, in input order.
    metrics : RunMetrics
        Of the measured frames only.
    """
    frames = list(frames)
    if warmup < 0:
        raise plan_error("run_pipeline", "warmup", f"must be >= 0, got {warmup}", "use 0 for no warm-up")
    with PipelineExecutor(plan, queue_depth=queue_depth, fallback_provider=fallback_provider,
                          dispatch=dispatch) as ex:
        if warmup and frames:
            for _ in ex.run(frames[i % len(frames)] for i in range(warmup)):
                pass
        outputs = list(ex.run(frames))
        return outputs, ex.metrics
