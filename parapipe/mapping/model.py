"""The typed ``pareto.json`` document: one model for every producer and consumer of a mapping.

A search result travels as one :class:`ParetoDoc`; ``optimize`` writes it, and ``evaluate``, ``run``,
``deploy``, ``plot`` and the experiments read it back through :func:`parapipe.mapping.read_pareto`. The document
carries what a point needs to run on the board it was computed for: the SoC profile's name and SHA-256 and, for
every PU of the profile, its kind and its execution binding (:class:`parapipe.soc.execution.Execution`: pinned
CPUs, threads, runtime, execution provider and options), so ``run``/``deploy`` never guess a binding from a PU
name.

Schema (``schema_version`` 2)::

    {"schema_version": 2,
     "model": {"name", "sha256"},
     "soc": {"name", "sha256", "pus": {pu: {"kind", "execution": {"cpus", "threads", "runtime",
             "runtime_options", "provider", "provider_options"}}}},
     "objectives": [...], "search": {...}, "blocks": {block: [operator, ...]} (topological order),
     "bounds": {"period_lb_s", "latency_lb_s"},
     "points": [{"id", "strategy", "pareto", "origin", "throughput_per_s", "period_s", "latency_s", "energy_j",
                 "period_gap", "latency_gap", "pu_busy_s": {pu: s},
                 "mapping": {"stages": [{"pus", "blocks", "time_s", "input_s", "makespan_s", "schedule",
                                         "assignment": {block: pu}, "order": [block],
                                         "block_start_s": {block: s}, "block_finish_s": {block: s},
                                         "frequency_hz": {pu: Hz} (optional),
                                         "replicas": [{"pus", "assignment", "order", "share", "time_s",
                                                       "input_s", "makespan_s", "schedule",
                                                       "frequency_hz"?}] (optional)}]}}]}

``*_gap`` is ``value / lower_bound - 1`` (None when the bound is 0; 0 for a period proved optimal:
``search.bound.period_proved_optimal``). ``search.bound`` says which bound certified what
(:meth:`parapipe.search.bounds.Bounds.info`): ``period_method``, ``period_lb_s``, ``period_proved_optimal``,
``note`` and ``spaces`` (per space bounded, ``reuse`` and ``replicated``: ``method``, ``period_lb_s``,
``proved``); older documents carry only the first and third. ``search.exact`` is true when the front is exact for every space
searched; ``search.spaces`` says, per space, what bounded it otherwise
(:class:`parapipe.search.passes.SpaceReport`); ``search.cpsat.time_unit_s`` is CP-SAT's time tick;
``search.stage_timing`` (``--soc host``) what :func:`parapipe.app.optimize.search_prepared` timed as sub-models. Times are seconds, energies joules. Documents
of a model (not a block table) also carry ``"input_shapes": {input: [dims]}`` (checked by ``run``) and
``"cost_notes": {"input_dims_chosen", "ops_without_flop_formula", "data_dependent_ops"}``
(:func:`parapipe.app.prepare.model_notes`).

A **replicated stage** (data parallelism, :mod:`parapipe.cost.replication`) lists ``replicas``: every replica of
the stage, the stage's own first (its ``pus``, ``assignment`` and ``order`` are the first replica's), each
running all the stage's blocks on its own PUs and taking ``share`` of the frames. The stage's ``time_s``,
``input_s`` and ``makespan_s`` are then means over the dealt frames and each replica gives its own. A stage
without ``replicas`` (the default; ``null`` in the file) is an ordinary stage, so documents written before
replication existed read unchanged.
"""
from __future__ import annotations

from typing import Any, Dict, Final, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from parapipe.cost.rules import RuleViolation, check_stages
from parapipe.soc.execution import Execution
from parapipe.soc.operating_points import format_mhz
from parapipe.soc.validation import FieldProblem

__all__ = ["SCHEMA_VERSION", "STRATEGIES", "SELECTORS", "ModelId", "PURef", "SocRef", "DocBounds", "Replica",
           "stages_text", "Stage", "PointMapping", "Point", "ParetoDoc", "SHARE_SUM_TOL", "check_point_stages",
           "WORKLOAD_STRATEGIES"]

