"""Cut a stage (a convex set of operators) out of the normalised model as a standalone ONNX model.

Unlike :class:`onnx.utils.Extractor`, which takes boundary tensor names on trust and silently returns a
broken model when a crossing tensor (a residual skip) is missing, the boundary here is computed from the
operator graph: every activation tensor entering the set is an input and every tensor leaving it (consumed by
an operator outside the set, or a graph output) is an output. Control-flow nodes are atoms; the outer-scope
tensors their bodies capture count as inputs.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Collection

import onnx
from onnx import helper

from parapipe.graph._proto import node_inputs
from parapipe.graph.opgraph import OpGraph
from parapipe.graph.shapes import skeleton

__all__ = ["FULL_CHECK_MAX_WEIGHT_NBYTES", "SubModel", "check_convex", "extract_submodel"]

logger = logging.getLogger(__name__)

#: Above this many bytes of weights a stage is checked on its skeleton (serialising 0.5 GB of VGG-19 weights
#: for the checker takes seconds here); 64 MiB is a parapipe choice.
FULL_CHECK_MAX_WEIGHT_NBYTES = 64 * 2**20


@dataclass
class SubModel:
    """A stage as a standalone model: ``inputs`` are the tensors it reads from outside (in first-use order),
    ``outputs`` the tensors it hands on (in production order); names are those of the full model."""

    model: onnx.ModelProto
    inputs: list[str]
    outputs: list[str]


def check_convex(og: OpGraph, ops: set[str]) -> None:
    """Raise ValueError unless no path leaves ``ops`` and re-enters it (then the set can run as one stage).

    Raises
    ------
    ValueError
        Naming an operator outside the set that depends on the set and feeds it.
    """
    g = og.graph
    frontier = [v for u in ops for v in g.successors(u) if v not in ops]
    seen = set(frontier)
    while frontier:
        x = frontier.pop()
        for y in g.successors(x):
            if y in ops:
                raise ValueError(
                    f"operator set is not convex: {x!r} (outside the set) depends on the set and feeds {y!r} "
                    f"(inside); add {x!r} to the set or remove {y!r} and the operators it feeds")
            if y not in seen:
                seen.add(y)
                frontier.append(y)


def extract_submodel(og: OpGraph, op_names: Collection[str], name: str = "stage",
                     check: bool = True) -> SubModel:
    """Build the standalone model of the operators ``op_names`` of ``og``.

    Parameters
    ----------
    og : OpGraph
        Operator graph; nodes and initializers are copied from ``og.model`` (the normalised model).
    op_names : collection of str
        Operator names forming a convex set (no path leaves the set and comes back).
    name : str
        Graph name of the result.
    check : bool
        Run :func:`onnx.checker.check_model` (full check, i.e. with strict shape inference) on the result;
        stages with more than :data:`FULL_CHECK_MAX_WEIGHT_NBYTES` of weights are checked on their skeleton
        (large initializers replaced by typed inputs), which checks the same graph without serialising the
        weights.

    Returns
    -------
    SubModel
        Model with exactly the crossing inputs/outputs, only the initializers its operators use, the full
        model's opset imports, IR version and local functions.

    Raises
    ------
    ValueError
        Empty set, unknown operator name, or a non-convex set (naming an offending operator).
    """
    ops = set(op_names)
    if not ops:
        raise ValueError("cannot extract an empty operator set; give at least one operator name")
    unknown = sorted(o for o in ops if o not in og.graph)
    if unknown:
        raise ValueError(f"unknown operator {unknown[0]!r} (and {len(unknown) - 1} more) in {og.name!r}; "
                         "use names from OpGraph.topo_order")
    check_convex(og, ops)

    nodes = sorted(ops, key=og.node_index)
    produced: set[str] = set()
    inputs: list[str] = []
    consts: list[str] = []
    seen_in: set[str] = set()
    for op in nodes:
        for t in node_inputs(og.node(op)):
            if t in produced or t in seen_in:
                continue
            seen_in.add(t)
            (consts if t in og.constants else inputs).append(t)
        produced.update(og.op(op).outputs)
    leaving: set[str] = set(t for t in og.outputs if t in produced)
    for op in nodes:
        for v, data in og.graph.succ[op].items():
            if v not in ops:
                leaving.update(data["tensors"])
    outputs = [t for op in nodes for t in og.op(op).outputs if t in leaving]

    graph = onnx.GraphProto(name=name)
    graph.node.extend(og.node(op) for op in nodes)
    graph.input.extend(og.value_info(t) for t in inputs)
    graph.output.extend(og.value_info(t) for t in outputs)
    graph.initializer.extend(og.initializer(t) for t in consts)
    internal = produced - leaving
    graph.value_info.extend(og.value_info(t) for op in nodes for t in og.op(op).outputs if t in internal)
    model = helper.make_model(graph, opset_imports=list(og.model.opset_import), producer_name="parapipe")
    model.ir_version = og.model.ir_version
    model.functions.extend(og.model.functions)
    if check:
        weights = sum(og.op(op).param_nbytes for op in nodes)
        onnx.checker.check_model(model if weights <= FULL_CHECK_MAX_WEIGHT_NBYTES else skeleton(model),
                                 full_check=True)
    logger.debug("extracted %s: %d ops, %d inputs, %d outputs", name, len(nodes), len(inputs), len(outputs))
    return SubModel(model, inputs, outputs)
