"""The operator graph: an ONNX model as a networkx DAG of operators with shapes, bytes and FLOPs.

:func:`import_onnx` checks that ONNX Runtime can load the model's operators (:mod:`parapipe.graph.support`),
fixes the input shapes (:mod:`parapipe.graph.inputs`), normalises the model (:mod:`parapipe.graph.normalize`),
infers every activation tensor's shape (:mod:`parapipe.graph.shapes`; data-dependent dims are kept apart),
counts FLOPs (:mod:`parapipe.graph.flops`) and builds an :class:`OpGraph`, the structure coarsening, search and
extraction work on.
"""
from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import networkx as nx
import numpy as np
import onnx
from onnx import helper

from parapipe.errors import InputError, input_error
import parapipe.graph.inputs as input_shapes_mod
import parapipe.graph.normalize as normalize
import parapipe.graph.shapes as shapes
import parapipe.graph.support as support
from parapipe.graph._proto import captured_tensors, elem_tensor_nbytes, node_inputs, np_dtype_name, tensor_nbytes
from parapipe.graph.flops import has_flop_formula, op_flops

__all__ = ["TensorInfo", "Operator", "OpGraph", "import_onnx"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorInfo:
    """An activation tensor (graph input, node output): shape, numpy dtype name, size in bytes.

    ``data_dependent_axes`` are the axes whose size depends on the input values (NonZero, Unique ...): ``shape``
    then holds the size of one sample run and stage models keep those axes symbolic. A ``sequence`` value
    (``seq(tensor)``) has ``shape`` (elements, *first element's shape) and is never handed between stages.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name, e.g. "float32"
    nbytes: int
    data_dependent_axes: tuple[int, ...] = ()
    sequence: bool = False


@dataclass(frozen=True)
class Operator:
    """One ONNX node of the normalised model with its cost-relevant figures.

    ``inputs`` lists every tensor the node reads (weights included, empty optional slots dropped, plus the
    outer-scope names captured by control-flow subgraphs); ``flops`` counts a multiply-add as 2 FLOPs;
    ``param_nbytes`` sums the distinct constant inputs, ``in_nbytes`` the distinct activation inputs,
    ``out_nbytes`` the outputs; ``signature`` is a stable string of op type, input shapes/dtypes and
    attributes, equal for operators that cost the same (used to deduplicate profiling). ``op_type`` carries
    the domain outside ONNX's (``com.microsoft.FusedMatMul``, see
    :func:`~parapipe.graph.support.qualified_op_type`).
    ``flop_formula`` is False when :mod:`parapipe.graph.flops` has no formula for the op (0 FLOPs counted);
    ``data_dependent`` is True when a tensor it reads or writes has data-dependent dims (its cost is that of
    one sample).
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
    flop_formula: bool = True
    data_dependent: bool = False