SCHEMA_VERSION: Final = 2
#: Point strategies: the searched front and the baselines computed by the same machinery.
STRATEGIES = ("parapipe", "pipeline", "parallel", "single", "replicated", "governor")
#: Strategies of a workload document's points (:mod:`parapipe.mapping.workload`): the co-mapped front and the
#: baselines ``separate`` (each model's own best-throughput point, run together), ``split`` (each model on its
#: own PUs) and ``whole`` (each model unsplit on one PU). A model's view of a workload point keeps its strategy.
WORKLOAD_STRATEGIES = ("parapipe", "separate", "split", "whole")
#: ``--point`` selectors besides a point id (chosen among the ``parapipe`` points).
SELECTORS = ("best-throughput", "best-latency", "best-energy")
_FIX = "re-run 'parapipe optimize', or fix the hand edit"

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


class ModelId(BaseModel):
    """The model a document was computed for: registry name (or file stem) and SHA-256 of the .onnx bytes."""

    model_config = _STRICT
    name: str
    sha256: str = Field(min_length=1)


class PURef(BaseModel):
    """One PU of the profile as ``run``/``deploy`` need it: its kind, its execution binding and its precision
    (the profile's ``precision``, which its runtime adapter is set to; written only when not ``fp32``, so
    documents of fp32 profiles read as before)."""

    model_config = _STRICT
    kind: str
    execution: Execution = Execution()
    precision: Literal["fp32", "fp16", "bf16", "int8"] = "fp32"

    @model_serializer(mode="wrap")
    def _omit_fp32(self, handler):
        data = handler(self)
        if data.get("precision") == "fp32":
            data.pop("precision", None)
        return data


class SocRef(BaseModel):
    """The SoC profile a document was computed for.

    Attributes
    ----------
    name : str
        Profile name (``host`` for this machine's measured profile).
    sha256 : str
        SHA-256 of the profile's canonical YAML form (:func:`parapipe.soc.identity.soc_sha256`); measured
        profiles (``host``) change with every measurement, so this records which one was used.
    pus : dict of str to PURef
        Every PU of the (possibly ``--pus``-restricted) profile.
    power_sensor : dict or None
        The profile's power sensor (:class:`parapipe.soc.pipeline.PowerSensor` as a dict): ``run``/``deploy``
        read it to measure energy per inference.
    """

    model_config = _STRICT
    name: str
    sha256: str = ""
    pus: Dict[str, PURef] = {}
    power_sensor: Optional[Dict[str, Any]] = None

    @model_serializer(mode="wrap")
    def _omit_absent_sensor(self, handler):
        data = handler(self)
        if data.get("power_sensor") is None:
            data.pop("power_sensor", None)  # documents of profiles without a sensor stay as they were
        return data


class DocBounds(BaseModel):
    """Lower bounds of the search problem, s."""

    model_config = _STRICT
    period_lb_s: float = Field(ge=0)
    latency_lb_s: float = Field(ge=0)


class Replica(BaseModel):
    """One replica of a replicated stage: its PUs, the PU of each block (may be empty for one PU), the execution
    order (empty: the stage's block order), its share of the frames and its modelled times (s)."""

    model_config = _STRICT
    pus: List[str] = Field(min_length=1)
    assignment: Dict[str, str] = {}
    order: List[str] = []
    share: float = Field(gt=0, le=1)
    time_s: float = Field(default=0.0, ge=0)
    input_s: float = Field(default=0.0, ge=0)
    makespan_s: float = Field(default=0.0, ge=0)
    schedule: str = "single-pu"
    frequency_hz: Optional[Dict[str, float]] = None

    @model_serializer(mode="wrap")
    def _omit_no_frequencies(self, handler):
        data = handler(self)
        if isinstance(data, dict) and data.get("frequency_hz") is None:
            data.pop("frequency_hz", None)
        return data

    def pu_of(self, block: str) -> str:
        """The PU running ``block`` on this replica."""
        return self.assignment.get(block) or self.pus[0]


def stages_text(stages) -> str:
    """``"big | gpu+npu | {dsp0,dsp1}"``: each stage's PUs (``+``: operator-parallel over them; ``{a,b}``:
    replicated, one replica per group, a group's PUs joined by ``+``), stages separated by bars; a PU at a
    stated operating point reads ``big@1800`` (MHz). ``stages``: :class:`Stage` objects or their JSON dicts.

    >>> stages_text([{"pus": ["big"], "frequency_hz": {"big": 1.8e9}}, {"pus": ["gpu", "npu"]}])
    'big@1800 | gpu+npu'
    """
    def get(obj, key: str) -> Any:
        return obj.get(key) if isinstance(obj, dict) else getattr(obj, key)

    def group(unit) -> str:
        freqs = get(unit, "frequency_hz") or {}
        return "+".join(f"{pu}@{format_mhz(freqs[pu])}" if pu in freqs else pu for pu in get(unit, "pus"))

    def one(st) -> str:
        reps = get(st, "replicas")
        if reps:
            return "{" + ",".join(group(r) for r in reps) + "}"
        return group(st)
    return " | ".join(one(st) for st in stages)


