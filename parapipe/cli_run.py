"""CLI commands that run a mapping for real and keep the runs: ``run``, ``deploy``, ``runs`` (registered by
:func:`add_run_parsers`; the logic lives in :mod:`parapipe.runtime.run` and :mod:`parapipe.deploy.deploy`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .cli import _input_shapes, _progress_bar, add_input_options


def _print_report(head: str, rep) -> None:
    """The measured-next-to-predicted table of a :class:`ppexec.RunReport`, shared by ``run`` and ``deploy``."""
    def fmt(value, scale=1.0):
        return f"{value * scale:>10.2f}" if value is not None else f"{'-':>10}"

    print(head)
    print(f"{'':<20} {'measured':>10} {'predicted':>10}")
    print(f"{'throughput/s':<20} {rep.throughput_per_s:>10.2f} {fmt(rep.predicted_throughput_per_s)}")
    print(f"{'latency idle ms':<20} {rep.idle_latency_s * 1e3:>10.2f} {fmt(rep.predicted_latency_s, 1e3)}"
          f"  (one frame at a time, {rep.idle_frames} frames)")
    print(f"{'latency loaded ms':<20} {rep.latency_p50_s * 1e3:>10.2f} {'':>10}  (p50 with the pipeline full; "
          f"p99 {rep.latency_p99_s * 1e3:.2f})")
    predicted_j = rep.predicted.get("energy_j")
    if rep.energy_j is not None:
        print(f"{'energy mJ':<20} {rep.energy_j * 1e3:>10.2f} {fmt(predicted_j, 1e3)}  (measured with the "
              "profile's power sensor)")
    else:
        print(f"{'energy mJ':<20} {'-':>10} {fmt(predicted_j, 1e3)}  (estimate: the profile names no power sensor)")
    if rep.dispatch:
        how = ("each replica took the next frame when free" if rep.dispatch == "pull"
               else "dealt in the predicted shares")
        print(f"replicated stages: {how} (--replica-dispatch {rep.dispatch})")
    print(f"outputs_match: {str(rep.outputs_match).lower()}  (max abs diff {rep.max_abs_diff:.3g}; "
          f"{rep.checked_tensors} handed-over tensors, max relative diff {rep.max_scaled_diff:.3g})")
    if rep.substituted:
        subs = ", ".join(f"{pu}=CPUs {','.join(map(str, cpus))}" for pu, cpus in rep.substituted.items())
        print(f"substituted: {subs} (CPU provider); the prediction is for the profile's bindings and does not "
              "apply to this run")


class _RunProgress:
    """Progress of a run on stderr: a tqdm bar of frames with the current throughput on a terminal, else the
    frame lines ``deploy`` prints (at most two a second)."""

    def __init__(self, frames: int):
        self.frames, self.bar = frames, None

    def __call__(self, event) -> None:
        if event.get("event") != "progress":
            return
        if not sys.stderr.isatty():
            from .deploy.deploy import describe_event

            # frames and throughput only: set-up steps stay quiet, so a refused run is one error line
            line = describe_event(event) if event.get("phase") in ("run", "done") else None
            if line:
                print(f"parapipe: {line}", file=sys.stderr, flush=True)
            return
        if event.get("phase") == "run":
            if self.bar is None:
                self.bar = _progress_bar(self.frames, "frames")
            self.bar.n = int(event.get("frames_done", 0))
            self.bar.set_postfix_str(f"{event.get('throughput_per_s', 0.0):.1f} inf/s", refresh=True)
        elif event.get("phase") in ("idle", "done"):
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def cmd_run(args) -> int:
    from .runtime.mapping import parse_binds
    from .runtime.run import record_run, run_local

    binds = parse_binds(args.bind)
    progress = _RunProgress(args.frames)
    try:
        lm, rep = run_local(args.model, args.mapping, args.point, frames=args.frames, seed=args.seed, binds=binds,
                            trace=args.trace, on_event=progress, input_shapes=_input_shapes(args),
                            feeds=args.feeds, dispatch=args.replica_dispatch)
    finally:
        progress.close()
    record_run(args.db, lm.doc, lm.point, rep, "local")
    if args.json:
        print(json.dumps(rep.to_json()))
    else:
        from .mapping import stages_text

        _print_report(f"point {rep.point}: {rep.stages} stage(s) ({stages_text(lm.point.stages)}), "
                      f"{rep.frames} frames", rep)
    return 0 if rep.outputs_match else 1


def cmd_deploy(args) -> int:
    from .deploy.deploy import DeployOptions, deploy, describe_event
    from .deploy.hostspec import HostSpec
    from .mapping import read_pareto, select_point
    from .runtime.mapping import parse_binds
    from .runtime.run import record_run

    spec = HostSpec.parse(args.host, identity=args.identity, known_hosts=args.known_hosts,
                          trust_new_host=args.trust_new_host, timeout_s=args.ssh_timeout)
    timeouts = {} if args.ssh_timeout is None else {"connect_timeout_s": args.ssh_timeout,
                                                     "command_timeout_s": args.ssh_timeout}
    options = DeployOptions(frames=args.frames, warmup=args.warmup, seed=args.seed, keep=args.keep,
                            remote_dir=args.remote_dir, python=args.python, dispatch=args.replica_dispatch,
                            **timeouts)
    binds = parse_binds(args.bind)

    def show(event) -> None:
        line = describe_event(event)
        if line:
            print(f"parapipe: {line}", file=sys.stderr, flush=True)

    rep = deploy(args.model, args.mapping, args.point, spec, Path(args.out), options, on_event=show, binds=binds,
                 input_shapes=_input_shapes(args), feeds=args.feeds)
    doc = read_pareto(args.mapping)
    point = select_point(doc, args.point, path=args.mapping)
    record_run(args.db, doc, point, rep.report, rep.host)
    r = rep.report
    if args.json:
        print(json.dumps(rep.to_json()))
    else:
        from .mapping import stages_text

        _print_report(f"point {r.point} on {rep.host}: {r.stages} stage(s) ({stages_text(point.stages)}), "
                      f"{r.frames} frames", r)
        print(f"wrote {rep.report_path} and {rep.trace_path}"
              + (f"; bundle kept in {rep.remote_folder}" if rep.kept else ""))
    return 0 if r.outputs_match else 1


def cmd_runs(args) -> int:
    from .calibration.predict import open_existing_db
    from .profiledb.runs import list_runs, write_runs_csv

    db = open_existing_db(args.db)
    try:
        runs = list_runs(db, model=args.model, soc=args.soc)
    finally:
        db.close()
    if args.csv:
        write_runs_csv(runs, Path(args.csv))
        print(f"wrote {len(runs)} run(s) to {args.csv}", file=sys.stderr)
    if args.json:
        from dataclasses import asdict

        print(json.dumps([asdict(r) for r in runs]))
    elif not args.csv:
        print(f"{'id':>4} {'recorded':<20} {'model':<14} {'soc':<16} {'point':<8} {'thr/s':>8} {'pred/s':>8} "
              f"{'idle ms':>8} {'pred ms':>8} {'mJ':>8} {'pred mJ':>8} {'match':<5} runner")
        for r in runs:
            pred = 1.0 / r.predicted_period_s if r.predicted_period_s else None
            applies = "" if r.prediction_applies else " (--bind)"
            print(f"{r.id:>4} {r.recorded_at[:19]:<20} {r.model[:14]:<14} {r.soc[:16]:<16} {r.point[:8]:<8} "
                  f"{r.throughput_per_s:>8.2f} {(f'{pred:.2f}' if pred else '-'):>8} "
                  f"{r.idle_latency_s * 1e3:>8.2f} {(r.predicted_latency_s or 0) * 1e3:>8.2f} "
                  f"{(f'{r.energy_j * 1e3:.2f}' if r.energy_j is not None else '-'):>8} "
                  f"{(f'{r.predicted_energy_j * 1e3:.2f}' if r.predicted_energy_j is not None else '-'):>8} "
                  f"{str(r.outputs_match).lower():<5} {r.runner}{applies}")
        if not runs:
            print(f"no runs in {args.db} yet: 'parapipe run' and 'parapipe deploy' record them", file=sys.stderr)
        elif all(r.energy_j is None for r in runs):
            print("mJ: no run measured its energy (no power_sensor in the profiles): predicted energies are estimates",
                  file=sys.stderr)
    return 0


def _add_run_options(s) -> None:
    """``--bind``, ``--replica-dispatch`` and ``--db`` of ``run`` and ``deploy``."""
    s.add_argument("--bind", action="append", default=[], metavar="PU=CPUS",
                   help="run PU on these CPUs (0, 0-3, 0,2) with ONNX Runtime's CPU provider instead of its profile "
                   "binding; repeatable. The report names substituted PUs (their prediction does not apply)")
    s.add_argument("--replica-dispatch", default="pull", metavar="POLICY",
                   help="how a replicated stage's frames reach its replicas: pull (default; each replica takes the "
                   "next frame when it is free, so each gets frames in proportion to its speed as it runs) or "
                   "shares (dealt in the proportions the cost model predicted, the same sequence every run)")
    s.add_argument("--db", default="profile.sqlite", help="profile database whose 'runs' table keeps the run "
                   "(default profile.sqlite, as 'parapipe profile'); '' keeps nothing")


def add_run_parsers(sub) -> None:
    """Register ``run``, ``deploy`` and ``runs`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("run", help="execute one mapping of a pareto.json on this machine, each PU bound as its "
                       "profile says (or substituted with --bind); check outputs; record the run")
    s.add_argument("model", help="the model the mapping was computed for (registry name or .onnx path)")
    s.add_argument("--mapping", required=True, help="pareto.json written by 'parapipe optimize'")
    s.add_argument("--point", default="best-throughput",
                   help="point id, or best-throughput | best-latency | best-energy (default best-throughput)")
    s.add_argument("--frames", type=int, default=200, help="frames to push through the pipeline (default 200)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--trace", default=None, help="write a Chrome trace (Perfetto) of the run to this file")
    _add_run_options(s)
    add_input_options(s, feeds=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("deploy", help="run one mapping of a pareto.json on a board over SSH, each PU bound as its "
                       "profile says (or substituted with --bind); fetch its report and trace; record the run")
    s.add_argument("model")
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
    s.add_argument("--remote-dir", default=".cache/parapipe/deploy",
                   help="folder of bundles on the host (default ~/.cache/parapipe/deploy)")
    s.add_argument("--python", default="python3", help="Python on the host, by explicit path where the login "
                   "shell's PATH may find another one (default python3)")
    s.add_argument("--ssh-timeout", type=float, default=None, metavar="S",
                   help="deadline of connecting and of each SSH step but the run, s (default 10 s to connect, "
                   "120 s a command)")
    s.add_argument("--out", default="out/deploy", help="local folder for report.json and trace.json "
                   "(default out/deploy)")
    _add_run_options(s)
    add_input_options(s, feeds=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_deploy)

    s = sub.add_parser("runs", help="list the measured runs kept in a profile database, or export them as CSV")
    s.add_argument("--db", default="profile.sqlite", help="profile database (default profile.sqlite)")
    s.add_argument("--model", default=None, help="only runs of this model name")
    s.add_argument("--soc", default=None, help="only runs of this SoC profile name")
    s.add_argument("--csv", default=None, help="write the runs to this CSV file")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_runs)
