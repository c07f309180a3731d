"""Normalise an ONNX model for parapipe: the model every later step (profiling, extraction, execution) uses.

:func:`normalise` returns a new model (the input is not modified) in which

* model-local functions are inlined, unused nodes dropped, initializers listed as graph outputs given an
  ``Identity`` node and every ``DequantizeLinear`` given a single reader (:mod:`parapipe.graph.cleanup`);
* data inputs have the static shapes decided by :func:`parapipe.graph.inputs.resolve_input_shapes` (by default
  a symbolic batch dim becomes 1; any other symbolic dim needs ``--input-shape``);
* nodes are in topological order;
* every deterministic node whose inputs are all constants is evaluated and replaced by an initializer
  (the zoo models' ``ConstantOfShape`` weight generators, ``Constant`` nodes, constant ``Unsqueeze`` ...),
  and ``Shape``/``Size`` of statically shaped tensors become constants too, repeatedly until nothing folds;
  quantize/dequantize nodes are never folded (:data:`~parapipe.graph.cleanup.QDQ_OPS`): ONNX Runtime fuses
  them with their readers into quantized kernels, whose results differ from float arithmetic on the
  dequantized weights;
* initializers no longer used are dropped and no initializer is listed in ``graph.input`` (weights are
  constants, not overridable inputs), with ``ir_version`` raised to >= 4 (IR 3 requires the listing);
* every node has a unique non-empty name (existing unique names are kept, others become
  ``f"{op_type}_{index}"`` with a numeric suffix on collision);
* ``Dropout`` is kept: in inference it is the identity, in ONNX Runtime and in the reference evaluator;
  unused optional outputs (Dropout's mask, BatchNormalization's training statistics) are removed.
"""
from __future__ import annotations

import heapq
import logging
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

from parapipe.errors import input_error
import parapipe.graph.cleanup as cleanup
import parapipe.graph.shapes as shapes
from parapipe.graph.inputs import apply_input_shapes, resolve_input_shapes
from parapipe.graph._proto import has_subgraph, node_inputs, opset_version

__all__ = ["NONDETERMINISTIC_OPS", "MAX_FOLD_ROUNDS", "normalise"]

logger = logging.getLogger(__name__)

#: Ops never folded: their output is random, so evaluating them once would change the model.
NONDETERMINISTIC_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                  "Multinomial", "Bernoulli"})
#: Rounds of (fold constants, fold static Shape/Size) before giving up; a chain Shape->Gather->Concat->Reshape
#: needs 1; parapipe choice.
MAX_FOLD_ROUNDS = 8


class _Filled:
    """A constant tensor with one repeated value (a folded ConstantOfShape), materialised only on demand.

    Converting it straight to raw bytes (``bytes * n``) skips a numpy array and its copy: for VGG-19's 0.5 GB
    of ConstantOfShape weights that is a third of the import time.
    """

    __slots__ = ("shape", "value", "tensor")

    def __init__(self, shape: tuple[int, ...], value: np.ndarray) -> None:
        self.shape = shape
        self.value = value  # 0-d array carrying the dtype
        #: its initializer in the graph, its bytes not yet written (:func:`normalise` with ``deferred``)
        self.tensor: Optional[onnx.TensorProto] = None

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def array(self) -> np.ndarray:
        return np.full(self.shape, self.value, dtype=self.value.dtype)

    def raw_bytes(self) -> bytes:
        return self.value.astype(self.value.dtype.newbyteorder("<")).tobytes() * int(np.prod(self.shape))


Const = Union[np.ndarray, onnx.TensorProto, _Filled]


