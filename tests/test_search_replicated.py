"""Replicated stages in the search (parapipe/search/replicate.py, the ``replicated`` pass and baseline).

* the replicated pass's front equals the exact Pareto front of every mapping of its space (every cut × every plain
  or replicated stage, PUs disjoint), enumerated and evaluated with ``evaluate``, with and without memory limits,
  with a stage cap, and with single-PU replicas only;
* a hand-computed case through ``search()``: one block on two equal PUs, replicated: period T/2;
* memory: a replica that would exceed ``memory_bytes`` is never proposed, by the pass, the front or the baseline;
* pipeline × replicated: a slow first block replicated over two PUs in front of a fast block on a third.
"""
from __future__ import annotations

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.problem import MappingProblem
from parapipe.search.options import SearchOptions
from parapipe.search.api import search
from parapipe.search.pareto import pareto_mask
from parapipe.search.replicate import replicated_front
from search_cases import all_replicated_objectives, random_problem, uncovered


def _exact_front(objs: np.ndarray) -> np.ndarray:
    canon = np.array([[float(f"{x:.10g}") for x in row] for row in objs]).reshape(-1, 3)
    return objs[pareto_mask(canon)]


def _same_front(a: np.ndarray, b: np.ndarray) -> bool:
    return not len(uncovered(a, b)) and not len(uncovered(b, a))


def _with_memory(pr: MappingProblem, rng: np.random.Generator) -> MappingProblem:
    """``pr`` with random weights (1-10 MB per block) and per-PU limits that the whole model exceeds on some
    PUs but half of it fits."""
    w = rng.uniform(1e6, 10e6, pr.n_blocks)
    limits = rng.uniform(0.4, 1.2, pr.n_pus) * w.sum()
    return MappingProblem(pr.block_names, pr.preds, pr.edge_nbytes, pr.pu_names, pr.time_s, pr.active_power_w,
                          pr.idle_power_w, pr.static_power_w, pr.alpha_s, pr.beta_bytes_per_s, name=pr.name,
                          weight_nbytes=w, memory_bytes=limits)


CASES = [(n, k, shape, seed) for n, k, shape in [(5, 3, "dag"), (6, 3, "diamond"), (6, 2, "dag"), (5, 3, "chain"),
                                                   (4, 4, "dag")] for seed in range(3)]


@pytest.mark.parametrize("memory", [False, True])
@pytest.mark.parametrize("n, k, shape, seed", CASES, ids=[f"{s}{n}x{k}-{seed}" for n, k, s, seed in CASES])
def test_replicated_front_equals_brute_force(n, k, shape, seed, memory):
    pr = random_problem(n, k, 6100 + 100 * n + 10 * k + seed, shape)
    if memory:
        pr = _with_memory(pr, np.random.default_rng(seed))
    ref = all_replicated_objectives(pr)
    res = replicated_front(pr)
    if not len(ref):
        assert res is None
        return
    got = np.array([[ev.period_s, ev.latency_s, ev.energy_j] for ev in (evaluate(pr, m) for m in res.mappings)])
    assert all(evaluate(pr, m).fits_memory for m in res.mappings)
    np.testing.assert_allclose(got, res.objectives, rtol=1e-9)  # the DP's labels are the cost model's
    assert res.exact
    assert _same_front(_exact_front(ref), got)


@pytest.mark.parametrize("seed", range(3))
def test_replicated_front_with_stage_cap_and_single_pu_replicas(seed):
    pr = random_problem(5, 3, 6600 + seed, "dag")
    for max_stages in (1, 2):
        ref = all_replicated_objectives(pr, max_stages=max_stages)
        res = replicated_front(pr, max_stages=max_stages)
        assert _same_front(_exact_front(ref), res.objectives)
    ref = all_replicated_objectives(pr, group_replicas=False)
    res = replicated_front(pr, group_replicas=False)
    assert all(len(r.pus) == 1 for m in res.mappings for st in m.stages for r in st.replicas)
    assert _same_front(_exact_front(ref), res.objectives)


def _equal_pus(times_s, n_pus=2, weights=None, memory=None) -> MappingProblem:
    n = len(times_s)
    t = np.repeat(np.asarray(times_s, dtype=float)[:, None], n_pus, axis=1)
    return MappingProblem([f"b{i}" for i in range(n)], [()] + [(i - 1,) for i in range(1, n)],
                          {(i - 1, i): 1e3 for i in range(1, n)}, [f"p{q}" for q in range(n_pus)], t,
                          np.full((n, n_pus), 2.0), np.full(n_pus, 0.1), 1.0, np.full((n_pus, n_pus), 1e-5),
                          np.full((n_pus, n_pus), 1e9), name="equal", weight_nbytes=weights, memory_bytes=memory)


