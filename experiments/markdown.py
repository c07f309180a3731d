"""``report.md``: the tables and figures of a sweep, the paper's figures next to ours, search times and
break-even.

Pure text generation from the rows of :mod:`experiments.tables`; figures are referenced by relative paths
(``figures/...``) so the folder can be moved or published as it is.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from . import tables as T


@dataclass
class RunInfo:
    """How the sweep ran, for the report's header."""

    config_name: str
    config_source: str
    command: str
    runner: str  # "4 local processes" or "Dask scheduler tcp://..."
    wall_s: float
    load_before: Sequence[float] = ()
    load_after: Sequence[float] = ()
    figures: Dict[str, List[str]] = field(default_factory=dict)  # job key -> figure file names
    summary_figure: Optional[str] = None


def _f(v: Any, fmt: str, unit: str = "") -> str:
    return "–" if v is None else f"{format(v, fmt)}{unit}"


def _pct(v: Optional[float]) -> str:
    return "–" if v is None else f"{v:+.1f} %"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> List[str]:
    al = align or "l" * len(header)
    sep = ["---:" if a == "r" else "---" for a in al]
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"] + \
           ["| " + " | ".join(r) + " |" for r in rows]


def _si(n: Optional[int]) -> str:
    if n is None:
        return "never"
    for div, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if n >= div:
            return f"{n / div:.1f}{suffix}"
    return str(n)


def _duration(s: Optional[float]) -> str:
    if s is None:
        return "–"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def efficiency_section(eff: Sequence[Dict[str, Any]]) -> List[str]:
    """Per model x SoC table, the average row, averages per SoC next to the paper's and the targets."""
    out = ["## Energy efficiency of throughput-optimal mappings", "",
           "Inferences per joule (inf/J) of the throughput-optimal point (smallest period, ties: least "
           "energy) of parapipe and of each baseline; gain = parapipe / baseline − 1. Baselines: "
           + "; ".join(f"*{b}*: {T.BASELINE_MEANING[b]}" for b in T.BASELINES) + ". *shape*: what the "
           "parapipe point is (single: one stage on one PU; pipeline: one PU per stage; parallel: one stage over "
           "several PUs; replicated: one stage run whole by several replicas; hybrid: several stages, one or "
           "more of them over several PUs or replicas).", ""]
    rows = []
    for r in [*eff, T.average_row(eff)]:
        rows.append([r["model"], r["soc"], _f(r["parapipe_inf_per_j"], ".2f"),
                     _f(r["pipeline_inf_per_j"], ".2f"), _f(r["parallel_inf_per_j"], ".2f"),
                     _f(r["single_inf_per_j"], ".2f"), _f(r.get("replicated_inf_per_j"), ".2f"),
                     _pct(r["gain_vs_pipeline_pct"]), _pct(r["gain_vs_parallel_pct"]),
                     _pct(r["gain_vs_single_pct"]), _pct(r.get("gain_vs_replicated_pct")),
                     r["parapipe_shape"] or ""])
    out += _table(["model", "SoC", "parapipe inf/J", "pipeline inf/J", "parallel inf/J", "single inf/J",
                   "replicated inf/J", "gain vs pipeline", "gain vs parallel", "gain vs single",
                   "gain vs replicated", "shape"], rows, "llrrrrrrrrrl")
    out += ["", "### Averages next to the paper", ""]
    avg_rows = [["Para-Pipe paper (Zhang et al., IEEE TCAD 2025)", _pct(T.PAPER_GAIN_VS_PIPELINE_PCT),
                 _pct(T.PAPER_GAIN_VS_PARALLEL_PCT), ""],
                ["this project's target (A311D and A1000)", f"≥ {T.TARGET_GAIN_VS_PIPELINE_PCT:.0f} %",
                 f"≥ {T.TARGET_GAIN_VS_PARALLEL_PCT:.0f} %", ""]]
    scopes = [("ours, all", list(eff))]
    socs = list(dict.fromkeys(r["soc"] for r in eff))
    scopes += [(f"ours, {s}", [r for r in eff if r["soc"] == s]) for s in socs]
    target = [r for r in eff if r["soc"] in T.TARGET_SOCS]
    if target and len(target) != len(eff):
        scopes.append(("ours, A311D and A1000", target))
    for label, rs in scopes:
        a = T.average_row(rs)
        avg_rows.append([label, _pct(a["gain_vs_pipeline_pct"]), _pct(a["gain_vs_parallel_pct"]),
                         str(len(rs))])
    out += _table(["", "gain vs pure pipeline", "gain vs parallel", "model × SoC pairs"], avg_rows, "lrrr")
    out += ["", "The paper's row is the average gain of throughput-optimal configurations that Zhang et al. report "
            "(\"Para-Pipe: Exploiting Hierarchical Operator Parallelism of ML Computational Graphs on SoCs\", "
            "IEEE TCAD 2025, doi:10.1109/TCAD.2025.3568348). The target row is this project's own goal for the "
            "A311D and A1000 profiles, set above the paper's averages; it is not a published figure."]
    out += ["", *reading(eff), ""] + equal_throughput_section(eff, scopes)
    return out


