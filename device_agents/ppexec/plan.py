"""Execution plans as the executor runs them: PU bindings, tasks (one ONNX sub-model each) and stages.

A plan is built on the host computer by :func:`parapipe.execution.plan.build_plan` and, for a board, written
to a bundle as ``plan.json`` plus one ``.onnx`` file per task (:func:`plan_to_doc`, :func:`plan_from_doc`).
Standard library only (Python >= 3.8), so it runs on the board.

One module (about 450 lines): the plan's types, their checks and their one wire format belong together, so
the board reads and checks plan.json with exactly the code that defines it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .errors import PipelineError, PlanError, plan_error
from .precision import PRECISIONS

__all__ = ["PLAN_SCHEMA_VERSION", "PUBinding", "Task", "ExecutionPlan", "validate_plan", "plan_to_doc",
           "plan_from_doc"]

#: Version of the ``plan.json`` document written by :func:`plan_to_doc`.
PLAN_SCHEMA_VERSION = 1


@dataclass
class PUBinding:
    """How one PU is realised on the host running the executor.

    Parameters
    ----------
    cpus : tuple of int or None
        Logical CPU ids the PU's worker threads are pinned to (``os.sched_setaffinity``); ``None`` leaves the
        affinity alone (e.g. a GPU PU whose feeding thread may run anywhere).
    threads : int
        ONNX Runtime ``intra_op_num_threads`` for the PU's sessions (default 1: one ORT thread per core PU).
    provider : str
        ONNX Runtime execution provider name, e.g. ``"CPUExecutionProvider"``, ``"CUDAExecutionProvider"``.
    provider_options : dict
        Options passed with ``provider`` (e.g. ``{"device_id": 0}``).
    runtime : str
        Name of the runtime adapter that loads and runs the PU's sub-models (:data:`.runtimes.ADAPTERS`):
        ``"onnxruntime"`` (default; ``provider`` and ``provider_options`` apply) or ``"openvino"``.
    runtime_options : dict
        Options of that adapter (JSON values), e.g. ``{"device": "CPU"}`` for OpenVINO; each adapter
        documents its keys (:mod:`.runtimes`).
    precision : str
        The precision the PU's profile gives (:data:`.precision.PRECISIONS`, default ``"fp32"``): the adapter
        sets its runtime to compute in it where the runtime can, and reports what it will use
        (:mod:`.precision`).
    """

    cpus: Optional[Tuple[int, ...]]
    threads: int = 1
    provider: str = "CPUExecutionProvider"
    provider_options: dict = field(default_factory=dict)
    runtime: str = "onnxruntime"
    runtime_options: dict = field(default_factory=dict)
    precision: str = "fp32"


@dataclass
class Task:
    """One ONNX sub-model run by one PU for every frame of one stage.

    Parameters
    ----------
    name : str
        Unique task name (``"s<stage>.<pu>.t<k>"`` from ``build_plan``).
    stage : int
        Index of the stage the task belongs to.
    pu : str
        PU that runs the task.
    model : onnx.ModelProto, bytes or str
        Self-contained sub-model (weights as initializers): a ModelProto (on the host computer), its
        serialised bytes, or the path of an ``.onnx`` file (in a bundle). Its graph inputs are exactly
        ``inputs``.
    inputs : list of str
        Tensor names the task reads: model inputs, tensors forwarded from earlier stages, or outputs of
        ``deps``.
    outputs : list of str
        Tensor names the task produces that someone else (a task, a later stage, the model output) needs.
    deps : list of str
        Names of tasks of the SAME stage and replica that must finish first (they produce some of ``inputs``).
    replica : int
        Replica of the stage the task belongs to (default 0). A replicated stage holds one full copy of its
        tasks per replica, each on its own PUs; every frame runs on one replica (:class:`ExecutionPlan`).
    """

    name: str
    stage: int
    pu: str
    model: Any
    inputs: List[str]
    outputs: List[str]
    deps: List[str]
    replica: int = 0


@dataclass
class ExecutionPlan:
    """Everything the executor needs: tasks per stage, the model's data inputs/outputs and the PU bindings.

    Parameters
    ----------
    stages : list of list of Task
        ``stages[s]`` holds stage ``s``'s tasks; tasks of one PU run in list order.
    model_inputs : list of str
        Data input tensor names each frame must provide.
    model_outputs : list of str
        Output tensor names returned per frame.
    bindings : dict of str to PUBinding
        Binding of every PU named by a task.
    replica_shares : dict of int to list of float
        For each replicated stage, the share of the frames each of its replicas gets (replica 0 first; > 0
        each, normalised when dealt): the cost model's shares, by which the executor deals frames when asked to
        (``PipelineExecutor(dispatch="shares")``); by default its replicas pull frames as they become free.
        Stages not listed have one replica (every task ``replica`` 0).
    """

    stages: List[List[Task]]
    model_inputs: List[str]
    model_outputs: List[str]
    bindings: Dict[str, PUBinding]
    replica_shares: Dict[int, List[float]] = field(default_factory=dict)

    def replica_count(self, stage: int) -> int:
        """How many replicas take ``stage``'s frames (1 for a stage without replicas)."""
        return len(self.replica_shares.get(stage) or [1])

    def replicated(self) -> bool:
        """Whether some stage is replicated."""
        return any(self.replica_count(s) > 1 for s in range(len(self.stages)))

    def replicas(self, stage: int) -> List[List[Task]]:
        """The tasks of ``stage`` per replica (one list for a stage without replicas), in plan order."""
        out: List[List[Task]] = [[] for _ in range(self.replica_count(stage))]
        for task in self.stages[stage]:
            out[task.replica].append(task)
        return out

    def pus(self) -> List[str]:
        """Return the PUs used by the plan, in order of first appearance."""
        seen: Dict[str, None] = {}
        for stage in self.stages:
            for task in stage:
                seen.setdefault(task.pu, None)
        return list(seen)


