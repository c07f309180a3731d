"""Which ONNX operator types pnnx converts into ncnn models that compute what ONNX Runtime computes.

Re-derives ``parapipe.soc.ncnn_ops.NCNN_OPS``: every operator node of the registry models below (up to
``PER_TYPE`` per op type) is cut out as a one-node sub-model and converted with
``parapipe.execution.ncnn_convert.convert`` (pnnx, then ncnn against ONNX Runtime on seeded inputs). An op type
is listed when every tried node converts and matches. Run: ``python -m experiments.ncnn_ops`` (needs
``pip install ncnn`` and ``pip install --no-deps pnnx``; about a minute on two cores).
"""
from __future__ import annotations

import collections
import sys

from parapipe.execution.ncnn_convert import NcnnConversionError, convert
from parapipe.graph.coarsen import coarsen  # noqa: F401  (import order as the CLI)
from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import import_onnx
from parapipe.graph.zoo import load_model

MODELS = ("squeezenet", "inception_v1", "inception_v2", "mobilenet_v2", "resnet50", "densenet121", "shufflenet",
          "transformer_encoder", "yolo_detector")
PER_TYPE = 3


def main() -> int:
    ok: dict = collections.defaultdict(bool)
    why: dict = {}
    for name in MODELS:
        og = import_onnx(load_model(name).model, name=name)
        tried: dict = collections.Counter()
        for op in og.topo_order:
            op_type = og.node(op).op_type
            if tried[op_type] >= PER_TYPE or why.get(op_type):
                continue
            tried[op_type] += 1
            try:
                convert(extract_submodel(og, [op]).model, f"{name} {op} ({op_type})")
                ok[op_type] = True
            except NcnnConversionError as exc:
                why[op_type] = str(exc)
    for op_type in sorted(why):
        print(f"no  {op_type}: {why[op_type][:240]}")
    print("NCNN_OPS =", sorted(t for t in ok if t not in why))
    return 0


if __name__ == "__main__":
    sys.exit(main())
