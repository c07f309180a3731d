"""SoC profiles: processing units, their costs and powers, transfer costs, loaded from soc_profiles/*.yaml.

>>> from parapipe.soc import load_soc
>>> soc = load_soc("amlogic_a311d")
>>> soc.pu_names
['big', 'little', 'gpu', 'npu']
"""
from parapipe.soc.loader import list_socs, load_soc, save_soc, soc_to_yaml_dict
from parapipe.soc.profile import PU, Execution, SoC

__all__ = ["PU", "Execution", "SoC", "load_soc", "list_socs", "save_soc", "soc_to_yaml_dict"]
