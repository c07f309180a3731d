"""The search over mappings × operating points against brute force on tiny tables, and ``--operating-points max``.

The oracle enumerates independently of the search (tests/search_cases.py): every composition into contiguous
stages, every PU group per stage (disjoint, or reused), every replicated stage, and per stage (and replica) every
combination of its PUs' operating points, each stage list-scheduled greedily on the problem at those points
(:meth:`MappingProblem.at_operating_points`), each mapping evaluated with :func:`parapipe.cost.evaluate.evaluate`
(which adds the switching time of a PU serving stages at different points).
"""
from __future__ import annotations

from functools import lru_cache
from itertools import combinations, product

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping, ReplicaMapping, StageMapping
from parapipe.cost.problem import MappingProblem, PUOperatingPoints
from parapipe.search.options import SearchOptions
from parapipe.search.api import search
from parapipe.search.dvfs import schedutil_mapping, thin_points
from parapipe.search.pareto import pareto_mask
from search_cases import greedy_assignment, pu_groups, random_problem, sorted_rows, uncovered


def with_points(pr: MappingProblem, n_ops, seed: int, transition_s: float = 2e-4) -> MappingProblem:
    """``pr`` with ``n_ops[p]`` operating points on PU ``p``: frequencies f_max·(0.5 .. 1), a block's time
    ``t·(c/f + (1 - c))`` with a random compute share ``c``, dynamic power ∝ V²f with V from 0.7 to 1."""
    rng = np.random.default_rng(seed)
    tables = []
    for p, m in enumerate(n_ops):
        if m == 1:
            tables.append(None)
            continue
        rel = np.linspace(0.5, 1.0, m)
        volt = np.linspace(0.7, 1.0, m)
        c = rng.uniform(0.3, 1.0, pr.n_blocks)[:, None]
        t = pr.time_s[:, p:p + 1] * (c / rel[None, :] + (1 - c))
        dyn = (pr.active_power_w[:, p:p + 1] - pr.idle_power_w[p]) * (volt ** 2 * rel)[None, :]
        t[:, -1] = pr.time_s[:, p]
        tables.append(PUOperatingPoints(tuple(1e9 * rel), t, dyn + pr.idle_power_w[p], transition_s))
    return MappingProblem(pr.block_names, pr.preds, pr.edge_nbytes, pr.pu_names, pr.time_s, pr.active_power_w,
                          pr.idle_power_w, pr.static_power_w, pr.alpha_s, pr.beta_bytes_per_s, name=pr.name,
                          operating_points=tables)


def exhaustive(pr: MappingProblem, reuse: bool, replicate: bool, multi: bool = True) -> np.ndarray:
    """(period, latency, energy) of every mapping × operating points of the space (module docstring)."""
    n = pr.n_blocks
    groups = [g for g in pu_groups(pr.n_pus) if multi or len(g) == 1]

    @lru_cache(maxsize=None)
    def view(a, b, g, ops):
        at = pr.at_operating_points(tuple(zip(g, ops)))
        asg = greedy_assignment(at, a, b, g)
        if asg is None or len(set(asg)) < len(g):  # a PU of the group left idle: the subgroup's mapping
            return None
        return g, asg, tuple(ops)

    def views(a, b, g):
        out = []
        for ops in product(*(range(pr.n_operating_points(p)) for p in g)):
            v = view(a, b, g, ops)
            if v is not None:
                out.append(v)
        return out

    options = [(g,) for g in groups]
    if replicate:
        for size in range(2, pr.n_pus + 1):
            for combo in combinations(groups, size):
                pus = [p for g in combo for p in g]
                if len(pus) == len(set(pus)):
                    options.append(combo)
    out = []

    def extend(a, stages, used):
        if a == n:
            ev = evaluate(pr, Mapping(tuple(stages)))
            out.append((ev.period_s, ev.latency_s, ev.energy_j))
            return
        for b in range(a + 1, n + 1):
            for combo in options:
                pus = frozenset(p for g in combo for p in g)
                if not reuse and used & pus:
                    continue
                for vs in product(*(views(a, b, g) for g in combo)):
                    (g0, a0, o0), rest = vs[0], vs[1:]
                    st = StageMapping(a, b, g0, a0, None, tuple(ReplicaMapping(g, asg, None, o) for g, asg, o in rest),
                                      o0)
                    extend(b, stages + [st], used | pus)

    extend(0, [], frozenset())
    return np.array(out).reshape(-1, 3)


def _front(result) -> np.ndarray:
    return np.array([p.objectives() for p in result.front()])


def _canonical(a: np.ndarray) -> np.ndarray:
    """Objectives to 10 significant digits, as the search compares them (equal to 10 digits: a tie)."""
    return np.vectorize(lambda x: float(f"{x:.10g}"))(a).reshape(-1, 3)


def _same_front(got: np.ndarray, everything: np.ndarray) -> None:
    # the search's front covers every mapping of the space, and equals the space's front
    assert not len(uncovered(everything, got)), uncovered(everything, got)[:3]
    everything = _canonical(everything)
    ref = np.unique(everything[pareto_mask(everything)], axis=0)
    got_u = np.unique(_canonical(got), axis=0)
    np.testing.assert_allclose(sorted_rows(got_u), sorted_rows(ref), rtol=1e-9, atol=0)


