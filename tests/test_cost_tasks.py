"""The cost model's view of a multi-PU stage's tasks (parapipe.cost.tasks) is the executor's (runtime.plan)."""
from __future__ import annotations

import numpy as np
import pytest

from parapipe.cost.evaluate import Mapping, StageMapping, evaluate
from parapipe.cost.problem import MappingProblem
from parapipe.cost.tasks import stage_tasks
from parapipe.runtime.plan import StageSpec, _block_graph, _split_stage
from parapipe.app.prepare import prepare


@pytest.mark.parametrize("model", ["squeezenet", "inception_v1", "shufflenet"])
@pytest.mark.parametrize("seed", [0, 1])
def test_stage_tasks_are_the_tasks_the_executor_builds(model, seed):
    prep = prepare(model, "amlogic_a311d")
    pr = prep.problem
    big, little = pr.pu_names.index("big"), pr.pu_names.index("little")
    rng = np.random.default_rng(seed)
    n = pr.n_blocks
    assignment = tuple(int(big if rng.random() < 0.5 else little) for _ in range(n))
    stage = StageMapping(0, n, (big, little), assignment)
    names = pr.block_names
    spec = StageSpec(pus=["big", "little"], assignment={names[v]: pr.pu_names[assignment[v]] for v in range(n)},
                     order=list(names))
    _, blocks = _block_graph(prep.opgraph, prep.block_graph)
    runtime = _split_stage(spec, blocks, {b: 0 for b in names}, 0)
    ours = stage_tasks(pr, stage)
    assert [(pr.pu_names[p], [names[v] for v in bs]) for p, bs in ours] == runtime
    assert len(ours) > 2  # the random split really has tasks on both PUs


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
    pr.task_time_s = {(0, (2,)): 0.5e-3}  # c alone on p in 0.5 ms
    assert evaluate(pr, Mapping((st,))).period_s == pytest.approx(3e-3)  # b (1 ms on q) is the critical path
    pr.task_time_s = {(0, (0,)): 0.25e-3, (1, (1,)): 0.5e-3}
    # a 0.25 ms, then b 0.5 ms on q || c 1 ms on p; d after c: 0.25 + 1 + 1
    assert evaluate(pr, Mapping((st,))).period_s == pytest.approx(2.25e-3)
