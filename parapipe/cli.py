"""The ``parapipe`` command: subcommands, ``-v`` counting, ``main(argv) -> int``, domain errors to exit code 2.

Human-readable text goes to stderr/stdout as tables; machine output to files or ``--json`` (stdout).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Dict, List, Optional

from . import __version__
from .errors import ParapipeError

log = logging.getLogger("parapipe")


def _progress_bar(total: int, desc: str):
    """A tqdm bar on stderr (hidden when stderr is not a terminal and the job is short)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, mininterval=0.5,
                disable=not sys.stderr.isatty())


def _input_shapes(args):
    """``--input-shape`` values as ``{name: shape}`` (None when none were given)."""
    from .graph.inputs import parse_input_shapes

    return parse_input_shapes(getattr(args, "input_shape", None)) or None


def add_input_options(s, feeds: bool = False) -> None:
    """``--input-shape NAME:D0xD1x...`` (repeatable) and, with ``feeds``, ``--feeds FILE.npz``."""
    s.add_argument("--input-shape", action="append", default=None, metavar="NAME:D0xD1x...",
                   help="static shape of a model input with symbolic dims, e.g. images:1x3x640x640 "
                   "(repeatable; a symbolic batch dim defaults to 1, any other symbolic dim must be given)")
    if feeds:
        s.add_argument("--feeds", default=None, metavar="FILE.npz",
                       help="real input values: one array per model input, named like it, of the input's shape "
                       "or with a leading frame axis (default: seeded values valid for the graph)")


def _print_model_notes(og) -> None:
    for note in og.input_notes:
        print(f"note: {note}")
    missing = og.ops_without_flop_formula
    if missing:
        print("note: no FLOP formula (counted as 0 FLOPs, costed by the bytes they move): "
              + ", ".join(f"{op} x{n}" for op, n in missing.items()))
    dd = og.data_dependent_ops
    if dd:
        print(f"note: {len(dd)} operator(s) with data-dependent shapes, costed on one sample: "
              + ", ".join(dd[:8]) + (", ..." if len(dd) > 8 else ""))


def cmd_models(args) -> int:
    from .graph.zoo import list_models

    rows = [(m.name, m.source) for m in list_models()]
    if args.json:
        print(json.dumps([{"name": n, "source": s} for n, s in rows]))
        return 0
    width = max(len(n) for n, _ in rows)
    for n, s in rows:
        print(f"{n:<{width}}  {s}")
    return 0


def cmd_socs(args) -> int:
    from .soc import list_socs, load_soc

    for name in list_socs():
        soc = load_soc(name)
        print(f"{name:<20} {', '.join(soc.pu_names)}")
    print(f"{'host':<20} this machine, one PU per CPU core, blocks measured with ONNX Runtime")
    return 0


def cmd_inspect(args) -> int:
    from .graph.coarsen import coarsen, widest_parallel_section
    from .graph.opgraph import import_onnx
    from .graph.zoo import load_model

    lm = load_model(args.model)
    og = import_onnx(lm.model, name=lm.name, source=str(lm.path or args.model),
                     input_shapes=_input_shapes(args))
    bg = coarsen(og, max_blocks=args.max_blocks or None)
    ops = [og.graph.nodes[n]["op"] for n in og.topo_order]
    info = {
        "model": lm.name, "sha256": lm.sha256, "operators": len(ops), "blocks": len(bg.blocks),
        "flops": sum(o.flops for o in ops), "param_nbytes": sum(o.param_nbytes for o in ops),
        "widest_parallel_section": widest_parallel_section(bg),
        "inputs": og.input_shapes,
        "outputs": {n: list(og.tensors[n].shape) for n in og.outputs},
        "input_dims_chosen": list(og.input_notes), "ops_without_flop_formula": og.ops_without_flop_formula,
        "data_dependent_ops": og.data_dependent_ops,
    }
    if args.json:
        info["block_list"] = [{"name": b.name, "ops": list(b.op_types), "flops": b.flops,
                               "out_nbytes": b.out_nbytes} for b in bg.blocks]
        print(json.dumps(info, indent=1))
        return 0
    print(f"model      {lm.name}  (sha256 {lm.sha256[:16]}…)")
    print(f"operators  {info['operators']}   blocks {info['blocks']}   widest parallel section "
          f"{info['widest_parallel_section']} blocks")
    print(f"FLOPs      {info['flops'] / 1e9:.3f} G   parameters {info['param_nbytes'] / 1e6:.2f} MB")
    print(f"inputs     {info['inputs']}   outputs {info['outputs']}")
    _print_model_notes(og)
    if args.verbose_blocks:
        print(f"\n{'block':<40} {'ops':<40} {'MFLOPs':>10} {'out KB':>9}")
        for b in bg.blocks:
            print(f"{b.name[:40]:<40} {'+'.join(b.op_types)[:40]:<40} {b.flops / 1e6:>10.2f} "
                  f"{b.out_nbytes / 1e3:>9.1f}")
    return 0


