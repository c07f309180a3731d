"""Per-PU utilisation of one mapping: the fraction of every period each PU is reserved by its stages, and the
fraction it actually computes blocks (the steady state of the cost model, :mod:`parapipe.cost.evaluate`)."""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from matplotlib.figure import Figure

from ..errors import input_error
from ..mapping.model import ParetoDoc, Point
from ._common import DEFAULT_SOURCE, FIX, save_figure, title_of

log = logging.getLogger(__name__)

__all__ = ["utilisation", "plot_utilisation"]


def utilisation(point: Point, *, source: Optional[str] = None) -> List[Tuple[str, float, float]]:
    """Per PU of one point: busy fraction and computing fraction of the period.

    Parameters
    ----------
    point : parapipe.mapping.Point
        A point of a validated document (:func:`parapipe.mapping.select_point`).
    source : str, optional
        File name for error messages (default ``"pareto.json"``).

    Returns
    -------
    list of (str, float, float)
        ``(pu, pu_busy_s / period_s, compute_s / period_s)`` for every PU in ``pu_busy_s`` or in a stage, in
        order of first use by the stages. ``compute_s`` sums ``block_finish_s - block_start_s`` of the blocks
        assigned to the PU (0 when the point has no per-block times); busy time also counts input transfers
        and waits inside its stages. The busy fraction of the bottleneck PU is 1.

    Raises
    ------
    InputError
        The point has no ``pu_busy_s``.
    """
    if not point.pu_busy_s:
        raise input_error(source or DEFAULT_SOURCE, f"points[{point.id}].pu_busy_s", "missing or empty", FIX)
    compute: Dict[str, float] = {}
    order: List[str] = []
    for st in point.stages:
        order.extend(st.pus)
        for block, t0 in st.block_start_s.items():
            t1 = st.block_finish_s.get(block)
            if t1 is not None:
                pu = st.pu_of(block)
                compute[pu] = compute.get(pu, 0.0) + max(0.0, t1 - t0)
    lanes = list(dict.fromkeys(order + list(point.pu_busy_s)))
    return [(pu, point.pu_busy_s.get(pu, 0.0) / point.period_s, compute.get(pu, 0.0) / point.period_s)
            for pu in lanes]


def plot_utilisation(doc: ParetoDoc, point: Point, path: Any, *, source: Optional[str] = None) -> None:
    """Write a bar chart of per-PU utilisation of one point (busy and computing share of the period) as a PNG.

    Parameters
    ----------
    doc : parapipe.mapping.ParetoDoc
        The document (its model and SoC names title the chart).
    point : parapipe.mapping.Point
        The point to draw, one of ``doc.points``.
    path : str or os.PathLike
        PNG to write (a temp file in the same folder, then renamed); 1000 x 600 px.
    source : str, optional
        File name for error messages (default ``"pareto.json"``).

    Raises
    ------
    InputError
        As :func:`utilisation`.
    OSError
        The folder cannot be written.
    """
    rows = utilisation(point, source=source)
    fig = Figure(figsize=(10, 6), layout="constrained")
    ax = fig.subplots()
    xs = range(len(rows))
    busy = [100 * b for _, b, _ in rows]
    comp = [100 * c for _, _, c in rows]
    ax.bar(xs, busy, width=0.6, color="C0", alpha=0.35, edgecolor="C0", label="busy (reserved by its stages)")
    ax.bar(xs, comp, width=0.6, color="C0", label="computing blocks")
    for x, b in zip(xs, busy):
        ax.annotate(f"{b:.0f}%", (x, b), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=11)
    ax.axhline(100, color="0.3", ls="--", lw=1)
    ax.set_xticks(list(xs), labels=[pu for pu, _, _ in rows], fontsize=12)
    ax.set_ylim(0, max(115, max(busy) * 1.12))
    ax.set_ylabel("share of the period (%)", fontsize=12)
    ax.set_xlabel("processing unit", fontsize=12)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=10, framealpha=0.9)
    ax.set_title(f"{title_of(doc)}: point {point.id} ({point.strategy}), PU utilisation — "
                 f"period {point.period_s * 1e3:.2f} ms", fontsize=12)
    save_figure(fig, path)
