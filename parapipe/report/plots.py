"""The Pareto plot of a pareto.json document, and the one import point for every report plot.

``plot_pareto`` draws four panels: (a) throughput (inferences/s) against latency (ms), (b) latency (ms) against
energy per inference (mJ), and (c), (d) the same zoomed on the parapipe points, where fronts crowd. Parapipe
points are joined by the staircase of their two-dimensional non-dominated subset in each panel (a point on the
three-objective front need not be non-dominated in a two-objective projection); baselines get one marker per
strategy; points flagged ``pareto: true`` (non-dominated among all strategies on the document's objectives) get
a black ring; the lower bounds of the document, when present, are dashed lines. Parapipe points carry their ids
(``p0``… as in pareto.json and the CLI's table), single-PU baselines their PU and the other baselines the ids of
their own staircase points; coinciding points share one label (``dsp0/dsp1``); labels are placed around their
markers where they cover no other marker, label or note, and left out where there is no such place
(:func:`place_labels`). The legend sits below the panels.

One module (about 500 lines) because the Pareto figure is one drawing: its four panels share the point
styles, the zoom rectangles and the label placement that keeps labels of all panels off each other.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, NullLocator, ScalarFormatter

from ..errors import input_error
from ..mapping.model import ParetoDoc
from ..mapping.model import STRATEGIES
from ._common import DEFAULT_SOURCE, STYLE, lay_out_grid, save_rendered, title_of

log = logging.getLogger(__name__)

#: An axis whose values span more than this ratio is drawn on a log scale (a LITTLE core 10x slower than the
#: front would otherwise squeeze the front into a corner). Chosen for readability, not from a source.
LOG_SCALE_RATIO = 5.0

__all__ = ["plot_pareto", "pareto_figure", "power_note", "ranked_labels", "staircase", "place_labels"]


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


Box = Tuple[float, float, float, float]  # x0, y0, x1, y1 in display pixels

#: Where a label may go around its marker, tried in this order: right, up-right, left, up, down-right, down,
#: up-left, down-left, then the eight directions between those (unit directions; the label's near corner or
#: edge touches the marker's ring), then the same farther out (``LABEL_RINGS``, in marker radii), joined to the
#: point by a leader line. Chosen for readability, not from a source.
LABEL_DIRECTIONS = ((1, 0), (1, 1), (-1, 0), (0, 1), (1, -1), (0, -1), (-1, 1), (-1, -1),
                    (1, 0.5), (-1, 0.5), (1, -0.5), (-1, -0.5), (0.5, 1), (-0.5, 1), (0.5, -1), (-0.5, -1))
LABEL_RINGS = (1.0, 2.2, 3.6, 5.0, 7.0)


def _overlap(a: Box, b: Box) -> float:
    """Area shared by two boxes (0 when apart)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def place_labels(anchors: Sequence[Tuple[float, float, float]], sizes: Sequence[Tuple[float, float]],
                 obstacles: Sequence[Box], bounds: Box, gap: float = 3.0) -> List[Optional[Tuple[Box, bool]]]:
    """Greedy label placement in display space: each label, in order (put the most important first), takes
    the first position around its marker (:data:`LABEL_DIRECTIONS` on the rings :data:`LABEL_RINGS`) that
    stays inside ``bounds`` and overlaps no marker, obstacle (the legend, notes) or label placed before it;
    a label with no such position is left out (None): labels never overlap.

    Parameters
    ----------
    anchors : sequence of (x, y, r)
        Marker centre and radius of each label's point, pixels; every marker is also an obstacle.
    sizes : sequence of (width, height)
        Each label's extent, pixels.
    obstacles : sequence of boxes
        Further areas to keep clear, ``(x0, y0, x1, y1)`` pixels (other markers, notes).
    bounds : box
        The axes area labels must stay inside.
    gap : float
        Pixels between a marker's edge and its label.

    Returns
    -------
    list of (box, leader) or None
        Each label's box, and whether it sits beyond the first ring (draw a leader line to its point); None
        for a label that found no free position.
    """
    import numpy as np

    fixed = [(x - r, y - r, x + r, y + r) for x, y, r in anchors] + list(obstacles)
    taken = np.array(fixed, dtype=float).reshape(-1, 4)
    out: List[Optional[Tuple[Box, bool]]] = []
    for (x, y, r), (w, h) in zip(anchors, sizes):
        found: Optional[Tuple[Box, bool]] = None
        for ring_i, ring in enumerate(LABEL_RINGS):
            d = r * ring + gap
            for dx, dy in LABEL_DIRECTIONS:
                cx, cy = x + dx * (d + w / 2), y + dy * (d + h / 2)  # the near edge or corner at d
                box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
                if box[0] < bounds[0] or box[2] > bounds[2] or box[1] < bounds[1] or box[3] > bounds[3]:
                    continue
                if len(taken) and np.any((np.minimum(box[2], taken[:, 2]) > np.maximum(box[0], taken[:, 0]))
                                         & (np.minimum(box[3], taken[:, 3]) > np.maximum(box[1], taken[:, 1]))):
                    continue
                found = (box, ring_i > 0)
                break
            if found is not None:
                break
        if found is not None:
            taken = np.vstack([taken, np.array(found[0], dtype=float)[None, :]])
        out.append(found)
    return out


