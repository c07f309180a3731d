"""The mapping document (``pareto.json``): typed model, writer from a search result, one reader/validator.

- :mod:`.model`: :class:`ParetoDoc`, :class:`Point`, :class:`Stage`, :class:`SocRef`, ...
- :mod:`.io`: :func:`doc_from_result` (search result -> document), :func:`write_pareto`, :func:`read_pareto`,
  :func:`select_point`; :func:`read_workload` / :func:`read_mapping` for workload documents.
- :mod:`.workload`: :class:`WorkloadDoc` (several models co-mapped on one SoC; :meth:`WorkloadDoc.model_view`
  gives each model's part as a :class:`ParetoDoc`).
- :mod:`.index`: :func:`~parapipe.mapping.index.mapping_from_point`,
  :func:`~parapipe.mapping.index.mapping_from_stages`, :func:`~parapipe.mapping.index.parse_pu_list`
  (names -> the index form the cost model evaluates, :mod:`parapipe.cost.mapping`).
"""
from parapipe.mapping.io import (check_model, doc_from_result, parse_mapping, parse_pareto, parse_workload,
                                 read_mapping, read_pareto, read_workload, select_point, select_workload_point,
                                 write_pareto)
from parapipe.mapping.workload import WorkloadDoc, WorkloadModel, WorkloadPoint
from parapipe.mapping.model import (SCHEMA_VERSION, SELECTORS, STRATEGIES, DocBounds, ModelId, ParetoDoc, Point,
                                    PointMapping, PURef, Replica, SocRef, Stage, stages_text)

__all__ = ["SCHEMA_VERSION", "SELECTORS", "STRATEGIES", "DocBounds", "ModelId", "ParetoDoc", "Point",
           "PointMapping", "PURef", "Replica", "SocRef", "Stage", "stages_text", "check_model", "doc_from_result", "parse_pareto", "read_pareto",
           "select_point", "write_pareto", "parse_mapping", "parse_workload", "read_mapping", "read_workload",
           "select_workload_point", "WorkloadDoc", "WorkloadModel", "WorkloadPoint"]
