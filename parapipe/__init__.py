"""parapipe: map ONNX inference onto heterogeneous SoCs with pipelined, intra-stage parallel mappings.

The package is organised by concern: ``graph`` (ONNX import, coarsening, sub-models), ``soc`` (SoC profiles),
``cost`` (the shared analytical model), ``search`` (mapping search, Pareto fronts, baselines), ``runtime``
(pipelined ONNX Runtime executor), ``measure`` (measuring), ``profiledb``
(the profile database), ``calibration`` (fitting the cost model), ``deploy`` (SSH hosts), ``report`` (plots).
"""
import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