def _to_px(transform, points: Sequence[Tuple[float, float]]) -> np.ndarray:
    """(m, 2) display coordinates of ``points`` (data coordinates) by ``transform`` in one call."""
    if not points:
        return np.empty((0, 2))
    return np.asarray(transform(np.asarray(points, dtype=float)), dtype=float).reshape(len(points), 2)


def _place_panel_labels(fig: Figure, ax, renderer, labels: list, markers: Sequence[Tuple[float, float, float]],
                        obstacles: Sequence[Any] = ()) -> int:
    """Place the labels ``[(text, x, y, colour, fontsize), ...]`` (most important first) next to their markers
    where they cover no marker, other label or obstacle artist (:func:`place_labels`), with a leader line
    where they had to go farther out; labels of points outside the axes' view, and labels with no free
    position, are not drawn. ``markers``: (x, y, radius in points) of every point drawn; ``renderer``: of the
    canvas the figure will be drawn on, with the layout final (no draw needed). Returns the number of labels of
    visible points left out."""
    if not labels:
        return 0
    ax.set_xlim(ax.get_xlim())  # leader lines and labels must not move the view they were placed in
    ax.set_ylim(ax.get_ylim())
    px = fig.dpi / 72.0
    to_px = ax.transData.transform
    b = ax.get_window_extent(renderer)
    bounds = (b.x0, b.y0, b.x1, b.y1)

    def inside(cx: float, cy: float) -> bool:
        return bounds[0] <= cx <= bounds[2] and bounds[1] <= cy <= bounds[3]

    radius: Dict[Tuple[float, float], float] = {}
    for x, y, r_pt in markers:  # a label's marker: the largest drawn at its point
        key = (round(float(x), 12), round(float(y), 12))
        radius[key] = max(radius.get(key, 0.0), r_pt * px)
    # one transform call per list, not per point: the figure of a 49-point front (ResNet-50 / A311D) builds in
    # 0.19 s instead of 0.21 s, the same pixels
    others = [(float(cx), float(cy), r) for (cx, cy), r in zip(_to_px(to_px, list(radius)), radius.values())]
    label_px = _to_px(to_px, [(lab[1], lab[2]) for lab in labels])
    shown_at = [(lab, (float(cx), float(cy))) for lab, (cx, cy) in zip(labels, label_px) if inside(cx, cy)]
    shown = [lab for lab, _ in shown_at]
    anchors = [(cx, cy, radius.get((round(float(lab[1]), 12), round(float(lab[2]), 12)), 4.0))
               for lab, (cx, cy) in shown_at]
    texts = [ax.text(x, y, text, fontsize=size, color=colour, zorder=5, ha="left", va="bottom")
             for text, x, y, colour, size in shown]
    for t in texts:
        t.set_gid("point-label")
        t.set_in_layout(False)  # placed inside the axes: the layout stays as it was measured
    sizes = [(e.width, e.height) for e in (t.get_window_extent(renderer) for t in texts)]
    boxes = [(cx - r, cy - r, cx + r, cy + r) for cx, cy, r in others if inside(cx, cy)]
    for artist in obstacles:
        e = artist.get_window_extent(renderer)
        boxes.append((e.x0, e.y0, e.x1, e.y1))
    inverse = ax.transData.inverted().transform
    left_out = 0
    for text, (_, x, y, _, _), (cx, cy, _), placed in zip(texts, shown, anchors,
                                                          place_labels(anchors, sizes, boxes, bounds)):
        if placed is None:
            text.remove()
            left_out += 1
            continue
        box, leader = placed
        text.set_position(inverse((box[0], box[1])))
        if leader:
            nx, ny = min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3])  # the box's nearest point
            ax.plot(*zip((x, y), inverse((nx, ny))), color="0.45", lw=0.6, zorder=4.5, scalex=False, scaley=False)
    return left_out


