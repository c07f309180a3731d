"""Execution plans: a mapping (stages of blocks on PUs) turned into per-PU ONNX sub-models ("tasks").

A mapping is an ordered list of stages; each stage owns a set of PUs and assigns each of its blocks to one of
them. :func:`build_plan` splits every stage into *tasks*: maximal runs of one PU's blocks (in the stage's
execution order) that need nothing from another PU of the same stage except at their start and give nothing
to another PU except at their end. Each task is a convex operator set, so it can be cut out as a
self-contained ONNX model whose cross-PU inputs all arrive before it starts; the executor
(:mod:`ppexec.executor`) runs one thread per (stage, PU) over these tasks.

:class:`ppexec.plan.PUBinding`, :class:`ppexec.plan.Task` and :class:`ppexec.plan.ExecutionPlan` are the
executor's classes (``device_agents/ppexec/plan.py``), so plans built here run unchanged on boards.

Why the split rule yields a deadlock-free plan: order tasks by the position of their first block in the
stage's (topological) order. A task waits only on (a) earlier tasks of its own PU and (b) tasks of other PUs
that produce inputs of its *first* block, which start strictly earlier. Every wait therefore points to a task
with a smaller position, so the wait graph is acyclic.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import networkx as nx

from ppexec.plan import ExecutionPlan, PUBinding, Task, validate_plan

from parapipe.errors import input_error

logger = logging.getLogger(__name__)

_SOURCE = "mapping"  # the "file" named in error messages: the mapping handed to build_plan

__all__ = ["StageSpec", "build_plan", "ExecutionPlan", "PUBinding", "Task"]


@dataclass
class StageSpec:
    """One stage of a mapping, as the search produces it.

    Parameters
    ----------
    pus : list of str
        PUs owned by the stage.
    assignment : dict of str to str
        Block name -> PU (one of ``pus``) for every block of the stage.
    order : list of str
        The stage's blocks in execution order: a topological order consistent with the schedule.
    replicas : list of StageSpec
        For a replicated stage, its OTHER replicas (default none): each runs the same blocks on its own PUs
        (``pus``, ``assignment``, ``order`` as above; their own ``replicas`` empty).
    shares : list of float, optional
        Share of the frames of each replica, this stage's own first (``1 + len(replicas)`` values > 0; default
        equal shares).
    """

    pus: List[str]
    assignment: Dict[str, str]
    order: List[str]
    replicas: List["StageSpec"] = field(default_factory=list)
    shares: Optional[List[float]] = None

    def all_replicas(self) -> List["StageSpec"]:
        """This stage's own replica first, then ``replicas``."""
        return [self] + list(self.replicas)

    def replica_shares(self) -> List[float]:
        """``shares``, or equal shares when not given."""
        n = 1 + len(self.replicas)
        return [float(w) for w in self.shares] if self.shares is not None else [1.0 / n] * n


def _block_graph(og, bg) -> Tuple[Dict[str, str], nx.DiGraph]:
    """Map operator -> block and build the block dependency graph from the operator graph's edges."""
    op_block: Dict[str, str] = {}
    blocks = nx.DiGraph()
    for block in bg.blocks:
        blocks.add_node(block.name)
        for op in block.ops:
            op_block[op] = block.name
    for u, v in og.graph.edges:
        bu, bv = op_block.get(u), op_block.get(v)
        if bu is not None and bv is not None and bu != bv:
            blocks.add_edge(bu, bv)
    return op_block, blocks


