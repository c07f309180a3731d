"""What to measure: deduplicated operators, blocks, stages and hand-offs of a model on the PUs of a SoC.

Each piece of work becomes a :class:`WorkItem` (one measurement on one PU). Operators are deduplicated by
signature (op type, input shapes and dtypes, attributes: :attr:`parapipe.graph.opgraph.Operator.signature`),
blocks by :func:`parapipe.profiledb.catalog.block_signature`, stages by :func:`stage_signature`, so a model with
26 Conv operators of 18 kinds is timed 18 times per PU. A PU gets an item only if it runs every op type
involved.

:func:`select_informative` picks the operators a partial profile (``--budget``) measures.
"""
from __future__ import annotations

import hashlib
import math
import random
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx

from parapipe.graph.coarsen import Block, BlockGraph
from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import OpGraph
from parapipe.profiledb.catalog import OpFeatures, WorkEntry, block_parts, block_signature, boundary_nbytes
from parapipe.soc.profile import SoC

__all__ = ["WorkItem", "distinct_ops", "distinct_blocks", "op_items", "block_items", "pair_items",
           "span_items", "SPAN_SPLITS", "stage_ranges", "stage_signature", "stage_items", "transfer_items",
           "select_informative", "holdout_sample", "TRANSFER_SIZES_NBYTES", "MAX_TRANSFER_PAIRS"]

#: Hand-off sizes timed per PU pair, bytes: 1 KiB (the fixed cost dominates) to 4 MiB (a large activation;
#: the first conv output of the zoo models at batch 1 is 1.2-3.2 MB). Four sizes give the fit one spare point.
TRANSFER_SIZES_NBYTES = (2**10, 2**16, 2**20, 2**22)
#: Ordered PU pairs whose hand-offs are timed at most (a 16-core host profile has 240 pairs of identical
#: cores); the first pairs in profile order are taken. A parapipe choice.
MAX_TRANSFER_PAIRS = 12


@dataclass(frozen=True)
class WorkItem:
    """One measurement to take.

    Attributes
    ----------
    kind : {"op", "block", "stage", "transfer"}
    pu : str
        PU name, or ``"src->dst"`` for a transfer.
    signature : str
        The database key of the work (transfers: ``"transfer:<nbytes>"``).
    op_type : str
        ONNX op type, or a summary (``"Conv+Relu"``, ``"stage"``, ``"transfer"``).
    nbytes : int
        Input + output activation bytes (transfers: the size).
    build : callable or None
        Returns the sub-model to time (None for transfers).
    optimization : {"disabled", "all"}
        ONNX Runtime graph optimisation: off for single operators, on for blocks and stages.
    """

    kind: str
    pu: str
    signature: str
    op_type: str
    nbytes: int
    build: Optional[Callable[[], onnx.ModelProto]] = None
    optimization: str = "disabled"


def distinct_ops(og: OpGraph) -> "OrderedDict[str, str]":
    """Operator signature -> first operator with it, in topological order."""
    out: "OrderedDict[str, str]" = OrderedDict()
    for name in og.topo_order:
        out.setdefault(og.op(name).signature, name)
    return out


def distinct_blocks(og: OpGraph, bg: BlockGraph) -> "OrderedDict[str, Block]":
    """Block signature -> first block with it, in block order."""
    out: "OrderedDict[str, Block]" = OrderedDict()
    for block in bg.blocks:
        out.setdefault(block_signature(og, block), block)
    return out


def _summary(op_types: Sequence[str]) -> str:
    return "+".join(dict.fromkeys(op_types))[:200]


def op_items(og: OpGraph, soc: SoC, pus: Sequence[str], signatures: Sequence[str]) -> List[WorkItem]:
    """Single-operator items (optimisation off), signature-major, on every PU of ``pus`` that runs the op."""
    first = distinct_ops(og)
    items = []
    for sig in signatures:
        name = first[sig]
        op = og.op(name)
        build = (lambda n=name: extract_submodel(og, [n], name=f"op_{n}", check=False).model)
        for pu in pus:
            if soc.pus[pu].supports(op.op_type):
                items.append(WorkItem("op", pu, sig, op.op_type, int(op.in_nbytes + op.out_nbytes), build))
    return items


def block_items(og: OpGraph, soc: SoC, pus: Sequence[str], blocks: Sequence[Block]) -> List[WorkItem]:
    """Block items (optimisation on, as the executor runs blocks) on every PU that runs all their op types."""
    items = []
    for block in blocks:
        sig = block_signature(og, block)
        build = (lambda b=block: extract_submodel(og, b.ops, name=b.name, check=False).model)
        for pu in pus:
            if all(soc.pus[pu].supports(t) for t in block.op_types):
                items.append(WorkItem("block", pu, sig, _summary(block.op_types),
                                      int(block.in_nbytes + block.out_nbytes), build, "all"))
    return items


def block_entries(og: OpGraph, blocks: Sequence[Block]) -> List[WorkEntry]:
    """Catalog entries of ``blocks``."""
    return [WorkEntry(block_signature(og, b), "block", block_parts(og, b), f"{og.name}/{b.name}",
                      boundary_nbytes(og, b.ops)) for b in blocks]


