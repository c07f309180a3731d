"""``parapipe profile``: time a model's distinct operators and blocks on a SoC's PUs into a profile database
(the job is :func:`parapipe.app.profiling.profile_job`)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List

from parapipe.cli.common import (
    StepBars, add_bind_option, add_host_options, add_input_options, host_spec, parsed_input_shapes, pct,
    print_measurement)

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe profile``: time every distinct operator (and block) into the profile database."""
    from parapipe.app.profiling import profile_job
    from parapipe.execution.bindings import parse_binds
    from parapipe.measure.profile import ProfileOptions
    from parapipe.measure.trust import warning

    binds = parse_binds(args.bind)
    pus = [p.strip() for p in args.pus.split(",") if p.strip()] if args.pus else None
    options = ProfileOptions(pus=pus, budget=args.budget, warmup=args.warmup, repeats=args.repeats,
                             blocks=not args.no_blocks, transfers=not args.no_transfers, seed=args.seed,
                             rounds=args.rounds, frequencies=_parse_points(args.frequencies))
    steps = StepBars()
    steps.status("starting the agent" + ("" if args.soc != "host" else " and measuring the board's cores"
                                         if args.host else " and measuring this machine"))
    try:
        rep = profile_job(args.model, args.soc, args.db, host_spec(args), args.python, options, args.batch,
                          args.max_blocks, lambda done, total: steps("profiling", done, total),
                          input_shapes=parsed_input_shapes(args), binds=binds)
    finally:
        steps.close()
    remedy = "profile again at a quieter moment, or with more --rounds (attempts spread over the run, the least " \
             "disturbed kept) or --repeats"
    if args.json:
        print(json.dumps(rep.to_json()))
        line = warning(rep.measurement, None, remedy) if rep.measurement else None
        if line:
            print(f"parapipe: {line}", file=sys.stderr)
        return 0
    print(f"{rep.model} (batch {rep.batch}) on {rep.soc} via {rep.host} (onnxruntime {rep.ort_version}), PUs "
          f"{', '.join(rep.pus)}: {rep.operators} operators = {rep.signatures} signatures, {rep.blocks} blocks = "
          f"{rep.block_signatures} distinct")
    print(f"measurements: {rep.planned} planned, {rep.measured} taken, {rep.skipped} already in {args.db}, "
          f"{len(rep.failed)} failed; {rep.elapsed_s:.1f} s")
    if rep.budget < 1.0:
        print(f"budget {rep.budget:g}: {rep.selected_signatures} of {rep.signatures} signatures fitted, "
              f"{rep.holdout_signatures} held out; calibrated prediction error on the held-out operators: MAPE "
              f"{pct(rep.holdout_mape_percent)} ({rep.holdout_measurements} measurements)")
    if binds:
        print("substituted: " + ", ".join(f"{pu}=CPUs {','.join(map(str, cpus))}" for pu, cpus in binds.items())
              + f" (CPU provider), recorded as {rep.soc}'s PUs; calibrate with the same --bind")
    for pu, points in rep.frequencies.items():
        print(f"{pu}: blocks measured at {', '.join(f'{hz / 1e6:g}' for hz in points)} MHz besides the board's own "
              "settings (set for each measurement, read back, restored)")
    for line in rep.failed[:10]:
        print(f"  failed: {line}")
    if rep.measurement and rep.measurement.get("measurements"):
        print_measurement(rep.measurement, None, remedy, "timed runs of each measurement")
    return 0


def _parse_points(items: List[str]) -> Dict[str, List[float]]:
    """``--frequencies big=1200,1800`` items as ``{pu: [Hz, ...]}``.

    Raises
    ------
    InputError
        An item that is not ``PU=MHZ[,MHZ...]`` with positive numbers, a PU given twice.
    """
    from parapipe.errors import input_error

    out: Dict[str, List[float]] = {}
    for item in items or []:
        pu, eq, rest = item.partition("=")
        pu = pu.strip()
        try:
            mhz = [float(v) for v in rest.split(",") if v.strip()]
        except ValueError:
            mhz = []
        if not eq or not pu or not mhz or not all(0 < v < float("inf") for v in mhz):
            raise input_error("--frequencies", None, f"{item!r} is not PU=MHZ[,MHZ...]",
                              "write e.g. --frequencies big=1200,1800")
        if pu in out:
            raise input_error("--frequencies", pu, "given twice", "list all of a PU's frequencies in one item")
        out[pu] = [v * 1e6 for v in mhz]
    return out


def add_parser(sub) -> None:
    """Register ``profile`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("profile", help="time every distinct operator (and block) of a model on the PUs of a SoC "
                       "into a profile database")
    s.add_argument("model", help="registry name or path to an .onnx file")
    s.add_argument("--soc", required=True, help="bundled profile name, a profile YAML path, or 'host'")
    s.add_argument("--db", default="profile.sqlite", help="profile database (default profile.sqlite)")
    s.add_argument("--pus", default=None, help="comma-separated PUs to profile (default: all)")
    s.add_argument("--budget", type=float, default=1.0, help="fraction of operator signatures to measure; the "
                   "calibrated model predicts the rest (default 1: all)")
    s.add_argument("--batch", type=int, default=None, help="batch size (default: the model's)")
    s.add_argument("--repeats", type=int, default=10, help="timed runs per measurement (default 10)")
    s.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    s.add_argument("--rounds", type=int, default=1, help="attempts per measurement spread over the run, lowest "
                   "median kept (default 1; more on a busy machine)")
    s.add_argument("--max-blocks", type=int, default=48, help="blocks as 'optimize --max-blocks' (default 48)")
    s.add_argument("--no-blocks", action="store_true", help="time operators only")
    s.add_argument("--no-transfers", action="store_true", help="do not time hand-offs between PUs")
    s.add_argument("--seed", type=int, default=0, help="seed of the held-out sample of --budget")
    s.add_argument("--frequencies", action="append", default=[], metavar="PU=MHZ[,MHZ...]",
                   help="also measure PU's blocks at these operating points (entries of its cpufreq policy's or "
                   "devfreq device's table; repeatable): the agent sets each for the measurement, reads it back "
                   "and restores the board's settings; stored with the frequency. Needs write access to the "
                   "board's cpufreq/devfreq files (root)")
    add_bind_option(s, "measure")
    add_input_options(s)
    add_host_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=handle)