def _validate_stages(stages: Sequence[StageSpec], blocks: nx.DiGraph,
                     bindings: Dict[str, PUBinding]) -> Dict[str, int]:
    """Check the mapping against the block graph; return block -> stage index. Raises InputError."""
    if not stages:
        raise input_error(_SOURCE, "stages", "the mapping has no stages", "give at least one StageSpec")
    block_stage: Dict[str, int] = {}
    for s, spec in enumerate(stages):
        where = f"stages[{s}]"
        if not spec.pus:
            raise input_error(_SOURCE, f"{where}.pus", "the stage has no PUs",
                              "give the stage at least one PU")
        if len(set(spec.pus)) != len(spec.pus):
            raise input_error(_SOURCE, f"{where}.pus", f"duplicate PU in {spec.pus}", "list each PU once")
        for pu in spec.pus:
            if pu not in bindings:
                raise input_error(_SOURCE, f"{where}.pus", f"PU {pu!r} has no binding",
                                  f"add a PUBinding for {pu!r} (bound: {sorted(bindings)})")
        if len(set(spec.order)) != len(spec.order):
            dup = sorted({b for b in spec.order if spec.order.count(b) > 1})
            raise input_error(_SOURCE, f"{where}.order", f"blocks listed twice: {dup}",
                              "list each block once")
        if set(spec.order) != set(spec.assignment):
            diff = sorted(set(spec.order) ^ set(spec.assignment))
            raise input_error(_SOURCE, f"{where}.order",
                              f"order and assignment name different blocks ({diff})",
                              "give every assigned block exactly once in order")
        if not spec.order:
            raise input_error(_SOURCE, f"{where}.order", "the stage has no blocks", "drop the empty stage")
        for block in spec.order:
            pu = spec.assignment[block]
            if pu not in spec.pus:
                raise input_error(_SOURCE, f"{where}.assignment[{block!r}]",
                                  f"PU {pu!r} is not one of the stage's PUs {spec.pus}",
                                  "assign the block to a PU of its stage or add the PU to the stage")
            if block not in blocks:
                raise input_error(_SOURCE, f"{where}.order", f"unknown block {block!r}",
                                  "use block names from the coarsened BlockGraph")
            if block in block_stage:
                raise input_error(_SOURCE, f"{where}.order",
                                  f"block {block!r} is already in stage {block_stage[block]}",
                                  "put every block in exactly one stage")
            block_stage[block] = s
    for s, spec in enumerate(stages):
        if spec.replicas:
            _validate_replicas(spec, s, blocks, bindings)
    missing = [b for b in blocks if b not in block_stage]
    if missing:
        raise input_error(_SOURCE, "stages", f"{len(missing)} block(s) in no stage, e.g. {missing[:3]}",
                          "put every block of the BlockGraph in exactly one stage")
    position = {b: i for spec in stages for i, b in enumerate(spec.order)}
    for a, b in blocks.edges:
        sa, sb = block_stage[a], block_stage[b]
        if sa > sb:
            raise input_error(_SOURCE, f"stages[{sb}]",
                              f"block {b!r} depends on block {a!r} of the later stage {sa}",
                              "move the producer to an earlier stage or the consumer to a later one")
        if sa == sb and position[a] > position[b]:
            raise input_error(_SOURCE, f"stages[{sb}].order",
                              f"block {b!r} comes before its producer {a!r}",
                              "give the stage's blocks in a topological order")
    return block_stage


def _validate_replicas(spec: StageSpec, s: int, blocks: nx.DiGraph, bindings: Dict[str, PUBinding]) -> None:
    """Check the other replicas of stage ``s``: the same blocks, bound PUs apart from every other replica's, a
    PU of the replica for each block, a topological order, one share > 0 per replica. Raises InputError."""
    shares = spec.replica_shares()
    if len(shares) != 1 + len(spec.replicas) or any(not w > 0 for w in shares):
        raise input_error(_SOURCE, f"stages[{s}].shares", f"{shares} for {1 + len(spec.replicas)} replicas",
                          "give one share > 0 per replica, the stage's own first")
    used = {pu: 0 for pu in spec.pus}
    for r, rep in enumerate(spec.replicas, start=1):
        where = f"stages[{s}].replicas[{r}]"
        if not rep.pus or len(set(rep.pus)) != len(rep.pus):
            raise input_error(_SOURCE, f"{where}.pus", f"{rep.pus} is empty or lists a PU twice",
                              "give the replica its PUs, each once")
        for pu in rep.pus:
            if pu not in bindings:
                raise input_error(_SOURCE, f"{where}.pus", f"PU {pu!r} has no binding",
                                  f"add a PUBinding for {pu!r} (bound: {sorted(bindings)})")
            if pu in used:
                raise input_error(_SOURCE, f"{where}.pus", f"PU {pu!r} is already in replica {used[pu]}",
                                  "give every replica of a stage its own PUs")
            used[pu] = r
        if sorted(rep.order) != sorted(spec.order) or set(rep.assignment) != set(spec.order):
            raise input_error(_SOURCE, f"{where}.order", "does not hold exactly the stage's blocks",
                              "give every replica all the stage's blocks, each once")
        position = {b: i for i, b in enumerate(rep.order)}
        for block in rep.order:
            if rep.assignment[block] not in rep.pus:
                raise input_error(_SOURCE, f"{where}.assignment[{block!r}]", f"PU {rep.assignment[block]!r} is "
                                  f"not one of the replica's PUs {rep.pus}", "assign the block to a PU of its replica")
            for pred in blocks.predecessors(block):
                if pred in position and position[pred] > position[block]:
                    raise input_error(_SOURCE, f"{where}.order", f"block {block!r} comes before its producer "
                                      f"{pred!r}", "give the replica's blocks in a topological order")


