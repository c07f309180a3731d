"""The search's parts (parapipe/search/) against plain references and brute force on tiny problems.

* :func:`pareto_mask` against an O(m²) numpy reference (apache/tvm cascader ``pareto.py`` test shape);
* the DP front against the front of every mapping of the space (every cut × every PU group per stage, stage
  schedules from the same greedy list scheduler), in both spaces (disjoint PU groups; PUs reused);
* CP-SAT stage schedules against every assignment × every topological order.

The search driver with its defaults is checked in test_search_driver.py, the bounds in test_search_bounds.py.
"""
from __future__ import annotations

import itertools
from typing import List, Tuple

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import StageMapping
from parapipe.cost.schedule import evaluate_stage
from parapipe.cost.problem import MappingProblem
from parapipe.search.bounds import lower_bounds
from parapipe.search.cpsat import TIME_UNIT_S, solve_stage
from parapipe.search.dp import DPOptions, dp_front
from parapipe.search.listsched import schedule_ranges
from parapipe.search.pareto import dominates, pareto_mask
from search_cases import all_mapping_objectives, greedy_assignment, pu_groups, random_problem, sorted_rows


# (n blocks, k PUs, shape). With reuse the brute force grows as (2^k - 1)^stages: 3 PUs only up to 5 blocks.
# Disjoint groups allow at most k stages, so 7 blocks x 3 PUs stays small there.
REUSE_SIZES = [(7, 2, "chain"), (7, 2, "diamond"), (7, 2, "dag"), (6, 2, "dag"), (5, 3, "chain"),
               (5, 3, "diamond"), (5, 3, "dag"), (4, 3, "dag")]
DISJOINT_SIZES = [(7, 3, "chain"), (7, 3, "diamond"), (7, 3, "dag"), (6, 3, "dag"), (5, 3, "diamond"),
                  (7, 2, "dag"), (6, 2, "diamond")]
CASES = ([(n, k, shape, seed, True) for (n, k, shape) in REUSE_SIZES for seed in range(4)]
         + [(n, k, shape, seed, False) for (n, k, shape) in DISJOINT_SIZES for seed in range(8)])


# ----------------------------------------------------------------------------------------------------- Pareto

def pareto_reference(points: np.ndarray) -> np.ndarray:
    """O(m²) reference: keep a row iff no row dominates it and no earlier row equals it."""
    m = len(points)
    le = np.all(points[:, None, :] <= points[None, :, :], axis=2)  # le[j, i]: row j <= row i everywhere
    lt = np.any(points[:, None, :] < points[None, :, :], axis=2)
    dominated = (le & lt).any(axis=0)
    eq = le & le.T
    earlier_equal = (np.tril(eq, k=-1)).any(axis=1)  # eq[i, j] with j < i
    assert earlier_equal.shape == (m,)
    return ~dominated & ~earlier_equal


@pytest.mark.parametrize("seed", range(60))
def test_pareto_mask_matches_reference(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(0, 400))  # beyond the 128-row chunk of the implementation
    d = int(rng.integers(1, 5))
    hi = int(rng.integers(2, 8))  # few distinct values: many ties and duplicate rows
    pts = rng.integers(0, hi, size=(m, d)).astype(float)
    got = pareto_mask(pts)
    assert got.dtype == bool and got.shape == (m,)
    np.testing.assert_array_equal(got, pareto_reference(pts))
    for i in np.flatnonzero(got):
        assert not any(dominates(pts[j], pts[i]) for j in range(m))


def test_pareto_mask_examples():
    assert pareto_mask(np.zeros((0, 3))).tolist() == []
    assert pareto_mask(np.array([[1.0, 2.0], [2.0, 1.0], [2.0, 2.0], [1.0, 2.0]])).tolist() == [
        True, True, False, False]
    assert pareto_mask(np.array([[3.0], [1.0], [1.0], [2.0]])).tolist() == [False, True, False, False]
    assert dominates([1, 2], [1, 3]) and not dominates([1, 2], [1, 2]) and not dominates([1, 3], [2, 2])


# --------------------------------------------------------------------------------------- DP vs brute force

