"""Operator classes: the groups of ONNX op types that share one efficiency value in a PU profile.

A PU's ``efficiency`` maps each class to the fraction of its ``peak_flops`` that operators of that class achieve
(the compute ceiling of the roofline, :mod:`parapipe.cost.roofline`). The classes and the op types in them are this project's choice;
the bundled profiles were calibrated with exactly this classification (soc_profiles/README.md, "Calibration").
"""
from __future__ import annotations

from typing import Optional

__all__ = ["OP_CLASSES", "OP_CLASS_OF_TYPE", "op_class"]

#: The efficiency keys of a PU profile, in the order they are written (``other`` is the fallback for all).
OP_CLASSES = ("conv", "gemm", "depthwise", "pool", "elementwise", "normalization", "other")

#: ONNX op type → class for the op types that are not ``other``. ``Conv``/``ConvTranspose`` become
#: ``depthwise`` when ``group`` equals the input channel count (see :func:`op_class`).
OP_CLASS_OF_TYPE = {
    "Conv": "conv", "ConvTranspose": "conv", "QLinearConv": "conv", "ConvInteger": "conv",
    "Gemm": "gemm", "MatMul": "gemm", "QLinearMatMul": "gemm", "MatMulInteger": "gemm", "Einsum": "gemm",
    "MaxPool": "pool", "AveragePool": "pool", "GlobalAveragePool": "pool", "GlobalMaxPool": "pool",
    "LpPool": "pool", "GlobalLpPool": "pool", "MaxRoiPool": "pool", "RoiAlign": "pool",
    "BatchNormalization": "normalization", "InstanceNormalization": "normalization", "LRN": "normalization",
    "LayerNormalization": "normalization", "GroupNormalization": "normalization",
    "LpNormalization": "normalization", "MeanVarianceNormalization": "normalization",
    "Relu": "elementwise", "LeakyRelu": "elementwise", "PRelu": "elementwise", "Elu": "elementwise",
    "Selu": "elementwise", "Sigmoid": "elementwise", "HardSigmoid": "elementwise", "HardSwish": "elementwise",
    "Tanh": "elementwise", "Clip": "elementwise", "Softplus": "elementwise", "Gelu": "elementwise",
    "Add": "elementwise", "Sub": "elementwise", "Mul": "elementwise", "Div": "elementwise",
    "Sum": "elementwise", "Max": "elementwise", "Min": "elementwise", "Mean": "elementwise",
    "Pow": "elementwise", "Sqrt": "elementwise", "Exp": "elementwise", "Log": "elementwise",
    "Abs": "elementwise", "Neg": "elementwise", "Reciprocal": "elementwise", "Erf": "elementwise",
    "Dropout": "elementwise",
}


def op_class(op_type: str, *, group: int = 1, in_channels: Optional[int] = None) -> str:
    """Efficiency class of an operator.

    Parameters
    ----------
    op_type : str
        ONNX op type, e.g. ``"Conv"``.
    group : int
        The ``group`` attribute of a convolution (1 otherwise).
    in_channels : int, optional
        Input channel count of a convolution; with ``group == in_channels > 1`` it is ``"depthwise"``.

    Returns
    -------
    str
        One of :data:`OP_CLASSES`; ``"other"`` for op types not in :data:`OP_CLASS_OF_TYPE` (data movement such
        as Concat, Reshape, Softmax).

    Examples
    --------
    >>> op_class("Conv"), op_class("Conv", group=32, in_channels=32), op_class("Concat")
    ('conv', 'depthwise', 'other')
    """
    cls = OP_CLASS_OF_TYPE.get(op_type, "other")
    if cls == "conv" and group > 1 and in_channels is not None and group == in_channels:
        return "depthwise"
    return cls