class OpGraph:
    """Operator DAG of a normalised ONNX model.

    Attributes
    ----------
    model : onnx.ModelProto
        The normalised model (constants folded into initializers, unique node names, static shapes); runs in
        ONNX Runtime with the original model's outputs. Its large filled weights are written on the first
        read; :attr:`structure` reads the model without writing them.
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
    input_notes : list of str
        Input dims parapipe chose itself (a symbolic batch dim set to 1), one line each, for the user.
    """

    def __init__(self, model: onnx.ModelProto, graph: nx.DiGraph, tensors: dict[str, TensorInfo],
                 inputs: list[str], outputs: list[str], constants: set[str], topo_order: list[str],
                 name: str, elem_types: dict[str, int], input_notes: Sequence[str] = (),
                 value_types: Optional[dict[str, onnx.TypeProto]] = None,
                 deferred: Optional[dict[str, object]] = None) -> None:
        self._model = model
        self._deferred = deferred if deferred else None
        self.graph = graph
        self.tensors = tensors
        self.inputs = inputs
        self.outputs = outputs
        self.constants = constants
        self.topo_order = topo_order
        self.name = name
        self._elem_types = elem_types
        self._value_types = dict(value_types or {})
        self.input_notes = list(input_notes)
        self._node_index = {n.name: i for i, n in enumerate(model.graph.node)}
        self._init_index: Optional[dict[str, int]] = None
        self.captured = captured_tensors(model.graph)

    @property
    def model(self) -> onnx.ModelProto:
        """The normalised model, complete: the weights :func:`import_onnx` left unwritten (the folded
        ``ConstantOfShape`` weights of light zoo models, :func:`parapipe.graph.normalize.normalise`) are written
        on the first read."""
        if self._deferred is not None:
            normalize.fill_deferred(self._model, self._deferred)
            self._deferred = None
        return self._model

    @property
    def structure(self) -> onnx.ModelProto:
        """The normalised model, possibly without the bytes of its large filled weights: for reading nodes,
        names, opsets, dims and types (what costing and checking a model read), never weight values; cheaper
        than :attr:`model` until something needs the weights."""
        return self._model

    @property
    def flops(self) -> float:
        """Total FLOPs of one inference (sum over operators)."""
        return float(sum(op.flops for _, op in self.graph.nodes(data="op")))

    @property
    def input_shapes(self) -> dict[str, list[int]]:
        """The static shape of every data input (what ``--input-shape`` gives), in input order."""
        return {n: [int(d) for d in self.tensors[n].shape] for n in self.inputs}

    @property
    def ops_without_flop_formula(self) -> dict[str, int]:
        """Op type -> number of operators costed with 0 FLOPs for want of a formula (sorted by op type)."""
        counts = Counter(op.op_type for _, op in self.graph.nodes(data="op") if not op.flop_formula)
        return dict(sorted(counts.items()))

    @property
    def data_dependent_ops(self) -> list[str]:
        """Operators (topological order) whose cost depends on the input values: it is that of one sample."""
        return [n for n in self.topo_order if self.op(n).data_dependent]

    def op(self, name: str) -> Operator:
        """The :class:`Operator` called ``name`` (KeyError if there is none)."""
        return self.graph.nodes[name]["op"]

    def node(self, name: str) -> onnx.NodeProto:
        """The NodeProto of operator ``name`` in :attr:`model` (KeyError if there is none)."""
        return self._model.graph.node[self._node_index[name]]

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
        """A ValueInfoProto with the type and shape of activation tensor ``tensor`` (data-dependent axes as
        symbolic dims, sequences as sequence types, a map or a sequence of maps with its inferred type).

        A tensor a control-flow subgraph captures (:func:`captured_tensors`) is declared with every dim
        symbolic: ONNX Runtime type-checks both branches of an ``If`` at the declared outer shapes, so a branch
        not taken may not load at the static shapes the taken one runs with (silero VAD's ``silero_vad.onnx``
        with ``input`` fixed to 1x512 does not load in onnxruntime 1.32 from ``ORT_ENABLE_BASIC`` up: "LSTM:
        First input tensor must have rank 3"; it loads with its inputs as exported). ``tensors`` keeps the
        static shape for costs and frames."""
        return _value_info(tensor, self._elem_types, self.tensors, self._value_types,
                           symbolic=tensor in self.captured)

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


def _value_info(name: str, elem_types: dict[str, int], tensors: dict[str, TensorInfo],
                value_types: Optional[dict[str, onnx.TypeProto]] = None, symbolic: bool = False) -> onnx.ValueInfoProto:
    """The declared type of ``name``: data-dependent axes (every axis when ``symbolic``) as named symbolic
    dims ``<name>_dim<i>``."""
    if value_types and name in value_types:  # not a tensor nor a sequence of tensors: its type as inferred
        vi = onnx.ValueInfoProto(name=name)
        vi.type.CopyFrom(value_types[name])
        return vi
    info = tensors[name]
    if info.sequence:
        return helper.make_tensor_sequence_value_info(name, elem_types[name], None)
    axes = range(len(info.shape)) if symbolic else info.data_dependent_axes
    if not axes:
        return helper.make_tensor_value_info(name, elem_types[name], list(info.shape))
    stem = re.sub(r"\W", "_", name)
    dims = [f"{stem}_dim{i}" if i in axes else d for i, d in enumerate(info.shape)]
    return helper.make_tensor_value_info(name, elem_types[name], dims)



