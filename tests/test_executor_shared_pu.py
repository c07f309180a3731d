"""A PU serving several stages (cpu0 -> cpu1 -> cpu0) runs one task at a time: the stages' threads do not
time-slice its core, and its busy time is real work (utilisation <= 1)."""
from __future__ import annotations

import os

import pytest

from ppexec.executor import PipelineExecutor
from ppexec.plan import ExecutionPlan
from ppexec.reference import max_abs_diff, reference_outputs
from runtime_models import CPU_BINDINGS, chain_model, frames, parapipe_threads, task

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")


def _plan(width: int = 256):
    m = chain_model(6, width=width)  # MatMuls big enough (256 x 256) that concurrent tasks would overlap
    plan = ExecutionPlan(stages=[[task(m, "s0", 0, "cpu0", ["x"], ["h1"])],
                                 [task(m, "s1", 1, "cpu1", ["h1"], ["h3"])],
                                 [task(m, "s2", 2, "cpu0", ["h3"], ["y"])]],
                         model_inputs=["x"], model_outputs=["y"], bindings=dict(CPU_BINDINGS))
    return m, plan


def _overlaps(trace, pu):
    spans = sorted((e.start_s, e.end_s) for e in trace if e.pu == pu)
    return sum(1 for (_, end), (start, _) in zip(spans, spans[1:]) if start < end)


def test_tasks_of_a_shared_pu_never_overlap_and_outputs_match():
    m, plan = _plan()
    fs = frames(60, width=256, seed=5)
    with PipelineExecutor(plan) as ex:
        outs = list(ex.run(fs))
        metrics = ex.metrics
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-4
    assert {e.stage for e in metrics.trace if e.pu == "cpu0"} == {0, 2}
    assert _overlaps(metrics.trace, "cpu0") == 0
    assert metrics.pu_utilisation["cpu0"] <= 1.0 + 1e-9
    assert parapipe_threads() == []


def test_serialising_can_be_turned_off():
    m, plan = _plan()
    fs = frames(20, width=256, seed=6)
    with PipelineExecutor(plan, serialise_shared_pus=False) as ex:
        assert ex._pu_locks == {}
        outs = list(ex.run(fs))
    assert max_abs_diff(outs, reference_outputs(m, fs)) <= 1e-4
    with PipelineExecutor(plan) as ex:
        assert set(ex._pu_locks) == {"cpu0"}  # cpu1 serves one stage: no lock
