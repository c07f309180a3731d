"""build_plan on real OpGraphs/BlockGraphs: task splitting, deps, the structural rules' messages, execution."""
from __future__ import annotations

import os

import pytest

from parapipe.errors import InputError
from parapipe.graph.coarsen import coarsen
from parapipe.graph.opgraph import import_onnx
from ppexec.executor import run_pipeline
from ppexec.reference import max_abs_diff, reference_outputs
from parapipe.execution import build_plan
from runtime_models import CPU_BINDINGS, chain_model, diamond_model, frames, typed_stage


@pytest.fixture(scope="module")
def diamond():
    og = import_onnx(diamond_model(), "diamond")
    bg = coarsen(og)
    assert [b.name for b in bg.blocks] == ["A_mm", "B_mm", "C_mm", "D_add", "E_mm"]
    return og, bg


def _spec(assignment, order=None):
    pus = sorted(set(assignment.values()))
    return typed_stage(pus, assignment, order or ())


def test_cross_pu_predecessor_starts_a_new_task(diamond):
    og, bg = diamond
    stages = [_spec({"A_mm": "cpu0"}),
              _spec({"B_mm": "cpu0", "C_mm": "cpu1", "D_add": "cpu0", "E_mm": "cpu0"})]
    plan = build_plan(og, bg, stages, CPU_BINDINGS)
    assert [[t.name for t in s] for s in plan.stages] == [["s0.cpu0.t0"],
                                                          ["s1.cpu0.t0", "s1.cpu0.t1", "s1.cpu1.t0"]]
    b, de, c = plan.stages[1]
    assert (b.inputs, b.outputs, b.deps) == (["a"], ["b"], [])
    assert (c.pu, c.inputs, c.outputs, c.deps) == ("cpu1", ["a"], ["c"], [])
    assert sorted(de.inputs) == ["b", "c"] and de.outputs == ["y"]
    assert de.deps == ["s1.cpu0.t0", "s1.cpu1.t0"]
    assert plan.model_inputs == ["x"] and plan.model_outputs == ["y"]
    assert [n.name for n in de.model.graph.node] == ["D_add", "E_mm"]
    fs = frames(20, seed=4)
    outs, metrics = run_pipeline(plan, fs, warmup=1)
    assert max_abs_diff(outs, reference_outputs(og.model, fs)) <= 1e-5
    assert {e.task for e in metrics.trace if e.pu == "cpu1"} == {"s1.cpu1.t0"}


def test_same_pu_blocks_stay_one_task(diamond):
    og, bg = diamond
    stages = [_spec({b.name: "cpu0" for b in bg.blocks})]
    plan = build_plan(og, bg, stages, CPU_BINDINGS)
    (only,) = plan.stages[0]
    assert (only.inputs, only.outputs, only.deps) == (["x"], ["y"], [])


def test_tasks_end_where_another_pu_needs_their_result(diamond):
    # one stage: cpu0 walks A, C, D; cpu1 walks B, E. A feeds B (cpu1): A's task ends after A; D needs B:
    # D starts a task; E needs D (cpu0): E starts a task. The wait graph stays acyclic.
    og, bg = diamond
    stages = [_spec({"A_mm": "cpu0", "B_mm": "cpu1", "C_mm": "cpu0", "D_add": "cpu0", "E_mm": "cpu1"},
                    order=["A_mm", "B_mm", "C_mm", "D_add", "E_mm"])]
    plan = build_plan(og, bg, stages, CPU_BINDINGS)
    tasks = {t.name: t for t in plan.stages[0]}
    assert {n: [node.name for node in t.model.graph.node] for n, t in tasks.items()} == {
        "s0.cpu0.t0": ["A_mm", "A_relu"], "s0.cpu0.t1": ["C_mm", "C_sig"], "s0.cpu0.t2": ["D_add"],
        "s0.cpu1.t0": ["B_mm", "B_relu"], "s0.cpu1.t1": ["E_mm"]}
    assert tasks["s0.cpu0.t1"].deps == ["s0.cpu0.t0"]
    assert tasks["s0.cpu1.t0"].deps == ["s0.cpu0.t0"]
    assert tasks["s0.cpu0.t2"].deps == ["s0.cpu0.t1", "s0.cpu1.t0"]
    assert tasks["s0.cpu1.t1"].deps == ["s0.cpu0.t2"]
    fs = frames(5, seed=5)
    outs, metrics = run_pipeline(plan, fs, warmup=0)
    assert max_abs_diff(outs, reference_outputs(og.model, fs)) <= 1e-5
    by = {(e.task, e.frame): e for e in metrics.trace}
    for f in range(5):  # B (cpu1) starts once A is done, without waiting for C
        assert by[("s0.cpu1.t0", f)].start_s >= by[("s0.cpu0.t0", f)].end_s


