"""Plots of pareto.json documents and measured runs (the one package that imports matplotlib).

``plot_pareto`` (the front), ``plot_gantt`` (one mapping's modelled pipelined schedule), ``plot_utilisation``
(per-PU busy share of the period), ``gantt_from_trace`` (a measured run). All write PNGs atomically and never
switch matplotlib's global backend (figures are rendered by Agg without pyplot).
"""
from .gantt import GanttBar, gantt_bars, gantt_from_trace, plot_gantt, stage_offsets_s
from .plots import plot_pareto, staircase
from .utilisation import plot_utilisation, utilisation

__all__ = ["plot_pareto", "plot_gantt", "plot_utilisation", "gantt_from_trace", "gantt_bars",
           "stage_offsets_s", "staircase", "utilisation", "GanttBar"]
