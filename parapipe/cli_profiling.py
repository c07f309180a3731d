"""CLI commands that measure: ``profile``, ``calibrate``, ``import``, ``soc detect`` (registered by
:func:`add_profiling_parsers`; the logic lives in :mod:`parapipe.profiling.jobs`)."""
from __future__ import annotations

import json

from .cli import _Bar, _input_shapes, add_input_options


def _add_host_options(s) -> None:
    """--host/--identity/--known-hosts/--trust-new-host/--python of the commands that reach a board."""
    s.add_argument("--host", default=None, help="user@address[:port] of the board (default: this machine)")
    s.add_argument("--identity", default=None, help="private key file (default: ssh-agent and ~/.ssh/id_*)")
    s.add_argument("--known-hosts", default=None, help="known_hosts file (default ~/.ssh/known_hosts)")
    s.add_argument("--trust-new-host", action="store_true",
                   help="accept a host key not in known_hosts and save it (a changed key is always refused)")
    s.add_argument("--python", default=None, help="Python on the board (default python3; here: this one)")
    s.add_argument("--ssh-timeout", type=float, default=None, metavar="S",
                   help="deadline of connecting and of each short SSH step, s (default 10 s to connect, 60 s "
                   "a step); a host that stops answering fails after it")


def _host_spec(args):
    if not args.host:
        return None
    from .deploy.hostspec import HostSpec

    return HostSpec.parse(args.host, identity=args.identity, known_hosts=args.known_hosts,
                          trust_new_host=args.trust_new_host, timeout_s=args.ssh_timeout)


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1f}%"


def cmd_profile(args) -> int:
    from .profiling.jobs import profile_job
    from .measure.profile import ProfileOptions

    pus = [p.strip() for p in args.pus.split(",") if p.strip()] if args.pus else None
    options = ProfileOptions(pus=pus, budget=args.budget, warmup=args.warmup, repeats=args.repeats,
                             blocks=not args.no_blocks, transfers=not args.no_transfers, seed=args.seed,
                             rounds=args.rounds)
    bar = _Bar("profiling")
    try:
        rep = profile_job(args.model, args.soc, args.db, _host_spec(args), args.python, options, args.batch,
                          args.max_blocks, bar, input_shapes=_input_shapes(args))
    finally:
        bar.close()
    if args.json:
        print(json.dumps(rep.to_json()))
        return 0
    print(f"{rep.model} (batch {rep.batch}) on {rep.soc} via {rep.host} (onnxruntime {rep.ort_version}), PUs "
          f"{', '.join(rep.pus)}: {rep.operators} operators = {rep.signatures} signatures, {rep.blocks} blocks = "
          f"{rep.block_signatures} distinct")
    print(f"measurements: {rep.planned} planned, {rep.measured} taken, {rep.skipped} already in {args.db}, "
          f"{len(rep.failed)} failed; {rep.elapsed_s:.1f} s")
    if rep.budget < 1.0:
        print(f"budget {rep.budget:g}: {rep.selected_signatures} of {rep.signatures} signatures fitted, "
              f"{rep.holdout_signatures} held out; calibrated prediction error on the held-out operators: MAPE "
              f"{_pct(rep.holdout_mape_percent)} ({rep.holdout_measurements} measurements)")
    for line in rep.failed[:10]:
        print(f"  failed: {line}")
    return 0


def _err(mape, worst) -> str:
    return "-" if mape is None else f"{mape:5.1f} / {worst:+6.1f}"


