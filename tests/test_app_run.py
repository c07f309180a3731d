"""'parapipe run --mapping' in process: the model is loaded, imported and coarsened once per command."""
from __future__ import annotations

import collections
import importlib
import os

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
