"""``parapipe socs``: the bundled SoC profiles (and ``host``, this machine measured)."""
from __future__ import annotations

import argparse

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe socs``: every bundled profile and its PUs, then ``host``."""
    from parapipe.soc import list_socs, load_soc

    for name in list_socs():
        soc = load_soc(name)
        print(f"{name:<20} {', '.join(soc.pu_names)}")
    print(f"{'host':<20} this machine, one PU per CPU core, blocks measured with ONNX Runtime")
    return 0


def add_parser(sub) -> None:
    """Register ``socs`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("socs", help="list the bundled SoC profiles")
    s.set_defaults(func=handle)