def cmd_calibrate_runs(args) -> int:
    """``calibrate --runs``: fit the pipeline-level terms on measured runs; print parameters and errors."""
    from dataclasses import asdict

    from .calibration.runfit import TERM_NAMES
    from .calibration.runs_calibrate import calibrate_runs_job

    from .soc.resolve import is_host, resolve_soc
    from .workflow import prepare

    fit = tuple(t.strip() for t in (args.fit or ",".join(TERM_NAMES)).split(",") if t.strip())
    db = args.db if is_host(args.soc) else None  # on host: the blocks' measurements come from the database

    def problem_of(model: str):
        return prepare(model, args.soc, max_blocks=args.max_blocks, db=db).problem

    res = calibrate_runs_job(resolve_soc(args.soc), args.runs or None, args.db, args.blocks, args.out,
                             args.model or (), fit, problem_of)
    f = res.fit
    if args.json:
        def finite(d: dict) -> dict:  # strict JSON: an unbounded parameter's upper bound is null
            return {k: (None if isinstance(v, float) and v in (float("inf"), float("-inf")) else v) for k, v in d.items()}

        print(json.dumps({"params": [finite(asdict(p)) for p in f.params + (
                              [*f.power.delta_w.values(), f.power.base_w] if f.power else [])],
                          "errors": {k: asdict(v) for k, v in f.overall.items()},
                          "per_model": {m: {k: asdict(v) for k, v in e.items()} for m, e in f.per_model.items()},
                          "out": str(res.out) if res.out else None}))
        return 0
    models = list(f.per_model)
    print(f"calibrate --runs: {len(f.runs)} runs of {', '.join(models)} on {res.soc.name}")
    print(f"{'parameter':<26} {'value':>12} {'bounds':>20} {'±1σ':>12}")
    powers = [*f.power.delta_w.values(), f.power.base_w] if f.power else []
    for p in f.params + powers:
        if not p.fitted:
            print(f"{p.name:<26} {p.value:>12.5g} {'':>20} not fitted: {p.note}")
            continue
        err = f"{p.stderr:.3g}" if p.stderr is not None else "-"
        print(f"{p.name:<26} {p.value:>12.5g} {f'[{p.lower:.3g}, {p.upper:.3g}]':>20} {err:>12}"
              + (f"  ({p.note})" if p.note else ""))
    print(f"{'errors: MAPE / worst %':<26} {'period':>15} {'latency':>15} {'energy':>15}")
    labels = {"before": "before (profile)", "after": "after (in sample)", "loo": "leave-one-out"}
    for model in [None] + models:
        errs = f.overall if model is None else f.per_model[model]
        if model is not None:
            print(f"{model} ({errs['after'].n} runs)")
        for key, e in errs.items():
            print(f"  {labels[key]:<24} {_err(e.period_mape, e.period_worst):>15} "
                  f"{_err(e.latency_mape, e.latency_worst):>15} {_err(e.energy_mape, e.energy_worst):>15}")
    if f.power is None:
        print("energy: no (or too few) measured energies in the runs; energies stay estimates")
    if res.out:
        print(f"wrote {res.out}")
    return 0


def cmd_calibrate(args) -> int:
    from .profiling.jobs import calibrate_job

    if args.runs is not None:
        return cmd_calibrate_runs(args)
    if not args.db:
        from .errors import input_error

        raise input_error("--db", None, "missing", "give the profile database written by 'parapipe profile'")

    pus = [p.strip() for p in args.pus.split(",") if p.strip()] if args.pus else None
    splits = [int(k) for k in args.splits.split(",") if k.strip()]
    bar = _Bar("timing stages")
    try:
        res = calibrate_job(args.soc, args.db, args.model or (), _host_spec(args), args.python, args.out, pus,
                            splits, args.warmup, args.repeats, args.max_blocks, bar, args.rounds)
    finally:
        bar.close()
    acc = res.accuracy
    if args.json:
        print(json.dumps({"stages_measured": res.stages_measured, "out": str(res.out) if res.out else None,
                          **acc.to_json()}))
        return 0
    print(f"calibration of {acc.soc} on {args.db}" + (f" ({res.stages_measured} stage measurement(s) taken)"
                                                     if args.model else ""))
    print(f"{'PU':<12} {'ops':>4} {'op MAPE':>9} {'(prior)':>9} {'blocks':>6} {'block':>7} {'stages':>6} "
          f"{'model':>7} {'measured':>8} {'(prior)':>8}")
    for p in acc.pus:
        print(f"{p.pu:<12} {p.ops:>4} {_pct(p.op_mape_calibrated):>9} {_pct(p.op_mape_prior):>9} {p.blocks:>6} "
              f"{_pct(p.block_mape_calibrated):>7} {p.stages:>6} {_pct(p.stage_mape_model):>7} "
              f"{_pct(p.stage_mape_measured):>8} {_pct(p.stage_mape_prior):>8}")
    for t in acc.transfers:
        print(f"transfer {t['src']}->{t['dst']}: alpha {t['alpha_s'] * 1e6:.1f} us, beta "
              f"{t['beta_bytes_per_s'] / 1e9:.2f} GB/s ({t['samples']} sizes, MAPE {_pct(t['mape_percent'])})")
    print(f"overall: operators MAPE {_pct(acc.op_mape_calibrated)}; whole stages MAPE {_pct(acc.stage_mape_model)} "
          f"(calibrated model), {_pct(acc.stage_mape_measured)} (measured blocks + model), "
          f"{_pct(acc.stage_mape_prior)} (uncalibrated profile)")
    if res.out:
        print(f"wrote {res.out}")
    return 0


