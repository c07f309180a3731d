"""Per-PU utilisation of one mapping: the fraction of every period each PU is reserved by its stages, and the
fraction it actually computes blocks (the steady state of the cost model, :mod:`parapipe.cost.evaluate`)."""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Tuple

from matplotlib.figure import Figure

from ..errors import input_error
from ._common import DEFAULT_SOURCE, find_point, number, save_figure, title_of

log = logging.getLogger(__name__)

__all__ = ["utilisation", "plot_utilisation"]

_FIX = "pass the pareto.json written by 'parapipe optimize'"


def utilisation(doc: Dict[str, Any], point_id: str, *, source: Optional[str] = None
                ) -> List[Tuple[str, float, float]]:
    """Per PU of one point: busy fraction and computing fraction of the period.

    Parameters
    ----------
    doc : dict
        A pareto.json document.
    point_id : str
        ``id`` of the point.
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
        Unknown ``point_id``; ``period_s`` or ``pu_busy_s`` missing or malformed.
    """
    src = source or DEFAULT_SOURCE
    point = find_point(doc, point_id, source)
    where = f"points[{doc['points'].index(point)}]"
    period_s = number(point, "period_s", where, source, positive=True)
    busy = point.get("pu_busy_s")
    if not isinstance(busy, Mapping) or not busy:
        raise input_error(src, f"{where}.pu_busy_s", "missing or empty", _FIX)
    compute: Dict[str, float] = {}
    order: List[str] = []
    mapping = point.get("mapping")
    stages = mapping.get("stages") if isinstance(mapping, Mapping) else None
    for st in stages if isinstance(stages, list) else []:
        if not isinstance(st, Mapping):
            continue
        pus = [p for p in st.get("pus", []) if isinstance(p, str)]
        order.extend(pus)
        assignment = st.get("assignment") if isinstance(st.get("assignment"), Mapping) else {}
        starts = st.get("block_start_s") if isinstance(st.get("block_start_s"), Mapping) else {}
        finishes = st.get("block_finish_s") if isinstance(st.get("block_finish_s"), Mapping) else {}
        for block, t0 in starts.items():
            pu = assignment.get(block, pus[0] if len(pus) == 1 else None)
            t1 = finishes.get(block)
            if pu is not None and isinstance(t0, (int, float)) and isinstance(t1, (int, float)):
                compute[pu] = compute.get(pu, 0.0) + max(0.0, float(t1) - float(t0))
    lanes = list(dict.fromkeys(order + list(busy)))
    out = []
    for pu in lanes:
        b = number(busy, pu, f"{where}.pu_busy_s", source, default=0.0)
        out.append((pu, b / period_s, compute.get(pu, 0.0) / period_s))
    return out


def plot_utilisation(doc: Dict[str, Any], point_id: str, path: Any, *, source: Optional[str] = None) -> None:
    """Write a bar chart of per-PU utilisation of one point (busy and computing share of the period) as a PNG.

    Parameters
    ----------
    doc : dict
        A pareto.json document.
    point_id : str
        ``id`` of the point.
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
    rows = utilisation(doc, point_id, source=source)
    point = find_point(doc, point_id, source)
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
    ax.set_title(f"{title_of(doc)}: point {point_id} ({point.get('strategy', '?')}), PU utilisation — "
                 f"period {float(point['period_s']) * 1e3:.2f} ms", fontsize=12)
    save_figure(fig, path)
