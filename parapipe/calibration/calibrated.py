"""A SoC profile calibrated on the profile database: fits for every PU and PU pair, and the profile they give.

:func:`fit_calibration` reads the measurements of one SoC (:class:`~parapipe.profiledb.db.ProfileDB`) and the
catalog of what they measured (:class:`~parapipe.profiledb.catalog.Catalog`), and fits per PU the isolated and
in-graph roofline parameters and per ordered PU pair the transfer cost (:mod:`parapipe.calibration.calibrate`).
Stage measurements are not used for fitting: they are kept to validate the fit
(:mod:`parapipe.calibration.accuracy`).

:func:`calibrated_soc` writes the in-graph fit and the transfer fits into a copy of the SoC profile, with
their provenance, so that ``parapipe calibrate --out FILE.yaml`` gives a profile any command can load.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from parapipe.calibration.calibrate import (PUParams, TransferFit, fit_boundary, fit_cache, fit_pu,
                                          fit_transfer, samples_by_pu)
from parapipe.profiledb.catalog import Catalog, OpFeatures, ops_of
from parapipe.profiledb.db import ProfileDB
from parapipe.profiledb.records import Measurement, utc_now_iso
from parapipe.soc.op_classes import OP_CLASSES
from parapipe.soc.profile import Provenance, SoC, Transfer, TransferPair, Transfers

log = logging.getLogger(__name__)

__all__ = ["Calibration", "latest_rows", "fit_calibration", "calibrated_soc", "CALIBRATION_SOURCE"]

#: Source key of calibrated numbers in a written profile.
CALIBRATION_SOURCE = "parapipe_calibration"


def latest_rows(db: ProfileDB, soc: SoC) -> List[Measurement]:
    """The newest measurement per ``(pu, signature, batch, kind)`` of ``soc`` whose PU (or both PUs of a
    transfer ``"a->b"``) the profile has; other ONNX Runtime versions are superseded by newer rows."""
    newest: Dict[tuple, Measurement] = {}
    for row in db.all(soc.name):
        names = row.pu.split("->") if row.kind == "transfer" else [row.pu]
        if not all(n in soc.pus for n in names):
            continue
        key = (row.pu, row.signature, row.batch, row.kind)
        if key not in newest or row.measured_at >= newest[key].measured_at:
            newest[key] = row
    return [newest[k] for k in sorted(newest)]


@dataclass
class Calibration:
    """Fitted cost parameters of one SoC.

    Attributes
    ----------
    soc : SoC
        The profile the fits start from (its peaks and precisions are kept).
    isolated, in_graph : dict of str to PUParams
        Per PU: fit on single-operator rows / on block rows (see :mod:`parapipe.calibration.calibrate`). PUs
        without rows keep the profile's values (``samples == 0``).
    transfers : dict of (str, str) to TransferFit
        Per ordered PU pair with transfer rows.
    rows : list of Measurement
        The rows used (newest per key), all kinds, stages included.
    features : dict of str to OpFeatures
        The catalog's operators.
    parts : dict of str to list of (str, bool)
        Block and stage signature -> ``(op signature, fused away)``.
    stage_blocks : dict of str to list of str
        Stage signature -> its block signatures, in order.
    boundary : dict of str to float
        Block and stage signature -> bytes of the activations entering and leaving it.
    """

    soc: SoC
    isolated: Dict[str, PUParams]
    in_graph: Dict[str, PUParams]
    transfers: Dict[Tuple[str, str], TransferFit]
    rows: List[Measurement] = field(default_factory=list)
    features: Dict[str, OpFeatures] = field(default_factory=dict)
    parts: Dict[str, List[Tuple[str, bool]]] = field(default_factory=dict)
    stage_blocks: Dict[str, List[str]] = field(default_factory=dict)
    boundary: Dict[str, float] = field(default_factory=dict)

    def rows_of(self, kind: str, pu: Optional[str] = None) -> List[Measurement]:
        """Rows of one kind (and PU)."""
        return [r for r in self.rows if r.kind == kind and (pu is None or r.pu == pu)]


def fit_calibration(soc: SoC, db: ProfileDB, catalog: Catalog, exclude: Iterable[str] = ()) -> Calibration:
    """Fit the cost model of ``soc`` on the measurements of ``db``.

    Parameters
    ----------
    soc : SoC
    db : ProfileDB
        Rows of ``soc.name``; those of PUs the profile lacks are ignored.
    catalog : Catalog
        Operator features and block/stage parts of the same file.
    exclude : iterable of str
        Operator signatures left out of the fits (a held-out sample for ``--budget``).

    Returns
    -------
    Calibration
    """
    rows = latest_rows(db, soc)
    features = catalog.ops()
    work = catalog.work()
    parts = {sig: ops_of(entry, work) for sig, entry in work.items()
             if entry.kind == "block" or all(b in work for b, _ in entry.parts)}
    pairs = {sig: [b for b, _ in entry.parts] for sig, entry in work.items() if entry.kind == "pair"}
    spans = {sig: [b for b, _ in entry.parts] for sig, entry in work.items() if entry.kind == "span"}
    excluded = set(exclude)
    op_rows = [r for r in rows if r.kind == "op" and r.signature not in excluded]
    block_rows = [r for r in rows if r.kind == "block" and r.signature not in spans]
    span_rows = [r for r in rows if r.kind == "block" and r.signature in spans]
    boundary = {sig: float(entry.boundary_nbytes) for sig, entry in work.items()}
    op_samples = samples_by_pu(op_rows, features, parts)
    block_samples = samples_by_pu(block_rows, features, parts, boundary)
    isolated, in_graph = {}, {}
    for name, pu in soc.pus.items():
        isolated[name] = fit_pu(op_samples.get(name, []), pu)
        fixed = _boundary_of(name, block_rows, pairs, work)
        in_graph[name] = fit_pu(block_samples.get(name, []), pu, start=isolated[name], in_graph=True,
                                boundary=fixed)
        cache = _cache_of(name, in_graph[name], block_rows + span_rows, spans, work, features)
        if cache is not None:
            in_graph[name] = replace(in_graph[name], cache_nbytes=cache[0],
                                     cold_bandwidth_bytes_per_s=cache[1])
    transfers: Dict[Tuple[str, str], TransferFit] = {}
    by_pair: Dict[Tuple[str, str], List[Measurement]] = {}
    for row in rows:
        if row.kind == "transfer":
            src, dst = row.pu.split("->")
            by_pair.setdefault((src, dst), []).append(row)
    for (src, dst), pair_rows in sorted(by_pair.items()):
        fallback = soc.pus[dst].memory_bandwidth_bytes_per_s
        transfers[(src, dst)] = fit_transfer([r.nbytes for r in pair_rows], [r.median_s for r in pair_rows],
                                             fallback)
    log.info("calibrated %s on %d row(s): %d op, %d block, %d stage, %d transfer", soc.name, len(rows),
             len(op_rows), len(block_rows), sum(r.kind == "stage" for r in rows),
             sum(r.kind == "transfer" for r in rows))
    stage_blocks = {sig: [b for b, _ in entry.parts] for sig, entry in work.items() if entry.kind == "stage"}
    return Calibration(soc, isolated, in_graph, transfers, rows, features, parts, stage_blocks, boundary)


def block_weight_nbytes(parts: Sequence[Tuple[str, bool]], features: Dict[str, OpFeatures]) -> float:
    """Weight bytes of a block: the sum of its operators' constant inputs."""
    return float(sum(features[s].param_nbytes for s, _ in parts if s in features))


