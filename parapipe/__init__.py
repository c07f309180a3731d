"""parapipe: map ONNX inference onto heterogeneous SoCs with pipelined, intra-stage parallel mappings.

The package is organised by concern: ``cli`` (the ``parapipe`` command), ``app`` (the library behind each
command), ``graph`` (ONNX import, coarsening, sub-models), ``soc`` (SoC profiles), ``cost`` (the shared analytical
model), ``search`` (mapping search, Pareto fronts, baselines), ``mapping`` (the pareto.json document),
``execution`` (execution plans, PU bindings, board facts), ``measure`` (measuring), ``profiledb`` (the profile
database), ``calibration`` (fitting the cost model), ``remote`` (the SSH transport), ``deploy`` (bundles),
``report`` (plots). ARCHITECTURE.md draws the layers.
"""
import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
