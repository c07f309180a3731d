"""The generated registry models (models/gen_*.py): valid ONNX, run in ONNX Runtime, deterministic, listed,
imported and costed by parapipe, with the structure each architecture is meant to have."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from parapipe.cli import main as cli_main
from parapipe.graph import zoo
from parapipe.app.prepare import prepare

GENERATED = {
    # name: {output name: shape}
    "mobilenet_v2": {"logits": (1, 1000)},
    "yolo_detector": {"p3": (1, 3, 40, 40, 85), "p4": (1, 3, 20, 20, 85), "p5": (1, 3, 10, 10, 85)},
    "transformer_encoder": {"hidden_states": (1, 128, 256)},
}

# Multiply-add = 2 FLOPs. MobileNet-v2: 300 M multiply-adds (Sandler et al. 2018, Table 4) -> 0.6 G.
# YOLOv5n: 4.5 GFLOPs at 640x640 (Ultralytics README) -> 1.1 G at 320x320. BERT-mini at 128 tokens:
# 4 layers x (2 x 128 x (4 x 256^2 + 2 x 256 x 1024) + 2 x 2 x 128^2 x 256) = 0.89 G.
GFLOPS_RANGE = {"mobilenet_v2": (0.55, 0.7), "yolo_detector": (0.95, 1.25),
                "transformer_encoder": (0.85, 0.95)}


@pytest.fixture(scope="module")
def loaded():
    return {name: zoo.load_model(name) for name in GENERATED}


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_model_is_valid_and_runs_in_onnx_runtime(loaded, name):
    lm = loaded[name]
    onnx.checker.check_model(lm.model, full_check=True)
    entry = zoo.zoo_entry(name)
    assert entry.kind == "generator" and lm.path is None
    assert [i.name for i in lm.model.graph.input] == [entry.input_name]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    sess = ort.InferenceSession(lm.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal(entry.input_shape).astype(entry.dtype)
    outs = sess.run(None, {entry.input_name: x})
    names = [o.name for o in sess.get_outputs()]
    assert dict(zip(names, (o.shape for o in outs))) == GENERATED[name]
    assert all(np.isfinite(o).all() and o.std() > 0 for o in outs)


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_model_is_deterministic(loaded, name):
    again = zoo.load_model(name)
    assert again.sha256 == loaded[name].sha256
    w0 = numpy_helper.to_array(loaded[name].model.graph.initializer[0])
    assert np.array_equal(w0, numpy_helper.to_array(again.model.graph.initializer[0]))


def test_mobilenet_v2_has_depthwise_inverted_residuals(loaded):
    m = loaded["mobilenet_v2"].model
    ops = _ops(m)
    depthwise = [n for n in m.graph.node if n.op_type == "Conv"
                 and next(a.i for a in n.attribute if a.name == "group") > 1]
    assert len(depthwise) == 17  # one per bottleneck (Sandler et al. 2018, Table 2: 1+2+3+4+3+3+1)
    assert ops["Add"] == 10  # residuals: stride 1 and equal channels
    assert ops["Conv"] == 52 and ops["Clip"] == 35
    params = sum(int(np.prod(t.dims)) for t in m.graph.initializer if len(t.dims) > 1)
    assert 3.3e6 < params < 3.6e6  # paper: 3.4 M


def test_yolo_detector_has_a_multi_scale_neck_and_three_heads(loaded):
    m = loaded["yolo_detector"].model
    ops = _ops(m)
    assert ops["Resize"] == 2 and ops["MaxPool"] == 3  # top-down upsamples; SPPF
    assert ops["Concat"] == 4 + 8 + 1  # neck (2 top-down, 2 bottom-up), one per C3 block, SPPF
    assert len(m.graph.output) == 3 and ops["Transpose"] == 3


def test_transformer_heads_are_parallel_branches(loaded):
    m = loaded["transformer_encoder"].model
    ops = _ops(m)
    assert ops["Softmax"] == 16 and ops["LayerNormalization"] == 9  # 4 layers x 4 heads; 1 + 2 per layer
    concats = [n for n in m.graph.node if n.op_type == "Concat"]
    assert len(concats) == 4 and all(len(n.input) == 4 for n in concats)


def test_parapipe_models_lists_the_generated_models(capsys):
    assert cli_main(["models", "--json"]) == 0
    listed = {m["name"]: m["source"] for m in json.loads(capsys.readouterr().out)}
    for name in GENERATED:
        assert name in listed and "models/gen_" in listed[name]


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_prepare_on_the_a311d_profile(name):
    prep = prepare(name, "amlogic_a311d")
    pr = prep.problem
    assert 2 < pr.n_blocks <= 48 and pr.pu_names == ["big", "little", "gpu", "npu"]
    ops = [prep.opgraph.graph.nodes[n]["op"] for n in prep.opgraph.topo_order]
    lo, hi = GFLOPS_RANGE[name]
    assert lo < sum(o.flops for o in ops) / 1e9 < hi
    assert np.isfinite(pr.time_s).any(axis=1).all()  # every block runs on some PU


def test_orin_dla_falls_back_to_the_gpu_for_ops_outside_its_layer_list():
    prep = prepare("transformer_encoder", "jetson_agx_orin")
    pr, bg = prep.problem, prep.block_graph
    dla0, gpu = pr.pu_names.index("dla0"), pr.pu_names.index("gpu")
    by_name = {b.name: b for b in bg.blocks}
    with_transpose = [j for j, n in enumerate(pr.block_names) if "Transpose" in by_name[n].op_types]
    assert with_transpose  # the heads' K^T
    assert all(np.isinf(pr.time_s[j, dla0]) and np.isfinite(pr.time_s[j, gpu]) for j in with_transpose)
    assert np.isfinite(pr.time_s[:, dla0]).any()  # MatMul/Softmax-only blocks do run on the DLA