def cpu_ranges(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (``"none"`` for no CPU)."""
    out: List[str] = []
    run: List[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append("%d-%d" % (run[0], run[-1]) if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append("%d-%d" % (run[0], run[-1]) if len(run) > 1 else str(run[0]))
    return ",".join(out) or "none"


def binding_cpu_problem(binding: PUBinding, allowed: Iterable[int],
                        allows: str = "the board allows") -> Optional[Tuple[str, str]]:
    """Why ``binding`` cannot run as bound on a host whose processes may use the CPUs ``allowed``, or None.

    The one CPU check of a binding, shared by the executor (:func:`check_cpu_bindings`, against this process)
    and parapipe's check of a board's facts before a run or deploy; each caller adds its own fix.

    Parameters
    ----------
    binding : PUBinding
        A binding with ``cpus=None`` (not pinned) has nothing to check.
    allowed : iterable of int
        CPU ids the process may run on (``os.sched_getaffinity(0)``: ``taskset`` and cgroup cpuset limits count;
        a thread may widen its mask beyond ``taskset``'s, so pinning alone does not refuse them).
    allows : str
        Words before the allowed CPUs in the problem (``"the board allows"``, ``"this process may use"``).

    Returns
    -------
    (str, str) or None
        ``("cpus", problem)``: some CPUs are not allowed; ``("threads", problem)``: more threads than distinct
        CPUs (two threads would time-slice one core).
    """
    if binding.cpus is None:
        return None
    allowed = sorted(set(int(c) for c in allowed))
    missing = sorted(set(binding.cpus) - set(allowed))
    if missing:
        return "cpus", "is pinned to CPUs %s but %s %s (CPUs %s missing)" % (
            list(binding.cpus), allows, cpu_ranges(allowed), missing)
    if int(binding.threads) > len(set(binding.cpus)):
        return "threads", "runs %s threads on %d CPU(s) %s" % (binding.threads, len(binding.cpus),
                                                               list(binding.cpus))
    return None


def check_cpu_bindings(bindings: Dict[str, PUBinding], allowed: Optional[Iterable[int]] = None,
                       source: str = "PipelineExecutor") -> None:
    """Refuse a binding this process cannot run as bound (:func:`binding_cpu_problem`).

    Parameters
    ----------
    bindings : dict of str to PUBinding
        The plan's bindings.
    allowed : iterable of int, optional
        CPUs the process may use; default ``os.sched_getaffinity(0)`` of the calling thread (call it from a
        thread that is not pinned narrower than the process; without ``sched_getaffinity``, only the thread
        count is checked).
    source : str
        First part of the message.

    Raises
    ------
    PlanError
        The first PU at fault: ``"<source>: PU '<pu>': <problem>; <fix>"``.
    """
    if allowed is None:
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    for pu, binding in bindings.items():
        if binding.cpus is None:
            continue
        usable = binding.cpus if allowed is None else allowed
        found = binding_cpu_problem(binding, usable, "this process may use")
        if found is None:
            continue
        kind, problem = found
        if kind == "cpus":
            fix = ("bind the PU to CPUs of os.sched_getaffinity(0), or start the process with those CPUs allowed "
                   "(taskset and cgroup cpuset limits count)")
        else:
            fix = ("give PUBinding.threads <= %d (one thread per CPU), or bind more CPUs"
                   % len(set(binding.cpus)))
        raise plan_error(source, "PU %r" % pu, problem, fix)


def _find_cycle(edges: Dict[str, List[str]]) -> Optional[List[str]]:
    """A list of nodes forming a cycle of the directed graph ``edges`` (node -> successors), or None."""
    state: Dict[str, int] = {}  # 1: on the DFS stack, 2: done
    for root in edges:
        if state.get(root):
            continue
        stack = [(root, iter(edges.get(root, ())))]
        path = [root]
        state[root] = 1
        while stack:
            node, successors = stack[-1]
            nxt = next(successors, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):]
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(edges.get(nxt, ()))))
                path.append(nxt)
    return None


def validate_plan(plan: ExecutionPlan) -> None:
    """Check that a plan (built or hand-written) can run without missing tensors or deadlocks.

    Checks: unique task names, tasks filed under their own stage, every PU bound, every task input available
    (a model input, forwarded from an earlier stage, or produced by a same-stage task listed in ``deps``),
    every tensor produced once, every model output produced, and no cycle among ``deps`` plus each PU's task
    order within a stage. For a replicated stage these hold per replica, every replica produces the same
    tensors, its replicas use disjoint PUs, and ``replica_shares`` gives each replica a share > 0.

    Parameters
    ----------
    plan : ExecutionPlan

    Raises
    ------
    PlanError
        Naming the stage and task at fault and how to fix it.
    """
    source = "execution plan"
    if not plan.stages or any(not tasks for tasks in plan.stages):
        raise plan_error(source, "stages", "the plan has an empty stage or no stage at all",
                           "give every stage at least one task")
    _check_replica_shares(plan)
    for pu, binding in plan.bindings.items():
        if binding.precision not in PRECISIONS:
            raise plan_error(source, "bindings.%s.precision" % pu, "unknown precision %r" % (binding.precision,),
                             "use one of %s" % ", ".join(PRECISIONS))
    available = set(plan.model_inputs)
    names: Dict[str, int] = {}
    for s, tasks in enumerate(plan.stages):
        for task in tasks:
            where = "stages[%d].%s" % (s, task.name)
            if task.name in names:
                raise plan_error(source, where, "duplicate task name", "give every task a unique name")
            names[task.name] = s
            if task.stage != s:
                raise plan_error(source, where, "task says stage %d but is filed under stage %d"
                                   % (task.stage, s), "make Task.stage match its position in "
                                   "ExecutionPlan.stages")
            if task.pu not in plan.bindings:
                raise plan_error(source, where, "PU %r has no binding" % task.pu, "add a PUBinding for it")
        produced = None
        # what later stages read of this stage, or the model outputs: every replica must make exactly that; a
        # tensor a replica hands between its own PUs stays inside it (replicas may be different PU groups)
        later = set(plan.model_outputs)
        for tasks in plan.stages[s + 1:]:
            for task in tasks:
                later.update(task.inputs)
        for r, replica in enumerate(plan.replicas(s)):
            made = _check_replica(s, replica, available, plan.model_inputs)
            if plan.replica_count(s) > 1:
                made = made & later
            if produced is not None and made != produced:
                raise plan_error(source, "stages[%d]" % s, "replica %d produces %s, replica 0 %s"
                                   % (r, sorted(made), sorted(produced)),
                                   "give every replica of a stage the same sub-models")
            produced = made
        available.update(produced or ())
    missing = [t for t in plan.model_outputs if t not in available]
    if missing:
        raise plan_error(source, "model_outputs", "outputs %s are produced by no task" % missing,
                           "make the last stages produce every model output")


def _check_replica_shares(plan: ExecutionPlan) -> None:
    """Replica indices 0..R-1 with R shares > 0 for every replicated stage; PUs of a stage's replicas apart."""
    source = "execution plan"
    for s, shares in plan.replica_shares.items():
        if not 0 <= s < len(plan.stages) or not shares or any(not float(w) > 0 for w in shares):
            raise plan_error(source, "replica_shares[%r]" % s, "needs a stage of the plan and a share > 0 per "
                               "replica, got %r" % (shares,), "give each replica its fraction of the frames")
    for s, tasks in enumerate(plan.stages):
        count = plan.replica_count(s)
        pu_replica: Dict[str, int] = {}
        for task in tasks:
            if not 0 <= task.replica < count:
                raise plan_error(source, "stages[%d].%s.replica" % (s, task.name), "replica %r but the stage "
                                   "has %d share(s)" % (task.replica, count),
                                   "number replicas 0..R-1 and give replica_shares[%d] R shares" % s)
            if pu_replica.setdefault(task.pu, task.replica) != task.replica:
                raise plan_error(source, "stages[%d].%s" % (s, task.name), "PU %r serves two replicas of "
                                   "the stage" % task.pu, "give every replica its own PUs")
        seen = {t.replica for t in tasks}
        if len(seen) != count:
            raise plan_error(source, "stages[%d]" % s, "replicas %s have no task"
                               % sorted(set(range(count)) - seen), "give every replica its tasks")


def _check_replica(s: int, tasks: List[Task], available: set, model_inputs: List[str]) -> set:
    """Check one replica of stage ``s`` (every task's input available, each tensor made once, no wait cycle)
    and return the tensors it produces."""
    source = "execution plan"
    stage_producer: Dict[str, str] = {}
    for task in tasks:
        where = "stages[%d].%s" % (s, task.name)
        for t in task.outputs:
            if t in available or t in stage_producer or t in model_inputs:
                raise plan_error(source, where, "tensor %r is produced twice" % t,
                                   "let exactly one task produce each tensor")
            stage_producer[t] = task.name
    order: Dict[str, List[str]] = {task.name: [] for task in tasks}
    by_pu: Dict[str, List[str]] = {}
    for task in tasks:
        where = "stages[%d].%s" % (s, task.name)
        for d in task.deps:
            if d not in order:
                raise plan_error(source, where + ".deps", "%r is not a task of stage %d (replica %d)"
                                   % (d, s, task.replica), "list only tasks of the same stage and replica in deps")
            order[d].append(task.name)
        for t in task.inputs:
            if t in available:
                continue
            p = stage_producer.get(t)
            if p is None:
                raise plan_error(source, where, "input %r is produced by no task of stages 0..%d and "
                                   "is not a model input" % (t, s),
                                   "add its producer or fix the task's inputs")
            if p not in task.deps and p != task.name:
                raise plan_error(source, where + ".deps", "input %r comes from %r, not in deps"
                                   % (t, p), "add %r to the task's deps" % p)
        prev = by_pu.setdefault(task.pu, [])
        if prev:
            order[prev[-1]].append(task.name)
        prev.append(task.name)
    cycle = _find_cycle(order)
    if cycle:
        raise plan_error(source, "stages[%d]" % s, "tasks wait on each other in a cycle %s" % cycle,
                           "order each PU's tasks so that a task's deps come first")
    return set(stage_producer)


def plan_to_doc(plan: ExecutionPlan, model_files: Dict[str, str]) -> Dict[str, Any]:
    """The JSON-ready description of ``plan`` whose task models are the files ``model_files[task name]``.

    Parameters
    ----------
    plan : ExecutionPlan
    model_files : dict of str to str
        Task name -> path of its ``.onnx`` file relative to the bundle folder (``/``-separated).

    Returns
    -------
    dict
        ``{"schema_version", "stages": [[{"name", "pu", "model", "inputs", "outputs", "deps", "replica"?}]],
        "replica_shares": {stage: [share]}, "model_inputs", "model_outputs", "bindings": {pu: {"cpus",
        "threads", "provider", "provider_options", "runtime", "runtime_options", "precision"}}}`` (``replica``
        only for tasks of a replica other than 0).
    """
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "stages": [[dict({"name": t.name, "pu": t.pu, "model": model_files[t.name], "inputs": list(t.inputs),
                          "outputs": list(t.outputs), "deps": list(t.deps)},
                         **({"replica": int(t.replica)} if t.replica else {})) for t in tasks]
                   for tasks in plan.stages],
        "replica_shares": {str(s): [float(w) for w in shares] for s, shares in plan.replica_shares.items()},
        "model_inputs": list(plan.model_inputs),
        "model_outputs": list(plan.model_outputs),
        "bindings": {pu: {"cpus": None if b.cpus is None else [int(c) for c in b.cpus],
                          "threads": int(b.threads), "provider": b.provider,
                          "provider_options": dict(b.provider_options), "runtime": b.runtime,
                          "runtime_options": dict(b.runtime_options), "precision": b.precision}
                     for pu, b in plan.bindings.items()},
    }


def plan_from_doc(doc: Dict[str, Any], base_dir: str, source: str = "plan.json") -> ExecutionPlan:
    """Rebuild the plan written by :func:`plan_to_doc`; task models become paths under ``base_dir``.

    Raises
    ------
    PlanError
        A wrong schema version, a missing or mistyped field, a model file outside ``base_dir`` or missing.
    """
    fix = "rebuild the bundle with 'parapipe deploy'"
    if not isinstance(doc, dict) or doc.get("schema_version") != PLAN_SCHEMA_VERSION:
        got = doc.get("schema_version") if isinstance(doc, dict) else doc
        raise plan_error(source, "schema_version", "expected %d, got %r" % (PLAN_SCHEMA_VERSION, got), fix)
    try:
        bindings = {}
        for pu, b in doc["bindings"].items():
            cpus = b.get("cpus")
            bindings[str(pu)] = PUBinding(cpus=None if cpus is None else tuple(int(c) for c in cpus),
                                          threads=int(b.get("threads", 1)),
                                          provider=str(b.get("provider", "CPUExecutionProvider")),
                                          provider_options=dict(b.get("provider_options") or {}),
                                          runtime=str(b.get("runtime") or "onnxruntime"),
                                          runtime_options=dict(b.get("runtime_options") or {}),
                                          precision=str(b.get("precision") or "fp32"))
        stages = []
        root = os.path.realpath(base_dir)
        for s, tasks in enumerate(doc["stages"]):
            stage = []
            for t in tasks:
                path = os.path.realpath(os.path.join(root, *str(t["model"]).split("/")))
                if not path.startswith(root + os.sep) or not os.path.isfile(path):
                    raise plan_error(source, "stages[%d].%s.model" % (s, t["name"]),
                                       "%r is not a file of the bundle" % t["model"], fix)
                stage.append(Task(str(t["name"]), s, str(t["pu"]), path, [str(x) for x in t["inputs"]],
                                  [str(x) for x in t["outputs"]], [str(x) for x in t["deps"]],
                                  int(t.get("replica", 0))))
            stages.append(stage)
        shares = {int(s): [float(w) for w in ws] for s, ws in (doc.get("replica_shares") or {}).items()}
        plan = ExecutionPlan(stages, [str(x) for x in doc["model_inputs"]],
                             [str(x) for x in doc["model_outputs"]], bindings, shares)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, (PipelineError, PlanError)):
            raise
        raise plan_error(source, None, "malformed plan (%s: %s)" % (type(exc).__name__, exc), fix)
    validate_plan(plan)
    return plan
