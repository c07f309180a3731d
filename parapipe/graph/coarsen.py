"""Coarsening: group operators into blocks, the units the mapping search places on PUs.

Three steps (see :func:`coarsen`):

1. **Chain fusion.** An operator joins its producer's block when it is that producer's only consumer and the
   producer is its only activation producer, unless it is an *anchor* (:data:`ANCHOR_OPS`: convolutions,
   matrix products, pooling, LRN, unknown ops), which always starts a block. So Conv->BN->Relu,
   Gemm->Relu->Dropout become one block each while Conv->Conv stays two (a cut point between them), and no
   block spans a fork or a join: Inception branches, residual shortcuts and fire modules stay visible.
   A ``DequantizeLinear`` never joins its producer: it starts a block that then joins its only consumer's
   block, so a weight's DQ (one reader each, see :func:`parapipe.graph.cleanup.unique_dequantize`) stays
   with its Conv/MatMul and an activation's DQ with the operator it feeds; a cut then hands over the
   quantized tensor and every stage holds whole DQ -> op -> Q units that ONNX Runtime fuses into quantized
   kernels exactly as in the whole model. A sequence-typed value (``seq(tensor)``) never crosses blocks:
   its producer, its readers and every operator on a path between them form one block.
2. **Data-movement folding.** A block of zero-FLOP data-movement ops only (a Concat closing a fire module, a
   Split, a Flatten on the input) joins its only predecessor block, else its only successor block. Either
   merge keeps the block graph acyclic (no other path can connect the two) and adds no dependency between
   other blocks; a join that is also a fork (Inception's Concat) stays a block of its own.
3. **Budget** (``max_blocks``): merge along linear chains of the block graph (u's only successor is v and
   v's only predecessor is u), smallest combined FLOPs first; then collapse whole parallel sections (a fork
   up to its join, i.e. immediate post-dominator), cheapest first, among those that do not undershoot the
   budget; then merge a branch end into its join or a fork into a branch start (u's only successor is v, or
   v's only predecessor is u); as a last resort merge blocks adjacent in the topological order. Every merge
   keeps a DAG.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Optional

import networkx as nx

from parapipe.errors import input_error
from parapipe.graph.flops import is_data_movement
from parapipe.graph.opgraph import OpGraph
from parapipe.graph.width import widest_parallel_section

__all__ = ["ANCHOR_OPS", "Block", "BlockGraph", "coarsen", "widest_parallel_section"]

logger = logging.getLogger(__name__)

#: Op types that always start a new block (the heavy kernels fusing compilers keep as fusion roots, e.g. TVM's
#: "complex-out-fusable"/"opaque" patterns); element-wise, normalisation and data-movement ops fuse into them.
ANCHOR_OPS = frozenset({
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "Gemm", "MatMul", "MatMulInteger", "QLinearMatMul",
    "Einsum", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LRN",
    "MaxRoiPool", "RoiAlign", "If", "Loop", "Scan", "LSTM", "GRU", "RNN", "Attention",
})


@dataclass(frozen=True)
class Block:
    """A group of operators mapped as one unit.

    ``ops`` are in the OpGraph's topological order; ``in_nbytes``/``out_nbytes`` count the distinct activation
    tensors entering the block (graph inputs included) and leaving it (consumed by another block or a graph
    output); ``param_nbytes`` sums the operators' constant inputs; ``flops`` their FLOPs.
    """

    name: str
    ops: tuple[str, ...]
    op_types: tuple[str, ...]
    flops: float
    param_nbytes: int
    in_nbytes: int
    out_nbytes: int


class BlockGraph:
    """Blocks of an :class:`OpGraph` and the DAG between them.

    Attributes
    ----------
    blocks : list[Block]
        In a topological order of the block DAG.
    graph : networkx.DiGraph
        Nodes: block names; edge attributes ``nbytes`` (int, distinct tensors) and ``tensors`` (sorted names).
    op_to_block : dict[str, str]
        Operator name -> block name.
    index : dict[str, int]
        Block name -> position in :attr:`blocks`.
    opgraph : OpGraph
        The operator graph the blocks partition.
    """

    def __init__(self, blocks: list[Block], graph: nx.DiGraph, op_to_block: dict[str, str],
                 opgraph: OpGraph) -> None:
        self.blocks = blocks
        self.graph = graph
        self.op_to_block = op_to_block
        self.index = {b.name: i for i, b in enumerate(blocks)}
        self.opgraph = opgraph

    def block(self, name: str) -> Block:
        """The block called ``name``."""
        return self.blocks[self.index[name]]

    def __len__(self) -> int:
        return len(self.blocks)

    def __repr__(self) -> str:
        return (f"BlockGraph({self.opgraph.name!r}, blocks={len(self.blocks)}, "
                f"edges={self.graph.number_of_edges()})")


class _Quotient:
    """Mutable quotient DAG over groups of operators (group id = the int of its first member)."""

    def __init__(self, og: OpGraph) -> None:
        self.topo = {name: i for i, name in enumerate(og.topo_order)}
        self.members: dict[int, list[int]] = {i: [i] for i in range(len(og.topo_order))}
        self.flops: dict[int, float] = {i: og.op(n).flops for n, i in self.topo.items()}
        self.zero_move: dict[int, bool] = {
            i: og.op(n).flops == 0.0 and is_data_movement(og.op(n).op_type) for n, i in self.topo.items()}
        self.succ: dict[int, set[int]] = {i: set() for i in self.members}
        self.pred: dict[int, set[int]] = {i: set() for i in self.members}
        for u, v in og.graph.edges:
            self.succ[self.topo[u]].add(self.topo[v])
            self.pred[self.topo[v]].add(self.topo[u])
        self.pos: dict[int, int] = {i: i for i in self.members}  # a valid topological position per group

    def merge(self, keep: int, gone: int) -> None:
        """Fold group ``gone`` into ``keep`` (the caller guarantees the result is acyclic)."""
        self.members[keep].extend(self.members.pop(gone))
        self.flops[keep] += self.flops.pop(gone)
        self.zero_move[keep] = self.zero_move[keep] and self.zero_move.pop(gone)
        for s in self.succ.pop(gone):
            self.pred[s].discard(gone)
            if s != keep:
                self.pred[s].add(keep)
                self.succ[keep].add(s)
        for p in self.pred.pop(gone):
            self.succ[p].discard(gone)
            if p != keep:
                self.succ[p].add(keep)
                self.pred[keep].add(p)
        self.succ[keep].discard(keep)
        self.pred[keep].discard(keep)
        del self.pos[gone]

    def renumber(self) -> None:
        """Recompute positions as a topological order (ties broken by the old positions)."""
        g = nx.DiGraph()
        g.add_nodes_from(self.members)
        g.add_edges_from((u, v) for u, vs in self.succ.items() for v in vs)
        order = nx.lexicographical_topological_sort(g, key=self.pos.__getitem__)
        self.pos = {gid: i for i, gid in enumerate(order)}

    def ordered(self) -> list[int]:
        return sorted(self.members, key=self.pos.__getitem__)


def _fuse_chains(og: OpGraph, q: _Quotient) -> None:
    group_of: dict[int, int] = {}
    for name in og.topo_order:
        v = q.topo[name]
        preds = list(og.graph.predecessors(name))
        op_type = og.op(name).op_type
        if (len(preds) == 1 and og.graph.out_degree(preds[0]) == 1 and op_type not in ANCHOR_OPS
                and op_type != "DequantizeLinear"):
            u = group_of[q.topo[preds[0]]]
            q.merge(u, v)
            group_of[v] = u
        else:
            group_of[v] = v


def _attach_dequantize(og: OpGraph, q: _Quotient) -> None:
    """Merge every group started by a DequantizeLinear into its only successor group (acyclic: u's only
    successor is v)."""
    topo = og.topo_order
    for gid in q.ordered():
        if gid in q.members and og.op(topo[gid]).op_type == "DequantizeLinear" and len(q.succ[gid]) == 1:
            (target,) = q.succ[gid]
            pos = q.pos[target]
            q.merge(target, gid)
            q.pos[target] = pos


def _keep_sequences_whole(og: OpGraph, q: _Quotient) -> None:
    """Merge the producer and readers of every sequence value, with everything on a path between them."""
    group_of = {i: gid for gid, members in q.members.items() for i in members}
    for u, v, tensors in og.graph.edges(data="tensors"):
        if not any(og.tensors[t].sequence for t in tensors if t in og.tensors):
            continue
        a, b = group_of[q.topo[u]], group_of[q.topo[v]]
        if a == b:
            continue
        section = _closure(a, q.succ, lambda g: True) & _closure(b, q.pred, lambda g: True)
        keep = min(section, key=q.pos.__getitem__)
        for gid in section - {keep}:
            q.merge(keep, gid)
        for gid, members in q.members.items():
            for i in members:
                group_of[i] = gid
        q.renumber()


def _fold_data_movement(q: _Quotient) -> None:
    """Fold zero-FLOP data-movement groups into their only predecessor, else their only successor.

    Merging into the *only* neighbour adds no dependency between other blocks (everything already waited
    for, or on, that neighbour), so parallel branches stay parallel; a group with several predecessors and
    several successors (a Concat joining Inception branches that also feeds the next module's branches)
    stays a block of its own.
    """
    for gid in q.ordered():
        if gid not in q.members or not q.zero_move[gid]:
            continue
        if len(q.pred[gid]) == 1:
            (target,) = q.pred[gid]
        elif len(q.succ[gid]) == 1:
            (target,) = q.succ[gid]
        else:
            continue
        pos = q.pos[target]
        q.merge(target, gid)
        q.pos[target] = pos  # still a topological position: see the proofs in the module docstring


def _chain_merge_once(q: _Quotient, half: bool = False) -> bool:
    """Merge the edge u -> v with the smallest combined FLOPs where u's only successor is v AND v's only
    predecessor is u (``half``: OR). Both kinds are acyclic: no other path can connect u to v."""
    best: Optional[tuple[float, int, int, int]] = None
    for u, vs in q.succ.items():
        for v in vs:
            chain = (len(vs) == 1 or len(q.pred[v]) == 1) if half else (len(vs) == 1 and len(q.pred[v]) == 1)
            if chain:
                key = (q.flops[u] + q.flops[v], q.pos[u], u, v)
                if best is None or key < best:
                    best = key
    if best is None:
        return False
    _, _, u, v = best
    pos = q.pos[u]
    q.merge(u, v)
    q.pos[u] = pos
    if half:
        q.renumber()
    return True


def _sections(q: _Quotient) -> Iterable[tuple[float, int, set[int]]]:
    """Each fork with the groups between it and its join (immediate post-dominator), inclusive.

    The set {x : fork ->* x ->* join} is convex (a path leaving and re-entering it would put its outside
    nodes inside), so contracting it keeps the DAG acyclic.
    """
    sink = -1
    rev = nx.DiGraph()
    rev.add_nodes_from(q.members)
    for u, vs in q.succ.items():
        rev.add_edges_from((v, u) for v in vs)
        if not vs:
            rev.add_edge(sink, u)
    ipdom = nx.immediate_dominators(rev, sink)
    for f, vs in q.succ.items():
        if len(vs) < 2 or f not in ipdom:
            continue
        join = ipdom[f]
        lo, hi = q.pos[f], (q.pos[join] if join != sink else len(q.pos))
        down = _closure(f, q.succ, lambda g: q.pos[g] <= hi)
        section = down if join == sink else down & _closure(join, q.pred, lambda g: q.pos[g] >= lo)
        yield sum(q.flops[g] for g in section), q.pos[f], section


def _closure(start: int, nbrs: dict[int, set[int]], keep) -> set[int]:
    seen = {start}
    stack = [start]
    while stack:
        for y in nbrs[stack.pop()]:
            if y not in seen and keep(y):
                seen.add(y)
                stack.append(y)
    return seen


def _collapse_section_once(q: _Quotient, max_merges: int) -> bool:
    """Collapse the cheapest section that removes at most ``max_merges`` groups."""
    fitting = (t for t in _sections(q) if len(t[2]) - 1 <= max_merges)
    best = min(fitting, key=lambda t: (t[0], t[1]), default=None)
    if best is None:
        return False
    section = sorted(best[2], key=q.pos.__getitem__)
    for gid in section[1:]:
        q.merge(section[0], gid)
    q.renumber()
    return True


def _merge_topo_neighbours_once(q: _Quotient) -> bool:
    order = q.ordered()
    if len(order) < 2:
        return False
    i = min(range(len(order) - 1), key=lambda k: (q.flops[order[k]] + q.flops[order[k + 1]], k))
    q.merge(order[i], order[i + 1])  # adjacent in a topological order: no path can go around
    q.renumber()
    return True


def _enforce_budget(q: _Quotient, max_blocks: int) -> None:
    while len(q.members) > max_blocks:
        if _chain_merge_once(q):
            continue
        if _collapse_section_once(q, len(q.members) - max_blocks):
            continue
        if _chain_merge_once(q, half=True):
            continue
        if not _merge_topo_neighbours_once(q):
            break


def coarsen(og: OpGraph, max_blocks: Optional[int] = None) -> BlockGraph:
    """Group the operators of ``og`` into blocks (see the module docstring for the rules).

    Parameters
    ----------
    og : OpGraph
        The operator graph.
    max_blocks : int, optional
        Upper bound on the number of blocks; ``None`` keeps the natural blocks.

    Returns
    -------
    BlockGraph
        A DAG of blocks; block names are the names of their first operator in ``og.topo_order``.

    Raises
    ------
    InputError
        ``max_blocks`` < 1.
    """
    if max_blocks is not None and max_blocks < 1:
        raise input_error(None, "max_blocks", f"must be >= 1, got {max_blocks}",
                          "give a positive block budget")
    q = _Quotient(og)
    _fuse_chains(og, q)
    _attach_dequantize(og, q)
    _keep_sequences_whole(og, q)
    _fold_data_movement(q)
    if max_blocks is not None:
        _enforce_budget(q, max_blocks)
    return _build(og, q)


def _build(og: OpGraph, q: _Quotient) -> BlockGraph:
    topo = og.topo_order
    op_to_block: dict[str, str] = {}
    groups: list[list[str]] = []
    for gid in q.ordered():
        ops = [topo[i] for i in sorted(q.members[gid])]
        groups.append(ops)
        for op in ops:
            op_to_block[op] = ops[0]
    edge_tensors: dict[tuple[str, str], set[str]] = {}
    leaving: dict[str, set[str]] = {ops[0]: set() for ops in groups}
    entering: dict[str, set[str]] = {ops[0]: set() for ops in groups}
    for u, v, tensors in og.graph.edges(data="tensors"):
        bu, bv = op_to_block[u], op_to_block[v]
        if bu != bv:
            edge_tensors.setdefault((bu, bv), set()).update(tensors)
            leaving[bu].update(tensors)
            entering[bv].update(tensors)
    graph_outputs = set(og.outputs)
    graph_inputs = set(og.inputs)
    blocks: list[Block] = []
    bg = nx.DiGraph()
    for ops in groups:
        name = ops[0]
        for op in ops:
            operator = og.op(op)
            leaving[name].update(t for t in operator.outputs if t in graph_outputs)
            entering[name].update(t for t in operator.inputs if t in graph_inputs)
        blocks.append(Block(
            name=name, ops=tuple(ops), op_types=tuple(og.op(o).op_type for o in ops),
            flops=float(sum(og.op(o).flops for o in ops)),
            param_nbytes=sum(og.op(o).param_nbytes for o in ops),
            in_nbytes=sum(og.tensors[t].nbytes for t in entering[name]),
            out_nbytes=sum(og.tensors[t].nbytes for t in leaving[name] if t in og.tensors)))
        bg.add_node(name)
    for (bu, bv), tensors in edge_tensors.items():
        bg.add_edge(bu, bv, nbytes=sum(og.tensors[t].nbytes for t in tensors), tensors=tuple(sorted(tensors)))
    return BlockGraph(blocks, bg, op_to_block, og)
