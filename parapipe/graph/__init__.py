"""Operator graphs of ONNX models: import (:mod:`.opgraph`), the model registry (:mod:`.zoo`), coarsening
into blocks (:mod:`.coarsen`) and stage sub-models (:mod:`.extract`).

Typical use::

    from parapipe.graph import load_model, import_onnx
    from parapipe.graph.coarsen import coarsen
    loaded = load_model("inception_v1")
    og = import_onnx(loaded.model, loaded.name, str(loaded.path))
    bg = coarsen(og, max_blocks=40)

The names below load their module on first use (PEP 562), so that listing the registry (``parapipe models``)
imports neither onnx nor numpy. ``parapipe.graph.coarsen`` is the submodule; the function is
``parapipe.graph.coarsen.coarsen``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parapipe.graph.coarsen import Block, BlockGraph, widest_parallel_section
    from parapipe.graph.extract import SubModel, extract_submodel
    from parapipe.graph.opgraph import OpGraph, Operator, TensorInfo, import_onnx
    from parapipe.graph.zoo import LoadedModel, ModelRef, ZooEntry, list_models, load_model, resolve_model

__all__ = [
    "Block", "BlockGraph", "widest_parallel_section", "SubModel", "extract_submodel", "OpGraph",
    "Operator", "TensorInfo", "import_onnx", "LoadedModel", "ModelRef", "ZooEntry", "list_models",
    "load_model", "resolve_model",
]

#: Where each public name lives.
_HOME = {**dict.fromkeys(("Block", "BlockGraph", "widest_parallel_section"), "coarsen"),
         **dict.fromkeys(("SubModel", "extract_submodel"), "extract"),
         **dict.fromkeys(("OpGraph", "Operator", "TensorInfo", "import_onnx"), "opgraph"),
         **dict.fromkeys(("LoadedModel", "ModelRef", "ZooEntry", "list_models", "load_model", "resolve_model"),
                         "zoo")}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
