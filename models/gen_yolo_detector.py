"""A YOLO-style one-stage detector as ONNX: CSP backbone, SPPF, PAN neck, three detection heads.

The layout of YOLOv5 release 6 (Jocher et al., Ultralytics YOLOv5, github.com/ultralytics/yolov5,
``models/yolov5s.yaml`` scaled to the "n" size: depth multiple 0.33, width multiple 0.25): a backbone of
strided 3x3 convolutions and C3 blocks (two parallel 1x1 branches, one through bottlenecks, concatenated),
SPPF (three chained 5x5 max-pools concatenated), a top-down path (1x1 conv, nearest 2x upsample, concat with
the backbone feature, C3) and a bottom-up path (3x3/2 conv, concat, C3), then one 1x1 detection head per scale
(strides 8, 16 and 32) reshaped to [1, anchors, H, W, 5 + classes] with a sigmoid, as YOLOv5's export writes
them. Every convolution is Conv (batch norm folded) + SiLU. Input 320 x 320 (a common edge resolution); about
1.9 M parameters and 1.1 GFLOPs. Weights: seeded He-normal, not trained values.
"""
from __future__ import annotations

from typing import List

import numpy as np
import onnx

from . import _onnx_builder


INPUT_SIZE = 320
NUM_CLASSES = 80  # COCO
NUM_ANCHORS = 3  # per scale (YOLOv5)
STRIDES = (8, 16, 32)
SEED = 2020


class _Yolo:
    def __init__(self, seed: int) -> None:
        self.b = _onnx_builder.GraphBuilder("yolo_detector", seed)

    def conv(self, name: str, x: str, c_in: int, c_out: int, k: int = 1, stride: int = 1) -> str:
        return self.b.silu(f"{name}.act", self.b.conv(name, x, c_in, c_out, k=k, stride=stride))

    def bottleneck(self, name: str, x: str, c: int, shortcut: bool) -> str:
        y = self.conv(f"{name}.cv2", self.conv(f"{name}.cv1", x, c, c, k=1), c, c, k=3)
        return self.b.op("Add", f"{name}.add", [x, y]) if shortcut else y

    def c3(self, name: str, x: str, c_in: int, c_out: int, n: int, shortcut: bool = True) -> str:
        hidden = c_out // 2
        a = self.conv(f"{name}.cv1", x, c_in, hidden)
        for i in range(n):
            a = self.bottleneck(f"{name}.m{i}", a, hidden, shortcut)
        c = self.conv(f"{name}.cv2", x, c_in, hidden)
        cat = self.b.op("Concat", f"{name}.cat", [a, c], axis=1)
        return self.conv(f"{name}.cv3", cat, 2 * hidden, c_out)

    def sppf(self, name: str, x: str, c_in: int, c_out: int) -> str:
        hidden = c_in // 2
        y = [self.conv(f"{name}.cv1", x, c_in, hidden)]
        for i in range(3):
            y.append(self.b.op("MaxPool", f"{name}.pool{i}", [y[-1]], kernel_shape=[5, 5], strides=[1, 1],
                               pads=[2, 2, 2, 2]))
        cat = self.b.op("Concat", f"{name}.cat", y, axis=1)
        return self.conv(f"{name}.cv2", cat, 4 * hidden, c_out)

    def upsample(self, name: str, x: str) -> str:
        scales = self.b.const(f"{name}.scales", np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32))
        return self.b.op("Resize", name, [x, "", scales], mode="nearest")

    def head(self, name: str, x: str, c_in: int, size: int, output: str) -> str:
        per_anchor = 5 + NUM_CLASSES
        y = self.b.conv(name, x, c_in, NUM_ANCHORS * per_anchor, k=1)
        shape = np.array([1, NUM_ANCHORS, per_anchor, size, size], dtype=np.int64)
        shape = self.b.const(f"{name}.shape", shape)
        y = self.b.op("Reshape", f"{name}.reshape", [y, shape])
        y = self.b.op("Transpose", f"{name}.transpose", [y], perm=[0, 1, 3, 4, 2])
        return self.b.op("Sigmoid", f"{name}.sigmoid", [y], output=output)


def yolo_detector(seed: int = SEED) -> onnx.ModelProto:
    """Build the detector (input ``images`` float32[1, 3, 320, 320]; outputs ``p3``, ``p4``, ``p5`` of shape
    float32[1, 3, S, S, 85] with S = 40, 20, 10).

    Parameters
    ----------
    seed : int
        Seed of the weights (the registry uses the default, so the model and its sha256 are fixed).

    Returns
    -------
    onnx.ModelProto
        Opset 17, IR 8, checked by ``onnx.checker.check_model(full_check=True)``.
    """
    y = _Yolo(seed)
    x = y.conv("backbone.0", "images", 3, 16, k=3, stride=2)
    x = y.conv("backbone.1", x, 16, 32, k=3, stride=2)
    x = y.c3("backbone.2", x, 32, 32, n=1)
    x = y.conv("backbone.3", x, 32, 64, k=3, stride=2)
    p3 = y.c3("backbone.4", x, 64, 64, n=2)
    x = y.conv("backbone.5", p3, 64, 128, k=3, stride=2)
    p4 = y.c3("backbone.6", x, 128, 128, n=3)
    x = y.conv("backbone.7", p4, 128, 256, k=3, stride=2)
    x = y.c3("backbone.8", x, 256, 256, n=1)
    p5 = y.sppf("backbone.9", x, 256, 256)
    # top-down path
    t5 = y.conv("neck.10", p5, 256, 128)
    x = y.b.op("Concat", "neck.12", [y.upsample("neck.11", t5), p4], axis=1)
    x = y.c3("neck.13", x, 256, 128, n=1, shortcut=False)
    t4 = y.conv("neck.14", x, 128, 64)
    x = y.b.op("Concat", "neck.16", [y.upsample("neck.15", t4), p3], axis=1)
    out3 = y.c3("neck.17", x, 128, 64, n=1, shortcut=False)
    # bottom-up path
    x = y.b.op("Concat", "neck.19", [y.conv("neck.18", out3, 64, 64, k=3, stride=2), t4], axis=1)
    out4 = y.c3("neck.20", x, 128, 128, n=1, shortcut=False)
    x = y.b.op("Concat", "neck.22", [y.conv("neck.21", out4, 128, 128, k=3, stride=2), t5], axis=1)
    out5 = y.c3("neck.23", x, 256, 256, n=1, shortcut=False)
    outputs: List[tuple] = []
    for i, (feat, c, stride) in enumerate(zip((out3, out4, out5), (64, 128, 256), STRIDES)):
        size = INPUT_SIZE // stride
        name = f"p{i + 3}"
        y.head(f"detect.{i}", feat, c, size, output=name)
        outputs.append((name, (1, NUM_ANCHORS, size, size, 5 + NUM_CLASSES)))
    return y.b.model([("images", (1, 3, INPUT_SIZE, INPUT_SIZE))], outputs,
                     doc="YOLOv5n-style detector (Ultralytics YOLOv5 r6.0 layout), 320x320, 3 heads; "
                         "seeded He-normal weights")
