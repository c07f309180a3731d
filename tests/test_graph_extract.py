"""Stage sub-models: crossing sets, convexity, control flow, and split-vs-unsplit equality on the zoo."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import OpGraph, import_onnx


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def run_stages(og: OpGraph, stages: list[list[str]], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the stage sub-models in order, passing tensors by name; return every tensor produced."""
    values = dict(feeds)
    for k, ops in enumerate(stages):
        sub = extract_submodel(og, ops, f"stage{k}")
        assert [i.name for i in sub.model.graph.input] == sub.inputs
        assert [o.name for o in sub.model.graph.output] == sub.outputs
        outs = session(sub.model).run(sub.outputs, {t: values[t] for t in sub.inputs})
        values.update(zip(sub.outputs, outs))
    return values


def reference(og: OpGraph, names: list[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the unsplit normalised model with ``names`` exposed as extra outputs."""
    probe = onnx.ModelProto()
    probe.CopyFrom(og.model)
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(og.value_info(t) for t in names if t not in have)
    return dict(zip(names, session(probe).run(names, feeds)))


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    scale = max(1.0, float(np.abs(want).max()))
    assert float(np.abs(got - want).max()) <= 1e-5 * scale


def test_residual_skip_is_an_output_of_the_first_stage(diamond_model, tiny_input):
    og = import_onnx(diamond_model)
    first = extract_submodel(og, ["conv_a", "relu_a", "conv_b", "relu_b"], "first")
    assert first.inputs == ["x"]
    assert first.outputs == ["relu_a_y", "relu_b_y"]  # relu_a_y crosses the cut to conv_c (the skip)
    assert {t.name for t in first.model.graph.initializer} == {"conv_a_w", "conv_a_b", "conv_b_w", "conv_b_b"}
    second = extract_submodel(og, ["conv_c", "add", "relu_out"], "second")
    assert second.inputs == ["relu_a_y", "relu_b_y"] and second.outputs == ["relu_out_y"]
    assert first.model.graph.name == "first"
    values = run_stages(og, [["conv_a", "relu_a", "conv_b", "relu_b"], ["conv_c", "add", "relu_out"]],
                        {"x": tiny_input})
    (want,) = session(og.model).run(None, {"x": tiny_input})
    np.testing.assert_allclose(values["relu_out_y"], want, rtol=1e-6, atol=1e-6)
    assert np.abs(want).max() > 0.1


def test_parallel_branch_stage_has_both_outputs(two_branch_model, tiny_input):
    og = import_onnx(two_branch_model)
    sub = extract_submodel(og, ["pool", "conv_r", "conv_l", "relu_l"])
    assert sub.inputs == ["x"]
    assert sub.outputs == ["relu_l_y", "conv_r_y"]  # production (model) order
    assert [n.name for n in sub.model.graph.node] == ["conv_l", "relu_l", "pool", "conv_r"]


def test_graph_output_inside_a_stage_is_an_output(chain_model):
    og = import_onnx(chain_model)
    sub = extract_submodel(og, og.topo_order[3:])
    assert sub.inputs == ["conv2_y"] and sub.outputs == ["fc_y"]


def test_non_convex_set_names_the_operator_in_between(diamond_model):
    og = import_onnx(diamond_model)
    with pytest.raises(ValueError, match=r"not convex: '(conv_b|relu_b|conv_c)' \(outside the set\)"):
        extract_submodel(og, ["relu_a", "add"])


def test_empty_and_unknown_sets_are_rejected(chain_model):
    og = import_onnx(chain_model)
    with pytest.raises(ValueError, match="empty"):
        extract_submodel(og, [])
    with pytest.raises(ValueError, match="unknown operator 'nope'"):
        extract_submodel(og, ["conv1", "nope"])


def _if_model() -> onnx.ModelProto:
    """x -> relu -> r; If(cond): then r + c1, else r * c2 (c1, c2 outer initializers; r read from outside)."""
    out_t = helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [1, 4])
    out_e = helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [1, 4])
    then_g = helper.make_graph([helper.make_node("Add", ["r", "c1"], ["t_out"], name="then_add")], "then", [],
                               [out_t])
    else_g = helper.make_graph([helper.make_node("Mul", ["r", "c2"], ["e_out"], name="else_mul")], "else", [],
                               [out_e])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("If", ["cond"], ["y0"], name="branch", then_branch=then_g, else_branch=else_g),
             helper.make_node("Neg", ["y0"], ["y"], name="neg")]
    inits = [numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), "c1"),
             numpy_helper.from_array(np.full((1, 4), 3.0, np.float32), "c2")]
    graph = helper.make_graph(nodes, "cf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                            helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_control_flow_node_is_an_atom_with_its_outer_scope_inputs():
    og = import_onnx(_if_model())
    assert og.graph.has_edge("relu", "branch")  # the hidden outer-scope read is a real dependency
    assert og.op("branch").inputs == ("cond", "c1", "c2", "r")
    sub = extract_submodel(og, ["branch"])
    assert sub.inputs == ["cond", "r"] and sub.outputs == ["y0"]
    assert {t.name for t in sub.model.graph.initializer} == {"c1", "c2"}
    x = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)
    for cond in (True, False):
        values = run_stages(og, [["relu"], ["branch"], ["neg"]], {"x": x, "cond": np.array(cond)})
        (want,) = session(og.model).run(None, {"x": x, "cond": np.array(cond)})
        np.testing.assert_array_equal(values["y"], want)


ZOO_SPLITS = [("alexnet", 2), ("densenet121", 3), ("inception_v1", 4), ("inception_v2", 2), ("resnet50", 3),
              ("shufflenet", 4), ("squeezenet", 2), ("vgg19", 3), ("zfnet512", 4)]
HEAVY = {"alexnet", "vgg19", "zfnet512"}  # 0.2-0.6 GB of weights: seconds per copy on this machine


@pytest.mark.parametrize("name,k", [pytest.param(n, k, marks=pytest.mark.slow) if n in HEAVY else (n, k)
                                    for n, k in ZOO_SPLITS])
def test_contiguous_split_equals_unsplit(zoo_opgraph, name, k):
    og = zoo_opgraph(name)
    topo = og.topo_order
    bounds = np.linspace(0, len(topo), k + 1).round().astype(int)
    stages = [topo[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    check_split(og, stages)


def check_split(og: OpGraph, stages: list[list[str]]) -> None:
    (inp,) = og.inputs
    x = np.random.default_rng(0).random(og.tensors[inp].shape, dtype=np.float32)
    values = run_stages(og, stages, {inp: x})
    crossing = sorted({t for t in values if t != inp})
    want = reference(og, crossing, {inp: x})
    for t in og.outputs:
        assert float(np.abs(values[t] - want[t]).max()) <= 1e-5
    for t in crossing:  # every boundary tensor, not only the (softmax-flattened) final output
        assert_close(values[t], want[t])


def test_random_convex_non_contiguous_split_inception_v1(zoo_opgraph):
    og = zoo_opgraph("inception_v1")
    rng = np.random.default_rng(11)
    # a random topological order (random linear extension), cut into 3 contiguous pieces: each is convex
    indeg = {n: og.graph.in_degree(n) for n in og.graph}
    ready = [n for n, d in indeg.items() if d == 0]
    order = []
    while ready:
        n = ready.pop(int(rng.integers(len(ready))))
        order.append(n)
        for s in og.graph.successors(n):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    cuts = sorted(rng.choice(np.arange(20, len(order) - 20), size=2, replace=False))
    stages = [order[: cuts[0]], order[cuts[0]: cuts[1]], order[cuts[1]:]]
    pos = {n: i for i, n in enumerate(og.topo_order)}
    spans = [max(pos[n] for n in s) - min(pos[n] for n in s) + 1 for s in stages]
    assert any(span > len(s) for span, s in zip(spans, stages)), "the split should not be contiguous"
    check_split(og, stages)


def test_a_scikit_learn_classifier_with_a_zipmap_output_extracts_with_its_types():
    # onnxruntime's own logreg_iris.onnx (skl2onnx: LinearClassifier -> Normalizer -> ZipMap): its
    # 'probabilities' output is a sequence of maps, which stage models used to declare as seq(tensor(string))
    # (ORT refused the sub-model; onnx.checker raised a traceback in 'parapipe run')
    from pathlib import Path

    path = Path(ort.__file__).parent / "datasets" / "logreg_iris.onnx"
    model = onnx.load(str(path))
    og = import_onnx(model, "logreg_iris", str(path))
    zipmap = next(n for n in og.topo_order if og.node(n).op_type == "ZipMap")
    for ops in (og.topo_order, [zipmap]):
        sub = extract_submodel(og, ops, name="stage", check=True)
        (probabilities,) = [vi.type for vi in sub.model.graph.output if vi.name == "probabilities"]
        pairs = probabilities.sequence_type.elem_type.map_type  # seq(map(int64, tensor(float)))
        assert pairs.key_type == TensorProto.INT64 and pairs.value_type.tensor_type.elem_type == TensorProto.FLOAT
    whole = extract_submodel(og, og.topo_order, name="whole", check=True)
    feeds = {"float_input": np.array([[5.1, 3.5], [6.7, 3.0], [5.9, 3.0]], dtype=np.float32)}  # [3, 2]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(whole.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    assert list(got[0]) == list(want[0]) and got[1] == want[1]
