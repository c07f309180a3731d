"""Static shapes and element types of every activation tensor of a (normalised) ONNX model.

Shapes come from :func:`onnx.shape_inference.infer_shapes` run on a *skeleton* of the model: initializers
larger than :data:`SKELETON_MAX_INLINE_ELEMENTS` are replaced by typed graph inputs, so inference never
serialises the weights (VGG-19 would be 0.5 GB) while small constants (Reshape targets, Slice bounds) keep
their values for data propagation. Tensors whose shape ONNX cannot infer statically are measured once with
ONNX Runtime on random inputs (optimisation off, so every node output exists).
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np
import onnx
from onnx import helper

from parapipe.errors import input_error
from parapipe.graph._proto import value_info_shape

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


def _collect(graph: onnx.GraphProto) -> dict[str, tuple[Optional[tuple], int]]:
    found: dict[str, tuple[Optional[tuple], int]] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        shape, elem = value_info_shape(vi)
        found[vi.name] = (shape, elem)
    return found


def infer_activation_types(model: onnx.ModelProto, source: str, *, strict: bool = True,
                           measure: bool = True) -> TypeMap:
    """Static shape and element type of every graph input and every node output of ``model``.

    Parameters
    ----------
    model : onnx.ModelProto
        A model whose graph inputs have static shapes (dynamic dims already set, see ``normalise``).
    source : str
        File or model name for error messages.
    strict : bool
        Run ONNX shape inference in strict mode first (on failure: a warning and a non-strict retry).
    measure : bool
        Measure the shapes ONNX cannot infer with ONNX Runtime; if False they are left out of the result.

    Returns
    -------
    dict
        tensor name -> (shape as tuple of int, ``TensorProto.DataType`` int); every wanted tensor when
        ``measure`` is True.

    Raises
    ------
    InputError
        A shape stays unknown even after running the model with ONNX Runtime.
    """
    sk = skeleton(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(sk, check_type=False, strict_mode=strict, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        logger.warning("%s: ONNX shape inference failed in strict mode (%s); retrying non-strict", source,
                       str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        inferred = onnx.shape_inference.infer_shapes(sk, check_type=False, strict_mode=False, data_prop=True)
    found = _collect(inferred.graph)
    wanted = [i.name for i in model.graph.input]
    wanted += [o for node in model.graph.node for o in node.output if o]
    result: TypeMap = {}
    missing: list[str] = []
    for name in wanted:
        shape, elem = found.get(name, (None, 0))
        if shape is None or any(d is None for d in shape) or elem == 0:
            missing.append(name)
        else:
            result[name] = (tuple(int(d) for d in shape), int(elem))
    if missing and measure:
        logger.info("%s: %d tensor shapes not inferable statically (first: %s); measuring with ONNX Runtime",
                    source, len(missing), missing[0])
        result.update(_measure_with_ort(model, missing, source))
    return result


def _random_feed(vi: onnx.ValueInfoProto, rng: np.random.Generator) -> np.ndarray:
    shape, elem = value_info_shape(vi)
    dims = [d if d is not None else 1 for d in (shape or ())]
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    if dtype.kind == "f":
        return rng.random(dims).astype(dtype)
    if dtype.kind in "iu":
        return np.zeros(dims, dtype=dtype)
    if dtype.kind == "b":
        return np.zeros(dims, dtype=dtype)
    raise ValueError(f"cannot make a random feed of element type {elem}")


def _measure_with_ort(model: onnx.ModelProto, names: list[str], source: str) -> TypeMap:
    """Run ``model`` once on random inputs with ``names`` exposed as outputs; return their shapes/types."""
    import onnxruntime as ort  # local: the rest of the graph package does not need ONNX Runtime

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    present = {o.name for o in probe.graph.output}
    for name in names:
        if name not in present:
            probe.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    rng = np.random.default_rng(0)
    try:
        sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        feeds = {vi.name: _random_feed(vi, rng) for vi in model.graph.input}
        values = sess.run(names, feeds)
    except Exception as exc:  # ORT raises its own Fail/InvalidArgument types
        raise input_error(source, f"tensor {names[0]!r}",
                          f"shape cannot be inferred by ONNX nor measured with ONNX Runtime "
                          f"({str(exc).splitlines()[0][:200]})",
                          "export the model with static shapes (e.g. onnx.shape_inference, onnxsim)") from exc
    out: TypeMap = {}
    for name, value in zip(names, values):
        arr = np.asarray(value)
        out[name] = (tuple(int(d) for d in arr.shape), helper.np_dtype_to_tensor_dtype(arr.dtype))
    return out
