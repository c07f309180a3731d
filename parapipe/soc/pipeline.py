"""Two optional sections of a SoC profile: the pipeline-level terms of the cost model (``pipeline:``) and the
board's power sensor (``power_sensor:``).

``pipeline:`` holds the parameters of :class:`parapipe.cost.pipeline_terms.PipelineTerms` (formulas and sources
there), written by ``parapipe calibrate --runs`` with ``source: runs`` provenance; without it the plain model
applies (every term at its default). ``power_sensor:`` names what the executor reads during ``parapipe run`` and
``deploy`` to measure energy per inference (:mod:`ppexec.power`): Linux powercap energy counters (RAPL), hwmon
``energy*_input`` (µJ) or ``power*_input`` (µW), a Jetson's INA3221 rails through hwmon (``in*_input`` mV ×
``curr*_input`` mA), or a command that prints watts. Without one, energies stay model estimates.
"""
from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from parapipe.soc.validation import FieldProblem

_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

#: Power-sensor kinds (:mod:`ppexec.power` reads each).
POWER_SENSOR_KINDS = ("powercap", "hwmon", "ina3221", "command")

__all__ = ["PipelineParams", "PowerSensor", "POWER_SENSOR_KINDS"]


class PipelineParams(BaseModel):
    """The ``pipeline:`` section: overlap per PU (``φ`` in [0, 1]), dispatch per stage (s), invocation cost per
    PU (s per stage on the PU), extra cost per hand-off between the PUs of a multi-PU stage (s), memory contention (``γ``, dimensionless), whole-run slowdown (``κ``) and the slowdown of a stage on a shared PU
    (``ψ``, dimensionless); defaults
    reproduce the plain cost model."""

    model_config = _CONFIG
    overlap: dict[str, float] = {}
    dispatch_s: float = Field(default=0.0, ge=0)
    handoff_s: float = Field(default=0.0, ge=0)
    contention: float = Field(default=0.0, ge=0)
    slowdown: float = Field(default=1.0, gt=0)
    sharing: float = Field(default=0.0, ge=0)
    invoke_s: dict[str, float] = {}

    @field_validator("invoke_s")
    @classmethod
    def _non_negative(cls, invoke_s: dict[str, float]) -> dict[str, float]:
        for pu, cost in invoke_s.items():
            if not cost >= 0:
                raise FieldProblem(pu, f"must be >= 0, got {cost!r}",
                                   "give the seconds one call into the PU's runtime costs, e.g. 5.0e-4")
        return invoke_s

    @field_validator("overlap")
    @classmethod
    def _unit_interval(cls, overlap: dict[str, float]) -> dict[str, float]:
        for pu, phi in overlap.items():
            if not 0.0 <= phi <= 1.0 or math.isnan(phi):
                raise FieldProblem(pu, f"must be in [0, 1], got {phi!r}",
                                   "0 = the PU's stages add up, 1 = they overlap fully")
        return overlap


class PowerSensor(BaseModel):
    """The ``power_sensor:`` section.

    Attributes
    ----------
    kind : {"powercap", "hwmon", "ina3221", "command"}
    paths : tuple of str
        Files to read (relative to the sysfs root ``/sys``, or absolute): ``energy_uj`` counters (powercap),
        ``energy*_input``/``power*_input`` (hwmon), hwmon folders (ina3221). Empty: every top-level RAPL zone,
        every hwmon energy (else power) input, every ``ina3221`` hwmon device.
    rails : tuple of str
        ina3221 only: the channel labels (``in*_label``) to add up; empty: ``VDD_IN`` (the board's input) where a
        device has it, else every channel.
    command : tuple of str
        command only: the program and its arguments; it prints the current power in watts (one number).
    interval_s : float
        Seconds between samples (> 0; counters are read at the start, the end and every interval, to see a
        wrap-around; the executor shortens it where a counter's range would otherwise wrap twice in between).
    max_power_w : float or None
        Largest plausible power of the sensor, W: readings above it are refused as implausible, and RAPL
        counters are polled often enough not to wrap twice at this power; None: the executor's default
        (:data:`ppexec.power.DEFAULT_MAX_POWER_W`).
    """

    model_config = _CONFIG
    kind: Literal["powercap", "hwmon", "ina3221", "command"]
    paths: tuple[str, ...] = ()
    rails: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    interval_s: float = Field(default=0.1, gt=0, le=10)
    max_power_w: Optional[float] = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _command_given(self) -> "PowerSensor":
        if self.kind == "command" and not self.command:
            raise FieldProblem("command", "missing field", "give the program and its arguments as a list, e.g. "
                               "[/usr/local/bin/board-watts]")
        if self.kind != "command" and self.command:
            raise FieldProblem("command", f"only used with kind: command, not {self.kind}", "remove it")
        if self.rails and self.kind != "ina3221":
            raise FieldProblem("rails", f"only used with kind: ina3221, not {self.kind}", "remove it")
        return self

    def to_doc(self) -> dict:
        """The plain dict the executor reads (``plan.json`` ``power_sensor``)."""
        return {"kind": self.kind, "paths": list(self.paths), "rails": list(self.rails),
                "command": list(self.command), "interval_s": self.interval_s,
                **({"max_power_w": self.max_power_w} if self.max_power_w is not None else {})}
