"""The search's budgets are counted work, not wall-clock time: a machine that runs slower (here, a clock that runs
faster) gives the same front, and only the wall-clock safety net, which the result reports, can change it."""
from __future__ import annotations

import time

import pytest

from parapipe.search.options import SearchOptions
from parapipe.search.api import search
from parapipe.search.budget import WALL

from search_cases import random_problem


def _run(problem, options, clock_factor: float):
    """search() with ``time.monotonic`` running ``clock_factor`` times faster than real time (a machine that
    much slower, as far as any wall-clock limit can tell)."""
    real = time.monotonic
    t0 = real()
    mp = pytest.MonkeyPatch()
    mp.setattr(time, "monotonic", lambda: t0 + (real() - t0) * clock_factor)
    try:
        return search(problem, options)
    finally:
        mp.undo()


def _front(res):
    return [(p.mapping, p.objectives(), p.origin) for p in res.front()]


def _work(res):
    return {name: (rep.get("timed_out", False), rep.get("work"), rep.get("work_limit"))
            for name, rep in res.info["spaces"].items()}


@pytest.fixture(scope="module")
def problem():
    return random_problem(12, 3, seed=1)  # 36 cells: above the exact size, so the budgeted passes bound it


def test_a_clock_100x_slower_gives_the_same_front_and_the_same_counted_work(problem):
    # tight budgets so they are reached (the period pass, the PU-reuse pass); no wall-clock safety net
    opts = SearchOptions(period_time_limit_s=0.005, reuse_time_limit_s=0.0005, bound_time_limit_s=0.01,
                         wall_safety_factor=0)
    quick, slow = _run(problem, opts, 1.0), _run(problem, opts, 100.0)
    assert _front(quick) == _front(slow)
    assert _work(quick) == _work(slow)
    assert quick.bounds == slow.bounds
    period = quick.info["spaces"]["period"]
    assert period["timed_out"] and period["stopped_by"] == "work budget"
    assert period["work_limit"] == int(0.005 * 3.5e5)
    # spent past the limit, or stopped early as its linear projection passed it (Budget.over_projected)
    assert max(period["work"], period.get("projected_work", 0)) > period["work_limit"]
    assert "stopped_early" not in slow.info


def test_default_options_on_a_machine_3x_slower_give_the_same_front(problem):
    quick, slow = _run(problem, SearchOptions(), 1.0), _run(problem, SearchOptions(), 3.0)
    assert _front(quick) == _front(slow)
    assert _work(quick) == _work(slow)
    assert "stopped_early" not in slow.info


def test_the_wall_clock_safety_limit_is_reported_with_the_point_where_it_stopped(problem):
    res = _run(problem, SearchOptions(), 1e5)
    stopped = res.info["stopped_early"]
    assert stopped and all(s["reason"] == WALL for s in stopped)
    assert any(s["space"] == "period" and "block" in s["at"] for s in stopped)