def _topo_sort(graph: onnx.GraphProto, source: str) -> None:
    """Sort ``graph.node`` topologically, keeping the model's order where it already is one."""
    nodes = list(graph.node)
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    producer: dict[str, int] = {}
    for idx, node in enumerate(nodes):
        for out in node.output:
            if out:
                producer[out] = idx
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for idx, node in enumerate(nodes):
        d: set[int] = set()
        for name in node_inputs(node):
            if name in producer:
                d.add(producer[name])
            elif name not in available:
                raise input_error(source, f"node {node.name or idx} ({node.op_type})",
                                  f"reads tensor {name!r}, which is neither a graph input, an initializer "
                                  "nor produced by a node", "re-export the model")
        d.discard(idx)
        deps.append(d)
        for p in d:
            users[p].append(idx)
    if all(p < idx for idx, d in enumerate(deps) for p in d):
        return
    remaining = [len(d) for d in deps]
    heap = [i for i, r in enumerate(remaining) if r == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for u in users[i]:
            remaining[u] -= 1
            if remaining[u] == 0:
                heapq.heappush(heap, u)
    if len(order) != len(nodes):
        stuck = next(i for i, r in enumerate(remaining) if r > 0)
        raise input_error(source, f"node {nodes[stuck].name or stuck} ({nodes[stuck].op_type})",
                          "is part of a cycle", "an ONNX graph must be acyclic; re-export the model")
    logger.info("%s: nodes were not in topological order; sorted", source)
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)


def _as_array(value: Const) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, _Filled):
        return value.array()
    return numpy_helper.to_array(value)


def _constant_of_shape(node: onnx.NodeProto, shape: np.ndarray) -> _Filled:
    attrs = {a.name: a for a in node.attribute}
    # ONNX ConstantOfShape: the default value is a float32 zero
    value = numpy_helper.to_array(attrs["value"].t) if "value" in attrs else np.zeros(1, np.float32)
    fill = np.asarray(value.reshape(-1)[0], dtype=value.dtype)
    return _Filled(tuple(int(d) for d in shape.reshape(-1)), fill)


def _eval_node(node: onnx.NodeProto, feeds: list[np.ndarray], opset: int) -> list[np.ndarray]:
    """Evaluate one constant node: numpy for the common cases, the reference evaluator otherwise."""
    op = node.op_type
    attrs = {a.name: a for a in node.attribute}
    if op == "Constant" and "value" in attrs:
        return [numpy_helper.to_array(attrs["value"].t)]
    if op == "Identity":
        return [feeds[0]]
    if op == "Unsqueeze":
        if "axes" in attrs:  # opset < 13: an attribute; opset >= 13: the second input
            axes = list(helper.get_attribute_value(attrs["axes"]))
        else:
            axes = [int(a) for a in feeds[1]]
        rank = feeds[0].ndim + len(axes)
        out = feeds[0]
        for axis in sorted(a % rank for a in axes):
            out = np.expand_dims(out, axis)
        return [out]
    from onnx.reference import ReferenceEvaluator  # local: slow import, rarely needed

    ref = ReferenceEvaluator(node, opsets={"": opset})
    values = ref.run(None, dict(zip(node.input, feeds)))
    if any(not isinstance(v, (np.ndarray, np.generic)) for v in values):
        raise _NotATensor(f"{op} gives a sequence, map or optional, not a tensor")
    return [np.asarray(v) for v in values]


class _NotATensor(ValueError):
    """A constant node's value is not a tensor (a ``seq(tensor)`` of SequenceConstruct, SequenceEmpty ...): an
    initializer cannot hold it, so the node stays (numpy would stack the list into one tensor of another
    type)."""


def _foldable(node: onnx.NodeProto, consts: dict[str, Const], graph_outputs: set[str]) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC_OPS or has_subgraph(node):
        return False
    if node.op_type in cleanup.QDQ_OPS:
        return False
    if any(o in graph_outputs for o in node.output):
        return False
    return all(name in consts for name in node.input if name)


def _fold_constants(graph: onnx.GraphProto, consts: dict[str, Const], opset: int, source: str) -> int:
    """Evaluate constant nodes in place; new constants are appended to ``consts`` (numpy). Returns #folded."""
    graph_outputs = {o.name for o in graph.output}
    kept: list[onnx.NodeProto] = []
    folded = 0
    for node in graph.node:
        if not _foldable(node, consts, graph_outputs):
            kept.append(node)
            continue
        values: list[Union[np.ndarray, _Filled]]
        try:
            if node.op_type == "ConstantOfShape":
                values = [_constant_of_shape(node, _as_array(consts[node.input[0]]))]
            else:
                feeds: list[Any] = [_as_array(consts[n]) if n else None for n in node.input]  # None: omitted input
                values = list(_eval_node(node, feeds, opset))
        except _NotATensor:
            kept.append(node)
            continue
        except Exception as exc:  # a failing evaluation means an invalid model (or an op we cannot fold)
            logger.warning("%s: could not fold constant node %s (%s): %s; keeping it", source, node.name,
                           node.op_type, exc)
            kept.append(node)
            continue
        for name, value in zip(node.output, values):
            if name:
                consts[name] = value if isinstance(value, _Filled) else np.asarray(value)
        folded += 1
    if folded:
        del graph.node[:]
        graph.node.extend(kept)
    return folded


