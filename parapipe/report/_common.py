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
from typing import Any, Dict

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


def save_rendered(fig: Figure, path: Any) -> None:
    """Render ``fig``, laid out already (its layout engine none), once on its Agg canvas and write it as PNG as
    :func:`save_figure` does, at the figure's own dpi.

    ``Figure.savefig`` lays out a figure that has had a layout engine once more before rendering it (a draw
    without rasterising: 0.3-0.5 s for the Pareto plot, ``python -m cProfile``); this writes the same pixels
    and PNG metadata (``matplotlib.image.imsave`` of the canvas buffer, as ``FigureCanvasAgg.print_png``) from
    one draw.

    Raises
    ------
    OSError
        The folder cannot be written (the temp file is removed).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.image import imsave

    from ..files import atomic_path

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    path = os.fspath(path)
    with atomic_path(Path(path), suffix=".png") as tmp:
        imsave(str(tmp), canvas.buffer_rgba(), format="png", origin="upper", dpi=fig.dpi)
    log.debug("wrote %s", path)
