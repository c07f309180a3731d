"""What each measured signature computes, kept next to the measurements so calibration needs no model.

A measurement row (:mod:`parapipe.profiledb.db`) names its work by a signature only. The catalog, two tables
in the same SQLite file, says what that work is:

* ``op_catalog``: one row per operator signature with its cost features (:class:`OpFeatures`: op type, op
  class, FLOPs, activation and weight bytes);
* ``work_catalog``: one row per block or stage signature with its parts: a block lists its operator
  signatures, each with a flag saying whether ONNX Runtime fuses the operator away inside a graph
  (:func:`in_graph_free`); a pair (two consecutive blocks timed as one sub-model, to measure what a session
  boundary costs), a span (a longer range of blocks timed as one sub-model, to measure what weights that no
  longer stay in cache cost) and a stage list their block signatures. Each row also has the bytes of the
  activations entering and leaving the work (:func:`boundary_nbytes`).

The tables belong to the database's one schema (:mod:`parapipe.profiledb.db` creates and migrates them); a
:class:`Catalog` reads and writes them through its :class:`~parapipe.profiledb.db.ProfileDB`'s connection.

:func:`block_signature` is the key of a block in the database (rows of kind ``block``) and in ``work_catalog``.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from parapipe.graph.coarsen import Block
from parapipe.graph.opgraph import OpGraph
from parapipe.profiledb.db import ProfileDB
from parapipe.soc.op_classes import op_class

log = logging.getLogger(__name__)

__all__ = ["OpFeatures", "WorkEntry", "Catalog", "op_features", "block_parts", "boundary_nbytes",
           "in_graph_free", "block_signature",
           "FUSABLE_ACTIVATIONS"]

#: Activations ONNX Runtime's CPU graph optimiser folds into a preceding Conv or Gemm (ConvActivationFusion,
#: GemmActivationFusion in onnxruntime/core/optimizer/, ORT 1.19-1.23).
FUSABLE_ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid"})
#: Op types removed outright at inference (EliminateDropout, EliminateIdentity in the same folder).
ELIMINATED_OPS = frozenset({"Dropout", "Identity"})
#: Producers the activations and BatchNormalization are fused into (ConvBNFusion folds BN into Conv).
_FUSION_HOSTS = frozenset({"Conv", "Gemm"})

@dataclass(frozen=True)
class OpFeatures:
    """Cost features of one operator signature.

    Attributes
    ----------
    signature : str
        :attr:`parapipe.graph.opgraph.Operator.signature`.
    op_type : str
    op_class : str
        One of :data:`parapipe.soc.op_classes.OP_CLASSES` (``depthwise`` for a Conv whose group equals its
        input channels).
    flops : float
        FLOPs of one run (a multiply-add counts 2).
    in_nbytes, out_nbytes, param_nbytes : int
        Activation bytes read, written, and constant (weight) bytes read.
    """

    signature: str
    op_type: str
    op_class: str
    flops: float
    in_nbytes: int
    out_nbytes: int
    param_nbytes: int

    @property
    def nbytes(self) -> int:
        """All bytes the operator moves: inputs + outputs + weights."""
        return self.in_nbytes + self.out_nbytes + self.param_nbytes


@dataclass(frozen=True)
class WorkEntry:
    """A block (parts: ``(op signature, fused away in a graph)``), or a pair, span or stage (parts: ``(block
    signature, False)``), with the bytes of the activations entering and leaving it."""

    signature: str
    kind: str
    parts: Tuple[Tuple[str, bool], ...]
    label: str
    boundary_nbytes: int = 0


def op_features(og: OpGraph, name: str) -> OpFeatures:
    """The :class:`OpFeatures` of operator ``name`` of ``og`` (depthwise convolutions recognised)."""
    op = og.op(name)
    group, in_channels = 1, None
    if op.op_type in ("Conv", "ConvTranspose"):
        for attr in og.node(name).attribute:
            if attr.name == "group":
                group = int(attr.i)
        data = op.inputs[0] if op.inputs else None
        if data in og.tensors and len(og.tensors[data].shape) >= 2:
            in_channels = int(og.tensors[data].shape[1])
    return OpFeatures(op.signature, op.op_type, op_class(op.op_type, group=group, in_channels=in_channels),
                      float(op.flops), int(op.in_nbytes), int(op.out_nbytes), int(op.param_nbytes))


def in_graph_free(og: OpGraph, name: str, within: Optional[Iterable[str]] = None) -> bool:
    """Whether ONNX Runtime (optimisation on) removes operator ``name`` when it runs in a graph.

    True for Dropout and Identity (eliminated), for an activation of :data:`FUSABLE_ACTIVATIONS` or a
    BatchNormalization whose only producer is a Conv/Gemm (itself possibly followed by a fused BN) that feeds
    nothing else, when that producer is in ``within`` (the same block or stage; default: anywhere).
    """
    op = og.op(name)
    if op.op_type in ELIMINATED_OPS:
        return True
    if op.op_type not in FUSABLE_ACTIVATIONS and op.op_type != "BatchNormalization":
        return False
    members = set(within) if within is not None else None
    preds = list(og.graph.predecessors(name))
    if len(preds) != 1 or og.graph.out_degree(preds[0]) != 1:
        return False
    producer = preds[0]
    if members is not None and producer not in members:
        return False
    kind = og.op(producer).op_type
    if kind in _FUSION_HOSTS:
        return True
    return (op.op_type in FUSABLE_ACTIVATIONS and kind == "BatchNormalization"
            and in_graph_free(og, producer, members))


def boundary_nbytes(og: OpGraph, ops: Iterable[str]) -> int:
    """Bytes of the distinct activation tensors that operators ``ops`` read from outside the set (graph inputs
    included) plus those they produce for operators outside it or as graph outputs."""
    members = set(ops)
    produced = {t: n for n in members for t in og.op(n).outputs}
    inputs = {t for n in members for t in og.op(n).inputs if t in og.tensors and t not in produced}
    outputs = {t for t in produced if t in og.outputs}
    for n in members:
        for succ, data in og.graph.succ[n].items():
            if succ not in members:
                outputs.update(data["tensors"])
    return int(sum(og.tensors[t].nbytes for t in inputs | outputs))


def block_parts(og: OpGraph, block: Block) -> Tuple[Tuple[str, bool], ...]:
    """``(op signature, fused away)`` for each operator of ``block``, in block order."""
    return tuple((og.op(n).signature, in_graph_free(og, n, block.ops)) for n in block.ops)


class Catalog:
    """The catalog tables of a profile database.

    Parameters
    ----------
    db : ProfileDB
        The open database; the catalog uses its connection and transactions (close the database, not the
        catalog).
    """

    def __init__(self, db: ProfileDB):
        self.db = db

    def _write(self, sql: str, rows: Sequence[tuple], table: str) -> None:
        if rows:
            with self.db.transaction(table) as conn:
                conn.executemany(sql, rows)

    def add_ops(self, features: Iterable[OpFeatures]) -> None:
        """Record operator features (one transaction; known signatures are kept as they are).

        Raises
        ------
        InputError
            The file cannot be written (:meth:`ProfileDB.transaction`); nothing is written.
        """
        rows = [(f.signature, f.op_type, f.op_class, f.flops, f.in_nbytes, f.out_nbytes, f.param_nbytes)
                for f in features]
        self._write("INSERT INTO op_catalog VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (signature) DO NOTHING",
                    rows, "op_catalog")

    def add_work(self, entries: Iterable[WorkEntry]) -> None:
        """Record blocks and stages (one transaction; known signatures are kept as they are)."""
        rows = [(e.signature, e.kind, json.dumps([[s, bool(f)] for s, f in e.parts]), e.label,
                 int(e.boundary_nbytes)) for e in entries]
        self._write("INSERT INTO work_catalog (signature, kind, parts, label, boundary_nbytes) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (signature) DO NOTHING", rows, "work_catalog")

    def ops(self) -> Dict[str, OpFeatures]:
        """Every recorded operator, by signature."""
        cursor = self.db.execute("SELECT signature, op_type, op_class, flops, in_nbytes, out_nbytes, "
                                 "param_nbytes FROM op_catalog")
        return {row[0]: OpFeatures(*row) for row in cursor}

    def work(self) -> Dict[str, WorkEntry]:
        """Every recorded block and stage, by signature."""
        out: Dict[str, WorkEntry] = {}
        query = "SELECT signature, kind, parts, label, boundary_nbytes FROM work_catalog"
        for sig, kind, parts, label, nbytes in self.db.execute(query):
            out[sig] = WorkEntry(sig, kind, tuple((str(s), bool(f)) for s, f in json.loads(parts)), label,
                                 int(nbytes))
        return out


def block_signature(og: OpGraph, block: Block) -> str:
    """Stable id of what a block computes: ``"block:"`` + SHA-256 (first 24 hex digits) of its operators'
    :attr:`~parapipe.graph.opgraph.Operator.signature` strings in block order (op types, input shapes/dtypes,
    attributes); equal for blocks that cost the same, in this model or another."""
    text = "\n".join(og.graph.nodes[op]["op"].signature for op in block.ops)
    return "block:" + hashlib.sha256(text.encode()).hexdigest()[:24]


def ops_of(entry: WorkEntry, work: Dict[str, WorkEntry]) -> List[Tuple[str, bool]]:
    """The ``(op signature, fused away)`` list of a block, or of every block of a pair, span or stage, in
    order.

    Raises
    ------
    KeyError
        A stage names a block the catalog does not hold (a caller bug: stages are recorded with their blocks).
    """
    if entry.kind == "block":
        return list(entry.parts)
    out: List[Tuple[str, bool]] = []
    for block_sig, _ in entry.parts:
        out.extend(work[block_sig].parts)
    return out
