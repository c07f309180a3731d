"""Static shapes and element types of every activation tensor of a (normalised) ONNX model.

Shapes come from :func:`onnx.shape_inference.infer_shapes` run on a *skeleton* of the model: initializers
larger than :data:`SKELETON_MAX_INLINE_ELEMENTS` are replaced by typed graph inputs, so inference never
serialises the weights (VGG-19 would be 0.5 GB) while small constants (Reshape targets, Slice bounds) keep
their values for data propagation. Tensors whose shape ONNX cannot infer statically are measured once with
ONNX Runtime on fixed inputs (optimisation off, so every node output exists).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import numpy as np
import onnx
from onnx import helper

from parapipe.errors import input_error
from parapipe.graph._proto import captured_tensors, value_info_shape, with_symbolic_dims

__all__ = ["SKELETON_MAX_INLINE_ELEMENTS", "skeleton", "TensorTypes", "infer_tensor_types",
           "infer_activation_types"]

logger = logging.getLogger(__name__)

#: Initializers with more elements than this become typed inputs in the inference skeleton. 4096 elements
#: keeps every shape-like constant (they have at most a few dozen) and drops every weight tensor; parapipe
#: choice, not an ONNX limit.
SKELETON_MAX_INLINE_ELEMENTS = 4096

TypeMap = dict[str, tuple[tuple[int, ...], int]]


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """Copy of ``model`` without large initializer payloads (they become typed graph inputs).

    Cheap to serialise: for shape inference and for checking the structure of weight-heavy models.
    """
    sk = onnx.ModelProto()
    sk.ir_version = max(model.ir_version, 4)
    sk.opset_import.extend(model.opset_import)
    sk.functions.extend(model.functions)
    g = sk.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    listed = {i.name for i in g.input}
    for init in model.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        if n <= SKELETON_MAX_INLINE_ELEMENTS and init.data_location != onnx.TensorProto.EXTERNAL:
            g.initializer.append(init)
        elif init.name not in listed:
            g.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return sk


def _collect(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    found: dict[str, onnx.ValueInfoProto] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        found[vi.name] = vi
    return found


@dataclass
class TensorTypes:
    """What :func:`infer_tensor_types` found.

    Attributes
    ----------
    types : dict
        tensor name -> (shape, ``TensorProto.DataType``). A data-dependent dim holds the size measured on one
        sample run (at least 1); a sequence holds ``(number of elements, *first element's shape)``.
    data_dependent : dict of str to tuple of int
        tensor name -> the axes whose size depends on the input *values* (NonZero, Unique, a Loop's trip count
        ...): ONNX shape inference cannot give them from the static input shapes. Stage models keep them
        symbolic.
    sequences : set of str
        Values that are not plain tensors (``seq(tensor)``; a map, or a sequence of maps as ZipMap gives in
        converted scikit-learn classifiers): never handed between stages.
    value_types : dict of str to onnx.TypeProto
        The inferred ONNX type of every such value that is not ``seq(tensor)`` (stage models declare it as is).
    """

    types: TypeMap = field(default_factory=dict)
    data_dependent: dict[str, tuple[int, ...]] = field(default_factory=dict)
    sequences: set[str] = field(default_factory=set)
    value_types: dict[str, onnx.TypeProto] = field(default_factory=dict)


def _infer(model: onnx.ModelProto, source: str, strict: bool) -> dict[str, onnx.ValueInfoProto]:
    """ONNX shape inference on the skeleton; in strict mode, failing that, again without the model's own
    ``value_info`` for ONNX-domain outputs (exporters leave stale ones: "Inferred shape and existing shape
    differ"), then non-strict."""
    sk = skeleton(model)
    errors = (onnx.shape_inference.InferenceError, onnx.checker.ValidationError)
    if strict:
        try:
            return _collect(onnx.shape_inference.infer_shapes(sk, check_type=False, strict_mode=True,
                                                              data_prop=True).graph)
        except errors as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        onnx_outputs = {o for n in sk.graph.node if n.domain in ("", "ai.onnx") for o in n.output}
        kept = [vi for vi in sk.graph.value_info if vi.name not in onnx_outputs]
        if len(kept) < len(sk.graph.value_info):
            del sk.graph.value_info[:]
            sk.graph.value_info.extend(kept)
            try:
                found = _collect(onnx.shape_inference.infer_shapes(sk, check_type=False, strict_mode=True,
                                                                   data_prop=True).graph)
                logger.info("%s: the model's value_info contradicts ONNX shape inference (%s); inferred "
                            "without it", source, first)
                return found
            except errors:
                pass
        logger.warning("%s: ONNX shape inference failed in strict mode (%s); retrying non-strict", source, first)
    return _collect(onnx.shape_inference.infer_shapes(sk, check_type=False, strict_mode=False,
                                                      data_prop=True).graph)


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: node for node in model.graph.node for o in node.output if o}


def infer_tensor_types(model: onnx.ModelProto, source: str, *, strict: bool = True,
                       measure: bool = True, feeds: Optional[Mapping[str, np.ndarray]] = None,
                       before_measure: Optional[Callable[[], object]] = None) -> TensorTypes:
    """Shape and element type of every graph input and node output of ``model``, with the data-dependent dims.

    Parameters
    ----------
    model : onnx.ModelProto
        A model whose graph inputs have static shapes (see :func:`parapipe.graph.inputs.resolve_input_shapes`).
    source : str
        File or model name for error messages.
    strict : bool
        Run ONNX shape inference in strict mode first (on failure: a warning and a non-strict retry).
    measure : bool
        Measure the shapes ONNX cannot infer with ONNX Runtime (one run on fixed inputs); if False they are
        left out of ``types``.
    feeds : mapping of str to ndarray, optional
        Values of data inputs for that run (the arrays of ``--feeds``: see :func:`_probe_feed`); the other
        inputs get fixed values. A model that branches on an input (an ``If`` on a sample rate) needs the
        real value there.
    before_measure : callable, optional
        Called before that run (to complete a model whose weights :func:`parapipe.graph.normalize.normalise`
        left empty: static inference reads none of them).

    Returns
    -------
    TensorTypes

    Raises
    ------
    InputError
        A statically inferred dim <= 0 (the input shapes are too small for the model: the message names the
        tensor, its producer and the shape), or a shape that stays unknown even after running the model.
    """
    found = _infer(model, source, strict)
    wanted = [i.name for i in model.graph.input]
    wanted += [o for node in model.graph.node for o in node.output if o]
    result = TensorTypes()
    missing: list[str] = []
    for name in wanted:
        vi = found.get(name)
        if vi is not None and vi.type.WhichOneof("value") not in ("tensor_type", None):
            result.sequences.add(name)
            missing.append(name)
            seq = vi.type.sequence_type.elem_type if vi.type.HasField("sequence_type") else None
            if seq is None or not seq.HasField("tensor_type"):  # a map, a sequence of maps, an optional ...
                result.value_types[name] = onnx.TypeProto()
                result.value_types[name].CopyFrom(vi.type)
            continue
        shape, elem = value_info_shape(vi) if vi is not None else (None, 0)
        if shape is None or any(d is None for d in shape) or elem == 0:
            missing.append(name)
            if shape is not None:
                result.data_dependent[name] = tuple(i for i, d in enumerate(shape) if d is None)
            continue
        dims = [int(d) for d in shape if d is not None]  # every dim is known here
        if any(d <= 0 for d in dims):
            _refuse_dim(model, source, name, shape)
        result.types[name] = (tuple(dims), int(elem))
    if missing and measure:
        logger.info("%s: %d tensor shapes not inferable statically (first: %s); measuring with ONNX Runtime",
                    source, len(missing), missing[0])
        if before_measure is not None:
            before_measure()
        for name, (shape, elem) in _measure_with_ort(model, missing, source, _probe_values(model, found, feeds)).items():
            if name not in result.sequences:
                axes = result.data_dependent.get(name)
                if axes is None or any(a >= len(shape) for a in axes):
                    axes = tuple(range(len(shape)))  # the rank was unknown too
                result.data_dependent[name] = axes
                shape = tuple(max(d, 1) if i in axes else d for i, d in enumerate(shape))
            result.types[name] = (shape, elem)
    return result


def _probe_values(model: onnx.ModelProto, found: Mapping[str, onnx.ValueInfoProto],
                  feeds: Optional[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Input values for the shape probe: ``feeds``, plus the value of every other integer input that is a shape
    operand and whose value follows from the statically known shapes ``found``
    (:func:`parapipe.graph.shape_inputs.shape_operand_values`)."""
    from parapipe.graph.shape_inputs import shape_operand_values

    given = dict(feeds or {})
    dims = {t.name: tuple(int(d) for d in t.dims) for t in model.graph.initializer}

    def static(vi: Optional[onnx.ValueInfoProto]) -> Optional[tuple[int, ...]]:
        shape = value_info_shape(vi)[0] if vi is not None and vi.type.HasField("tensor_type") else None
        if shape is None or any(d is None for d in shape):
            return None
        return tuple(int(d) for d in shape if d is not None)

    def shape_of(name: str) -> Optional[tuple[int, ...]]:
        return dims[name] if name in dims else static(found.get(name))

    ints = {}
    for vi in model.graph.input:
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        shape = static(vi)
        if vi.name not in given and vi.name not in dims and elem in _INDEX_TYPES and elem != onnx.TensorProto.BOOL \
                and shape is not None:
            ints[vi.name] = (shape, elem)
    derived = shape_operand_values(model.graph.node, {n: s for n, (s, _) in ints.items()}, shape_of)
    for name, value in derived.items():
        if value is not None:
            given[name] = np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(ints[name][1]))
    return given


def _refuse_dim(model: onnx.ModelProto, source: str, name: str, shape: tuple) -> None:
    node = _producers(model).get(name)
    what = f"output of {node.op_type} {node.name!r}" if node is not None else "a graph input"
    inputs = ", ".join(f"{vi.name}: {'x'.join(str(d) for d in (value_info_shape(vi)[0] or ()))}"
                       for vi in model.graph.input)
    raise input_error(source, f"tensor {name!r} ({what})",
                      f"would have shape [{', '.join(map(str, shape))}], a dim <= 0: the input shapes ({inputs}) "
                      "are too small for this model",
                      "give larger ones with --input-shape NAME:D0xD1x...")


def infer_activation_types(model: onnx.ModelProto, source: str, *, strict: bool = True,
                           measure: bool = True) -> TypeMap:
    """Shape and element type of every graph input and every node output of ``model``: the ``types`` of
    :func:`infer_tensor_types` (same parameters and errors)."""
    return infer_tensor_types(model, source, strict=strict, measure=measure).types


#: Integer and boolean element types: inputs that select branches, lengths and indices.
_INDEX_TYPES = frozenset({onnx.TensorProto.BOOL, onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                          onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                          onnx.TensorProto.UINT32, onnx.TensorProto.UINT64})


def _probe_feed(vi: onnx.ValueInfoProto, given: Optional[np.ndarray] = None) -> np.ndarray:
    """The value a graph input gets in the shape probe: ``given`` (the user's ``--feeds`` array: one frame of the
    input's shape and dtype, or several along a leading axis, of which the first is used) where it fits;
    otherwise fixed, not drawn (seeded frames are drawn above this layer, by ``ppexec.frames``), so the measured
    shapes depend on no seed: floats 1 (no zero for ``NonZero`` to drop, no 0 for ``Log``/``Div``), integers 0
    (a valid index), booleans false; dynamic dims 1. A ``given`` array of another dtype or shape is not used
    here (:func:`parapipe.graph.feeds.load_feeds` refuses it, naming the input).

    Raises
    ------
    ValueError
        An element type that is neither floating point, integer nor boolean.
    """
    shape, elem = value_info_shape(vi)
    dims = [d if d is not None else 1 for d in (shape or ())]
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    if given is not None:
        value = np.asarray(given)
        if value.dtype == dtype and value.shape == tuple(dims):
            return value
        if value.dtype == dtype and value.ndim == len(dims) + 1 and value.shape[1:] == tuple(dims) and len(value):
            return np.asarray(value[0])  # a 0-d array, not a numpy scalar (ONNX Runtime refuses those)
        logger.info("%s: the given value (%s %s) does not fit the input (%s %s); the shape probe uses a fixed one",
                    vi.name, value.dtype, list(value.shape), dtype, dims)
    if dtype.kind == "f":
        return np.ones(dims, dtype=dtype)
    if dtype.kind in "iub":
        return np.zeros(dims, dtype=dtype)
    raise ValueError(f"cannot make a probe feed of element type {elem}")


def _measure_with_ort(model: onnx.ModelProto, names: list[str], source: str,
                      feeds: Optional[Mapping[str, np.ndarray]] = None) -> TypeMap:
    """Run ``model`` once on ``feeds`` or fixed inputs (:func:`_probe_feed`) with ``names`` exposed as outputs;
    return their shapes/types."""
    import onnxruntime as ort  # local: the rest of the graph package does not need ONNX Runtime

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    captured = captured_tensors(probe.graph)
    for vi in probe.graph.input:  # an If branch not taken may not type-check at the static shapes
        if vi.name in captured:
            with_symbolic_dims(vi)
    present = {o.name for o in probe.graph.output}
    for name in names:
        if name not in present:
            probe.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4  # a failing run is reported below, in one line
    given = feeds or {}
    constants = {t.name for t in model.graph.initializer}
    try:
        sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        values = sess.run(names, {vi.name: _probe_feed(vi, given.get(vi.name)) for vi in model.graph.input
                                  if vi.name not in constants})
    except Exception as exc:  # ORT raises its own Fail/InvalidArgument types
        fixed = [vi for vi in model.graph.input if vi.name not in constants and vi.name not in given]
        steering = [vi.name for vi in fixed if vi.type.tensor_type.elem_type in _INDEX_TYPES]
        fixed = steering or [vi.name for vi in fixed]  # integers and booleans pick branches and sizes
        remedy = ("export the model with static shapes (e.g. onnx.shape_inference, onnxsim)" if not fixed else
                  f"pass real values of {', '.join(fixed)} with --feeds FILE.npz (the probe ran on fixed ones: "
                  "floats 1, integers 0), or export the model with static shapes (onnx.shape_inference, onnxsim)")
        raise input_error(source, f"tensor {names[0]!r}",
                          f"shape cannot be inferred by ONNX nor measured with ONNX Runtime "
                          f"({' '.join(str(exc).split())[:200]})", remedy) from exc
    out: TypeMap = {}
    for name, value in zip(names, values):
        if isinstance(value, list):  # a sequence: (length, *first element's shape)
            first = np.asarray(value[0]) if value else np.zeros(0, np.float32)
            out[name] = ((len(value),) + tuple(int(d) for d in first.shape),
                         helper.np_dtype_to_tensor_dtype(first.dtype))
            continue
        arr = np.asarray(value)
        out[name] = (tuple(int(d) for d in arr.shape), helper.np_dtype_to_tensor_dtype(arr.dtype))
    return out
