"""The layout of a SoC profile YAML file (schema_version 1), as strict pydantic models.

This layer checks what only the file has: keys, YAML types and the provenance of every number (a
:class:`Quantity`). Ranges and cross-field rules are checked by :mod:`parapipe.soc.profile` on the plain
numbers, under the same field paths. soc_profiles/README.md documents the format for humans.
"""
from __future__ import annotations

import re
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

from parapipe.soc.validation import NAME_PATTERN, FieldProblem, yaml11_boolean_name

__all__ = ["SCHEMA_VERSION", "Quantity", "ExecutionEntry", "OperatingPointsEntry", "PUEntry", "TransferEntry", "PairEntry",
           "TransfersEntry", "PipelineEntry", "PowerSensorEntry", "SocFile"]

#: The file format version this parapipe reads and writes.
SCHEMA_VERSION = 1

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def check_provenance(source: Optional[str], confidence: Optional[str], note: Optional[str], info: ValidationInfo,
                     what: str) -> None:
    """The provenance rule of every number (or table) of a profile: a ``source`` key of the top-level
    ``sources:`` (validation context ``{"sources": {...}}``), or ``confidence: low`` with a ``note``.

    Raises
    ------
    FieldProblem
        Neither given, an unknown source key, or ``confidence: low`` without a note.
    """
    sources = (info.context or {}).get("sources")
    if source is None and confidence is None:
        raise FieldProblem("", f"{what} without provenance",
                           "add source: KEY (a key of the top-level sources:) or confidence: low with a note")
    if source is not None and isinstance(sources, dict) and source not in sources:
        known = ", ".join(sources) or "none defined"
        raise FieldProblem("source", f"unknown source key '{source}'",
                           f"add it to the top-level sources: or use one of: {known}")
    if confidence == "low" and not note:
        raise FieldProblem("note", "missing field", "say in note: how the low-confidence estimate was made")


class Quantity(BaseModel):
    """A number with its provenance: ``{value, source: KEY}`` or ``{value, confidence: low, note: ...}``.

    ``source`` must be a key of the file's top-level ``sources:`` (passed as validation context
    ``{"sources": {...}}``). ``note`` may accompany either form and is required with ``confidence: low``.
    """

    model_config = _STRICT
    value: float
    source: Optional[str] = None
    confidence: Optional[Literal["low"]] = None
    note: Optional[str] = None

    @model_validator(mode="after")
    def _check_provenance(self, info: ValidationInfo) -> "Quantity":
        check_provenance(self.source, self.confidence, self.note, info, "number")
        return self

    def provenance(self) -> dict[str, str]:
        """The provenance fields that are set (``source``/``confidence``/``note``)."""
        return {k: v for k, v in (("source", self.source), ("confidence", self.confidence),
                                  ("note", self.note)) if v is not None}


class ExecutionEntry(BaseModel):
    """``execution:`` of a PU: CPU pinning, thread count, runtime adapter, ONNX Runtime provider and options."""

    model_config = _STRICT
    cpus: Optional[list[int]] = None
    threads: Optional[int] = None
    runtime: str = "onnxruntime"
    runtime_options: dict[str, str] = {}
    provider: str = "CPUExecutionProvider"
    provider_options: dict[str, str] = {}
    devfreq: Optional[str] = None