def _figures(doc: ParetoDoc) -> Dict[str, List[Dict[str, Any]]]:
    """Per strategy, the points in display units: id, latency_ms, throughput_per_s, energy_mj, pareto."""
    out: Dict[str, List[Dict[str, Any]]] = {s: [] for s in STRATEGIES}
    for p in doc.points:
        out[p.strategy].append({"id": p.id, "latency_ms": p.latency_s * 1e3, "throughput_per_s": p.throughput_per_s,
                                "energy_mj": p.energy_j * 1e3, "pareto": p.pareto})
    return out


#: What the energy panels say when the profile's powers are placeholders or low-confidence estimates
#: (:func:`power_note`).
PLACEHOLDER_NOTE = "PLACEHOLDER powers (no power meter read): compare energies between points only"
LOW_CONFIDENCE_NOTE = "low-confidence power estimates (profile provenance): energies are indicative"


#: Colour of the energy axis label when it carries a note (dark orange).
NOTE_COLOUR = "#a34a00"


def power_note(doc: ParetoDoc, soc: Any = None) -> Optional[str]:
    """The note the energy panels carry, from the provenance of the powers the energies were computed with.

    Parameters
    ----------
    doc : parapipe.mapping.ParetoDoc
        The document (its SoC's name, SHA-256 and PUs).
    soc : parapipe.soc.profile.SoC, optional
        The profile the document was computed with. Default: ``host`` profiles are measured by parapipe, which
        reads no power meter (:mod:`parapipe.measure.local`), so their powers are placeholders; a named profile is
        loaded (:func:`parapipe.soc.loader.load_soc`) and used when its SHA-256 is the document's.

    Returns
    -------
    str or None
        :data:`PLACEHOLDER_NOTE` when a power of the document's PUs or the static power is a placeholder
        (provenance ``confidence: low`` with a note starting ``placeholder``), :data:`LOW_CONFIDENCE_NOTE` when one
        is a low-confidence estimate, None when all are sourced or the profile cannot be found.
    """
    if soc is None:
        if doc.soc.name == "host":
            return PLACEHOLDER_NOTE
        try:
            from ..soc.identity import soc_sha256
            from ..soc.loader import load_soc

            found = load_soc(doc.soc.name)
        except Exception as exc:  # a profile given as a file the document does not locate: nothing to say
            log.debug("power provenance of %s unknown: %s", doc.soc.name, exc)
            return None
        if doc.soc.sha256 and soc_sha256(found) != doc.soc.sha256:
            log.debug("profile %s changed since the document was written: power provenance unknown", doc.soc.name)
            return None
        soc = found
    pus = list(doc.soc.pus) or list(soc.pus)
    keys = ["static_power_w"] + [f"pus.{pu}.{f}" for pu in pus for f in ("active_power_w", "idle_power_w")]
    prov = [soc.provenance.get(k) for k in keys]
    if any(p is not None and p.confidence == "low" and (p.note or "").lower().startswith("placeholder")
           for p in prov):
        return PLACEHOLDER_NOTE
    if any(p is not None and p.confidence == "low" for p in prov):
        return LOW_CONFIDENCE_NOTE
    return None


