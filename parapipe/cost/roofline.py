"""Analytical per-block cost on a PU (roofline) and the bridge from a block graph + SoC to a MappingProblem.

Per operator ``o`` on PU ``p`` (Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009):

    t(o, p) = max(flops(o) / (peak_flops[p] · efficiency[p][class(o)]),  bytes(o) · s[p] / bandwidth[p])
              + op_overhead_s[p]

with ``bytes = activation inputs + outputs + weights`` of the model (fp32) and ``s`` the byte scale of the PU's
native precision (fp32 1, fp16 and bf16 1/2, int8 1/4: the model is assumed deployed on that PU in its precision). A block's
time is the sum over its operators; it is ``inf`` on a PU that does not support one of its op types. Measured
times (profile database, host measurement) override the model block by block.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from .problem import MappingProblem, PUOperatingPoints

__all__ = ["PRECISION_BYTE_SCALE", "roofline_s", "op_time_s", "block_time_s", "operating_point_tables",
           "problem_from_blocks"]

PRECISION_BYTE_SCALE = {"fp32": 1.0, "fp16": 0.5, "bf16": 0.5, "int8": 0.25}
"""Bytes per element relative to fp32 for each native PU precision (IEEE 754 binary32/binary16, bfloat16, int8)."""


def roofline_s(flops, nbytes, peak_flops: float, efficiency, memory_bandwidth_bytes_per_s):
    """The roofline term, s: ``max(flops / (peak_flops · efficiency), nbytes / memory_bandwidth_bytes_per_s)``,
    with no compute time where ``flops`` is 0 (per-operator overhead not included).

    The one place the formula is written: :func:`op_time_s` and the calibration's fits
    (:mod:`parapipe.calibration.calibrate`) call it. Takes floats (returns a float) or numpy arrays of equal
    shape for ``flops``, ``nbytes`` and ``efficiency`` (returns an array; ``memory_bandwidth_bytes_per_s`` may
    be a scalar). ``nbytes`` already carries the precision's byte scale (:data:`PRECISION_BYTE_SCALE`).
    """
    if np.ndim(flops) == 0 and np.ndim(efficiency) == 0 and np.ndim(nbytes) == 0:
        compute = flops / (peak_flops * efficiency) if flops > 0 else 0.0
        return max(compute, nbytes / memory_bandwidth_bytes_per_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(flops > 0, flops / (peak_flops * efficiency), 0.0)
    return np.maximum(compute, nbytes / memory_bandwidth_bytes_per_s)


def _op_class(op) -> str:
    from ..soc.op_classes import op_class

    group = getattr(op, "group", 1) or 1
    in_ch = getattr(op, "in_channels", None)
    return op_class(op.op_type, group=group, in_channels=in_ch)


def op_time_s(op, pu, frequency_hz: Optional[float] = None) -> float:
    """Roofline time of one operator (``parapipe.graph.opgraph.Operator``) on ``pu`` (``parapipe.soc.PU``), s.

    ``frequency_hz`` (default the PU's ``frequency_hz``) runs it at another operating point: peak FLOP/s and the
    per-operator overhead scale with the clock, the memory bandwidth does not
    (:mod:`parapipe.soc.operating_points`). Returns ``inf`` if the PU does not support the op type.
    """
    if not pu.supports(op.op_type):
        return float("inf")
    clock = 1.0 if frequency_hz is None else frequency_hz / pu.frequency_hz
    scale = PRECISION_BYTE_SCALE.get(pu.precision, 1.0)
    nbytes = (op.in_nbytes + op.out_nbytes + op.param_nbytes) * scale
    return roofline_s(op.flops, nbytes, pu.peak_flops * clock, pu.efficiency[_op_class(op)],
                      pu.memory_bandwidth_bytes_per_s) + pu.op_overhead_s / clock


def block_time_s(block, opgraph, pu, frequency_hz: Optional[float] = None) -> float:
    """Roofline time of a block (sum over its operators) on ``pu`` at ``frequency_hz`` (default the PU's), s;
    ``inf`` if any op is unsupported."""
    total = 0.0
    nodes = opgraph.graph.nodes
    for name in block.ops:
        t = op_time_s(nodes[name]["op"], pu, frequency_hz)
        if t == float("inf"):
            return t
        total += t
    return total


def operating_point_tables(block_graph, pus, time_s: np.ndarray, active_power_w: np.ndarray,
                           measured_at_s: Optional[Mapping[Tuple[str, str, float], float]] = None
                           ) -> Optional[List[Optional[PUOperatingPoints]]]:
    """Per PU of ``pus``, its :class:`PUOperatingPoints` for the blocks of ``block_graph`` (None for a PU without
    operating points; None overall when no PU has any).

    ``time_s``/``active_power_w`` (shape (n, k)) are the blocks' times and powers at each PU's highest point,
    measured or modelled; at a lower point a block's time is the one measured there (``measured_at_s``:
    ``(block name, PU, frequency_hz) -> s``, e.g. ``parapipe profile --frequencies``; a frequency matches a
    table entry within :data:`~parapipe.soc.operating_points.MHZ_MATCH_RTOL`), else, where the PU's table has a
    fitted ``memory_bound_fraction`` μ, ``time_s · ((1 − μ) f_max / f + μ)``, else ``time_s`` × the ratio of
    its roofline times at the two points (:func:`block_time_s`); its power above idle scales by the PU's
    :meth:`~parapipe.soc.operating_points.OperatingPoints.dynamic_ratio`.
    """
    measured: Dict[Tuple[str, str, int], float] = {}
    for (block_name, pu_name, hz), seconds in (measured_at_s or {}).items():
        pu = next((p for p in pus if p.name == pu_name), None)
        at = pu.operating_points.index_of(hz) if pu is not None and pu.operating_points is not None else None
        if at is not None:
            measured[(block_name, pu_name, at)] = float(seconds)
    if not any(pu.operating_points is not None and len(pu.operating_points) > 1 for pu in pus):
        return None
    blocks = block_graph.blocks
    out: List[Optional[PUOperatingPoints]] = []
    for j, pu in enumerate(pus):
        table = pu.operating_points
        if table is None or len(table) == 1:
            out.append(None)
            continue
        m = len(table)
        t = np.empty((len(blocks), m))
        roof_max = None if table.memory_bound_fraction is not None else np.array(
            [block_time_s(b, block_graph.opgraph, pu) for b in blocks])  # the roofline ratio's denominator
        for o, f in enumerate(table.frequency_hz):
            if o == m - 1:
                t[:, o] = time_s[:, j]
                continue
            if roof_max is None:  # memory_bound_fraction fitted from measurements (parapipe calibrate)
                mu = float(table.memory_bound_fraction or 0.0)
                t[:, o] = time_s[:, j] * ((1.0 - mu) * table.max_frequency_hz / f + mu)
            else:
                roof = np.array([block_time_s(b, block_graph.opgraph, pu, f) for b in blocks])
                with np.errstate(divide="ignore", invalid="ignore"):
                    t[:, o] = np.where(roof_max > 0, time_s[:, j] * roof / roof_max, time_s[:, j])
            for i, b in enumerate(blocks):
                if np.isfinite(t[i, o]) and (b.name, pu.name, o) in measured:
                    t[i, o] = measured[(b.name, pu.name, o)]
        ratio = np.array(table.dynamic_ratio(pu.active_power_w, pu.idle_power_w))
        power = pu.idle_power_w + (active_power_w[:, j:j + 1] - pu.idle_power_w) * ratio[None, :]
        out.append(PUOperatingPoints(frequency_hz=tuple(table.frequency_hz), time_s=t, active_power_w=power,
                                     transition_s=table.transition_s))
    return out


def problem_from_blocks(block_graph, soc, measured_s: Optional[Mapping[Tuple[str, str], float]] = None,
                        name: Optional[str] = None,
                        measured_at_s: Optional[Mapping[Tuple[str, str, float], float]] = None) -> MappingProblem:
    """Build the :class:`MappingProblem` of ``block_graph`` on ``soc``.

    Parameters
    ----------
    block_graph : parapipe.graph.coarsen.BlockGraph
    soc : parapipe.soc.SoC
    measured_s : mapping (block name, PU name) -> seconds, optional
        Measured block times; they replace the roofline value where present (an unsupported op type still makes
        the block ``inf``).
    name : str, optional
    measured_at_s : mapping (block name, PU name, frequency_hz) -> seconds, optional
        Block times measured at the PUs' other operating points (:func:`operating_point_tables`).

    Returns
    -------
    MappingProblem
        Blocks in ``block_graph.blocks`` order; edge bytes from the block graph; powers and transfer costs from
        the SoC profile; block weight bytes (``param_nbytes``) and the PUs' ``memory_bytes``.

    Raises
    ------
    parapipe.errors.InfeasibleError
        If a block has an op type that no PU of the SoC supports.
    """
    measured_s = measured_s or {}
    blocks = block_graph.blocks
    index = {b.name: i for i, b in enumerate(blocks)}
    pu_names = soc.pu_names
    pus = [soc.pus[p] for p in pu_names]
    n, k = len(blocks), len(pus)
    t = np.empty((n, k))
    nodes = block_graph.opgraph.graph.nodes
    raw = np.array([sum(nodes[o]["op"].in_nbytes + nodes[o]["op"].out_nbytes + nodes[o]["op"].param_nbytes
                        for o in b.ops) for b in blocks], dtype=float).reshape(n)
    traffic = np.outer(raw, [PRECISION_BYTE_SCALE.get(pu.precision, 1.0) for pu in pus]).reshape(n, k)
    for i, b in enumerate(blocks):
        for j, pu in enumerate(pus):
            tm = block_time_s(b, block_graph.opgraph, pu)
            if np.isfinite(tm) and (b.name, pu.name) in measured_s:
                tm = float(measured_s[(b.name, pu.name)])
            t[i, j] = tm
    preds = [tuple(sorted(index[u] for u in block_graph.graph.predecessors(b.name))) for b in blocks]
    edges: Dict[Tuple[int, int], float] = {}
    for u, v, data in block_graph.graph.edges(data=True):
        edges[(index[u], index[v])] = float(data.get("nbytes", 0))
    active = np.tile(np.array([pu.active_power_w for pu in pus]), (n, 1))
    idle = np.array([pu.idle_power_w for pu in pus])
    for i, b in enumerate(blocks):
        if not np.isfinite(t[i]).any():
            from ..errors import InfeasibleError

            bad = sorted({ot for ot in b.op_types if not any(pu.supports(ot) for pu in pus)})
            ncnn = [pu.name for pu in pus if pu.execution.runtime == "ncnn"]
            why = (f" (PU {', '.join(ncnn)} runs ncnn: pnnx does not convert them into ncnn models that compute "
                   "what ONNX Runtime computes)" if ncnn else "")
            raise InfeasibleError(f"block {b.name!r} has op type(s) {', '.join(bad) or '?'} that no PU of "
                                  f"{soc.name} ({', '.join(pu_names)}) supports{why}; allow a PU that runs them "
                                  "(--pus) or add them to a PU's supported_ops")
    return MappingProblem(operating_points=operating_point_tables(block_graph, pus, t, active, measured_at_s),
                          block_names=[b.name for b in blocks], preds=preds, edge_nbytes=edges, pu_names=pu_names,
                          time_s=t, active_power_w=active, idle_power_w=idle, static_power_w=soc.static_power_w,
                          alpha_s=soc.alpha_matrix(), beta_bytes_per_s=soc.beta_matrix(),
                          name=name or str(getattr(block_graph.opgraph, "name", "model")),
                          weight_nbytes=np.array([float(b.param_nbytes) for b in blocks]),
                          memory_bytes=np.array([pu.memory_bytes if pu.memory_bytes is not None else np.inf
                                                 for pu in pus]),
                          block_nbytes=traffic)
