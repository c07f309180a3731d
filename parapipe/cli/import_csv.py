"""``parapipe import``: block measurements from other tools (a long CSV) as block tables for
``optimize --blocks`` (the job is :func:`parapipe.app.profiling.import_job`; the module is not named
``import``, a keyword)."""
from __future__ import annotations

import argparse

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe import``: block tables (and database rows) from a long-format measurement CSV."""
    from parapipe.app.profiling import import_job

    from parapipe.soc.operating_points import points_text

    graphs, paths, written = import_job(args.csv, args.soc, args.db, args.out, board_power=args.board_power)
    for graph, path in zip(graphs, paths):
        p = graph.problem
        points = [f"{pu} at {points_text(t.frequency_hz)}" for pu, t in zip(p.pu_names, p.operating_points or [])
                  if t is not None]
        print(f"{graph.name}: {p.n_blocks} blocks x {p.n_pus} PUs -> {path}"
              + (f" (operating points: {'; '.join(points)})" if points else ""))
    if args.board_power:
        print("powers are whole-board readings: evaluate, optimize and calibrate these tables with --board-power")
    if args.db:
        print(f"{written} block measurement(s) stored in {args.db}")
    return 0


def add_parser(sub) -> None:
    """Register ``import`` on the ``parapipe`` sub-command parser ``sub``."""
    from parapipe.cli.common import add_board_power_option

    s = sub.add_parser("import", help="block measurements from other tools (long CSV: graph,pu,block,time_s|time_ms"
                       "[,power_w|power_mw][,phase][,freq][,deps][,out_bytes]; or a per-layer DVFS table "
                       "graph,component,freq,layer,metric,time_ms,power_mw) -> block tables for 'optimize --blocks'")
    s.add_argument("csv", help="the long-format CSV")
    s.add_argument("--soc", required=True, help="the profile the measurements were taken on")
    s.add_argument("--db", default=None, help="also store the block times in this profile database")
    s.add_argument("--out", default=None, help="a .csv file (one graph) or a folder for <graph>.blocks.csv "
                   "(default: folder out)")
    add_board_power_option(s)
    s.set_defaults(func=handle)
