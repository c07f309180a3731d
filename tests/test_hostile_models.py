"""Model import and splitting: each kind of real-world fault, rebuilt small (tests/hostile_models.py),
checked against its right value -- outputs equal to the ORIGINAL model's, the exact error line, the FLOP count."""
from __future__ import annotations

import importlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hostile_models as hm
from parapipe.errors import InputError
from parapipe.graph.coarsen import coarsen
from parapipe.graph.feeds import feed_error, input_specs, integer_input_ranges
from parapipe.graph.inputs import parse_input_shapes
from parapipe.graph.opgraph import import_onnx
from parapipe.graph.support import check_declared
from ppexec.frames import draw_frames
from ppexec.reference import reference_outputs

coarsen_mod = importlib.import_module("parapipe.graph.coarsen")  # the module (the package exports the function)


def singleton_blocks(og, keep_sequences=True):
    """Every operator its own block (no fusion), so tests can cut anywhere the rules allow."""
    q = coarsen_mod._Quotient(og)
    if keep_sequences:
        coarsen_mod._keep_sequences_whole(og, q)
    return coarsen_mod._build(og, q)


# ------------------------------------------------------------------------------------ 1. dynamic dims
def test_symbolic_non_batch_dim_is_refused_naming_input_and_dim():
    with pytest.raises(InputError) as err:
        import_onnx(hm.unpadded_conv_net(), source="net.onnx")
    assert str(err.value) == ("net.onnx: input 'x' dim 2 'H': is symbolic ([N, 3, H, W]) and parapipe needs a "
                              "static size; give it with --input-shape x:1x3xNxN (N = the size to plan for)")


def test_given_shape_gives_positive_dims_and_too_small_one_is_refused():
    og = import_onnx(hm.unpadded_conv_net(), source="net.onnx", input_shapes={"x": (1, 3, 32, 32)})
    assert og.tensors["y"].shape == (1, 8, 26, 26) and og.input_notes == []
    assert all(d > 0 for t in og.tensors.values() for d in t.shape)
    with pytest.raises(InputError) as err:
        import_onnx(hm.unpadded_conv_net(), source="net.onnx", input_shapes={"x": (1, 3, 4, 4)})
    assert str(err.value).startswith("net.onnx: tensor 'c' (output of Conv 'conv'): would have shape "
                                     "[1, 8, -2, -2], a dim <= 0: the input shapes (x: 1x3x4x4) are too small")


def test_batch_dim_defaults_to_one_and_says_so():
    og = import_onnx(hm.unpadded_conv_net(("N", 3, 32, 32)))
    assert og.input_shapes == {"x": [1, 3, 32, 32]}
    assert og.input_notes == ["input x: batch dim 'N' set to 1 (give --input-shape x:... to change it)"]


@pytest.mark.parametrize("given, words", [
    ({"x": (1, 3, 32)}, "has rank 3, but the model's input has rank 4"),
    ({"x": (1, 4, 32, 32)}, "dim 1 is 4, but the model fixes it at 3"),
    ({"images": (1, 3, 32, 32)}, "has no data input of that name; its inputs are: x"),
])
def test_bad_given_shapes(given, words):
    with pytest.raises(InputError, match=words):
        import_onnx(hm.unpadded_conv_net(), source="net.onnx", input_shapes=given)


def test_input_shape_option_syntax():
    assert parse_input_shapes(["x:1x3x640x640", "a:b:1x2"]) == {"x": (1, 3, 640, 640), "a:b": (1, 2)}
    for bad in ("x=1x3", "x:1x0x2", "x:1x3,", "x:"):
        with pytest.raises(InputError, match="--input-shape"):
            parse_input_shapes([bad])


def test_shared_dim_names_take_the_given_size():
    og = import_onnx(hm.bert_front_end(seq="seq"), input_shapes={"input_ids": (1, 5)})
    assert og.input_shapes == {"input_ids": [1, 5], "token_type_ids": [1, 5]}


# ------------------------------------------------------------------------------------ 2. valid inputs
def test_integer_ranges_come_from_the_embedding_rows():
    og = import_onnx(hm.bert_front_end(vocab=30, types=2))
    assert integer_input_ranges(og) == {"input_ids": (0, 29), "token_type_ids": (0, 1)}
    frames = draw_frames(input_specs(og), 20, seed=3)
    tt = np.concatenate([f["token_type_ids"].ravel() for f in frames])
    ids = np.concatenate([f["input_ids"].ravel() for f in frames])
    assert set(tt) == {0, 1} and ids.min() >= 0 and ids.max() <= 29 and len(set(ids)) > 10
    assert hm.pipeline_vs_original(og, hm.bert_front_end(), frames) == 0.0


