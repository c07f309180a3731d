"""Peer suite: every model of the onnx wheel's backend test data through ``parapipe optimize --soc host`` and
``parapipe run``, with the count of each outcome.

Models: ``onnx/backend/test/data/{node,simple,pytorch-converted,pytorch-operator}/*/model.onnx`` (whichever the
installed wheel ships) and ``onnx/backend/test/data/light/*.onnx``. Each model runs as a user runs it, in its own
process::

    parapipe optimize MODEL --soc host --time-stages 0 --no-plot --out TMP
    parapipe run MODEL --mapping TMP/pareto.json --frames 20 --db '' --json

with generated inputs, or with ``--test-data`` the backend test's own ``test_data_set_0/input_*.pb`` as
``--feeds``. Outcomes: ``pass`` (both exit 0, outputs match the unsplit model), ``refused`` (exit 2 with one line
``parapipe: error: ...``), ``mismatch`` (the run's outputs differ), ``crash`` (anything else: a traceback, a
timeout, another exit code). Prints one line per model that does not pass and the counts. Takes minutes (each
optimize measures this machine): not part of the test suite.

Run from the repository root::

    python benchmarks/backend_models.py [--test-data] [--jobs N] [--only SUBSTRING] [--timeout S]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
SUITES = ("node", "simple", "pytorch-converted", "pytorch-operator")


def backend_models() -> list[Path]:
    """The backend test models of the installed onnx wheel, sorted."""
    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    found = [p for suite in SUITES for p in sorted((data / suite).glob("*/model.onnx"))]
    return found + sorted((data / "light").glob("*.onnx"))


def _feeds_from_test_data(model: Path, dest: Path) -> bool:
    """Write the backend test's inputs as an .npz for ``--feeds``; False when the model has none."""
    files = sorted((model.parent / "test_data_set_0").glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        return False
    graph = onnx.load(str(model), load_external_data=False).graph
    inits = {t.name for t in graph.initializer}
    names = [vi.name for vi in graph.input if vi.name not in inits]
    arrays = {}
    for i, path in enumerate(files):
        tensor = onnx.TensorProto()
        tensor.ParseFromString(path.read_bytes())
        name = tensor.name or (names[i] if i < len(names) else f"input_{i}")
        if name in names:
            arrays[name] = numpy_helper.to_array(tensor)
    np.savez(dest, **arrays)
    return True


def _cli(args: list, timeout_s: float) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "device_agents"),
                                                         os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, "-m", "parapipe", *map(str, args)], capture_output=True, text=True,
                              timeout=timeout_s, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {timeout_s:.0f} s"
    return done.returncode, done.stdout, done.stderr


def _refusal(code: int, err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("parapipe: error: ")]
    if code == 2 and len(lines) == 1 and "Traceback" not in err:
        return lines[0]
    return ""


def try_model(model: Path, test_data: bool, timeout_s: float) -> tuple[str, str]:
    """(outcome, detail) of one model: pass / refused / mismatch / crash."""
    with tempfile.TemporaryDirectory(prefix="parapipe-peer-") as tmp:
        feeds = []
        if test_data and _feeds_from_test_data(model, Path(tmp) / "feeds.npz"):
            feeds = ["--feeds", Path(tmp) / "feeds.npz"]
        code, _, err = _cli(["optimize", model, "--soc", "host", "--time-stages", "0", "--no-plot", "--out",
                             Path(tmp) / "out", *feeds], timeout_s)
        if code != 0:
            line = _refusal(code, err)
            return ("refused", line) if line else ("crash", f"optimize exit {code}: {err.strip()[-300:]}")
        code, out, err = _cli(["run", model, "--mapping", Path(tmp) / "out" / "pareto.json", "--frames", "20",
                               "--db", "", "--json", *feeds], timeout_s)
        if code == 2 and _refusal(code, err):
            return "refused", "run: " + _refusal(code, err)
        try:
            report = json.loads(out)
        except ValueError:
            return "crash", f"run exit {code}: {err.strip()[-300:]}"
        if report.get("outputs_match") is not True:
            return "mismatch", f"max abs diff {report.get('max_abs_diff')}"
        return ("pass", "") if code == 0 else ("crash", f"run exit {code}: {err.strip()[-300:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test-data", action="store_true", help="feed the backend test's inputs (--feeds)")
    ap.add_argument("--jobs", type=int, default=1, help="models tried at once (default 1)")
    ap.add_argument("--only", default="", help="only models whose path contains this")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per command (default 300)")
    args = ap.parse_args(argv)
    models = [m for m in backend_models() if args.only in str(m)]
    counts: collections.Counter = collections.Counter()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for model, (outcome, detail) in zip(models, pool.map(lambda m: try_model(m, args.test_data, args.timeout),
                                                              models)):
            counts[outcome] += 1
            name = f"{model.parent.name}/{model.name}" if model.name == "model.onnx" else model.name
            if outcome != "pass":
                print(f"{outcome:8s} {name}: {detail}", flush=True)
    print(f"{len(models)} models ({'backend test inputs' if args.test_data else 'generated inputs'}): "
          + ", ".join(f"{counts[k]} {k}" for k in ("pass", "refused", "mismatch", "crash")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
