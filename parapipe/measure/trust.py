"""How far a command's measurements can be trusted: the spread of their repeats and the machine's load.

Every measurement parapipe takes is ``warmup`` untimed and ``repeats`` timed runs; its *spread* is
``p90 / median - 1`` of the timed runs (:func:`ppexec.timing.stats`) and its *load* the share of the CPUs' time
other processes used while it ran (:func:`ppexec.timing.load_between`). A :class:`MeasureLog` collects both over a
command (every block, stage sub-model and micro-benchmark it timed; :class:`RecordingTimer` does it for a
:class:`~parapipe.measure.timer.Timer`), :meth:`MeasureLog.summary` gives the figures pareto.json
(``search.measurement``), ``profile --json`` and the runs table keep, and :func:`warning` the one line a command
prints when they are high enough to change its result.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import onnx

from ppexec import timing

from parapipe.measure.timer import Timer
from parapipe.soc.profile import PU, SoC

__all__ = ["StepProgress", "SPREAD_HIGH", "LOAD_HIGH", "MeasureLog", "RecordingTimer", "warning", "summary_text", "front_gap",
           "run_summary"]

StepProgress = Callable[[str, int, int], None]
"""``progress(step, done, total)``: a long step (``"measuring blocks"``, ``"timing stages"``, ...) has done ``done``
of ``total`` units; what the commands draw as progress bars (the library never prints)."""

SPREAD_HIGH = 0.10
"""Typical spread (median over a command's measurements of ``p90 / median - 1``) above which the measurements are
called disturbed. A parapipe choice: on an otherwise idle machine the blocks and stages ``optimize --soc host``
times stay at a few per cent (re-measure: ``parapipe optimize MODEL --soc host --json``, field
``search.measurement.spread``), while a machine with other CPU-bound processes gives tens of per cent; 10 % is
also where one timed run in ten is slower than the median by more than the host cost model's typical period
error (leave-one-out MAPE 4.0 %, worst 12.7 %: ``python benchmarks/fidelity.py``), so two front points closer
than that can swap places when run."""

LOAD_HIGH = 0.25
"""Load (share of the CPUs' time other processes used while parapipe measured) above which the measurements are
called disturbed: a quarter of the CPU time taken by others means, on average, one core in four shared with
another runnable process, and a stage on a shared core runs at about half speed (Linux CFS gives two runnable
tasks on one core equal shares, sched(7)); the pipeline's slowest stage sets its period, so that is enough to
reorder the front."""


@dataclass
class MeasureLog:
    """Spreads and loads of the measurements a command took (see the module docstring)."""

    spreads: List[float] = field(default_factory=list)
    loads: List[Optional[Dict[str, Any]]] = field(default_factory=list)

    def add(self, spread: Optional[float], load: Optional[Dict[str, Any]] = None) -> None:
        """Record one measurement: its ``spread`` (None: unknown) and ``load`` (:func:`ppexec.timing.load_between`
        dict, None: unknown)."""
        if spread is not None:
            self.spreads.append(float(spread))
        self.loads.append(load)

    def add_times(self, times_s: Sequence[float], load: Optional[Dict[str, Any]] = None) -> None:
        """Record one measurement from its timed runs (seconds) and load."""
        if times_s:
            self.add(timing.stats(list(times_s))["spread"], load)

    def add_reply(self, reply: Dict[str, Any]) -> None:
        """Record one timer / agent ``profile`` reply (``spread``, ``load``; an older agent's reply has no
        ``load``)."""
        self.add(reply.get("spread"), reply.get("load"))

    def summary(self) -> Dict[str, Any]:
        """``{"measurements": n, "spread": median spread, "spread_p90": p90 of the spreads, "load": share of the
        CPUs' time other processes used over all measuring windows, "load_window_s": their total seconds,
        "cpus": CPUs watched, "spread_high": SPREAD_HIGH, "load_high": LOAD_HIGH}``; a figure is None where
        nothing was measured (or the load could not be read)."""
        load = timing.combine_loads(self.loads)
        spreads = sorted(self.spreads)
        return {"measurements": len(spreads),
                "spread": statistics.median(spreads) if spreads else None,
                "spread_p90": timing.stats(spreads)["p90_s"] if spreads else None,
                "load": None if load is None else load["load"],
                "load_window_s": None if load is None else load["window_s"],
                "cpus": None if load is None else load["cpus"],
                "spread_high": SPREAD_HIGH, "load_high": LOAD_HIGH}


def front_gap(throughputs_per_s: Sequence[float]) -> Optional[float]:
    """Relative lead of the best throughput over the next distinct one (``best / next - 1``); None with fewer
    than two."""
    distinct = sorted({float(t) for t in throughputs_per_s if 0 < t < float("inf")}, reverse=True)
    return distinct[0] / distinct[1] - 1.0 if len(distinct) >= 2 else None


def summary_text(summary: Dict[str, Any], what: str = "timed runs") -> str:
    """One line: ``measurement: spread 3.1 % (p90/median - 1 of the timed runs, median of 58 measurements), load
    0.04 (share of 2 CPUs' time other processes used while measuring)``."""
    n = summary.get("measurements") or 0
    spread, load = summary.get("spread"), summary.get("load")
    parts = ["spread " + ("-" if spread is None else f"{spread * 100:.1f} %")
             + f" (p90/median - 1 of the {what}" + (f", median of {n} measurements)" if n > 1 else ")")]
    parts.append("load " + ("unknown" if load is None else f"{load:.2f}")
                 + ((f" (share of {summary['cpus']} CPUs' time" if summary.get("cpus") else " (share of the CPUs' time")
                    + " other processes used while measuring)" if load is not None else " (no /proc/stat)"))
    return "measurement: " + ", ".join(parts)


def warning(summary: Dict[str, Any], gap: Optional[float] = None,
            remedy: str = "measure again at a quieter moment") -> Optional[str]:
    """The one-line warning when the spread exceeds :data:`SPREAD_HIGH` or the load :data:`LOAD_HIGH`, naming
    each threshold and why, the front's lead ``gap`` (best / next throughput - 1) when given, and ``remedy``;
    None when neither is exceeded."""
    spread, load = summary.get("spread"), summary.get("load")
    reasons = []
    if load is not None and load > LOAD_HIGH:
        reasons.append(f"load {load:.2f} > {LOAD_HIGH:.2f} (other processes used {load:.0%} of the CPUs' time; "
                       "a stage on a shared core runs at about half speed)")
    if spread is not None and spread > SPREAD_HIGH:
        reasons.append(f"spread {spread:.0%} > {SPREAD_HIGH:.0%} (one timed run in ten was that much slower than "
                       "the median, more than the cost model's own error)")
    if not reasons:
        return None
    lead = ""
    if gap is not None:
        near = spread is not None and spread > gap or load is not None and load > LOAD_HIGH
        lead = (f"; the best point leads the next by {gap:.1%}" + (", so they can swap" if near else ""))
    return "warning: measurements disturbed: " + " and ".join(reasons) + lead + f"; remedy: {remedy}"


def run_summary(spread: Optional[float], load: Optional[float]) -> Dict[str, Any]:
    """The :meth:`MeasureLog.summary` form of a pipeline run's figures (``RunReport.spread``, ``.load``)."""
    return {"measurements": 1, "spread": spread, "load": load, "cpus": None, "spread_high": SPREAD_HIGH,
            "load_high": LOAD_HIGH}


class RecordingTimer:
    """A :class:`~parapipe.measure.timer.Timer` that records the spread and load of every model it times into
    ``log`` (hand-offs are left out: a queue wake-up's jitter is its nature, not a disturbance), delegating all
    else to ``inner``."""

    def __init__(self, inner: Timer, log: MeasureLog):
        self.inner = inner
        self.log = log
        self.host = inner.host
        self.facts = inner.facts

    @property
    def ort_version(self) -> str:
        """As ``inner``."""
        return self.inner.ort_version

    @property
    def cpus_allowed(self) -> List[int]:
        """As ``inner``."""
        return self.inner.cpus_allowed

    def check_pus(self, soc: SoC, pus: Sequence[str]) -> None:
        """As ``inner``."""
        self.inner.check_pus(soc, pus)

    def target(self, pu: PU) -> Dict[str, Any]:
        """As ``inner``."""
        return self.inner.target(pu)

    def time_model(self, model: onnx.ModelProto, pu: PU, optimization: str, warmup: int, repeats: int,
                   timeout_s: Optional[float] = None, frequency: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """``inner.time_model``, recorded."""
        extra: Dict[str, Any] = {} if frequency is None else {"frequency": frequency}
        if timeout_s is None:
            reply = self.inner.time_model(model, pu, optimization, warmup, repeats, **extra)
        else:
            reply = self.inner.time_model(model, pu, optimization, warmup, repeats, timeout_s, **extra)
        self.log.add_reply(reply)
        return reply

    def time_handoff(self, nbytes: int, src_cpus: Sequence[int], dst_cpus: Sequence[int], warmup: int = 3,
                     repeats: int = 20, timeout_s: Optional[float] = None) -> Dict[str, Any]:
        """``inner.time_handoff`` (not recorded)."""
        if timeout_s is None:
            return self.inner.time_handoff(nbytes, src_cpus, dst_cpus, warmup, repeats)
        return self.inner.time_handoff(nbytes, src_cpus, dst_cpus, warmup, repeats, timeout_s)
