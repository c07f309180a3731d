"""Worker threads of the pipelined executor and the per-frame state they share.

One :class:`Worker` serves one (stage, PU) pair: it pins itself, loads its tasks' sub-models through the PU's
runtime adapter (:mod:`.runtimes`), then takes
:class:`Frame` objects from its bounded input queue and runs its tasks on them, waiting on the frame's
Condition for same-stage dependencies. The worker that finishes a frame last hands it on through its
:class:`WorkerContext` (``forward``: the executor passes it to the next stage). Errors are reported through the
context (``fail``), never raised out of the thread. Workers know the executor only through that context; this
module imports nothing of the executor.
"""
from __future__ import annotations

import collections
import dataclasses
import queue
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import numpy as np

from .metrics import TraceEvent
from .plan import PUBinding, Task
from .queues import BoundedQueue
from .runtimes import RuntimeAdapter
from .session import pin_current_thread

__all__ = ["STOP", "Stopped", "Run", "InOrder", "Frame", "WorkerContext", "Worker"]

STOP = object()  # sentinel: the worker receiving it exits


class Stopped(Exception):
    """Raised inside a worker when the executor is shutting down."""


class InOrder:
    """The hand-off after a replicated stage: frames its replicas finish in any order go on in frame order.

    A frame finished before an earlier one waits in ``held`` until every earlier frame has gone on. ``held``
    holds at most the frames in flight, which the executor bounds (``PipelineExecutor``: at most
    ``Σ_stages replicas · (queue_depth + 2) + 1`` frames admitted and not yet returned); held frames take no
    queue slot, so the replicas keep taking frames while an earlier one is still running.
    """

    __slots__ = ("lock", "next_seq", "held")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_seq = 0  # frames of a run are numbered 0, 1, 2, ... in admission order
        self.held: Dict[int, Dict[str, np.ndarray]] = {}

    def release(self, seq: int, tensors: Dict[str, np.ndarray],
                deal: Callable[[int, Dict[str, np.ndarray]], None]) -> None:
        """Record frame ``seq`` as finished and ``deal`` every frame that may now go on, in frame order (under
        the lock: ``deal`` may wait for room in the next stage, and no later frame may overtake meanwhile)."""
        with self.lock:
            self.held[seq] = tensors
            while self.next_seq in self.held:
                nxt = self.next_seq
                deal(nxt, self.held.pop(nxt))
                self.next_seq = nxt + 1


class Run:
    """Book-keeping of one ``run()`` call: time origin, trace, exit times, the output queue and the in-order
    hand-off after each replicated stage (``in_order``: stage -> :class:`InOrder`, for the stages listed in
    ``in_order_stages``).

    ``exit_s`` (``(frame, seconds)`` when each frame left the last stage) keeps the last ``max_frames`` frames
    and ``trace`` (task executions) twice as many frames' ``events_per_frame`` events (early stages run ahead
    of the last one, so the exiting frames' first tasks lie further back), so that a
    run over an endless stream (a camera) holds bounded memory; appending to a bounded deque is thread-safe.
    """

    def __init__(self, max_frames: Optional[int] = None, events_per_frame: int = 1,
                 in_order_stages: Iterable[int] = ()) -> None:
        self.t0 = time.perf_counter()
        self.trace: "collections.deque[TraceEvent]" = collections.deque(
            maxlen=None if max_frames is None else 2 * max_frames * max(1, events_per_frame))
        self.exit_s: "collections.deque[Tuple[int, float]]" = collections.deque(maxlen=max_frames)
        self.out_q: "queue.SimpleQueue[Tuple[int, Dict[str, np.ndarray]]]" = queue.SimpleQueue()  # unbounded; C
        self.in_order: Dict[int, InOrder] = {s: InOrder() for s in in_order_stages}


class Frame:
    """One frame inside one stage: its tensors, the tasks done so far and the workers still busy on it."""

    __slots__ = ("run", "seq", "stage", "tensors", "cond", "done", "remaining")

    def __init__(self, run: Run, seq: int, stage: int, tensors: Dict[str, np.ndarray], n_workers: int):
        self.run, self.seq, self.stage, self.tensors = run, seq, stage, tensors
        # one worker runs its tasks in order: nothing to wait for, no Condition to build per frame
        self.cond = threading.Condition() if n_workers > 1 else None
        self.done: Set[str] = set()
        self.remaining = n_workers


@dataclasses.dataclass(frozen=True)
class WorkerContext:
    """What a worker needs of the pipeline that runs it (the executor builds one and hands it to every worker).

    Attributes
    ----------
    stop : threading.Event
        Set when the pipeline stops (failure or close); every wait checks it at least every ``poll_s``.
    poll_s : float
        Longest blocking wait before checking ``stop``, s.
    queue_depth : int
        Capacity of a worker's own input queue (frames).
    fail : callable(stage, pu, task or None, doing, exception)
        Report a failure; the caller of the pipeline re-raises it as a :class:`.errors.PipelineError`.
    put : callable(queue, item)
        Put into a bounded queue, waiting while it is full; raises :class:`Stopped` once ``stop`` is set.
    forward : callable(Frame)
        Hand a frame whose stage is done to the next stage (or to the caller after the last stage).
    """

    stop: threading.Event
    poll_s: float
    queue_depth: int
    fail: Callable[[int, str, Optional[str], str, BaseException], None]
    put: Callable[[BoundedQueue, object], None]
    forward: Callable[["Frame"], None]