def _fold_static_shapes(model: onnx.ModelProto, consts: dict[str, Const], source: str) -> int:
    """Replace ``Shape``/``Size`` of statically shaped tensors by constants. Returns the number replaced."""
    graph = model.graph
    if not any(n.op_type in ("Shape", "Size") and n.input[0] not in consts for n in graph.node):
        return 0
    _sync_initializers(graph, consts, defer=True)
    types = shapes.infer_activation_types(model, source, strict=False, measure=False)
    kept: list[onnx.NodeProto] = []
    replaced = 0
    for node in graph.node:
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx") and node.input[0] in types:
            dims = np.array(types[node.input[0]][0], dtype=np.int64)
            if node.op_type == "Size":
                consts[node.output[0]] = np.array(int(np.prod(dims)), dtype=np.int64)
            else:
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                start, end = attrs.get("start", 0), attrs.get("end", None)
                consts[node.output[0]] = dims[start:end]
            replaced += 1
        else:
            kept.append(node)
    if replaced:
        del graph.node[:]
        graph.node.extend(kept)
    return replaced


def _sync_initializers(graph: onnx.GraphProto, consts: dict[str, Const], defer: bool = False) -> None:
    """Append numpy constants of ``consts`` to ``graph.initializer`` (as TensorProtos) and record them.

    ``defer``: a filled constant of more than :data:`~parapipe.graph.shapes.SKELETON_MAX_INLINE_ELEMENTS`
    elements (a weight, never a shape) gets its initializer without its bytes and stays in ``consts``, the
    initializer in its ``tensor`` (:func:`fill_deferred` writes the bytes)."""
    held: Optional[dict[str, onnx.TensorProto]] = None
    for name, value in list(consts.items()):
        if isinstance(value, _Filled) and value.value.dtype.kind in "biufb":
            if value.tensor is not None:  # its initializer is in the graph already, without its bytes
                if not defer:
                    if held is None:
                        held = {t.name: t for t in graph.initializer}
                    held[name].raw_data = value.raw_bytes()
                    consts[name] = held[name]
                continue
            tensor = graph.initializer.add()
            tensor.name = name
            tensor.data_type = helper.np_dtype_to_tensor_dtype(value.value.dtype)
            tensor.dims.extend(value.shape)
            if defer and value.size > shapes.SKELETON_MAX_INLINE_ELEMENTS:
                value.tensor = tensor
                continue
            tensor.raw_data = value.raw_bytes()
            consts[name] = tensor
            continue
        if isinstance(value, _Filled):
            value = value.array()
        if isinstance(value, np.ndarray):
            tensor = graph.initializer.add()
            if value.dtype.kind in "biufc":
                tensor.name = name
                tensor.data_type = helper.np_dtype_to_tensor_dtype(value.dtype)
                tensor.dims.extend(value.shape)
                # ONNX raw_data is little-endian
                tensor.raw_data = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()
            else:
                tensor.CopyFrom(numpy_helper.from_array(value, name))
            consts[name] = tensor


def _drop_unused(graph: onnx.GraphProto) -> None:
    used = {name for node in graph.node for name in node_inputs(node)} | {o.name for o in graph.output}
    init_names = {t.name for t in graph.initializer}
    for i in range(len(graph.initializer) - 1, -1, -1):
        if graph.initializer[i].name not in used:
            del graph.initializer[i]
    for i in range(len(graph.input) - 1, -1, -1):
        if graph.input[i].name in init_names:
            del graph.input[i]
    for i in range(len(graph.value_info) - 1, -1, -1):
        if graph.value_info[i].name in init_names:
            del graph.value_info[i]


