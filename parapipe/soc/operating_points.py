"""Operating points (DVFS): the frequencies a PU's frequency domain can run at, and what each costs.

A PU of a profile may carry an ``operating_points:`` table (soc_profiles/README.md): its frequencies in
ascending order, the highest being the PU's ``frequency_hz`` (the point every other number of the profile is
given at), with either the supply voltage of each point or its active power, and the time the domain takes to
switch between two points. A PU without a table has one operating point, its ``frequency_hz``.

Two models, stated once here and used by the cost model (:mod:`parapipe.cost.roofline`,
:mod:`parapipe.cost.problem`):

* **Power.** CMOS dynamic power is ``P_dyn = C · V² · f`` (the model of the Linux Energy Model framework,
  ``Documentation/power/energy-model.rst``, and of the ``dynamic-power-coefficient`` device-tree property,
  ``Documentation/devicetree/bindings/arm/cpus.yaml``). With voltages, a PU's active power at point ``i`` is
  ``P_idle + (P_active − P_idle) · (V_i² f_i) / (V_max² f_max)``: the part above idle scales, the idle (leakage
  and clock-gated) part is taken as the same at every point. With an explicit ``active_power_w`` list, point
  ``i`` draws that instead. Per-block powers of a block table scale by the same ratio
  (:meth:`OperatingPoints.dynamic_ratio`).
* **Time.** A block's compute scales with ``1/f``, its memory traffic does not: the roofline at point ``i``
  uses ``peak_flops · f_i / f_max`` and ``op_overhead_s · f_max / f_i`` with the same memory bandwidth
  (:func:`parapipe.cost.roofline.block_time_s`); a measured time scales as its roofline does. A block table
  may give times per frequency instead (``t_<pu>@<MHz>`` columns).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parapipe.soc.validation import FieldProblem

__all__ = ["MHZ_MATCH_RTOL", "OperatingPoints", "format_mhz", "match_index", "parse_mhz", "points_text"]

_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

#: Relative tolerance when matching a frequency given in MHz (``big@1800``, ``t_big@1800``) to a table entry:
#: tables list kHz-exact values such as 1398 MHz = 1.398e9 Hz, so a MHz figure matches to well within 0.1 %.
MHZ_MATCH_RTOL = 1e-3


def format_mhz(frequency_hz: float) -> str:
    """``frequency_hz`` in MHz as users write it (``1800``, ``666.7``).

    >>> format_mhz(1.8e9), format_mhz(666.7e6), format_mhz(2.208e9)
    ('1800', '666.7', '2208')
    """
    mhz = round(frequency_hz / 1e6, 1)
    return str(int(mhz)) if mhz == int(mhz) else f"{mhz:g}"


def parse_mhz(text: str) -> float:
    """A frequency written in MHz (``"1800"``, ``"666.7"``) -> Hz.

    Raises
    ------
    ValueError
        Not a positive finite number.

    >>> parse_mhz("1800"), parse_mhz("666.7")
    (1800000000.0, 666700000.0)
    """
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"frequency {text!r} MHz is not a positive number")
    return value * 1e6


class OperatingPoints(BaseModel):
    """The operating points of one PU's frequency domain.

    Attributes
    ----------
    frequency_hz : tuple of float
        Frequencies, Hz, strictly ascending; the last one is the PU's ``frequency_hz``.
    voltage_v : tuple of float or None
        Supply voltage of each point, V (> 0): the power model scales the dynamic power with ``V² f``.
    active_power_w : tuple of float or None
        Whole-PU power while busy at each point, W (>= 0); overrides the ``V² f`` model. One of ``voltage_v``
        and ``active_power_w`` is required when there is more than one point.
    transition_s : float
        Time the domain takes to switch from one point to another, s (>= 0): paid by a PU that serves stages at
        different points, once per switch per inference (Linux reports it as ``cpuinfo_transition_latency``, ns,
        in ``/sys/devices/system/cpu/cpufreq/policyN/``).
    memory_bound_fraction : float or None
        Share ``μ`` in [0, 1] of a block's time at the highest point that does not scale with the clock, fitted by
        ``parapipe calibrate`` from measurements at several points (:mod:`parapipe.calibration.frequency_fit`):
        a block not measured at point ``f`` then takes ``t(f_max) · ((1 − μ) f_max / f + μ)``. None (default):
        its time scales as its roofline does.
    """

    model_config = _CONFIG
    frequency_hz: Tuple[float, ...] = Field(min_length=1)
    voltage_v: Optional[Tuple[float, ...]] = None
    active_power_w: Optional[Tuple[float, ...]] = None
    transition_s: float = Field(default=0.0, ge=0)
    memory_bound_fraction: Optional[float] = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> "OperatingPoints":
        f = self.frequency_hz
        if any(not (x > 0) for x in f):
            raise FieldProblem("frequency_hz", "frequencies must be > 0 Hz", "give each frequency in Hz, e.g. 1.8e9")
        if any(b <= a for a, b in zip(f, f[1:])):
            raise FieldProblem("frequency_hz", "frequencies must be strictly ascending",
                               "list each frequency once, lowest first")
        for name in ("voltage_v", "active_power_w"):
            values = getattr(self, name)
            if values is None:
                continue
            if len(values) != len(f):
                raise FieldProblem(name, f"{len(values)} values for {len(f)} frequencies", "give one per frequency")
            if any(v < 0 or (name == "voltage_v" and v == 0) for v in values):
                raise FieldProblem(name, "values must be > 0" if name == "voltage_v" else "values must be >= 0",
                                   "check the table")
        if len(f) > 1 and self.voltage_v is None and self.active_power_w is None:
            raise FieldProblem("", "neither voltage_v nor active_power_w given",
                               "add the supply voltage of each point (device-tree opp-microvolt) or its power")
        return self

    @property
    def max_frequency_hz(self) -> float:
        return self.frequency_hz[-1]

    def __len__(self) -> int:
        return len(self.frequency_hz)

    def dynamic_ratio(self, active_power_w: float, idle_power_w: float) -> Tuple[float, ...]:
        """Per point, the PU's power above idle relative to the highest point's (1.0 at the highest point).

        ``active_power_w``/``idle_power_w`` are the PU's profile figures (at the highest point). Explicit
        ``active_power_w`` lists give ``(P_i − P_idle) / (P_max − P_idle)`` (all 1.0 when ``P_max == P_idle``);
        voltages give ``V_i² f_i / (V_max² f_max)`` (module docstring).

        >>> OperatingPoints(frequency_hz=(1e9, 2e9), voltage_v=(0.5, 1.0)).dynamic_ratio(3.0, 1.0)
        (0.125, 1.0)
        """
        if self.active_power_w is not None:
            span = self.active_power_w[-1] - idle_power_w
            if span <= 0:
                return tuple(1.0 for _ in self.frequency_hz)
            return tuple(max(0.0, (p - idle_power_w) / span) for p in self.active_power_w)
        if self.voltage_v is None:
            return (1.0,)
        vmax, fmax = self.voltage_v[-1], self.frequency_hz[-1]
        return tuple((v * v * f) / (vmax * vmax * fmax) for v, f in zip(self.voltage_v, self.frequency_hz))

    def index_of(self, frequency_hz: float) -> Optional[int]:
        """Index of the point at ``frequency_hz`` (:func:`match_index`), None when there is none."""
        return match_index(self.frequency_hz, frequency_hz)

    def describe(self) -> str:
        """The points as users write them: ``1200, 1398, ..., 2208 MHz``."""
        return ", ".join(format_mhz(f) for f in self.frequency_hz) + " MHz"


def match_index(frequencies_hz: Sequence[float], frequency_hz: float) -> Optional[int]:
    """Index of the entry of ``frequencies_hz`` that ``frequency_hz`` names (within :data:`MHZ_MATCH_RTOL`: a
    MHz figure such as 1398 names 1.398e9 Hz), None when none does.

    >>> match_index((1.0e9, 1.398e9), 1398e6), match_index((1.0e9,), 1.2e9)
    (1, None)
    """
    return next((i for i, f in enumerate(frequencies_hz) if abs(f - frequency_hz) <= MHZ_MATCH_RTOL * f), None)


def points_text(frequencies_hz: Sequence[float]) -> str:
    """``1200, 1800 MHz``: a list of frequencies as an error message gives them."""
    return ", ".join(format_mhz(f) for f in frequencies_hz) + " MHz"
