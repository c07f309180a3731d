"""``parapipe export``: the model with every node annotated with where a point of a pareto.json runs it."""
from __future__ import annotations

import argparse

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe export [MODEL] --mapping FILE --point ID --out FILE.onnx``: write the annotated model
    (:func:`parapipe.app.export.export_mapped`). Returns the exit status; raises
    :class:`~parapipe.errors.InputError` for bad options or inputs."""
    from parapipe.app.export import export_mapped

    done = export_mapped(args.model, args.mapping, args.point, args.out)
    print(f"wrote {done.path}: point {done.point}, {done.placed} of {done.nodes} nodes annotated with their stage, "
          f"PU and block (metadata_props parapipe.*)"
          + (f"; {done.folded} evaluated into constants when loading, run on no PU" if done.folded else ""))
    return 0


def add_parser(sub) -> None:
    """Register ``export`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("export", help="write the model with each node annotated with its stage and PU (for Netron)")
    s.add_argument("model", nargs="?", default=None,
                   help="registry name or .onnx path (default: the model pareto.json names)")
    s.add_argument("--mapping", required=True, help="pareto.json written by 'parapipe optimize'")
    s.add_argument("--point", default="best-throughput", help="point id or best-throughput|best-latency|best-energy")
    s.add_argument("--out", required=True, help=".onnx file to write")
    s.set_defaults(func=handle)
