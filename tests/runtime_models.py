"""Tiny ONNX graphs and hand-cut sub-models for the executor and plan tests (real models, real ORT
sessions)."""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ppexec.plan import PUBinding, Task

from parapipe.mapping import Stage

OPSET = [helper.make_opsetid("", 13)]
CPU_BINDINGS = {"cpu0": PUBinding(cpus=(0,)), "cpu1": PUBinding(cpus=(1,))}


def typed_stage(pus: Sequence[str], assignment: Dict[str, str], order: Sequence[str] = ()) -> Stage:
    """A pareto.json stage (figures zero) running block ``b`` on ``assignment[b]``, in ``order`` (default the
    assignment's order)."""
    return Stage(pus=list(pus), blocks=list(assignment), time_s=0.0, assignment=dict(assignment),
                 order=list(order or assignment))


def _weight(name: str, rows: int, cols: int, seed: int) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((rows, cols)) / np.sqrt(rows)
    return numpy_helper.from_array(values.astype(np.float32), name)


def chain_model(n_layers: int = 4, width: int = 16) -> onnx.ModelProto:
    """x[1,width] -> (MatMul w_i -> Relu) x n_layers -> y; intermediate tensors h0 .. h{n-2}, output y."""
    nodes, inits = [], []
    prev = "x"
    for i in range(n_layers):
        out = "y" if i == n_layers - 1 else f"h{i}"
        inits.append(_weight(f"w{i}", width, width, seed=i))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [out], name=f"relu{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def slow_chain_model(n_layers: int = 4, width: int = 16, busy_rows: int = 128, busy_width: int = 512,
                     busy_layers: int = 3) -> onnx.ModelProto:
    """:func:`chain_model` with the same ``y``, slower: a branch of ``busy_layers`` MatMuls of
    ``[busy_rows, busy_width] x [busy_width, busy_width]`` on a tiled ``x`` is reduced, multiplied by 0 and added
    to ``y`` (ONNX Runtime does not fold a product with 0 that depends on an input)."""
    base = chain_model(n_layers, width)
    graph = base.graph
    graph.node[-1].output[0] = "y_fast"
    reps = numpy_helper.from_array(np.array([busy_rows, busy_width // width], dtype=np.int64),
                                   "busy_reps")
    zero = numpy_helper.from_array(np.zeros((), np.float32), "busy_zero")
    graph.initializer.extend([reps, zero])
    nodes = [helper.make_node("Tile", ["x", "busy_reps"], ["busy_in"], name="busy_tile")]
    prev = "busy_in"
    for i in range(busy_layers):
        w = numpy_helper.from_array((np.random.default_rng(100 + i).standard_normal((busy_width, busy_width))
                                     / np.sqrt(busy_width)).astype(np.float32), f"busy_w{i}")
        graph.initializer.append(w)
        nodes.append(helper.make_node("MatMul", [prev, f"busy_w{i}"], [f"busy_m{i}"], name=f"busy_mm{i}"))
        nodes.append(helper.make_node("Relu", [f"busy_m{i}"], [f"busy_h{i}"], name=f"busy_relu{i}"))
        prev = f"busy_h{i}"
    nodes += [helper.make_node("ReduceSum", [prev], ["busy_sum"], name="busy_reduce", keepdims=1),
              helper.make_node("Mul", ["busy_sum", "busy_zero"], ["busy_nil"], name="busy_nil"),
              helper.make_node("Add", ["y_fast", "busy_nil"], ["y"], name="busy_add")]
    graph.node.extend(nodes)
    onnx.checker.check_model(base)
    return base


def diamond_model(width: int = 16) -> onnx.ModelProto:
    """x -> A(MatMul+Relu) -> a; a -> B(MatMul+Relu) -> b; a -> C(MatMul+Sigmoid) -> c; Add(b, c) -> d;
    d -> E(MatMul) -> y."""
    inits = [_weight(w, width, width, seed=i) for i, w in enumerate(["wa", "wb", "wc", "we"])]
    nodes = [
        helper.make_node("MatMul", ["x", "wa"], ["ma"], name="A_mm"),
        helper.make_node("Relu", ["ma"], ["a"], name="A_relu"),
        helper.make_node("MatMul", ["a", "wb"], ["mb"], name="B_mm"),
        helper.make_node("Relu", ["mb"], ["b"], name="B_relu"),
        helper.make_node("MatMul", ["a", "wc"], ["mc"], name="C_mm"),
        helper.make_node("Sigmoid", ["mc"], ["c"], name="C_sig"),
        helper.make_node("Add", ["b", "c"], ["d"], name="D_add"),
        helper.make_node("MatMul", ["d", "we"], ["y"], name="E_mm"),
    ]
    graph = helper.make_graph(nodes, "diamond",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def cut(model: onnx.ModelProto, inputs: Sequence[str], outputs: Sequence[str]) -> onnx.ModelProto:
    """Sub-model between boundary tensors (onnx.utils.Extractor, in memory), checked."""
    extractor = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(model))
    sub = extractor.extract_model(list(inputs), list(outputs))
    onnx.checker.check_model(sub)
    return sub


def task(model: onnx.ModelProto, name: str, stage: int, pu: str, inputs: List[str], outputs: List[str],
         deps: Sequence[str] = ()) -> Task:
    """A Task whose sub-model is cut from ``model`` at ``inputs`` / ``outputs``."""
    return Task(name=name, stage=stage, pu=pu, model=cut(model, inputs, outputs), inputs=list(inputs),
                outputs=list(outputs), deps=list(deps))


def frames(n: int, width: int = 16, seed: int = 0, name: str = "x") -> List[Dict[str, np.ndarray]]:
    """``n`` distinct random frames ``{name: float32[1, width]}``."""
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal((1, width)).astype(np.float32)} for _ in range(n)]


def identity_model(name: str = "x", shape: Sequence = ("n", 16), out: str = "y") -> onnx.ModelProto:
    """A one-node Identity model ``name -> out`` (dynamic first dim by default)."""
    graph = helper.make_graph([helper.make_node("Identity", [name], [out], name="id")], "identity",
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(shape))])
    return helper.make_model(graph, opset_imports=OPSET)


def reshape_model(name: str = "y", out: str = "z", rows: int = 4) -> onnx.ModelProto:
    """``out = Reshape(name, [rows, -1])``: fails at run time unless the element count is a multiple of
    rows."""
    shape = numpy_helper.from_array(np.array([rows, -1], dtype=np.int64), "shape")
    node = helper.make_node("Reshape", [name, "shape"], [out], name="reshape")
    graph = helper.make_graph([node], "reshape",
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, None])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [rows, None])], [shape])
    return helper.make_model(graph, opset_imports=OPSET)


def parapipe_threads() -> List[str]:
    """Names of live executor worker threads."""
    import threading
    return [t.name for t in threading.enumerate() if t.name.startswith("parapipe-") and t.is_alive()]
