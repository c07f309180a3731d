"""'parapipe run --mapping' in process: the model is loaded, imported and coarsened once per command, the plan
is validated once, and no deploy bundle (plan.json, sub-model files) is written or read back."""
from __future__ import annotations

import collections
import importlib
import os
import tempfile

import pytest

from deploy_mappings import two_stage_doc, write_doc
from parapipe.cli import main

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="host mappings use CPUs 0, 1")


def test_run_loads_and_coarsens_the_model_once(tmp_path, monkeypatch, capsys):
    path = write_doc(two_stage_doc("squeezenet"), tmp_path / "pareto.json")
    calls = collections.Counter()
    for module, name in (("parapipe.graph.zoo", "load_model"), ("parapipe.graph.opgraph", "import_onnx"),
                         ("parapipe.graph.coarsen", "coarsen")):
        original = getattr(importlib.import_module(module), name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        for holder in (module, "parapipe.app.run"):  # the defining module and the importer that holds a copy
            monkeypatch.setattr(importlib.import_module(holder), name, counted)
    assert main(["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "3"]) == 0
    assert calls == {"load_model": 1, "import_onnx": 1, "coarsen": 1}
    assert "point p0: 2 stage(s) (cpu0 | cpu1), 3 frames" in capsys.readouterr().out


def test_run_validates_the_plan_once_and_writes_no_bundle(tmp_path, monkeypatch, capsys):
    import ppexec.bundle_run
    import ppexec.executor
    import ppexec.plan

    path = write_doc(two_stage_doc("squeezenet"), tmp_path / "pareto.json")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where a bundle folder would go
    folders = []
    mkdtemp = tempfile.mkdtemp

    def recorded_mkdtemp(*args, **kwargs):
        folders.append(mkdtemp(*args, **kwargs))
        return folders[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recorded_mkdtemp)
    calls = collections.Counter()
    original = ppexec.plan.validate_plan

    def validate(plan):
        calls["validate_plan"] += 1
        return original(plan)

    for holder in (ppexec.plan, ppexec.executor):  # plan_from_doc's and the executor's
        monkeypatch.setattr(holder, "validate_plan", validate)

    def refuse(*args, **kwargs):
        raise AssertionError("a local run read a plan.json back")

    for holder in (ppexec.plan, ppexec.bundle_run):
        monkeypatch.setattr(holder, "plan_from_doc", refuse)
    trace = tmp_path / "trace.json"
    argv = ["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "3", "--trace", str(trace)]
    assert main(argv) == 0
    assert calls == {"validate_plan": 1}
    assert folders == [] and list(scratch.iterdir()) == []  # no bundle folder, plan.json or sub-model file
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["pareto.json", "trace.json"]
    out = capsys.readouterr().out
    assert "point p0: 2 stage(s) (cpu0 | cpu1), 3 frames" in out and "outputs_match: true" in out


def test_run_json_names_only_files_that_exist(tmp_path, monkeypatch, capsys):
    """``run --json``: ``trace_file`` is the absolute path of the trace written with ``--trace``, else null;
    ``report_file`` is null (a local run writes no report file)."""
    import json

    path = write_doc(two_stage_doc("squeezenet"), tmp_path / "pareto.json")
    argv = ["run", "squeezenet", "--mapping", str(path), "--point", "p0", "--frames", "3", "--db", "", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["report_file"] is None and doc["trace_file"] is None
    monkeypatch.chdir(tmp_path)  # a relative --trace comes back absolute
    assert main(argv + ["--trace", "t.json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["report_file"] is None and doc["trace_file"] == str((tmp_path / "t.json").resolve())
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
