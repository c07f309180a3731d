"""ONNX import: normalisation, shapes, bytes, FLOPs and signatures on tiny hand-built graphs."""
from __future__ import annotations

import logging

import networkx as nx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from parapipe.errors import InputError
from parapipe.graph import flops as flops_mod
from parapipe.graph.opgraph import import_onnx


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_chain_structure_shapes_and_bytes(chain_model):
    og = import_onnx(chain_model, "chain", "chain.onnx")
    assert og.name == "chain"
    assert og.topo_order == ["conv1", "relu1", "conv2", "relu2", "gap", "flatten", "fc"]
    assert og.inputs == ["x"] and og.outputs == ["fc_y"]
    assert og.constants == {"conv1_w", "conv1_b", "conv2_w", "conv2_b", "fc_w", "fc_b"}
    assert set(og.tensors) == {"x", "conv1_y", "relu1_y", "conv2_y", "relu2_y", "gap_y", "flatten_y", "fc_y"}
    assert og.tensors["conv1_y"].shape == (1, 4, 8, 8) and og.tensors["conv1_y"].dtype == "float32"
    assert og.tensors["conv1_y"].nbytes == 4 * 8 * 8 * 4
    assert og.tensors["flatten_y"].shape == (1, 4)
    edge = og.graph.edges["conv1", "relu1"]
    assert edge == {"nbytes": 1024, "tensors": ("conv1_y",)}
    conv1 = og.op("conv1")
    assert conv1.inputs == ("x", "conv1_w", "conv1_b") and conv1.outputs == ("conv1_y",)
    assert conv1.param_nbytes == (4 * 3 * 3 * 3 + 4) * 4
    assert conv1.in_nbytes == 3 * 8 * 8 * 4 and conv1.out_nbytes == 1024
    assert og.node("fc").op_type == "Gemm"


def test_flop_formulas(chain_model):
    og = import_onnx(chain_model)
    # Conv: 2 * out elements * Cin * k*k + bias per output element
    assert og.op("conv1").flops == 2 * (4 * 64) * (3 * 9) + 4 * 64
    assert og.op("conv2").flops == 2 * (4 * 64) * (4 * 9) + 4 * 64
    assert og.op("relu1").flops == 4 * 64
    assert og.op("gap").flops == 4 * 64  # one add per input element
    assert og.op("flatten").flops == 0
    assert og.op("fc").flops == 2 * 2 * 4 + 2  # 2*M*N*K + M*N
    assert og.flops == pytest.approx(sum(og.op(n).flops for n in og.topo_order))


def _single_op_model(node, inputs, output, inits=()):
    graph = helper.make_graph([node], "one", inputs, [output], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_depthwise_conv_transpose_matmul_and_pool_flops():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((8, 1, 3, 3), np.float32), "w")
    dw_node = helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=8, pads=[1] * 4)
    dw = _single_op_model(dw_node, [x], y, [w])
    assert import_onnx(dw).op("dw").flops == 2 * (8 * 100) * (1 * 9)

    wt = numpy_helper.from_array(np.ones((8, 4, 2, 2), np.float32), "wt")  # Cin=8, Cout=4, k=2, stride 2
    ct_node = helper.make_node("ConvTranspose", ["x", "wt"], ["y"], name="ct", strides=[2, 2])
    ct = _single_op_model(ct_node, [x], y, [wt])
    og = import_onnx(ct)
    assert og.tensors["y"].shape == (1, 4, 20, 20)
    assert og.op("ct").flops == 2 * (8 * 100) * (4 * 4)

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 5, 7])
    b = numpy_helper.from_array(np.ones((7, 11), np.float32), "b")
    mm = _single_op_model(helper.make_node("MatMul", ["a", "b"], ["y"], name="mm"), [a], y, [b])
    assert import_onnx(mm).op("mm").flops == 2 * (2 * 3 * 5 * 11) * 7

    mp_node = helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[3, 3], strides=[2, 2])
    pool = _single_op_model(mp_node, [x], y)
    og = import_onnx(pool)
    assert og.tensors["y"].shape == (1, 8, 4, 4)
    assert og.op("mp").flops == 8 * 16 * 9


