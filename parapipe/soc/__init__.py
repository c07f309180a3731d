"""SoC profiles: processing units, their costs and powers, transfer costs, loaded from soc_profiles/*.yaml.

>>> from parapipe.soc import load_soc
>>> soc = load_soc("amlogic_a311d")
>>> soc.pu_names
['big', 'little', 'gpu', 'npu']
"""
from parapipe.soc.profile import PU, Execution, SoC, list_socs, load_soc

__all__ = ["PU", "Execution", "SoC", "load_soc", "list_socs"]
