"""``parapipe import``: block measurements from other tools (a long CSV) as block tables for
``optimize --blocks`` (the job is :func:`parapipe.app.profiling.import_job`; the module is not named
``import``, a keyword)."""
from __future__ import annotations

import argparse

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe import``: block tables (and database rows) from a long-format measurement CSV."""
    from parapipe.app.profiling import import_job

    graphs, paths, written = import_job(args.csv, args.soc, args.db, args.out)
    for graph, path in zip(graphs, paths):
        print(f"{graph.name}: {graph.problem.n_blocks} blocks x {graph.problem.n_pus} PUs -> {path}")
    if args.db:
        print(f"{written} block measurement(s) stored in {args.db}")
    return 0


def add_parser(sub) -> None:
    """Register ``import`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("import", help="block measurements from other tools (long CSV: graph,pu,block,time_s|time_ms"
                       "[,power_w|power_mw][,phase][,deps][,out_bytes]) -> block tables for 'optimize --blocks'")
    s.add_argument("csv", help="the long-format CSV")
    s.add_argument("--soc", required=True, help="the profile the measurements were taken on")
    s.add_argument("--db", default=None, help="also store the block times in this profile database")
    s.add_argument("--out", default=None, help="a .csv file (one graph) or a folder for <graph>.blocks.csv "
                   "(default: folder out)")
    s.set_defaults(func=handle)
