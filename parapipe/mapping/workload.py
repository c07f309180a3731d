"""The typed workload document: several models co-mapped onto one SoC, one front.

A workload is a list of models, each with a **rate**: frames of that model per *workload frame* (``--rates 3,1``:
three frames of the first model and one of the second per workload frame). A point maps every model (one
:class:`~parapipe.mapping.model.PointMapping` per model, the same stages, blocks and PUs as a single-model
point) and gives the workload's figures: workload frames per second, the latency axis, energy per workload
frame, and each model's own latency. The document is written by ``parapipe optimize A B ...`` as pareto.json;
:func:`parapipe.mapping.io.read_workload` reads it (:func:`parapipe.mapping.io.read_pareto` refuses it in one
line, and a single-model document is refused by ``read_workload`` the same way).

Schema (``schema_version`` 2, ``kind`` ``"workload"``)::

    {"schema_version": 2, "kind": "workload",
     "soc": {...as in a single-model document...},
     "models": [{"model": {"name", "sha256"}, "input_shapes": {input: [dims]} | null, "rate": > 0,
                 "latency_bound_s": s | null, "blocks": {block: [operator, ...]} (topological order),
                 "bounds": {"period_lb_s", "latency_lb_s"} | null (the model's own single-model bounds),
                 "search": {...}, "cost_notes": {...}}],
     "latency_axis": "max" | "weighted-mean",
     "objectives": [...], "search": {...}, "bounds": {"period_lb_s", "latency_lb_s"},
     "points": [{"id", "strategy" (parapipe | separate | split | whole), "pareto", "origin",
                 "throughput_per_s", "period_s", "latency_s", "energy_j", "period_gap", "latency_gap",
                 "latency_s_per_model": {model: s}, "energy_j_per_model": {model: J},
                 "pu_busy_s": {pu: s}, "pu_busy_s_per_model": {model: {pu: s}},
                 "mappings": {model: {"stages": [...as in a single-model point...]}}}],
     "cost_notes": {...}}

Figures: ``period_s`` is the time per workload frame, ``throughput_per_s`` its inverse; ``latency_s`` is the
latency axis: the maximum of the models' latencies (``max``) or their rate-weighted mean (``weighted-mean``);
``energy_j`` is per workload frame (every model's active energy times its rate, plus the board's idle and static
power over one period, counted once); ``energy_j_per_model`` is each model's active energy per inference of that
model; ``pu_busy_s`` is each PU's busy time per workload frame and ``pu_busy_s_per_model`` each PU's busy time per
inference of one model. ``bounds`` are lower bounds of the workload problem (period per workload frame, latency
axis); ``*_gap`` as in a single-model document.

:meth:`WorkloadDoc.model_view` turns one model's part into an ordinary single-model :class:`ParetoDoc` (the
model's blocks, input shapes and mapping of every point, figures of that model: period ``period_s / rate``,
throughput ``rate * throughput_per_s``), so what runs a single-model point runs each model's part unchanged.

>>> from parapipe.mapping.model import SocRef, ModelId, DocBounds
>>> st = {"pus": ["cpu0"], "blocks": ["b0"], "time_s": 0.01}
>>> doc = WorkloadDoc(soc=SocRef(name="host"), bounds=DocBounds(period_lb_s=0.01, latency_lb_s=0.01),
...     models=[WorkloadModel(model=ModelId(name="a", sha256="x"), rate=2, blocks={"b0": ["Conv"]}),
...             WorkloadModel(model=ModelId(name="b", sha256="y"), rate=1, blocks={"b0": ["Gemm"]})],
...     points=[WorkloadPoint(id="w0", strategy="parapipe", throughput_per_s=20, period_s=0.05, latency_s=0.02,
...                           energy_j=0.1, latency_s_per_model={"a": 0.01, "b": 0.02},
...                           mappings={"a": {"stages": [st]}, "b": {"stages": [st]}})])
>>> doc.model_names()
['a', 'b']
>>> view = doc.model_view("a")
>>> view.model.name, view.points[0].period_s, view.points[0].throughput_per_s
('a', 0.025, 40.0)
"""
from __future__ import annotations

