"""Floating-point operation counts of ONNX operators from their shapes and attributes.

Conventions (every constant below is a convention of parapipe, not a measurement; the roofline calibration
in ``parapipe.cost`` absorbs the per-op-type constant factor, so only the relative size within an op type has
to be right):

* one multiply-add (MAC) = :data:`MAC_FLOPS` = 2 FLOPs (one multiply, one add). Papers that count
  "FLOPs" as multiply-adds report half: He et al. 2016 (arXiv:1512.03385), Table 1, gives ResNet-50 as
  3.8e9 multiply-adds; this module gives about 8.2e9 FLOPs for the same network (convolutions plus BN, ReLU,
  pooling and the classifier);
* simple element-wise ops (add, compare, max, ReLU ...) = 1 FLOP per output element;
* exp/log/trigonometric-based ops = :data:`TRANSCENDENTAL_FLOPS` = 4 FLOPs per element (parapipe convention:
  a polynomial evaluation of a few multiply-adds; only the ratio to other ops of the same type matters);
* data-movement ops (Concat, Reshape, Transpose, Slice, Pad, Resize, Gather, Cast ...) = 0 FLOPs: their cost
  is the bytes they move, which the cost model charges separately.

Sequence, transformer and ONNX Runtime contrib ops (Attention, LSTM/GRU/RNN, Einsum, RMSNormalization,
``com.microsoft`` FusedMatMul, BiasGelu, SkipLayerNormalization ...) have their formulas in
:mod:`parapipe.graph.flops_nn`. Op types without any formula count 0 FLOPs, log one line per op type and are
reported by :func:`has_flop_formula` (``parapipe inspect`` and pareto.json list them).
"""
from __future__ import annotations

import logging
import math
from typing import Any, Optional, Sequence

import onnx
from onnx import helper

import parapipe.graph.flops_nn as flops_nn

__all__ = ["MAC_FLOPS", "TRANSCENDENTAL_FLOPS", "DATA_MOVEMENT_OPS", "op_flops", "has_flop_formula",
           "is_data_movement"]

logger = logging.getLogger(__name__)

#: FLOPs per multiply-add (the model-zoo convention, see the module docstring).
MAC_FLOPS = 2
#: FLOPs per element of an exp/log/trigonometric function (parapipe convention, see the module docstring).
TRANSCENDENTAL_FLOPS = 4

#: Op types that only move or re-label data: 0 FLOPs (their bytes are charged by the cost model).
DATA_MOVEMENT_OPS = frozenset({
    "Concat", "Reshape", "Transpose", "Flatten", "Identity", "Dropout", "Unsqueeze", "Squeeze", "Slice",
    "Split", "SplitToSequence", "Pad", "Resize", "Upsample", "Gather", "GatherElements", "GatherND",
    "Scatter", "ScatterElements", "ScatterND", "Shape", "Size", "Cast", "CastLike", "Expand", "Tile",
    "DepthToSpace", "SpaceToDepth", "ConstantOfShape", "Constant", "Range", "Compress", "ReverseSequence",
    "EyeLike", "Trilu", "OneHot", "NonZero", "Optional", "OptionalGetElement", "OptionalHasElement",
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceLength",
    "ConcatFromSequence", "Col2Im", "CenterCropPad", "BitCast", "MaxUnpool", "TensorScatter", "Unique",
    "NonMaxSuppression",
})