@pytest.mark.parametrize("stages, message", [
    ([_spec({"A_mm": "cpu0", "B_mm": "cpu0", "C_mm": "cpu0", "D_add": "cpu0"})],
     r"^mapping: stages: 1 block\(s\) in no stage, e\.g\. \['E_mm'\]; put every block"),
    ([_spec({"A_mm": "cpu0", "B_mm": "cpu0", "C_mm": "cpu0"}), _spec({"C_mm": "cpu1", "D_add": "cpu1",
                                                                      "E_mm": "cpu1"})],
     r"^mapping: stages\[1\]\.blocks: block 'C_mm' is already in stage 0; "
     r"put every block in exactly one stage$"),
    ([_spec({"B_mm": "cpu0", "C_mm": "cpu0", "D_add": "cpu0", "E_mm": "cpu0"}), _spec({"A_mm": "cpu1"})],
     r"^mapping: stages\[1\]\.blocks: stages out of order: a stage must hold the blocks that follow"),
    ([_spec({"A_mm": "cpu0", "B_mm": "cpu0", "C_mm": "cpu0", "D_add": "cpu0", "E_mm": "cpu0"},
            order=["A_mm", "B_mm", "D_add", "C_mm", "E_mm"])],
     r"^mapping: stages\[0\]\.order: block 'D_add' comes before its producer 'C_mm'; "
     r"give the stage's blocks"),
    ([_spec({"A_mm": "cpu0", "B_mm": "cpu0", "C_mm": "cpu0", "D_add": "cpu0", "E_mm": "gpu0"})],
     r"^mapping: stages\[0\]\.pus: PU 'gpu0' has no binding; add a PUBinding for 'gpu0'"),
    ([typed_stage(["cpu0"], {"A_mm": "cpu1", "B_mm": "cpu0", "C_mm": "cpu0", "D_add": "cpu0", "E_mm": "cpu0"})],
     r"^mapping: stages\[0\]\.assignment\.A_mm: PU 'cpu1' is not one of the stage's PUs \['cpu0'\]"),
    ([_spec({"A_mm": "cpu0", "B_mm": "cpu0", "C_mm": "cpu0", "D_add": "cpu0", "E_mm": "cpu0", "Z": "cpu0"})],
     r"^mapping: stages\[0\]\.blocks: unknown block 'Z'; use block names from"),
    ([typed_stage(["cpu0"], {"A_mm": "cpu0"}, ["A_mm", "B_mm"])],
     r"^mapping: stages\[0\]\.order: does not list exactly the stage's blocks"),
    ([], r"^mapping: stages: 5 block\(s\) in no stage"),
])
def test_bad_mappings_are_input_errors_naming_stage_and_block(diamond, stages, message):
    og, bg = diamond
    with pytest.raises(InputError, match=message):
        build_plan(og, bg, stages, CPU_BINDINGS)


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
def test_chain_two_stages_from_build_plan():
    og = import_onnx(chain_model(4), "chain")
    bg = coarsen(og)
    names = [b.name for b in bg.blocks]
    plan = build_plan(og, bg, [_spec({n: "cpu0" for n in names[:2]}), _spec({n: "cpu1" for n in names[2:]})],
                      CPU_BINDINGS)
    assert [(t.inputs, t.outputs) for s in plan.stages for t in s] == [(["x"], ["h1"]), (["h1"], ["y"])]
    fs = frames(50, seed=6)
    outs, _ = run_pipeline(plan, fs, warmup=2)
    assert max_abs_diff(outs, reference_outputs(og.model, fs)) <= 1e-5
