"""MobileNet-v2 (Sandler et al., CVPR 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks") as ONNX.

Architecture of the paper's Table 2 at width 1.0 and 224 x 224 input: a 3x3/2 stem convolution (32 channels),
17 inverted-residual bottlenecks (1x1 expansion by ``t`` + ReLU6, 3x3 depthwise + ReLU6, linear 1x1
projection; a residual Add where stride is 1 and channels match), a 1x1 convolution to 1280 channels, global
average pooling and a 1000-way classifier. Batch norm is folded into the convolutions (as inference exports
have it). About 3.5 M parameters and 0.3 G multiply-adds (paper: 3.4 M, 300 M). Weights: seeded He-normal, not
trained values (shapes, FLOPs and bytes are what the mapping search needs).
"""
from __future__ import annotations

import onnx

from . import _onnx_builder


#: (expansion t, output channels c, repeats n, first stride s): Sandler et al. 2018, Table 2.
INVERTED_RESIDUAL_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                              (6, 160, 3, 2), (6, 320, 1, 1))
INPUT_SHAPE = (1, 3, 224, 224)
NUM_CLASSES = 1000
SEED = 2018


def mobilenet_v2(seed: int = SEED) -> onnx.ModelProto:
    """Build MobileNet-v2 (input ``input`` float32[1, 3, 224, 224], output ``logits`` float32[1, 1000]).

    Parameters
    ----------
    seed : int
        Seed of the weights (the registry uses the default, so the model and its sha256 are fixed).

    Returns
    -------
    onnx.ModelProto
        Opset 17, IR 8, checked by ``onnx.checker.check_model(full_check=True)``.
    """
    b = _onnx_builder.GraphBuilder("mobilenet_v2", seed)
    x = b.relu6("stem.relu6", b.conv("stem.conv", "input", 3, 32, k=3, stride=2))
    c_in = 32
    for i, (t, c, n, s) in enumerate(INVERTED_RESIDUAL_SETTINGS):
        for j in range(n):
            stride = s if j == 0 else 1
            name = f"block{i}_{j}"
            hidden = c_in * t
            y = x
            if t != 1:
                y = b.relu6(f"{name}.expand.relu6", b.conv(f"{name}.expand", y, c_in, hidden, k=1))
            y = b.conv(f"{name}.dw", y, hidden, hidden, k=3, stride=stride, group=hidden)
            y = b.relu6(f"{name}.dw.relu6", y)
            y = b.conv(f"{name}.project", y, hidden, c, k=1)
            if stride == 1 and c_in == c:
                y = b.op("Add", f"{name}.residual", [x, y])
            x, c_in = y, c
    x = b.relu6("head.relu6", b.conv("head.conv", x, c_in, 1280, k=1))
    x = b.op("GlobalAveragePool", "head.pool", [x])
    x = b.op("Flatten", "head.flatten", [x], axis=1)
    w = b.he_weight("classifier.weight", (NUM_CLASSES, 1280), fan_in=1280)
    bias = b.small_bias("classifier.bias", NUM_CLASSES)
    b.op("Gemm", "classifier", [x, w, bias], output="logits", transB=1)
    return b.model([("input", INPUT_SHAPE)], [("logits", (1, NUM_CLASSES))],
                   doc="MobileNet-v2 (Sandler et al., CVPR 2018), width 1.0, 224x224; seeded He-normal "
                       "weights")
