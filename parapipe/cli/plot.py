"""``parapipe plot``: Gantt charts, predicted from a pareto.json point or measured from a run's trace, and the
block graph of a point (where each block runs)."""
from __future__ import annotations

import argparse
from typing import Optional, Tuple

__all__ = ["add_parser", "handle"]


def _frames_window(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """``--frames-window A:B`` -> (A, B) (frames A <= f < B; ``A:`` to the end, ``:B`` from 0), or None."""
    if text is None:
        return None
    from parapipe.errors import input_error

    first, colon, stop = text.partition(":")
    try:
        window = (int(first) if first.strip() else 0, int(stop) if stop.strip() else 1 << 62)
    except ValueError:
        window = None
    if not colon or window is None or window[0] < 0 or window[1] <= window[0]:
        raise input_error("--frames-window", None, f"{text!r} is not FIRST:STOP with 0 <= FIRST < STOP",
                          "write e.g. --frames-window 0:20 (frames 0 to 19)")
    return window


def handle(args: argparse.Namespace) -> int:
    """``parapipe plot``: a predicted (``--gantt``) or measured (``--trace``) Gantt chart, or a point's block
    graph (``--graph``), as a PNG. Returns
    the exit status; raises :class:`~parapipe.errors.InputError` for bad options or inputs."""
    from parapipe.errors import input_error

    if int(args.gantt) + int(args.graph) + int(args.front) + int(bool(args.trace)) != 1:
        raise input_error("parapipe plot", None, "give exactly one of --gantt, --graph, --front and --trace",
                          "use --gantt or --graph with --mapping FILE --point ID, --front with --mapping FILE, or "
                          "--trace TRACE.json (measured)")
    from pathlib import Path

    if not Path(args.out).parent.is_dir():
        raise input_error("--out", args.out, "its folder does not exist", "create the folder or choose another path")
    if args.front or args.gantt or args.graph:
        if not args.mapping:
            flag = "--front" if args.front else "--gantt" if args.gantt else "--graph"
            raise input_error("--mapping", None, f"is required with {flag}", "pass the pareto.json to draw")
        from parapipe.mapping import read_mapping
        from parapipe.mapping.workload import WorkloadDoc

        doc = read_mapping(args.mapping)
        if isinstance(doc, WorkloadDoc):
            return _plot_workload(args, doc)
    if args.front:
        from parapipe.mapping import ParetoDoc
        from parapipe.report.plots import plot_pareto

        assert isinstance(doc, ParetoDoc)
        plot_pareto(doc, args.out, source=args.mapping)
    elif args.graph:
        from parapipe.app.export import load_mapped
        from parapipe.report.graph import plot_block_graph

        mapped = load_mapped(args.model, args.mapping, args.point)
        plot_block_graph(mapped.doc, mapped.point, mapped.blocks, args.out, source=args.mapping)
    elif args.gantt:
        from parapipe.mapping import read_pareto, select_point
        from parapipe.report import plot_gantt

        doc = read_pareto(args.mapping)
        point = select_point(doc, args.point, path=args.mapping)
        plot_gantt(doc, point, args.out, n_frames=args.frames, source=args.mapping)
    else:
        from parapipe.report import gantt_from_trace
        from parapipe.execution.traces import read_run_trace

        events, info = read_run_trace(args.trace)
        gantt_from_trace(events, args.out, frames_window=_frames_window(args.frames_window), info=info)
    print(f"wrote {args.out}")
    return 0


def _plot_workload(args: argparse.Namespace, doc) -> int:
    """``plot --front`` or ``--gantt`` of a workload document (every model in its own colour); ``--graph``
    names the model's part to draw instead."""
    from parapipe.errors import input_error
    from parapipe.mapping.io import select_workload_point
    from parapipe.report.workload import plot_workload, plot_workload_gantt

    if args.graph:
        raise input_error("--graph", None, f"draws one model; {args.mapping} is a workload of "
                          f"{', '.join(doc.model_names())}", "use --gantt or --front for the workload")
    if args.front:
        plot_workload(doc, args.out)
    else:
        point = select_workload_point(doc, args.point, path=args.mapping)
        plot_workload_gantt(doc, point, args.out, n_frames=args.frames)
    print(f"wrote {args.out}")
    return 0


def add_parser(sub) -> None:
    """Register ``plot`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("plot", help="draw a Gantt chart (predicted --gantt, measured --trace), the front "
                       "(--front) or where each block runs (--graph); a workload's in each model's colour")
    s.add_argument("--gantt", action="store_true", help="the modelled schedule of --point in --mapping")
    s.add_argument("--front", action="store_true",
                   help="the front of --mapping (a workload's: throughput, latency and energy per workload frame)")
    s.add_argument("--graph", action="store_true",
                   help="the model's block graph, blocks coloured by the PU --point of --mapping runs them on and "
                   "grouped by stage")
    s.add_argument("--mapping", default=None, help="pareto.json (with --gantt, --graph)")
    s.add_argument("--point", default="best-throughput", help="point id or best-* (with --gantt, --graph)")
    s.add_argument("--model", default=None,
                   help="with --graph: registry name or .onnx path (default: the model pareto.json names)")
    s.add_argument("--frames", type=int, default=3, help="frames drawn (with --gantt; default 3)")
    s.add_argument("--trace", default=None, help="Chrome trace JSON of a run ('parapipe run --trace', deploy)")
    s.add_argument("--frames-window", default=None, metavar="FIRST:STOP",
                   help="with --trace: draw frames FIRST <= f < STOP (default: all up to 20 frames, else 20 "
                   "from the middle of the run)")
    s.add_argument("--out", required=True, help="PNG to write")
    s.set_defaults(func=handle)
