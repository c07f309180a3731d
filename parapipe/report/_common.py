"""Shared pieces of the report plots: reading fields of a pareto.json document with one-line errors, the
per-strategy style, and writing a figure atomically.

Figures are built as :class:`matplotlib.figure.Figure` objects without ``matplotlib.pyplot``: no GUI backend
is ever selected, nothing global is switched (a notebook user's backend stays as it was), and PNGs are
rendered by Agg, so plotting works on headless machines and from several threads.
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from matplotlib.figure import Figure

from ..errors import input_error

log = logging.getLogger(__name__)

#: Name used in error messages when the caller does not say which file the document came from.
DEFAULT_SOURCE = "pareto.json"

STRATEGIES = ("parapipe", "pipeline", "parallel", "single", "replicated")

#: Marker and colour per strategy (matplotlib's default "tab10" cycle colours C0..C3).
STYLE: Dict[str, Dict[str, str]] = {
    "parapipe": {"marker": "o", "color": "C0", "label": "parapipe"},
    "pipeline": {"marker": "^", "color": "C1", "label": "pure pipeline"},
    "parallel": {"marker": "s", "color": "C2", "label": "parallel (1 stage)"},
    "single": {"marker": "D", "color": "C3", "label": "single PU"},
    "replicated": {"marker": "v", "color": "C4", "label": "replicated (whole model per PU)"},
}

_FIX = "pass the pareto.json written by 'parapipe optimize'"


def points_of(doc: Any, source: Optional[str]) -> List[Dict[str, Any]]:
    """The ``points`` list of a pareto.json document.

    Raises
    ------
    InputError
        ``doc`` is not a dict, or ``points`` is missing, not a list, or holds a non-object.
    """
    src = source or DEFAULT_SOURCE
    if not isinstance(doc, Mapping):
        raise input_error(src, None, f"expected a pareto.json object, got {type(doc).__name__}", _FIX)
    pts = doc.get("points")
    if not isinstance(pts, list):
        raise input_error(src, "points", "missing or not a list", _FIX)
    for i, p in enumerate(pts):
        if not isinstance(p, Mapping):
            raise input_error(src, f"points[{i}]", f"expected an object, got {type(p).__name__}", _FIX)
    return pts


def find_point(doc: Any, point_id: str, source: Optional[str]) -> Dict[str, Any]:
    """The point whose ``id`` is ``point_id``.

    Raises
    ------
    InputError
        No point has that id (the message names it and lists some ids that exist).
    """
    pts = points_of(doc, source)
    for p in pts:
        if p.get("id") == point_id:
            return p
    ids = ", ".join(str(p.get("id")) for p in pts[:12]) + (", ..." if len(pts) > 12 else "")
    raise input_error(source or DEFAULT_SOURCE, "points", f"no point with id {point_id!r}",
                      f"use one of the ids in the file ({ids or 'none: the file has no points'})")


def number(obj: Mapping, key: str, where: str, source: Optional[str], *, positive: bool = False,
           default: Optional[float] = None) -> float:
    """``obj[key]`` as a finite float (``default`` when absent and a default is given).

    Parameters
    ----------
    where : str
        Field path of ``obj`` in the document, e.g. ``"points[3]"``, for the error message.
    positive : bool
        Require a value > 0 (else >= 0).

    Raises
    ------
    InputError
        Missing (without a default), not a number, not finite, negative (or not positive).
    """
    src = source or DEFAULT_SOURCE
    field = f"{where}.{key}"
    if key not in obj or obj[key] is None:
        if default is not None:
            return default
        raise input_error(src, field, "missing", _FIX)
    val = obj[key]
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise input_error(src, field, f"expected a number, got {val!r}", _FIX)
    val = float(val)
    if not math.isfinite(val) or val < 0 or (positive and val == 0):
        need = "> 0" if positive else ">= 0"
        raise input_error(src, field, f"must be a finite number {need}, got {val!r}", _FIX)
    return val


def strategy_of(point: Mapping, where: str, source: Optional[str]) -> str:
    """The point's ``strategy``, checked against :data:`STRATEGIES`.

    Raises
    ------
    InputError
        Missing or unknown strategy.
    """
    s = point.get("strategy")
    if s not in STRATEGIES:
        raise input_error(source or DEFAULT_SOURCE, f"{where}.strategy", f"unknown strategy {s!r}",
                          f"use one of {', '.join(STRATEGIES)}")
    return s


def title_of(doc: Mapping) -> str:
    """``"<model> on <soc>"`` from the document (``?`` for missing names)."""
    model, soc = doc.get("model"), doc.get("soc")
    name = model.get("name") if isinstance(model, Mapping) else None
    soc_name = soc.get("name") if isinstance(soc, Mapping) else soc
    return f"{name or '?'} on {soc_name or '?'}"


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