def test_an_unbounded_integer_input_gets_zero_and_a_failing_feed_names_it():
    og = import_onnx(hm.bert_front_end(offset_ids=True))
    assert integer_input_ranges(og)["input_ids"] == (0, 0)  # Add hides the rows: 0 is safe
    frame = draw_frames(input_specs(og), 1)[0]
    frame["input_ids"][:] = 29  # 29 + 1 = 30 rows: out of range
    with pytest.raises(Exception) as exc:
        reference_outputs(hm.bert_front_end(offset_ids=True), [frame])
    error = feed_error(og, exc.value, "--feeds f.npz")
    assert str(error).startswith("--feeds f.npz: input 'input_ids': feed error: the model fails on this input")


# ------------------------------------------------------------------------------------ 3. quantized models
def test_qdq_net_split_in_stages_equals_the_original():
    original = hm.qdq_conv_net()
    og = import_onnx(original)
    folded = [n for n in original.graph.node if n.op_type == "DequantizeLinear" and n.input[0].endswith("_q")]
    assert sum(1 for n in og.model.graph.node if n.op_type == "DequantizeLinear") == 4 + 4 + 1
    assert len(folded) == 4 and all(og.initializer(n.input[0]).data_type == TensorProto.INT8 for n in folded)
    bg = coarsen(og)
    for block in bg.blocks:  # each weight's DQ sits in its Conv's block; the cuts carry int8 tensors
        if "Conv" in block.op_types:
            assert block.op_types[:2] == ("DequantizeLinear", "DequantizeLinear")
    for u, v, tensors in bg.graph.edges(data="tensors"):
        assert all(og.tensors[t].dtype == "uint8" for t in tensors), (u, v, tensors)
    rng = np.random.default_rng(0)
    frames = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    assert hm.pipeline_vs_original(og, original, frames, bg) == 0.0
    unsplit = reference_outputs(og.model, frames)
    assert max(np.abs(a["y"] - b["y"]).max() for a, b in zip(unsplit, reference_outputs(original, frames))) == 0.0


def test_int4_block_quantized_weights_keep_their_size():
    original = hm.int4_matmul(k=64, n=32, block=32)
    og = import_onnx(original)
    w = og.initializer("w_q")
    assert w.data_type == TensorProto.INT4 and og.op("mm").param_nbytes + og.op("dq_w").param_nbytes < 64 * 32 * 4
    assert og.op("dq_w").param_nbytes == 64 * 32 // 2 + 2 * 32 * 4  # int4 packed + fp32 scales
    frames = [{"x": np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)}]
    assert hm.pipeline_vs_original(og, original, frames) == 0.0


# ------------------------------------------------------------------------------------ 4.-8.
def test_local_functions_are_inlined_and_costed():
    og = import_onnx(hm.local_function_model(calls=4, width=8))
    assert [og.op(n).op_type for n in og.topo_order] == ["MatMul", "Tanh"] * 4
    assert og.flops == 4 * (2 * 2 * 8 * 8 + 4 * 2 * 8)
    assert len(coarsen(og).blocks) == 4


def test_dead_nodes_are_dropped():
    og = import_onnx(hm.dead_node_model())
    assert og.topo_order == ["mm", "relu"]
    from parapipe.measure.submodels import measure_local

    times = measure_local(coarsen(og), repeats=1, warmup=0).block_time_s  # every block has an output to request
    assert {b for b, _ in times} == {"mm"} and all(t > 0 for t in times.values())


def test_data_dependent_dims_stay_symbolic_across_a_cut():
    original = hm.nonzero_model()
    og = import_onnx(original)
    assert og.tensors["nz"].data_dependent_axes == (1,) and og.data_dependent_ops == ["nonzero", "transpose", "cast"]
    bg = singleton_blocks(og)
    assert [b.ops for b in bg.blocks] == [("nonzero",), ("transpose",), ("cast",)]
    x = np.zeros((1, 16), np.float32)
    x[0, [1, 5, 7, 9]] = 3.0  # 4 non-zeros; the sample run saw 16
    assert hm.pipeline_vs_original(og, original, [{"x": x}], bg) == 0.0