def test_unknown_op_type_counts_zero_and_logs_once(caplog):
    # logged once (INFO); listed by inspect and pareto.json through has_flop_formula (tests/test_hostile_models.py)
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="example.custom")
    flops_mod._warned_unknown.discard("example.custom::FancyOp")
    with caplog.at_level(logging.INFO, logger="parapipe.graph.flops"):
        assert flops_mod.op_flops(node, [(1, 4)], [(1, 4)]) == 0.0
        assert flops_mod.op_flops(node, [(1, 4)], [(1, 4)]) == 0.0
    assert sum("FancyOp" in r.getMessage() for r in caplog.records) == 1
    assert not flops_mod.has_flop_formula(node)


def test_signature_is_stable_and_equal_for_equal_ops(chain_model):
    og1, og2 = import_onnx(chain_model), import_onnx(chain_model)
    assert og1.op("conv1").signature == og2.op("conv1").signature
    assert og1.op("conv1").signature != og1.op("conv2").signature  # different input shapes
    assert og1.op("relu1").signature == og1.op("relu2").signature  # same op, same shape
    assert og1.op("conv1").signature.startswith("Conv(float32[1,3,8,8];float32[4,3,3,3];float32[4])")
    assert "kernel_shape=[3, 3]" in og1.op("conv1").signature


def _ir3_constant_of_shape_model() -> onnx.ModelProto:
    """The zoo's light format in miniature: IR 3, weights listed as inputs, made by ConstantOfShape nodes,
    unnamed nodes, a Dropout with an unused mask, a Constant-fed Unsqueeze and a dynamic batch dim."""
    shape = numpy_helper.from_array(np.array([4, 3, 3, 3], np.int64), "w__SHAPE")
    nodes = [
        helper.make_node("ConstantOfShape", ["w__SHAPE"], ["w"],
                         value=numpy_helper.from_array(np.array([0.05], np.float32))),
        helper.make_node("Constant", [], ["b0"],
                         value=numpy_helper.from_array(np.arange(4, dtype=np.float32))),
        helper.make_node("Unsqueeze", ["b0"], ["b"], axes=[1, 2]),
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "b"], ["d"]),
        helper.make_node("Dropout", ["d"], ["e", "mask"], ratio=0.5),
        helper.make_node("Relu", ["e"], ["y"], name="dup"),
        helper.make_node("Identity", ["y"], ["z"], name="dup"),
    ]
    graph = helper.make_graph(
        nodes, "light", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5, 5]),
                         helper.make_tensor_value_info("w__SHAPE", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4, 5, 5])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    return model


def test_normalisation_folds_constants_names_nodes_and_keeps_outputs():
    original = _ir3_constant_of_shape_model()
    og = import_onnx(original, "light", "light.onnx")
    m = og.model
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version >= 4
    assert [n.op_type for n in m.graph.node] == ["Conv", "Add", "Dropout", "Relu", "Identity"]
    folded = ("ConstantOfShape", "Constant", "Unsqueeze")
    assert all(op.op_type not in folded for _, op in og.graph.nodes(data="op"))
    assert {t.name for t in m.graph.initializer} == {"w", "b"} == og.constants
    assert [i.name for i in m.graph.input] == ["x"] and og.inputs == ["x"]
    names = [n.name for n in m.graph.node]
    assert len(set(names)) == len(names) and all(names)
    assert names == ["Conv_0", "Add_1", "Dropout_2", "Relu_3", "Identity_4"]  # the duplicated 'dup' renamed
    assert list(m.graph.node[2].output) == ["e"]  # unused Dropout mask removed
    assert og.tensors["x"].shape == (1, 3, 5, 5) and og.tensors["z"].shape == (1, 4, 5, 5)  # dim_param N -> 1
    assert numpy_helper.to_array(og.initializer("b")).shape == (4, 1, 1)
    x = np.random.default_rng(0).standard_normal((1, 3, 5, 5)).astype(np.float32)
    reference = onnx.ModelProto()
    reference.CopyFrom(original)
    reference.graph.node[-1].name = "dup2"  # ORT refuses duplicate node names (the reason we rename them)
    (want,) = run(reference, {"x": x})
    (got,) = run(m, {"x": x})
    np.testing.assert_array_equal(got, want)
    assert np.abs(want).max() > 0.1  # a real signal, not all zeros


