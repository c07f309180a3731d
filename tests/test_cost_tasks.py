"""The one split rule (parapipe.cost.tasks): the plan builder's tasks, the rule's definition, measured tasks."""
from __future__ import annotations

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping, StageMapping
from parapipe.cost.problem import MappingProblem
from parapipe.cost.tasks import stage_tasks
from parapipe.execution.plan import build_plan
from parapipe.mapping import Stage
from ppexec.plan import PUBinding
from parapipe.app.prepare import prepare


@pytest.mark.parametrize("model", ["squeezenet", "inception_v1", "shufflenet"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_plan_runs_the_split_rule_and_the_split_obeys_it(model, seed):
    # A random two-PU stage over the whole model: build_plan's tasks are stage_tasks' (the same operators, PU by
    # PU), and the split, checked here from its definition on the block DAG, is a partition of each PU's blocks
    # into maximal runs whose cross-PU inputs arrive only at their first block and whose results leave only
    # from their last block.
    prep = prepare(model, "amlogic_a311d")
    pr, bg = prep.problem, prep.block_graph
    big, little = pr.pu_names.index("big"), pr.pu_names.index("little")
    rng = np.random.default_rng(seed)
    n = pr.n_blocks
    assignment = tuple(int(big if rng.random() < 0.5 else little) for _ in range(n))
    names = pr.block_names
    typed = Stage(pus=["big", "little"], blocks=list(names), time_s=0.0,
                  assignment={names[v]: pr.pu_names[assignment[v]] for v in range(n)})
    plan = build_plan(prep.opgraph, bg, [typed], {"big": PUBinding(cpus=None), "little": PUBinding(cpus=None)})
    tasks = stage_tasks(pr, StageMapping(0, n, (big, little), assignment))
    assert len(tasks) > 2  # the random split really has tasks on both PUs
    ops = [sorted(node.name for node in t.model.graph.node) for t in plan.stages[0]]
    assert ops == [sorted(op for v in blocks for op in bg.blocks[v].ops) for _, blocks in tasks]
    assert [t.pu for t in plan.stages[0]] == [pr.pu_names[p] for p, _ in tasks]
    for pu in (big, little):
        runs = [list(blocks) for p, blocks in tasks if p == pu]
        assert [v for run in runs for v in run] == [v for v in range(n) if assignment[v] == pu]
        for run in runs:
            assert all(assignment[u] == pu for v in run[1:] for u in pr.preds[v])
            assert all(assignment[w] == pu for v in run[:-1] for w in pr.succs[v])
        for a, b in zip(runs, runs[1:]):  # maximal: each cut is forced by the rule
            assert any(assignment[u] != pu for u in pr.preds[b[0]]) or any(
                assignment[w] != pu for w in pr.succs[a[-1]])


def test_a_measured_task_scales_its_blocks_in_the_list_schedule():
    # a -> (b on q, c on p) -> d, 1 ms each; the task {a, c} of p measured at 1 ms (its blocks sum to 2 ms)
    inf = float("inf")
    pr = MappingProblem(list("abcd"), [(), (0,), (0,), (1, 2)], {(0, 1): 0.0, (0, 2): 0.0, (1, 3): 0.0,
                                                                 (2, 3): 0.0},
                        ["p", "q"], np.full((4, 2), 1e-3), np.full((4, 2), 2.0), [0.1, 0.1], 0.0,
                        np.zeros((2, 2)), np.full((2, 2), inf))
    st = StageMapping(0, 4, (0, 1), (0, 1, 0, 0))
    tasks = stage_tasks(pr, st)
    assert tasks == [(0, (0,)), (0, (2,)), (0, (3,)), (1, (1,))]  # a feeds q: its task ends there
    plain = evaluate(pr, Mapping((st,))).period_s
    assert plain == pytest.approx(3e-3)  # a, then b || c, then d
    pr.submodel_time_s = {(0, (2,)): 0.5e-3}  # c alone on p in 0.5 ms
    assert evaluate(pr, Mapping((st,))).period_s == pytest.approx(3e-3)  # b (1 ms on q) is the critical path
    pr.submodel_time_s = {(0, (0,)): 0.25e-3, (1, (1,)): 0.5e-3}
    # a 0.25 ms, then b 0.5 ms on q || c 1 ms on p; d after c: 0.25 + 1 + 1
    assert evaluate(pr, Mapping((st,))).period_s == pytest.approx(2.25e-3)
    # the same sub-model run as a single-PU stage takes the same measurement: a alone on p, then the rest on q
    cut = Mapping((StageMapping(0, 1, (0,), (0,)), StageMapping(1, 4, (1,), (1, 1, 1))))
    assert [r.time_s for r in evaluate(pr, cut).stage_results] == pytest.approx([0.25e-3, 3e-3])
    # and a single-PU stage's measured range is a task's time where a multi-PU stage runs those blocks as one
    chain = MappingProblem(list("abcd"), [(), (0,), (1,), (2,)], {(0, 1): 0.0, (1, 2): 0.0, (2, 3): 0.0},
                           ["p", "q"], np.full((4, 2), 1e-3), np.full((4, 2), 2.0), [0.1, 0.1], 0.0,
                           np.zeros((2, 2)), np.full((2, 2), inf))
    chain.submodel_time_s = {(1, (2, 3)): 1.5e-3}
    assert evaluate(chain, Mapping((StageMapping(0, 2, (0,), (0, 0)), StageMapping(2, 4, (1,), (1, 1))))
                    ).latency_s == pytest.approx(2e-3 + 1.5e-3)
    group = StageMapping(0, 4, (0, 1), (0, 0, 1, 1))
    assert stage_tasks(chain, group) == [(0, (0, 1)), (1, (2, 3))]
    assert evaluate(chain, Mapping((group,))).period_s == pytest.approx(2e-3 + 1.5e-3)
