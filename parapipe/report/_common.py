"""Shared pieces of the report plots: the per-strategy style, the figure title, and writing a figure atomically.

The plots take the typed document (:class:`parapipe.mapping.ParetoDoc`, read and validated by
:func:`parapipe.mapping.read_pareto`) and its points (:func:`parapipe.mapping.select_point`); they check no
mapping structure of their own.

Figures are built as :class:`matplotlib.figure.Figure` objects without ``matplotlib.pyplot``: no GUI backend
is ever selected, nothing global is switched (a notebook user's backend stays as it was), and PNGs are
rendered by Agg, so plotting works on headless machines and from several threads.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, Sequence, Tuple

from matplotlib.figure import Figure

from ..mapping.model import ParetoDoc

log = logging.getLogger(__name__)

#: Name used in error messages when the caller does not say which file the document came from.
DEFAULT_SOURCE = "pareto.json"
#: The fix of a document a figure cannot be drawn from.
FIX = "pass the pareto.json written by 'parapipe optimize'"

#: Marker and colour per strategy (matplotlib's default "tab10" cycle colours C0..C4).
STYLE: Dict[str, Dict[str, str]] = {
    "parapipe": {"marker": "o", "color": "C0", "label": "parapipe"},
    "pipeline": {"marker": "^", "color": "C1", "label": "pure pipeline"},
    "parallel": {"marker": "s", "color": "C2", "label": "parallel (1 stage)"},
    "single": {"marker": "D", "color": "C3", "label": "single PU"},
    "replicated": {"marker": "v", "color": "C4", "label": "replicated (whole model per PU)"},
    "governor": {"marker": "P", "color": "C5", "label": "kernel governor (performance, schedutil)"},
}


def title_of(doc: ParetoDoc) -> str:
    """``"<model> on <soc>"``: the names the document records."""
    return f"{doc.model.name} on {doc.soc.name}"


def save_figure(fig: Figure, path: Any, dpi: int = 100) -> None:
    """Render ``fig`` as PNG to a temp file in ``path``'s folder, then rename it onto ``path`` (file mode as a
    new file gets under the umask: :func:`parapipe.files.atomic_path`).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure; its size in inches times ``dpi`` gives the PNG size in pixels.
    path : str or os.PathLike
        Destination file (written as PNG whatever its suffix).
    dpi : int
        Dots per inch (100: a 16 x 7 in figure is 1600 x 700 px).

    Raises
    ------
    OSError
        The folder cannot be written (the temp file is removed).
    """
    from ..files import atomic_path

    path = os.fspath(path)
    with atomic_path(Path(path), suffix=".png") as tmp:  # the usual file mode, as pareto.json gets
        fig.savefig(str(tmp), format="png", dpi=dpi)
    log.debug("wrote %s", path)


#: zlib level of the PNGs :func:`write_rendered` writes: 1 encodes a 1600 x 1250 px Pareto plot in about half
#: the time of Pillow's default 6 for a file about 7 % larger (``PIL.Image.save(..., compress_level=N)`` timed
#: on that plot).
PNG_COMPRESS_LEVEL = 1


def save_rendered(fig: Figure, path: Any) -> None:
    """Render ``fig``, laid out already (its layout engine none), once on its Agg canvas and write it as PNG as
    :func:`save_figure` does, at the figure's own dpi (:func:`write_rendered` into a temp file, renamed onto
    ``path``).

    Raises
    ------
    OSError
        The folder cannot be written (the temp file is removed).
    """
    from ..files import atomic_path

    path = os.fspath(path)
    with atomic_path(Path(path), suffix=".png") as tmp:
        write_rendered(fig, tmp)
    log.debug("wrote %s", path)


def write_rendered(fig: Figure, path: Any) -> None:
    """Render ``fig``, laid out already, once on its Agg canvas and write the PNG to ``path`` itself (no temp
    file: for a caller that owns ``path`` as a temp file already).

    ``Figure.savefig`` lays out a figure that has had a layout engine once more before rendering it; this
    writes the same pixels and PNG metadata (``matplotlib.image.imsave`` of the canvas buffer, as
    ``FigureCanvasAgg.print_png``) from one draw.

    Raises
    ------
    OSError
        ``path`` cannot be written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.image import imsave

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    imsave(os.fspath(path), canvas.buffer_rgba(), format="png", origin="upper", dpi=fig.dpi,
           pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})


#: Space between the figure's edge, or two panels' decorations, and the next text, points (matplotlib's
#: constrained-layout pads, rcParams ``figure.constrained_layout.w_pad``/``h_pad`` = 3 pt, plus 2 pt).
LAYOUT_PAD_PT = 5.0


def _extent(artist, renderer) -> Tuple[float, float]:
    """Width and height, pixels, of a text-like artist (0 x 0 when it says nothing)."""
    if hasattr(artist, "get_text") and not artist.get_text():
        return 0.0, 0.0
    e = artist.get_window_extent(renderer)
    return e.width, e.height


