"""The mapping document (``pareto.json``): typed model, writer from a search result, one reader/validator.

- :mod:`.model`: :class:`ParetoDoc`, :class:`Point`, :class:`Stage`, :class:`SocRef`, ...
- :mod:`.io`: :func:`doc_from_result`, :func:`write_pareto`, :func:`read_pareto`, :func:`select_point`.
"""
from parapipe.mapping.io import check_model, doc_from_result, parse_pareto, read_pareto, select_point, write_pareto
from parapipe.mapping.model import (SCHEMA_VERSION, SELECTORS, STRATEGIES, Bounds, ModelRef, ParetoDoc, Point,
                                    PointMapping, PURef, Replica, SocRef, Stage, stages_text)

__all__ = ["SCHEMA_VERSION", "SELECTORS", "STRATEGIES", "Bounds", "ModelRef", "ParetoDoc", "Point",
           "PointMapping", "PURef", "Replica", "SocRef", "Stage", "stages_text", "check_model", "doc_from_result", "parse_pareto", "read_pareto",
           "select_point", "write_pareto"]
