"""Block and stage times from the profile database: measurements where they exist, the calibrated model
elsewhere.

:class:`CostModel` answers "how long does this work take on that PU inside a pipeline stage". A stage runs as
one session: its time is the compute of its blocks plus one session boundary (run overhead and the bytes
entering and leaving it, :meth:`parapipe.calibration.calibrate.PUParams.boundary_s`). The compute of a block is,
in this order:

1. its block measurement (optimisation on, same block signature) less the boundary it paid when timed alone;
2. else the sum over its operators of their in-graph time: zero for operators ONNX Runtime fuses away, the
   isolated measurement (optimisation off) times the ratio of the in-graph to the isolated calibrated model
   for a measured operator, the in-graph calibrated model for the others.

PUs without any measurement are left to the profile's own roofline (:mod:`parapipe.cost.roofline`).

:func:`costs_from_db` gives every block of a model its compute time for ``parapipe optimize --db FILE``; the
boundary of a stage is charged where the search charges hand-offs: the bytes a block reads from the model's
inputs or writes to its outputs are added to that block, and the rest goes into the transfer cost between PUs
(:func:`parapipe.calibration.calibrated.calibrated_soc`). The cache term of a stage
(:meth:`~parapipe.calibration.calibrate.PUParams.cache_s`) depends on which blocks share the stage, which a
per-block cost cannot say: the search does not see it (a limit; :class:`CostModel` does).
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence, Tuple

from parapipe.errors import input_error
from parapipe.graph.coarsen import BlockGraph
from parapipe.calibration.calibrate import op_time
from parapipe.calibration.calibrated import Calibration, block_weight_nbytes, calibrated_soc, fit_calibration
from parapipe.profiledb.catalog import (Catalog, OpFeatures, block_parts, block_signature, boundary_nbytes,
                                       op_features)
from parapipe.profiledb.db import ProfileDB
from parapipe.soc.profile import SoC

log = logging.getLogger(__name__)

__all__ = ["CostModel", "costs_from_db", "open_existing_db"]


class CostModel:
    """Measurement-backed in-graph times on the PUs of a calibrated SoC.

    Parameters
    ----------
    cal : Calibration
    extra_features : dict of str to OpFeatures, optional
        Operators not in the catalog (a model that was never profiled).
    """

    def __init__(self, cal: Calibration, extra_features: Optional[Dict[str, OpFeatures]] = None):
        self.cal = cal
        self.features = {**(extra_features or {}), **cal.features}
        self._op: Dict[Tuple[str, str], float] = {}
        self._block: Dict[Tuple[str, str], float] = {}
        for row in cal.rows:
            if row.kind == "op":
                self._op[(row.pu, row.signature)] = row.median_s
            elif row.kind == "block":
                self._block[(row.pu, row.signature)] = row.median_s

    def measured_pus(self) -> set:
        """PUs with at least one operator or block measurement."""
        return {pu for pu, _ in self._op} | {pu for pu, _ in self._block}

    def op_s(self, signature: str, free: bool, pu: str) -> float:
        """In-graph time of one operator on ``pu``, s (``inf`` if the PU does not run it)."""
        if free:
            return 0.0
        soc_pu = self.cal.soc.pus[pu]
        feats = self.features[signature]
        graph = op_time(feats, soc_pu, self.cal.in_graph[pu])
        measured = self._op.get((pu, signature))
        if measured is None or not math.isfinite(graph):
            return graph
        isolated = op_time(feats, soc_pu, self.cal.isolated[pu])
        return measured * graph / isolated if isolated > 0 else graph

    def block_compute_s(self, signature: str, parts: Sequence[Tuple[str, bool]], pu: str,
                        nbytes: float) -> Tuple[float, str]:
        """In-graph compute time of a block on ``pu`` (without a session boundary) and where it came from
        (``"block"``: its measurement less the boundary of ``nbytes`` it paid alone, at least a tenth of the
        measurement; ``"ops"``: built from operators)."""
        measured = self._block.get((pu, signature))
        if measured is not None:
            return max(measured - self.cal.in_graph[pu].boundary_s(nbytes), 0.1 * measured), "block"
        total = sum(self.op_s(sig, free, pu) for sig, free in parts)
        if all(free for _, free in parts):
            total = self.cal.in_graph[pu].op_overhead_s
        return float(total), "ops"

    def work_s(self, blocks: Iterable[Tuple[str, Sequence[Tuple[str, bool]], float]], pu: str,
               nbytes: float) -> float:
        """Time of a stage run as one session on ``pu``: its blocks ``(signature, parts, boundary bytes)``,
        one boundary of ``nbytes`` and the weights it reads again when they exceed the cache, s."""
        blocks = list(blocks)
        compute = sum(self.block_compute_s(sig, parts, pu, b)[0] for sig, parts, b in blocks)
        params = self.cal.in_graph[pu]
        weights = [block_weight_nbytes(parts, self.features) for _, parts, _ in blocks]
        return float(compute + params.boundary_s(nbytes) + params.cache_s(weights))


def open_existing_db(path) -> ProfileDB:
    """Open a profile database that must exist already (reading commands never create one).

    Raises
    ------
    InputError
        ``"<file>: does not exist; ..."`` or the database's own checks (not a profile database, corrupt).
    """
    if not Path(path).exists():
        raise input_error(str(path), None, "does not exist",
                          "profile first (parapipe profile MODEL --soc SOC "
                          "--db FILE) or give the right --db")
    return ProfileDB(path)


def costs_from_db(bg: BlockGraph, soc: SoC, db_path) -> Tuple[SoC, Dict[Tuple[str, str], float]]:
    """Calibrated SoC and block times of ``bg`` from the profile database at ``db_path``.

    Parameters
    ----------
    bg : BlockGraph
        Blocks as the search uses them (merged blocks are built from their operators).
    soc : SoC
        The profile named in the database's ``soc`` column.
    db_path : path
        An existing profile database.

    Returns
    -------
    (SoC, dict)
        The profile with the calibrated parameters and transfer costs written in
        (:func:`~parapipe.calibration.calibrated.calibrated_soc`), and ``(block name, PU) -> seconds`` for every
        block on every PU that has measurements and runs the block (for
        :func:`parapipe.cost.roofline.problem_from_blocks`'s ``measured_s``).

    Raises
    ------
    InputError
        Missing, corrupt or foreign database file.
    """
    og = bg.opgraph
    with open_existing_db(db_path) as db:
        cal = fit_calibration(soc, db, Catalog(db))
    extra = {og.op(n).signature: op_features(og, n) for n in og.topo_order}
    model = CostModel(cal, extra)
    pus = [p for p in soc.pu_names if p in model.measured_pus()]
    graph_io = set(og.inputs) | set(og.outputs)
    times: Dict[Tuple[str, str], float] = {}
    counts = {"block": 0, "ops": 0}
    for block in bg.blocks:
        sig, parts = block_signature(og, block), block_parts(og, block)
        alone = boundary_nbytes(og, block.ops)
        reads = {t for n in block.ops for t in og.op(n).inputs + og.op(n).outputs}
        edge = sum(og.tensors[t].nbytes for t in reads & graph_io)
        for pu in pus:
            if not all(soc.pus[pu].supports(t) for t in block.op_types):
                continue
            t, source = model.block_compute_s(sig, parts, pu, alone)
            params = cal.in_graph[pu]
            if edge:
                t += edge / params.boundary_bandwidth_bytes_per_s
            if any(i in reads for i in og.inputs):
                t += params.run_overhead_s
            times[(block.name, pu)] = t
            counts[source] += 1
    log.info("costs of %s from %s: %d block time(s) measured, %d built from operators (PUs %s)", og.name,
             db_path, counts["block"], counts["ops"], ", ".join(pus) or "none")
    return calibrated_soc(cal, f"parapipe calibration on {Path(db_path).name}"), times


def block_times_at_frequencies(bg: BlockGraph, soc: SoC, db_path) -> Dict[Tuple[str, str, float], float]:
    """``(block name, PU, frequency_hz) -> seconds``: the blocks of ``bg`` measured whole at operating points
    other than the board's own settings (``parapipe profile --frequencies`` stores them with their frequency),
    for :func:`parapipe.cost.roofline.problem_from_blocks`'s ``measured_at_s``. Blocks without such a
    measurement are left out (their times scale with the roofline).

    Raises
    ------
    InputError
        Missing, corrupt or foreign database file.
    """
    og = bg.opgraph
    out: Dict[Tuple[str, str, float], float] = {}
    signatures = [(block.name, block_signature(og, block)) for block in bg.blocks]  # hashed once, not per point
    with open_existing_db(db_path) as db:
        for pu, freqs in db.frequencies(soc.name).items():
            if pu not in soc.pus:
                continue
            for hz in freqs:
                for name, signature in signatures:
                    found = db.get(soc.name, pu, signature, kind="block", frequency_hz=hz)
                    if found is not None:
                        out[(name, pu, hz)] = float(found.median_s)
    if out:
        log.info("block times of %s at other operating points from %s: %d", og.name, db_path, len(out))
    return out
