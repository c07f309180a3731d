"""``parapipe models``: the models usable by name."""
from __future__ import annotations

import argparse
import json

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe models``: name and source of every model usable by name (``--json``: a list)."""
    from parapipe.graph.zoo import list_models

    rows = [(m.name, m.source) for m in list_models()]
    if args.json:
        print(json.dumps([{"name": n, "source": s} for n, s in rows]))
        return 0
    width = max(len(n) for n, _ in rows)
    for n, s in rows:
        print(f"{n:<{width}}  {s}")
    return 0


def add_parser(sub) -> None:
    """Register ``models`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("models", help="list the models usable by name")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=handle)
