"""Pictures of a workload document (:class:`parapipe.mapping.workload.WorkloadDoc`).

``plot_workload`` draws the front: (a) workload throughput (workload frames/s) against the latency axis (ms),
(b) the latency axis against energy per workload frame (mJ); the best front points labelled with their ids, the baselines
``separate``, ``split`` and ``whole`` one marker each, the lower bounds dashed. ``plot_workload_gantt`` draws the
predicted schedule of one point: per PU, each model's stages in the model's own colour, ``rate`` frames of each
model per workload frame run back to back, over ``n_frames`` workload periods (a replicated stage's frames dealt
to its replicas by their shares, each run whole on one replica, as on a single model's chart; a model's stage on a PU shared
with other models waits for them: the chart shows each PU's busy time per workload frame, not when each frame
enters).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from matplotlib.figure import Figure

from ..mapping.workload import WorkloadDoc, WorkloadPoint
from ._common import save_figure
from .plots import NOTE_COLOUR

__all__ = ["plot_workload", "plot_workload_gantt", "MODEL_COLOURS"]

#: Colours of the models, in the workload's order (matplotlib's tab10 palette).
MODEL_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_MARKERS = {"separate": "s", "split": "^", "whole": "D"}


def _title(doc: WorkloadDoc) -> str:
    models = " + ".join(f"{m.name} x{m.rate:g}" for m in doc.models)
    return f"{models} on {doc.soc.name}"


def _best(points: List[WorkloadPoint], key: str) -> Any:
    return min(points, key=lambda p: (getattr(p, key), p.period_s, p.latency_s, p.energy_j), default=None)


def plot_workload(doc: WorkloadDoc, path: Any, note: Optional[str] = None) -> None:
    """Write the front of ``doc`` to ``path`` (PNG; module docstring): every front point a dot, each panel's
    non-dominated points joined as a staircase, the best-throughput, -latency and -energy points labelled.
    ``note`` (:func:`parapipe.report.plots.power_note`: placeholder or low-confidence powers) goes over the
    energy panel in the warning colour, as on a single model's chart."""
    fig = Figure(figsize=(11, 4.8))
    axes = fig.subplots(1, 2)
    front = sorted((p for p in doc.points if p.strategy == "parapipe"), key=lambda p: p.latency_s)
    axis = "max" if doc.latency_axis == "max" else "rate-weighted mean"
    for ax, (xs, ys, xl, yl) in zip(axes, [
            (lambda p: p.latency_s * 1e3, lambda p: p.throughput_per_s, f"latency, {axis} over models (ms)",
             "workload throughput (workload frames/s)"),
            (lambda p: p.latency_s * 1e3, lambda p: p.energy_j * 1e3, f"latency, {axis} over models (ms)",
             "energy per workload frame (mJ)")]):
        ax.plot([xs(p) for p in front], [ys(p) for p in front], "o", color="black", label="parapipe front", ms=4)
        # the panel's own non-dominated points (the 3-objective front's shadow on it), joined as a staircase
        sign = -1.0 if ys is not None and yl.startswith("workload throughput") else 1.0
        stair, best_y = [], float("inf")
        for p in sorted(front, key=lambda p: (xs(p), sign * ys(p))):
            if sign * ys(p) < best_y:
                stair.append(p)
                best_y = sign * ys(p)
        ax.step([xs(p) for p in stair], [ys(p) for p in stair], where="post", color="black", lw=1)
        named = {id(p): p for p in (_best(front, "period_s"), _best(front, "latency_s"), _best(front, "energy_j"))
                 if p is not None}
        for n, p in enumerate(named.values()):
            ax.annotate(p.id, (xs(p), ys(p)), textcoords="offset points", xytext=(6, 6 - 12 * n), fontsize=8)
        for p in doc.points:
            if p.strategy in _MARKERS:
                ax.plot([xs(p)], [ys(p)], _MARKERS[p.strategy], ms=8, fillstyle="none", label=p.strategy)
        ax.axvline(doc.bounds.latency_lb_s * 1e3, ls="--", color="grey", lw=0.8)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        if note and yl.startswith("energy"):  # over the energy panel, in the warning colour
            ax.set_title(note, color=NOTE_COLOUR, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].axhline(1.0 / doc.bounds.period_lb_s if doc.bounds.period_lb_s > 0 else 0, ls="--", color="grey",
                    lw=0.8, label="bounds")
    handles, labels = axes[0].get_legend_handles_labels()
    seen: Dict[str, Any] = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=len(seen), fontsize=8)
    fig.suptitle(_title(doc))
    fig.subplots_adjust(bottom=0.22, wspace=0.3)
    save_figure(fig, path)


