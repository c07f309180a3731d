"""Start-up: the light commands import only what they use; the light readers agree with the full loaders."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parapipe.cli import main
from parapipe.soc import catalog, list_socs, load_soc

REPO = Path(__file__).resolve().parent.parent

#: Libraries the listing and help commands never use (each costs from 0.05 s to 0.6 s of start-up).
HEAVY = ("onnx", "onnxruntime", "ml_dtypes", "google.protobuf", "pydantic", "numpy", "networkx", "matplotlib",
         "ortools", "paramiko", "scipy", "tqdm", "ppexec", "parapipe.app")


def imported_modules(argv, cwd):
    """Every module the whole ``python -m parapipe ARGV`` process imports (from ``-X importtime``)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "device_agents"),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "parapipe", *argv], capture_output=True,
                          text=True, env=env, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "parapipe.cli" in rows, proc.stderr[-2000:]
    return set(rows)


@pytest.mark.parametrize("argv", [["--help"], ["socs"], ["models", "--json"], ["socs", "--help"],
                                  ["optimize", "--help"], ["run", "--help"]])
def test_light_commands_import_no_heavy_library(argv, tmp_path):
    """``--help``, ``socs`` and ``models`` (what a new user types first) import none of the libraries that the
    modelling, measuring and plotting commands load inside their handlers."""
    loaded = imported_modules(argv, tmp_path)
    heavy = [m for m in HEAVY if m in loaded]  # a submodule's import lists its package too
    assert heavy == [], f"parapipe {' '.join(argv)} imports {heavy}"


def test_catalog_reads_the_pu_names_that_load_soc_validates(tmp_path, monkeypatch):
    """The light reader behind ``parapipe socs`` gives every bundled profile's PUs in load_soc's order; a file
    it does not take literally (a YAML 1.1 boolean word as a key, a syntax error) is left to load_soc."""
    for name in list_socs():
        assert catalog.pu_names(name) == load_soc(name).pu_names
    monkeypatch.setattr(catalog, "data_dir", lambda _: tmp_path)
    (tmp_path / "odd.yaml").write_text("pus:\n  yes: {kind: cpu}\n")
    (tmp_path / "broken.yaml").write_text("pus: [\n")
    (tmp_path / "flat.yaml").write_text("pus: all\n")
    assert [catalog.pu_names(n) for n in ("odd", "broken", "flat", "missing")] == [None] * 4


def test_socs_reports_a_profile_it_cannot_list_as_load_soc_does(tmp_path, monkeypatch, capsys):
    """``parapipe socs`` validates a profile whose PUs it cannot read plainly: the one-line error of load_soc."""
    import parapipe.soc.loader as loader

    (tmp_path / "odd.yaml").write_text("schema_version: 1\nname: odd\npus: [\n")
    monkeypatch.setattr(catalog, "data_dir", lambda _: tmp_path)
    monkeypatch.setattr(loader, "data_dir", lambda _: tmp_path)
    assert main(["socs"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("parapipe: error: soc_profiles/odd.yaml: line ") and "invalid YAML" in err


def test_constants_kept_in_step_with_onnx():
    """What the light modules state without importing onnx matches the installed onnx."""
    import onnx
    import onnx.defs

    from parapipe.graph import zoo
    from parapipe.graph.support import STANDARD_DOMAINS

    assert {onnx.defs.ONNX_DOMAIN, "ai.onnx", onnx.defs.ONNX_ML_DOMAIN} <= STANDARD_DOMAINS
    assert zoo.light_models_dir() == Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    assert (zoo.light_models_dir() / "light_squeezenet.onnx").is_file()


#: What ``optimize --no-plot`` on a bundled profile never uses: plotting, boards and SSH, the profile database,
#: measuring runs, progress bars with stderr not a terminal.
NOT_FOR_OPTIMIZE = ("matplotlib", "PIL", "paramiko", "tqdm", "scipy", "sqlite3", "parapipe.report",
                    "parapipe.remote", "parapipe.deploy", "parapipe.profiledb", "parapipe.execution",
                    "parapipe.calibration", "parapipe.measure.submodels")


def test_optimize_without_plot_imports_only_what_it_uses(tmp_path):
    """``optimize MODEL --soc PROFILE --no-plot`` (a whole process) loads none of the libraries and layers its
    path does not run: each is imported inside the function that needs it."""
    loaded = imported_modules(["optimize", "alexnet", "--soc", "jetson_orin_nano", "--no-plot", "--out",
                               str(tmp_path / "out")], tmp_path)
    assert "parapipe.app.optimize" in loaded and (tmp_path / "out" / "pareto.json").is_file()
    assert [m for m in NOT_FOR_OPTIMIZE if m in loaded] == []


EXIT_SCRIPT = r"""
import atexit, sys, threading, time
from parapipe.cli import exit_without_teardown
atexit.register(lambda: open(sys.argv[1], "w").write("atexit ran"))
if sys.argv[2] == "thread":  # a thread still running: the usual exit, which waits for it
    threading.Thread(target=lambda: (time.sleep(0.3), open(sys.argv[1] + ".thread", "w").write("done"))).start()
sys.stdout.write("x" * 100000)  # buffered: a pipe is not a terminal
sys.stderr.write("last words")
exit_without_teardown(3)
print("not reached")
"""


@pytest.mark.parametrize("threads", ["none", "thread"])
def test_exit_without_teardown_keeps_every_effect_of_a_normal_exit(threads, tmp_path):
    """The CLI's fast exit (no module teardown) still gives the exit status, runs the atexit handlers, flushes
    buffered stdout and stderr, and, with another thread running, exits as usual (after that thread)."""
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(marker), threads], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert proc.stdout == "x" * 100000 and proc.stderr == "last words"
    assert marker.read_text() == "atexit ran"
    assert (tmp_path / "marker.thread").exists() == (threads == "thread")
