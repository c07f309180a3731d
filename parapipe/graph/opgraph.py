"""The operator graph: an ONNX model as a networkx DAG of operators with shapes, bytes and FLOPs.

:func:`import_onnx` normalises the model (see :mod:`parapipe.graph.normalize`), infers every activation
tensor's static shape (:mod:`parapipe.graph.shapes`), counts FLOPs (:mod:`parapipe.graph.flops`) and builds
an :class:`OpGraph`, the structure coarsening, search and extraction work on.
"""
from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

import networkx as nx
import onnx
from onnx import helper

from parapipe.errors import InputError, input_error
from parapipe.graph import normalize, shapes
from parapipe.graph._proto import node_inputs, np_dtype_name, tensor_nbytes
from parapipe.graph.flops import op_flops

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorInfo:
    """An activation tensor (graph input, node output): static shape, numpy dtype name, size in bytes."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name, e.g. "float32"
    nbytes: int


@dataclass(frozen=True)
class Operator:
    """One ONNX node of the normalised model with its cost-relevant figures.

    ``inputs`` lists every tensor the node reads (weights included, empty optional slots dropped, plus the
    outer-scope names captured by control-flow subgraphs); ``flops`` counts a multiply-add as 2 FLOPs;
    ``param_nbytes`` sums the distinct constant inputs, ``in_nbytes`` the distinct activation inputs,
    ``out_nbytes`` the outputs; ``signature`` is a stable string of op type, input shapes/dtypes and
    attributes, equal for operators that cost the same (used to deduplicate profiling).
    """

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flops: float
    param_nbytes: int
    in_nbytes: int
    out_nbytes: int
    signature: str


class OpGraph:
    """Operator DAG of a normalised ONNX model.

    Attributes
    ----------
    model : onnx.ModelProto
        The normalised model (constants folded into initializers, unique node names, static shapes); runs in
        ONNX Runtime with the original model's outputs.
    graph : networkx.DiGraph
        Nodes: operator names, node attribute ``op`` (:class:`Operator`). Edge (u, v) when v reads an
        activation tensor u produces; attributes ``nbytes`` (int, distinct tensors u -> v) and ``tensors``
        (tuple of names, sorted).
    tensors : dict[str, TensorInfo]
        Every activation tensor: graph inputs and node outputs (not the constants).
    inputs, outputs : list[str]
        Data inputs (never weights) and graph outputs, in model order.
    constants : set[str]
        Initializer names of the normalised model.
    topo_order : list[str]
        Deterministic topological order (lexicographic topological sort keyed on node index in the model).
    name : str
        Model name (registry name or file stem).
    """

    def __init__(self, model: onnx.ModelProto, graph: nx.DiGraph, tensors: dict[str, TensorInfo],
                 inputs: list[str], outputs: list[str], constants: set[str], topo_order: list[str],
                 name: str, elem_types: dict[str, int]) -> None:
        self.model = model
        self.graph = graph
        self.tensors = tensors
        self.inputs = inputs
        self.outputs = outputs
        self.constants = constants
        self.topo_order = topo_order
        self.name = name
        self._elem_types = elem_types
        self._node_index = {n.name: i for i, n in enumerate(model.graph.node)}
        self._init_index: Optional[dict[str, int]] = None

    @property
    def flops(self) -> float:
        """Total FLOPs of one inference (sum over operators)."""
        return float(sum(op.flops for _, op in self.graph.nodes(data="op")))

    def op(self, name: str) -> Operator:
        """The :class:`Operator` called ``name`` (KeyError if there is none)."""
        return self.graph.nodes[name]["op"]

    def node(self, name: str) -> onnx.NodeProto:
        """The NodeProto of operator ``name`` in :attr:`model` (KeyError if there is none)."""
        return self.model.graph.node[self._node_index[name]]

    def node_index(self, name: str) -> int:
        """Position of operator ``name`` in ``model.graph.node``."""
        return self._node_index[name]

    def initializer(self, name: str) -> onnx.TensorProto:
        """The initializer (constant) called ``name`` (KeyError if there is none)."""
        if self._init_index is None:
            self._init_index = {t.name: i for i, t in enumerate(self.model.graph.initializer)}
        return self.model.graph.initializer[self._init_index[name]]

    def elem_type(self, tensor: str) -> int:
        """ONNX ``TensorProto.DataType`` of an activation tensor (exact, also for types numpy lacks)."""
        return self._elem_types[tensor]

    def value_info(self, tensor: str) -> onnx.ValueInfoProto:
        """A ValueInfoProto with the static type and shape of activation tensor ``tensor``."""
        shape = list(self.tensors[tensor].shape)
        return helper.make_tensor_value_info(tensor, self._elem_types[tensor], shape)

    def __repr__(self) -> str:
        return (f"OpGraph(name={self.name!r}, ops={self.graph.number_of_nodes()}, "
                f"edges={self.graph.number_of_edges()}, gflops={self.flops / 1e9:.3f})")


def _attr_text(attr: onnx.AttributeProto) -> str:
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.TENSOR,
                     onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TENSORS):
        return "sha1:" + hashlib.sha1(attr.SerializeToString(deterministic=True)).hexdigest()[:16]
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, float):
        value = float(f"{value:.9g}")
    elif isinstance(value, list):
        value = [float(f"{v:.9g}") if isinstance(v, float) else v for v in value]
    return repr(value)


def _signature(node: onnx.NodeProto, in_types: list[Optional[tuple[tuple[int, ...], str]]]) -> str:
    parts = []
    for t in in_types:
        parts.append("-" if t is None else f"{t[1]}[{','.join(map(str, t[0]))}]")
    attrs = ";".join(f"{a.name}={_attr_text(a)}" for a in sorted(node.attribute, key=lambda a: a.name))
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
    return f"{op}({';'.join(parts)}){{{attrs}}}"


def _value_info(name: str, elem_types: dict[str, int], tensors: dict[str, TensorInfo]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_types[name], list(tensors[name].shape))


def import_onnx(model: onnx.ModelProto, name: str = "model", source: str = "<memory>") -> OpGraph:
    """Build the :class:`OpGraph` of an ONNX model.

    Parameters
    ----------
    model : onnx.ModelProto
        Any ONNX model (not modified); dynamic input dims are set to 1.
    name : str
        Name recorded in :attr:`OpGraph.name`.
    source : str
        File (or registry name) for error messages.

    Returns
    -------
    OpGraph

    Raises
    ------
    InputError
        The model is malformed (dangling tensor, cycle), has no operator, or a tensor shape cannot be
        determined; the message names ``source``.
    """
    try:
        return _import(model, name, source)
    except InputError:
        raise
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise input_error(source, None, f"is not a valid ONNX model ({first})", "re-export it") from exc


def _import(model: onnx.ModelProto, name: str, source: str) -> OpGraph:
    norm = normalize.normalise(model, source)
    g = norm.graph
    if len(g.node) == 0:
        raise input_error(source, "graph", "has no operators after folding constants",
                          "give a model that computes something from its inputs")
    types = shapes.infer_activation_types(norm, source)
    constants = {t.name for t in g.initializer}
    const_types = {t.name: (tuple(int(d) for d in t.dims), np_dtype_name(t.data_type)) for t in g.initializer}

    tensors: dict[str, TensorInfo] = {}
    elem_types: dict[str, int] = {}
    for tname, (shape, elem) in types.items():
        dtype = np_dtype_name(elem)
        tensors[tname] = TensorInfo(tname, shape, dtype, tensor_nbytes(shape, dtype))
        elem_types[tname] = elem
    # record the inferred shapes in the model (outputs, value_info): the normalised model describes itself
    del g.value_info[:]
    graph_inputs = [vi.name for vi in g.input]
    graph_outputs = [vi.name for vi in g.output]
    producer: dict[str, str] = {}
    for node in g.node:
        for o in node.output:
            if o:
                producer[o] = node.name
                if o not in graph_outputs:
                    g.value_info.append(_value_info(o, elem_types, tensors))
    for vi in g.output:
        if vi.name in tensors:
            vi.CopyFrom(_value_info(vi.name, elem_types, tensors))

    dg = nx.DiGraph()
    edge_tensors: dict[tuple[str, str], set[str]] = defaultdict(set)
    for node in g.node:
        ins = node_inputs(node)
        act_in = [t for t in ins if t not in constants]
        in_types: list[Optional[tuple[tuple[int, ...], str]]] = []
        in_shapes = []
        for t in node.input:
            info = (tensors[t].shape, tensors[t].dtype) if t in tensors else const_types.get(t)
            in_types.append(info)
            in_shapes.append(info[0] if info else None)
        out_shapes = [tensors[o].shape if o in tensors else None for o in node.output]
        op = Operator(
            name=node.name, op_type=node.op_type, inputs=tuple(ins),
            outputs=tuple(o for o in node.output if o),
            flops=float(op_flops(node, in_shapes, out_shapes)),
            param_nbytes=sum(tensor_nbytes(*const_types[t]) for t in ins if t in constants),
            in_nbytes=sum(tensors[t].nbytes for t in act_in if t in tensors),
            out_nbytes=sum(tensors[o].nbytes for o in node.output if o in tensors),
            signature=_signature(node, in_types),
        )
        dg.add_node(node.name, op=op)
        for t in act_in:
            src = producer.get(t)
            if src is not None and src != node.name:
                edge_tensors[(src, node.name)].add(t)
    for (u, v), names in edge_tensors.items():
        dg.add_edge(u, v, nbytes=sum(tensors[t].nbytes for t in names), tensors=tuple(sorted(names)))

    index = {n.name: i for i, n in enumerate(g.node)}
    topo = list(nx.lexicographical_topological_sort(dg, key=index.__getitem__))
    data_inputs = [n for n in graph_inputs if n not in constants]
    og = OpGraph(norm, dg, tensors, data_inputs, graph_outputs, constants, topo, name, elem_types)
    logger.debug("imported %s: %d operators, %.3f GFLOPs", name, dg.number_of_nodes(), og.flops / 1e9)
    return og
