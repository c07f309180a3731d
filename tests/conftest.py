"""Shared fixtures: tiny real ONNX graphs (chain, diamond, two branches) and cached zoo OpGraphs; and the
session's isolation from the user's state.

The tiny models take ``x`` float32[1, 3, 8, 8], have seeded random weights (initializers), opset 13,
IR version 8, named nodes; they run in ONNX Runtime.

Isolation (:func:`pytest_configure`, :func:`_session_in_a_temporary_folder`): the session runs in a temporary
working folder, so the relative defaults of the commands (``profile.sqlite``, ``out/``, ``out/deploy``) land
there, never in the checkout; ``PARAPIPE_HOST_CACHE_DIR`` sends the agent copies uploaded over SSH to a
temporary folder instead of ``~/.cache/parapipe`` on the (loopback) host; ``XDG_CACHE_HOME`` and
``MPLCONFIGDIR`` send ONNX Runtime's ``Microsoft/DeveloperTools`` files and matplotlib's font list there too.
Everything is removed when the session ends. tests/test_user_state.py checks it.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

# The executor package `ppexec` lives in device_agents/ (it also runs on boards); test this checkout's copy.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "device_agents"))

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

TINY_INPUT_SHAPE = (1, 3, 8, 8)

#: Environment variables pointed at the session's temporary folder, and their sub-folder there.
ISOLATED_ENV = {"PARAPIPE_HOST_CACHE_DIR": "host-cache", "XDG_CACHE_HOME": "xdg-cache",
                "MPLCONFIGDIR": "matplotlib"}
_isolation: dict[str, object] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Point the caches at a temporary folder before any test module (or ONNX Runtime) is imported."""
    root = Path(tempfile.mkdtemp(prefix="parapipe-tests-"))
    _isolation.update(root=root, env={name: os.environ.get(name) for name in ISOLATED_ENV})
    for name, sub in ISOLATED_ENV.items():
        (root / sub).mkdir()
        os.environ[name] = str(root / sub)
    (root / "cwd").mkdir()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore the environment and remove the temporary folder (agent copies included)."""
    root = _isolation.pop("root", None)
    saved = _isolation.pop("env", {})
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if isinstance(root, Path):
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _session_in_a_temporary_folder() -> Iterator[Path]:
    """Run every test in the session's temporary working folder (the commands' relative defaults land there)."""
    root = _isolation["root"]
    assert isinstance(root, Path)
    before = os.getcwd()
    os.chdir(root / "cwd")
    try:
        yield root
    finally:
        os.chdir(before)


class _Builder:
    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def weight(self, name: str, shape: tuple[int, ...]) -> str:
        fan_in = int(np.prod(shape[1:])) or 1
        value = (self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def conv(self, name: str, x: str, cin: int, cout: int, k: int = 3, group: int = 1) -> str:
        w = self.weight(f"{name}_w", (cout, cin // group, k, k))
        b = self.weight(f"{name}_b", (cout,))
        self.nodes.append(helper.make_node("Conv", [x, w, b], [f"{name}_y"], name=name, kernel_shape=[k, k],
                                           pads=[k // 2] * 4, group=group))
        return f"{name}_y"

    def op(self, op_type: str, name: str, inputs: list[str], **attrs) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [f"{name}_y"], name=name, **attrs))
        return f"{name}_y"

    def model(self, name: str, out: str, out_shape: list[int]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(TINY_INPUT_SHAPE))],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tests")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def make_chain_model() -> onnx.ModelProto:
    """x -> conv1 -> relu1 -> conv2 -> relu2 -> gap -> flatten -> fc (Gemm) : y[1, 2]."""
    b = _Builder(0)
    t = b.op("Relu", "relu1", [b.conv("conv1", "x", 3, 4)])
    t = b.op("Relu", "relu2", [b.conv("conv2", t, 4, 4)])
    t = b.op("Flatten", "flatten", [b.op("GlobalAveragePool", "gap", [t])])
    t = b.op("Gemm", "fc", [t, b.weight("fc_w", (2, 4)), b.weight("fc_b", (2,))], transB=1)
    return b.model("chain", t, [1, 2])


def make_diamond_model() -> onnx.ModelProto:
    """x -> conv_a -> relu_a -> {conv_b -> relu_b, conv_c} -> add -> relu_out : y[1, 4, 8, 8]."""
    b = _Builder(1)
    a = b.op("Relu", "relu_a", [b.conv("conv_a", "x", 3, 4)])
    left = b.op("Relu", "relu_b", [b.conv("conv_b", a, 4, 4)])
    right = b.conv("conv_c", a, 4, 4, k=1)
    t = b.op("Relu", "relu_out", [b.op("Add", "add", [left, right])])
    return b.model("diamond", t, [1, 4, 8, 8])


def make_two_branch_model() -> onnx.ModelProto:
    """x -> {conv_l -> relu_l, maxpool -> conv_r} -> concat -> conv_out : y[1, 4, 8, 8] (Inception-like)."""
    b = _Builder(2)
    left = b.op("Relu", "relu_l", [b.conv("conv_l", "x", 3, 4)])
    pool = b.op("MaxPool", "pool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    right = b.conv("conv_r", pool, 3, 4, k=1)
    t = b.op("Concat", "concat", [left, right], axis=1)
    t = b.conv("conv_out", t, 8, 4, k=1)
    return b.model("two_branch", t, [1, 4, 8, 8])


@pytest.fixture
def chain_model() -> onnx.ModelProto:
    return make_chain_model()


@pytest.fixture
def diamond_model() -> onnx.ModelProto:
    return make_diamond_model()


@pytest.fixture
def two_branch_model() -> onnx.ModelProto:
    return make_two_branch_model()


@pytest.fixture
def tiny_input() -> np.ndarray:
    """Seeded float32 input of shape TINY_INPUT_SHAPE for the tiny models."""
    return np.random.default_rng(7).standard_normal(TINY_INPUT_SHAPE).astype(np.float32)


@pytest.fixture(scope="session")
def zoo_opgraph() -> Callable[[str], object]:
    """Callable ``name -> OpGraph`` of a registry model, imported once per test session."""
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.zoo import load_model

    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            loaded = load_model(name)
            cache[name] = import_onnx(loaded.model, loaded.name, str(loaded.path))
        return cache[name]

    return get