#: Labels per baseline strategy other than single-PU (its 2-D staircase's two ends and middle): a strategy
#: with 90 points gets its best named, not a cloud of ids. Chosen for readability, not from a source.
BASELINE_LABELS = 3


def ranked_labels(by_strategy: Dict[str, List[Dict[str, Any]]], xk: str, yk: str, maximise_y: bool,
                  whole_front: bool = True) -> List[Tuple[float, float, str, str]]:
    """Labels of one panel, most important first: parapipe points on the panel's 2-D staircase, the other
    Pareto-optimal parapipe points, the other parapipe points (these two only with ``whole_front``), the
    single-PU baselines (by PU), then each other baseline strategy's points on its own 2-D staircase (by id:
    ``pipeline-3``; at most :data:`BASELINE_LABELS`: its ends and middle). Points that coincide (to 4
    significant digits) share one label (``dsp0/dsp1``), at the rank of the first.

    Returns
    -------
    list of (x, y, text, strategy of the first point there)
    """
    def on_staircase(pts: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        kx, ky = staircase([p[xk] for p in pts], [p[yk] for p in pts], maximise_y)
        keep = set(zip(kx, ky))
        return [p for p in pts if (p[xk], p[yk]) in keep]

    front = by_strategy.get("parapipe", [])
    stair = on_staircase(front)
    ranked: List[Tuple[str, Dict[str, Any]]] = [("parapipe", p) for p in stair]
    if whole_front:
        ranked += [("parapipe", p) for p in sorted(front, key=lambda p: not p["pareto"]) if p not in stair]
    ranked += [("single", p) for p in by_strategy.get("single", [])]
    for strategy in STRATEGIES:
        if strategy not in ("parapipe", "single"):
            own = on_staircase(by_strategy.get(strategy, []))
            picks = sorted({0, len(own) - 1, (len(own) - 1) // 2})[:BASELINE_LABELS] if own else []
            ranked += [(strategy, own[i]) for i in picks]
    spots: Dict[Tuple[str, str], List[Any]] = {}
    for strategy, p in ranked:
        name = p["id"][len("single-"):] if strategy == "single" and p["id"].startswith("single-") else p["id"]
        key = (f"{p[xk]:.4g}", f"{p[yk]:.4g}")
        spot = spots.setdefault(key, [p[xk], p[yk], [], strategy])
        if name not in spot[2]:
            spot[2].append(name)
    return [(x, y, "/".join(names), strategy) for x, y, names, strategy in spots.values()]


def _zoom_limits(vals: Sequence[float], log: bool, pad: float = 0.12) -> Tuple[float, float]:
    """Limits around ``vals`` with ``pad`` of their span on each side (in log space on a log axis)."""
    import math

    lo, hi = min(vals), max(vals)
    if log:
        a, b = math.log10(lo), math.log10(hi)
        span = max(b - a, 0.02)
        return 10 ** (a - pad * span), 10 ** (b + pad * span)
    span = max(hi - lo, 0.02 * max(abs(hi), 1e-12))
    return lo - pad * span, hi + pad * span


#: Marker radii in points: sqrt(s) / 2 of the scatter sizes (the ring's for Pareto-optimal points), x 1.4 for
#: the baselines' diamonds and triangles, whose corners reach past that circle.
FRONT_S, BASELINE_S, RING_S = 60, 110, 260


def _radius_pt(p: Dict[str, Any], strategy: str) -> float:
    if p["pareto"]:
        return RING_S ** 0.5 / 2
    return FRONT_S ** 0.5 / 2 if strategy == "parapipe" else 1.4 * BASELINE_S ** 0.5 / 2


def pareto_figure(doc: ParetoDoc, *, source: Optional[str] = None, soc: Any = None) -> Figure:
    """The Pareto plot of a pareto.json document as a 1600 x 1250 px figure (see :func:`plot_pareto`).

    Point labels are text artists with gid ``"point-label"``; every marker is a scatter collection.

    Raises
    ------
    InputError
        The document has no points.
    """
    from matplotlib.patches import Rectangle

    by_strategy = _figures(doc)
    if not any(by_strategy.values()):
        raise input_error(source or DEFAULT_SOURCE, "points", "the document has no points",
                          "re-run 'parapipe optimize'")
    period_lb = doc.bounds.period_lb_s
    latency_lb = doc.bounds.latency_lb_s
    note = power_note(doc, soc)

    log_keys = set()  # one scale per quantity, the same in every panel
    for key in ("latency_ms", "throughput_per_s", "energy_mj"):
        vals = [p[key] for s in STRATEGIES for p in by_strategy[s]]
        if min(vals) > 0 and max(vals) > LOG_SCALE_RATIO * min(vals):
            log_keys.add(key)
    fig = Figure(figsize=(16, 12.5), dpi=100)
    (ax_t, ax_e), (zx_t, zx_e) = fig.subplots(2, 2)
    focus = by_strategy["parapipe"] or [p for s in STRATEGIES for p in by_strategy[s] if p["pareto"]] or \
        [p for s in STRATEGIES for p in by_strategy[s]]
    panels = (
        (ax_t, None, "latency_ms", "throughput_per_s", True, "(a) throughput vs latency, all points",
         "latency per inference (ms", "throughput (inferences/s"),
        (ax_e, None, "energy_mj", "latency_ms", False, "(b) latency vs energy, all points",
         "energy per inference (mJ", "latency per inference (ms"),
        (zx_t, ax_t, "latency_ms", "throughput_per_s", True, "(c) zoom on the parapipe front of (a)",
         "latency per inference (ms", "throughput (inferences/s"),
        (zx_e, ax_e, "energy_mj", "latency_ms", False, "(d) zoom on the parapipe front of (b)",
         "energy per inference (mJ", "latency per inference (ms"),
    )
    labels_of: Dict[Any, tuple] = {}
    obstacles_of: Dict[Any, list] = {}
    for ax, zoom_of, xk, yk, maximise_y, title, xlabel, ylabel in panels:
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
                       s=FRONT_S if front_pt else BASELINE_S, alpha=0.95 if front_pt else 0.8, label=st["label"],
                       zorder=3.5 if front_pt else 3)
        ring = [p for s in STRATEGIES for p in by_strategy[s] if p["pareto"]]
        if ring:
            ax.scatter([p[xk] for p in ring], [p[yk] for p in ring], marker="o", s=RING_S, facecolors="none",
                       edgecolors="black", linewidths=1.6, label="Pareto-optimal (all strategies)", zorder=4)
        if latency_lb > 0:
            line = ax.axvline if xk == "latency_ms" else ax.axhline
            line(latency_lb * 1e3, color="0.4", ls="--", lw=1.2, label="latency lower bound", zorder=1)
        if period_lb > 0 and yk == "throughput_per_s":
            ax.axhline(1.0 / period_lb, color="0.4", ls=":", lw=1.5, zorder=1,
                       label="throughput upper bound (1 / period lower bound)")
        for key, label, axis, set_label in ((xk, xlabel, ax.xaxis, ax.set_xlabel),
                                            (yk, ylabel, ax.yaxis, ax.set_ylabel)):
            if key in log_keys:
                (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
                axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 3.0, 5.0), numticks=30))
                axis.set_major_formatter(ScalarFormatter())
                axis.set_minor_formatter(NullFormatter())
                label += ", log scale"
            if key == "energy_mj" and note:  # under the axis, off the data, in the warning colour
                set_label(f"{label})\n{note}", fontsize=12, color=NOTE_COLOUR)
                continue
            set_label(label + ")", fontsize=12)
        ax.tick_params(labelsize=11)
        ax.grid(True, which="both", alpha=0.25)
        ax.margins(0.08)
        if zoom_of is not None:
            xlim = _zoom_limits([p[xk] for p in focus], xk in log_keys)
            ylim = _zoom_limits([p[yk] for p in focus], yk in log_keys)
            ax.set_xlim(*xlim)
            ax.set_ylim(*ylim)
            for key, axis, (lo, hi) in ((xk, ax.xaxis, xlim), (yk, ax.yaxis, ylim)):
                if key in log_keys and hi < 10 * lo:  # a zoom within a decade: the 1-2-3-5 ticks leave one label
                    axis.set_major_locator(MaxNLocator(nbins=5))
                    axis.set_minor_locator(NullLocator())
            zoom_of.add_patch(Rectangle((xlim[0], ylim[0]), xlim[1] - xlim[0], ylim[1] - ylim[0], fill=False,
                                        edgecolor="0.3", ls="-.", lw=1.0, zorder=1.5))
        obstacles: List[Any] = []
        if zoom_of is not None:
            obstacles_of.setdefault(zoom_of, []).append(
                zoom_of.annotate(title[:3], (xlim[1], ylim[1]), fontsize=10, color="0.3", ha="left", va="bottom",
                                 zorder=1.5))
        ax.set_title(f"{title}\n ", fontsize=12)  # the second line says how many labels were left out
        labels = [(text, x, y, STYLE[strategy]["color"], 8 if strategy == "parapipe" else 9)
                  for x, y, text, strategy in ranked_labels(by_strategy, xk, yk, maximise_y, zoom_of is not None)]
        markers = [(p[xk], p[yk], _radius_pt(p, s)) for s in STRATEGIES for p in by_strategy[s]]
        obstacles_of.setdefault(ax, []).extend(obstacles)
        labels_of[ax] = (labels, markers, title, zoom_of is None)
    handles, names = ax_t.get_legend_handles_labels()
    legend = fig.legend(handles, names, loc="lower center", ncol=4, fontsize=10, frameon=False)
    obj = f" (front on {', '.join(doc.objectives)})" if doc.objectives else ""
    suptitle = fig.suptitle(f"Pareto front: {title_of(doc)}{obj}", fontsize=15)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    lay_out_grid(fig, [[ax_t, ax_e], [zx_t, zx_e]], renderer, legend, suptitle)
    for ax, (labels, markers, title, full) in labels_of.items():
        left_out = _place_panel_labels(fig, ax, renderer, labels, markers, obstacles_of.get(ax, []))
        said = [f"{'(c)' if ax is ax_t else '(d)'} labels the whole front"] if full and by_strategy["parapipe"] else []
        if left_out:
            said.append(f"{left_out} label{'s' * (left_out != 1)} left out for want of room (ids in pareto.json)")
        ax.set_title(f"{title}\n" + ("; ".join(said) or "every parapipe point labelled"), fontsize=12)
    return fig


