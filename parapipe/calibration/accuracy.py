"""How good the calibrated cost model is: MAPE against measured operators, blocks, stages and transfers.

For each PU of a :class:`~parapipe.calibration.calibrated.Calibration`:

* **operators** (single-operator rows): the profile's own roofline (``prior``) and the isolated fit;
* **blocks** (block rows, the in-graph fit's training data): the in-graph fit;
* **stages** (stage rows, never used for fitting): the profile's own roofline summed over the stage's
  operators (``prior``), the in-graph calibrated model alone with one session boundary (``model``), and the
  measurement-backed prediction of :class:`~parapipe.calibration.predict.CostModel` (``measured``: block
  measurements where they exist);
* **transfers**: the fitted ``alpha + nbytes / beta`` against each measured size.

MAPE is ``100 · mean(|predicted − measured| / measured)``
(:func:`~parapipe.calibration.calibrate.mape_percent`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from parapipe.calibration.calibrate import PUParams, compute_time, mape_percent, predict
from parapipe.calibration.calibrated import Calibration, block_weight_nbytes
from parapipe.calibration.predict import CostModel

__all__ = ["PUAccuracy", "AccuracyReport", "evaluate"]


@dataclass
class PUAccuracy:
    """MAPE figures of one PU (percent; None where there is nothing to compare)."""

    pu: str
    ops: int = 0
    op_mape_prior: Optional[float] = None
    op_mape_calibrated: Optional[float] = None
    blocks: int = 0
    block_mape_calibrated: Optional[float] = None
    stages: int = 0
    stage_mape_prior: Optional[float] = None
    stage_mape_model: Optional[float] = None
    stage_mape_measured: Optional[float] = None


@dataclass
class AccuracyReport:
    """Per-PU accuracy, per-pair transfer fits, and the figures over all PUs."""

    soc: str
    pus: List[PUAccuracy]
    transfers: List[Dict] = field(default_factory=list)
    op_mape_calibrated: Optional[float] = None
    stage_mape_model: Optional[float] = None
    stage_mape_measured: Optional[float] = None
    stage_mape_prior: Optional[float] = None

    def to_json(self) -> dict:
        """JSON-ready dict."""
        return {"soc": self.soc, "pus": [p.__dict__ for p in self.pus], "transfers": self.transfers,
                "op_mape_calibrated": self.op_mape_calibrated, "stage_mape_model": self.stage_mape_model,
                "stage_mape_measured": self.stage_mape_measured, "stage_mape_prior": self.stage_mape_prior}


def _mape(pairs: List[tuple]) -> Optional[float]:
    pairs = [(p, m) for p, m in pairs if math.isfinite(p) and m > 0]
    return mape_percent([p for p, _ in pairs], [m for _, m in pairs]) if pairs else None


def evaluate(cal: Calibration) -> AccuracyReport:
    """Compare the calibrated (and the uncalibrated) model with every measurement of ``cal``.

    Returns
    -------
    AccuracyReport
    """
    soc = cal.soc
    model = CostModel(cal)
    work_parts = {}  # stage signature -> [(block signature, parts)]
    for row in cal.rows_of("stage"):
        blocks = _stage_blocks(cal, row.signature)
        if blocks is not None:
            work_parts[row.signature] = blocks
    per_pu, all_ops, all_model, all_measured, all_prior = [], [], [], [], []
    for name, pu in soc.pus.items():
        prior = PUParams.of(pu)
        acc = PUAccuracy(name)
        op_prior, op_cal = [], []
        for row in cal.rows_of("op", name):
            feats = cal.features.get(row.signature)
            if feats is None:
                continue
            ops = [(feats, False)]
            op_prior.append((predict(ops, pu, prior, in_graph=False), row.median_s))
            op_cal.append((predict(ops, pu, cal.isolated[name], in_graph=False), row.median_s))
        acc.ops, acc.op_mape_prior, acc.op_mape_calibrated = len(op_cal), _mape(op_prior), _mape(op_cal)
        blocks = []
        for row in cal.rows_of("block", name):
            parts = cal.parts.get(row.signature)
            if parts is not None and all(s in cal.features for s, _ in parts):
                ops = [(cal.features[s], f) for s, f in parts]
                nbytes = cal.boundary.get(row.signature, 0.0)
                blocks.append((predict(ops, pu, cal.in_graph[name], True, nbytes), row.median_s))
        acc.blocks, acc.block_mape_calibrated = len(blocks), _mape(blocks)
        st_prior, st_model, st_measured = [], [], []
        for row in cal.rows_of("stage", name):
            blocks_of = work_parts.get(row.signature)
            if blocks_of is None:
                continue
            ops = [(cal.features[s], f) for _, parts, _ in blocks_of for s, f in parts]
            st_prior.append((predict(ops, pu, prior, in_graph=False), row.median_s))
            graph = cal.in_graph[name]
            nbytes = cal.boundary.get(row.signature, 0.0)
            compute = sum(compute_time([(cal.features[s], f) for s, f in parts], pu, graph, True)
                          for _, parts, _ in blocks_of)
            weights = [block_weight_nbytes(parts, cal.features) for _, parts, _ in blocks_of]
            st_model.append((compute + graph.boundary_s(nbytes) + graph.cache_s(weights), row.median_s))
            st_measured.append((model.work_s(blocks_of, name, nbytes), row.median_s))
        acc.stages = len(st_model)
        acc.stage_mape_prior, acc.stage_mape_model = _mape(st_prior), _mape(st_model)
        acc.stage_mape_measured = _mape(st_measured)
        all_ops += op_cal
        all_prior += st_prior
        all_model += st_model
        all_measured += st_measured
        per_pu.append(acc)
    transfers = []
    for (src, dst), fit in sorted(cal.transfers.items()):
        pairs = [(fit.alpha_s + r.nbytes / fit.beta_bytes_per_s, r.median_s)
                 for r in cal.rows_of("transfer", f"{src}->{dst}")]
        transfers.append({"src": src, "dst": dst, "alpha_s": fit.alpha_s,
                          "beta_bytes_per_s": fit.beta_bytes_per_s,
                          "samples": fit.samples, "mape_percent": _mape(pairs)})
    return AccuracyReport(soc.name, per_pu, transfers, _mape(all_ops), _mape(all_model), _mape(all_measured),
                          _mape(all_prior))


def _stage_blocks(cal: Calibration, signature: str) -> Optional[list]:
    """``[(block signature, parts, boundary bytes)]`` of a stage, or None when the catalog does not describe
    all of it."""
    entry_parts = cal.stage_blocks.get(signature)
    if entry_parts is None:
        return None
    out = []
    for block_sig in entry_parts:
        parts = cal.parts.get(block_sig)
        if parts is None or not all(s in cal.features for s, _ in parts):
            return None
        out.append((block_sig, parts, cal.boundary.get(block_sig, 0.0)))
    return out
