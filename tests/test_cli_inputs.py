"""``--input-shape`` and ``--feeds`` through the CLI as a user runs it: inspect -> optimize --soc host -> run,
on the small real-world-fault models of tests/hostile_models.py."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort

import hostile_models as hm
from test_cli import assert_user_error, run_cli


def _save(tmp_path, name, model):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def _optimize(capsys, tmp_path, model, *extra):
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, "optimize", model, "--soc", "host", "--out", out, "--no-plot",
                                "--time-limit", "2", *extra)
    assert code == 0, err
    return out / "pareto.json", stdout


def _run(capsys, model, mapping, *extra):
    code, out, err = run_cli(capsys, "run", model, "--mapping", mapping, "--frames", "12", "--json", *extra)
    return code, (json.loads(out) if code in (0, 1) else None), err


def test_symbolic_dims_refused_then_planned_and_checked(capsys, tmp_path):
    net = _save(tmp_path, "net", hm.unpadded_conv_net())
    code, out, err = run_cli(capsys, "inspect", net)
    assert_user_error(code, out, err)
    assert err.strip() == (f"parapipe: error: {net}: input 'x' dim 2 'H': is symbolic ([N, 3, H, W]) and parapipe "
                           "needs a static size; give it with --input-shape x:1x3xNxN (N = the size to plan for)")
    code, out, err = run_cli(capsys, "inspect", net, "--input-shape", "x:1x3x32x32", "--json")
    assert code == 0 and json.loads(out)["outputs"] == {"y": [1, 8, 26, 26]}
    mapping, _ = _optimize(capsys, tmp_path, net, "--input-shape", "x:1x3x32x32")
    doc = json.loads(mapping.read_text())
    assert doc["input_shapes"] == {"x": [1, 3, 32, 32]}
    assert doc["cost_notes"] == {"input_dims_chosen": [], "ops_without_flop_formula": {}, "data_dependent_ops": []}
    code, rep, err = _run(capsys, net, mapping)  # the stored shapes are used
    assert code == 0 and rep["outputs_match"] is True, err
    code, out, err = run_cli(capsys, "run", net, "--mapping", mapping, "--input-shape", "x:1x3x40x40")
    assert_user_error(code, out, err, "--input-shape: x: 1x3x40x40 differs from the shapes the mapping was "
                      "computed for (x:1x3x32x32)")
    code, out, err = run_cli(capsys, "evaluate", net, "--soc", "amlogic_a311d", "--mapping", "big",
                             "--input-shape", "x:1x3x4x4")
    assert_user_error(code, out, err, "tensor 'c'", "[1, 8, -2, -2]")


def test_bert_front_end_runs_with_valid_integer_inputs_and_feeds(capsys, tmp_path):
    bert = _save(tmp_path, "bert", hm.bert_front_end(vocab=30, types=2))
    mapping, stdout = _optimize(capsys, tmp_path, bert)
    assert "note: input input_ids: batch dim 'batch' set to 1" in stdout
    code, rep, err = _run(capsys, bert, mapping)
    assert code == 0 and rep["outputs_match"] is True and rep["max_abs_diff"] == 0.0, err
    rng = np.random.default_rng(0)
    good = {"input_ids": rng.integers(0, 30, (3, 1, 8)), "token_type_ids": rng.integers(0, 2, (3, 1, 8))}
    np.savez(tmp_path / "good.npz", **good)
    code, rep, err = _run(capsys, bert, mapping, "--feeds", tmp_path / "good.npz")
    assert code == 0 and rep["outputs_match"] is True, err
    np.savez(tmp_path / "bad.npz", input_ids=good["input_ids"], token_type_ids=good["token_type_ids"] + 1)
    code, out, err = run_cli(capsys, "run", bert, "--mapping", mapping, "--feeds", tmp_path / "bad.npz")
    assert_user_error(code, out, err, f"--feeds {tmp_path / 'bad.npz'}: token_type_ids: holds values in [1, 2], "
                      "outside [0, 1], the rows it indexes")
    np.savez(tmp_path / "short.npz", input_ids=good["input_ids"])
    code, out, err = run_cli(capsys, "run", bert, "--mapping", mapping, "--feeds", tmp_path / "short.npz")
    assert_user_error(code, out, err, "has no array for input 'token_type_ids'")


def test_feed_the_model_fails_on_is_a_feed_error_naming_the_input(capsys, tmp_path):
    bert = _save(tmp_path, "bert_offset", hm.bert_front_end(offset_ids=True))
    mapping, _ = _optimize(capsys, tmp_path, bert)
    np.savez(tmp_path / "f.npz", input_ids=np.full((1, 8), 29), token_type_ids=np.zeros((1, 8), np.int64))
    code, out, err = run_cli(capsys, "run", bert, "--mapping", mapping, "--feeds", tmp_path / "f.npz")
    assert_user_error(code, out, err, f"--feeds {tmp_path / 'f.npz'}: input 'input_ids': feed error")


def test_duplicate_names_run_and_deploy_bundle_reference_loads(capsys, tmp_path):
    dup = _save(tmp_path, "dup", hm.duplicate_names_model())
    mapping, _ = _optimize(capsys, tmp_path, dup)
    code, rep, err = _run(capsys, dup, mapping)
    assert code == 0 and rep["outputs_match"] is True, err
    from parapipe.deploy.bundle import REFERENCE, build_bundle
    from parapipe.app.run import load_mapping

    bundle = build_bundle(load_mapping(str(dup), str(mapping), "best-throughput"), tmp_path / "bundle")
    sess = ort.InferenceSession(str(bundle.folder / REFERENCE), providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()][0] == "y"


def test_constant_output_inspected_and_run(capsys, tmp_path):
    const = _save(tmp_path, "const", hm.constant_output_model())
    code, out, err = run_cli(capsys, "inspect", const, "--json")
    assert code == 0 and json.loads(out)["outputs"] == {"y": [1, 8], "anchors": [3, 2]}
    mapping, _ = _optimize(capsys, tmp_path, const)
    code, rep, err = _run(capsys, const, mapping)
    assert code == 0 and rep["outputs_match"] is True, err


def test_custom_domain_op_refused_by_optimize(capsys, tmp_path):
    from test_hostile_models import _custom_model

    model = _save(tmp_path, "custom", _custom_model())
    code, out, err = run_cli(capsys, "inspect", model)
    assert code == 0 and "com.example.MyOp x1" in out
    code, out, err = run_cli(capsys, "optimize", model, "--soc", "amlogic_a311d", "--out", tmp_path / "o")
    assert_user_error(code, out, err, "operator MyOp (domain com.example, node 'mine')", "amlogic_a311d")


def test_profile_loads_the_graph_with_the_given_shapes(tmp_path):
    from parapipe.app.profiling import load_graph

    net = _save(tmp_path, "net", hm.unpadded_conv_net())
    _, og, bg = load_graph(str(net), None, 48, {"x": (1, 3, 16, 16)})
    assert og.tensors["y"].shape == (1, 8, 10, 10) and len(bg.blocks) == 1


def test_bundle_frames_use_the_graph_ranges(capsys, tmp_path):
    from parapipe.deploy.bundle import PLAN, build_bundle
    from parapipe.graph.feeds import input_specs
    from parapipe.graph.opgraph import import_onnx
    from parapipe.app.run import load_mapping
    from ppexec.frames import draw_frames, inputs_from_doc

    bert = _save(tmp_path, "bert", hm.bert_front_end(vocab=30, types=2))
    mapping, _ = _optimize(capsys, tmp_path, bert)
    bundle = build_bundle(load_mapping(str(bert), str(mapping), "best-throughput"), tmp_path / "bundle")
    inputs = json.loads((bundle.folder / PLAN).read_text())["inputs"]
    assert inputs["token_type_ids"]["range"] == [0, 1] and inputs["input_ids"]["range"] == [0, 29]
    frames = draw_frames(inputs_from_doc(inputs), 8, seed=0)  # as the board draws them
    ids = np.concatenate([f["input_ids"].ravel() for f in frames])
    assert ids.max() <= 29 and ids.max() > 1 and {int(v) for f in frames for v in f["token_type_ids"].ravel()} == {0, 1}
    # one rule: the host draws the same frames from the graph's specs as the board from plan.json's
    here = draw_frames(input_specs(import_onnx(hm.bert_front_end(vocab=30, types=2))), 8, seed=0)
    assert all(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a) for a, b in zip(here, frames))


def test_if_on_an_int64_sample_rate_optimizes_and_runs_with_feeds(capsys, tmp_path):
    vad = _save(tmp_path, "vad", hm.sample_rate_if_model())
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "f.npz", x=rng.standard_normal((4, 1, 512)).astype(np.float32),
             state=rng.standard_normal((4, 2, 1, 8)).astype(np.float32), sr=np.full(4, 16000, np.int64))
    code, out, err = run_cli(capsys, "optimize", vad, "--soc", "host", "--out", tmp_path / "o", "--no-plot",
                             "--input-shape", "x:1x512")  # no feeds: the probe's sr = 0 takes the other branch
    assert_user_error(code, out, err, "pass real values of sr with --feeds FILE.npz")
    mapping, _ = _optimize(capsys, tmp_path, vad, "--input-shape", "x:1x512", "--feeds", tmp_path / "f.npz",
                           "--time-stages", "0", "--max-blocks", "4")
    assert json.loads(mapping.read_text())["input_shapes"] == {"x": [1, 512], "state": [2, 1, 8], "sr": []}
    for point in ("best-throughput", "best-latency"):
        code, rep, err = _run(capsys, vad, mapping, "--point", point, "--feeds", tmp_path / "f.npz")
        assert code == 0 and rep["outputs_match"] is True and rep["max_abs_diff"] == 0.0, err


def test_expand_with_a_shape_input_optimizes_and_runs_on_generated_inputs(capsys, tmp_path):
    from test_hostile_models import _backend_model

    model = _save(tmp_path, "expand", _backend_model("test_expand_shape_model3"))  # Expand(X[1,3,1], shape[3])
    mapping, _ = _optimize(capsys, tmp_path, model, "--time-stages", "0")
    code, rep, err = _run(capsys, model, mapping)
    assert code == 0 and rep["outputs_match"] is True, err
    broken = _backend_model("test_expand_shape_model3")  # Y's dims no longer stated: only real inputs run it
    broken.graph.output[0].type.tensor_type.ClearField("shape")
    code, out, err = run_cli(capsys, "optimize", _save(tmp_path, "broken", broken), "--soc", "host", "--out",
                             tmp_path / "b", "--no-plot")
    assert_user_error(code, out, err, "pass real values of shape with --feeds FILE.npz")


def test_sequence_of_constants_optimizes_and_runs(capsys, tmp_path):
    model = _save(tmp_path, "seq", hm.constant_sequence_model())
    mapping, _ = _optimize(capsys, tmp_path, model, "--max-blocks", "3")
    for point in ("best-throughput", "best-latency"):
        code, rep, err = _run(capsys, model, mapping, "--point", point)
        assert code == 0 and rep["outputs_match"] is True, err
