"""Small ONNX models rebuilt from real-world faults: each reproduces one kind of input that exporters,
quantizers and public packages produce and that splitting once got wrong. All run in ONNX Runtime."""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from parapipe.graph.cleanup import runnable_reference
from parapipe.graph.coarsen import coarsen
from ppexec.executor import run_pipeline
from ppexec.plan import PUBinding
from ppexec.reference import max_abs_diff, reference_outputs
from parapipe.execution import build_plan
from parapipe.mapping import Stage

F = TensorProto.FLOAT
I64 = TensorProto.INT64
BINDINGS = {"cpu0": PUBinding(cpus=None), "cpu1": PUBinding(cpus=None)}


def _model(nodes, inputs, outputs, inits=(), opset=17, functions=(), extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                              functions=list(functions), producer_name="tests")
    model.ir_version = 10
    return model


def _w(name: str, shape: Sequence[int], seed: int, dtype=np.float32) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(dtype), name)


def unpadded_conv_net(dims=("N", 3, "H", "W")) -> onnx.ModelProto:
    """x[N,3,H,W] -> Conv 7x7 (8 channels, no padding) -> Relu -> y: H = W = 1 gives [1, 8, -5, -5]."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[7, 7]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, list(dims))],
                  [helper.make_tensor_value_info("y", F, ["N", 8, "h", "w"])],
                  [_w("w", (8, 3, 7, 7), 0), _w("b", (8,), 1)])


def bert_front_end(vocab: int = 30, types: int = 2, seq: int = 8, hidden: int = 16,
                   offset_ids: bool = False) -> onnx.ModelProto:
    """input_ids / token_type_ids int64[batch, seq] -> two embeddings (vocab and 2 rows) -> add -> MatMul ->
    Tanh. ``offset_ids`` adds 1 to input_ids before the Gather (an Add hides the row count from the graph)."""
    ids = "input_ids"
    nodes = []
    if offset_ids:
        nodes.append(helper.make_node("Add", ["input_ids", "one"], ["ids1"], name="offset"))
        ids = "ids1"
    nodes += [helper.make_node("Gather", ["word_emb", ids], ["we"], name="word_gather"),
              helper.make_node("Gather", ["type_emb", "token_type_ids"], ["te"], name="type_gather"),
              helper.make_node("Add", ["we", "te"], ["e"], name="add"),
              helper.make_node("MatMul", ["e", "proj"], ["p"], name="proj_mm"),
              helper.make_node("Tanh", ["p"], ["y"], name="tanh")]
    inits = [_w("word_emb", (vocab, hidden), 0), _w("type_emb", (types, hidden), 1), _w("proj", (hidden, hidden), 2),
             numpy_helper.from_array(np.array(1, np.int64), "one")]
    inputs = [helper.make_tensor_value_info(n, I64, ["batch", seq]) for n in ("input_ids", "token_type_ids")]
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", F, ["batch", seq, hidden])], inits)


def qdq_conv_net(layers: int = 4, channels: int = 8) -> onnx.ModelProto:
    """A QDQ-quantized conv net as quantizers write it: x -> Q -> DQ -> (Conv(DQ(int8 w), int32 bias) -> Relu
    -> Q -> DQ) x ``layers`` -> y. ONNX Runtime fuses each DQ -> Conv -> Q into a QLinearConv."""
    rng = np.random.default_rng(0)
    nodes, inits = [], [numpy_helper.from_array(np.array(0.05, np.float32), "s_act"),
                        numpy_helper.from_array(np.array(0, np.uint8), "z_act")]
    nodes += [helper.make_node("QuantizeLinear", ["x", "s_act", "z_act"], ["xq"], name="q_in"),
              helper.make_node("DequantizeLinear", ["xq", "s_act", "z_act"], ["a0"], name="dq_in")]
    prev, cin = "a0", 3
    for i in range(layers):
        wq = rng.integers(-127, 128, size=(channels, cin, 3, 3)).astype(np.int8)
        inits += [numpy_helper.from_array(wq, f"w{i}_q"),
                  numpy_helper.from_array(np.full(channels, 0.01, np.float32), f"w{i}_s"),
                  numpy_helper.from_array(np.zeros(channels, np.int8), f"w{i}_z")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}_q", f"w{i}_s", f"w{i}_z"], [f"w{i}"],
                                   name=f"dq_w{i}", axis=0),
                  helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("QuantizeLinear", [f"r{i}", "s_act", "z_act"], [f"q{i}"], name=f"q{i}"),
                  helper.make_node("DequantizeLinear", [f"q{i}", "s_act", "z_act"],
                                   ["y" if i == layers - 1 else f"a{i + 1}"], name=f"dq{i}")]
        prev, cin = f"a{i + 1}", channels
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, 3, 16, 16])],
                  [helper.make_tensor_value_info("y", F, [1, channels, 16, 16])], inits, opset=21)


def int4_matmul(k: int = 64, n: int = 32, block: int = 32) -> onnx.ModelProto:
    """x[1, k] @ DQ(int4 w[k, n], block-quantized along k, block size ``block``) -> y[1, n]."""
    rng = np.random.default_rng(0)
    w = rng.integers(-8, 8, size=(k, n)).astype(np.int8)
    wt = helper.make_tensor("w_q", TensorProto.INT4, [k, n], w.flatten().tolist())
    scale = numpy_helper.from_array(rng.uniform(0.01, 0.1, size=(k // block, n)).astype(np.float32), "w_s")
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], name="dq_w", axis=0, block_size=block),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, k])],
                  [helper.make_tensor_value_info("y", F, [1, n])], [wt, scale], opset=21)


def local_function_model(calls: int = 4, width: int = 8) -> onnx.ModelProto:
    """x[2, width] -> ``calls`` x MatMulTanh(x, w_i), a model-local function (MatMul then Tanh) as the dynamo
    exporter and onnxscript emit."""
    body = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Tanh", ["m"], ["t"])]
    fn = helper.make_function("custom.fn", "MatMulTanh", ["a", "b"], ["t"], body,
                              [helper.make_opsetid("", 17)])
    nodes, prev = [], "x"
    for i in range(calls):
        out = "y" if i == calls - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMulTanh", [prev, f"w{i}"], [out], name=f"call{i}", domain="custom.fn"))
        prev = out
    return _model(nodes, [helper.make_tensor_value_info("x", F, [2, width])],
                  [helper.make_tensor_value_info("y", F, [2, width])],
                  [_w(f"w{i}", (width, width), i) for i in range(calls)], functions=[fn],
                  extra_opsets=[helper.make_opsetid("custom.fn", 1)])


def dead_node_model() -> onnx.ModelProto:
    """x -> MatMul -> Relu -> y, plus a Sigmoid -> Neg branch on x that nobody reads."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Relu", ["m"], ["y"], name="relu"),
             helper.make_node("Sigmoid", ["x"], ["dead1"], name="dead_sigmoid"),
             helper.make_node("Neg", ["dead1"], ["dead2"], name="dead_neg")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, 8])],
                  [helper.make_tensor_value_info("y", F, [1, 8])], [_w("w", (8, 8), 0)])


