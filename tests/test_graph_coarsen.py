"""Coarsening into blocks: chain fusion, visible branches, the block budget, the DAG width."""
from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from parapipe.errors import InputError
from parapipe.graph.coarsen import Block, BlockGraph, coarsen, widest_parallel_section
from parapipe.graph.opgraph import import_onnx


def check_invariants(bg: BlockGraph) -> None:
    """Blocks partition the operators, are topologically ordered, and their byte counts add up."""
    og = bg.opgraph
    ops = [op for b in bg.blocks for op in b.ops]
    assert sorted(ops) == sorted(og.topo_order)
    assert len(ops) == len(set(ops))
    topo = {op: i for i, op in enumerate(og.topo_order)}
    assert nx.is_directed_acyclic_graph(bg.graph)
    assert set(bg.graph.nodes) == {b.name for b in bg.blocks}
    for i, b in enumerate(bg.blocks):
        assert bg.index[b.name] == i
        assert b.name == b.ops[0]
        assert list(b.ops) == sorted(b.ops, key=topo.__getitem__)
        assert b.op_types == tuple(og.op(o).op_type for o in b.ops)
        assert b.flops == pytest.approx(sum(og.op(o).flops for o in b.ops))
        assert b.param_nbytes == sum(og.op(o).param_nbytes for o in b.ops)
        assert all(bg.op_to_block[o] == b.name for o in b.ops)
    for u, v, data in bg.graph.edges(data=True):
        assert bg.index[u] < bg.index[v]
        assert data["nbytes"] == sum(og.tensors[t].nbytes for t in data["tensors"]) > 0
    for b in bg.blocks:
        inside = set(b.ops)
        produced = {t for o in b.ops for t in og.op(o).outputs}
        read = {t for o in b.ops for t in og.op(o).inputs if t in og.tensors} - produced
        leaving = {t for t in produced if t in og.outputs}
        for o in b.ops:
            for v, data in og.graph.succ[o].items():
                if v not in inside:
                    leaving.update(data["tensors"])
        assert b.in_nbytes == sum(og.tensors[t].nbytes for t in read)
        assert b.out_nbytes == sum(og.tensors[t].nbytes for t in leaving)


def test_chain_fuses_conv_relu_but_keeps_conv_conv_cut(chain_model):
    bg = coarsen(import_onnx(chain_model))
    check_invariants(bg)
    assert [b.ops for b in bg.blocks] == [("conv1", "relu1"), ("conv2", "relu2"), ("gap", "flatten"), ("fc",)]
    assert list(bg.graph.edges) == [("conv1", "conv2"), ("conv2", "gap"), ("gap", "fc")]
    assert bg.graph.edges["conv1", "conv2"] == {"nbytes": 4 * 64 * 4, "tensors": ("relu1_y",)}
    assert bg.block("conv2").in_nbytes == bg.block("conv2").out_nbytes == 4 * 64 * 4
    assert widest_parallel_section(bg) == 1


def test_diamond_keeps_both_branches(diamond_model):
    bg = coarsen(import_onnx(diamond_model))
    check_invariants(bg)
    assert [b.ops for b in bg.blocks] == [("conv_a", "relu_a"), ("conv_b", "relu_b"), ("conv_c",),
                                          ("add", "relu_out")]
    assert widest_parallel_section(bg) == 2
    assert bg.block("conv_a").out_nbytes == 4 * 64 * 4  # one tensor to two consumers counts once


def test_zero_flop_join_is_folded_without_serialising_branches(two_branch_model):
    bg = coarsen(import_onnx(two_branch_model))
    check_invariants(bg)
    assert [b.ops for b in bg.blocks] == [("conv_l", "relu_l"), ("pool",), ("conv_r",),
                                          ("concat", "conv_out")]
    assert widest_parallel_section(bg) == 2


def test_max_blocks_merges_cheapest_chain_neighbours_first(chain_model):
    og = import_onnx(chain_model)
    bg = coarsen(og, max_blocks=2)
    check_invariants(bg)
    # flops: conv1 14080, conv2 18944, gap 256, fc 18: gap+fc merge first, then conv2+gap(+fc)
    assert [b.ops for b in bg.blocks] == [("conv1", "relu1"), ("conv2", "relu2", "gap", "flatten", "fc")]
    one = coarsen(og, max_blocks=1)
    check_invariants(one)
    assert len(one.blocks) == 1 and one.blocks[0].in_nbytes == og.tensors["x"].nbytes
    assert one.blocks[0].out_nbytes == og.tensors["fc_y"].nbytes


def test_max_blocks_on_a_diamond_stays_acyclic(diamond_model):
    og = import_onnx(diamond_model)
    for budget in (4, 3, 2, 1):
        bg = coarsen(og, max_blocks=budget)
        check_invariants(bg)
        assert len(bg.blocks) == budget  # never more, and no needless collapse below the budget
    assert coarsen(og, max_blocks=100).blocks == coarsen(og).blocks


def test_max_blocks_must_be_positive(chain_model):
    with pytest.raises(InputError, match="max_blocks: must be >= 1, got 0"):
        coarsen(import_onnx(chain_model), max_blocks=0)


def _brute_width(g: nx.DiGraph) -> int:
    tc = nx.transitive_closure_dag(g)
    nodes = list(g.nodes)
    for size in range(len(nodes), 0, -1):
        for combo in itertools.combinations(nodes, size):
            if not any(tc.has_edge(a, b) or tc.has_edge(b, a) for a, b in itertools.combinations(combo, 2)):
                return size
    return 0


def test_width_matches_brute_force_on_random_dags():
    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(1, 10))
        g = nx.DiGraph()
        g.add_nodes_from(f"b{i}" for i in range(n))
        for i, j in itertools.combinations(range(n), 2):
            if rng.random() < 0.3:
                g.add_edge(f"b{i}", f"b{j}")
        blocks = [Block(f"b{i}", (f"b{i}",), ("Relu",), 1.0, 0, 0, 0) for i in range(n)]
        bg = BlockGraph(blocks, g, {b.name: b.name for b in blocks}, opgraph=None)  # type: ignore[arg-type]
        assert widest_parallel_section(bg) == _brute_width(g), f"trial {trial}: {sorted(g.edges)}"


def test_zoo_branches_stay_visible(zoo_opgraph):
    inception = coarsen(zoo_opgraph("inception_v1"))
    check_invariants(inception)
    assert widest_parallel_section(inception) >= 4
    resnet = coarsen(zoo_opgraph("resnet50"))
    check_invariants(resnet)
    assert widest_parallel_section(resnet) >= 2
    squeeze = coarsen(zoo_opgraph("squeezenet"))
    assert widest_parallel_section(squeeze) == 2  # fire modules: expand1x1 | expand3x3
    # Conv -> Relu fused: no block of inception_v1 starts with a Relu
    assert not any(b.op_types[0] == "Relu" for b in inception.blocks)
    # each Inception module's 4 branches: a block whose successors are 4 blocks
    assert max(inception.graph.out_degree(b.name) for b in inception.blocks) >= 4


def test_zoo_budget_keeps_branches_where_possible(zoo_opgraph):
    og = zoo_opgraph("inception_v1")
    bg = coarsen(og, max_blocks=20)
    check_invariants(bg)
    assert len(bg.blocks) == 20
    assert widest_parallel_section(bg) >= 4  # chains merged first, some module still shows its branches
    small = coarsen(og, max_blocks=3)
    check_invariants(small)
    assert len(small.blocks) == 3
