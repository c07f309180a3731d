"""Start-up benchmark: the whole-process time of the light commands and of one ``optimize``.

For ``parapipe --help``, ``parapipe socs``, ``parapipe models`` (goal: at most 0.3 s each), ``parapipe socs`` run
through the installed console script, and ``parapipe optimize densenet121 --soc black_sesame_a1000 --no-plot``:
the median over ``--runs`` runs of the wall time and of the CPU time (user + system of the child process, from
``resource.getrusage(RUSAGE_CHILDREN)``; a loaded machine stretches wall time far more than CPU time) of the
process run from this checkout, and with ``--before DIR`` the same from another checkout (for example
``git worktree add /tmp/before <commit>``), with the ratios before/now.

Bytecode: each checkout gets its own ``PYTHONPYCACHEPREFIX`` (a temporary folder, so the checkout stays clean)
warmed by one untimed run of each command, as after ``pip install`` (which writes the .pyc files);
``--no-bytecode`` times with ``PYTHONDONTWRITEBYTECODE=1`` instead, every module compiled from source on each run.

Run from the repository root::

    python benchmarks/startup_bench.py [--before DIR] [--runs N] [--no-bytecode]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent

#: Whole-process goal of the light commands, seconds: the project's target for a command a user types to look around.
LIGHT_TARGET_S = 0.3

#: (label, arguments after ``parapipe``, whether it runs through the console script, whether it is light).
COMMANDS: Tuple[Tuple[str, Tuple[str, ...], bool, bool], ...] = (
    ("--help", ("--help",), False, True),
    ("socs", ("socs",), False, True),
    ("socs (console script)", ("socs",), True, True),
    ("models", ("models",), False, True),
    ("optimize --help", ("optimize", "--help"), False, True),
    ("optimize densenet121 a1000", ("optimize", "densenet121", "--soc", "black_sesame_a1000", "--no-plot",
                                    "--out", "{out}"), False, False),
)


def console_script() -> Optional[Path]:
    """The ``parapipe`` console script installed next to this interpreter (None without one)."""
    path = Path(sys.executable).parent / "parapipe"
    return path if path.is_file() else None


def run_once(checkout: Path, argv: Sequence[str], env: Dict[str, str]) -> Tuple[float, float]:
    """Run one command to its end; returns (wall seconds, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(list(argv), cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_checkout(checkout: Path, runs: int, bytecode: bool) -> Dict[str, Tuple[float, float]]:
    """Median (wall, CPU) seconds of every command of :data:`COMMANDS` run from ``checkout``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(checkout), str(checkout / "device_agents")]))
    results: Dict[str, Tuple[float, float]] = {}
    script = console_script()
    with tempfile.TemporaryDirectory() as tmp:
        if bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        out = str(Path(tmp) / "out")
        for label, args, via_script, _ in COMMANDS:
            if via_script and script is None:
                continue
            head: List[str] = [sys.executable, str(script)] if via_script else [sys.executable, "-m", "parapipe"]
            argv = head + [a.format(out=out) for a in args]
            if bytecode:
                run_once(checkout, argv, env)  # writes the bytecode
            samples = [run_once(checkout, argv, env) for _ in range(runs)]
            results[label] = (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, help="another checkout to time the same commands in")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command (median; default 5)")
    ap.add_argument("--no-bytecode", action="store_true", help="compile every module from source on each run")
    args = ap.parse_args()
    bytecode = not args.no_bytecode
    now = time_checkout(ROOT, args.runs, bytecode)
    then = time_checkout(Path(args.before).resolve(), args.runs, bytecode) if args.before else None
    with os.popen("uptime") as up:
        load = up.read().strip().rpartition("load average:")[2].strip()
    print(f"Whole-process start-up, median of {args.runs} runs ({'with' if bytecode else 'without'} bytecode "
          f"cache; load average {load}); goal for the light commands: wall <= {LIGHT_TARGET_S} s on a quiet "
          "machine")
    head = f"{'command':<28} {'wall s':>7} {'CPU s':>7}"
    if then is not None:
        head += f" {'before wall':>12} {'before CPU':>11} {'wall ratio':>11} {'CPU ratio':>10}"
    print(head)
    for label, _, _, light in COMMANDS:
        if label not in now:
            continue
        wall, cpu = now[label]
        line = f"{label:<28} {wall:>7.3f} {cpu:>7.3f}"
        if then is not None and label in then:
            b_wall, b_cpu = then[label]
            line += f" {b_wall:>12.3f} {b_cpu:>11.3f} {b_wall / wall:>10.2f}x {b_cpu / cpu:>9.2f}x"
        if light:
            line += ("  ok" if wall <= LIGHT_TARGET_S else f"  wall over {LIGHT_TARGET_S} s, CPU within (a loaded "
                     "machine)" if cpu <= LIGHT_TARGET_S else f"  over {LIGHT_TARGET_S} s")
        print(line)
    if then is not None:
        print(f"before: {Path(args.before).resolve()}")


if __name__ == "__main__":
    main()
