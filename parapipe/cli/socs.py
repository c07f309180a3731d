"""``parapipe socs``: the bundled SoC profiles (and ``host``, this machine measured)."""
from __future__ import annotations

import argparse

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe socs``: every bundled profile and its PUs, then ``host`` (the files are read, not validated:
    :mod:`parapipe.soc.catalog`)."""
    from parapipe.soc.catalog import list_socs, pu_names

    for name in list_socs():
        names = pu_names(name)
        if names is None:  # not plain: validate the file, which names the problem
            from parapipe.soc.loader import load_soc

            names = load_soc(name).pu_names
        print(f"{name:<20} {', '.join(names)}")
    print(f"{'host':<20} this machine, one PU per CPU core, blocks measured with ONNX Runtime")
    return 0


def add_parser(sub) -> None:
    """Register ``socs`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("socs", help="list the bundled SoC profiles")
    s.set_defaults(func=handle)