def pair_items(og: OpGraph, bg: BlockGraph, soc: SoC, pus: Sequence[str],
               blocks: Sequence[Block]) -> Tuple[List[WorkItem], List[WorkEntry]]:
    """Items (optimisation on) and catalog entries of every two consecutive blocks of ``bg`` that are both in
    ``blocks``, deduplicated: timed as one sub-model next to each block alone, they show what one session
    boundary costs (:func:`parapipe.calibration.calibrated.fit_boundary`). Database rows are of kind ``block``
    with a ``"pair:"`` signature."""
    chosen = {block_signature(og, b) for b in blocks}
    seen, items, entries = set(), [], []
    for first, second in zip(bg.blocks, bg.blocks[1:]):
        sigs = (block_signature(og, first), block_signature(og, second))
        if not set(sigs) <= chosen:
            continue
        sig = "pair:" + hashlib.sha256("\n".join(sigs).encode()).hexdigest()[:24]
        if sig in seen:
            continue
        seen.add(sig)
        ops = first.ops + second.ops
        entries.append(WorkEntry(sig, "pair", tuple((s, False) for s in sigs), f"{og.name}/{first.name}+"
                                 f"{second.name}", boundary_nbytes(og, ops)))
        build = (lambda ops=ops, n=first.name: extract_submodel(og, ops, name=f"pair_{n}", check=False).model)
        types = set(first.op_types) | set(second.op_types)
        for pu in pus:
            if all(soc.pus[pu].supports(t) for t in types):
                items.append(WorkItem("block", pu, sig, "pair", int(first.in_nbytes + second.out_nbytes),
                                      build, "all"))
    return items, entries


#: Splits whose block ranges are timed by ``parapipe profile`` as spans (training data for the cache term of
#: the in-graph model): sixths, thirds and two consecutive thirds (so that some spans hold most of the
#: weights), which differ from the whole model, halves and quarters that ``parapipe calibrate`` times as
#: validation stages. A parapipe choice.
SPAN_SPLITS = (3, 6)


def span_items(og: OpGraph, bg: BlockGraph, soc: SoC, pus: Sequence[str],
               exclude: Sequence[Tuple[int, int]] = ()) -> Tuple[List[WorkItem], List[WorkEntry]]:
    """Items (optimisation on) and catalog entries of the block ranges of :data:`SPAN_SPLITS` and of two
    consecutive thirds, longer than two blocks and not in ``exclude``. Database rows are of kind ``block``
    with a ``"span:"`` signature."""
    items, entries = [], []
    thirds = stage_ranges(bg, (3,))
    ranges = stage_ranges(bg, SPAN_SPLITS) + [(a[0], b[1]) for a, b in zip(thirds, thirds[1:])]
    for start, stop in dict.fromkeys(ranges):
        if stop - start <= 2 or (start, stop) in set(exclude):
            continue
        blocks = bg.blocks[start:stop]
        sig = "span:" + stage_signature(og, blocks).split(":", 1)[1]
        ops = [o for b in blocks for o in b.ops]
        entries.append(WorkEntry(sig, "span", tuple((block_signature(og, b), False) for b in blocks),
                                 f"{og.name}/blocks[{start}:{stop}]", boundary_nbytes(og, ops)))
        build = (lambda ops=ops, s=start, e=stop: extract_submodel(og, ops, name=f"span_{s}_{e}",
                                                                   check=False).model)
        types = {og.op(o).op_type for o in ops}
        for pu in pus:
            if all(soc.pus[pu].supports(t) for t in types):
                items.append(WorkItem("block", pu, sig, f"span[{stop - start} blocks]",
                                      int(blocks[0].in_nbytes + blocks[-1].out_nbytes), build, "all"))
    return items, entries


def stage_ranges(bg: BlockGraph, splits: Sequence[int]) -> List[Tuple[int, int]]:
    """Contiguous block ranges ``[start, stop)``: for each ``k`` in ``splits``, the blocks cut into ``k``
    ranges of about equal FLOPs (a contiguous range of a topological order is always a valid stage).
    Duplicates and empty ranges are dropped; order is kept.
    """
    flops = np.array([max(b.flops, 0.0) for b in bg.blocks], float)
    cum = np.concatenate([[0.0], np.cumsum(flops)])
    n = len(bg.blocks)
    out: List[Tuple[int, int]] = []
    for k in splits:
        k = max(1, min(int(k), n))
        cuts = [0] + [int(np.searchsorted(cum, cum[-1] * i / k)) for i in range(1, k)] + [n]
        cuts = sorted(set(min(max(c, 0), n) for c in cuts))
        for start, stop in zip(cuts, cuts[1:]):
            if stop > start and (start, stop) not in out:
                out.append((start, stop))
    return out


def stage_signature(og: OpGraph, blocks: Sequence[Block]) -> str:
    """``"stage:"`` + SHA-256 (24 hex digits) of the stage's block signatures in order."""
    text = "\n".join(block_signature(og, b) for b in blocks)
    return "stage:" + hashlib.sha256(text.encode()).hexdigest()[:24]


