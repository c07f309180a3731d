"""Where each operator runs: the block graph of a model drawn with one point's mapping (``parapipe plot --graph``).

Blocks are boxes, left to right in stage order; inside a stage, in the topological generations of the stage's
blocks (:func:`networkx.topological_generations`: a block's column is the longest path to it from the stage's
first blocks), blocks of one generation stacked (parallel branches one above the other). Each stage sits on a
shaded background naming its PUs; a box is filled with the colour of the PU running the block (a block of a
replicated stage is split into one slice per replica's PU). Arrows are the block DAG's edges (tensors handed
from one block to another). Box labels give the block's name and its operator count where they fit.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import networkx as nx
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

from ..errors import input_error
from ..graph.coarsen import BlockGraph
from ..mapping.model import ParetoDoc, Point, stages_text
from ._common import DEFAULT_SOURCE, FIX, save_figure, title_of

log = logging.getLogger(__name__)

__all__ = ["GraphNode", "graph_layout", "plot_block_graph"]

#: Box width and height in layout units (a column is 1 unit wide, a row 1 unit high).
BOX_W, BOX_H = 0.78, 0.62
#: Pixels per layout unit the figure aims for (a box ~70 px wide fits a 9-character name at 8 pt); the figure
#: grows with the columns up to :data:`MAX_WIDTH_IN`. Chosen for readability, not from a source.
UNIT_PX = 90.0
MAX_WIDTH_IN = 40.0
DPI = 100


@dataclass(frozen=True)
class GraphNode:
    """One block's box: centre ``(x, y)`` in layout units, its ``stage`` (from 0), the PUs that run it (one per
    replica), its operator count."""

    block: str
    x: float
    y: float
    stage: int
    pus: Tuple[str, ...]
    n_ops: int


def graph_layout(point: Point, bg: BlockGraph, source: Optional[str] = None) -> List[GraphNode]:
    """Box positions of every block of ``bg`` for ``point`` (see the module docstring).

    Returns
    -------
    list of GraphNode
        In block order; x grows with stage then generation, y is centred on 0 within each column.

    Raises
    ------
    InputError
        The point names a block the graph does not have, or leaves one of its blocks out.
    """
    src = source or DEFAULT_SOURCE
    stage_of: Dict[str, int] = {}
    pus_of: Dict[str, Tuple[str, ...]] = {}
    for j, st in enumerate(point.stages):
        reps = st.replica_stages()
        for b in st.blocks:
            if b not in bg.index:
                raise input_error(src, f"points[{point.id}].mapping.stages[{j}].blocks", f"block {b!r} is not "
                                  "in the model's block graph", FIX)
            stage_of[b] = j
            pus_of[b] = tuple(r.pu_of(b) for r in reps)
    missing = [b.name for b in bg.blocks if b.name not in stage_of]
    if missing:
        raise input_error(src, f"points[{point.id}].mapping.stages", f"blocks of the model in no stage: "
                          f"{', '.join(missing[:3])}", FIX)
    nodes: List[GraphNode] = []
    x0 = 0
    for j, st in enumerate(point.stages):
        sub = bg.graph.subgraph(st.blocks)
        order = {b: i for i, b in enumerate(st.blocks)}
        gens = [sorted(g, key=order.__getitem__) for g in nx.topological_generations(sub)]
        for gi, gen in enumerate(gens):
            for k, b in enumerate(gen):
                nodes.append(GraphNode(b, float(x0 + gi), (len(gen) - 1) / 2.0 - k, j, pus_of[b],
                                       len(bg.block(b).ops)))
        x0 += len(gens)
    index = bg.index
    return sorted(nodes, key=lambda n: index[n.block])


def _pu_colours(doc: ParetoDoc, point: Point) -> Dict[str, str]:
    """One colour per PU, fixed by the PU's place in the SoC profile (so a PU keeps its colour across points)."""
    names = list(doc.soc.pus) or point.used_pus()
    names += [p for p in point.used_pus() if p not in names]
    return {pu: f"C{i % 10}" for i, pu in enumerate(names)}


