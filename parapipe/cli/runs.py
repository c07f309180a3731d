"""``parapipe runs``: list the measured runs kept in a profile database, or export them as CSV."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    from parapipe.profiledb.runs import RunRecord

__all__ = ["add_parser", "handle", "period_error", "model_predicted_period", "workload_period_error"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe runs``: the runs kept in a profile database, as a table, JSON or CSV."""
    from parapipe.calibration.predict import open_existing_db
    from parapipe.profiledb.runs import list_runs, write_runs_csv

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
              f"{'err %':>7} {'idle ms':>8} {'pred ms':>8} {'mJ':>8} {'pred mJ':>8} {'match':<5} runner")
        for r in runs:
            predicted_period = model_predicted_period(r)
            pred = 1.0 / predicted_period if predicted_period else None
            error = period_error(r)
            applies = "" if r.prediction_applies else " (--bind)"
            print(f"{r.id:>4} {r.recorded_at[:19]:<20} {r.model[:14]:<14} {r.soc[:16]:<16} {r.point[:8]:<8} "
                  f"{r.throughput_per_s:>8.2f} {(f'{pred:.2f}' if pred else '-'):>8} "
                  f"{(f'{error * 100:+.1f}' if error is not None else '-'):>7} "
                  f"{r.idle_latency_s * 1e3:>8.2f} {(r.predicted_latency_s or 0) * 1e3:>8.2f} "
                  f"{(f'{r.energy_j * 1e3:.2f}' if r.energy_j is not None else '-'):>8} "
                  f"{(f'{r.predicted_energy_j * 1e3:.2f}' if r.predicted_energy_j is not None else '-'):>8} "
                  f"{str(r.outputs_match).lower():<5} {r.runner}{applies}")
        workloads = _workload_lines(runs)
        for line in workloads:
            print(line)
        if runs:
            print("err %: relative error of the predicted period, (predicted - measured) / measured: + the model "
                  "predicted slower than measured, - faster; signed, per row: the model's period per inference "
                  "(thr/s, pred/s: its inferences per second), with the prediction recorded with the run",
                  file=sys.stderr)
        if workloads:
            print("a model of a workload run: its measured 1 / thr/s (with the other models running) against the "
                  "workload's predicted period per workload frame / its rate; the workload lines: the workload's "
                  "period per workload frame, the one error 'calibrate --runs' counts for the run (there as "
                  "MAPE, the mean |error|, and the signed worst, the models re-costed on the profile now)",
                  file=sys.stderr)
        if not runs:
            print(f"no runs in {args.db} yet: 'parapipe run' and 'parapipe deploy' record them", file=sys.stderr)
        elif all(r.energy_j is None for r in runs):
            print("mJ: no run measured its energy (no power_sensor in the profiles): predicted energies are estimates",
                  file=sys.stderr)
    return 0


def _workload_of(run: "RunRecord") -> Optional[Tuple[Dict[str, Any], float]]:
    """``(workload, rate)`` of a model's row of a workload run; None for a single model's run."""
    workload = run.workload
    if not isinstance(workload, dict):
        return None
    rates = workload.get("rates")
    rate = rates.get(run.model) if isinstance(rates, dict) else None
    return workload, (float(rate) if isinstance(rate, (int, float)) and rate > 0 else 1.0)


def model_predicted_period(run: "RunRecord") -> Optional[float]:
    """The predicted period per inference of the row's model, s: the recorded prediction; for a model of a
    workload run, the workload's predicted period per workload frame / the model's rate (frames of it per workload
    frame). None without a prediction."""
    of = _workload_of(run)
    if of is None:
        return run.predicted_period_s or None
    workload, rate = of
    period = workload.get("predicted_period_s") or run.predicted_period_s
    return float(period) / rate if isinstance(period, (int, float)) and period > 0 else None


def period_error(run: "RunRecord") -> Optional[float]:
    """Relative error of the predicted period against the measured one, ``(predicted - measured) / measured``
    (0.1 = predicted 10 % slower than measured), per inference of the row's model (:func:`model_predicted_period`
    against ``period_s``); None without a prediction."""
    predicted = model_predicted_period(run)
    if not predicted or not run.period_s:
        return None
    return (predicted - run.period_s) / run.period_s


def workload_period_error(workload: Dict[str, Any]) -> Optional[float]:
    """Relative error of a workload run's predicted period per workload frame against the measured one (``1 /
    throughput_per_s`` of the workload), ``(predicted - measured) / measured``; None without either."""
    predicted, throughput = workload.get("predicted_period_s"), workload.get("throughput_per_s")
    if not isinstance(predicted, (int, float)) or not isinstance(throughput, (int, float)) or predicted <= 0 \
            or throughput <= 0:
        return None
    return predicted * throughput - 1.0


def _workload_lines(runs: List["RunRecord"]) -> List[str]:
    """One line per workload run among ``runs`` (its rows grouped by the workload's ``id``): its rows, models,
    point, measured and predicted workload frames per second and its period error per workload frame."""
    groups: Dict[str, List["RunRecord"]] = {}
    for r in runs:
        of = _workload_of(r)
        if of is not None:
            groups.setdefault(str(of[0].get("id")), []).append(r)
    lines = []
    for wid, rows in groups.items():
        workload = rows[0].workload or {}
        names = workload.get("models") or [r.model for r in rows]
        measured, predicted = workload.get("throughput_per_s"), workload.get("predicted_period_s")
        error = workload_period_error(workload)
        ids = ", ".join(str(r.id) for r in rows)
        lines.append(f"workload run {wid[:12]} (row{'' if len(rows) == 1 else 's'} {ids}: "
                     f"{'+'.join(map(str, names))}, point {workload.get('point') or rows[0].point}): "
                     + (f"{measured:.2f}" if isinstance(measured, (int, float)) else "-") + " workload frames/s "
                     "measured, " + (f"{1.0 / predicted:.2f}" if isinstance(predicted, (int, float)) and predicted > 0
                                     else "-") + " predicted, err "
                     + (f"{error * 100:+.1f} %" if error is not None else "-") + " per workload frame")
    return lines


def add_parser(sub) -> None:
    """Register ``runs`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("runs", help="list the measured runs kept in a profile database, or export them as CSV")
    s.add_argument("--db", default="profile.sqlite", help="profile database (default profile.sqlite)")
    s.add_argument("--model", default=None, help="only runs of this model name")
    s.add_argument("--soc", default=None, help="only runs of this SoC profile name")
    s.add_argument("--csv", default=None, help="write the runs to this CSV file")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=handle)
