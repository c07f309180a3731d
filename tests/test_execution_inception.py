"""inception_v1 (the onnx wheel's light zoo model) through build_plan and the pipelined executor, one PU per
core."""
from __future__ import annotations

import os

import numpy as np
import pytest

from parapipe.graph.coarsen import coarsen
from parapipe.graph.opgraph import import_onnx
from parapipe.graph.zoo import load_model
from ppexec.executor import PipelineExecutor
from ppexec.reference import max_abs_diff, reference_outputs
from parapipe.execution import build_plan
from runtime_models import CPU_BINDINGS, parapipe_threads, typed_stage

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")]


@pytest.fixture(scope="module")
def inception():
    og = import_onnx(load_model("inception_v1").model, "inception_v1")
    bg = coarsen(og)
    (name,) = og.inputs
    rng = np.random.default_rng(0)
    fs = [{name: rng.standard_normal(og.tensors[name].shape).astype(np.float32)} for _ in range(4)]
    return og, bg, fs, reference_outputs(og.model, fs)


def _middle_concat(bg) -> int:
    """Number of blocks in stage 0 when cutting right after the middle Concat block."""
    concats = [i for i, b in enumerate(bg.blocks) if "Concat" in b.op_types]
    assert len(concats) >= 3
    return concats[len(concats) // 2] + 1


def _first_module_branches(bg, blocks):
    """Block -> branch index for the first fork among ``blocks`` (blocks strictly between fork and join)."""
    inside = set(blocks)
    for b in blocks:
        heads = sorted((s for s in bg.graph.successors(b) if s in inside), key=bg.index.__getitem__)
        if len(heads) < 2:
            continue
        branch = {}
        for k, head in enumerate(heads):
            frontier = [head]
            while frontier:
                x = frontier.pop()
                if x in branch or bg.graph.in_degree(x) > 1:  # stop at the join
                    continue
                branch[x] = k
                frontier.extend(bg.graph.successors(x))
        return branch
    raise AssertionError("no fork in the stage")


def _run(plan, fs):
    with PipelineExecutor(plan) as ex:
        outs = list(ex.run(fs))
        return outs, ex.metrics


def test_two_stages_cut_at_middle_concat_match_unsplit_model(inception):
    og, bg, fs, ref = inception
    names = [b.name for b in bg.blocks]
    k = _middle_concat(bg)
    s0, s1 = names[:k], names[k:]
    plan = build_plan(og, bg, [typed_stage(["cpu0"], {b: "cpu0" for b in s0}, s0),
                               typed_stage(["cpu1"], {b: "cpu1" for b in s1}, s1)], CPU_BINDINGS)
    (t0,), (t1,) = plan.stages
    assert len(t0.outputs) == 1 and t1.inputs == t0.outputs  # a Concat cut: one tensor crosses
    outs, metrics = _run(plan, fs)
    assert max_abs_diff(outs, ref) <= 1e-5
    assert {(e.stage, e.pu) for e in metrics.trace} == {(0, "cpu0"), (1, "cpu1")}
    assert parapipe_threads() == []


def test_inception_module_branches_split_over_two_pus(inception):
    og, bg, fs, ref = inception
    names = [b.name for b in bg.blocks]
    k = _middle_concat(bg)
    s0, s1 = names[:k], names[k:]
    branch = _first_module_branches(bg, s1)
    assert len(set(branch.values())) == 4  # an Inception module: 1x1, 3x3, 5x5 and pool branches
    assignment = {b: ("cpu0" if branch.get(b, 1) % 2 == 0 else "cpu1") for b in s1}
    plan = build_plan(og, bg, [typed_stage(["cpu0"], {b: "cpu0" for b in s0}, s0),
                               typed_stage(["cpu0", "cpu1"], assignment, s1)], CPU_BINDINGS)
    stage1 = {t.name: t for t in plan.stages[1]}
    assert {t.pu for t in stage1.values()} == {"cpu0", "cpu1"}
    # the join waits on the branches that ran on the other PU
    assert any(d.split(".")[1] != t.pu for t in stage1.values() for d in t.deps)
    outs, metrics = _run(plan, fs)
    assert max_abs_diff(outs, ref) <= 1e-5
    ran = {(e.stage, e.pu) for e in metrics.trace}
    assert ran == {(0, "cpu0"), (1, "cpu0"), (1, "cpu1")}
    assert parapipe_threads() == []
