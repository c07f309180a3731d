"""The CP-SAT polish schedule of the search driver (:func:`parapipe.search.api._polish_candidates`): candidates
most promising first, and no new solve after ``polish_patience`` solves (or ``polish_patience_s`` deterministic
seconds) in a row that put nothing on the front. A stand-in polisher and evaluator make each solve's outcome a
given, so the schedule itself is what is checked (the real polish is covered by tests/test_search_driver.py)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from parapipe.search.options import OBJECTIVES, SearchOptions
from parapipe.search.api import SearchPoint, _polish_candidates, search
from search_cases import random_problem


class _StandIn:
    """Polisher stand-in: "solving" mapping ``m`` costs ``cost_s[m]`` and yields ``m + "*"``; with
    ``solve=False`` an unsolved mapping comes back as it is."""

    def __init__(self, cost_s):
        self.cost_s = cost_s
        self.n_solves = 0
        self.spent_s = 0.0
        self.solved = []
        self.patience_stop = False

    def polish(self, mapping, solve=True):
        if mapping + "*" in self.solved:
            return mapping + "*", ["cp-sat optimal"]
        if not solve:
            return mapping, ["greedy"]
        self.n_solves += 1
        self.spent_s += self.cost_s.get(mapping, 0.01)
        self.solved.append(mapping + "*")
        return mapping + "*", ["cp-sat optimal"]


def _ev(vec):
    return SimpleNamespace(period_s=vec[0], latency_s=vec[1], energy_j=vec[2], fits_memory=True)


def _run(objs, polished, patience, patience_s=0.0, cost_s=None):
    """``objs[name]``: a candidate's objectives; ``polished[name]``: its polished version's (else the same)."""
    cands = [SearchPoint("", "parapipe", name, _ev(v), ["greedy"], origin="disjoint") for name, v in objs.items()]
    table = {**objs, **{n + "*": polished.get(n, v) for n, v in objs.items()}}
    pol = _StandIn(cost_s or {})
    out = _polish_candidates(pol, cands, list(range(len(cands))), OBJECTIVES, patience, patience_s,
                             lambda m: _ev(table[m]), lambda p: p.evaluation.period_s)
    return pol, out, cands


def test_polish_solves_front_candidates_first_and_stops_after_patience():
    # c and d lie on the front of the candidates, a and b are dominated (a by 50 %, b by 5 %): with nothing to
    # gain from any solve and a patience of 2, only the two front candidates are solved.
    objs = {"a": (3.0, 3.0, 3.0), "b": (2.1, 2.1, 2.1), "c": (1.0, 2.0, 2.0), "d": (2.0, 1.0, 1.0)}
    pol, out, _ = _run(objs, {}, patience=2)
    assert pol.solved == ["c*", "d*"] and pol.patience_stop
    assert sorted(out) == [0, 1, 2, 3]  # every candidate still gets its (possibly unpolished) version
    # without a patience, every candidate is solved, front ones first, then by their margin (b before a)
    pol, _, _ = _run(objs, {}, patience=0)
    assert pol.solved == ["c*", "d*", "b*", "a*"] and not pol.patience_stop


def test_polish_helpful_solve_resets_patience():
    # the second solve (d) reaches a new front point: the patience counts again from there
    objs = {"a": (3.0, 3.0, 3.0), "b": (2.1, 2.1, 2.1), "c": (1.0, 2.0, 2.0), "d": (2.0, 1.0, 1.0)}
    pol, out, cands = _run(objs, {"d": (1.5, 0.5, 1.0)}, patience=2)
    assert pol.solved == ["c*", "d*", "b*", "a*"]
    assert out[3].mapping == "d*" and out[3].origin == "cp-sat"
    # a solve that only lowers the least period (the bound's reference) helps too
    pol, _, _ = _run(objs, {"c": (0.9, 5.0, 5.0)}, patience=1)
    assert pol.solved == ["c*", "d*"]


def test_polish_patience_in_deterministic_seconds():
    objs = {"a": (3.0, 3.0, 3.0), "b": (2.1, 2.1, 2.1), "c": (1.0, 2.0, 2.0), "d": (2.0, 1.0, 1.0)}
    pol, _, _ = _run(objs, {}, patience=0, patience_s=1.0, cost_s={"c": 0.6, "d": 0.6, "b": 0.1})
    assert pol.solved == ["c*", "d*"] and pol.patience_stop and np.isclose(pol.spent_s, 1.2)


def test_search_records_polish_solves():
    pr = random_problem(6, 3, 31, "diamond")
    res = search(pr, SearchOptions(seed=3))
    cp = res.info["cpsat"]
    assert cp["solves"] >= 1 and cp["patience"] == 0  # up to exact_max_cells every candidate is polished
    assert isinstance(cp["patience_stopped"], bool)