def equal_throughput_section(eff: Sequence[Dict[str, Any]], scopes) -> List[str]:
    """Gains at equal throughput: per baseline, the most efficient parapipe point at least as fast as that
    baseline's throughput-optimal point (:func:`experiments.tables.equal_throughput_point`)."""
    out = ["### At equal throughput", "",
           "For each baseline, the most efficient parapipe point whose throughput is at least the baseline's best; "
           "gain = its inf/J / the baseline's − 1 (never negative: the search offers the baselines to the front).", ""]
    rows = [[r["model"], r["soc"]] + [_pct(r.get(f"eqthr_gain_vs_{b}_pct")) for b in T.BASELINES]
            for r in eff]
    out += _table(["model", "SoC"] + [f"gain vs {b}" for b in T.BASELINES], rows, "ll" + "r" * len(T.BASELINES))
    out += [""]
    avg = [[label] + [_pct(T.average_row(rs)[f"eqthr_gain_vs_{b}_pct"]) for b in T.BASELINES] + [str(len(rs))]
           for label, rs in scopes]
    out += _table([""] + [f"gain vs {b}" for b in T.BASELINES] + ["model × SoC pairs"], avg,
                  "l" + "r" * (len(T.BASELINES) + 1))
    return out


def reading(eff: Sequence[Dict[str, Any]]) -> List[str]:
    """Sentences saying what the numbers are made of (shapes of the parapipe points, zero/negative gains)."""
    n = len(eff)
    shapes = {s: sum(1 for r in eff if r["parapipe_shape"] == s) for s in ("single", "pipeline", "parallel",
                                                                           "replicated", "hybrid")}
    lines = ["**Reading the numbers.** Of the throughput-optimal parapipe mappings, "
             + ", ".join(f"{v} of {n} are {k}" for k, v in shapes.items() if v) + "."]
    zero = [r for r in eff if r["gain_vs_pipeline_pct"] is not None
            and abs(r["gain_vs_pipeline_pct"]) < 1e-9]
    if zero:
        lines.append(f"In {len(zero)} of {n} cases the gain over pure pipelining is 0 %: the best pure "
                     "pipeline already reaches the smallest period, so parapipe returns it (or a mapping "
                     "with the same period and energy).")
    neg = [r for r in eff
           if any((r[f"gain_vs_{b}_pct"] or 0.0) < -1e-9 for b in ("pipeline", "parallel"))]
    if neg:
        lines.append(f"In {len(neg)} of {n} cases a gain is negative: the parapipe point has a smaller (or "
                     "equal) period than that baseline's throughput-optimal point but spends more energy per "
                     "inference; the comparison is between throughput-optimal points, as in the paper, not "
                     "at equal throughput (" + ", ".join(f"{r['model']} on {r['soc']}" for r in neg[:6])
                     + (", …" if len(neg) > 6 else "") + ").")
    return [" ".join(lines)]


def search_section(rows: Sequence[Dict[str, Any]]) -> List[str]:
    """The search-time table with totals."""
    out = ["## Search times", "",
           "Wall time on the machine that ran the sweep, per model × SoC: *prepare* = ONNX import, "
           "coarsening and costing on the profile (the profiling step for a bundled profile), *search* = the "
           "parapipe front, the baselines and the CP-SAT polish. Jobs ran concurrently, so times include "
           "contention.", ""]
    body = [[r["model"], r["soc"], str(r["blocks"]), str(r["pus"]), f"{r['prepare_s']:.2f}",
             f"{r['search_s']:.2f}", str(r["front_points"]), "yes" if r["exact"] else "no"] for r in rows]
    out += _table(["model", "SoC", "blocks", "PUs", "prepare s", "search s", "front points", "exact DP"],
                  body, "llrrrrrl")
    s = [r["search_s"] for r in rows]
    out += ["", f"Search time: total {sum(s):.1f} s, median {statistics.median(s):.2f} s, max {max(s):.2f} s "
            f"({rows[s.index(max(s))]['model']} on {rows[s.index(max(s))]['soc']})."]
    return out