@pytest.mark.parametrize("n, k, shape, seed, reuse", CASES,
                         ids=[f"{'reuse' if r else 'disjoint'}-{s}{n}x{k}-{seed}"
                              for n, k, s, seed, r in CASES])
def test_dp_front_equals_brute_force(n, k, shape, seed, reuse):
    pr = random_problem(n, k, 100 * n + 10 * k + seed, shape)
    res = dp_front(pr, DPOptions(reuse_pus=reuse))
    everything = all_mapping_objectives(pr, reuse)
    brute = everything[pareto_mask(everything)]
    assert res.objectives.shape == brute.shape, (res.objectives, brute)
    np.testing.assert_allclose(sorted_rows(res.objectives), sorted_rows(brute), rtol=1e-9, atol=0)
    # Every DP mapping, evaluated from scratch, has the DP's objectives and respects the space.
    assert len(res.mappings) == len(res.objectives)
    for mapping, obj in zip(res.mappings, res.objectives):
        ev = evaluate(pr, mapping)
        np.testing.assert_allclose([ev.period_s, ev.latency_s, ev.energy_j], obj, rtol=1e-9, atol=0)
        pus = [p for st in mapping.stages for p in st.pus]
        if not reuse:
            assert len(pus) == len(set(pus)), mapping
    # Lower bounds hold for every mapping of the larger (reuse) space.
    b = lower_bounds(pr)
    assert b.period_lb_s > 0 and b.latency_lb_s > 0
    assert (everything[:, 0] >= b.period_lb_s * (1 - 1e-9)).all()
    assert (everything[:, 1] >= b.latency_lb_s * (1 - 1e-9)).all()


def test_reuse_space_contains_disjoint_space():
    # The reuse front weakly dominates every disjoint-front point (the space is a superset), and on a chain
    # whose first and last blocks love p0 and middle loves p1, reusing p0 (p0 | p1 | p0) beats disjoint
    # groups.
    inf = np.inf
    t = np.array([[1, inf], [inf, 1], [1, inf]]) * 1e-3
    pr = MappingProblem(["a", "b", "c"], [(), (0,), (1,)], {(0, 1): 1.0, (1, 2): 1.0}, ["p0", "p1"], t,
                        np.full((3, 2), 2.0), [0.1, 0.1], 1.0, np.full((2, 2), 1e-6), np.full((2, 2), 1e9))
    disjoint = dp_front(pr, DPOptions(reuse_pus=False)).objectives
    reuse = dp_front(pr, DPOptions(reuse_pus=True))
    assert len(reuse.objectives) >= 1
    for d in disjoint:
        assert any(np.all(r <= d * (1 + 1e-12)) for r in reuse.objectives)
    # Disjoint groups: the only feasible mapping is one stage on {p0, p1} (period ~3 ms); reusing p0 gives
    # p0 | p1 | p0 with busy p0 ~2 ms, p1 ~1 ms: period ~2 ms.
    assert len(disjoint) == 1 and disjoint[0][0] == pytest.approx(3e-3, rel=1e-3)
    best = int(np.argmin(reuse.objectives[:, 0]))
    assert reuse.objectives[best][0] == pytest.approx(2e-3, rel=1e-3)
    assert [st.pus for st in reuse.mappings[best].stages] == [(0,), (1,), (0,)]


@pytest.mark.parametrize("seed", range(6))
def test_dp_max_stages_equals_brute_force(seed):
    pr = random_problem(6, 2, 7000 + seed, "dag")
    for reuse in (False, True):
        res = dp_front(pr, DPOptions(reuse_pus=reuse, max_stages=2))
        everything = all_mapping_objectives(pr, reuse, max_stages=2)
        brute = everything[pareto_mask(everything)]
        np.testing.assert_allclose(sorted_rows(res.objectives), sorted_rows(brute), rtol=1e-9, atol=0)
        assert all(len(m.stages) <= 2 for m in res.mappings)


@pytest.mark.parametrize("seed", range(6))
def test_list_schedule_equals_its_definition(seed):
    # The incremental list scheduler (one pass serves every stop) against the definition, range by range.
    pr = random_problem(6, 3, 900 + seed, "dag")
    for group in pu_groups(pr.n_pus):
        for start in range(pr.n_blocks):
            rs = schedule_ranges(pr, start, group)
            for stop in range(start + 1, pr.n_blocks + 1):
                got = tuple(rs.assignment[:stop - start]) if len(rs.assignment) >= stop - start else None
                assert got == greedy_assignment(pr, start, stop, group), (group, start, stop)