#: FLOPs per output element of element-wise ops (1 for simple arithmetic/compare; see module docstring).
_PER_OUTPUT_ELEMENT: dict[str, float] = {
    **{op: 1.0 for op in (
        "Relu", "LeakyRelu", "PRelu", "Clip", "Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Not", "And",
        "Or", "Xor", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Where", "Add", "Sub",
        "Mul", "Div", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
        "ThresholdedRelu", "Shrink", "IsNaN", "IsInf", "Reciprocal", "Sqrt",
    )},
    # x*alpha + beta, then clip: 3 simple ops.
    "HardSigmoid": 3.0,
    # HardSigmoid then a multiply.
    "HardSwish": 4.0,
    # scale then shift per element once mean/var/scale/bias are folded (inference form).
    "BatchNormalization": 2.0,
    # (x - zero_point) * scale or x / scale + zero_point, then round/clip.
    "QuantizeLinear": 3.0, "DequantizeLinear": 2.0, "DynamicQuantizeLinear": 4.0,
    # mean (1), variance (2: subtract, square-accumulate), normalise (2), scale+shift (2).
    "InstanceNormalization": 7.0, "LayerNormalization": 7.0, "GroupNormalization": 7.0,
    "MeanVarianceNormalization": 5.0, "LpNormalization": 3.0,
    # max (1) + subtract (1) + exp + sum (1) + divide (1).
    "Softmax": 4.0 + TRANSCENDENTAL_FLOPS, "LogSoftmax": 4.0 + TRANSCENDENTAL_FLOPS, "Hardmax": 1.0,
    # transcendental functions, plus the simple ops around them.
    **{op: float(TRANSCENDENTAL_FLOPS) for op in (
        "Exp", "Log", "Tanh", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
        "Acosh", "Atanh", "Pow", "Softsign",
    )},
    "Sigmoid": TRANSCENDENTAL_FLOPS + 2.0,  # 1 / (1 + exp(-x))
    "Softplus": TRANSCENDENTAL_FLOPS * 2.0 + 1.0,  # log(1 + exp(x))
    "Elu": TRANSCENDENTAL_FLOPS + 2.0, "Selu": TRANSCENDENTAL_FLOPS + 3.0, "Celu": TRANSCENDENTAL_FLOPS + 3.0,
    "Gelu": TRANSCENDENTAL_FLOPS + 4.0, "Mish": TRANSCENDENTAL_FLOPS * 3.0 + 1.0,
}

#: FLOPs per INPUT element of reductions (one accumulate/compare per element read).
_PER_INPUT_ELEMENT = frozenset({
    "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
    "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",
    "ArgMin", "CumSum", "TopK",
})

_warned_unknown: set[str] = set()

Shape = Optional[Sequence[int]]


def _numel(shape: Shape) -> int:
    return int(math.prod(shape)) if shape is not None else 0


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _conv_flops(node: onnx.NodeProto, in_shapes: Sequence[Shape], out_shapes: Sequence[Shape],
                w_index: int, bias_index: Optional[int]) -> float:
    """Conv family: MAC_FLOPS x output elements x (Cin/group x kernel area) [+ 1 per output for the bias]."""
    w = in_shapes[w_index] if len(in_shapes) > w_index else None
    out = out_shapes[0] if out_shapes else None
    if w is None or out is None:
        return 0.0
    flops = MAC_FLOPS * _numel(out) * _numel(w[1:])
    if bias_index is not None and len(in_shapes) > bias_index and in_shapes[bias_index] is not None:
        flops += _numel(out)
    return float(flops)


def _conv_transpose_flops(in_shapes: Sequence[Shape], out_shapes: Sequence[Shape]) -> float:
    """ConvTranspose: every input element scatters into (Cout/group x kernel area) outputs."""
    x, w = in_shapes[0], in_shapes[1] if len(in_shapes) > 1 else None
    if x is None or w is None:
        return 0.0
    flops = MAC_FLOPS * _numel(x) * _numel(w[1:])
    if len(in_shapes) > 2 and in_shapes[2] is not None and out_shapes and out_shapes[0] is not None:
        flops += _numel(out_shapes[0])
    return float(flops)


def _gemm_flops(node: onnx.NodeProto, in_shapes: Sequence[Shape], out_shapes: Sequence[Shape]) -> float:
    """Gemm: MAC_FLOPS x M x N x K, plus M x N for adding C."""
    a = in_shapes[0]
    out = out_shapes[0] if out_shapes else None
    if a is None or out is None or len(a) != 2:
        return 0.0
    k = a[0] if _attrs(node).get("transA", 0) else a[1]
    flops = MAC_FLOPS * _numel(out) * k
    if len(in_shapes) > 2 and in_shapes[2] is not None:
        flops += _numel(out)
    return float(flops)


def _matmul_flops(in_shapes: Sequence[Shape], out_shapes: Sequence[Shape]) -> float:
    """MatMul (numpy semantics): MAC_FLOPS x output elements x K (the shared dimension)."""
    a = in_shapes[0]
    out = out_shapes[0] if out_shapes else None
    if a is None or out is None or len(a) == 0:
        return 0.0
    return float(MAC_FLOPS * _numel(out) * a[-1])


def _pool_flops(node: onnx.NodeProto, out_shapes: Sequence[Shape]) -> float:
    """Windowed pooling: one compare/add per kernel element per output element."""
    out = out_shapes[0] if out_shapes else None
    kernel = _attrs(node).get("kernel_shape", [])
    return float(_numel(out) * math.prod(kernel)) if out is not None else 0.0


