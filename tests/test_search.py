"""The search (parapipe/search/) against plain references and brute force on tiny problems, then on the zoo.

* :func:`pareto_mask` against an O(m²) numpy reference (apache/tvm cascader ``pareto.py`` test shape);
* the DP front against the front of every mapping of the space (every cut × every PU group per stage, stage
  schedules from the same greedy list scheduler), in both spaces (disjoint PU groups; PUs reused);
* CP-SAT stage schedules against every assignment × every topological order;
* lower bounds against every mapping;
* the search driver on the nine registry models and two SoC profiles (slow).
"""
from __future__ import annotations

import itertools
from functools import lru_cache
from typing import List, Optional, Tuple

import numpy as np
import pytest

from parapipe.cost.evaluate import Mapping, StageMapping, evaluate, evaluate_stage
from parapipe.cost.problem import MappingProblem
from parapipe.search.api import SearchOptions, search
from parapipe.search.bounds import lower_bounds
from parapipe.search.cpsat import TIME_UNIT_S, solve_stage
from parapipe.search.dp import DPOptions, all_groups, dp_front
from parapipe.search.listsched import schedule_ranges
from parapipe.search.pareto import dominates, pareto_mask

ZOO_MODELS = ["alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
              "squeezenet", "vgg19", "zfnet512"]
ZOO_SOCS = ["amlogic_a311d", "black_sesame_a1000"]


# ---------------------------------------------------------------------------------------------- tiny problems

def _preds(shape: str, n: int, rng: np.random.Generator) -> List[Tuple[int, ...]]:
    if shape == "chain":
        return [()] + [(j - 1,) for j in range(1, n)]
    if shape == "diamond":  # 0 -> {1, 2} -> 3 -> {4, 5} -> 6 ...: fork/join repeated
        preds: List[Tuple[int, ...]] = [()]
        for j in range(1, n):
            pos = j % 3
            preds.append((j - pos,) if pos else (j - 2, j - 1))
        return preds
    # "dag": each block reads 1-3 random earlier blocks (multi-branch, skips, several sinks possible).
    preds = [()]
    for j in range(1, n):
        m = int(rng.integers(1, min(3, j) + 1))
        preds.append(tuple(sorted(int(u) for u in rng.choice(j, size=m, replace=False))))
    return preds


def random_problem(n: int, k: int, seed: int, shape: str = "dag") -> MappingProblem:
    """Random tiny problem: times 1-10 ms (15 % of (block, PU) pairs unsupported), 1 kB-1 MB edges,
    transfers 0.1-1 ms + 0.1-1 GB/s, active power 1-5 W, idle 0.1-0.5 W, static 1 W."""
    rng = np.random.default_rng(seed)
    preds = _preds(shape, n, rng)
    t = rng.uniform(1e-3, 10e-3, (n, k))
    t[rng.random((n, k)) < 0.15] = np.inf
    for j in range(n):
        if not np.isfinite(t[j]).any():
            t[j, rng.integers(k)] = 5e-3
    edges = {(i, j): float(rng.integers(1_000, 1_000_000)) for j in range(n) for i in preds[j]}
    return MappingProblem([f"b{i}" for i in range(n)], preds, edges, [f"p{i}" for i in range(k)], t,
                          rng.uniform(1, 5, (n, k)), rng.uniform(0.1, 0.5, k), 1.0,
                          rng.uniform(1e-4, 1e-3, (k, k)), rng.uniform(1e8, 1e9, (k, k)),
                          name=f"{shape}{seed}")


