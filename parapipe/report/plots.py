"""The Pareto plot of a pareto.json document, and the one import point for every report plot.

``plot_pareto`` draws two panels: (a) throughput (inferences/s) against latency (ms), (b) latency (ms) against
energy per inference (mJ). Parapipe points are joined by the staircase of their two-dimensional non-dominated
subset in each panel (a point on the three-objective front need not be non-dominated in a two-objective
projection); baselines get one marker per strategy; points flagged ``pareto: true`` (non-dominated among all
strategies on the document's objectives) get a black ring; the lower bounds of the document, when present, are
dashed lines. Parapipe points carry their ids (``p0``… as in pareto.json and the CLI's table) and single-PU
baselines their PU; coinciding points share one label (``dsp0/dsp1``); labels are placed around their markers
where they cover no other marker, label or the legend (:func:`place_labels`).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from ..errors import input_error
from ..mapping.model import ParetoDoc
from ._common import DEFAULT_SOURCE, STRATEGIES, STYLE, save_figure, title_of
from .gantt import gantt_from_trace, plot_gantt
from .utilisation import plot_utilisation

log = logging.getLogger(__name__)

#: An axis whose values span more than this ratio is drawn on a log scale (a LITTLE core 10x slower than the
#: front would otherwise squeeze the front into a corner). Chosen for readability, not from a source.
LOG_SCALE_RATIO = 5.0

__all__ = ["plot_pareto", "plot_gantt", "plot_utilisation", "gantt_from_trace", "staircase", "point_labels",
           "place_labels"]


def staircase(xs: Sequence[float], ys: Sequence[float], maximise_y: bool) -> Tuple[List[float], List[float]]:
    """The two-dimensional non-dominated subset of points, sorted by x (x is minimised).

    Parameters
    ----------
    xs, ys : sequence of float, shape (n,)
        Coordinates.
    maximise_y : bool
        True when larger y is better (throughput), False when smaller is better (latency).

    Returns
    -------
    (list of float, list of float)
        x and y of the kept points, x ascending; y strictly improving along it. Drawn with
        ``step(..., where="post")`` this is the boundary of the region the points dominate.

    Examples
    --------
    >>> staircase([3, 1, 2, 4], [5, 1, 4, 4], maximise_y=True)
    ([1, 2, 3], [1, 4, 5])
    """
    sign = -1.0 if maximise_y else 1.0
    order = sorted(range(len(xs)), key=lambda i: (xs[i], sign * ys[i]))
    kx: List[float] = []
    ky: List[float] = []
    for i in order:
        if not ky or sign * ys[i] < sign * ky[-1]:
            kx.append(xs[i])
            ky.append(ys[i])
    return kx, ky


def point_labels(by_strategy: Dict[str, List[Dict[str, Any]]], xk: str, yk: str
                 ) -> List[Tuple[float, float, str, str]]:
    """Labels to draw: the parapipe points' ids (``p0``…) and the single-PU baselines' PU names, one label per
    position — points that coincide (to 4 significant digits) share one label, ``dsp0/dsp1``.

    Returns
    -------
    list of (x, y, text, strategy of the first point there)
    """
    spots: Dict[Tuple[str, str], List[Any]] = {}
    for strategy in ("parapipe", "single"):
        for p in by_strategy.get(strategy, []):
            name = p["id"][len("single-"):] if strategy == "single" and p["id"].startswith("single-") else p["id"]
            key = (f"{p[xk]:.4g}", f"{p[yk]:.4g}")
            spot = spots.setdefault(key, [p[xk], p[yk], [], strategy])
            if name not in spot[2]:
                spot[2].append(name)
    return [(x, y, "/".join(names), strategy) for x, y, names, strategy in spots.values()]


Box = Tuple[float, float, float, float]  # x0, y0, x1, y1 in display pixels

#: Where a label may go around its marker, tried in this order: right, up-right, left, up, down-right, down,
#: up-left, down-left (unit directions; the label's near corner or edge touches the marker's ring), then the
#: same farther out (``LABEL_RINGS``), joined to the point by a leader line.
LABEL_DIRECTIONS = ((1, 0), (1, 1), (-1, 0), (0, 1), (1, -1), (0, -1), (-1, 1), (-1, -1))
LABEL_RINGS = (1.0, 2.2, 3.6)


def _overlap(a: Box, b: Box) -> float:
    """Area shared by two boxes (0 when apart)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def place_labels(anchors: Sequence[Tuple[float, float, float]], sizes: Sequence[Tuple[float, float]],
                 obstacles: Sequence[Box], bounds: Box, gap: float = 2.0) -> List[Tuple[Box, bool]]:
    """Greedy label placement in display space: each label, in order, takes the first position around its
    marker (:data:`LABEL_DIRECTIONS` on the rings :data:`LABEL_RINGS`) that stays inside ``bounds`` and
    overlaps no marker, obstacle (the legend) or label placed before it; where every position overlaps, the
    one with the least overlap.

    Parameters
    ----------
    anchors : sequence of (x, y, r)
        Marker centre and radius of each label's point, pixels; every marker is also an obstacle.
    sizes : sequence of (width, height)
        Each label's extent, pixels.
    obstacles : sequence of boxes
        Further areas to keep clear, ``(x0, y0, x1, y1)`` pixels.
    bounds : box
        The axes area labels must stay inside.
    gap : float
        Pixels between a marker's edge and its label.

    Returns
    -------
    list of (box, leader)
        Each label's box, and whether it sits beyond the first ring (draw a leader line to its point).
    """
    markers = [(x - r, y - r, x + r, y + r) for x, y, r in anchors]
    placed: List[Box] = []
    out: List[Tuple[Box, bool]] = []
    for (x, y, r), (w, h) in zip(anchors, sizes):
        best: Optional[Tuple[float, Box, bool]] = None
        for ring_i, ring in enumerate(LABEL_RINGS):
            d = r * ring + gap
            for dx, dy in LABEL_DIRECTIONS:
                x0 = x + d if dx > 0 else x - d - w if dx < 0 else x - w / 2
                y0 = y + d if dy > 0 else y - d - h if dy < 0 else y - h / 2
                box = (x0, y0, x0 + w, y0 + h)
                outside = (max(0.0, bounds[0] - box[0]) + max(0.0, box[2] - bounds[2])
                           + max(0.0, bounds[1] - box[1]) + max(0.0, box[3] - bounds[3]))
                cost = sum(_overlap(box, o) for o in list(markers) + list(obstacles) + placed) + outside * h * 10
                if best is None or cost < best[0]:
                    best = (cost, box, ring_i > 0)
                if cost == 0:
                    break
            if best is not None and best[0] == 0:
                break
        assert best is not None  # LABEL_RINGS and LABEL_DIRECTIONS are not empty
        placed.append(best[1])
        out.append((best[1], best[2]))
    return out


