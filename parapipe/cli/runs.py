"""``parapipe runs``: list the measured runs kept in a profile database, or export them as CSV."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from parapipe.profiledb.runs import RunRecord

__all__ = ["add_parser", "handle", "period_error"]


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
            pred = 1.0 / r.predicted_period_s if r.predicted_period_s else None
            error = period_error(r)
            applies = "" if r.prediction_applies else " (--bind)"
            print(f"{r.id:>4} {r.recorded_at[:19]:<20} {r.model[:14]:<14} {r.soc[:16]:<16} {r.point[:8]:<8} "
                  f"{r.throughput_per_s:>8.2f} {(f'{pred:.2f}' if pred else '-'):>8} "
                  f"{(f'{error * 100:+.1f}' if error is not None else '-'):>7} "
                  f"{r.idle_latency_s * 1e3:>8.2f} {(r.predicted_latency_s or 0) * 1e3:>8.2f} "
                  f"{(f'{r.energy_j * 1e3:.2f}' if r.energy_j is not None else '-'):>8} "
                  f"{(f'{r.predicted_energy_j * 1e3:.2f}' if r.predicted_energy_j is not None else '-'):>8} "
                  f"{str(r.outputs_match).lower():<5} {r.runner}{applies}")
        if runs:
            print("err %: relative error of the predicted period, (predicted - measured) / measured: + the model "
                  "predicted slower than measured, - faster", file=sys.stderr)
        if not runs:
            print(f"no runs in {args.db} yet: 'parapipe run' and 'parapipe deploy' record them", file=sys.stderr)
        elif all(r.energy_j is None for r in runs):
            print("mJ: no run measured its energy (no power_sensor in the profiles): predicted energies are estimates",
                  file=sys.stderr)
    return 0


def period_error(run: "RunRecord") -> Optional[float]:
    """Relative error of the predicted period against the measured one, ``(predicted - measured) / measured``
    (0.1 = predicted 10 % slower than measured); None without a prediction."""
    if not run.predicted_period_s or not run.period_s:
        return None
    return (run.predicted_period_s - run.period_s) / run.period_s


def add_parser(sub) -> None:
    """Register ``runs`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("runs", help="list the measured runs kept in a profile database, or export them as CSV")
    s.add_argument("--db", default="profile.sqlite", help="profile database (default profile.sqlite)")
    s.add_argument("--model", default=None, help="only runs of this model name")
    s.add_argument("--soc", default=None, help="only runs of this SoC profile name")
    s.add_argument("--csv", default=None, help="write the runs to this CSV file")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=handle)
