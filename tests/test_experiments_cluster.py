"""experiments.reproduce on a real Dask cluster: a ``dask scheduler`` and two ``dask worker`` processes on
loopback, started in a temporary folder outside the checkout with only what ``pip install .`` installs on their
import path, give the same tables as the local run; a client of another parapipe version is refused in one line.

What the cluster processes can import: the packages that pyproject.toml's ``[tool.setuptools]`` table declares
(``packages``, ``package-dir``, ``package-data``), copied from this checkout into a temporary site folder
(:func:`install_tree`), first on their ``PYTHONPATH``. So they import this checkout's parapipe (not an older
installed one), and never the checkout's ``experiments/`` folder unless pyproject.toml installs it.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Seconds for one sweep of ``--quick`` (about 2 minutes on a loaded 2-core machine; experiments/README.md).
SWEEP_TIMEOUT_S = 900
#: Seconds for the scheduler to write its address file and for both workers to join.
START_TIMEOUT_S = 120

#: Columns that hold times measured during the run (they differ between two runs of the same sweep).
TIME_COLUMNS = {"search_s", "prepare_s", "cost_s", "break_even_inferences", "break_even_time_s"}


def _toml(path: Path) -> dict:
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs Python >= 3.11 or tomli")
    with open(path, "rb") as f:
        return tomllib.load(f)


def _package_folder(pkg: str, package_dir: Dict[str, str]) -> Path:
    """The source folder of ``pkg`` as setuptools resolves it: the longest dotted prefix in ``package-dir``."""
    parts = pkg.split(".")
    for n in range(len(parts), -1, -1):
        prefix = ".".join(parts[:n])
        if prefix in package_dir:
            return ROOT.joinpath(package_dir[prefix], *parts[n:])
    return ROOT.joinpath(*parts)


def install_tree(dest: Path) -> List[str]:
    """Copy into ``dest`` what ``pip install .`` installs from this checkout (pure Python: files only).

    Follows pyproject.toml's ``[tool.setuptools]``: each listed package's ``*.py`` files from its folder (through
    ``package-dir``) plus its ``package-data`` patterns. Returns the packages copied.
    """
    st = _toml(ROOT / "pyproject.toml")["tool"]["setuptools"]
    assert isinstance(st.get("packages"), list), "pyproject.toml: this test expects an explicit packages list"
    package_dir, package_data = st.get("package-dir", {}), st.get("package-data", {})
    for pkg in st["packages"]:
        src, dst = _package_folder(pkg, package_dir), dest.joinpath(*pkg.split("."))
        dst.mkdir(parents=True, exist_ok=True)
        for pattern in ["*.py", *package_data.get(pkg, [])]:
            for f in src.glob(pattern):
                if f.is_file():
                    shutil.copy2(f, dst / f.name)
    return list(st["packages"])


def _start(cmd: List[str], cwd: Path, env: Dict[str, str], log: Path) -> subprocess.Popen:
    """Start ``cmd`` in its own process group (so a nanny's worker child is stopped with it)."""
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(procs: List[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def _logs(folder: Path) -> str:
    return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}" for f in sorted(folder.glob("*.log")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``(address, folder)`` of a running scheduler with two one-thread workers, all outside the checkout."""
    pytest.importorskip("distributed")
    folder = tmp_path_factory.mktemp("cluster")
    site = folder / "site"
    install_tree(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DASK_"))}
    env.update(PYTHONPATH=str(site), PYTHONNOUSERSITE="1", OMP_NUM_THREADS="1")
    sched_file = folder / "scheduler.json"
    procs = [_start([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--no-dashboard", "--scheduler-file", str(sched_file)], folder, env, folder / "scheduler.log")]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        address = None
        while address is None:
            assert procs[0].poll() is None, f"dask scheduler exited:\n{_logs(folder)}"
            assert time.monotonic() < deadline, f"no scheduler address in {START_TIMEOUT_S} s:\n{_logs(folder)}"
            try:
                address = json.loads(sched_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)
        for i in (1, 2):
            (folder / f"w{i}").mkdir()
            procs.append(_start([sys.executable, "-m", "dask", "worker", address, "--nthreads", "1",
                                 "--host", "127.0.0.1", "--no-dashboard", "--name", f"w{i}",
                                 "--local-directory", str(folder / f"w{i}")], folder, env, folder / f"w{i}.log"))
        from distributed import Client

        with Client(address, timeout="30s", set_as_default=False) as client:
            client.wait_for_workers(2, timeout=max(1.0, deadline - time.monotonic()))
            # The cluster's own import path: this checkout's experiments/ folder is not on it.
            paths = client.run(lambda: __import__("sys").path)
            assert all(str(ROOT) not in p for ps in paths.values() for p in ps), paths
        yield address, folder
    finally:
        _stop(procs)


def _reproduce(*args: str, timeout_s: float = SWEEP_TIMEOUT_S) -> subprocess.CompletedProcess:
    """``python -m experiments.reproduce ARGS`` from the repository root, as the README runs it."""
    return subprocess.run([sys.executable, "-m", "experiments.reproduce", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout_s)


def _csv(path: Path) -> list:
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in rows]


def _front(path: Path) -> dict:
    doc = json.loads(path.read_text())
    doc.pop("search")  # the search's own statistics: times, and states counted within time limits
    return doc


@pytest.mark.slow
def test_sweep_on_a_real_cluster_writes_the_local_tables(cluster, tmp_path):
    address, folder = cluster
    dask_out, local_out = tmp_path / "dask", tmp_path / "local"
    # The quick configuration with one small model (the full --quick sweep is the same code and takes minutes).
    quick = (ROOT / "experiments" / "configs" / "quick.yaml").read_text()
    assert "models: [inception_v1, mobilenet_v2, yolo_detector]" in quick
    config = tmp_path / "small.yaml"
    config.write_text(quick.replace("name: quick", "name: small").replace(
        "models: [inception_v1, mobilenet_v2, yolo_detector]", "models: [squeezenet]"))
    run = _reproduce("--config", str(config), "--scheduler", address, "--out", str(dask_out))
    assert run.returncode == 0, f"{run.stderr[-4000:]}\n{_logs(folder)}"
    run = _reproduce("--config", str(config), "--workers", "2", "--out", str(local_out))
    assert run.returncode == 0, run.stderr[-4000:]
    for table in ("points.csv", "energy_efficiency.csv", "search_times.csv", "break_even.csv"):
        assert _csv(dask_out / table) == _csv(local_out / table), table
    fronts = sorted(p.name for p in (local_out / "fronts").iterdir())
    assert len(fronts) == 2 and sorted(p.name for p in (dask_out / "fronts").iterdir()) == fronts
    for name in fronts:
        assert _front(dask_out / "fronts" / name) == _front(local_out / "fronts" / name), name
    figures = sorted(p.name for p in (local_out / "figures").iterdir())
    assert sorted(p.name for p in (dask_out / "figures").iterdir()) == figures and len(figures) == 2 * 3 + 1
    assert f"Dask scheduler {address}" in (dask_out / "report.md").read_text()


def test_a_cluster_of_another_parapipe_version_is_refused_in_one_line(cluster, tmp_path, monkeypatch, capsys):
    import parapipe
    from experiments import reproduce

    address, _ = cluster
    monkeypatch.setattr(parapipe, "__version__", "0.0.0+other")
    out = tmp_path / "out"
    assert reproduce.main(["--quick", "--scheduler", address, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"the scheduler {address} has parapipe" in err and "this client 0.0.0+other" in err
    assert "pip install 'parapipe[experiments]==0.0.0+other'" in err
    assert list(tmp_path.iterdir()) == []