def break_even_section(rows: Sequence[Dict[str, Any]]) -> List[str]:
    """The break-even table: inferences that repay preparation + search at the gained throughput."""
    out = ["## Break-even", "",
           "Cost = prepare + search time. Each inference at the parapipe period instead of the best "
           f"baseline's period (the fastest of the {', '.join(T.BREAK_EVEN_BASELINES)} baselines) saves their "
           "difference; "
           "the break-even point is cost / saving inferences, reached after *time* of operation at the "
           "parapipe throughput. (On a real board the profiling step measures the blocks and costs more; "
           "scale the cost column.)", ""]
    body = [[r["model"], r["soc"], f"{r['cost_s']:.2f}", f"{r['parapipe_period_s'] * 1e3:.3f}",
             f"{r['best_baseline']} ({r['best_baseline_period_s'] * 1e3:.3f})",
             _f(None if r["saved_s_per_inference"] <= 0 else r["saved_s_per_inference"] * 1e6, ".1f"),
             _si(r["break_even_inferences"]), _duration(r["break_even_time_s"])] for r in rows]
    out += _table(["model", "SoC", "cost s", "parapipe period ms", "best baseline (period ms)",
                   "saved µs/inf", "break-even inferences", "time"], body, "llrrlrrr")
    finite = [r["break_even_inferences"] for r in rows if r["break_even_inferences"] is not None]
    if finite:
        median = _si(int(statistics.median(finite)))
        out += ["", f"{len(finite)} of {len(rows)} pairs break even (median {median} inferences); the others "
                "have no throughput gain over their best baseline."]
    return out


def figures_section(info: RunInfo, labels: Dict[str, str]) -> List[str]:
    """Links to the per model x SoC figures."""
    out = ["## Figures per model × SoC", "",
           "Front: throughput vs latency and latency vs energy, baselines marked; Gantt: the modelled "
           "pipelined schedule of the throughput-optimal parapipe mapping; utilisation: its per-PU busy "
           "share.", ""]
    for key, files in info.figures.items():
        out += [f"### {labels.get(key, key)}", ""] + [f"![{f}](figures/{f})" for f in files] + [""]
    return out


def render(info: RunInfo, eff: Sequence[Dict[str, Any]], search: Sequence[Dict[str, Any]],
           break_even: Sequence[Dict[str, Any]], labels: Dict[str, str]) -> str:
    """The whole report.md text.

    Parameters
    ----------
    info : RunInfo
    eff, search, break_even : sequences of dict
        Rows of :func:`experiments.tables.efficiency_rows`, ``search_rows`` and ``break_even_rows``.
    labels : dict
        Job key -> "model on SoC" heading for the figures section.
    """
    load = lambda xs: ", ".join(f"{x:.2f}" for x in xs) or "n/a"  # noqa: E731
    out = [f"# parapipe experiments: {info.config_name}", "",
           f"Configuration `{info.config_source}`: {len({r['model'] for r in eff})} models × "
           f"{len({r['soc'] for r in eff})} SoC profiles, {len(eff)} jobs on {info.runner}; wall time "
           f"{info.wall_s:.1f} s; load average (1, 5, 15 min) {load(info.load_before)} before, "
           f"{load(info.load_after)} after.", "", f"Command: `{info.command}`", "",
           "Files: `points.csv` (every point), `energy_efficiency.csv` (the table below with its average "
           "row), `fronts/*.pareto.json` (each search result), `figures/`.", ""]
    out += efficiency_section(eff)
    if info.summary_figure:
        out += ["", f"![energy-efficiency gains](figures/{info.summary_figure})"]
    out += [""] + search_section(search) + [""] + break_even_section(break_even) + [""]
    if info.figures:
        out += figures_section(info, labels)
    return "\n".join(out).rstrip() + "\n"
