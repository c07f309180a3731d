"""``parapipe deploy``: run one mapping of a pareto.json on a board over SSH, fetch its report and trace,
record the run (the library is :mod:`parapipe.app.deploy`)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict

from parapipe.cli.common import (add_input_options, add_run_options, is_quiet, parse_frequencies, parsed_input_shapes,
                                  print_run_report)

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe deploy``: one mapping run on a board over SSH, results fetched and recorded; 1 when outputs
    differ."""
    from parapipe.app.deploy import DeployOptions, deploy, describe_event, with_ssh_timeout
    from parapipe.remote.hostspec import HostSpec
    from parapipe.mapping import read_pareto, select_point
    from parapipe.execution.bindings import parse_binds
    from parapipe.app.run import record_run

    spec = HostSpec.parse(args.host, identity=args.identity, known_hosts=args.known_hosts,
                          trust_new_host=args.trust_new_host, timeout_s=args.ssh_timeout)
    remote = {} if args.remote_dir is None else {"remote_dir": args.remote_dir}
    options = with_ssh_timeout(DeployOptions(frames=args.frames, warmup=args.warmup, seed=args.seed, keep=args.keep,
                                             python=args.python, dispatch=args.replica_dispatch, **remote),
                               args.ssh_timeout)
    binds = parse_binds(args.bind)

    def show(event: Dict[str, Any]) -> None:
        line = None if is_quiet() else describe_event(event)
        if line:
            print(f"parapipe: {line}", file=sys.stderr, flush=True)

    from parapipe.app.workload_run import is_workload_file

    if is_workload_file(args.mapping):
        return _deploy_workload(args, spec, options, binds, show)
    if len(args.model) != 1:
        from parapipe.errors import input_error

        raise input_error("model", None, f"{len(args.model)} models given for the mapping of one model "
                          f"({args.mapping})", "give the model the mapping was computed for")
    args.model = args.model[0]
    rep = deploy(args.model, args.mapping, args.point, spec, Path(args.out), options, on_event=show, binds=binds,
                 input_shapes=parsed_input_shapes(args), feeds=args.feeds, frequencies_hz=parse_frequencies(args))
    doc = read_pareto(args.mapping)
    point = select_point(doc, args.point, path=args.mapping)
    record_run(args.db, doc, point, rep.report, rep.host)
    r = rep.report
    if args.json:
        print(json.dumps(rep.to_json()))
    else:
        from parapipe.mapping import stages_text

        print_run_report(f"point {r.point} on {rep.host}: {r.stages} stage(s) ({stages_text(point.stages)}), "
                          f"{r.frames} frames", r)
        print(f"wrote {rep.report_path} and {rep.trace_path}"
              + (f"; bundle kept in {rep.remote_folder}" if rep.kept else ""))
    return 0 if r.outputs_match else 1


def _deploy_workload(args: argparse.Namespace, spec, options, binds, show) -> int:
    """``parapipe deploy --mapping workload-pareto.json``: every model of the point at once on the board; 1 when a
    model's outputs differ."""
    from parapipe.app.deploy import deploy_workload
    from parapipe.app.workload_run import load_workload, point_predicted, record_workload_run, workload_members
    from parapipe.cli.common import print_workload_report
    from parapipe.errors import input_error
    from parapipe.mapping import read_workload, select_workload_point

    if args.feeds or parsed_input_shapes(args):
        raise input_error("--feeds" if args.feeds else "--input-shape", None, "not taken with a workload mapping "
                          "(each model runs with the input shapes its part of the mapping stores, on seeded frames)",
                          "leave it out")
    doc = read_workload(args.mapping)
    pt = select_workload_point(doc, args.point, path=args.mapping)
    members = workload_members(doc, pt, args.mapping, list(args.model) or None)
    mappings = load_workload(members, binds, parse_frequencies(args))
    rep = deploy_workload(mappings, {m.name: m.rate for m in members}, pt.id, point_predicted(pt), spec,
                          Path(args.out), options, on_event=show)
    r: Any = rep.report
    record_workload_run(args.db, members, r, rep.host)
    if args.json:
        print(json.dumps(rep.to_json()))
    else:
        from parapipe.mapping import stages_text

        parts = "; ".join(f"{m.name} {stages_text(m.point.stages)}" for m in members)
        print_workload_report(f"workload point {r.point} on {rep.host}: {len(members)} models ({parts}), "
                              f"{r.workload_frames} workload frames", r)
        print(f"wrote {rep.report_path} and {rep.trace_path}"
              + (f"; bundle kept in {rep.remote_folder}" if rep.kept else ""))
    return 0 if r.outputs_match else 1


def add_parser(sub) -> None:
    """Register ``deploy`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("deploy", help="run one mapping of a pareto.json on a board over SSH, each PU bound as its "
                       "profile says (or substituted with --bind); fetch its report and trace; record the run")
    s.add_argument("model", nargs="*", help="the model the mapping was computed for (registry name or .onnx "
                   "path); for a workload mapping, one per model in the workload's order, or none")
    s.add_argument("--mapping", required=True, help="pareto.json written by 'parapipe optimize' for the board's "
                   "profile")
    s.add_argument("--point", default="best-throughput",
                   help="point id, or best-throughput | best-latency | best-energy (default best-throughput)")
    s.add_argument("--host", required=True, help="user@address[:port]")
    s.add_argument("--identity", default=None, help="private key file (default: ssh-agent and ~/.ssh/id_*)")
    s.add_argument("--known-hosts", default=None, help="known_hosts file (default ~/.ssh/known_hosts)")
    s.add_argument("--trust-new-host", action="store_true",
                   help="accept a host key not in known_hosts and save it (a changed key is always refused)")
    s.add_argument("--frames", type=int, default=200, help="frames to push through the pipeline (default 200)")
    s.add_argument("--warmup", type=int, default=5)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--keep", action="store_true", help="leave the bundle on the host")
    s.add_argument("--remote-dir", default=None,
                   help="folder of bundles on the host (default ~/.cache/parapipe/deploy, or deploy/ in "
                   "$PARAPIPE_HOST_CACHE_DIR when set)")
    s.add_argument("--python", default="python3", help="Python on the host, by explicit path where the login "
                   "shell's PATH may find another one (default python3)")
    s.add_argument("--ssh-timeout", type=float, default=None, metavar="S",
                   help="deadline of connecting and of each SSH step but the run, s (default 10 s to connect and "
                   "for the host to answer a channel or command request, 120 s a command)")
    s.add_argument("--out", default="out/deploy", help="local folder for report.json and trace.json "
                   "(default out/deploy)")
    add_run_options(s)
    add_input_options(s, feeds=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=handle)