def _label_points(ax, by_strategy, xk: str, yk: str) -> list:
    """Draw the labels of :func:`point_labels` at their points; returns ``(Text, x, y)`` for
    :func:`_place_panel_labels`, which moves them once the layout and scales are final."""
    return [(ax.text(x, y, text, fontsize=8 if strategy == "parapipe" else 10, color=STYLE[strategy]["color"],
                     zorder=5, ha="left", va="bottom"), x, y)
            for x, y, text, strategy in point_labels(by_strategy, xk, yk)]


def _place_panel_labels(fig: Figure, ax, labels: list, markers: Sequence[Tuple[float, float, float]],
                        legend=None) -> None:
    """Move each label of ``labels`` (from :func:`_label_points`) next to its marker where it covers no other
    marker, label or the legend (:func:`place_labels`), with a leader line when it had to go farther out.
    ``markers``: (x, y, radius in points) of every point drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not labels:
        return
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()  # constrained layout and the log scales fix where everything lands
    renderer = canvas.get_renderer()
    px = fig.dpi / 72.0
    to_px = ax.transData.transform
    radius: Dict[Tuple[float, float], float] = {}
    for x, y, r_pt in markers:  # a label's marker: the largest drawn at its point
        key = (round(float(x), 12), round(float(y), 12))
        radius[key] = max(radius.get(key, 0.0), r_pt * px)
    others = [(*to_px((x, y)), r) for (x, y), r in radius.items()]
    anchors = [(*to_px((x, y)), radius.get((round(float(x), 12), round(float(y), 12)), 4.0)) for _, x, y in labels]
    extents = [t.get_window_extent(renderer) for t, _, _ in labels]
    sizes = [(e.width, e.height) for e in extents]
    b = ax.get_window_extent(renderer)
    obstacles = [(cx - r, cy - r, cx + r, cy + r) for cx, cy, r in others]
    if legend is not None:
        e = legend.get_window_extent(renderer)
        obstacles.append((e.x0, e.y0, e.x1, e.y1))
    inverse = ax.transData.inverted().transform
    placed = place_labels(anchors, sizes, obstacles, (b.x0, b.y0, b.x1, b.y1))
    for (text, x, y), (box, leader) in zip(labels, placed):
        text.set_position(inverse((box[0], box[1])))
        if leader:
            cx, cy = to_px((x, y))
            nx, ny = min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3])  # the box's nearest point
            ax.plot(*zip((x, y), inverse((nx, ny))), color="0.45", lw=0.6, zorder=4.5)


def _figures(doc: ParetoDoc) -> Dict[str, List[Dict[str, Any]]]:
    """Per strategy, the points in display units: id, latency_ms, throughput_per_s, energy_mj, pareto."""
    out: Dict[str, List[Dict[str, Any]]] = {s: [] for s in STRATEGIES}
    for p in doc.points:
        out[p.strategy].append({"id": p.id, "latency_ms": p.latency_s * 1e3, "throughput_per_s": p.throughput_per_s,
                                "energy_mj": p.energy_j * 1e3, "pareto": p.pareto})
    return out


def plot_pareto(doc: ParetoDoc, path: Any, *, source: Optional[str] = None) -> None:
    """Write the Pareto plot of a pareto.json document as a 1600 x 700 px PNG.

    Parameters
    ----------
    doc : parapipe.mapping.ParetoDoc
        The document (:func:`parapipe.mapping.read_pareto`): its points' strategies and figures, the model
        and SoC names, the objectives and the bounds (lines drawn where > 0).
    path : str or os.PathLike
        PNG to write (a temp file in the same folder, then renamed).
    source : str, optional
        File name for error messages (default ``"pareto.json"``).

    Raises
    ------
    InputError
        The document has no points.
    OSError
        The folder cannot be written.
    """
    by_strategy = _figures(doc)
    if not any(by_strategy.values()):
        raise input_error(source or DEFAULT_SOURCE, "points", "the document has no points",
                          "re-run 'parapipe optimize'")
    period_lb = doc.bounds.period_lb_s
    latency_lb = doc.bounds.latency_lb_s

    log_keys = set()  # one scale per quantity, the same in both panels
    for key in ("latency_ms", "throughput_per_s", "energy_mj"):
        vals = [p[key] for s in STRATEGIES for p in by_strategy[s]]
        if min(vals) > 0 and max(vals) > LOG_SCALE_RATIO * min(vals):
            log_keys.add(key)
    fig = Figure(figsize=(16, 7), layout="constrained")
    ax_t, ax_e = fig.subplots(1, 2)
    panels = (
        (ax_t, "latency_ms", "throughput_per_s", True, "(a) throughput vs latency",
         "latency per inference (ms", "throughput (inferences/s"),
        (ax_e, "energy_mj", "latency_ms", False, "(b) latency vs energy",
         "energy per inference (mJ", "latency per inference (ms"),
    )
    labels_of: Dict[Any, tuple] = {}
    for ax, xk, yk, maximise_y, title, xlabel, ylabel in panels:
        front = by_strategy["parapipe"]
        if front:
            sx, sy = staircase([p[xk] for p in front], [p[yk] for p in front], maximise_y)
            ax.step(sx, sy, where="post", color=STYLE["parapipe"]["color"], lw=1.8, alpha=0.8,
                    label="parapipe staircase (2-D non-dominated)", zorder=2)
        for strategy in STRATEGIES:
            pts = by_strategy[strategy]
            if not pts:
                continue
            st = STYLE[strategy]
            # Parapipe on top and smaller: a baseline equal to a front point (the search offers baselines to
            # the front) still shows around it.
            front_pt = strategy == "parapipe"
            ax.scatter([p[xk] for p in pts], [p[yk] for p in pts], marker=st["marker"], color=st["color"],
                       s=60 if front_pt else 110, alpha=0.95 if front_pt else 0.8, label=st["label"],
                       zorder=3.5 if front_pt else 3)
        # marker radii in points: sqrt(s) / 2 of the scatter sizes below (the ring's for Pareto-optimal points),
        # x 1.4 for the baselines' diamonds and triangles, whose corners reach past that circle
        labels_of[ax] = (_label_points(ax, by_strategy, xk, yk),
                         [(p[xk], p[yk], 260 ** 0.5 / 2 if p["pareto"] else 60 ** 0.5 / 2 if s == "parapipe"
                           else 1.4 * 110 ** 0.5 / 2) for s in STRATEGIES for p in by_strategy[s]])
        ring = [p for s in STRATEGIES for p in by_strategy[s] if p["pareto"]]
        if ring:
            ax.scatter([p[xk] for p in ring], [p[yk] for p in ring], marker="o", s=260, facecolors="none",
                       edgecolors="black", linewidths=1.6, label="Pareto-optimal (all strategies)", zorder=4)
        if latency_lb > 0:
            line = ax.axvline if xk == "latency_ms" else ax.axhline
            line(latency_lb * 1e3, color="0.4", ls="--", lw=1.2, label="latency lower bound", zorder=1)
        if period_lb > 0 and yk == "throughput_per_s":
            ax.axhline(1.0 / period_lb, color="0.4", ls=":", lw=1.5, zorder=1,
                       label="throughput upper bound (1 / period lower bound)")
        ax.set_title(title, fontsize=13)
        for key, label, axis, set_label in ((xk, xlabel, ax.xaxis, ax.set_xlabel),
                                            (yk, ylabel, ax.yaxis, ax.set_ylabel)):
            if key in log_keys:
                (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
                axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 3.0, 5.0), numticks=30))
                axis.set_major_formatter(ScalarFormatter())
                axis.set_minor_formatter(NullFormatter())
                label += ", log scale"
            set_label(label + ")", fontsize=12)
        ax.tick_params(labelsize=11)
        ax.grid(True, which="both", alpha=0.25)
        ax.margins(0.08)
    handles, labels = ax_t.get_legend_handles_labels()
    legend = ax_t.legend(handles, labels, loc="best", fontsize=10, framealpha=0.9)
    obj = f" (front on {', '.join(doc.objectives)})" if doc.objectives else ""
    fig.suptitle(f"Pareto front: {title_of(doc)}{obj}", fontsize=15)
    for ax, (texts, markers) in labels_of.items():
        _place_panel_labels(fig, ax, texts, markers, legend if ax is ax_t else None)
    save_figure(fig, path)