def _problem_for(args, input_shapes=None, loaded=None):
    """(problem, SoC, Prepared or None) from ``MODEL`` (``loaded``: already loaded) or ``--blocks FILE`` and
    ``--soc``."""
    from .workflow import prepare

    pus = [p.strip() for p in args.pus.split(",")] if getattr(args, "pus", None) else None
    if args.blocks:
        if args.model:
            from .errors import input_error

            raise input_error("--blocks", None, "give either MODEL or --blocks FILE, not both", "drop one of them")
        from .cost.blocktable import read_block_table
        from .soc.resolve import resolve_soc

        soc = resolve_soc(args.soc, pus=pus)
        return read_block_table(args.blocks, soc), soc, None
    if not args.model:
        from .errors import input_error

        raise input_error("MODEL", None, "missing", "give a model name/path or --blocks FILE")
    prep = prepare(args.model, args.soc, pus=pus, max_blocks=args.max_blocks,
                   input_shapes=input_shapes or _input_shapes(args), loaded=loaded)
    return prep.problem, prep.soc, prep


def cmd_evaluate(args) -> int:
    from .cost.evaluate import evaluate
    from .mapping.index import mapping_from_point, parse_pu_list

    text = args.mapping
    doc = lm = None
    if text.endswith(".json"):
        from .mapping import read_pareto

        doc = read_pareto(text)
        if args.model:  # before the stored input shapes are applied to it: another model's names would not fit
            from .graph.zoo import load_model
            from .mapping import check_model

            lm = load_model(args.model)
            check_model(doc, lm, text)
    elif args.point:
        from .errors import input_error

        raise input_error("--point", None, "applies to a pareto.json mapping only",
                          "drop --point, or pass --mapping out/pareto.json")
    stored = doc.input_shapes if doc is not None and args.model and not _input_shapes(args) else None
    problem, soc, prep = _problem_for(args, stored, lm)  # at the shapes the mapping was computed for
    soc_name = soc.name
    mappings = []
    lines_of: Dict[int, int] = {}  # mapping -> its line in a mappings file
    if doc is not None:
        from .mapping import select_point

        if doc.soc.name != soc_name:
            from .errors import input_error

            raise input_error(text, "soc.name", f"mapping was computed for SoC {doc.soc.name!r}, not {soc_name!r}",
                              f"pass --soc {doc.soc.name} or a mapping computed for {soc_name}")
        if prep is not None and doc.input_shapes not in (None, prep.opgraph.input_shapes):
            from .errors import input_error

            raise input_error(text, "input_shapes", f"mapping was computed for inputs {doc.input_shapes}, "
                              f"not {prep.opgraph.input_shapes}",
                              "evaluate it without --input-shape, or optimize again with these shapes")
        pt = select_point(doc, args.point or "best-throughput", path=text)
        mappings.append((pt.id, mapping_from_point(problem, pt, text)))
    elif "," not in text and Path(text).is_file():
        try:
            lines = Path(text).read_text(encoding="utf-8-sig").splitlines()
        except UnicodeDecodeError:
            from .errors import input_error

            raise input_error(text, None, "is not a text file (not UTF-8)", "give a pareto.json, a file with one "
                              "PU list per line, or a PU list such as 'big,big,gpu'") from None
        for i, line in enumerate(lines, start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                mappings.append((line.strip(), parse_pu_list(problem, line, f"{text}: line {i}")))
                lines_of[len(mappings) - 1] = i
    else:
        mappings.append((text, parse_pu_list(problem, text)))
    timed = None
    if prep is not None and prep.host:  # time the stages as optimize --soc host does, so the figures compare
        from .workflow import time_mapping_stages

        ranges, tasks = time_mapping_stages(prep, [m for _, m in mappings])
        timed = {"ranges": len(ranges), "tasks": len(tasks)}
        if not args.json:
            print(f"stage times measured here: {len(ranges)} stage range(s), {len(tasks)} task(s)")
    from .cost.pipeline_terms import terms_from_soc

    terms = terms_from_soc(soc)  # the profile's pipeline: section (calibrate --runs); defaults: the plain model
    if not terms.is_default() and not args.json:
        print(f"pipeline terms of {soc.name}: slowdown {terms.slowdown:.4g}, dispatch {terms.dispatch_s * 1e6:.1f} us"
              f"/stage, hand-off {terms.handoff_s * 1e6:.1f} us, contention {terms.contention:.3g}, sharing "
              f"{terms.sharing:.3g}, overlap "
              + (", ".join(f"{pu} {v:.2f}" for pu, v in terms.overlap.items()) or "none"))
    for k, (label, m) in enumerate(mappings):
        ev = evaluate(problem, m, terms)
        row = {"mapping": label, "period_s": ev.period_s, "throughput_per_s": ev.throughput_per_s,
               "latency_s": ev.latency_s, "energy_j": ev.energy_j, "stages": len(m.stages)}
        if k in lines_of:
            row["line"] = lines_of[k]
            label = f"line {lines_of[k]}: {label}"
        if timed is not None:  # stage sub-models timed on this machine (all the mappings' together)
            row["stage_timing"] = timed
        if m.replicated:  # latency is the mean over the frames dealt to the replicas; the worst next to it
            row["latency_worst_s"] = ev.latency_worst_s
        if not ev.fits_memory:
            row["memory_exceeded"] = [problem.pu_names[p] for p in ev.memory_exceeded]
        if args.json:
            print(json.dumps(row))
        else:
            print(f"period {ev.period_s * 1e3:.3f} ms ({ev.throughput_per_s:.2f}/s)  latency {ev.latency_s * 1e3:.3f} ms"
                  + (f" (worst replica {ev.latency_worst_s * 1e3:.3f} ms)" if m.replicated else "")
                  + f"  energy {ev.energy_j * 1e3:.3f} mJ  stages {len(m.stages)}  "
                  + (label if len(label) <= 60 else label[:57] + "...")
                  + (f"  weights exceed the memory of {', '.join(row['memory_exceeded'])}"
                     if not ev.fits_memory else ""))
    return 0


def _frames_window(text):
    """``--frames-window A:B`` -> (A, B) (frames A <= f < B; ``A:`` to the end, ``:B`` from 0), or None."""
    if text is None:
        return None
    from .errors import input_error

    first, colon, stop = text.partition(":")
    try:
        window = (int(first) if first.strip() else 0, int(stop) if stop.strip() else 1 << 62)
    except ValueError:
        window = None
    if not colon or window is None or window[0] < 0 or window[1] <= window[0]:
        raise input_error("--frames-window", None, f"{text!r} is not FIRST:STOP with 0 <= FIRST < STOP",
                          "write e.g. --frames-window 0:20 (frames 0 to 19)")
    return window


def cmd_plot(args) -> int:
    from .errors import input_error

    if args.gantt == bool(args.trace):
        raise input_error("parapipe plot", None, "give exactly one of --gantt and --trace",
                          "use --gantt --mapping FILE --point ID (predicted) or --trace TRACE.json (measured)")
    if args.gantt:
        from .mapping import read_pareto, select_point
        from .report import plot_gantt

        if not args.mapping:
            raise input_error("--mapping", None, "is required with --gantt", "pass the pareto.json to draw")
        doc = read_pareto(args.mapping)
        point = select_point(doc, args.point, path=args.mapping)
        plot_gantt(doc.model_dump(mode="json"), point.id, args.out, n_frames=args.frames, source=args.mapping)
    else:
        from .report import gantt_from_trace
        from .execution.traces import read_run_trace

        events, info = read_run_trace(args.trace)
        gantt_from_trace(events, args.out, frames_window=_frames_window(args.frames_window), info=info)
    print(f"wrote {args.out}")
    return 0


# ------------------------------------------------------------------------------- profiling (issue 4)
class _Bar:
    """A progress callback (done, total) drawing a tqdm bar on stderr, created on the first call."""

    def __init__(self, desc: str):
        self.desc, self.bar = desc, None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = _progress_bar(total, self.desc)
        self.bar.total = total
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (what is wrong and where help is) instead of the usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="parapipe", description="Map ONNX inference onto heterogeneous SoCs: pipelined stages x "
                "intra-stage parallelism, Pareto fronts of throughput, latency and energy.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-v info, -vv debug)")
    p.add_argument("--version", action="version", version=f"parapipe {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("models", help="list the models usable by name")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("socs", help="list the bundled SoC profiles")
    s.set_defaults(func=cmd_socs)

    s = sub.add_parser("inspect", help="operators, blocks, FLOPs, parameters and parallelism of a model")
    s.add_argument("model", help="registry name (see 'parapipe models') or path to an .onnx file")
    s.add_argument("--max-blocks", type=int, default=48,
                   help="coarsen to at most this many blocks, as optimize does (default 48; 0 = no limit)")
    s.add_argument("--blocks", dest="verbose_blocks", action="store_true", help="list every block")
    add_input_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("optimize", help="search mappings; write OUT/pareto.json and OUT/pareto.png")
    s.add_argument("model", nargs="?", help="registry name or path to an .onnx file (or use --blocks)")
    s.add_argument("--blocks", default=None, help="a block table CSV instead of a model (block,deps,out_bytes,t_<pu>…)")
    s.add_argument("--soc", required=True, help="bundled profile name, a profile YAML path, or 'host'")
    s.add_argument("--out", default="out", help="output folder (default: out)")
    s.add_argument("--seed", type=int, default=0, help="CP-SAT seed; same seed, same front (default 0)")
    s.add_argument("--time-limit", type=float, default=20.0, help="CP-SAT budget in seconds (default 20)")
    s.add_argument("--objectives", default="throughput,latency,energy",
                   help="comma-separated subset of throughput, latency, energy (default: all three)")
    s.add_argument("--max-stages", type=int, default=None, help="most pipeline stages (default: no limit)")
    s.add_argument("--pus", default=None, help="comma-separated PUs to use (default: all)")
    s.add_argument("--max-blocks", type=int, default=48, help="search granularity in blocks (default 48)")
    s.add_argument("--no-plot", action="store_true", help="write pareto.json only")
    s.add_argument("--json", action="store_true", help="print the pareto.json document on stdout")
    s.add_argument("--db", default=None, help="profile database: measured times where they exist, the model "
                   "calibrated on it elsewhere (with --refine: its runs table keeps the runs; default profile.sqlite)")
    s.add_argument("--refine", type=int, default=0, metavar="N", help="closed loop: run the front's most promising "
                   "points (here, or on --host), fit the pipeline terms on the runs, search again; until measured "
                   "and predicted period agree within 5%% or N rounds")
    s.add_argument("--refine-points", type=int, default=3, help="points run per round (default 3)")
    s.add_argument("--time-stages", type=int, default=None, metavar="K", help="--soc host: after the search, time "
                   "the stages of the K front points of highest throughput (and of the replicated model) as the "
                   "executor runs them, and search again with those times (default 3; 0: block times only)")
    s.add_argument("--frames", type=int, default=100, help="frames per run with --refine (default 100)")
    from .cli_profiling import _add_host_options

    _add_host_options(s)
    add_input_options(s, feeds=True)
    from .cli_optimize import cmd_optimize

    s.set_defaults(func=cmd_optimize)

    s = sub.add_parser("evaluate", help="period, latency and energy of given mappings")
    s.add_argument("model", nargs="?", help="registry name or .onnx path (or use --blocks)")
    s.add_argument("--blocks", default=None, help="a block table CSV instead of a model")
    s.add_argument("--soc", required=True, help="bundled profile name, a profile YAML path, or 'host'")
    s.add_argument("--mapping", required=True, help="PU per block ('gpu,gpu,big,…'), a file with one such list "
                   "per line, or a pareto.json (with --point)")
    s.add_argument("--point", default=None, help="point of a pareto.json (default best-throughput)")
    s.add_argument("--pus", default=None, help="comma-separated PUs to keep (default: all)")
    s.add_argument("--max-blocks", type=int, default=48, help="block granularity, as for optimize (default 48)")
    s.add_argument("--json", action="store_true", help="one JSON object per mapping, one per line (JSON Lines)")
    add_input_options(s)
    s.set_defaults(func=cmd_evaluate)

    from .cli_run import add_run_parsers

    add_run_parsers(sub)

    s = sub.add_parser("plot", help="draw a Gantt chart: predicted (--gantt) or measured (--trace)")
    s.add_argument("--gantt", action="store_true", help="the modelled schedule of --point in --mapping")
    s.add_argument("--mapping", default=None, help="pareto.json (with --gantt)")
    s.add_argument("--point", default="best-throughput", help="point id or best-* (with --gantt)")
    s.add_argument("--frames", type=int, default=3, help="frames drawn (with --gantt; default 3)")
    s.add_argument("--trace", default=None, help="Chrome trace JSON of a run ('parapipe run --trace', deploy)")
    s.add_argument("--frames-window", default=None, metavar="FIRST:STOP",
                   help="with --trace: draw frames FIRST <= f < STOP (default: all up to 20 frames, else 20 "
                   "from the middle of the run)")
    s.add_argument("--out", required=True, help="PNG to write")
    s.set_defaults(func=cmd_plot)
    from .cli_profiling import add_profiling_parsers

    add_profiling_parsers(sub)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 outputs differ, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from ppexec.errors import PipelineError, PlanError

    try:
        return int(args.func(args))
    except ParapipeError as exc:
        print(f"parapipe: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (PlanError, PipelineError) as exc:  # the executor's own errors (ppexec knows nothing of parapipe)
        print(f"parapipe: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return ParapipeError.exit_code
    except KeyboardInterrupt:
        print("parapipe: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """Console-script entry point (a closed stdout pipe, e.g. ``| head``, ends quietly)."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()
