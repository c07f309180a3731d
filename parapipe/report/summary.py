"""The summary figure of a sweep: energy-efficiency gains of throughput-optimal parapipe mappings.

One panel per SoC profile, one row per model; horizontal bars give the gain in inferences per joule of the
throughput-optimal parapipe point over the throughput-optimal pure-pipeline point and over the
throughput-optimal non-pipelined parallel point (percent). Solid vertical lines mark the panel's averages,
dashed lines the reference values (the Para-Pipe paper's 11.0 % and 23.3 %, passed in by the caller).
"""
from __future__ import annotations

import logging
import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence

from matplotlib.figure import Figure

from ..errors import input_error
from ._common import STYLE, save_figure

log = logging.getLogger(__name__)

#: The bars drawn: (row key, baseline strategy whose colour is used, legend text).
GAIN_SERIES = (("gain_vs_pipeline_pct", "pipeline", "vs pure pipeline"),
               ("gain_vs_parallel_pct", "parallel", "vs parallel (1 stage)"))


def _value(row: Mapping[str, Any], key: str, i: int) -> Optional[float]:
    if key not in row:
        raise input_error("summary rows", f"row[{i}].{key}", "missing", "pass the energy-efficiency rows")
    v = row[key]
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise input_error("summary rows", f"row[{i}].{key}", f"must be a number, got {v!r}",
                          "pass the energy-efficiency rows")
    return float(v)


def plot_energy_gains(rows: Sequence[Mapping[str, Any]], path: Any, *,
                      reference_pct: Optional[Dict[str, float]] = None, title: Optional[str] = None) -> None:
    """Write the summary figure of energy-efficiency gains as a PNG.

    Parameters
    ----------
    rows : sequence of mapping
        One per model x SoC with ``model``, ``soc``, ``gain_vs_pipeline_pct`` and ``gain_vs_parallel_pct``
        (percent, None where the baseline is missing); panels follow the order SoCs first appear in.
    path : str or os.PathLike
        PNG to write (temp file in the same folder, then renamed); 500 px wide per panel plus 150 px, 55 px
        per model plus 180 px.
    reference_pct : dict, optional
        Row key -> reference gain (percent) drawn as a dashed line in every panel.
    title : str, optional
        Figure title.

    Raises
    ------
    InputError
        No rows, or a row misses a key or holds a non-number.
    OSError
        The folder cannot be written.
    """
    if not rows:
        raise input_error("summary rows", None, "no rows", "run at least one model x SoC")
    socs: List[str] = []
    for i, r in enumerate(rows):
        for key in ("model", "soc"):
            if not isinstance(r.get(key), str):
                raise input_error("summary rows", f"row[{i}].{key}", "missing or not a string",
                                  "pass the energy-efficiency rows")
        if r["soc"] not in socs:
            socs.append(r["soc"])
    per_soc = {s: [(i, r) for i, r in enumerate(rows) if r["soc"] == s] for s in socs}
    same_models = len({tuple(r["model"] for _, r in mine) for mine in per_soc.values()}) == 1
    n_models = max(len(mine) for mine in per_soc.values())
    fig = Figure(figsize=(1.5 + 5.0 * len(socs), 1.8 + 0.55 * n_models), layout="constrained")
    axes = fig.subplots(1, len(socs), squeeze=False, sharey=same_models)[0]
    height = 0.8 / len(GAIN_SERIES)
    handles = {}
    for ax, soc in zip(axes, socs):
        mine = per_soc[soc]
        ys = list(range(len(mine)))
        means = []
        for k, (key, strategy, label) in enumerate(GAIN_SERIES):
            vals = [_value(r, key, i) for i, r in mine]
            offs = [y - 0.4 + height * (k + 0.5) for y in ys]
            color = STYLE[strategy]["color"]
            handles[label] = ax.barh(offs, [v if v is not None else 0.0 for v in vals], height=height * 0.9,
                                     color=color, label=label)
            for y, v in zip(offs, vals):
                text = "n/a" if v is None else f"{v:+.1f}%"
                right = (v or 0.0) >= 0
                ax.annotate(text, (v or 0.0, y), xytext=(3 if right else -3, 0), textcoords="offset points",
                            va="center", ha="left" if right else "right", fontsize=8)
            present = [v for v in vals if v is not None]
            if present:
                mean = statistics.fmean(present)
                means.append(f"{label.split(' (')[0]} {mean:+.1f}%")
                handles[f"average {label} (this panel)"] = ax.axvline(mean, color=color, lw=1.5)
            if reference_pct and key in reference_pct:
                handles[f"paper {label}: {reference_pct[key]:+.1f}%"] = ax.axvline(
                    reference_pct[key], color=color, lw=1.2, ls="--")
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_yticks(ys, [r["model"] for _, r in mine])
        if not same_models or ax is axes[0]:
            ax.set_ylim(len(ys) - 0.5, -0.5)
        lo, hi = ax.get_xlim()
        pad = 0.15 * (hi - lo)
        ax.set_xlim(min(lo, 0.0) - (pad if lo < 0 else 0.0), hi + pad)
        ax.set_xlabel("gain of throughput-optimal parapipe (%)")
        ax.set_title(f"{soc}\naverage: {', '.join(means)}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=3, fontsize=9,
               frameon=False)
    fig.suptitle(title or "Energy efficiency (inferences/J) of throughput-optimal mappings: parapipe vs "
                 "baselines")
    save_figure(fig, path)