def _bars(doc: WorkloadDoc, point: WorkloadPoint, n_frames: int) -> List[Tuple[str, float, float, int, str]]:
    """(PU, start s, duration s, model index, label) of every stage run over ``n_frames`` workload periods."""
    from ppexec.dispatch import SmoothWeightedRoundRobin

    bars = []
    free: Dict[str, float] = {}
    # a replicated stage: each frame runs whole on the replica the dispatcher deals it to (smooth weighted round
    # robin by share, as the executor deals and as the single-model chart draws), for that replica's time
    dealers = {(m, s): SmoothWeightedRoundRobin([r.share for r in st.replicas])
               for m, model in enumerate(doc.models)
               for s, st in enumerate(point.mappings[model.name].stages) if st.replicas}
    for f in range(n_frames):
        t0 = f * point.period_s
        for pu in free:
            free[pu] = max(free[pu], t0)
        for m, model in enumerate(doc.models):
            stages = point.mappings[model.name].stages
            reps = model.rate if float(model.rate).is_integer() else 1.0
            for _ in range(int(reps)):
                for s, st in enumerate(stages):
                    if st.replicas:
                        r = dealers[(m, s)].pick()
                        rep = st.replicas[r]
                        runs = [(pu, rep.time_s, f"{model.name} s{s} r{r}") for pu in rep.pus]
                    else:
                        runs = [(pu, st.time_s, f"{model.name} s{s}") for pu in st.all_pus()]
                    for pu, t_s, label in runs:
                        dur = t_s * (model.rate / reps)
                        start = max(free.get(pu, t0), t0)
                        bars.append((pu, start, dur, m, label))
                        free[pu] = start + dur
    return bars


def plot_workload_gantt(doc: WorkloadDoc, point: WorkloadPoint, path: Any, n_frames: int = 2) -> None:
    """Write the predicted schedule of ``point`` to ``path`` (PNG; module docstring)."""
    bars = _bars(doc, point, n_frames)
    lanes = list(dict.fromkeys(pu for pu in doc.soc.pus if any(b[0] == pu for b in bars))) or sorted(
        {b[0] for b in bars})
    fig = Figure(figsize=(11, 1.0 + 0.6 * len(lanes)))
    ax = fig.subplots()
    for pu, start, dur, m, label in bars:
        y = lanes.index(pu)
        ax.barh(y, dur * 1e3, left=start * 1e3, color=MODEL_COLOURS[m % len(MODEL_COLOURS)], edgecolor="white",
                height=0.6)
    for f in range(n_frames + 1):
        ax.axvline(f * point.period_s * 1e3, color="grey", ls=":", lw=0.8)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms); dotted: workload periods")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=MODEL_COLOURS[m % len(MODEL_COLOURS)],
                             label=f"{model.name} (x{model.rate:g}, latency "
                                   f"{point.latency_s_per_model[model.name] * 1e3:.3g} ms)")
                       for m, model in enumerate(doc.models)], loc="upper center", bbox_to_anchor=(0.5, -0.25),
              ncol=len(doc.models), fontsize=8)
    ax.set_title(f"{_title(doc)}: point {point.id} ({point.strategy}), predicted, "
                 f"{point.throughput_per_s:.4g} workload frames/s")
    fig.tight_layout()
    save_figure(fig, path)
