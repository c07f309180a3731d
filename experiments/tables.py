"""The tables of a sweep, computed from the job results: points, energy efficiency, search times, break-even.

Definitions: energy efficiency = inferences per joule = 1 / energy per inference. The
throughput-optimal point of a strategy has the smallest period, ties broken by the smallest energy
(:func:`parapipe.app.sweep.throughput_optimal`). Gain in percent = 100 * (eff_parapipe / eff_baseline - 1), the
measure of the Para-Pipe paper's 11.0 % (over pure pipelining) and 23.3 % (over non-pipelined parallel).
At equal throughput (next to the paper's throughput-optimal comparison): for each baseline, the most efficient
parapipe point whose throughput is at least that of the baseline's throughput-optimal point
(:func:`equal_throughput_point`); gain as above. On search results it is never negative: the search offers
the baselines to the front.
Break-even: the search and preparation cost ``C`` seconds; each inference at the throughput-optimal parapipe
period ``P`` instead of the best baseline period ``P_b`` saves ``P_b - P`` seconds, so after
``N = ceil(C / (P_b - P))`` inferences the search has paid for itself (never when ``P >= P_b``).
"""
from __future__ import annotations

import csv
import math
import os
import statistics
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from parapipe.mapping import Point

from parapipe.app.sweep import JobResult, throughput_optimal

#: The Para-Pipe paper's average energy-efficiency gains of throughput-optimal configurations (percent):
#: over pure pipelining and over non-pipelined parallel execution (Zhang et al., "Para-Pipe: Exploiting
#: Hierarchical Operator Parallelism of ML Computational Graphs on SoCs", IEEE TCAD 2025,
#: doi:10.1109/TCAD.2025.3568348).
PAPER_GAIN_VS_PIPELINE_PCT = 11.0
PAPER_GAIN_VS_PARALLEL_PCT = 23.3
#: This project's own targets for the same averages on the A311D and A1000 profiles (set above the paper's
#: averages; not a published figure).
TARGET_GAIN_VS_PIPELINE_PCT = 15.0
TARGET_GAIN_VS_PARALLEL_PCT = 30.0
TARGET_SOCS = ("amlogic_a311d", "black_sesame_a1000")

BASELINES = ("pipeline", "parallel", "single", "replicated", "governor")
#: What each baseline strategy of pareto.json is (the report's legend).
BASELINE_MEANING = {
    "pipeline": "pure pipelining: several stages, one PU each",
    "parallel": "one stage over several PUs, its blocks list-scheduled (no pipelining)",
    "single": "the whole model on one PU",
    "replicated": "one stage of the whole model run by several replicas, one per PU able to run it, each "
                  "taking frames in proportion to its speed (data parallelism)",
    "governor": "the best-throughput parapipe mapping at the frequencies a Linux governor would run it at: "
                "performance (every PU at its highest operating point, what parapipe found before operating "
                "points) or schedutil (the kernel's 1.25 x utilisation rule); only on profiles with operating "
                "points, where the other baselines also come at their own best operating points",
}
#: The baselines whose fastest point the break-even compares parapipe with (:func:`break_even_rows`).
BREAK_EVEN_BASELINES = ("pipeline", "parallel", "single", "replicated")

POINT_COLUMNS = ["model", "soc", "strategy", "pareto", "throughput_per_s", "period_s", "latency_s",
                 "energy_j", "search_s", "point_id", "stages"]
EFFICIENCY_COLUMNS = (["model", "soc", "parapipe_inf_per_j"] + [f"{b}_inf_per_j" for b in BASELINES]
                      + [f"gain_vs_{b}_pct" for b in BASELINES]
                      + ["parapipe_period_s"] + [f"{b}_period_s" for b in BASELINES] + ["parapipe_shape"]
                      + [f"eqthr_inf_per_j_vs_{b}" for b in BASELINES]
                      + [f"eqthr_gain_vs_{b}_pct" for b in BASELINES])
GAIN_COLUMNS = [f"gain_vs_{b}_pct" for b in BASELINES] + [f"eqthr_gain_vs_{b}_pct" for b in BASELINES]
SEARCH_COLUMNS = ["model", "soc", "blocks", "pus", "prepare_s", "search_s", "front_points", "exact"]
BREAK_EVEN_COLUMNS = ["model", "soc", "cost_s", "parapipe_period_s", "best_baseline",
                      "best_baseline_period_s", "saved_s_per_inference", "break_even_inferences",
                      "break_even_time_s"]


def stages_text(point: Point) -> str:
    """``"big | gpu+npu | {dsp0,dsp1}"`` (:func:`parapipe.mapping.stages_text`)."""
    from parapipe.mapping import stages_text

    return stages_text(point.stages)


def mapping_shape(point: Point) -> str:
    """What kind of mapping a point is: ``single`` (one stage, one PU), ``pipeline`` (several stages, one PU
    each), ``parallel`` (one stage, several PUs), ``replicated`` (one stage run whole by several replicas) or
    ``hybrid`` (several stages, one or more with several PUs or replicas)."""
    stages = point.stages
    if len(stages) == 1 and stages[0].replicas:
        return "replicated"
    multi = any(len(st.pus) > 1 or st.replicas for st in stages)
    if len(stages) == 1:
        return "parallel" if multi else "single"
    return "hybrid" if multi else "pipeline"


