"""Execution plans: a mapping (stages of blocks on PUs) turned into per-PU ONNX sub-models ("tasks").

A mapping is a point's stages (:class:`parapipe.mapping.Stage`); each stage owns a set of PUs and assigns each of
its blocks to one of them. :func:`build_plan` splits every stage into *tasks* by the one split rule
(:func:`parapipe.cost.tasks.stage_tasks`, on the mapping's index form): maximal runs of one PU's blocks (in the
stage's execution order) that need nothing from another PU of the same stage except at their start and give
nothing to another PU except at their end. Each task is a convex operator set, so it can be cut out as a
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
from typing import Dict, List, Sequence, Tuple

from ppexec.plan import ExecutionPlan, PUBinding, Task

from parapipe.cost.tasks import BlockDag, stage_tasks
from parapipe.errors import input_error
from parapipe.graph.coarsen import BlockGraph
from parapipe.graph.extract import SubModel, extract_submodel
from parapipe.graph.opgraph import OpGraph
from parapipe.mapping.index import index_mapping
from parapipe.mapping.model import Stage

logger = logging.getLogger(__name__)

_SOURCE = "mapping"  # the "file" named in error messages: the mapping handed to build_plan

__all__ = ["build_plan", "block_dag"]


def block_dag(bg: BlockGraph) -> BlockDag:
    """The block DAG of the coarsened graph on block indices (``bg.graph``'s edges, blocks in ``bg.blocks``
    order)."""
    return BlockDag.from_edges(len(bg.blocks), ((bg.index[u], bg.index[v]) for u, v in bg.graph.edges))


def build_plan(og: OpGraph, bg: BlockGraph, stages: Sequence[Stage],
               bindings: Dict[str, PUBinding]) -> ExecutionPlan:
    """Turn a mapping into an :class:`ExecutionPlan` of per-PU ONNX sub-models.

    Each stage (each replica of a replicated stage) is split into tasks by
    :func:`parapipe.cost.tasks.stage_tasks`; each task's operators are cut out with
    :func:`parapipe.graph.extract.extract_submodel`. The plan is not checked against the wire format here: the
    executor that runs it does that (:func:`ppexec.validate_plan`), once.

    Parameters
    ----------
    og : parapipe.graph.opgraph.OpGraph
        The operator graph.
    bg : parapipe.graph.coarsen.BlockGraph
        Its coarsening (the blocks the stages name, and the block DAG).
    stages : sequence of parapipe.mapping.Stage
        The mapping, first stage first (a point's ``stages``; only ``pus``, ``blocks``, ``assignment``,
        ``order`` and the replicas' ``pus``, ``assignment``, ``order``, ``share`` are read).
    bindings : dict of str to PUBinding
        A binding for every PU named by a stage.

    Returns
    -------
    ExecutionPlan
        Tasks named ``"s<stage>.<pu>.t<k>"`` with their same-stage ``deps``. A replicated stage gets every
        replica's tasks (``Task.replica``; replicas that split the same operators share one sub-model) and its
        ``replica_shares``.

    Raises
    ------
    InputError
        The stages break a structural rule (:mod:`parapipe.cost.rules`, with the block DAG: a schedule order
        against the dependencies), or name a PU without a binding (the message names the stage and field).
    """
    names = [b.name for b in bg.blocks]
    dag = block_dag(bg)
    pus = list(bindings)
    for s, typed in enumerate(stages):
        for pu in typed.all_pus():
            if pu not in bindings:
                raise input_error(_SOURCE, f"stages[{s}].pus", f"PU {pu!r} has no binding",
                                  f"add a PUBinding for {pu!r} (bound: {sorted(bindings)})")
    mapping = index_mapping(stages, names, pus, _SOURCE,
                            preds=lambda b: [names[u] for u in dag.preds[bg.index[b]]])
    block_ops = {b.name: list(b.ops) for b in bg.blocks}
    topo_index = {op: i for i, op in enumerate(og.topo_order)}
    plan_stages: List[List[Task]] = []
    shares: Dict[int, List[float]] = {}
    extracted: Dict[Tuple[str, ...], SubModel] = {}  # operator set -> sub-model (replicas share their sub-models)
    for s, (st, typed) in enumerate(zip(mapping.stages, stages)):
        tasks_of_stage: List[Task] = []
        counters: Dict[str, int] = {}
        views = st.replica_stages()
        for r, view in enumerate(views):
            replica_tasks: List[Task] = []
            for p, task_blocks in stage_tasks(dag, view):
                pu = pus[p]
                k = counters.get(pu, 0)
                counters[pu] = k + 1
                name = f"s{s}.{pu}.t{k}"
                ops = tuple(sorted((op for v in task_blocks for op in block_ops[names[v]]),
                                   key=topo_index.__getitem__))
                if ops not in extracted:
                    extracted[ops] = extract_submodel(og, list(ops), name)
                sub = extracted[ops]
                replica_tasks.append(Task(name=name, stage=s, pu=pu, model=sub.model, inputs=list(sub.inputs),
                                          outputs=list(sub.outputs), deps=[], replica=r))
            producer = {t: task.name for task in replica_tasks for t in task.outputs}
            for task in replica_tasks:
                task.deps = sorted({producer[t] for t in task.inputs if t in producer})
            tasks_of_stage.extend(replica_tasks)
        if st.replicas and typed.replicas:
            shares[s] = [float(rep.share) for rep in typed.replicas]
        logger.debug("stage %d: %d block(s) x %d replica(s) -> %d task(s)", s, st.stop - st.start, len(views),
                     len(tasks_of_stage))
        plan_stages.append(tasks_of_stage)
    return ExecutionPlan(stages=plan_stages, model_inputs=list(og.inputs), model_outputs=list(og.outputs),
                         bindings=dict(bindings), replica_shares=shares)