def test_sequence_values_are_never_cut():
    original = hm.sequence_model()
    og = import_onnx(original)
    assert og.tensors["seq"].sequence
    for bg in (singleton_blocks(og), coarsen(og)):
        assert all(not og.tensors[t].sequence for _, _, ts in bg.graph.edges(data="tensors") for t in ts)
    bg = singleton_blocks(og)
    assert [b.ops for b in bg.blocks] == [("mm",), ("split", "concat"), ("relu",)]
    x = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    assert hm.pipeline_vs_original(og, original, [{"x": x}], bg) == 0.0
    unsafe = singleton_blocks(og, keep_sequences=False)  # what a cut on the sequence would look like
    assert any(og.tensors[t].sequence for _, _, ts in unsafe.graph.edges(data="tensors") for t in ts)


def test_an_initializer_listed_as_output_is_delivered():
    original = hm.constant_output_model()
    og = import_onnx(original)
    assert og.outputs == ["y", "anchors"] and og.tensors["anchors"].shape == (3, 2)
    x = np.ones((1, 8), np.float32)
    assert hm.pipeline_vs_original(og, original, [{"x": x}]) == 0.0


def test_duplicate_node_names_run_against_the_renamed_original():
    original = hm.duplicate_names_model()
    og = import_onnx(original)
    assert len(set(og.topo_order)) == 4
    assert hm.pipeline_vs_original(og, original, [{"x": np.ones((1, 8), np.float32)}]) == 0.0


# ------------------------------------------------------------------------------------ 9. FLOPs
def _one_op(op, inputs, inits=(), domain="", opset=23, **attrs):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    node = helper.make_node(op, [n for n, _ in inputs] + [t.name for t in inits], ["y"], name="op",
                            domain=domain, **attrs)
    extra = [helper.make_opsetid(domain, 1)] if domain else []
    return hm._model([node], ins, [onnx.ValueInfoProto(name="y")], inits, opset=opset, extra_opsets=extra)


def _w(name, shape):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 0.1, name)


@pytest.mark.parametrize("model, flops", [
    # scores 1*2*3*5 = 30: 2*30*(4 + 6) MACs + 30*(8 softmax + 1 scale)
    (lambda: _one_op("Attention", [("q", [1, 2, 3, 4]), ("k", [1, 2, 5, 4]), ("v", [1, 2, 5, 6])]), 870),
    (lambda: _one_op("LayerNormalization", [("x", [2, 4, 8])], [_w("g", [8]), _w("b", [8])], opset=17), 7 * 64),
    (lambda: _one_op("GroupNormalization", [("x", [1, 4, 2, 2])], [_w("s", [2]), _w("b", [2])], opset=18,
                     num_groups=2), 7 * 16),
    (lambda: _one_op("RMSNormalization", [("x", [2, 8])], [_w("s", [8])]), 4 * 16),
    # seq 5 x batch 1 x hidden 4 x (2*4*(3 + 4) MACs + 30 cell + 8 bias)
    (lambda: _one_op("LSTM", [("x", [5, 1, 3])], [_w("W", [1, 16, 3]), _w("R", [1, 16, 4]), _w("B", [1, 32])],
                     opset=22, hidden_size=4), 5 * 4 * (56 + 30 + 8)),
    (lambda: _one_op("GRU", [("x", [5, 1, 3])], [_w("W", [1, 12, 3]), _w("R", [1, 12, 4])], opset=22,
                     hidden_size=4), 5 * 4 * (42 + 21)),
    (lambda: _one_op("RNN", [("x", [5, 1, 3])], [_w("W", [1, 4, 3]), _w("R", [1, 4, 4])], opset=22,
                     hidden_size=4), 5 * 4 * (14 + 4)),
    (lambda: _one_op("Einsum", [("a", [2, 3, 4]), ("b", [2, 4, 5])], opset=17, equation="bij,bjk->bik"), 240),
    (lambda: _one_op("FusedMatMul", [("a", [3, 4]), ("b", [4, 5])], domain="com.microsoft", opset=17), 120),
    (lambda: _one_op("BiasGelu", [("x", [2, 8])], [_w("bias", [8])], domain="com.microsoft", opset=17), 9 * 16),
    (lambda: _one_op("SkipLayerNormalization", [("x", [1, 3, 8]), ("skip", [1, 3, 8])],
                     [_w("g", [8]), _w("b", [8])], domain="com.microsoft", opset=17), 8 * 24),
])
def test_flops_of_todays_operators(model, flops):
    og = import_onnx(model())
    assert og.op("op").flops == flops and og.op("op").flop_formula and og.ops_without_flop_formula == {}


