"""Mappings read off the period relaxation (parapipe/search/relaxed_sequences.py) against brute force.

* on chains, where the relaxation of single-PU stages is exact, the least sequence is the fastest pure pipeline
  with PU reuse (every PU per block enumerated, :func:`search_cases.all_pipeline_objectives`), and its mapping
  evaluates to it;
* on DAGs and under pipeline terms, every mapping returned evaluates to at least its relaxed period (the
  relaxation charges no more than a mapping costs), is below the limit, has one PU per stage and respects
  ``max_stages``;
* in the search: the zoo's ResNet-50 on the A311D profile, where the DP passes miss the long NPU <-> CPU
  pipelines, gets its best period from them.
"""
from __future__ import annotations

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.pipeline_terms import PipelineTerms
from parapipe.search.bounds import dispatch_table, optimistic_problem
from parapipe.search.relaxation import Relaxed, RelaxedDP
from parapipe.search.relaxed_sequences import BEAM, relaxed_sequence_mappings
from search_cases import all_pipeline_objectives, random_problem


@pytest.mark.parametrize("seed", range(6))
def test_least_sequence_on_a_chain_is_the_fastest_pipeline(seed):
    pr = random_problem(6, 3, 9100 + seed, "chain")
    best = float(all_pipeline_objectives(pr)[:, 0].min())
    dp = RelaxedDP(pr)
    for beam in (BEAM, None):  # the search's beam, and every Pareto-optimal label
        got = relaxed_sequence_mappings(dp, np.inf, beam=beam)
        assert got
        value, mapping = got[0]
        assert value == pytest.approx(best, rel=1e-9)
        assert evaluate(pr, mapping).period_s == pytest.approx(best, rel=1e-9)
        values = [v for v, _ in got]
        assert values == sorted(values) and len({m for _, m in got}) == len(got)


CASES = [(n, k, shape, seed) for n, k, shape in [(7, 3, "dag"), (7, 3, "diamond"), (8, 4, "dag")]
         for seed in range(3)]


@pytest.mark.parametrize("n, k, shape, seed", CASES, ids=[f"{s}{n}x{k}-{seed}" for n, k, s, seed in CASES])
def test_every_mapping_costs_at_least_its_relaxed_period(n, k, shape, seed):
    pr = random_problem(n, k, 9200 + 100 * n + seed, shape)
    terms = PipelineTerms(dispatch_s=2e-4, handoff_s=1e-4, invoke_s={"p1": 5e-4})
    dispatch = dispatch_table(pr.pu_names, terms)
    pipelines = all_pipeline_objectives(pr, terms)[:, 0]
    limit = float(np.median(pipelines))  # about half the pipelines are faster
    relaxed = Relaxed(optimistic_problem(pr), limit, dispatch=dispatch)
    got = relaxed_sequence_mappings(relaxed.dp, limit, (relaxed.lam, relaxed.h_probe), beam=4, count=50)
    assert got, "the fastest pipeline's sequence lies below the limit"
    for value, mapping in got:
        assert value < limit
        assert all(len(st.pus) == 1 and not st.replicas for st in mapping.stages)
        assert all(a.pus != b.pus for a, b in zip(mapping.stages, mapping.stages[1:]))  # consecutive ones merged
        assert evaluate(pr, mapping, terms).period_s >= value * (1 - 1e-9)
    capped = relaxed_sequence_mappings(relaxed.dp, limit, (relaxed.lam, relaxed.h_probe), beam=4, count=50,
                                       max_stages=2)
    assert all(len(m.stages) <= 2 for _, m in capped)
    if len(got) < 50:  # every sequence below the limit was returned: the capped ones are those with <= 2 stages
        assert [m for _, m in capped] == [m for _, m in got if len(m.stages) <= 2]


def test_the_search_takes_resnet50_on_the_a311d_from_the_relaxation():
    """The DP passes give 78.2 ms here (their labels per state and the least-period pass's budget miss the
    pipelines that hop between the NPU and the CPUs at every residual Add the NPU cannot run); the relaxation's
    sequences give a pipeline of more than ten stages below 70 ms."""
    from parapipe.app.prepare import prepare
    from parapipe.search.options import SearchOptions
    from parapipe.search.api import search

    prep = prepare("resnet50", "amlogic_a311d", max_blocks=48)
    result = search(prep.problem, SearchOptions(), terms=prep.terms)  # the CLI's defaults
    best = result.best("throughput")
    assert best.origin == "relaxation" and len(best.mapping.stages) > 10
    assert best.evaluation.period_s < 0.070
    npu = prep.problem.pu_names.index("npu")
    assert sum(st.pus == (npu,) for st in best.mapping.stages) > 2  # the NPU serves several stages