def _strip_unused_optional_outputs(graph: onnx.GraphProto, opset: int) -> None:
    """Blank unused optional outputs (e.g. Dropout's mask, BatchNormalization's training statistics).

    Their shapes are often not inferable (Dropout-7's mask) and they are never computed in inference.
    """
    used = {name for node in graph.node for name in node_inputs(node)} | {o.name for o in graph.output}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or len(node.output) < 2:
            continue
        if not any(o and o not in used for o in node.output):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            continue
        formal = list(schema.outputs)
        outs = list(node.output)
        for i, name in enumerate(outs):
            param = formal[min(i, len(formal) - 1)] if formal else None
            optional = param is not None and param.option == onnx.defs.OpSchema.FormalParameterOption.Optional
            if name and name not in used and optional:
                outs[i] = ""
        while outs and outs[-1] == "":
            outs.pop()
        if outs != list(node.output):
            del node.output[:]
            node.output.extend(outs)


def fill_deferred(model: onnx.ModelProto, deferred: dict[str, Any]) -> onnx.ModelProto:
    """Write the bytes of the initializers :func:`normalise` left empty into ``model`` (in place), and empty
    ``deferred``; returns ``model``, then identical to what :func:`normalise` without ``deferred`` returns."""
    if deferred:
        for tensor in model.graph.initializer:
            fill = deferred.get(tensor.name)
            if fill is not None:
                tensor.raw_data = fill.raw_bytes()
        deferred.clear()
    return model


def normalise(model: onnx.ModelProto, source: str = "<memory>",
              input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
              deferred: Optional[dict[str, Any]] = None) -> onnx.ModelProto:
    """Return the normalised copy of ``model`` described in the module docstring.

    Parameters
    ----------
    model : onnx.ModelProto
        Any ONNX model; not modified.
    source : str
        File or model name used in error messages.
    input_shapes : mapping of str to sequence of int, optional
        Static shape of every data input (from :func:`parapipe.graph.inputs.resolve_input_shapes`); decided
        here with the default rules when None.
    deferred : dict, optional
        Given (empty): the initializers of folded ``ConstantOfShape`` weights (one repeated value, more than
        :data:`~parapipe.graph.shapes.SKELETON_MAX_INLINE_ELEMENTS` elements) are left without their bytes and
        recorded here, by name, until :func:`fill_deferred` writes them: writing them is most of the import
        time of a light zoo model (AlexNet's 244 MB: 0.3 s), and costing a model reads only their dims. Until
        then read only the model's structure, names, dims and types (:func:`parapipe.graph.shapes.skeleton`
        drops exactly these initializers).

    Returns
    -------
    onnx.ModelProto
        The normalised model (weights folded to initializers, unique node names, static input shapes).

    Raises
    ------
    InputError
        The graph reads a tensor nobody defines, or has a cycle; a data input with a symbolic non-batch dim
        and no shape in ``input_shapes``.
    """
    if input_shapes is None:
        input_shapes = resolve_input_shapes(model, None, source).shapes
    m = cleanup.inline_functions(model, source)
    if m is model:
        m = onnx.ModelProto()
        m.CopyFrom(model)
    graph = m.graph
    apply_input_shapes(graph, input_shapes)
    cleanup.constant_outputs_as_nodes(graph)
    _topo_sort(graph, source)
    dead = cleanup.drop_dead_nodes(graph)
    if dead:
        logger.info("%s: dropped %d node(s) whose outputs nobody reads", source, dead)
    cleanup.unique_dequantize(graph)
    consts: dict[str, Const] = {t.name: t for t in graph.initializer}
    opset = opset_version(m) or onnx.defs.onnx_opset_version()
    for _ in range(MAX_FOLD_ROUNDS):
        folded = _fold_constants(graph, consts, opset, source)
        folded += _fold_static_shapes(m, consts, source)
        if not folded:
            break
    _sync_initializers(graph, consts, defer=deferred is not None)
    _drop_unused(graph)
    if deferred is not None:
        kept = {t.name for t in graph.initializer}
        deferred.update((name, value) for name, value in consts.items()
                        if isinstance(value, _Filled) and value.tensor is not None and name in kept)
    _strip_unused_optional_outputs(graph, opset)
    if m.ir_version < 4:
        m.ir_version = 4
    cleanup.name_nodes(graph)
    return m