def _cache_of(pu: str, params: PUParams, block_rows: Sequence[Measurement], spans: Dict[str, List[str]],
              work: dict, features: Dict[str, OpFeatures]):
    """Cache term of ``pu`` from its measured spans and their blocks (:func:`fit_cache`)."""
    times = {r.signature: r.median_s for r in block_rows if r.pu == pu}
    measured, base, weights = [], [], []
    for sig, blocks in spans.items():
        if sig not in times or not all(b in times for b in blocks):
            continue
        compute = sum(max(times[b] - params.boundary_s(work[b].boundary_nbytes), 0.1 * times[b])
                      for b in blocks)
        measured.append(times[sig])
        base.append(compute + params.boundary_s(work[sig].boundary_nbytes))
        weights.append([block_weight_nbytes(work[b].parts, features) for b in blocks])
    fit = fit_cache(measured, base, weights)
    if fit is not None:
        log.info("%s: weights beyond %.0f MiB read again at %.3g B/s (from %d span(s))", pu, fit[0] / 2**20,
                 fit[1], len(measured))
    return fit


def _boundary_of(pu: str, block_rows: Sequence[Measurement], pairs: Dict[str, List[str]], work: dict):
    """Session boundary cost of ``pu`` from its measured pairs and their blocks (:func:`fit_boundary`)."""
    times = {r.signature: r.median_s for r in block_rows if r.pu == pu}
    saved_s, saved_nbytes = [], []
    for sig, (a, b) in ((s, p) for s, p in pairs.items() if len(p) == 2):
        if sig in times and a in times and b in times:
            saved_s.append(times[a] + times[b] - times[sig])
            saved_nbytes.append(work[a].boundary_nbytes + work[b].boundary_nbytes - work[sig].boundary_nbytes)
    fit = fit_boundary(saved_s, saved_nbytes)
    if fit is not None:
        log.info("%s: session boundary from %d pair(s): run %.1f us, %.3g B/s", pu, len(saved_s),
                 fit[0] * 1e6, fit[1])
    return fit


