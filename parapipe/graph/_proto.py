"""Small helpers over ONNX protobufs shared by the graph modules (no graph logic here).

* :func:`node_inputs` -- the activation/constant tensors a node reads, including the outer-scope names its
  control-flow subgraphs (If/Loop/Scan bodies) capture, which ``node.input`` does not list.
* :func:`np_dtype_name` / :func:`tensor_nbytes` -- element types to numpy dtype names and byte sizes.
"""
from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

import numpy as np
import onnx
from onnx import helper

_NP_NAME_BY_ELEM: dict[int, str] = {}


def np_dtype_name(elem_type: int) -> str:
    """Return the numpy dtype name (``"float32"``) of an ONNX ``TensorProto.DataType`` value.

    Types numpy cannot represent natively (bfloat16, float8, int4 ...) map to the name of the storage type
    ONNX uses for them (see :func:`onnx.helper.tensor_dtype_to_np_dtype`); an undefined type (0) maps to
    ``"undefined"``.
    """
    name = _NP_NAME_BY_ELEM.get(elem_type)
    if name is None:
        try:
            name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
        except (KeyError, TypeError, ValueError):
            name = "undefined"
        _NP_NAME_BY_ELEM[elem_type] = name
    return name


def itemsize(dtype_name: str) -> int:
    """Bytes per element of a numpy dtype name; 0 for ``"undefined"``; 8 (a pointer) for ``object``."""
    if dtype_name == "undefined":
        return 0
    return int(np.dtype(dtype_name).itemsize)


def tensor_nbytes(shape: Sequence[int], dtype_name: str) -> int:
    """Bytes of a dense tensor: product of ``shape`` (empty: a scalar, 1 element) times the element size."""
    return int(math.prod(shape)) * itemsize(dtype_name)


#: Element types stored two per byte (ONNX packs 4-bit integers and floats; numpy holds them in int8/uint8).
PACKED_4BIT = frozenset(getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1")
                        if hasattr(onnx.TensorProto, n))


def elem_tensor_nbytes(shape: Sequence[int], elem_type: int) -> int:
    """Bytes of a tensor of ONNX element type ``elem_type`` as ONNX stores it: 4-bit types packed two per byte
    (rounded up), others as :func:`tensor_nbytes`."""
    if elem_type in PACKED_4BIT:
        return (int(math.prod(shape)) + 1) // 2
    return tensor_nbytes(shape, np_dtype_name(elem_type))


def _graph_free_names(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads but does not define itself: its outer-scope references."""
    defined: set[str] = {i.name for i in graph.input}
    defined.update(t.name for t in graph.initializer)
    defined.update(t.values.name for t in graph.sparse_initializer)
    used: list[str] = []
    for node in graph.node:
        used.extend(node_inputs(node))
        defined.update(o for o in node.output if o)
    return {name for name in used if name and name not in defined}


def subgraph_free_names(node: onnx.NodeProto) -> list[str]:
    """Outer-scope tensor names captured by the subgraph attributes of ``node`` (sorted, deduplicated)."""
    free: set[str] = set()
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            free |= _graph_free_names(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for g in attr.graphs:
                free |= _graph_free_names(g)
    return sorted(free)


def has_subgraph(node: onnx.NodeProto) -> bool:
    """True if ``node`` carries a graph attribute (If, Loop, Scan, or a custom control-flow op)."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """All tensors ``node`` reads, in order, without empty optional slots and without repeats.

    For control-flow nodes the outer-scope names their subgraphs capture are appended (they are real data
    dependencies that ``node.input`` does not list).
    """
    seen: set[str] = set()
    out: list[str] = []
    names: Iterable[str] = node.input
    if has_subgraph(node):
        names = list(node.input) + subgraph_free_names(node)
    for name in names:
        if name and name not in seen:
            seen.add(name)
            out.append(name)
    return out


def opset_version(model: onnx.ModelProto, domain: str = "") -> int:
    """Opset version the model imports for ``domain`` (``""`` and ``"ai.onnx"`` are the same); 0 if none."""
    for op in model.opset_import:
        if op.domain == domain or (domain in ("", "ai.onnx") and op.domain in ("", "ai.onnx")):
            return int(op.version)
    return 0


def value_info_shape(vi: onnx.ValueInfoProto) -> "tuple[Optional[tuple[Optional[int], ...]], int]":
    """Shape and element type of a tensor ValueInfo.

    Returns
    -------
    (shape, elem_type)
        ``shape`` is a tuple with ``None`` for unknown or symbolic dims, or ``None`` when the rank is unknown
        (no shape field, or not a tensor type); ``elem_type`` is the ``TensorProto.DataType`` (0: unknown).
    """
    if not vi.type.HasField("tensor_type"):
        return None, 0
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None, tt.elem_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
    return dims, tt.elem_type


def captured_tensors(graph: onnx.GraphProto) -> frozenset[str]:
    """Tensors of ``graph`` that a control-flow subgraph (an ``If`` branch, a ``Loop``/``Scan`` body) reads from
    the outer scope (:func:`node_inputs` less the node's own inputs)."""
    return frozenset(t for node in graph.node for t in set(node_inputs(node)) - set(node.input))


def with_symbolic_dims(vi: onnx.ValueInfoProto) -> None:
    """Make every dim of tensor value ``vi`` symbolic, named ``<name>_dim<i>`` (in place; the rank is kept)."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return
    stem = "".join(c if c.isalnum() else "_" for c in vi.name)
    for i, d in enumerate(vi.type.tensor_type.shape.dim):
        d.Clear()
        d.dim_param = f"{stem}_dim{i}"