def all_mapping_objectives(pr: MappingProblem, reuse: bool, max_stages: Optional[int] = None) -> np.ndarray:
    """(period, latency, energy) of every mapping of the DP's space, by enumeration and :func:`evaluate`.

    Every composition of the blocks into contiguous stages, every PU group for every stage (pairwise disjoint
    unless ``reuse``); each stage's assignment is the greedy list schedule of exactly that range on that
    group.
    """
    n = pr.n_blocks
    groups = all_groups(pr.n_pus)

    @lru_cache(maxsize=None)
    def stage(a: int, b: int, gi: int) -> Optional[StageMapping]:
        rs = schedule_ranges(pr, a, groups[gi], b)
        if len(rs.assignment) < b - a:
            return None  # some block of the range runs on no PU of the group
        return StageMapping(a, b, groups[gi], tuple(rs.assignment))

    out = []

    def extend(a: int, stages: list, used: frozenset) -> None:
        if a == n:
            out.append(evaluate(pr, Mapping(tuple(stages))))
            return
        if max_stages is not None and len(stages) == max_stages:
            return
        for b in range(a + 1, n + 1):
            for gi, g in enumerate(groups):
                if not reuse and used & set(g):
                    continue
                st = stage(a, b, gi)
                if st is not None:
                    extend(b, stages + [st], used | set(g))

    extend(0, [], frozenset())
    return np.array([(ev.period_s, ev.latency_s, ev.energy_j) for ev in out])


def sorted_rows(a: np.ndarray) -> np.ndarray:
    return a[np.lexsort(a.T[::-1])]


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


# ---------------------------------------------------------------------------------------- search driver

def _check_search_result(result) -> None:
    front = result.front()
    objs = np.array([p.objectives() for p in front])
    assert len(front) >= 2
    assert pareto_mask(objs).all(), "the parapipe front holds a dominated point"
    assert all(p.pareto for p in front)
    baselines = [p for p in result.points if p.strategy != "parapipe"]
    strategies = {p.strategy for p in baselines}
    assert baselines
    if np.isfinite(result.problem.time_s).all(axis=0).any():  # some PU runs every block
        assert {"single", "pipeline"} <= strategies
    for b in baselines:
        bo = np.array(b.objectives())
        assert any(np.all(f <= bo * (1 + 1e-12)) for f in objs), f"baseline {b.id} {bo} beats the front"
    bounds = result.bounds
    for p in result.points:
        assert p.evaluation.period_s >= bounds.period_lb_s * (1 - 1e-9)
        assert p.evaluation.latency_s >= bounds.latency_lb_s * (1 - 1e-9)
        ev = evaluate(result.problem, p.mapping)
        assert (ev.period_s, ev.latency_s, ev.energy_j) == pytest.approx(p.objectives(), rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_search_on_tiny_problems(seed):
    pr = random_problem(6, 3, 900 + seed, "dag")
    result = search(pr, SearchOptions(time_limit_s=5))
    assert result.stats["exact"] == 1.0
    _check_search_result(result)
    # Exact space, then CP-SAT polish and baselines added: the front weakly dominates the disjoint DP front.
    dp = dp_front(pr, DPOptions()).objectives
    objs = np.array([p.objectives() for p in result.front()])
    for d in dp:
        assert any(np.all(f <= d * (1 + 1e-12)) for f in objs)


def test_search_is_deterministic_with_cpsat_polish():
    pr = random_problem(6, 3, 31, "diamond")
    runs = [search(pr, SearchOptions(time_limit_s=30, seed=3, cpsat_stage_limit_s=10)) for _ in range(2)]
    assert any(k.startswith("cp-sat") for p in runs[0].points for k in p.stage_schedules)
    a, b = (np.array([p.objectives() for p in r.points]) for r in runs)
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("soc", ZOO_SOCS)
@pytest.mark.parametrize("model", ZOO_MODELS)
def test_search_zoo_front_beats_baselines(model, soc):
    from parapipe.workflow import prepare

    prep = prepare(model, soc)
    result = search(prep.problem, SearchOptions(time_limit_s=2))
    _check_search_result(result)


def test_zoo_registry_names():
    from parapipe.graph.zoo import list_models

    # The nine onnx-wheel models this file searches are in the registry (which may list more).
    assert [m.name for m in list_models() if m.name in ZOO_MODELS] == ZOO_MODELS


def test_search_same_seed_same_front_squeezenet():
    from parapipe.workflow import prepare

    prep = prepare("squeezenet", "black_sesame_a1000")
    runs = [search(prep.problem, SearchOptions(time_limit_s=2, seed=0)) for _ in range(2)]
    a, b = (np.array([p.objectives() for p in r.front()]) for r in runs)
    assert len(a) >= 2
    np.testing.assert_array_equal(a, b)
    assert [p.mapping for p in runs[0].front()] == [p.mapping for p in runs[1].front()]
