"""The model registry, loading by name/path with its errors, and import of the nine zoo models."""
from __future__ import annotations

import hashlib
import textwrap

import networkx as nx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from parapipe.errors import InputError
from parapipe.graph import zoo
from parapipe.graph.coarsen import coarsen
from parapipe.graph.opgraph import import_onnx

NAMES = ["alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]
HEAVY = {"alexnet", "vgg19", "zfnet512"}  # 0.2-0.6 GB of folded weights: seconds per copy on this machine

# Total GFLOPs (multiply-add = 2) at 1x3x224x224. Published multiply-add counts, x2: ResNet-50 3.9-4.1 G
# (He et al. 2016; the Caffe2 model strides in the 1x1 conv), VGG-19 19.6 G (Simonyan & Zisserman 2015),
# DenseNet-121 2.9 G (Huang et al. 2017), GoogLeNet 1.5 G (Szegedy et al. 2015), BN-Inception 2.0 G,
# ShuffleNet 1x (g=3) 0.14 G (Zhang et al. 2018), SqueezeNet 1.1 0.35 G. AlexNet: the BVLC model at 224x224
# (not 227) gives 54x54 after conv1, so by hand conv 596 M + fc 59 M MACs = 1.31 GFLOPs plus LRN/ReLU/bias.
GFLOPS_RANGE = {"alexnet": (1.28, 1.36), "densenet121": (5.5, 6.0), "inception_v1": (2.8, 3.2),
                "inception_v2": (3.8, 4.3), "resnet50": (7.7, 8.3), "shufflenet": (0.24, 0.30),
                "squeezenet": (0.65, 0.75), "vgg19": (38.5, 40.0), "zfnet512": (2.8, 3.2)}


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def test_registry_lists_the_nine_light_models():
    refs = zoo.list_models()[:len(NAMES)]  # the onnx-wheel models come first; generated models follow
    assert [r.name for r in refs] == NAMES
    for ref in refs:
        assert ref.path is not None and ref.path.is_file()
        assert ref.path.parent == zoo.light_models_dir()
        assert "onnx" in ref.source
    entry = zoo.zoo_entry("resnet50")
    assert entry.kind == "onnx-light" and entry.input_name == "gpu_0/data_0"
    assert entry.input_shape == (1, 3, 224, 224) and entry.dtype == "float32"


def test_resolve_by_name_and_by_path(tmp_path, chain_model):
    assert zoo.resolve_model("squeezenet").path == zoo.light_models_dir() / "light_squeezenet.onnx"
    path = tmp_path / "tiny.onnx"
    onnx.save(chain_model, str(path))
    ref = zoo.resolve_model(str(path))
    assert ref.name == "tiny" and ref.path == path.resolve() and ref.source == str(path)
    loaded = zoo.load_model(str(path))
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert loaded.model.graph.name == "chain"


def test_unknown_name_lists_known_names():
    with pytest.raises(InputError) as info:
        zoo.resolve_model("resnet51")
    msg = str(info.value)
    assert "'resnet51'" in msg and "run 'parapipe models'" in msg
    assert all(name in msg for name in NAMES)


@pytest.mark.parametrize("case", ["missing", "truncated", "text", "empty", "directory"])
def test_bad_files_give_input_errors_naming_the_file(tmp_path, case):
    path = tmp_path / f"{case}.onnx"
    if case == "truncated":
        data = (zoo.light_models_dir() / "light_resnet50.onnx").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif case == "text":
        path.write_text("this is not a model\n" * 20)
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "directory":
        path.mkdir()
    with pytest.raises(InputError) as info:
        zoo.load_model(str(path))
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    expected = {"missing": "file not found", "directory": "is a directory"}.get(
        case, "is not a valid ONNX model (truncated or wrong format); re-export it")
    assert expected in msg


def test_external_data_is_loaded_from_next_to_the_file(tmp_path, chain_model, tiny_input):
    path = tmp_path / "ext.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(chain_model)  # save_model(save_as_external_data=True) rewrites the tensors it saves
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.data", size_threshold=0)
    assert (tmp_path / "ext.data").is_file()
    loaded = zoo.load_model(str(path))
    og = import_onnx(loaded.model, loaded.name, str(path))
    assert not any(t.external_data for t in og.model.graph.initializer)
    (got,) = session(og.model).run(None, {"x": tiny_input})
    (want,) = session(chain_model).run(None, {"x": tiny_input})
    np.testing.assert_allclose(got, want, rtol=1e-6)
    (tmp_path / "ext.data").rename(tmp_path / "moved.data")
    with pytest.raises(InputError, match=r"ext\.onnx: external data: cannot be loaded"):
        zoo.load_model(str(path))


def _write_registry(tmp_path, monkeypatch, body: str):
    reg = tmp_path / "registry.yaml"
    reg.write_text(textwrap.dedent(body))
    monkeypatch.setattr(zoo, "registry_path", lambda: reg)
    return reg


def test_generator_entries_are_called(tmp_path, monkeypatch):
    (tmp_path / "tiny_gen.py").write_text(textwrap.dedent("""
        from onnx import TensorProto, helper
        def relu_model():
            g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
            return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        def not_a_model():
            return 42
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    _write_registry(tmp_path, monkeypatch, """
        models:
          - {name: relu, kind: generator, generator: "tiny_gen:relu_model", source: "test generator"}
          - {name: bad, kind: generator, generator: "tiny_gen:not_a_model", source: "test generator"}
          - {name: gone, kind: generator, generator: "no_such_module_xyz:f", source: "test generator"}
        """)
    ref = zoo.resolve_model("relu")
    assert ref.path is None and ref.source == "test generator"
    loaded = zoo.load_model("relu")
    assert loaded.path is None and loaded.name == "relu"
    assert loaded.sha256 == hashlib.sha256(loaded.model.SerializeToString(deterministic=True)).hexdigest()
    assert import_onnx(loaded.model).topo_order == ["r"]
    with pytest.raises(InputError, match=r"registry\.yaml: bad\.generator: returned int, not an onnx\.Model"):
        zoo.load_model("bad")
    with pytest.raises(InputError, match=r"registry\.yaml: gone\.generator: cannot import 'no_such_module"):
        zoo.load_model("gone")


@pytest.mark.parametrize("body,field", [
    ("models:\n  - {name: a, kind: magic, file: x.onnx, source: s}\n", "models[0].kind"),
    ("models:\n  - {name: a, kind: onnx-light, source: s}\n", "models[0].file"),
    ("models:\n  - {name: a, kind: generator, generator: nocolon, source: s}\n", "models[0].generator"),
    ("models:\n  - {name: a, kind: file, file: a.onnx, source: s, colour: red}\n", "models[0].colour"),
    ("models:\n  - {name: a, kind: file, file: a.onnx, source: s}\n  - {name: a, kind: file, file: b.onnx, "
     "source: s}\n", "models[0].name"),
    ("models: [\n", None),
])
def test_malformed_registry_names_file_and_field(tmp_path, monkeypatch, body, field):
    reg = _write_registry(tmp_path, monkeypatch, body)
    with pytest.raises(InputError) as info:
        zoo.list_models()
    assert str(info.value).startswith(f"{reg}: {field + ': ' if field else ''}")


def _onnx_test_input(shape) -> np.ndarray:
    """The input onnx's backend test runner feeds the light models (arange / n, see
    onnx/backend/test/runner/__init__.py, generate_dummy_data(random=False)); the shipped *_output_0.pb
    is the reference evaluator's output on it."""
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n
                                  for n in NAMES])
