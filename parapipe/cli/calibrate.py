"""``parapipe calibrate``: fit the cost model on a profile database and report its error; with
``--runs``, fit the pipeline-level terms on measured runs (the jobs are
:func:`parapipe.app.profiling.calibrate_job` and :func:`parapipe.app.profiling.calibrate_runs_job`)."""
from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, Dict, Optional

from parapipe.cli.common import ProgressBar, add_bind_option, add_board_power_option, add_host_options, host_spec, pct

__all__ = ["add_parser", "handle"]


def _err(mape: Optional[float], worst: Optional[float]) -> str:
    return "-" if mape is None else f"{mape:5.1f} / {worst:+6.1f}"


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _calibrate_runs(args: argparse.Namespace) -> int:
    """``calibrate --runs``: fit the pipeline-level terms on measured runs; print parameters and errors."""
    from dataclasses import asdict

    from parapipe.app.profiling import calibrate_runs_job
    from parapipe.calibration.runfit import TERM_NAMES, MeasuredWorkload

    fit = tuple(t.strip() for t in (args.fit or ",".join(TERM_NAMES)).split(",") if t.strip())
    res = calibrate_runs_job(args.soc, args.runs or None, args.db, args.blocks, args.out, args.model or (), fit,
                             args.max_blocks, board_power=args.board_power)
    f = res.fit
    if args.json:
        def finite(d: Dict[str, Any]) -> Dict[str, Any]:  # strict JSON: an unbounded parameter's upper bound is null
            return {k: (None if isinstance(v, float) and v in (float("inf"), float("-inf")) else v) for k, v in d.items()}

        print(json.dumps({"params": [finite(asdict(p)) for p in f.params + (
                              [*f.power.delta_w.values(), f.power.base_w] if f.power else [])],
                          "errors": {k: asdict(v) for k, v in f.overall.items()},
                          "per_model": {m: {k: asdict(v) for k, v in e.items()} for m, e in f.per_model.items()},
                          "warnings": f.warnings, "out": str(res.out) if res.out else None}))
        return 0
    models = list(f.per_model)
    print(f"calibrate --runs: {_runs(len(f.runs))} of {', '.join(models)} on {res.soc.name}")
    for warning in f.warnings:
        print(f"warning: {warning}")
    print(f"{'parameter':<26} {'value':>12} {'bounds':>20} {'±1σ':>12}")
    powers = [*f.power.delta_w.values(), f.power.base_w] if f.power else []
    for p in f.params + powers:
        if not p.fitted:
            print(f"{p.name:<26} {p.value:>12.5g} {'':>20} not fitted: {p.note}")
            continue
        err = f"{p.stderr:.3g}" if p.stderr is not None else "-"
        print(f"{p.name:<26} {p.value:>12.5g} {f'[{p.lower:.3g}, {p.upper:.3g}]':>20} {err:>12}"
              + (f"  ({p.note})" if p.note else ""))
    workloads = sum(isinstance(r, MeasuredWorkload) for r in f.runs)
    if workloads:
        told = [p.name + (" (only they do)" if p.workloads == "only" else "") for p in f.params if p.workloads]
        print(f"workload runs ({workloads}, each one run: its period per workload frame and its models' idle "
              f"latencies) inform: {', '.join(told) or 'no fitted term'}")
    print(f"{'errors: MAPE / worst %':<26} {'period':>15} {'latency':>15} {'energy':>15}")
    labels = {"before": "before (profile)", "after": "after (in sample)", "loo": "leave-one-out"}
    for model in [None] + models:
        errs = f.overall if model is None else f.per_model[model]
        if model is not None:
            print(f"{model} ({_runs(errs['after'].n)})")
        for key, e in errs.items():
            print(f"  {labels[key]:<24} {_err(e.period_mape, e.period_worst):>15} "
                  f"{_err(e.latency_mape, e.latency_worst):>15} {_err(e.energy_mape, e.energy_worst):>15}")
    kinds = ("a single model's period per inference" if workloads < len(f.runs) else "",
             "a workload run's period per workload frame (one error per run)" if workloads else "")
    of = " and ".join(k for k in kinds if k)
    print("errors: MAPE = mean |error| over the runs, worst = the largest error, signed; error = (predicted - "
          f"measured) / measured (+: predicted slower than measured, -: faster) of {of}; before: the profile's "
          "terms with the models costed now (not the prediction recorded with the run that 'parapipe runs' "
          "compares with, per model)")
    if f.power is None:
        print("energy: no (or too few) measured energies in the runs; energies stay estimates")
    if res.out:
        print(f"wrote {res.out}")
    return 0