# ----------------------------------------------------------------------------------- CP-SAT vs brute force

def _topological_orders(pr: MappingProblem, blocks: List[int]):
    inside = set(blocks)
    for perm in itertools.permutations(blocks):
        pos = {v: i for i, v in enumerate(perm)}
        if all(pos[u] < pos[v] for v in perm for u in pr.preds[v] if u in inside):
            yield perm


def brute_force_makespan(pr: MappingProblem, start: int, stop: int, group: Tuple[int, ...]) -> float:
    """Best list-schedule makespan over every assignment to ``group`` and every topological order.

    Any schedule's per-PU sequences, merged by start time and list-scheduled, start no block later, so this
    minimum is the optimal makespan.
    """
    blocks = list(range(start, stop))
    producers = {u: group[0] for u in range(start)}
    best = np.inf
    orders = list(_topological_orders(pr, blocks))
    for assign in itertools.product(group, repeat=len(blocks)):
        if not all(np.isfinite(pr.time_s[v, p]) for v, p in zip(blocks, assign)):
            continue
        for order in orders:
            res = evaluate_stage(pr, StageMapping(start, stop, group, assign, order), producers)
            best = min(best, res.makespan_s)
    return best


CPSAT_CASES = [(n, shape, seed, start, stop) for n, shape in [(5, "dag"), (5, "diamond"), (6, "dag")]
               for seed in range(4) for start, stop in [(0, 5), (1, 5)] if stop <= n]


@pytest.mark.parametrize("n, shape, seed, start, stop", CPSAT_CASES,
                         ids=[f"{s}{n}-{seed}-{a}:{b}" for n, s, seed, a, b in CPSAT_CASES])
def test_solve_stage_is_optimal(n, shape, seed, start, stop):
    pr = random_problem(n, 2, 500 + seed, shape)
    group = (0, 1)
    greedy = schedule_ranges(pr, start, group, stop)
    if len(greedy.assignment) < stop - start:
        pytest.fail("generator made a block no PU can run")  # random_problem guarantees one PU per block
    sol = solve_stage(pr, start, stop, group, hint=greedy.assignment, time_limit_s=20.0, seed=0)
    assert sol is not None and sol.optimal
    # Integer ticks of TIME_UNIT_S: each duration/transfer rounds by at most half a tick.
    tol = TIME_UNIT_S * 4 * (stop - start)
    assert sol.makespan_s <= greedy.makespan_s[-1] + tol
    assert sol.makespan_s == pytest.approx(brute_force_makespan(pr, start, stop, group), abs=tol)
    # Its assignment and order, evaluated by the cost model, achieve that makespan.
    assert sorted(sol.order) == list(range(start, stop))
    res = evaluate_stage(pr, StageMapping(start, stop, group, sol.assignment, sol.order),
                         {u: 0 for u in range(start)})
    assert res.makespan_s == pytest.approx(sol.makespan_s, abs=tol)


def test_solve_stage_infeasible_group_returns_none():
    pr = random_problem(4, 2, 3, "chain")
    pr.time_s[2, 1] = np.inf
    assert solve_stage(pr, 0, 4, (1,), time_limit_s=5.0) is None


def test_missing_single_pu_baselines_are_named():
    # a PU that cannot run some block has no single-PU baseline: pareto.json says which and why
    from parapipe.search.api import search

    pr = random_problem(6, 3, seed=3)
    res = search(pr)
    singles = {p.id for p in res.points if p.strategy == "single"}
    missing = res.info.get("baselines_missing", {})
    for p, name in enumerate(pr.pu_names):
        bad = [pr.block_names[v] for v in range(pr.n_blocks) if not np.isfinite(pr.time_s[v, p])]
        assert (f"single-{name}" in singles) == (not bad)
        assert (f"single-{name}" in missing) == bool(bad)
        if bad:
            assert repr(bad[0]) in missing[f"single-{name}"]
    assert missing  # seed 3 leaves at least one PU short of a block