from typing import Any, Dict, Final, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parapipe.mapping.model import (SCHEMA_VERSION, DocBounds, ModelId, ParetoDoc, Point, PointMapping, SocRef,
                                    check_point_stages)
from parapipe.soc.validation import FieldProblem

__all__ = ["WORKLOAD_KIND", "LATENCY_AXES", "WorkloadModel", "WorkloadPoint", "WorkloadDoc", "latency_axis_value"]

#: The ``kind`` that tells a workload document from a single-model one (which has no ``kind``).
WORKLOAD_KIND: Final = "workload"
#: The front's latency axis: the largest model latency, or the rate-weighted mean of the model latencies.
LATENCY_AXES = ("max", "weighted-mean")

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
_FIX = "re-run 'parapipe optimize' with the workload's models, or fix the hand edit"


def latency_axis_value(axis: str, latencies_s: Dict[str, float], rates: Dict[str, float]) -> float:
    """The latency axis of a workload point, s: ``max`` of ``latencies_s`` or their mean weighted by ``rates``.

    >>> latency_axis_value("weighted-mean", {"a": 1.0, "b": 4.0}, {"a": 3, "b": 1})
    1.75
    """
    if axis == "max":
        return max(latencies_s.values())
    total = sum(rates[m] for m in latencies_s)
    return sum(rates[m] * s for m, s in latencies_s.items()) / total


class WorkloadModel(BaseModel):
    """One model of a workload: its identity, input shapes, rate (frames per workload frame), optional latency
    bound (s), blocks (name -> operators, topological order), its own single-model bounds (s), and what its
    search and cost model recorded."""

    model_config = _STRICT
    model: ModelId
    input_shapes: Optional[Dict[str, List[int]]] = None
    rate: float = Field(gt=0)
    latency_bound_s: Optional[float] = Field(default=None, gt=0)
    blocks: Dict[str, List[str]] = Field(min_length=1)
    bounds: Optional[DocBounds] = None
    search: Dict[str, Any] = {}
    cost_notes: Dict[str, Any] = {}

    @property
    def name(self) -> str:
        """The model's name (``model.name``): the key of its mapping in every point."""
        return self.model.name


class WorkloadPoint(BaseModel):
    """One workload mapping (a :class:`PointMapping` per model) with its modelled figures (see the module)."""

    model_config = _STRICT
    id: str = Field(min_length=1)
    strategy: Literal["parapipe", "separate", "split", "whole"]
    pareto: bool = False
    origin: str = ""
    throughput_per_s: float = Field(gt=0)
    period_s: float = Field(gt=0)
    latency_s: float = Field(gt=0)
    energy_j: float = Field(ge=0)
    period_gap: Optional[float] = None
    latency_gap: Optional[float] = None
    latency_s_per_model: Dict[str, float]
    energy_j_per_model: Dict[str, float] = {}
    pu_busy_s: Dict[str, float] = {}
    pu_busy_s_per_model: Dict[str, Dict[str, float]] = {}
    mappings: Dict[str, PointMapping]

    def used_pus(self) -> List[str]:
        """PUs named by any model's stages, in model order, then order of first use."""
        return list(dict.fromkeys(pu for m in self.mappings.values() for st in m.stages for pu in st.all_pus()))