def handle(args: argparse.Namespace) -> int:
    """``parapipe calibrate``: fit the cost model on a profile database (``--runs``: the pipeline terms on
    measured runs) and print its errors."""
    from parapipe.app.profiling import calibrate_job
    from parapipe.execution.bindings import parse_binds

    binds = parse_binds(args.bind)
    if args.runs is not None:
        if binds:
            from parapipe.errors import input_error

            raise input_error("--bind", None, "is not used with --runs (the runs' profile already carries the "
                              "bindings they ran with)", "drop --bind")
        return _calibrate_runs(args)
    if args.board_power:
        from parapipe.errors import input_error

        raise input_error("--board-power", None, "applies to block tables' watts (--runs with --blocks DIR)",
                          "drop --board-power, or calibrate --runs --blocks DIR")
    if not args.db:
        from parapipe.errors import input_error

        raise input_error("--db", None, "missing", "give the profile database written by 'parapipe profile'")

    pus = [p.strip() for p in args.pus.split(",") if p.strip()] if args.pus else None
    splits = [int(k) for k in args.splits.split(",") if k.strip()]
    bar = ProgressBar("timing stages")
    try:
        res = calibrate_job(args.soc, args.db, args.model or (), host_spec(args), args.python, args.out, pus,
                            splits, args.warmup, args.repeats, args.max_blocks, bar, args.rounds, binds)
    finally:
        bar.close()
    acc = res.accuracy
    if args.json:
        print(json.dumps({"stages_measured": res.stages_measured, "out": str(res.out) if res.out else None,
                          **acc.to_json(), "frequency_fits": [dataclasses.asdict(f) for f in res.frequency_fits]}))
        return 0
    print(f"calibration of {acc.soc} on {args.db}" + (f" ({res.stages_measured} stage measurement(s) taken)"
                                                     if args.model else ""))
    print(f"{'PU':<12} {'ops':>4} {'op MAPE':>9} {'(prior)':>9} {'blocks':>6} {'block':>7} {'stages':>6} "
          f"{'model':>7} {'measured':>8} {'(prior)':>8}")
    for p in acc.pus:
        print(f"{p.pu:<12} {p.ops:>4} {pct(p.op_mape_calibrated):>9} {pct(p.op_mape_prior):>9} {p.blocks:>6} "
              f"{pct(p.block_mape_calibrated):>7} {p.stages:>6} {pct(p.stage_mape_model):>7} "
              f"{pct(p.stage_mape_measured):>8} {pct(p.stage_mape_prior):>8}")
    for t in acc.transfers:
        print(f"transfer {t['src']}->{t['dst']}: alpha {t['alpha_s'] * 1e6:.1f} us, beta "
              f"{t['beta_bytes_per_s'] / 1e9:.2f} GB/s ({t['samples']} sizes, MAPE {pct(t['mape_percent'])})")
    print(f"overall: operators MAPE {pct(acc.op_mape_calibrated)}; whole stages MAPE {pct(acc.stage_mape_model)} "
          f"(calibrated model), {pct(acc.stage_mape_measured)} (measured blocks + model), "
          f"{pct(acc.stage_mape_prior)} (uncalibrated profile)")
    for f in res.frequency_fits:
        print(f"frequency scaling {f.pu}: memory-bound share {f.memory_bound_fraction:.3f} from {f.samples} "
              f"measurement(s) of {f.signatures} signature(s) at lower operating points; MAPE before "
              f"{pct(f.mape_before_pct)} (time ∝ 1/f), after {pct(f.mape_after_pct)}, leave-one-out "
              f"{pct(f.mape_loo_pct)}")
    if res.out:
        print(f"wrote {res.out}")
    return 0


def add_parser(sub) -> None:
    """Register ``calibrate`` on the ``parapipe`` sub-command parser ``sub``."""
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
    add_bind_option(s, "measure")
    add_board_power_option(s)
    add_host_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=handle)