def _split_stage(spec: StageSpec, blocks: nx.DiGraph, block_stage: Dict[str, int],
                 s: int) -> List[Tuple[str, List[str]]]:
    """Split one stage into (pu, [blocks]) tasks, walking each PU's blocks in ``spec.order``.

    A block starts a new task when it needs a result of another PU of the stage (so cross-PU inputs arrive
    only at a task's start), or when the previous block's result is needed by another PU of the stage (a task
    publishes its outputs when it ends, so ending it there hands the result over as soon as it exists instead
    of after the rest of the task: without this an Inception fork and one of its branches would share a task
    and the other PU's branches would wait for that branch).
    """
    def other_pu(b: str, pu: str) -> bool:
        return block_stage[b] == s and spec.assignment[b] != pu

    tasks: List[Tuple[str, List[str]]] = []
    for pu in spec.pus:
        current: Optional[List[str]] = None
        for block in spec.order:
            if spec.assignment[block] != pu:
                continue
            needs_other = any(other_pu(p, pu) for p in blocks.predecessors(block))
            prev_feeds_other = current is not None and any(other_pu(c, pu)
                                                           for c in blocks.successors(current[-1]))
            if current is None or needs_other or prev_feeds_other:
                current = []
                tasks.append((pu, current))
            current.append(block)
    return tasks


def build_plan(og, bg, stages: Sequence[StageSpec], bindings: Dict[str, PUBinding]) -> ExecutionPlan:
    """Turn a mapping into an :class:`ExecutionPlan` of per-PU ONNX sub-models.

    Each stage is split into tasks by walking each PU's blocks in ``StageSpec.order`` and starting a new task
    whenever the next block has a predecessor in the same stage on another PU, or the previous block has a
    successor in the same stage on another PU (so its result is handed over early); each task's operators are
    cut out with :func:`parapipe.graph.extract.extract_submodel`.

    Parameters
    ----------
    og : parapipe.graph.opgraph.OpGraph
        The operator graph (``.graph`` DiGraph over operator names, ``.inputs``, ``.outputs``,
        ``.topo_order``).
    bg : parapipe.graph.coarsen.BlockGraph
        Its coarsening; ``bg.blocks[i].name`` / ``.ops``.
    stages : sequence of StageSpec
        The mapping, first stage first.
    bindings : dict of str to PUBinding
        A binding for every PU named by a stage.

    Returns
    -------
    ExecutionPlan
        Tasks named ``"s<stage>.<pu>.t<k>"`` with their same-stage ``deps``. A replicated stage
        (``StageSpec.replicas``) gets every replica's tasks (``Task.replica``; replicas that split the same
        operators share one sub-model) and its ``replica_shares``.

    Raises
    ------
    InputError
        A block in no stage or in two, an unknown block, a block depending on a later stage, a stage order
        that is not topological, a PU without binding or outside its stage (the message names the stage and
        block).
    """
    op_block, blocks = _block_graph(og, bg)
    block_stage = _validate_stages(stages, blocks, bindings)
    from parapipe.graph.extract import extract_submodel  # late import: graph is a sibling package

    block_ops = {b.name: list(b.ops) for b in bg.blocks}
    topo_index = {op: i for i, op in enumerate(og.topo_order)}
    plan_stages: List[List[Task]] = []
    shares: Dict[int, List[float]] = {}
    extracted: Dict[Tuple[str, ...], object] = {}  # operator set -> sub-model (replicas share their sub-models)
    for s, spec in enumerate(stages):
        stage_tasks: List[Task] = []
        counters: Dict[str, int] = {}
        for r, rep in enumerate(spec.all_replicas()):
            replica_tasks: List[Task] = []
            for pu, task_blocks in _split_stage(rep, blocks, block_stage, s):
                k = counters.get(pu, 0)
                counters[pu] = k + 1
                name = f"s{s}.{pu}.t{k}"
                ops = tuple(sorted((op for b in task_blocks for op in block_ops[b]), key=topo_index.__getitem__))
                if ops not in extracted:
                    extracted[ops] = extract_submodel(og, list(ops), name)
                sub = extracted[ops]
                replica_tasks.append(Task(name=name, stage=s, pu=pu, model=sub.model, inputs=list(sub.inputs),
                                          outputs=list(sub.outputs), deps=[], replica=r))
            producer = {t: task.name for task in replica_tasks for t in task.outputs}
            for task in replica_tasks:
                task.deps = sorted({producer[t] for t in task.inputs if t in producer})
            stage_tasks.extend(replica_tasks)
        if spec.replicas:
            shares[s] = spec.replica_shares()
        logger.debug("stage %d: %d block(s) x %d replica(s) -> %d task(s)", s, len(spec.order),
                     1 + len(spec.replicas), len(stage_tasks))
        plan_stages.append(stage_tasks)
    plan = ExecutionPlan(stages=plan_stages, model_inputs=list(og.inputs), model_outputs=list(og.outputs),
                         bindings=dict(bindings), replica_shares=shares)
    validate_plan(plan)
    return plan