def nonzero_model() -> onnx.ModelProto:
    """x[1, 16] -> NonZero -> nz int64[2, n] -> Transpose -> [n, 2] -> Cast -> y: n depends on the values."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
             helper.make_node("Transpose", ["nz"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("Cast", ["t"], ["y"], name="cast", to=F)]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, 16])],
                  [helper.make_tensor_value_info("y", F, None)])


def sequence_model() -> onnx.ModelProto:
    """x[4, 6] -> MatMul -> SplitToSequence (4 rows) -> ConcatFromSequence (axis 1, new axis) -> Relu -> y."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("SplitToSequence", ["m"], ["seq"], name="split", axis=0, keepdims=0),
             helper.make_node("ConcatFromSequence", ["seq"], ["cat"], name="concat", axis=1, new_axis=1),
             helper.make_node("Relu", ["cat"], ["y"], name="relu")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [4, 6])],
                  [helper.make_tensor_value_info("y", F, [6, 4])], [_w("w", (6, 6), 0)])


def constant_output_model() -> onnx.ModelProto:
    """x -> MatMul -> y, and the initializer ``anchors`` listed as a second graph output."""
    anchors = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "anchors")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, 8])],
                  [helper.make_tensor_value_info("y", F, [1, 8]),
                   helper.make_tensor_value_info("anchors", F, [3, 2])], [_w("w", (8, 8), 0), anchors])


def duplicate_names_model() -> onnx.ModelProto:
    """x -> MatMul -> Relu -> MatMul -> Relu -> y with both MatMuls named "mm" and both Relus "act"."""
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"], name="mm"),
             helper.make_node("Relu", ["m0"], ["h"], name="act"),
             helper.make_node("MatMul", ["h", "w1"], ["m1"], name="mm"),
             helper.make_node("Relu", ["m1"], ["y"], name="act")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, 8])],
                  [helper.make_tensor_value_info("y", F, [1, 8])], [_w("w0", (8, 8), 0), _w("w1", (8, 8), 1)])


def pipeline_vs_original(og, original: onnx.ModelProto, frames: List[Dict[str, np.ndarray]], bg=None) -> float:
    """Run ``og`` with every block its own stage (alternating two PUs) and return the largest difference of its
    outputs to the ORIGINAL model's on ``frames``."""
    bg = bg or coarsen(og)
    stages = [Stage(pus=[pu], blocks=[b.name], time_s=0.0, assignment={b.name: pu}, order=[b.name])
              for b, pu in zip(bg.blocks, ["cpu0", "cpu1"] * len(bg.blocks))]
    plan = build_plan(og, bg, stages, BINDINGS)
    outs, _ = run_pipeline(plan, frames, warmup=0)
    ref = reference_outputs(runnable_reference(original), frames)
    names = list(plan.model_outputs)
    return max_abs_diff([{k: o[k] for k in names} for o in outs], [{k: r[k] for k in names} for r in ref])


