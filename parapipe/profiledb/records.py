"""Typed measurement records: one timed operator, block, stage or transfer on one PU of one SoC.

A :class:`Measurement` is what the profile database stores (:mod:`parapipe.profiledb.db`) and what runners
produce. Its identity (:attr:`Measurement.key`) is ``(soc, pu, signature, batch, ort_version, kind)``: a newer
measurement with the same key replaces the older one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Optional, Tuple

from parapipe.errors import input_error

__all__ = ["Measurement", "KINDS", "utc_now_iso"]

#: What was timed: a single operator, a coarsened block, a whole pipeline stage, or a tensor hand-off.
KINDS = ("op", "block", "stage", "transfer")


def utc_now_iso() -> str:
    """The current time as ISO 8601 in UTC with seconds, e.g. ``"2025-01-31T12:00:00+00:00"``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Measurement:
    """One timing of a piece of work on one processing unit.

    Attributes
    ----------
    soc : str
        SoC profile name (``soc_profiles/<soc>.yaml``), e.g. ``"a311d"``.
    pu : str
        Processing unit in that profile, e.g. ``"big"``; for ``kind="transfer"`` the pair, e.g.
        ``"big->gpu"``.
    signature : str
        What was timed, stable across runs (operator/block/stage signature from the graph module); for
        ``kind="transfer"`` it must include the size (the key has no ``nbytes``), e.g. ``"transfer:1048576"``.
    op_type : str
        ONNX op type (``"Conv"``), or a summary for blocks and stages (``"Conv+Relu"``), ``"transfer"``.
    batch : int
        Batch size, >= 1.
    ort_version : str
        ONNX Runtime version that ran it (``onnxruntime.__version__`` on the host).
    median_s, p90_s : float
        Median and 90th percentile of the timed repeats, in seconds (finite, 0 <= median_s <= p90_s).
    repeats : int
        Number of timed runs, >= 1.
    measured_at : str
        ISO 8601 time in UTC (offset +00:00 or Z), see :func:`utc_now_iso`.
    host : str
        Where it ran, e.g. ``"root@127.0.0.1:22"`` or ``"local"``.
    kind : str
        One of :data:`KINDS`.
    nbytes : int
        Bytes moved (transfers) or the work's input+output bytes; >= 0.
    power_w : float, optional
        Mean power while running, in watts, when a meter was read; None otherwise.
    frequency_hz : float, optional
        Operating point the work ran at, Hz (> 0); None: the PU's profile ``frequency_hz`` (or not set).

    Raises
    ------
    InputError
        From the constructor, for any value outside the ranges above (message names the field).
    """

    soc: str
    pu: str
    signature: str
    op_type: str
    batch: int
    ort_version: str
    median_s: float
    p90_s: float
    repeats: int
    measured_at: str
    host: str
    kind: str
    nbytes: int
    power_w: Optional[float] = None
    frequency_hz: Optional[float] = None

    def __post_init__(self) -> None:
        def bad(name: str, problem: str, fix: str) -> None:
            raise input_error("measurement", name, problem, fix)

        for name in ("soc", "pu", "signature", "op_type", "ort_version", "host"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                bad(name, f"must be a non-empty string, got {value!r}", f"give the {name}")
        if self.kind not in KINDS:
            bad("kind", f"must be one of {', '.join(KINDS)}, got {self.kind!r}", "use one of those kinds")
        for name, minimum in (("batch", 1), ("repeats", 1), ("nbytes", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                bad(name, f"must be an integer >= {minimum}, got {value!r}", f"give {name} as a whole number")
        for name in ("median_s", "p90_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                bad(name, f"must be a finite time >= 0 in seconds, got {value!r}", "give seconds, not ms")
        if self.p90_s < self.median_s:
            bad("p90_s", f"{self.p90_s!r} is below median_s {self.median_s!r}",
                "check that the two columns are not swapped")
        if self.power_w is not None and (isinstance(self.power_w, bool)
                                         or not isinstance(self.power_w, (int, float))
                                         or not math.isfinite(self.power_w) or self.power_w < 0):
            bad("power_w", f"must be a finite power >= 0 in watts or empty, got {self.power_w!r}",
                "give watts, or leave it empty")
        if self.frequency_hz is not None and (isinstance(self.frequency_hz, bool)
                                              or not isinstance(self.frequency_hz, (int, float))
                                              or not math.isfinite(self.frequency_hz) or self.frequency_hz <= 0):
            bad("frequency_hz", f"must be a finite frequency > 0 in Hz or empty, got {self.frequency_hz!r}",
                "give Hz (1.8e9 for 1800 MHz), or leave it empty")
        try:
            when = datetime.fromisoformat(str(self.measured_at).replace("Z", "+00:00"))
        except ValueError:
            when = None
        offset = when.utcoffset() if when is not None else None
        if offset is None or offset.total_seconds() != 0:
            bad("measured_at", f"must be an ISO 8601 time in UTC, got {self.measured_at!r}",
                "write it like 2025-01-31T12:00:00+00:00")

    @property
    def key(self) -> Tuple[str, str, str, int, str, str]:
        """The identity in the database: ``(soc, pu, signature, batch, ort_version, kind)``."""
        return (self.soc, self.pu, self.signature, self.batch, self.ort_version, self.kind)

    @classmethod
    def field_names(cls) -> Tuple[str, ...]:
        """Column names in declaration order."""
        return tuple(f.name for f in fields(cls))