def point_rows(results: Sequence[JobResult]) -> List[Dict[str, Any]]:
    """One row per point of every job (columns :data:`POINT_COLUMNS`)."""
    rows = []
    for r in results:
        for p in r.doc.points:
            rows.append({"model": r.doc.model.name, "soc": r.doc.soc.name, "strategy": p.strategy,
                         "pareto": p.pareto, "throughput_per_s": p.throughput_per_s,
                         "period_s": p.period_s, "latency_s": p.latency_s, "energy_j": p.energy_j,
                         "search_s": r.search_s, "point_id": p.id, "stages": stages_text(p)})
    return rows


def equal_throughput_point(points: Sequence[Point], base: Point) -> Optional[Point]:
    """The parapipe point of least energy among those with a period no longer than ``base``'s (ties: shorter
    period, then latency); None if there is none."""
    cands = [p for p in points if p.strategy == "parapipe" and p.period_s <= base.period_s * (1 + 1e-12)]
    return min(cands, key=lambda p: (p.energy_j, p.period_s, p.latency_s)) if cands else None


def front_optimal(result: JobResult) -> Point:
    """The throughput-optimal parapipe point of a job (:func:`parapipe.app.sweep.throughput_optimal`).

    Raises
    ------
    ValueError
        The job's document has no parapipe point (a search always returns one).
    """
    pp = throughput_optimal(result.doc.points, "parapipe")
    if pp is None:
        raise ValueError(f"{result.job.key}: the document has no parapipe point")
    return pp


def _gain(eff: float, base: Optional[float]) -> Optional[float]:
    return None if base is None or base <= 0 else 100.0 * (eff / base - 1.0)


def efficiency_rows(results: Sequence[JobResult]) -> List[Dict[str, Any]]:
    """Per job: inferences per joule and period of the throughput-optimal parapipe point and of each
    baseline's throughput-optimal point, the gains in percent and the parapipe mapping's shape (columns
    :data:`EFFICIENCY_COLUMNS`; no average row, see :func:`average_row`)."""
    rows = []
    for r in results:
        pts = r.doc.points
        pp = front_optimal(r)
        row: Dict[str, Any] = {"model": r.doc.model.name, "soc": r.doc.soc.name,
                               "parapipe_inf_per_j": 1.0 / pp.energy_j,
                               "parapipe_period_s": pp.period_s,
                               "parapipe_shape": mapping_shape(pp)}
        for b in BASELINES:
            bp = throughput_optimal(pts, b)
            eff = None if bp is None else 1.0 / bp.energy_j
            row[f"{b}_inf_per_j"] = eff
            row[f"{b}_period_s"] = None if bp is None else bp.period_s
            row[f"gain_vs_{b}_pct"] = _gain(row["parapipe_inf_per_j"], eff)
            eq = None if bp is None else equal_throughput_point(pts, bp)
            row[f"eqthr_inf_per_j_vs_{b}"] = None if eq is None else 1.0 / eq.energy_j
            row[f"eqthr_gain_vs_{b}_pct"] = None if eq is None else _gain(1.0 / eq.energy_j, eff)
        rows.append(row)
    return rows


def average_row(rows: Sequence[Dict[str, Any]], label: str = "average", soc: str = "all") -> Dict[str, Any]:
    """Arithmetic mean of each gain column over ``rows`` (other columns empty)."""
    out: Dict[str, Any] = {c: None for c in EFFICIENCY_COLUMNS}
    out.update(model=label, soc=soc)
    for col in GAIN_COLUMNS:
        vals = [r[col] for r in rows if r.get(col) is not None]
        out[col] = statistics.fmean(vals) if vals else None
    return out


def search_rows(results: Sequence[JobResult]) -> List[Dict[str, Any]]:
    """Per job: problem size, preparation and search wall times, front size (:data:`SEARCH_COLUMNS`)."""
    return [{"model": r.doc.model.name, "soc": r.doc.soc.name, "blocks": r.n_blocks, "pus": r.n_pus,
             "prepare_s": r.prepare_s, "search_s": r.search_s,
             "front_points": sum(1 for p in r.doc.points if p.strategy == "parapipe"),
             "exact": bool(r.doc.search.get("exact", 0.0))} for r in results]


def break_even_rows(results: Sequence[JobResult]) -> List[Dict[str, Any]]:
    """Per job: how many inferences at the throughput-optimal parapipe period repay preparation + search
    (columns :data:`BREAK_EVEN_COLUMNS`; None where parapipe is not faster than every baseline)."""
    rows = []
    for r in results:
        pts = r.doc.points
        pp = front_optimal(r)
        bases = [p for p in (throughput_optimal(pts, b) for b in BREAK_EVEN_BASELINES) if p is not None]
        best = min(bases, key=lambda p: (p.period_s, p.energy_j))
        cost_s = r.prepare_s + r.search_s
        saved = best.period_s - pp.period_s
        n = math.ceil(cost_s / saved) if saved > 0 else None
        rows.append({"model": r.doc.model.name, "soc": r.doc.soc.name, "cost_s": cost_s,
                     "parapipe_period_s": pp.period_s, "best_baseline": best.id,
                     "best_baseline_period_s": best.period_s, "saved_s_per_inference": saved,
                     "break_even_inferences": n,
                     "break_even_time_s": None if n is None else n * pp.period_s})
    return rows


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(float(v))  # float() drops numpy's repr, np.float64(...)
    return str(v)


def write_csv(path: os.PathLike, columns: Sequence[str], rows: Iterable[Dict[str, Any]]) -> None:
    """Write ``rows`` (dicts keyed by ``columns``) as CSV with a header; None -> empty, bools lowercase."""
    with open(Path(path), "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for row in rows:
            w.writerow([_cell(row.get(c)) for c in columns])