def test_zoo_model_imports(name):
    loaded = zoo.load_model(name)
    og = import_onnx(loaded.model, loaded.name, str(loaded.path))
    entry = zoo.zoo_entry(name)
    assert og.inputs == [entry.input_name]
    assert og.tensors[entry.input_name].shape == entry.input_shape
    assert og.graph.number_of_nodes() > 0
    assert all(op.op_type != "ConstantOfShape" for _, op in og.graph.nodes(data="op"))
    assert og.model.ir_version >= 4 and not any(i.name in og.constants for i in og.model.graph.input)
    lo, hi = GFLOPS_RANGE[name]
    assert lo <= og.flops / 1e9 <= hi
    onnx.checker.check_model(og.model)

    x = _onnx_test_input(entry.input_shape)
    (got,) = session(og.model).run(None, {entry.input_name: x})
    (original,) = session(loaded.model).run(None, {entry.input_name: x})
    np.testing.assert_array_equal(got, original)
    shipped_pb = zoo.light_models_dir() / f"{loaded.path.stem}_output_0.pb"
    shipped = numpy_helper.to_array(onnx.load_tensor(str(shipped_pb)))
    np.testing.assert_allclose(got, shipped, rtol=1e-3, atol=1e-7)  # onnx's own tolerance for these models

    bg = coarsen(og, max_blocks=12)
    assert len(bg.blocks) <= 12 and nx.is_directed_acyclic_graph(bg.graph)
    assert sorted(op for b in bg.blocks for op in b.ops) == sorted(og.topo_order)