class OperatingPointsEntry(BaseModel):
    """``operating_points:`` of a PU (:class:`parapipe.soc.operating_points.OperatingPoints`): parallel lists
    ``frequency_hz`` (ascending, the last equal to the PU's ``frequency_hz``) and ``voltage_v`` and/or
    ``active_power_w``, all from the table's one ``source`` (or ``confidence: low`` with a ``note``), the
    switching time ``transition_s`` and the fitted ``memory_bound_fraction`` (optional), each a :class:`Quantity`."""

    model_config = _STRICT
    frequency_hz: list[float]
    voltage_v: Optional[list[float]] = None
    active_power_w: Optional[list[float]] = None
    transition_s: Quantity
    memory_bound_fraction: Optional[Quantity] = None
    source: Optional[str] = None
    confidence: Optional[Literal["low"]] = None
    note: Optional[str] = None

    @field_validator("frequency_hz", "voltage_v", "active_power_w", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        if isinstance(value, list):  # YAML ints (1200000000) are numbers too; strict mode would refuse them
            return [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
        return value

    @model_validator(mode="after")
    def _check_provenance(self, info: ValidationInfo) -> "OperatingPointsEntry":
        check_provenance(self.source, self.confidence, self.note, info, "table")
        return self

    def provenance(self) -> dict[str, str]:
        """The table's provenance fields that are set (``source``/``confidence``/``note``)."""
        return {k: v for k, v in (("source", self.source), ("confidence", self.confidence),
                                  ("note", self.note)) if v is not None}


class PUEntry(BaseModel):
    """One entry under ``pus:`` (its key is the PU name)."""

    model_config = _STRICT
    kind: Literal["cpu", "gpu", "npu", "dla", "dsp"]
    cores: int
    frequency_hz: Quantity
    peak_flops: Quantity
    precision: Literal["fp32", "fp16", "bf16", "int8"]
    memory_bandwidth_bytes_per_s: Quantity
    efficiency: dict[str, Quantity]
    op_overhead_s: Quantity
    active_power_w: Quantity
    idle_power_w: Quantity
    supported_ops: Any = "all"
    execution: ExecutionEntry = ExecutionEntry()
    memory_bytes: Optional[Quantity] = None
    operating_points: Optional[OperatingPointsEntry] = None

    @field_validator("supported_ops")
    @classmethod
    def _all_or_list(cls, value: Any) -> Any:
        if value == "all":
            return value
        if not isinstance(value, list) or not all(isinstance(op, str) for op in value):
            raise FieldProblem("", f"expected 'all' or a list of op type names, got {value!r}"[:120],
                               "write 'all' or a list of ONNX op types, e.g. [Conv, Relu]")
        return value


class TransferEntry(BaseModel):
    """``transfers.default``: ``alpha_s`` (fixed cost per hand-off) and ``beta_bytes_per_s``."""

    model_config = _STRICT
    alpha_s: Quantity
    beta_bytes_per_s: Quantity


class PairEntry(TransferEntry):
    """An item of ``transfers.pairs``: directed ``src`` → ``dst`` unless ``symmetric: true``."""

    src: str
    dst: str
    symmetric: bool = False


class TransfersEntry(BaseModel):
    """``transfers:``: the ``default`` cost and the per-pair overrides."""

    model_config = _STRICT
    default: TransferEntry
    pairs: list[PairEntry] = []


class PipelineEntry(BaseModel):
    """``pipeline:``: the pipeline-level terms of the cost model (:mod:`parapipe.soc.pipeline`), each a
    :class:`Quantity`; ``overlap`` by PU name. Absent fields keep their defaults (the plain model)."""

    model_config = _STRICT
    overlap: dict[str, Quantity] = {}
    invoke_s: dict[str, Quantity] = {}
    dispatch_s: Optional[Quantity] = None
    handoff_s: Optional[Quantity] = None
    contention: Optional[Quantity] = None
    slowdown: Optional[Quantity] = None
    sharing: Optional[Quantity] = None


class PowerSensorEntry(BaseModel):
    """``power_sensor:``: what the executor reads to measure energy (:class:`parapipe.soc.pipeline.PowerSensor`)."""

    model_config = _STRICT
    kind: Literal["powercap", "hwmon", "ina3221", "command"]
    paths: list[str] = []
    rails: list[str] = []
    command: list[str] = []
    interval_s: Optional[float] = None
    max_power_w: Optional[float] = None


class SocFile(BaseModel):
    """A whole profile file."""

    model_config = _STRICT
    schema_version: Literal[1]
    name: str
    description: str = ""
    sources: dict[str, str]
    static_power_w: Quantity
    memory_bandwidth_bytes_per_s: Quantity
    pus: dict[str, PUEntry]
    transfers: TransfersEntry
    pipeline: Optional[PipelineEntry] = None
    power_sensor: Optional[PowerSensorEntry] = None

    @field_validator("name", mode="before")
    @classmethod
    def _not_a_boolean(cls, name: Any) -> Any:
        yaml11_boolean_name(name, "name")
        return name

    @field_validator("pus", mode="before")
    @classmethod
    def _pu_names_not_booleans(cls, pus: Any) -> Any:
        if isinstance(pus, dict):
            for name in pus:
                try:
                    yaml11_boolean_name(name, "pus")
                except FieldProblem as exc:
                    raise FieldProblem(str(name), exc.problem, f'quote the key: "{name}": ...') from None
        return pus

    @field_validator("pus")
    @classmethod
    def _pu_names(cls, pus: dict[str, PUEntry]) -> dict[str, PUEntry]:
        for name in pus:
            if not re.match(NAME_PATTERN, name):
                raise FieldProblem(name, f"'{name}' is not a valid PU name",
                                   "use letters, digits and '_', starting with a letter (e.g. dsp0)")
        return pus