def test_ops_without_a_formula_are_listed():
    og = import_onnx(_one_op("DFT", [("x", [1, 8, 1])], opset=20))
    assert og.ops_without_flop_formula == {"DFT": 1}


# ------------------------------------------------------------------------------------ 10. nothing can run it
def _custom_model():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("MyOp", ["r"], ["y"], name="mine", domain="com.example")]
    return hm._model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                     extra_opsets=[helper.make_opsetid("com.example", 1)])


def test_custom_domain_operator_needs_a_pu_that_declares_it():
    og = import_onnx(_custom_model(), source="c.onnx")
    assert og.op("mine").op_type == "com.example.MyOp" and og.ops_without_flop_formula == {"com.example.MyOp": 1}
    with pytest.raises(InputError) as err:
        check_declared(og.model, "c.onnx", "amlogic_a311d", [None, frozenset({"Conv"})])
    assert str(err.value) == ("c.onnx: operator MyOp (domain com.example, node 'mine'): is a custom-domain operator "
                              "that no PU of amlogic_a311d declares, so nothing can run it; add 'com.example.MyOp' "
                              "to the supported_ops of a PU that runs it, or export the model without it")
    check_declared(og.model, "c.onnx", "npu_soc", [None, frozenset({"Relu", "com.example.MyOp"})])


def test_opset_beyond_the_runtime_is_refused():
    model = hm._model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], opset=40)
    with pytest.raises(InputError) as err:
        import_onnx(model, source="new.onnx")
    assert str(err.value).startswith("new.onnx: operator Relu (domain ai.onnx, node 'r'): the model imports opset "
                                     "40 of domain ai.onnx, which onnxruntime")


def test_missing_graph_output_shape_is_inferred(tmp_path):
    from parapipe.graph.zoo import load_model

    model = hm._model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "noshape.onnx"
    onnx.save(model, str(path))
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(str(path))
    lm = load_model(str(path))
    assert [d.dim_value for d in lm.model.graph.output[0].type.tensor_type.shape.dim] == [1, 2]


def test_blocks_are_measured_with_the_real_values_of_shape_vectors():
    from parapipe.measure.submodels import measure_local

    og = import_onnx(hm.shape_vector_model())
    bg = singleton_blocks(og)
    assert {t for _, v, ts in bg.graph.edges(data="tensors") if v == "reshape" for t in ts} == {"nz", "p"}
    times = measure_local(bg, repeats=1, warmup=0).block_time_s
    assert {b for b, _ in times} == {"nonzero", "shape", "prod", "reshape", "cast"}


def test_a_stale_declared_output_shape_is_not_a_data_dependent_one():
    og = import_onnx(hm.stale_output_shape_model())
    assert og.tensors["y"].shape == (2, 2, 1) and og.data_dependent_ops == []


# ------------------------------------------------------------------------------------ models ORT runs
def _sample_rate_frames(n=3, rate=16000):
    rng = np.random.default_rng(4)
    return [{"x": rng.standard_normal((1, 512)).astype(np.float32),
             "state": rng.standard_normal((2, 1, 8)).astype(np.float32), "sr": np.array(rate, np.int64)}
            for _ in range(n)]


def test_shape_probe_runs_on_the_given_feeds_and_the_if_splits_anywhere():
    original = hm.sample_rate_if_model()
    with pytest.raises(InputError) as err:  # fixed probe values (sr = 0) take the 256-sample branch
        import_onnx(original, source="vad.onnx", input_shapes={"x": (1, 512)})
    assert "pass real values of sr with --feeds FILE.npz" in str(err.value)
    frames = _sample_rate_frames()
    og = import_onnx(original, source="vad.onnx", input_shapes={"x": (1, 512)}, feeds=frames[0])
    assert og.tensors["yb"].shape == (1, 8) and og.tensors["sb"].shape == (2, 1, 8)
    assert og.captured == {"x", "h", "w16k", "w8k"}
    for name in ("x", "h"):  # declared symbolic: ORT type-checks the branch not taken at the declared shapes
        assert all(d.dim_param for d in og.value_info(name).type.tensor_type.shape.dim)
    bg = singleton_blocks(og)
    assert len(bg.blocks) >= 4  # the If gets its own stage, fed h and x across cuts
    assert hm.pipeline_vs_original(og, original, frames, bg) == 0.0


