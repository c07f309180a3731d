"""Stage timing of the leading points (``optimize --soc host``, :func:`parapipe.app.optimize.search_prepared`,
:mod:`parapipe.app.stage_timing`).

* :func:`parapipe.cost.tasks.stage_submodels` lists what the executor runs as one sub-model;
* the measure-and-search-again loop: on a two-core problem where a pessimistic whole-model time and optimistic
  block sums make a two-stage pipeline look best, the stages' measured times make the replicated model the best
  throughput point (block sums alone rank the two wrongly), and the times land in a new problem for every PU (the
  prepared problem stays as it was);
* stages are timed loaded with the plain model and alone with a fitted co-running term;
* the real host measurement (:func:`parapipe.measure.submodels.measure_submodels`) on squeezenet;
* :func:`parapipe.app.stage_timing.time_mapping_stages`, which ``evaluate --soc host`` uses for the mappings it is
  given.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from parapipe.cost.mapping import Mapping, ReplicaMapping, StageMapping
from parapipe.cost.pipeline_terms import PipelineTerms
from parapipe.cost.problem import MappingProblem
from parapipe.cost.tasks import stage_submodels, stage_tasks
from parapipe.errors import InputError
from parapipe.search.options import SearchOptions
from parapipe.app.optimize import search_prepared
from parapipe.app.prepare import Prepared
from parapipe.app.stage_timing import STAGE_TIMING_ROUNDS

MS = 1e-3


def _two_cores(n: int = 4, block_s: float = 1 * MS, k: int = 2) -> MappingProblem:
    """A chain of ``n`` equal blocks on ``k`` identical cores, hand-offs free (as the host's cores)."""
    return MappingProblem([f"b{i}" for i in range(n)], [()] + [(i,) for i in range(n - 1)],
                          {(i, i + 1): 1e3 for i in range(n - 1)}, [f"cpu{p}" for p in range(k)],
                          np.full((n, k), block_s), np.full((n, k), 5.0), np.full(k, 1.0), 10.0,
                          np.zeros((k, k)), np.full((k, k), 1e12), name="chain")


def test_stage_submodels_lists_ranges_replicas_and_tasks():
    pr = MappingProblem([f"b{i}" for i in range(6)], [(), (0,), (0,), (1, 2), (3,), (4,)],
                        {(0, 1): 1e3, (0, 2): 1e3, (1, 3): 1e3, (2, 3): 1e3, (3, 4): 1e3, (4, 5): 1e3},
                        ["a", "b", "c", "d"], np.full((6, 4), MS), np.full((6, 4), 2.0), np.ones(4), 1.0,
                        np.zeros((4, 4)), np.full((4, 4), 1e9))
    pipeline = Mapping((StageMapping(0, 4, (0, 1), (0, 0, 1, 0)), StageMapping(4, 6, (2,), (2, 2))))
    replicated = Mapping((StageMapping(0, 4, (0,), (0,) * 4, replicas=(ReplicaMapping((1,), (1,) * 4),)),
                          StageMapping(4, 6, (2, 3), (2, 3), replicas=(ReplicaMapping((0, 1), (0, 1)),))))
    single = Mapping((StageMapping(0, 4, (3,), (3,) * 4), StageMapping(4, 6, (2,), (2, 2))))
    submodels = stage_submodels(pr, [pipeline, replicated, single])
    # blocks 0..3 run on one PU in `single` and on each replica in `replicated`: listed once; so do 4..5
    # the multi-PU stage 0:4 on a+b: block 0 feeds b's block 2 and block 3 needs it, so a runs three tasks
    assert stage_tasks(pr, pipeline.stages[0]) == [(0, (0,)), (0, (1,)), (0, (3,)), (1, (2,))]
    # the replicated group stage 4:6 splits at the hand-off 4 -> 5 on each replica
    assert submodels == [(0,), (0, 1, 2, 3), (1,), (2,), (3,), (4,), (4, 5), (5,)]
    assert stage_submodels(pr, [single]) == [(0, 1, 2, 3), (4, 5)]


def test_measured_stages_turn_the_ranking_to_the_replicated_model():
    """Block sums tie a balanced 2-stage pipeline with the replicated model; the whole model's one-shot time
    (4.2 ms, 5 % slow) tips the search to the pipeline. The stages' sub-models run 15 % slower than their blocks
    (lost fusions), the whole model at its block sum: measured, the replicated model is the best throughput."""
    pr = _two_cores()
    whole = (0, 1, 2, 3)
    pr.submodel_time_s = {(p, whole): 4.2 * MS for p in range(2)}
    prep = Prepared(None, None, None, None, pr, None, host=True)
    calls = []

    def measure(submodels, loaded):
        calls.append((list(submodels), loaded))
        return {b: len(b) * MS * (1.0 if b == whole else 1.15) for b in submodels}

    opts = SearchOptions(time_limit_s=2.0)
    before = search_prepared(prep, opts, time_stages=0)
    assert before.best("throughput").mapping.replicated is False  # the search's choice from block sums
    after = search_prepared(prep, opts, measure=measure)
    best = after.best("throughput")
    assert best.mapping.replicated and best.evaluation.period_s == pytest.approx(2.0 * MS)
    assert best.evaluation.period_s < before.best("throughput").evaluation.period_s
    assert calls and all(c[1] is True for c in calls)  # plain model: stages timed loaded
    assert whole in calls[0][0] and "stage_timing" in after.info and after.info["stage_timing"]["rounds"] >= 1
    timed = after.problem
    assert timed is not pr and pr.submodel_time_s == {(p, whole): 4.2 * MS for p in range(2)}  # prep as it was
    assert prep.problem is pr
    assert timed.submodel_time_s[(1, whole)] == pytest.approx(4.0 * MS)  # every core takes the measured time
    assert not any(b in c[0] for c in calls[1:] for b in calls[0][0])  # never timed twice
    # converged: every sub-model of the leading front points and the replicated model has a measured time
    assert after.info["stage_timing"]["rounds"] < STAGE_TIMING_ROUNDS
    leading = sorted(after.front(), key=lambda p: p.objectives())[:3] + after.front("replicated")
    assert all((0, b) in timed.submodel_time_s for b in stage_submodels(timed, [p.mapping for p in leading]))
    counts = after.info["stage_timing"]
    timed_blocks = {b for c in calls for b in c[0]}
    assert counts["ranges"] + counts["tasks"] == len(timed_blocks)
    assert counts["ranges"] == sum(1 for b in timed_blocks if b == tuple(range(b[0], b[-1] + 1)))
    # the document names the points predicted from measured stages: the leading ones, not a cut never timed
    ids = after.info["stage_timing"]["timed_point_ids"]
    assert {p.id for p in leading} <= set(ids)


def test_stage_timed_ids_needs_every_sub_model_of_a_point():
    from types import SimpleNamespace

    from parapipe.app.stage_timing import stage_timed_ids

    pr = _two_cores()
    whole = Mapping((StageMapping(0, 4, (0,), (0,) * 4, replicas=(ReplicaMapping((1,), (1,) * 4),)),))
    cut = Mapping((StageMapping(0, 2, (0,), (0, 0)), StageMapping(2, 4, (1,), (1, 1))))
    group = Mapping((StageMapping(0, 4, (0, 1), (0, 0, 1, 1)),))
    points = [SimpleNamespace(id=name, mapping=m) for name, m in (("whole", whole), ("cut", cut), ("group", group))]
    assert stage_timed_ids(pr, points) == []  # block sums only
    pr.submodel_time_s = {(p, (0, 1, 2, 3)): 4 * MS for p in range(2)} | {(0, (0, 1)): 2 * MS}
    assert stage_timed_ids(pr, points) == ["whole"]  # the cut's second stage (blocks 2, 3) has no time
    pr.submodel_time_s[(0, (2, 3))] = 2 * MS
    # the group's two tasks are the cut's two stages: the same blocks as one sub-model, the same measurement
    assert stage_tasks(pr, group.stages[0]) == [(0, (0, 1)), (1, (2, 3))]
    assert stage_timed_ids(pr, points) == ["whole", "cut", "group"]
    branchy = Mapping((StageMapping(0, 4, (0, 1), (0, 1, 0, 1)),))  # tasks (0,), (1,), (2,), (3,)
    points.append(SimpleNamespace(id="branchy", mapping=branchy))
    pr.submodel_time_s.update({(0, (v,)): MS for v in range(3)})
    assert stage_timed_ids(pr, points) == ["whole", "cut", "group"]  # block 3's task has no time
    pr.submodel_time_s[(1, (3,))] = MS
    assert stage_timed_ids(pr, points) == ["whole", "cut", "group", "branchy"]


def test_fitted_co_running_terms_time_stages_alone():
    pr = _two_cores()
    seen = []

    def measure(submodels, loaded):
        seen.append(loaded)
        return {b: len(b) * MS for b in submodels}

    prep = Prepared(None, None, None, None, pr, None, terms=PipelineTerms(slowdown=1.03), host=True)
    search_prepared(prep, SearchOptions(time_limit_s=1.0), measure=measure)
    assert seen and not any(seen)
    prep = Prepared(None, None, None, None, _two_cores(), None, terms=PipelineTerms(dispatch_s=1e-4), host=True)
    seen.clear()
    search_prepared(prep, SearchOptions(time_limit_s=1.0), measure=measure)
    assert seen and all(seen)


def test_no_stage_timing_off_the_host_or_when_disabled():
    def measure(*args):
        raise AssertionError("measured")

    for prep, k in ((Prepared(None, None, None, None, _two_cores(), None), 3),
                    (Prepared(None, None, None, None, _two_cores(), None, host=True), 0)):
        res = search_prepared(prep, SearchOptions(time_limit_s=1.0), time_stages=k, measure=measure)
        assert "stage_timing" not in res.info and prep.problem.submodel_time_s is None


def test_measure_submodels_on_squeezenet(zoo_opgraph, monkeypatch):
    from parapipe.graph.coarsen import coarsen
    from parapipe.measure import submodels
    from parapipe.measure.local import allowed_cpus
    from parapipe.measure.submodels import measure_submodels

    bg = coarsen(zoo_opgraph("squeezenet"))
    n = len(bg.blocks)
    import ppexec.runtimes

    sessions = []
    real = submodels.create_session

    def spy(model, binding, provider):
        sessions.append(threading.current_thread().name)
        return real(model, binding, provider)

    monkeypatch.setattr(ppexec.runtimes, "create_session", spy)  # timed sessions: the runtime adapter's
    monkeypatch.setattr(submodels, "create_session", spy)  # load sessions on the other cores
    head, tail, whole = tuple(range(3)), tuple(range(3, n)), tuple(range(n))
    times = measure_submodels(bg, [head, tail, whole, (1, 0)], loaded=False, passes=2, repeats=2, warmup=1,
                              min_s=0.0)
    assert list(times) == [head, tail, whole, (0, 1)] and all(t > 0 for t in times.values())  # keys sorted
    # the whole model takes longer than its first three blocks, and its two halves take about as long as it
    assert times[whole] > times[head]
    assert 0.5 < (times[head] + times[tail]) / times[whole] < 2.0
    assert len(sessions) == 2 * 4  # alone: one session per sub-model per pass, nothing on the other cores
    measure_submodels(bg, [head], loaded=True, passes=1, repeats=2, warmup=1, min_s=0.0)
    assert len(sessions) == 8 + len(allowed_cpus())  # loaded: every other allowed core runs it too
    with pytest.raises(InputError, match="passes: must be an integer >= 1"):
        measure_submodels(bg, [whole], loaded=True, passes=0)


@pytest.mark.parametrize("extra, says", [
    (["--soc", "host", "--time-stages", "-1"], "--time-stages: must be >= 0, got -1"),
    (["--soc", "amlogic_a311d", "--time-stages", "2"], "--time-stages: is only used with a model on --soc host"),
    (["--soc", "host", "--time-stages", "2", "--refine", "1"], "--time-stages: is only used with a model on --soc"),
])
def test_time_stages_refused_where_it_means_nothing(capsys, tmp_path, extra, says):
    from parapipe.cli import main

    assert main(["optimize", "squeezenet", "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and ("drop --time-stages" in err[0] or "give a count" in err[0])
    assert not (tmp_path / "o").exists()


def test_time_stages_zero_is_accepted_off_the_host(capsys, tmp_path):
    from parapipe.cli import main

    assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--time-stages", "0", "--no-plot",
                 "--time-limit", "1", "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "pareto.json").exists()


def test_time_mapping_stages_installs_the_times_evaluate_uses():
    """``evaluate --soc host`` times the given mappings' stages as the search does: the measured time replaces
    the block sum of every stage it covers (on every core), sub-models in ``skip`` are not timed again, and a
    profile that is not the host measures nothing."""
    from parapipe.app.stage_timing import time_mapping_stages
    from parapipe.cost.evaluate import evaluate

    pr = _two_cores()
    prep = Prepared(None, None, None, None, pr, None, host=True)
    pipeline = Mapping((StageMapping(0, 2, (0,), (0, 0)), StageMapping(2, 4, (1,), (1, 1))))
    calls = []

    def measure(submodels, loaded):
        calls.append(list(submodels))
        return {b: 3.0 * MS if b == (0, 1) else 1.5 * MS for b in submodels}

    assert evaluate(pr, pipeline).period_s == pytest.approx(2.0 * MS)  # block sums
    timed = time_mapping_stages(prep, [pipeline], measure=measure)
    assert sorted(timed.submodels) == [(0, 1), (2, 3)]
    assert evaluate(timed.prepared.problem, pipeline).period_s == pytest.approx(3.0 * MS)
    assert timed.prepared.problem.submodel_time_s[(1, (0, 1))] == pytest.approx(3.0 * MS)
    assert evaluate(pr, pipeline).period_s == pytest.approx(2.0 * MS) and pr.submodel_time_s is None  # unchanged
    again = time_mapping_stages(timed.prepared, [pipeline], measure=measure, skip=set(timed.submodels))
    assert again.prepared is timed.prepared and again.submodels == [] and len(calls) == 1
    off_host = Prepared(None, None, None, None, _two_cores(), None, host=False)
    untimed = time_mapping_stages(off_host, [pipeline], measure=measure)
    assert untimed.prepared is off_host and untimed.submodels == [] and len(calls) == 1


def test_evaluate_on_the_host_times_the_stages(capsys):
    """The CLI on a real model measured here: both stages of a two-stage pipeline over the two cores are timed
    as sub-models (the line says so), and ``--json`` output stays one JSON object per line."""
    import json

    from parapipe.cli import main
    from parapipe.graph.coarsen import coarsen
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.zoo import load_model

    n = len(coarsen(import_onnx(load_model("squeezenet").model), max_blocks=48).blocks)
    half = n // 2
    pus = ",".join(["cpu0"] * half + ["cpu1"] * (n - half))
    assert main(["evaluate", "squeezenet", "--soc", "host", "--mapping", pus]) == 0
    out = capsys.readouterr().out
    assert "stage times measured here: 2 stage range(s), 0 task(s)" in out
    assert main(["evaluate", "squeezenet", "--soc", "host", "--mapping", pus, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert len(rows) == 1 and rows[0]["stages"] == 2 and rows[0]["period_s"] > 0


def test_stage_timing_note_counts_what_it_lists():
    """The note's counts agree with its lists: 6 leading mappings timed, 8 front points with every stage
    measured (others share their stages) -- "8 point(s) ...: p0, ..., p7", never "6 ... p0, ..., p7"."""
    import re

    from parapipe.cli.optimize import stage_timing_note

    timing = {"points": 3, "points_timed": 6, "rounds": 2, "ranges": 9, "tasks": 11, "seconds": 4.2,
              "timed_point_ids": [f"p{i}" for i in range(8)]}
    note = stage_timing_note(timing)
    assert "6 leading mapping(s)" in note
    listed = re.search(r"(\d+) point\(s\) of the front have every stage measured: (.*)$", note)
    assert listed and int(listed[1]) == 8 and listed[2].split(", ") == timing["timed_point_ids"]
    many = stage_timing_note({**timing, "timed_point_ids": [f"p{i}" for i in range(11)]})
    assert many.endswith("11 point(s) of the front have every stage measured: p0, p1, p2, p3, p4, p5, p6, p7, +3")
    assert "every stage" not in stage_timing_note({**timing, "timed_point_ids": []})


def test_ctrl_c_in_optimize_removes_the_folders_it_created(tmp_path, monkeypatch, capsys):
    """Ctrl-C while ``optimize`` searches or times stages: exit 130, one line, and the output folders this run
    created are gone; a folder that existed before keeps its files."""
    import parapipe.app.optimize as app_optimize
    from parapipe.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(app_optimize, "search_prepared", interrupted)
    out = tmp_path / "new" / "deeper" / "out"
    assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--out", str(out), "--no-plot"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"parapipe: interrupted; nothing written to {out}"]
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "notes.txt").write_text("mine")
    assert main(["optimize", "squeezenet", "--soc", "amlogic_a311d", "--out", str(tmp_path / "old"),
                 "--no-plot"]) == 130
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["notes.txt"]