def import_onnx(model: onnx.ModelProto, name: str = "model", source: str = "<memory>",
                input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                feeds: Optional[Mapping[str, np.ndarray]] = None) -> OpGraph:
    """Build the :class:`OpGraph` of an ONNX model.

    Parameters
    ----------
    model : onnx.ModelProto
        Any ONNX model (not modified).
    name : str
        Name recorded in :attr:`OpGraph.name`.
    source : str
        File (or registry name) for error messages.
    input_shapes : mapping of str to sequence of int, optional
        Static shapes of data inputs (``--input-shape``); other symbolic dims follow the rules of
        :func:`parapipe.graph.inputs.resolve_input_shapes` (batch dim 1, any other refused).
    feeds : mapping of str to ndarray, optional
        Input values (the arrays of ``--feeds``, :func:`parapipe.graph.feeds.read_feeds`) for the one ONNX
        Runtime run that measures the shapes ONNX cannot infer (:func:`parapipe.graph.shapes.infer_tensor_types`).

    Returns
    -------
    OpGraph

    Raises
    ------
    InputError
        The model is malformed (dangling tensor, cycle), has no operator, an operator the installed ONNX
        Runtime cannot run, a symbolic input dim without a given size, an input shape too small for it (a dim
        <= 0 follows), or a tensor shape that cannot be determined; the message names ``source``.
    """
    try:
        return _import(model, name, source, input_shapes, feeds)
    except InputError:
        raise
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise input_error(source, None, f"is not a valid ONNX model ({first})", "re-export it") from exc


def _import(model: onnx.ModelProto, name: str, source: str,
            given: Optional[Mapping[str, Sequence[int]]], feeds: Optional[Mapping[str, np.ndarray]] = None) -> OpGraph:
    support.check_runtime(model, source)
    resolved = input_shapes_mod.resolve_input_shapes(model, given, source)
    deferred: dict[str, object] = {}  # weights written when OpGraph.model is first read
    norm = normalize.normalise(model, source, resolved.shapes, deferred=deferred)
    g = norm.graph
    if len(g.node) == 0:
        raise input_error(source, "graph", "has no operators after folding constants",
                          "give a model that computes something from its inputs")
    found = shapes.infer_tensor_types(norm, source, feeds=feeds,
                                      before_measure=lambda: normalize.fill_deferred(norm, deferred))
    constants = {t.name for t in g.initializer}
    const_types = {t.name: (tuple(int(d) for d in t.dims), np_dtype_name(t.data_type)) for t in g.initializer}
    const_nbytes = {t.name: elem_tensor_nbytes(t.dims, t.data_type) for t in g.initializer}

    tensors: dict[str, TensorInfo] = {}
    elem_types: dict[str, int] = {}
    for tname, (shape, elem) in found.types.items():
        dtype = np_dtype_name(elem)
        tensors[tname] = TensorInfo(tname, shape, dtype, tensor_nbytes(shape, dtype),
                                    found.data_dependent.get(tname, ()), tname in found.sequences)
        elem_types[tname] = elem
    # record the inferred shapes in the model (outputs, value_info): the normalised model describes itself
    del g.value_info[:]
    graph_inputs = [vi.name for vi in g.input]
    graph_outputs = [vi.name for vi in g.output]
    captured = captured_tensors(g)  # declared symbolic (OpGraph.value_info says why)
    producer: dict[str, str] = {}
    for node in g.node:
        for o in node.output:
            if o:
                producer[o] = node.name
                if o not in graph_outputs:
                    g.value_info.append(_value_info(o, elem_types, tensors, found.value_types, o in captured))
    for vi in list(g.output) + [vi for vi in g.input if vi.name in captured]:
        if vi.name in tensors:
            vi.CopyFrom(_value_info(vi.name, elem_types, tensors, found.value_types, vi.name in captured))

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
        touched = [tensors[t] for t in list(act_in) + list(node.output) if t in tensors]
        op = Operator(
            name=node.name, op_type=support.qualified_op_type(node), inputs=tuple(ins),
            outputs=tuple(o for o in node.output if o),
            flops=float(op_flops(node, in_shapes, out_shapes)),
            param_nbytes=sum(const_nbytes[t] for t in ins if t in constants),
            in_nbytes=sum(tensors[t].nbytes for t in act_in if t in tensors),
            out_nbytes=sum(tensors[o].nbytes for o in node.output if o in tensors),
            signature=_signature(node, in_types), flop_formula=has_flop_formula(node),
            data_dependent=any(t.data_dependent_axes or t.sequence for t in touched),
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
    og = OpGraph(norm, dg, tensors, data_inputs, graph_outputs, constants, topo, name, elem_types,
                 resolved.notes, found.value_types, deferred)
    logger.debug("imported %s: %d operators, %.3f GFLOPs", name, dg.number_of_nodes(), og.flops / 1e9)
    return og