class Worker(threading.Thread):
    """The thread serving one (stage, PU) pair (of one replica, for a replicated stage).

    ``pu_lock``: held around each task run when the PU serves several such pairs (one task at a time on it);
    None otherwise.
    """

    def __init__(self, context: WorkerContext, stage: int, pu: str, tasks: List[Task],
                 adapter: RuntimeAdapter, binding: PUBinding, pu_lock: Optional[threading.Lock] = None):
        super().__init__(name=f"parapipe-s{stage}-{pu}", daemon=True)
        self.context, self.stage, self.pu, self.tasks = context, stage, pu, tasks
        self.adapter, self.binding, self.pu_lock = adapter, binding, pu_lock
        self.in_q = BoundedQueue(context.queue_depth)
        self.ready = threading.Event()
        self.affinity: frozenset = frozenset()
        self.models: list = []  # one loaded model (.runtimes.LoadedModel) per task
        self.siblings: List["Worker"] = []  # a pulling lead's replica mates (``dispatch="pull"``)
        self._current: Optional[str] = None

    def run(self) -> None:
        context = self.context
        try:
            self.affinity = pin_current_thread(self.pu, self.binding.cpus)
            for task in self.tasks:  # after pinning: the runtime's own threads inherit the mask
                self._current = task.name
                self.models.append(self.adapter.load(task.model, self.binding, self.pu))
            self._current = None
        except BaseException as exc:  # carried back to the caller of start()
            context.fail(self.stage, self.pu, self._current, "loading its sub-model", exc)
            self.ready.set()
            return
        self.ready.set()
        stop = context.stop
        while not stop.is_set():
            try:
                item = self.in_q.get(timeout=context.poll_s)
            except queue.Empty:
                continue
            if item is STOP:
                return
            try:
                if type(item) is tuple:  # pulled from a replicated stage's queue
                    item = self._pulled(*item)
                self._process(item)
            except Stopped:
                return
            except BaseException as exc:
                context.fail(self.stage, self.pu, self._current, f"running frame {item.seq}", exc)
                return

    def _pulled(self, run: Run, seq: int, tensors: Dict[str, np.ndarray]) -> Frame:
        """A frame this lead took for its replica: handed to the replica's other workers too."""
        frame = Frame(run, seq, self.stage, tensors, 1 + len(self.siblings))
        for w in self.siblings:
            self.context.put(w.in_q, frame)
        return frame

    def _process(self, frame: Frame) -> None:
        if frame.cond is None:
            return self._process_alone(frame)
        context, run = self.context, frame.run
        for task, model in zip(self.tasks, self.models):
            self._current = task.name
            with frame.cond:
                while not frame.done.issuperset(task.deps):
                    if context.stop.is_set():
                        raise Stopped()
                    frame.cond.wait(context.poll_s)
                feeds = {name: frame.tensors[name] for name in task.inputs}
            outs, start, end = _timed_run(model, task, feeds, self.pu_lock)
            with frame.cond:
                frame.tensors.update(zip(task.outputs, outs))
                frame.done.add(task.name)
                frame.cond.notify_all()
            run.trace.append(TraceEvent(self.stage, self.pu, task.name, frame.seq, start - run.t0,
                                        end - run.t0))
        self._current = None
        with frame.cond:
            frame.remaining -= 1
            last = frame.remaining == 0
        if last:
            context.forward(frame)

    def _process_alone(self, frame: Frame) -> None:
        """:meth:`_process` for the only worker of its stage (or replica): its tasks run in schedule order, so
        every dependency is met when a task starts."""
        run, tensors = frame.run, frame.tensors
        for task, model in zip(self.tasks, self.models):
            self._current = task.name
            feeds = {name: tensors[name] for name in task.inputs}
            outs, start, end = _timed_run(model, task, feeds, self.pu_lock)
            tensors.update(zip(task.outputs, outs))
            frame.done.add(task.name)
            run.trace.append(TraceEvent(self.stage, self.pu, task.name, frame.seq, start - run.t0, end - run.t0))
        self._current = None
        self.context.forward(frame)


def _timed_run(model, task: Task, feeds: Dict[str, np.ndarray], pu_lock: Optional[threading.Lock]):
    """Run ``task`` once: ``(outputs, start, end)`` (perf_counter seconds), holding ``pu_lock`` if the PU serves
    several stages (one task at a time on it)."""
    if pu_lock is None:
        start = time.perf_counter()
        return model.run(task.outputs, feeds), start, time.perf_counter()
    with pu_lock:
        start = time.perf_counter()
        return model.run(task.outputs, feeds), start, time.perf_counter()