def plot_pareto(doc: ParetoDoc, path: Any, *, source: Optional[str] = None, soc: Any = None) -> None:
    """Write the Pareto plot of a pareto.json document as a 1600 x 1250 px PNG.

    Four panels: (a) throughput (inferences/s) against latency (ms) and (b) latency against energy per
    inference (mJ) with every point, (c) and (d) the same zoomed on the parapipe points (the rectangle drawn in
    (a) and (b)), where fronts crowd. Labels never overlap each other or a marker: the most important are
    placed first (:func:`ranked_labels`) and a label with no free place is left out, the panel's title says how
    many. The legend sits below the panels, off the data. When the profile's powers are placeholders or
    low-confidence estimates, the energy panels carry a note saying so (:func:`power_note`).

    Parameters
    ----------
    doc : parapipe.mapping.ParetoDoc
        The document (:func:`parapipe.mapping.read_pareto`): its points' strategies and figures, the model
        and SoC names, the objectives and the bounds (lines drawn where > 0).
    path : str or os.PathLike
        PNG to write (a temp file in the same folder, then renamed).
    source : str, optional
        File name for error messages (default ``"pareto.json"``).
    soc : parapipe.soc.profile.SoC, optional
        The profile the document was computed with, for :func:`power_note` (default: found from the document).

    Raises
    ------
    InputError
        The document has no points.
    OSError
        The folder cannot be written.
    """
    save_rendered(pareto_figure(doc, source=source, soc=soc), path)