def _fit(text: str, width_px: float, px_per_char: float) -> Optional[str]:
    """``text`` cut to ``width_px`` (an ellipsis where cut; None when not even 3 characters fit)."""
    room = int(width_px // px_per_char)
    if len(text) <= room:
        return text
    return text[:room - 1] + "…" if room >= 3 else None


def plot_block_graph(doc: ParetoDoc, point: Point, bg: BlockGraph, path: Any, *,
                     source: Optional[str] = None) -> None:
    """Write the block graph of ``bg`` with ``point``'s mapping as a PNG (see the module docstring).

    Parameters
    ----------
    doc : parapipe.mapping.ParetoDoc
        The document (model and SoC names for the title, the SoC's PUs for the colours).
    point : parapipe.mapping.Point
        The point to draw, one of ``doc.points``.
    bg : parapipe.graph.coarsen.BlockGraph
        The model's blocks, coarsened as the document was computed (:func:`parapipe.app.export.load_mapped`).
    path : str or os.PathLike
        PNG to write (a temp file in the same folder, then renamed); width grows with the graph's columns,
        from 1200 px up to 4000 px.
    source : str, optional
        File name for error messages (default ``"pareto.json"``).

    Raises
    ------
    InputError
        As :func:`graph_layout`.
    OSError
        The folder cannot be written.
    """
    nodes = graph_layout(point, bg, source)
    at = {n.block: n for n in nodes}
    n_cols = int(max(n.x for n in nodes)) + 1
    half_rows = max(abs(n.y) for n in nodes) + 0.5
    width_in = min(MAX_WIDTH_IN, max(12.0, n_cols * UNIT_PX / DPI + 3.5))
    height_in = max(4.5, min(30.0, (2 * half_rows + 1.2) * 0.75 + 2.2))
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    ax = fig.subplots()
    colours = _pu_colours(doc, point)
    # stage backgrounds: from the first to the last column of the stage, the full height
    ymin, ymax = -half_rows - 0.35, half_rows + 0.75
    for j, st in enumerate(point.stages):
        xs = [at[b].x for b in st.blocks]
        ax.add_patch(FancyBboxPatch((min(xs) - 0.46, ymin), max(xs) - min(xs) + 0.92, ymax - ymin,
                                    boxstyle="round,pad=0,rounding_size=0.12", facecolor="0.5" if j % 2 else "0.7",
                                    alpha=0.16, edgecolor="0.35", linewidth=0.8, zorder=0))
        count = len(st.blocks)
        ax.text((min(xs) + max(xs)) / 2, ymax - 0.08,
                f"stage {j}\n{stages_text([st])}\n{count} block{'s' * (count != 1)}",
                ha="center", va="top", fontsize=9, color="0.15", zorder=1, clip_on=True)
    for u, v in bg.graph.edges:
        a, b = at[u], at[v]
        ax.annotate("", xy=(b.x - BOX_W / 2, b.y), xytext=(a.x + BOX_W / 2, a.y),
                    arrowprops=dict(arrowstyle="-|>", color="0.35", lw=0.8, shrinkA=0, shrinkB=0,
                                    mutation_scale=8, connectionstyle="arc3,rad=0.0"), zorder=2)
    px_per_unit = (width_in * DPI * 0.92) / (n_cols + 0.2)
    for n in nodes:
        slices = len(n.pus)
        for k, pu in enumerate(n.pus):
            ax.add_patch(Rectangle((n.x - BOX_W / 2 + k * BOX_W / slices, n.y - BOX_H / 2), BOX_W / slices, BOX_H,
                                   facecolor=colours.get(pu, "0.5"), edgecolor="none", zorder=3))
        ax.add_patch(Rectangle((n.x - BOX_W / 2, n.y - BOX_H / 2), BOX_W, BOX_H, facecolor="none",
                               edgecolor="0.15", linewidth=0.7, zorder=3.5))
        name = _fit(n.block, BOX_W * px_per_unit - 4, 6.2)
        ops = f"{n.n_ops} op{'s' * (n.n_ops != 1)}"
        label = name if name is None or len(ops) * 6.2 > BOX_W * px_per_unit - 4 else f"{name}\n{ops}"
        if label:
            ax.text(n.x, n.y, label, ha="center", va="center", fontsize=8, color="white", zorder=4,
                    fontweight="bold", clip_on=True)
    ax.set_xlim(-0.6, n_cols - 0.4)
    ax.set_ylim(ymin - 0.1, ymax + 0.1)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    used = point.used_pus()
    handles = [Patch(facecolor=colours[pu], edgecolor="0.15", label=pu) for pu in used]
    if any(st.replicas for st in point.stages):
        handles.append(Patch(facecolor="white", edgecolor="0.15", label="split box: one slice per replica"))
    ax.legend(handles=handles, title="processing unit", loc="upper left", bbox_to_anchor=(1.005, 1.0),
              fontsize=10, title_fontsize=10)
    ax.set_title(f"{title_of(doc)}: point {point.id} ({point.strategy}) — where each block runs; "
                 f"{point.throughput_per_s:.3g} inferences/s, latency {point.latency_s * 1e3:.3g} ms; "
                 f"{len(nodes)} blocks, {bg.graph.number_of_edges()} edges", fontsize=12)
    save_figure(fig, path, dpi=DPI)

