"""Workload run benchmark: two models on this machine at once, the co-mapped best-throughput point of
``parapipe optimize A B --soc host`` against baseline (a) (each model's own best-throughput point from a separate
``optimize A --soc host`` / ``optimize B --soc host``, run together), run the same way, side by side.

Run from the repository root (a few minutes on a 2-core x86 machine: each model's host measurement, the
workload search, then the runs)::

    python benchmarks/workload_run_bench.py [--models inception_v1 squeezenet] [--rates 1,1] [--frames 100]
        [--repeats 3] [--work DIR]

Every run is :func:`parapipe.app.workload_run.run_workload_local` (the verified workload run: each model's
outputs and handed-over tensors compared with its own unsplit model; PUs two models use shared through one
lock each; frames admitted at the rates). The runs of the two points alternate ``--repeats`` times (every other
repeat in reverse order); the table gives medians. Also each model's best point run alone
(:func:`parapipe.app.run.run_local`) for reference.

Prints, per point: the workload throughput measured and predicted (workload frames per second; a workload frame
is ``rate`` frames of each model), per model its throughput and idle / loaded p50 latency, and whether every
output matched; then the ratio co-mapped / baseline (a) of the measured workload throughputs (median of the
per-repeat ratios).

Where ``parapipe optimize`` does not take several models yet, baseline (a) alone is run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_REPO, os.path.join(_REPO, "device_agents")]  # this checkout (parapipe, ppexec), not installed


def optimize(models: List[str], out: Path, db: Path, rates: Optional[str] = None) -> Path:
    """``parapipe optimize MODELS --soc host --out OUT`` (kept when OUT/pareto.json exists); its pareto.json."""
    from parapipe.cli import main

    path = out / "pareto.json"
    if not path.is_file():
        argv = ["optimize", *models, "--soc", "host", "--out", str(out), "--no-plot", "--db", str(db), "-q"]
        if rates and len(models) > 1:
            argv += ["--rates", rates]
        code = main(argv)
        if code != 0:
            raise SystemExit(f"parapipe {' '.join(argv)} failed ({code})")
    return path


def separate_members(models: List[str], paths: Dict[str, Path], rates: List[float]):
    """Baseline (a): each model's best-throughput point of its own pareto.json."""
    from parapipe.app.workload_run import WorkloadMember
    from parapipe.graph.zoo import load_model
    from parapipe.mapping import read_pareto, select_point

    members = []
    for model, rate in zip(models, rates):
        doc = read_pareto(str(paths[model]))
        members.append(WorkloadMember(model, load_model(model), doc, select_point(doc, "best-throughput"), rate,
                                      str(paths[model])))
    return members


def comapped(path: Path, models: List[str]):
    """The workload document's best-throughput point (``"co"``) and its baseline (a) point (``"a"``, strategy
    ``separate``, where the document has one), each ``(members, point id, predicted)``; None where optimize wrote
    no workload document."""
    try:
        from parapipe.mapping import read_mapping, select_workload_point
    except ImportError:
        return None
    from parapipe.app.workload_run import point_predicted, workload_members

    doc = read_mapping(str(path))
    if not hasattr(doc, "model_view"):
        return None
    point = select_workload_point(doc, "best-throughput")
    out = {"co": (workload_members(doc, point, str(path), models), point.id, point_predicted(point))}
    separate = [p for p in doc.points if p.strategy == "separate"]
    if separate:  # baseline (a) as the workload document evaluates it (jointly)
        out["a"] = (workload_members(doc, separate[0], str(path), models), separate[0].id,
                    point_predicted(separate[0]))
    return out


def run(members, point: str, predicted: Optional[dict], frames: int):
    from parapipe.app.workload_run import run_workload_local

    _, rep = run_workload_local(members, point, predicted, frames=frames, warmup=5, idle_frames=5)
    return rep


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["inception_v1", "squeezenet"])
    parser.add_argument("--rates", default=None, help="frames of each model per workload frame (default 1 each)")
    parser.add_argument("--frames", type=int, default=100, help="workload frames per run (default 100)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=None, help="folder keeping the pareto.json files between runs")
    parser.add_argument("--json", default=None, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    rates = [float(r) for r in args.rates.split(",")] if args.rates else [1.0] * len(args.models)
    work = Path(args.work or tempfile.mkdtemp(prefix="workload-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "profile.sqlite"
    paths = {m: optimize([m], work / m, db) for m in args.models}
    wl_path = None
    try:
        wl_path = optimize(args.models, work / "workload", db, args.rates)
    except SystemExit as exc:
        print(f"# no workload optimize here ({exc}); baseline (a) alone", file=sys.stderr)
    runs = {"baseline (a)": (separate_members(args.models, paths, rates), "separate", None)}
    co = comapped(wl_path, args.models) if wl_path is not None else None
    if co is not None:
        if "a" in co:
            runs["baseline (a)"] = co["a"]
        runs[f"co-mapped {co['co'][1]}"] = co["co"]
    from parapipe.app.run import run_local

    alone = {}
    for m in args.models:
        _, rep = run_local(m, str(paths[m]), "best-throughput", frames=max(20, args.frames // 2), idle_frames=5)
        alone[m] = (rep.throughput_per_s, rep.predicted_throughput_per_s, rep.outputs_match)
    results: Dict[str, list] = {k: [] for k in runs}
    keys = list(runs)
    for r in range(args.repeats):
        for key in (keys if r % 2 == 0 else keys[::-1]):
            members, pid, predicted = runs[key]
            results[key].append(run(members, pid, predicted, args.frames))
    print(f"models {' + '.join(args.models)} at rates {rates} on --soc host, {args.frames} workload frames, "
          f"{args.repeats} repeats (medians)")
    for m, (meas, pred, ok) in alone.items():
        print(f"  {m} alone, its best point: {meas:.1f}/s (predicted {pred:.1f}/s), outputs match: {ok}")
    print(f"{'point':<22} {'workload/s':>10} {'predicted':>10}  per model: throughput/s, idle / loaded p50 ms, "
          "match")
    doc = {"models": args.models, "rates": rates, "alone": alone, "points": {}}
    for key, reps in results.items():
        med = statistics.median(r.throughput_per_s for r in reps)
        pred = reps[0].predicted.get("throughput_per_s")
        parts = []
        for m in args.models:
            t = statistics.median(r.models[m].throughput_per_s for r in reps)
            idle = statistics.median(r.models[m].idle_latency_s for r in reps) * 1e3
            p50 = statistics.median(r.models[m].latency_p50_s for r in reps) * 1e3
            parts.append(f"{m} {t:.1f}/s (pred {reps[0].models[m].predicted['throughput_per_s']:.1f}), "
                         f"{idle:.1f} / {p50:.1f} ms")
        match = all(r.outputs_match for r in reps)
        print(f"{key:<22} {med:>10.2f} {pred if pred is None else round(pred, 2)!s:>10}  {'; '.join(parts)}; "
              f"outputs match: {match}")
        doc["points"][key] = [r.to_json() for r in reps]
    if len(keys) == 2:
        ratios = [b.throughput_per_s / a.throughput_per_s for a, b in zip(results[keys[0]], results[keys[1]])]
        print(f"ratio {keys[1]} / {keys[0]} (workload throughput, median of per-repeat ratios): "
              f"{statistics.median(ratios):.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