def calibrated_soc(cal: Calibration, citation: str) -> SoC:
    """A copy of ``cal.soc`` with the in-graph fits and the transfer fits written in.

    Per PU with a fit: ``efficiency`` of each fitted class, ``op_overhead_s`` and
    ``memory_bandwidth_bytes_per_s`` (when constrained). Efficiencies above 1 (the fitted work ran faster than
    the profile's ``peak_flops``) raise ``peak_flops`` by the largest of them and scale every class down by
    the same factor, so every prediction is unchanged and every efficiency stays in (0, 1]. Each fitted pair
    becomes a directed entry of ``transfers.pairs`` (replacing what covered that direction before).

    The session boundary of the in-graph fits (:meth:`~parapipe.calibration.calibrate.PUParams.boundary_s`)
    has no field of its own in a profile; it is charged where a pipeline pays it, on the tensors handed from
    one stage to the next: every transfer from ``a`` to ``b`` gets ``run_overhead_s`` of ``b`` added to its
    alpha and ``1 / boundary_bandwidth`` of ``a`` and of ``b`` added to its ``1 / beta`` (the default
    transfer: the means over the PUs with a fitted boundary). Changed numbers get the provenance source
    :data:`CALIBRATION_SOURCE`, cited with ``citation``.

    Raises
    ------
    InputError
        If a fitted value is out of the profile's ranges (a bug in the fit; the message names the field).
    """
    soc = cal.soc
    prov = dict(soc.provenance)
    mark = Provenance(source=CALIBRATION_SOURCE)
    pus = {}
    for name, pu in soc.pus.items():
        params = cal.in_graph[name]
        if params.samples == 0:
            pus[name] = pu
            continue
        efficiency = dict(params.efficiency)
        top = max(efficiency.values())
        scale = top if top > 1.0 else 1.0
        update: Dict[str, Union[float, Dict[str, float]]] = {
            "efficiency": {c: max(min(v / scale, 1.0), 1e-6) for c, v in efficiency.items()}}
        if scale > 1.0:
            update["peak_flops"] = pu.peak_flops * scale
            prov[f"pus.{name}.peak_flops"] = mark
        changed = [f.split(".", 1)[1] for f in params.fitted if f.startswith("efficiency.")]
        for cls in (OP_CLASSES if scale > 1.0 else changed):
            prov[f"pus.{name}.efficiency.{cls}"] = mark
        if "op_overhead_s" in params.fitted:
            update["op_overhead_s"] = params.op_overhead_s
            prov[f"pus.{name}.op_overhead_s"] = mark
        if "memory_bandwidth_bytes_per_s" in params.fitted:
            update["memory_bandwidth_bytes_per_s"] = params.memory_bandwidth_bytes_per_s
            prov[f"pus.{name}.memory_bandwidth_bytes_per_s"] = mark
        pus[name] = type(pu).model_validate({**pu.model_dump(), **update})
    # Transfers: every direction an old pair covered, then the fitted ones, all written as directed pairs.
    directed: Dict[Tuple[str, str], Tuple[float, float, Provenance, Provenance]] = {}
    for i, pair in enumerate(soc.transfers.pairs):
        ends = [(pair.src, pair.dst)] + ([(pair.dst, pair.src)] if pair.symmetric else [])
        for key in ends:
            directed[key] = (pair.alpha_s, pair.beta_bytes_per_s,
                             prov.get(f"transfers.pairs.{i}.alpha_s", Provenance(confidence="low")),
                             prov.get(f"transfers.pairs.{i}.beta_bytes_per_s", Provenance(confidence="low")))
    for key, fit in cal.transfers.items():
        directed[key] = (fit.alpha_s, fit.beta_bytes_per_s, mark, mark)
    bounded = {n: p for n, p in cal.in_graph.items() if p.samples > 0 and "run_overhead_s" in p.fitted}
    for (src, dst), (alpha, beta, p_alpha, p_beta) in list(directed.items()):
        if src in bounded and dst in bounded:
            a, b = bounded[src], bounded[dst]
            inv = 1.0 / beta + 1.0 / a.boundary_bandwidth_bytes_per_s + 1.0 / b.boundary_bandwidth_bytes_per_s
            directed[(src, dst)] = (alpha + b.run_overhead_s, 1.0 / inv, mark, mark)
    default = soc.transfers.default
    if bounded:
        run = sum(p.run_overhead_s for p in bounded.values()) / len(bounded)
        inv_bw = sum(1.0 / p.boundary_bandwidth_bytes_per_s for p in bounded.values()) / len(bounded)
        default = Transfer(alpha_s=default.alpha_s + run,
                           beta_bytes_per_s=1.0 / (1.0 / default.beta_bytes_per_s + 2.0 * inv_bw))
        prov["transfers.default.alpha_s"] = prov["transfers.default.beta_bytes_per_s"] = mark
    prov = {k: v for k, v in prov.items() if not k.startswith("transfers.pairs.")}
    pairs = []
    for i, ((src, dst), (alpha, beta, p_alpha, p_beta)) in enumerate(sorted(directed.items())):
        pairs.append(TransferPair(src=src, dst=dst, alpha_s=alpha, beta_bytes_per_s=beta))
        prov[f"transfers.pairs.{i}.alpha_s"] = p_alpha
        prov[f"transfers.pairs.{i}.beta_bytes_per_s"] = p_beta
    sources = {**soc.sources, CALIBRATION_SOURCE: f"{citation} (written {utc_now_iso()})"}
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    return type(soc).model_validate({**fields, "pus": pus, "provenance": prov, "sources": sources,
                                     "path": None,
                                     "transfers": Transfers(default=default, pairs=tuple(pairs))})
