"""SoC profiles: processing units, their costs and powers, transfer costs, loaded from soc_profiles/*.yaml.

>>> from parapipe.soc import load_soc
>>> soc = load_soc("amlogic_a311d")
>>> soc.pu_names
['big', 'little', 'gpu', 'npu']

The names below load their module on first use (PEP 562), so that a light submodule (:mod:`.catalog`, which
``parapipe socs`` uses) runs without pydantic and numpy.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parapipe.soc.catalog import list_socs
    from parapipe.soc.loader import load_soc, save_soc, soc_to_yaml_dict
    from parapipe.soc.profile import PU, Execution, SoC

__all__ = ["PU", "Execution", "SoC", "load_soc", "list_socs", "save_soc", "soc_to_yaml_dict"]

#: Where each public name lives.
_HOME = {"PU": "profile", "Execution": "profile", "SoC": "profile", "load_soc": "loader", "save_soc": "loader",
         "soc_to_yaml_dict": "loader", "list_socs": "catalog"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