def stage_items(og: OpGraph, bg: BlockGraph, soc: SoC, pus: Sequence[str],
                ranges: Sequence[Tuple[int, int]]) -> Tuple[List[WorkItem], List[WorkEntry]]:
    """Stage items (optimisation on) and their catalog entries (stages and their blocks)."""
    items, entries = [], []
    for start, stop in ranges:
        blocks = bg.blocks[start:stop]
        sig = stage_signature(og, blocks)
        ops = [o for b in blocks for o in b.ops]
        types = [og.op(o).op_type for o in ops]
        entries.append(WorkEntry(sig, "stage", tuple((block_signature(og, b), False) for b in blocks),
                                 f"{og.name}/blocks[{start}:{stop}]", boundary_nbytes(og, ops)))
        build = (lambda ops=ops, s=start, e=stop: extract_submodel(og, ops, name=f"stage_{s}_{e}",
                                                                   check=False).model)
        in_bytes = sum(b.in_nbytes for b in blocks[:1])
        out_bytes = sum(b.out_nbytes for b in blocks[-1:])
        for pu in pus:
            if all(soc.pus[pu].supports(t) for t in types):
                items.append(WorkItem("stage", pu, sig, f"stage[{stop - start} blocks]",
                                      int(in_bytes + out_bytes),
                                      build, "all"))
    return items, block_entries(og, [b for s, e in ranges for b in bg.blocks[s:e]]) + entries


def transfer_items(soc: SoC, pus: Sequence[str]) -> List[WorkItem]:
    """Hand-off items between CPU-set PUs (the agent times hand-offs between pinned threads), both directions,
    at :data:`TRANSFER_SIZES_NBYTES`, for at most :data:`MAX_TRANSFER_PAIRS` pairs."""
    pinned = [p for p in pus if soc.pus[p].execution.cpus is not None]
    pairs = [(a, b) for a in pinned for b in pinned if a != b][:MAX_TRANSFER_PAIRS]
    return [WorkItem("transfer", f"{a}->{b}", f"transfer:{n}", "transfer", n)
            for a, b in pairs for n in TRANSFER_SIZES_NBYTES]


def _work(f: OpFeatures) -> float:
    return f.flops + f.nbytes


def _spread_order(feats: List[OpFeatures]) -> List[OpFeatures]:
    """The median work first (the most typical operator), then each time the one farthest in log work from
    those taken (the extremes next, then the gaps), larger first on ties."""
    if len(feats) <= 2:
        return sorted(feats, key=_work, reverse=True)
    rest = sorted(feats, key=lambda f: (_work(f), f.signature))
    order = [rest.pop(len(rest) // 2)]
    while rest:
        taken = np.log1p([_work(f) for f in order])
        far = max(range(len(rest)), key=lambda i: (float(np.min(np.abs(taken - math.log1p(_work(rest[i]))))),
                                                   rest[i].flops))
        order.append(rest.pop(far))
    return order


def select_informative(features: Sequence[OpFeatures], fraction: float) -> List[str]:
    """Signatures of the most informative ``fraction`` of operators for calibrating the roofline.

    Operators are grouped by op class; classes take turns (the class with the most FLOPs in total first), and
    each class gives its most typical operator first (median work: FLOPs + bytes), then the one farthest in
    log work from those already taken (its extremes, which pin the efficiency and the overhead, then the
    gaps).
    ``ceil(fraction · n)`` are returned, at least 1.

    Why median first: fitting on a tenth of the operators and predicting every other one of squeezenet,
    shufflenet, inception v1 and v2 on a 2-core x86 machine gave 26-50 % MAPE, against 29-69 % when the
    largest operators went first. Re-measure with ``parapipe profile MODEL --soc host --budget 0.1``, which
    prints "calibrated prediction error on the held-out operators: MAPE ..." (a held-out sample, not every
    other operator).

    Raises
    ------
    ValueError
        ``fraction`` outside (0, 1].
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    n = len(features)
    k = max(1, math.ceil(fraction * n))
    if k >= n:
        return [f.signature for f in features]
    groups: Dict[str, List[OpFeatures]] = defaultdict(list)
    for f in features:
        groups[f.op_class].append(f)
    classes = sorted(groups, key=lambda c: (-sum(f.flops for f in groups[c]),
                                            -sum(f.nbytes for f in groups[c]), c))
    queues = {c: _spread_order(groups[c]) for c in classes}
    chosen: List[str] = []
    while len(chosen) < k:
        for c in classes:
            if queues[c] and len(chosen) < k:
                chosen.append(queues[c].pop(0).signature)
    return chosen


def holdout_sample(signatures: Sequence[str], chosen: Sequence[str], fraction: float,
                   seed: int = 0) -> List[str]:
    """A seeded random sample of the signatures not in ``chosen``: ``max(3, ceil(fraction · n))`` of them (or
    all that remain), to measure for judging the predictions and keep out of the fit."""
    taken = set(chosen)
    rest = [s for s in signatures if s not in taken]
    size = min(len(rest), max(3, math.ceil(fraction * len(signatures))))
    return sorted(random.Random(seed).sample(rest, size), key=list(signatures).index)