class Stage(BaseModel):
    """One pipeline stage of a point: its PUs, its blocks (a contiguous run of the document's block order),
    the PU of each block, the execution order and the modelled times (s; block times from the end of the stage's
    input transfer). ``frequency_hz`` (PU -> Hz, optional) is the operating point each PU runs the stage at
    (:mod:`parapipe.soc.operating_points`); absent: every PU at its highest point."""

    model_config = _STRICT
    pus: List[str] = Field(min_length=1)
    blocks: List[str] = Field(min_length=1)
    time_s: float = Field(ge=0)
    input_s: float = Field(default=0.0, ge=0)
    makespan_s: float = Field(default=0.0, ge=0)
    schedule: str = "single-pu"
    assignment: Dict[str, str] = {}
    order: List[str] = []
    block_start_s: Dict[str, float] = {}
    block_finish_s: Dict[str, float] = {}
    replicas: Optional[List[Replica]] = None
    frequency_hz: Optional[Dict[str, float]] = None

    @model_serializer(mode="wrap")
    def _omit_no_replicas(self, handler):
        """Write ``replicas`` only for replicated stages and ``frequency_hz`` only where the search chose
        operating points: other stages read and write as before."""
        data = handler(self)
        if isinstance(data, dict):
            for key in ("replicas", "frequency_hz"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data

    def pu_of(self, block: str) -> str:
        """The PU running ``block`` (the stage's only PU when ``assignment`` is empty)."""
        return self.assignment.get(block) or self.pus[0]

    def block_order(self) -> List[str]:
        """``order`` when given, else ``blocks``."""
        return list(self.order) or list(self.blocks)

    def replica_stages(self) -> List["Stage"]:
        """Every replica as a stage over the same blocks (its ``pus``, ``assignment``, ``order``; figures
        zero), the stage's own first; ``[self]`` when not replicated."""
        if not self.replicas:
            return [self]
        return [Stage.model_construct(pus=list(r.pus), blocks=list(self.blocks), time_s=r.time_s,
                                      assignment=dict(r.assignment), order=list(r.order),
                                      frequency_hz=r.frequency_hz) for r in self.replicas]

    def all_pus(self) -> List[str]:
        """PUs of every replica (the stage's own ``pus`` when not replicated)."""
        if not self.replicas:
            return list(self.pus)
        return [pu for r in self.replicas for pu in r.pus]


class PointMapping(BaseModel):
    """The stages of a point, first stage first."""

    model_config = _STRICT
    stages: List[Stage] = Field(min_length=1)


class Point(BaseModel):
    """One mapping with its modelled figures (period, latency in s; energy per inference in J)."""

    model_config = _STRICT
    id: str = Field(min_length=1)
    strategy: Literal["parapipe", "pipeline", "parallel", "single", "replicated", "governor", "separate", "split",
                      "whole"]
    pareto: bool = False
    #: Which search pass found the mapping (``dp``, ``cpsat``, ``polish``, ``baseline`` …); informative only.
    origin: str = ""
    throughput_per_s: float = Field(gt=0)
    period_s: float = Field(gt=0)
    latency_s: float = Field(gt=0)
    energy_j: float = Field(ge=0)
    period_gap: Optional[float] = None
    latency_gap: Optional[float] = None
    pu_busy_s: Dict[str, float] = {}
    mapping: PointMapping

    @property
    def stages(self) -> List[Stage]:
        """The point's stages (``mapping.stages``)."""
        return self.mapping.stages

    def used_pus(self) -> List[str]:
        """PUs named by the stages (every replica's), in order of first use."""
        return list(dict.fromkeys(pu for st in self.stages for pu in st.all_pus()))

    def frequencies_hz(self) -> Dict[str, List[float]]:
        """PU -> the operating points (Hz) its stages and replicas state, distinct, in pipeline order; PUs
        without a stated point are left out (they run at whatever the board runs them at)."""
        out: Dict[str, List[float]] = {}
        for st in self.stages:
            for unit in st.replica_stages():
                for pu, f in (unit.frequency_hz or {}).items():
                    if f not in out.setdefault(pu, []):
                        out[pu].append(f)
        return out


class ParetoDoc(BaseModel):
    """A search result: the model and SoC it is for, the blocks, the bounds and the points.

    Validation (on construction and by :func:`parapipe.mapping.read_pareto`) refuses an inconsistent document
    with a :class:`~parapipe.soc.validation.FieldProblem` naming the point and the field: a stage naming an
    unknown block, a block in two stages or in none, a block assigned to a PU outside its stage, a PU the
    profile does not have, ``order`` not listing the stage's blocks, or stages out of the block order.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=True)
    schema_version: Literal[2] = SCHEMA_VERSION
    model: ModelId
    soc: SocRef
    objectives: List[str] = ["throughput", "latency", "energy"]
    search: Dict[str, Any] = {}
    blocks: Dict[str, List[str]]
    bounds: DocBounds
    points: List[Point]
    input_shapes: Optional[Dict[str, List[int]]] = None
    cost_notes: Dict[str, Any] = {}

    @model_validator(mode="after")
    def _consistent(self) -> "ParetoDoc":
        blocks = list(self.blocks)
        ids = set()
        for p in self.points:
            if p.id in ids:
                raise FieldProblem(f"points[{p.id}].id", "two points have this id", "give every point its own id")
            ids.add(p.id)
            _check_point(p, blocks, self.soc)
        return self


def _check_point(p: Point, blocks: List[str], soc: SocRef) -> None:
    """Raise FieldProblem at the first inconsistency of ``p`` (see :class:`ParetoDoc`)."""
    check_point_stages(p.stages, blocks, soc, f"points[{p.id}].mapping.stages")


def check_point_stages(stages: List[Stage], blocks: List[str], soc: SocRef, where_stages: str) -> None:
    """Raise FieldProblem at the first inconsistency of one mapping's ``stages`` over ``blocks`` on ``soc``: the
    structural rules (:func:`parapipe.cost.rules.check_stages`), then what the document form adds (PUs of the
    SoC, an assignment naming only the stage's blocks and every block of a multi-PU stage, the replicas' list
    and shares). ``where_stages`` is the field path of the stage list (``points[p0].mapping.stages``)."""
    try:
        check_stages(stages, blocks or None)
    except RuleViolation as exc:
        raise FieldProblem(exc.where(where_stages), exc.problem, exc.fix) from None
    for s, st in enumerate(stages):
        where = f"{where_stages}[{s}]"
        _check_placement(st, st, where, "stage", soc)
        if st.replicas is not None:
            _check_replicas(st, where, soc)


def _check_placement(st: Stage, unit, where: str, what: str, soc: SocRef) -> None:
    """Check what the document form adds to where ``unit`` (the stage itself, or one of its replicas) runs the
    stage's blocks: PUs of the SoC, every assigned block in the stage, a PU for every block when ``unit`` has
    several. Raises FieldProblem naming ``where``."""
    for pu in unit.pus:
        if soc.pus and pu not in soc.pus:
            raise FieldProblem(f"{where}.pus", f"PU {pu!r} is not in SoC {soc.name!r} ({', '.join(soc.pus)})", _FIX)
    for b in unit.assignment:
        if b not in st.blocks:
            raise FieldProblem(f"{where}.assignment.{b}", "block is not in this stage", "assign only the stage's blocks")
    if len(unit.pus) > 1 and set(unit.assignment) != set(st.blocks):
        missing = sorted(set(st.blocks) - set(unit.assignment))
        raise FieldProblem(f"{where}.assignment", f"blocks without a PU: {missing[:3]}",
                           f"give every block of a multi-PU {what} a PU")


#: How far the replicas' shares may sum from 1 (they are written from floats).
SHARE_SUM_TOL = 1e-6


def _check_replicas(st: Stage, where: str, soc: SocRef) -> None:
    """Raise FieldProblem at the first inconsistency of a replicated stage's ``replicas``."""
    reps = st.replicas or []
    if len(reps) < 2:
        raise FieldProblem(f"{where}.replicas", f"{len(reps)} replica(s)",
                           "list at least two replicas, the stage's own first, or drop 'replicas'")
    first = reps[0]
    if first.pus != st.pus or {b: first.pu_of(b) for b in st.blocks} != {b: st.pu_of(b) for b in st.blocks}:
        raise FieldProblem(f"{where}.replicas[0]", "differs from the stage's own pus/assignment",
                           "make the first replica the stage itself (same pus and assignment)")
    for r, rep in enumerate(reps):
        _check_placement(st, rep, f"{where}.replicas[{r}]", "replica", soc)
    total = sum(rep.share for rep in reps)
    if abs(total - 1.0) > SHARE_SUM_TOL:
        raise FieldProblem(f"{where}.replicas", f"shares sum to {total:.6g}, not 1",
                           "give each replica its fraction of the frames (1 / time, normalised)")
