"""Replicated stages from a pareto.json point through 'parapipe run' (load_mapping -> build_plan -> deploy bundle
-> run-and-verify): squeezenet and inception_v1 on the host's cores 0 and 1."""
from __future__ import annotations

import json
import os

import pytest

from deploy_mappings import replicated_doc, write_doc
from parapipe.app.run import run_local
from parapipe.execution.traces import read_chrome_trace

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="host mappings use CPUs 0, 1")]


@pytest.mark.parametrize("model", ["squeezenet", "inception_v1"])
def test_two_pinned_copies_of_the_whole_model(model, tmp_path):
    path = write_doc(replicated_doc(model), tmp_path / "pareto.json")
    trace = tmp_path / "trace.json"
    lm, rep = run_local(model, str(path), "r0", frames=12, warmup=2, trace=str(trace), idle_frames=2)
    assert lm.plan.replica_shares == {0: [0.5, 0.5]}
    assert [[t.pu for t in r] for r in lm.plan.replicas(0)] == [["cpu0"], ["cpu1"]]
    assert lm.plan.stages[0][0].model is lm.plan.stages[0][1].model  # one sub-model, loaded on each core
    assert rep.outputs_match and rep.stages == 1
    assert rep.pu_busy_s["cpu0"] > 0 and rep.pu_busy_s["cpu1"] > 0
    events = read_chrome_trace(str(trace))
    assert sorted(e.frame for e in events) == list(range(12))  # each frame ran once, on one replica
    assert {e.pu for e in events} == {"cpu0", "cpu1"}  # one lane per replica, both took frames
    assert rep.predicted["throughput_per_s"] == pytest.approx(100.0)


def test_a_replicated_stage_feeding_a_plain_stage(tmp_path):
    # inception_v1's first half on cpu0 | cpu1, second half on cpu1: the tensors handed from either replica to
    # stage 1 are compared with the unsplit model's for their own frame, in frame order.
    path = write_doc(replicated_doc("inception_v1", 0.3), tmp_path / "pareto.json")
    lm, rep = run_local("inception_v1", str(path), "r1", frames=16, warmup=2, idle_frames=2,
                        trace=str(tmp_path / "trace.json"))
    assert rep.outputs_match and rep.checked_tensors >= 1 and rep.stages == 2
    events = read_chrome_trace(str(tmp_path / "trace.json"))
    assert {(e.stage, e.pu) for e in events} == {(0, "cpu0"), (0, "cpu1"), (1, "cpu1")}
    assert sorted(e.frame for e in events if e.stage == 1) == list(range(16))
    doc = json.loads(path.read_text())
    assert lm.point.used_pus() == ["cpu0", "cpu1"] and len(doc["points"][1]["mapping"]["stages"]) == 2
