"""A small graph builder shared by the model generators of this folder (``gen_*.py``).

Weights are drawn from a seeded :class:`numpy.random.Generator` (He-normal for convolutions and matrix
products, He et al., ICCV 2015, "Delving deep into rectifiers", section 2.2: std = sqrt(2 / fan_in)), so a
generator returns byte-identical models on every call. Models are built with ``onnx.helper`` at opset 17 / IR
version 8 (opset 17 is the first with LayerNormalization, per the ONNX operator changelog; IR 8 is what onnx
1.12, the first release with opset 17, writes: ``onnx.helper.VERSION_TABLE``) and checked with
``onnx.checker.check_model(full_check=True)`` before they are returned.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Opset and IR version of every generated model (see the module docstring).
OPSET = 17
IR_VERSION = 8


class GraphBuilder:
    """Accumulates nodes and initializers; every node gets a unique name and one named output.

    Parameters
    ----------
    name : str
        Graph name (also the prefix of nothing; node names are given by the callers).
    seed : int
        Seed of the weight generator.
    """

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self._names: Dict[str, int] = {}

    # -- naming and constants -------------------------------------------------------------------------------
    def unique(self, base: str) -> str:
        """``base``, or ``base_<n>`` if ``base`` was used before."""
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def const(self, name: str, value: np.ndarray) -> str:
        """Add ``value`` as an initializer called ``name`` (made unique) and return its name."""
        name = self.unique(name)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def he_weight(self, name: str, shape: Tuple[int, ...], fan_in: int) -> str:
        """float32 weight of ``shape`` with std sqrt(2 / fan_in) (He et al. 2015)."""
        value = self.rng.standard_normal(shape) * math.sqrt(2.0 / max(fan_in, 1))
        return self.const(name, value.astype(np.float32))

    def small_bias(self, name: str, n: int) -> str:
        """float32 bias of ``n`` elements, std 0.01 (a parapipe choice: keeps activations near zero mean)."""
        return self.const(name, (self.rng.standard_normal((n,)) * 0.01).astype(np.float32))

    # -- nodes -----------------------------------------------------------------------------------------------
    def op(self, op_type: str, name: str, inputs: Sequence[str], output: Optional[str] = None,
           **attrs) -> str:
        """Add one node; returns its output name: ``output`` if given (a graph output), else
        ``<node name>_out``."""
        name = self.unique(name)
        outs = [output or f"{name}_out"]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0]

    def conv(self, name: str, x: str, c_in: int, c_out: int, k: int = 3, stride: int = 1,
             group: int = 1) -> str:
        """Conv with bias (batch norm folded in, as exported inference graphs have it), 'same' padding."""
        w = self.he_weight(f"{name}.weight", (c_out, c_in // group, k, k), fan_in=(c_in // group) * k * k)
        b = self.small_bias(f"{name}.bias", c_out)
        return self.op("Conv", name, [x, w, b], kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=group, dilations=[1, 1])

    def linear(self, name: str, x: str, d_in: int, d_out: int) -> str:
        """``x @ W + b`` as MatMul + Add (the form torch exports for ``nn.Linear`` on 3-D inputs)."""
        w = self.he_weight(f"{name}.weight", (d_in, d_out), fan_in=d_in)
        b = self.small_bias(f"{name}.bias", d_out)
        y = self.op("MatMul", f"{name}.matmul", [x, w])
        return self.op("Add", f"{name}.add", [y, b])

    def relu6(self, name: str, x: str) -> str:
        """Clip(x, 0, 6) (ReLU6, Sandler et al. 2018)."""
        lo = self.const("clip_min", np.array(0.0, dtype=np.float32))
        hi = self.const("clip_max", np.array(6.0, dtype=np.float32))
        return self.op("Clip", name, [x, lo, hi])

    def silu(self, name: str, x: str) -> str:
        """x * Sigmoid(x) (SiLU, as YOLOv5 exports it)."""
        s = self.op("Sigmoid", f"{name}.sigmoid", [x])
        return self.op("Mul", f"{name}.mul", [x, s])

    # -- model -----------------------------------------------------------------------------------------------
    def model(self, inputs: Sequence[Tuple[str, Sequence[int]]], outputs: Sequence[Tuple[str, Sequence[int]]],
              doc: str, producer: str = "parapipe-models") -> onnx.ModelProto:
        """The checked model with float32 ``inputs``/``outputs`` given as ``(name, shape)``.

        Raises
        ------
        onnx.checker.ValidationError
            The graph is invalid (a bug in the generator).
        """
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs],
            self.inits, doc_string=doc)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name=producer, doc_string=doc)
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model