def shape_vector_model() -> onnx.ModelProto:
    """x[1, 16] -> NonZero -> nz[2, n]; Shape(nz) -> ReduceProd -> p = [2n]; Reshape(nz, p) -> Cast -> y[2n]:
    an int64 shape vector whose value only a real run gives (zeros make the Reshape fail)."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
             helper.make_node("Shape", ["nz"], ["s"], name="shape"),
             helper.make_node("ReduceProd", ["s"], ["p"], name="prod", keepdims=1),
             helper.make_node("Reshape", ["nz", "p"], ["flat"], name="reshape"),
             helper.make_node("Cast", ["flat"], ["y"], name="cast", to=F)]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, 16])],
                  [helper.make_tensor_value_info("y", F, None)])


def stale_output_shape_model() -> onnx.ModelProto:
    """x[1, 4] -> Reshape [2, 2, 1] -> Relu -> y, with y declared [1, 'seqlen'] (rank 2), as exporters leave it."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, 4])],
                  [helper.make_tensor_value_info("y", F, [1, "seqlen"])],
                  [numpy_helper.from_array(np.array([2, 2, 1], np.int64), "shape")])


def sample_rate_if_model(state: int = 8) -> onnx.ModelProto:
    """Silero VAD's structure: x[1, N] audio, state[2, 1, S], sr int64 scalar; ``If sr == 16000`` runs a 512-sample
    branch (MatMul with a [512, S] weight), else a 256-sample one ([256, S]); both read x, the weights and
    ``h = Tanh(state)`` from the outer scope. y = Sigmoid(branch output), stateN = h +/- it. Only sr = 16000 runs at
    N = 512: zeros for sr take the 256-sample branch, and static shapes make the branch not taken fail type
    checks."""
    def branch(name: str, weight: str, combine: str) -> onnx.GraphProto:
        nodes = [helper.make_node("MatMul", ["x", weight], [f"{name}_y"], name=f"{name}_mm"),
                 helper.make_node(combine, ["h", f"{name}_y"], [f"{name}_s"], name=f"{name}_state")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", F, [None, state]),
                                                   helper.make_tensor_value_info(f"{name}_s", F, [2, None, state])])

    nodes = [helper.make_node("Constant", [], ["rate16k"], name="rate",
                              value=numpy_helper.from_array(np.array(16000, np.int64))),
             helper.make_node("Equal", ["sr", "rate16k"], ["is16k"], name="is16k"),
             helper.make_node("Tanh", ["state"], ["h"], name="tanh"),
             helper.make_node("If", ["is16k"], ["yb", "sb"], name="by_rate",
                              then_branch=branch("r16k", "w16k", "Add"), else_branch=branch("r8k", "w8k", "Sub")),
             helper.make_node("Sigmoid", ["yb"], ["y"], name="sigmoid"),
             helper.make_node("Identity", ["sb"], ["stateN"], name="state_out")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, "N"]),
                          helper.make_tensor_value_info("state", F, [2, 1, state]),
                          helper.make_tensor_value_info("sr", I64, [])],
                  [helper.make_tensor_value_info("y", F, [None, state]),
                   helper.make_tensor_value_info("stateN", F, [2, None, state])],
                  [_w("w16k", (512, state), 0), _w("w8k", (256, state), 1)])


def constant_sequence_model() -> onnx.ModelProto:
    """Two weights w0[2, 4], w1[2, 4] -> SequenceConstruct -> seq (every input a constant); SequenceInsert(seq,
    Relu(x[2, 4])) -> ConcatFromSequence (axis 0) -> Tanh -> y[6, 4]; SequenceAt(seq, 1) + x -> z[2, 4]. Folding
    SequenceConstruct as a tensor (a stacked [2, 2, 4] array) made SequenceInsert read a tensor: an invalid
    graph."""
    nodes = [helper.make_node("SequenceConstruct", ["w0", "w1"], ["seq"], name="construct"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("SequenceInsert", ["seq", "r"], ["seq2"], name="insert"),
             helper.make_node("ConcatFromSequence", ["seq2"], ["cat"], name="concat", axis=0),
             helper.make_node("Tanh", ["cat"], ["y"], name="tanh"),
             helper.make_node("SequenceAt", ["seq", "one"], ["picked"], name="at"),
             helper.make_node("Add", ["x", "picked"], ["z"], name="add")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [2, 4])],
                  [helper.make_tensor_value_info("y", F, [6, 4]), helper.make_tensor_value_info("z", F, [2, 4])],
                  [_w("w0", (2, 4), 0), _w("w1", (2, 4), 1), numpy_helper.from_array(np.array(1, np.int64), "one")])