def test_one_block_on_two_equal_pus_is_replicated():
    t = 8e-3
    pr = _equal_pus([t])
    res = search(pr, SearchOptions(polish=False))
    best = res.best("throughput")
    # T/2: each PU serves every other frame; latency T; energy: dynamic 1.9 W x T, idle + static over T/2
    assert best.evaluation.period_s == pytest.approx(t / 2, rel=1e-12)
    assert best.evaluation.latency_s == pytest.approx(t, rel=1e-12)
    assert best.evaluation.energy_j == pytest.approx(1.9 * t + (0.2 + 1.0) * t / 2, rel=1e-12)
    assert best.mapping.replicated and len(best.mapping.stages[0].replicas) == 1
    rep = res.front("replicated")
    assert len(rep) == 1 and rep[0].evaluation.period_s == pytest.approx(t / 2, rel=1e-12)
    assert rep[0].pareto
    assert res.info["spaces"]["replicated"]["exact"] is True and res.info["exact"] is True
    assert res.bounds.period_lb_s <= t / 2 * (1 + 1e-9)


def test_pipeline_of_replicated_and_plain_stage():
    # b0 takes 10 ms, b1 1 ms, on three equal PUs: the whole model replicated three ways has the least period
    # (11/3 ms); b0 replicated over two PUs (5 ms) with b1 on the third trades period for energy. The front is
    # the exact front of the replicated space, and every two-stage replicated point replicates the first stage.
    pr = _equal_pus([10e-3, 1e-3], n_pus=3)
    res = search(pr, SearchOptions(polish=False))
    periods = sorted(p.evaluation.period_s for p in res.front())
    assert periods[0] == pytest.approx(11e-3 / 3, rel=1e-9)  # the whole model on three replicas
    mixed = [p for p in res.front() if len(p.mapping.stages) == 2 and p.mapping.replicated]
    for p in mixed:
        assert p.mapping.stages[0].replicas and not p.mapping.stages[1].replicas
    ref = _exact_front(all_replicated_objectives(pr))
    assert _same_front(ref, np.array([p.objectives() for p in res.front()]))


def test_memory_limit_excludes_replicas():
    # Two blocks of 6 MB weights each on two equal PUs; p1 holds only 8 MB: it cannot hold the whole model, so
    # neither the whole-model replicated baseline nor any front point puts a full replica on it.
    pr = _equal_pus([4e-3, 4e-3], weights=[6e6, 6e6], memory=[np.inf, 8e6])
    res = search(pr, SearchOptions(polish=False))
    assert res.front("replicated") == []  # one able PU: no replicated baseline
    for p in res.front():
        assert p.evaluation.fits_memory
        for st in p.mapping.stages:
            for view in st.replica_stages():
                assert not (1 in view.pus and st.stop - st.start == 2)
    # without the limit the whole model replicated over both PUs has a 4 ms period; with it p1 holds one block
    # at most, so no mapping is faster than 4 ms (a pipeline b0 | b1 pays a hand-off on top)
    free = search(_equal_pus([4e-3, 4e-3]), SearchOptions(polish=False))
    assert free.best("throughput").evaluation.period_s == pytest.approx(4e-3, rel=1e-9)
    assert free.best("throughput").mapping.replicated or len(free.best("throughput").mapping.stages) == 2
    assert res.best("throughput").evaluation.period_s >= 4e-3 * (1 - 1e-9)
    ref = _exact_front(all_replicated_objectives(pr))
    assert _same_front(ref, np.array([p.objectives() for p in res.front()]))


def test_last_stage_may_start_past_the_last_allowed_cut():
    # A residual head: b2 (add + classifier) reads b0 and b1, so the cut before it holds two live tensors, and
    # only p2 (a CPU, 10x slower on b0 and b1) runs it. The least period of the space replicates b0..b1 over
    # the accelerators p0, p1 (8 ms each: 4 ms) and runs b2 alone on p2. With boundaries limited to one live
    # tensor the last stage may still start at the two-tensor cut: the front reaches the brute-force optimum.
    inf = np.inf
    t = np.array([[6e-3, 6e-3, 60e-3], [2e-3, 2e-3, 20e-3], [inf, inf, 1e-3]])
    pr = MappingProblem(["b0", "b1", "b2"], [(), (0,), (0, 1)], {(0, 1): 1e3, (0, 2): 1e3, (1, 2): 1e3},
                        ["p0", "p1", "p2"], t, np.full((3, 3), 2.0), np.full(3, 0.1), 1.0,
                        np.full((3, 3), 1e-5), np.full((3, 3), 1e9), name="head")
    best = float(all_replicated_objectives(pr)[:, 0].min())
    assert best < 5e-3  # the replicated body with a separate head; every other mapping takes 6 ms or more
    res = replicated_front(pr, max_cut_tensors=1)
    assert res.cut_limited  # the two-tensor boundary is outside the cut rule for every stage but the last
    assert float(res.objectives[:, 0].min()) == pytest.approx(best, rel=1e-9)
    for m in res.mappings:  # only the last stage starts at the two-tensor boundary
        assert all(st.start != 2 for st in m.stages[:-1])


def test_set_partitions_are_every_partition_once():
    # Bell numbers B_0..B_6 (OEIS A000110): the count of set partitions; each partition covers the items once
    from parapipe.search.partitions import set_partitions

    for k, bell in enumerate([1, 1, 2, 5, 15, 52, 203]):
        items = tuple(range(k))
        parts = list(set_partitions(items))
        assert len(parts) == bell
        assert len({frozenset(frozenset(b) for b in p) for p in parts}) == bell  # no partition twice
        for p in parts:
            assert all(b for b in p) and sorted(x for b in p for x in b) == list(items)