# (blocks, PUs, points per PU, shape)
CASES = [(3, 2, (3, 2), "chain", 0), (4, 2, (2, 3), "dag", 1), (3, 3, (2, 2, 1), "dag", 2),
         (4, 2, (3, 3), "diamond", 3)]


@pytest.mark.parametrize("n, k, ops, shape, seed", CASES, ids=[f"{s}{n}x{k}-{seed}" for n, k, _, s, seed in CASES])
def test_default_front_is_exhaustive_front_over_operating_points(n, k, ops, shape, seed):
    pr = with_points(random_problem(n, k, 9100 + seed, shape), ops, seed)
    res = search(pr, SearchOptions(polish=False))  # CP-SAT schedules lie outside the list-scheduled spaces
    assert res.info["exact"] is True and res.info["operating_points"]["all_points"] is True
    assert res.info["operating_points"]["where"] == "dp"
    got = _front(res)
    for p in res.front():  # the objectives are the cost model's (switching included)
        ev = evaluate(pr, p.mapping)
        assert (ev.period_s, ev.latency_s, ev.energy_j) == pytest.approx(p.objectives(), rel=1e-12)
    spaces = [exhaustive(pr, reuse=False, replicate=False, multi=False),  # plain pipelines
              exhaustive(pr, reuse=True, replicate=False),  # PU reuse, operator-parallel stages
              exhaustive(pr, reuse=False, replicate=True)]  # replicated stages
    everything = np.concatenate(spaces)
    _same_front(got, everything)
    assert any(p.mapping.has_ops for p in res.front()), "no front point uses a lower operating point"


def test_default_front_with_cpsat_covers_exhaustive_front():
    pr = with_points(random_problem(4, 2, 9200, "dag"), (3, 2), 5)
    res = search(pr)  # the CLI's defaults
    everything = np.concatenate([exhaustive(pr, True, False), exhaustive(pr, False, True)])
    assert not len(uncovered(everything, _front(res)))


def test_switching_time_counts_in_the_reuse_front():
    # p0 serves two stages; with a large switching time no front point switches p0 between points
    pr = with_points(random_problem(4, 2, 9300, "chain"), (3, 3), 7, transition_s=1.0)
    res = search(pr, SearchOptions(polish=False))
    for p in res.front():
        ev = evaluate(pr, p.mapping)
        assert ev.period_s < 1.0
    everything = exhaustive(pr, reuse=True, replicate=False)
    _same_front(_front(res), np.concatenate([everything, exhaustive(pr, False, True)]))


def test_max_points_give_the_front_without_operating_points():
    base = random_problem(5, 3, 9400, "dag")
    pr = with_points(base, (3, 2, 3), 9)
    plain = search(base, SearchOptions(polish=False))
    top = search(pr, SearchOptions(polish=False, operating_points="max"))
    assert [(p.id, p.strategy, p.mapping, p.objectives()) for p in top.points] == [
        (p.id, p.strategy, p.mapping, p.objectives()) for p in plain.points]
    assert top.info["operating_points"]["where"] == "max"


def test_thin_points_and_bad_option():
    assert thin_points(10, 3) == (0, 4, 9) and thin_points(11, 2) == (0, 10) and thin_points(3, 5) == (0, 1, 2)
    with pytest.raises(ValueError, match="--operating-points"):
        SearchOptions(operating_points="fast")


def test_schedutil_picks_lowest_frequency_above_125_percent_of_utilisation():
    # one stage per PU; p1 computes a quarter of the period: schedutil wants 1.25 * 0.25 * f_max = 0.3125 f_max
    t = np.array([[4e-3, np.inf], [np.inf, 1e-3]])
    base = MappingProblem(["a", "b"], [(), (0,)], {(0, 1): 0.0}, ["p0", "p1"], t, np.full((2, 2), 2.0), [0.1, 0.1],
                          1.0, np.full((2, 2), 1e-6), np.full((2, 2), 1e9))
    freqs = (0.25e9, 0.3e9, 0.4e9, 1e9)
    tables = [PUOperatingPoints(freqs, np.repeat(t[:, :1], 4, axis=1) * (1e9 / np.array(freqs))[None, :],
                                np.full((2, 4), 2.0)),
              PUOperatingPoints(freqs, np.repeat(t[:, 1:], 4, axis=1) * (1e9 / np.array(freqs))[None, :],
                                np.full((2, 4), 2.0))]
    pr = MappingProblem(base.block_names, base.preds, base.edge_nbytes, base.pu_names, t, base.active_power_w,
                        base.idle_power_w, 1.0, base.alpha_s, base.beta_bytes_per_s, operating_points=tables)
    m = Mapping((StageMapping(0, 1, (0,), (0,)), StageMapping(1, 2, (1,), (1,))))
    got, picked = schedutil_mapping(pr, m)
    assert picked == {"p0": 1e9, "p1": 0.4e9}
    assert got.stages[0].ops is None and got.stages[1].ops == (2,)