def _backend_model(name):
    from pathlib import Path

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "simple" / name / "model.onnx"
    if not path.exists():
        pytest.skip(f"the onnx wheel has no {name}")
    return onnx.load(str(path))


@pytest.mark.parametrize("case, value", [(1, (3, 1)), (2, (3, 3)), (3, (3, 3, 3)), (4, (3, 3, 3, 3))])
def test_generated_shape_inputs_take_the_value_the_output_shape_needs(case, value):
    model = _backend_model(f"test_expand_shape_model{case}")  # Expand(X[1, 3, 1], shape) -> Y of declared shape
    og = import_onnx(model)
    from parapipe.graph.feeds import shape_input_values

    assert shape_input_values(og) == {"shape": value}
    frames = draw_frames(input_specs(og), 2, seed=3)
    assert all(f["shape"].tolist() == list(value) for f in frames)
    (out,) = reference_outputs(model, frames[:1])
    assert out["Y"].shape == og.tensors["Y"].shape


def test_shape_values_of_reshape_tile_and_constant_of_shape():
    from parapipe.graph.feeds import shape_input_values

    nodes = [helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
             helper.make_node("Tile", ["r", "reps"], ["t"], name="tile"),
             helper.make_node("ConstantOfShape", ["dims"], ["c"], name="zeros"),
             helper.make_node("Add", ["t", "c"], ["y"], name="add")]
    I = TensorProto.INT64
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                     helper.make_tensor_value_info("target", I, [2]), helper.make_tensor_value_info("reps", I, [2]),
                     helper.make_tensor_value_info("dims", I, [2])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # declared: the values follow from them
         for name, shape in (("y", [6, 8]), ("r", [3, 4]), ("t", [6, 8]), ("c", [6, 8]))]),
        opset_imports=[helper.make_opsetid("", 17)])
    og = import_onnx(model)
    assert shape_input_values(og) == {"target": (3, 4), "reps": (2, 2), "dims": (6, 8)}
    (out,) = reference_outputs(model, draw_frames(input_specs(og), 1))
    assert out["y"].shape == (6, 8)


def test_a_shape_input_without_a_derivable_value_names_the_input_and_feeds():
    model = _backend_model("test_expand_shape_model2")
    del model.graph.output[0].type.tensor_type.shape.dim[:]  # Y's shape no longer stated: nothing to derive from
    model.graph.output[0].type.tensor_type.ClearField("shape")
    with pytest.raises(InputError) as err:
        import_onnx(model, source="expand.onnx")
    assert str(err.value).startswith("expand.onnx: tensor 'Y': ")
    assert str(err.value).endswith("pass real values of shape with --feeds FILE.npz (the probe ran on fixed ones: "
                                   "floats 1, integers 0), or export the model with static shapes "
                                   "(onnx.shape_inference, onnxsim)")
    og = import_onnx(model, feeds={"shape": np.array([1, 3], np.int64)})
    assert og.tensors["Y"].shape == (1, 3, 3)


def test_the_shape_probe_feeds_shape_inputs_their_derived_value():
    model = _backend_model("test_expand_shape_model2")  # Y[1, 3, 3] declared; NonZero after it needs the probe
    model.graph.node.append(helper.make_node("NonZero", ["Y"], ["nz"], name="nonzero"))
    model.graph.output.append(helper.make_tensor_value_info("nz", TensorProto.INT64, None))
    og = import_onnx(model, source="expand.onnx")  # zeros for 'shape' made the probe's Expand fail
    assert og.tensors["nz"].shape == (3, 9) and og.tensors["nz"].data_dependent_axes == (1,)


def test_a_sequence_of_constants_is_not_folded_into_a_tensor():
    original = hm.constant_sequence_model()
    og = import_onnx(original)  # the folded seq, a [2, 2, 4] tensor, made SequenceInsert's graph invalid
    assert "construct" in og.graph and og.tensors["seq"].sequence and "seq" not in og.constants
    bg = singleton_blocks(og)
    assert all(not og.tensors[t].sequence for _, _, ts in bg.graph.edges(data="tensors") for t in ts)
    assert len(bg.blocks) >= 3
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    assert hm.pipeline_vs_original(og, original, [{"x": x}], bg) == 0.0
    from parapipe.measure.submodels import measure_local

    times = measure_local(bg, repeats=1, warmup=0).block_time_s  # every block's measurement sub-model runs
    assert {b for b, _ in times} == {b.name for b in bg.blocks}