def _tick_labels_extent(axis, renderer) -> Tuple[float, float]:
    """The largest width and height, pixels, of the major tick labels ``axis`` shows in its view now plus, in
    the direction away from the axes, the space between the axes' edge and them (tick length and pad): from its
    locator and formatter, without building the tick artists."""
    from matplotlib.text import Text

    locs = axis.get_majorticklocs()
    labels = axis.get_major_formatter().format_ticks(list(locs))
    lo, hi = sorted(axis.get_view_interval())
    tol = 1e-9 * (hi - lo)
    tick = axis.get_major_ticks(1)[0]
    prop = tick.label1.get_fontproperties()
    w = h = 0.0
    for loc, label in zip(locs, labels):
        if lo - tol <= loc <= hi + tol and label:
            text = Text(text=label, fontproperties=prop)
            text.set_figure(axis.figure)
            tw, th = _extent(text, renderer)
            w, h = max(w, tw), max(h, th)
    space = (tick.get_tick_padding() + tick.get_pad()) * axis.figure.dpi / 72.0
    return (w, h + space) if axis.axis_name == "x" else (w + space, h)


def lay_out_grid(fig: Figure, grid: Sequence[Sequence[Any]], renderer, legend: Any = None, suptitle: Any = None,
                 pad_pt: float = LAYOUT_PAD_PT) -> None:
    """Place a grid of axes with equal sizes so that their titles, axis labels and tick labels, the figure's
    ``suptitle`` (top) and ``legend`` (bottom centre) fit the figure and keep :data:`LAYOUT_PAD_PT` apart: one
    measuring of each text (tick labels from their locator and formatter), where constrained layout draws
    every axis's ticks several times over (``python -m cProfile``: 0.3-0.5 s for a 2 x 2 grid).

    Tick labels are measured with the axes at their current size and again once placed (a linear axis's tick
    count follows its length); an x tick label may overhang the right edge by half its width, which the right
    margin keeps. Axes limits are final after this call's measuring (autoscaled once).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (no layout engine); its size is kept.
    grid : rows of axes
        Every row has the same number of axes.
    renderer : matplotlib.backends.backend_agg.RendererAgg
        Of the canvas the figure will be drawn on (text sizes).
    legend, suptitle : artists, optional
        A figure legend placed at the lower centre, the figure title at the top centre.
    """
    px = fig.dpi / 72.0
    pad = pad_pt * px
    width, height = fig.bbox.width, fig.bbox.height
    nrow, ncol = len(grid), len(grid[0])
    top_band = pad
    if suptitle is not None:
        suptitle.set_verticalalignment("top")
        suptitle.set_y(1.0 - pad / height)
        top_band += _extent(suptitle, renderer)[1] + pad
    bottom_band = pad
    if legend is not None:
        bottom_band = legend.get_window_extent(renderer).y1 + pad
    title_h = [max(_extent(ax.title, renderer)[1] for ax in row) for row in grid]
    xlabel_h = [max(_extent(ax.xaxis.label, renderer)[1] for ax in row) for row in grid]
    ylabel_w = [max(_extent(grid[r][c].yaxis.label, renderer)[0] for r in range(nrow)) for c in range(ncol)]
    known: Dict[Any, Tuple[float, float, float, float]] = {}
    for _ in range(2):
        changed = False
        for row in grid:
            for ax in row:
                xw, xh = _tick_labels_extent(ax.xaxis, renderer)
                yw, yh = _tick_labels_extent(ax.yaxis, renderer)
                old = known.get(ax, (0.0, 0.0, 0.0, 0.0))
                new = (max(old[0], xw), max(old[1], xh), max(old[2], yw), max(old[3], yh))
                changed |= new != old
                known[ax] = new
        if not changed:
            break
        above = [title_h[r] + grid[r][0].titleOffsetTrans.get_matrix()[1, 2] + pad for r in range(nrow)]
        below = [max(known[grid[r][c]][1] for c in range(ncol))
                 + grid[r][0].xaxis.labelpad * px + xlabel_h[r] + pad for r in range(nrow)]
        left = [pad + ylabel_w[c] + grid[0][c].yaxis.labelpad * px
                + max(known[grid[r][c]][2] for r in range(nrow)) for c in range(ncol)]
        right = [pad + max(known[grid[r][c]][0] for r in range(nrow)) / 2 for c in range(ncol)]
        w = (width - sum(left) - sum(right)) / ncol
        h = (height - top_band - bottom_band - sum(above) - sum(below)) / nrow
        y1 = height - top_band
        for r, row in enumerate(grid):
            y1 -= above[r]
            x0 = 0.0
            for c, ax in enumerate(row):
                x0 += left[c]
                ax.set_position([x0 / width, (y1 - h) / height, w / width, h / height])
                x0 += w + right[c]
            y1 -= h + below[r]
