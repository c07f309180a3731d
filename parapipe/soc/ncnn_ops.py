"""ONNX operator types a PU whose runtime is ncnn runs (:meth:`parapipe.soc.profile.PU.supports`).

Derived by converting, not from pnnx's operator table: ``python -m experiments.ncnn_ops`` cuts every operator
node of nine registry models (squeezenet, inception_v1, inception_v2, mobilenet_v2, resnet50, densenet121,
shufflenet, transformer_encoder, yolo_detector; up to three nodes per op type) out as a one-node sub-model,
converts it with pnnx 20261020 and runs it with ncnn 1.0.20261020 against ONNX Runtime on seeded inputs
(``parapipe.execution.ncnn_convert.convert``). An op type is listed when every tried node converts and
matches. Left out, with what that run reported: AveragePool and Reshape (ncnn cannot load the layer pnnx writes
for those nodes), Softmax (squeezenet's opset-8 Softmax comes out over another axis), Transpose (shufflenet's
5-D channel shuffle has no batch axis ncnn can drop), Dropout (pnnx fails on the node). Op types none of those
models has are left out too: unknown means not supported. Re-run the script after upgrading pnnx or ncnn.
Stages are converted again at run and deploy time and checked the same way before anything is uploaded.
"""
from __future__ import annotations

__all__ = ["NCNN_OPS"]

#: Op types (ONNX domain) pnnx converts into ncnn models that compute what ONNX Runtime computes.
NCNN_OPS = frozenset({
    "Add", "BatchNormalization", "Clip", "Concat", "Conv", "Div", "Erf", "Flatten", "Gemm", "GlobalAveragePool",
    "LRN", "LayerNormalization", "MatMul", "MaxPool", "Mul", "Relu", "Resize", "Sigmoid", "Sum",
})