def _lrn_flops(node: onnx.NodeProto, out_shapes: Sequence[Shape]) -> float:
    """LRN: ``size`` square-accumulates (MACs) + scale, add bias, pow, divide per output element."""
    out = out_shapes[0] if out_shapes else None
    size = int(_attrs(node).get("size", 1))
    return float(_numel(out) * (MAC_FLOPS * size + 3 + TRANSCENDENTAL_FLOPS)) if out is not None else 0.0


def op_flops(node: onnx.NodeProto, in_shapes: Sequence[Shape], out_shapes: Sequence[Shape]) -> float:
    """FLOPs of one inference of ``node``.

    Parameters
    ----------
    node : onnx.NodeProto
        The operator (attributes are read from it).
    in_shapes, out_shapes : sequence of (tuple of int or None)
        Shapes aligned with ``node.input`` / ``node.output`` (``None`` for an absent optional input/output).

    Returns
    -------
    float
        FLOPs, multiply-add counted as :data:`MAC_FLOPS` = 2 (see the module docstring for every convention).
        Unknown op types give 0.0 and log one warning per op type.
    """
    op = node.op_type
    nn_formula = flops_nn.formula(node)
    if nn_formula is not None:
        return float(nn_formula(node, in_shapes, out_shapes))
    if node.domain not in ("", "ai.onnx"):
        return _unknown(node)
    if op in DATA_MOVEMENT_OPS:
        return 0.0
    if op == "Conv":
        return _conv_flops(node, in_shapes, out_shapes, 1, 2)
    if op == "ConvInteger":
        return _conv_flops(node, in_shapes, out_shapes, 1, None)
    if op == "QLinearConv":
        return _conv_flops(node, in_shapes, out_shapes, 3, 8)
    if op == "ConvTranspose":
        return _conv_transpose_flops(in_shapes, out_shapes)
    if op == "Gemm":
        return _gemm_flops(node, in_shapes, out_shapes)
    if op in ("MatMul", "MatMulInteger"):
        return _matmul_flops(in_shapes, out_shapes)
    if op == "QLinearMatMul":
        return _matmul_flops([in_shapes[0]], out_shapes)
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return _pool_flops(node, out_shapes)
    if op == "LRN":
        return _lrn_flops(node, out_shapes)
    if op in ("Sum", "Max", "Min", "Mean"):
        n_in = sum(1 for s in in_shapes if s is not None)
        per = n_in if op == "Mean" else max(n_in - 1, 1)
        return float(per * _numel(out_shapes[0] if out_shapes else None))
    if op in _PER_OUTPUT_ELEMENT:
        return _PER_OUTPUT_ELEMENT[op] * _numel(out_shapes[0] if out_shapes else None)
    if op in _PER_INPUT_ELEMENT:
        return float(_numel(in_shapes[0] if in_shapes else None))
    return _unknown(node)


def _unknown(node: onnx.NodeProto) -> float:
    key = f"{node.domain or 'ai.onnx'}::{node.op_type}"
    if key not in _warned_unknown:
        _warned_unknown.add(key)
        logger.info("no FLOP formula for op type %s (domain %s): counting 0 FLOPs (listed by inspect and in "
                    "pareto.json)", node.op_type, node.domain or "ai.onnx")
    return 0.0


_SHAPE_FORMULA_OPS = frozenset({
    "Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger", "QLinearMatMul",
    "MaxPool", "AveragePool", "LpPool", "LRN", "Sum", "Max", "Min", "Mean"})


def has_flop_formula(node: onnx.NodeProto) -> bool:
    """True if :func:`op_flops` has a formula for ``node``'s op type and domain (0 for data movement counts as
    a formula); False for the op types it counts as 0 FLOPs for want of one."""
    if flops_nn.formula(node) is not None:
        return True
    if node.domain not in ("", "ai.onnx"):
        return False
    op = node.op_type
    return (op in DATA_MOVEMENT_OPS or op in _SHAPE_FORMULA_OPS or op in _PER_OUTPUT_ELEMENT
            or op in _PER_INPUT_ELEMENT)


def is_data_movement(op_type: str) -> bool:
    """True for op types that only move data (0 FLOPs by definition): see :data:`DATA_MOVEMENT_OPS`."""
    return op_type in DATA_MOVEMENT_OPS
