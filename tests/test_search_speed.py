"""The search's shortcuts give the results of the work they skip: the pipeline pass taken from the disjoint pass,
evaluations memoised per mapping, the least-period pass stopped once its projected work passes its budget."""
from __future__ import annotations

from dataclasses import replace

import pytest

import parapipe.search.api as api
from parapipe.search.options import SearchOptions
from parapipe.search.api import search
from parapipe.search.budget import WORK, Budget
from parapipe.search.dp import DPOptions, dp_front
from parapipe.search.passes import run_passes
from parapipe.search.transitions import StageCatalog

from search_cases import random_problem


def test_a_projected_budget_stops_once_the_linear_projection_passes_the_limit():
    b = Budget(100.0)
    b.spend(20.0)
    assert b.over_projected(1, 4) is None and b.projected is None  # 20 x 4 = 80: within
    b.spend(20.0)
    assert b.over_projected(2, 4) is None  # 40 x 2 = 80
    b.spend(11.0)
    assert b.over_projected(2, 4) == WORK and b.projected == pytest.approx(102.0)
    assert b.to_json() == {"work": 51, "work_limit": 100, "projected_work": 102}
    assert Budget(None).over_projected(1, 10) is None


@pytest.mark.parametrize("k, seed", [(1, 0), (2, 3), (3, 1)])
def test_the_pipeline_front_is_the_single_pu_dp_front_whether_or_not_it_is_taken_from_the_disjoint_pass(k, seed):
    pr = random_problem(7, k, seed=seed)
    opts = SearchOptions()
    cat = StageCatalog(pr)
    found, reports, _ = run_passes(pr, opts, cat)
    disjoint = dp_front(pr, DPOptions(max_stages=opts.max_stages), catalog=cat)
    direct = dp_front(pr, DPOptions(max_stages=opts.max_stages, kinds=("single-pu",)), catalog=StageCatalog(pr))
    assert found["pipeline"] == direct.mappings
    assert set(disjoint.kinds_used) <= {"single-pu", "list-scheduled"}
    if k == 1:  # no PU group: only single-PU transitions, so the disjoint pass's result is reused
        assert disjoint.kinds_used == ("single-pu",) and reports["pipeline"].seconds == 0.0


def test_the_search_evaluates_each_mapping_once(monkeypatch):
    pr = random_problem(7, 3, seed=2)
    seen = []
    real = api.evaluate

    def counting(problem, mapping, terms=None):
        seen.append(mapping)
        return real(problem, mapping, terms)

    monkeypatch.setattr(api, "evaluate", counting)
    res = search(pr, SearchOptions(polish=False))
    assert seen and len(seen) == len(set(seen))
    monkeypatch.undo()
    again = search(pr, SearchOptions(polish=False))
    assert [(p.mapping, p.objectives()) for p in res.points] == [(p.mapping, p.objectives()) for p in again.points]


def test_the_period_pass_reports_a_projected_stop():
    pr = random_problem(12, 3, seed=1)
    res = search(pr, replace(SearchOptions(), period_time_limit_s=0.005))
    period = res.info["spaces"]["period"]
    if period.get("timed_out"):
        assert max(period["work"], period.get("projected_work", 0)) > period["work_limit"]
        assert "block" in period["skipped"]