def cmd_import(args) -> int:
    from .profiling.jobs import import_job

    graphs, paths, written = import_job(args.csv, args.soc, args.db, args.out)
    for graph, path in zip(graphs, paths):
        print(f"{graph.name}: {graph.problem.n_blocks} blocks x {graph.problem.n_pus} PUs -> {path}")
    if args.db:
        print(f"{written} block measurement(s) stored in {args.db}")
    return 0


def cmd_soc_detect(args) -> int:
    from .profiling.jobs import detect_job

    soc, path = detect_job(args.out, _host_spec(args), args.python, args.name, args.per_core)
    for pu in soc.pus.values():
        print(f"{pu.name:<10} {pu.kind:<4} cores {pu.cores:<3} peak {pu.peak_flops / 1e9:8.1f} GFLOPS  bandwidth "
              f"{pu.memory_bandwidth_bytes_per_s / 1e9:6.1f} GB/s  overhead {pu.op_overhead_s * 1e6:6.1f} us")
    t = soc.transfers.default
    print(f"transfer (default): alpha {t.alpha_s * 1e6:.1f} us, beta {t.beta_bytes_per_s / 1e9:.2f} GB/s; "
          f"{len(soc.transfers.pairs)} pair(s)")
    print(f"wrote {path}")
    return 0


def add_profiling_parsers(sub) -> None:
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
    add_input_options(s)
    _add_host_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_profile)

    s = sub.add_parser("calibrate", help="fit the cost model on a profile database (operators, blocks) or, with "
                       "--runs, its pipeline-level terms on measured runs; report its error (MAPE)")
    s.add_argument("--soc", required=True, help="the profile the database was measured for (or 'host')")
    s.add_argument("--db", default=None, help="profile database written by 'parapipe profile' (with --runs: its "
                   "'runs' table)")
    s.add_argument("--runs", nargs="?", const="", default=None, metavar="RUNS.csv",
                   help="fit the pipeline terms (overlap, dispatch, contention, slowdown; powers from measured "
                   "energy) on measured runs: the runs table of --db, or a CSV model,soc,mapping,period_s,"
                   "latency_s[,energy_j] (or 'parapipe runs --csv' output)")
    s.add_argument("--blocks", default=None, metavar="DIR", help="with --runs: DIR/<model>.blocks.csv block tables "
                   "of the runs' models, with DIR/<model>.ranges.csv stage-level times where present (default: cost "
                   "the models themselves)")
    s.add_argument("--fit", default=None, help="with --runs: terms to fit, comma-separated (default "
                   "slowdown,dispatch,handoff,contention,sharing,overlap: all)")
    s.add_argument("--model", action="append", default=None,
                   help="also time whole stages of this model (optimisation on) to validate against; with --runs: "
                   "only this model's runs; repeatable")
    s.add_argument("--out", default=None, help="write the calibrated profile to this .yaml file")
    s.add_argument("--pus", default=None, help="comma-separated PUs to time stages on (default: all)")
    s.add_argument("--splits", default="1,2,4", help="stages = the model cut into k equal-FLOP ranges for each k "
                   "(default 1,2,4)")
    s.add_argument("--repeats", type=int, default=10)
    s.add_argument("--warmup", type=int, default=3)
    s.add_argument("--rounds", type=int, default=3, help="attempts per stage, lowest median kept (default 3)")
    s.add_argument("--max-blocks", type=int, default=48)
    _add_host_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_calibrate)

    s = sub.add_parser("import", help="block measurements from other tools (long CSV: graph,pu,block,time_s|time_ms"
                       "[,power_w|power_mw][,phase][,deps][,out_bytes]) -> block tables for 'optimize --blocks'")
    s.add_argument("csv", help="the long-format CSV")
    s.add_argument("--soc", required=True, help="the profile the measurements were taken on")
    s.add_argument("--db", default=None, help="also store the block times in this profile database")
    s.add_argument("--out", default=None, help="a .csv file (one graph) or a folder for <graph>.blocks.csv "
                   "(default: folder out)")
    s.set_defaults(func=cmd_import)

    s = sub.add_parser("soc", help="SoC profile tools")
    socsub = s.add_subparsers(dest="soc_command", required=True)
    d = socsub.add_parser("detect", help="measure a machine (CPU clusters, GEMM peak, bandwidth, hand-offs) and "
                          "write its profile YAML")
    d.add_argument("--out", required=True, help="profile .yaml to write")
    d.add_argument("--name", default=None, help="profile name (default detected_<hostname>)")
    d.add_argument("--per-core", action="store_true", help="one PU per core instead of one per CPU cluster")
    _add_host_options(d)
    d.set_defaults(func=cmd_soc_detect)
