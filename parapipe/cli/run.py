"""``parapipe run``: execute one mapping of a pareto.json on this machine, check its outputs, record the
run (the library is :mod:`parapipe.app.run`)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional

from parapipe.cli.common import (
    StepBars, add_input_options, add_run_options, is_quiet, parse_frequencies, parsed_input_shapes, print_run_report,
    progress_bar)

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["add_parser", "handle"]


class _RunProgress:
    """Progress of a run on stderr: a tqdm bar of frames with the current throughput on a terminal, else the
    frame lines ``deploy`` prints (at most two a second)."""

    def __init__(self, frames: int, workload: bool = False):
        self.frames: int = frames
        self.workload = workload  # frames and throughput count workload frames
        self.bar: Optional["tqdm"] = None
        self.steps = StepBars()  # the set-up steps before the first frame (a status line on a terminal)

    def status(self, step: str) -> None:
        """Show a set-up step (no count) until the run's next event."""
        if sys.stderr.isatty():
            self.steps.status(step)

    def __call__(self, event: Dict[str, Any]) -> None:
        if event.get("event") != "progress" or is_quiet():
            return
        phase = event.get("phase")
        if phase in ("reference", "start") and sys.stderr.isatty():
            self.steps.status("computing the reference outputs" if phase == "reference" else "warming up")
            return
        self.steps.close()
        if not sys.stderr.isatty():
            from parapipe.app.deploy import describe_event

            # frames and throughput only: set-up steps stay quiet, so a refused run is one error line
            line = describe_event(event, self.workload) if event.get("phase") in ("run", "done") else None
            if line:
                print(f"parapipe: {line}", file=sys.stderr, flush=True)
            return
        if event.get("phase") == "run":
            if self.bar is None:
                self.bar = progress_bar(self.frames, "workload frames" if self.workload else "frames")
            self.bar.n = int(event.get("frames_done", 0))
            rate = "workload frames/s" if self.workload else "inf/s"
            self.bar.set_postfix_str(f"{event.get('throughput_per_s', 0.0):.1f} {rate}", refresh=True)
        elif event.get("phase") in ("idle", "done"):
            self.close()

    def close(self) -> None:
        """Close the bars shown, if any."""
        self.steps.close()
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def handle(args: argparse.Namespace) -> int:
    """``parapipe run``: one mapping run on this machine, checked, recorded; 1 when outputs differ."""
    from parapipe.execution.bindings import parse_binds
    from parapipe.app.run import record_run, run_local

    binds = parse_binds(args.bind)
    from parapipe.app.workload_run import is_workload_file

    if is_workload_file(args.mapping):
        return _handle_workload(args, binds)
    if len(args.model) != 1:
        from parapipe.errors import input_error

        raise input_error("model", None, f"{len(args.model)} models given for the mapping of one model "
                          f"({args.mapping})", "give the model the mapping was computed for")
    args.model = args.model[0]
    progress = _RunProgress(args.frames)
    progress.status("loading the model and cutting its stage sub-models")
    try:
        lm, rep = run_local(args.model, args.mapping, args.point, frames=args.frames, seed=args.seed, binds=binds,
                            trace=args.trace, on_event=progress, input_shapes=parsed_input_shapes(args),
                            feeds=args.feeds, dispatch=args.replica_dispatch,
                            frequencies_hz=parse_frequencies(args))
    finally:
        progress.close()
    record_run(args.db, lm.doc, lm.point, rep, "local")
    if args.json:
        _print_json(rep, args)
    else:
        from parapipe.mapping import stages_text

        print_run_report(f"point {rep.point}: {rep.stages} stage(s) ({stages_text(lm.point.stages)}), "
                          f"{rep.frames} frames", rep)
    return 0 if rep.outputs_match else 1


def _print_json(rep, args: argparse.Namespace) -> None:
    """``--json``: the run report with the paths of the files this run wrote, absolute (a local run writes no
    report file; the trace only with --trace)."""
    doc = rep.to_json()
    trace = Path(args.trace).resolve() if args.trace else None
    doc["report_file"] = None
    doc["trace_file"] = str(trace) if trace is not None and trace.is_file() else None
    print(json.dumps(doc))


def _handle_workload(args: argparse.Namespace, binds) -> int:
    """``parapipe run --mapping workload-pareto.json``: every model of the point at once; 1 when a model's
    outputs differ."""
    from parapipe.app.workload_run import record_workload_run, run_workload_file
    from parapipe.cli.common import print_workload_report

    from parapipe.errors import input_error

    if args.feeds or parsed_input_shapes(args):
        raise input_error("--feeds" if args.feeds else "--input-shape", None, "not taken with a workload mapping "
                          "(each model runs with the input shapes its part of the mapping stores, on seeded frames)",
                          "leave it out")
    progress = _RunProgress(args.frames, workload=True)
    progress.status("loading the models and cutting their stage sub-models")
    try:
        members, rep = run_workload_file(args.mapping, args.point, args.model, frames=args.frames, seed=args.seed,
                                         binds=binds, trace=args.trace, on_event=progress,
                                         dispatch=args.replica_dispatch, frequencies_hz=parse_frequencies(args))
    finally:
        progress.close()
    record_workload_run(args.db, members, rep, "local")
    if args.json:
        _print_json(rep, args)
    else:
        from parapipe.mapping import stages_text

        parts = "; ".join(f"{m.name} {stages_text(m.point.stages)}" for m in members)
        print_workload_report(f"workload point {rep.point}: {len(members)} models ({parts}), {rep.workload_frames} "
                              "workload frames", rep)
    return 0 if rep.outputs_match else 1


def add_parser(sub) -> None:
    """Register ``run`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("run", help="execute one mapping of a pareto.json on this machine, each PU bound as its "
                       "profile says (or substituted with --bind); check outputs; record the run")
    s.add_argument("model", nargs="*", help="the model the mapping was computed for (registry name or .onnx "
                   "path); for a workload mapping, one per model of the workload, in any order (matched by SHA-256, "
                   "else name), or none (each model "
                   "loaded from the registry by the name the mapping stores)")
    s.add_argument("--mapping", required=True, help="pareto.json written by 'parapipe optimize'")
    s.add_argument("--point", default="best-throughput",
                   help="point id, or best-throughput | best-latency | best-energy (default best-throughput)")
    s.add_argument("--frames", type=int, default=200, help="frames to push through the pipeline (default 200; for "
                   "a workload mapping, workload frames: rate frames of each model each)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--trace", default=None, help="write a Chrome trace (Perfetto) of the run to this file")
    add_run_options(s)
    add_input_options(s, feeds=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=handle)
