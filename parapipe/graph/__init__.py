"""Operator graphs of ONNX models: import (:mod:`.opgraph`), the model registry (:mod:`.zoo`), coarsening
into blocks (:mod:`.coarsen`) and stage sub-models (:mod:`.extract`).

Typical use::

    from parapipe.graph import load_model, import_onnx, coarsen
    loaded = load_model("inception_v1")
    og = import_onnx(loaded.model, loaded.name, str(loaded.path))
    bg = coarsen(og, max_blocks=40)
"""
from parapipe.graph.coarsen import Block, BlockGraph, coarsen, widest_parallel_section
from parapipe.graph.extract import SubModel, extract_submodel
from parapipe.graph.opgraph import OpGraph, Operator, TensorInfo, import_onnx
from parapipe.graph.zoo import LoadedModel, ModelRef, ZooEntry, list_models, load_model, resolve_model

__all__ = [
    "Block", "BlockGraph", "coarsen", "widest_parallel_section", "SubModel", "extract_submodel", "OpGraph",
    "Operator", "TensorInfo", "import_onnx", "LoadedModel", "ModelRef", "ZooEntry", "list_models",
    "load_model", "resolve_model",
]