def test_normalisation_does_not_touch_the_input_model(chain_model):
    before = chain_model.SerializeToString()
    import_onnx(chain_model)
    assert chain_model.SerializeToString() == before


def test_static_shape_subgraph_is_folded():
    """PyTorch-style Shape -> Gather -> Unsqueeze -> Concat -> Reshape becomes a constant Reshape target."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"),
             numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "flat", [x], [y], inits)
    og = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert og.topo_order == ["reshape"]
    assert og.tensors["y"].shape == (2, 12)
    np.testing.assert_array_equal(numpy_helper.to_array(og.initializer("target")), [2, -1])


def test_diamond_edges_and_topological_order(diamond_model):
    og = import_onnx(diamond_model)
    assert set(og.graph.successors("relu_a")) == {"conv_b", "conv_c"}
    assert set(og.graph.predecessors("add")) == {"relu_b", "conv_c"}
    assert nx.is_directed_acyclic_graph(og.graph)
    pos = {n: i for i, n in enumerate(og.topo_order)}
    assert all(pos[u] < pos[v] for u, v in og.graph.edges)
    assert og.topo_order == [n.name for n in og.model.graph.node]  # model order is already topological


def test_unsorted_model_is_sorted(chain_model):
    nodes = list(chain_model.graph.node)
    del chain_model.graph.node[:]
    chain_model.graph.node.extend(reversed(nodes))
    og = import_onnx(chain_model)
    assert og.topo_order == ["conv1", "relu1", "conv2", "relu2", "gap", "flatten", "fc"]
    onnx.checker.check_model(og.model)


def test_dangling_tensor_is_an_input_error_naming_the_source(chain_model):
    chain_model.graph.node[2].input[0] = "nowhere"
    with pytest.raises(InputError, match=r"^broken\.onnx: node conv2 \(Conv\): reads tensor 'nowhere'"):
        import_onnx(chain_model, source="broken.onnx")


def test_cycle_is_an_input_error(chain_model):
    chain_model.graph.node[0].input[0] = "relu2_y"  # conv1 reads relu2's output: a cycle
    with pytest.raises(InputError, match=r"^cyc\.onnx: node .*cycle"):
        import_onnx(chain_model, source="cyc.onnx")


def _loop_body(width: int):
    """The body of a Loop that adds ``one`` to its outer ``x`` each trip and scans the (1, ``width``) sum: ONNX
    shape inference cannot give the scan output a static first dim."""
    return helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["s"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id")], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, width])])


def test_shapes_onnx_cannot_infer_are_measured_with_onnxruntime(caplog):
    """A Loop's scan output has no static first dim for ONNX shape inference; ORT measures (3, 1, 4)."""
    body = _loop_body(4)
    nodes = [helper.make_node("Relu", ["x0"], ["x"], name="relu"),
             helper.make_node("Loop", ["trips", ""], ["scan"], name="loop", body=body),
             helper.make_node("Flatten", ["scan"], ["y"], name="flat")]
    inits = [numpy_helper.from_array(np.array(3, np.int64), "trips"),
             numpy_helper.from_array(np.ones((1, 4), np.float32), "one")]
    graph = helper.make_graph(nodes, "loop", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with caplog.at_level(logging.INFO, logger="parapipe.graph.shapes"):
        og = import_onnx(model)
    assert any("measuring with ONNX Runtime" in r.getMessage() for r in caplog.records)
    assert og.tensors["scan"].shape == (3, 1, 4) and og.tensors["y"].shape == (3, 4)
    assert og.op("loop").inputs == ("trips", "one", "x")  # the body's outer-scope reads count
    assert og.graph.has_edge("relu", "loop")
    assert og.op("loop").param_nbytes == 8 + 16


def _large_filled_weights_model() -> onnx.ModelProto:
    """ConstantOfShape weights larger than the skeleton keeps: ``w`` read by a Conv, ``v`` reshaped by a target
    that only the static-shape fold (round 1) makes constant, so ``v`` is folded in round 2."""
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="fill_w",
                         value=numpy_helper.from_array(np.array([0.02], np.float32))),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("ConstantOfShape", ["v_shape"], ["v"], name="fill_v",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Shape", ["c"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i1"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["v", "target"], ["v2"], name="reshape_v"),
        helper.make_node("ReduceSum", ["v2"], ["vs"], name="sum_v", keepdims=0),
        helper.make_node("Add", ["c", "vs"], ["y"], name="add"),
    ]
    inits = [numpy_helper.from_array(np.array([64, 8, 3, 3], np.int64), "w_shape"),
             numpy_helper.from_array(np.array([64, 8, 9], np.int64), "v_shape"),
             numpy_helper.from_array(np.array(1, np.int64), "i1"),
             numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    graph = helper.make_graph(nodes, "filled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_large_filled_weights_are_written_when_the_model_is_first_read():
    """Costing reads the structure only: the large folded ConstantOfShape weights get their bytes on the first
    read of ``OpGraph.model``, whose weights and nodes are then byte for byte those normalising without deferring
    gives."""
    from parapipe.graph.normalize import normalise

    original = _large_filled_weights_model()
    og = import_onnx(original, "filled", "filled.onnx")
    hollow = {t.name: len(t.raw_data) for t in og.structure.graph.initializer}
    assert hollow["w"] == 0 and "w" in og.constants and og.op("conv").param_nbytes == 64 * 8 * 9 * 4
    assert "v" not in hollow and og.tensors["y"].shape == (1, 64, 6, 6)  # v folded in round 2, from its fill
    m = og.model
    assert m is og.structure and len(og.initializer("w").raw_data) == 64 * 8 * 9 * 4
    plain = normalise(original, "filled.onnx")  # import_onnx then adds the inferred value_info only
    assert [t.SerializeToString() for t in m.graph.initializer] == [t.SerializeToString()
                                                                    for t in plain.graph.initializer]
    assert [n.SerializeToString() for n in m.graph.node] == [n.SerializeToString() for n in plain.graph.node]
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(run(m, {"x": x})[0], run(original, {"x": x})[0], rtol=1e-5)


def test_large_filled_weights_are_written_before_onnxruntime_measures_shapes():
    """A model whose shapes ONNX Runtime must measure runs with its filled weights written (an empty
    initializer would not load)."""
    body = _loop_body(8192)
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="fill",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["x0", "w"], ["x"], name="add_w"),
             helper.make_node("Loop", ["trips", ""], ["scan"], name="loop", body=body),
             helper.make_node("Flatten", ["scan"], ["y"], name="flat")]
    inits = [numpy_helper.from_array(np.array(3, np.int64), "trips"),
             numpy_helper.from_array(np.array([1, 8192], np.int64), "w_shape"),
             numpy_helper.from_array(np.ones((1, 8192), np.float32), "one")]
    graph = helper.make_graph(nodes, "loop", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 8192])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    og = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert og.tensors["y"].shape == (3, 8192)
    filled = {t.name: t for t in og.structure.graph.initializer}["w"]
    assert len(filled.raw_data) == 8192 * 4  # written for the run, before any read of og.model