class WorkloadDoc(BaseModel):
    """A workload search result: the SoC, the models (with rates), the bounds and the points.

    Validation (on construction and by :func:`parapipe.mapping.io.read_workload`) refuses an inconsistent
    document with a :class:`~parapipe.soc.validation.FieldProblem` naming the point, the model and the field:
    two models with one name, a point without a mapping (or a latency) of some model or with one of a model the
    workload does not have, and every model's mapping checked as a single-model point's is
    (:func:`parapipe.mapping.model.check_point_stages`) against that model's blocks.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=True)
    schema_version: Literal[2] = SCHEMA_VERSION
    kind: Literal["workload"] = WORKLOAD_KIND
    soc: SocRef
    models: List[WorkloadModel] = Field(min_length=1)
    latency_axis: Literal["max", "weighted-mean"] = "max"
    objectives: List[str] = ["throughput", "latency", "energy"]
    search: Dict[str, Any] = {}
    bounds: DocBounds
    points: List[WorkloadPoint]
    cost_notes: Dict[str, Any] = {}

    @model_validator(mode="after")
    def _consistent(self) -> "WorkloadDoc":
        names = [m.name for m in self.models]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise FieldProblem(f"models[{i}].model.name", f"model {name!r} is listed twice",
                                   "list each model once and give its frames per workload frame as its rate")
        blocks = {m.name: list(m.blocks) for m in self.models}
        ids = set()
        for p in self.points:
            if p.id in ids:
                raise FieldProblem(f"points[{p.id}].id", "two points have this id", "give every point its own id")
            ids.add(p.id)
            for field in ("mappings", "latency_s_per_model"):
                have = getattr(p, field)
                missing = [n for n in names if n not in have]
                extra = [n for n in have if n not in blocks]
                if missing:
                    raise FieldProblem(f"points[{p.id}].{field}", f"no entry for model {missing[0]!r}",
                                       f"give every model of the workload ({', '.join(names)}) one")
                if extra:
                    raise FieldProblem(f"points[{p.id}].{field}.{extra[0]}", "not a model of the workload "
                                       f"({', '.join(names)})", _FIX)
            for name in names:
                check_point_stages(p.mappings[name].stages, blocks[name], self.soc,
                                   f"points[{p.id}].mappings.{name}.stages")
        return self

    def model_names(self) -> List[str]:
        """The models' names, in the workload's order."""
        return [m.name for m in self.models]

    def model(self, name: str) -> WorkloadModel:
        """The workload's model called ``name``.

        Raises
        ------
        KeyError
            If the workload has no such model.
        """
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"no model {name!r} in the workload ({', '.join(self.model_names())})")

    def rates(self) -> Dict[str, float]:
        """Model name -> frames of that model per workload frame."""
        return {m.name: m.rate for m in self.models}

    def point_view(self, point: WorkloadPoint, name: str) -> Point:
        """Model ``name``'s part of workload point ``point`` as a single-model :class:`Point` (same id and
        strategy): its stages, its latency and active energy per inference, its PUs' busy time per inference,
        period ``point.period_s / rate`` (s per frame of this model while the workload runs) and throughput
        ``rate * point.throughput_per_s`` (frames of this model per second). Gaps are left out (the bounds are
        the workload's)."""
        rate = self.model(name).rate
        return Point(id=point.id, strategy=point.strategy, pareto=point.pareto, origin=point.origin,
                     throughput_per_s=rate * point.throughput_per_s, period_s=point.period_s / rate,
                     latency_s=point.latency_s_per_model[name], energy_j=point.energy_j_per_model.get(name, 0.0),
                     pu_busy_s=dict(point.pu_busy_s_per_model.get(name, {})), mapping=point.mappings[name])

    def model_view(self, name: str) -> ParetoDoc:
        """Model ``name``'s part of the workload as a single-model :class:`ParetoDoc`: its identity, blocks, input
        shapes, cost notes and own bounds, and every point through :meth:`point_view` (ids kept), so that
        :func:`parapipe.mapping.io.select_point`, :func:`parapipe.mapping.io.check_model` and the execution plan
        take it unchanged. ``search`` is the workload's record with ``workload``: the models and rates.

        Raises
        ------
        KeyError
            If the workload has no such model.
        """
        m = self.model(name)
        search = dict(self.search, **m.search)
        search["workload"] = {"models": self.model_names(), "rates": [x.rate for x in self.models],
                              "latency_axis": self.latency_axis}
        return ParetoDoc(model=m.model, soc=self.soc, objectives=list(self.objectives), search=search,
                         blocks=dict(m.blocks), bounds=m.bounds or DocBounds(period_lb_s=0.0, latency_lb_s=0.0),
                         points=[self.point_view(p, name) for p in self.points],
                         input_shapes=m.input_shapes, cost_notes=dict(m.cost_notes))
