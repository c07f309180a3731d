"""The ``parapipe`` command: subcommands, ``-v`` counting, ``main(argv) -> int``, domain errors to exit code 2.

Human-readable text goes to stderr/stdout as tables; machine output to files or ``--json`` (stdout).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import List, Optional

from . import __version__
from .errors import ParapipeError

log = logging.getLogger("parapipe")


def _progress_bar(total: int, desc: str):
    """A tqdm bar on stderr (hidden when stderr is not a terminal and the job is short)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, mininterval=0.5,
                disable=not sys.stderr.isatty())


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
    og = import_onnx(lm.model, name=lm.name, source=str(lm.path or args.model))
    bg = coarsen(og, max_blocks=args.max_blocks or None)
    ops = [og.graph.nodes[n]["op"] for n in og.topo_order]
    info = {
        "model": lm.name, "sha256": lm.sha256, "operators": len(ops), "blocks": len(bg.blocks),
        "flops": sum(o.flops for o in ops), "param_nbytes": sum(o.param_nbytes for o in ops),
        "widest_parallel_section": widest_parallel_section(bg),
        "inputs": {n: list(og.tensors[n].shape) for n in og.inputs},
        "outputs": {n: list(og.tensors[n].shape) for n in og.outputs},
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
    if args.verbose_blocks:
        print(f"\n{'block':<40} {'ops':<40} {'MFLOPs':>10} {'out KB':>9}")
        for b in bg.blocks:
            print(f"{b.name[:40]:<40} {'+'.join(b.op_types)[:40]:<40} {b.flops / 1e6:>10.2f} "
                  f"{b.out_nbytes / 1e3:>9.1f}")
    return 0


def _front_table(doc) -> str:
    """The points of a pareto.json as a table, one row per distinct mapping (a baseline that is also a front
    point is named in its ``same as`` column, not repeated)."""
    rows, same = [], {}
    for p in doc["points"]:
        key = json.dumps([[st["pus"], st["blocks"], st.get("assignment"), st.get("order")]
                          for st in p["mapping"]["stages"]])
        if key in same:
            same[key].append(p["id"])
        else:
            same[key] = []
            rows.append((p, same[key]))
    b = doc["bounds"]
    bound = doc.get("search", {}).get("bound", {})
    how = "proved optimal" if bound.get("period_proved_optimal") else bound.get("period_method", "lp")
    lines = [f"gap = period / period lower bound - 1 (bound {b['period_lb_s'] * 1e3:.3f} ms, {how}); "
             "* = Pareto-optimal among all points",
             f"{'id':<13} {'strategy':<9} {'pareto':<6} {'thr/s':>8} {'period ms':>9} {'gap':>6} "
             f"{'latency ms':>10} {'energy mJ':>9}  {'stages (PUs)':<34} same as"]
    for p, others in rows:
        stages = " | ".join("+".join(st["pus"]) for st in p["mapping"]["stages"])
        gap = p.get("period_gap")
        also = ", ".join(others[:4]) + (f", +{len(others) - 4}" if len(others) > 4 else "")
        lines.append(f"{p['id']:<13} {p['strategy']:<9} {'*' if p['pareto'] else '':<6} "
                     f"{p['throughput_per_s']:>8.4g} {p['period_s'] * 1e3:>9.4g} "
                     f"{(f'{gap * 100:.0f}%' if gap is not None else '-'):>6} {p['latency_s'] * 1e3:>10.4g} "
                     f"{p['energy_j'] * 1e3:>9.4g}  {stages:<34} {also}".rstrip())
    exact = doc["search"].get("exact")
    lines.append(f"lower bounds: period {b['period_lb_s'] * 1e3:.2f} ms, latency {b['latency_lb_s'] * 1e3:.2f} ms;"
                 f" search {doc['search'].get('search_s', 0):.2f} s"
                 + ("" if exact is None else ", exact front" if exact else
                    ", front approximate above the exact size (pareto.json search.spaces)"))
    return "\n".join(lines)


def cmd_optimize(args) -> int:
    from .search.api import SearchOptions
    from .workflow import optimize, prepare

    objectives = tuple(o.strip() for o in args.objectives.split(",") if o.strip())
    options = SearchOptions(objectives=objectives, max_stages=args.max_stages, time_limit_s=args.time_limit,
                            seed=args.seed)
    pus = [p.strip() for p in args.pus.split(",")] if args.pus else None
    if args.blocks or not args.model:
        problem, soc_name, _ = _problem_for(args)
        return _optimize_blocks(args, problem, soc_name, options)
    bar = _Bar("measuring blocks")
    try:
        prep = prepare(args.model, args.soc, pus=pus, max_blocks=args.max_blocks, measure_progress=bar, db=args.db)
    finally:
        bar.close()
    sbar = _progress_bar(prep.problem.n_blocks, "searching")

    def progress(done):
        sbar.n = done
        sbar.refresh()

    try:
        doc = optimize(prep, options, Path(args.out), progress=progress, plot=not args.no_plot)
    finally:
        sbar.close()
    if args.json:
        print(json.dumps(doc))
    else:
        print(f"{prep.loaded.name} on {prep.soc.name}: {prep.problem.n_blocks} blocks x {prep.problem.n_pus} PUs "
              f"({', '.join(prep.problem.pu_names)})")
        print(_front_table(doc))
        if prep.soc.name == "host":
            print("note: host energy uses placeholder powers (5 W active, 1 W idle per core, 10 W static): no power "
                  "meter here; period and latency are measured")
        print(f"wrote {Path(args.out) / 'pareto.json'}" + ("" if args.no_plot else f" and {Path(args.out) / 'pareto.png'}"))
    return 0


def _problem_for(args):
    """(problem, soc name, label) from ``MODEL`` or ``--blocks FILE`` and ``--soc``."""
    from .workflow import prepare

    pus = [p.strip() for p in args.pus.split(",")] if getattr(args, "pus", None) else None
    if args.blocks:
        if args.model:
            from .errors import input_error

            raise input_error("--blocks", None, "give either MODEL or --blocks FILE, not both", "drop one of them")
        from .cost.blocktable import read_block_table
        from .soc import load_soc

        soc = load_soc(args.soc)
        if pus:
            soc = soc.restrict(pus)
        return read_block_table(args.blocks, soc), soc.name, None
    if not args.model:
        from .errors import input_error

        raise input_error("MODEL", None, "missing", "give a model name/path or --blocks FILE")
    prep = prepare(args.model, args.soc, pus=pus, max_blocks=args.max_blocks)
    return prep.problem, prep.soc.name, prep


def cmd_evaluate(args) -> int:
    from .cost.evaluate import evaluate
    from .cost.mapping_spec import mapping_from_point, parse_pu_list

    problem, soc_name, prep = _problem_for(args)
    mappings = []
    text = args.mapping
    if text.endswith(".json"):
        from .mapping_doc import load_doc, select_point

        doc = load_doc(text)
        if doc["soc"] != soc_name:
            from .errors import input_error

            raise input_error(text, "soc", f"mapping was computed for SoC {doc['soc']!r}, not {soc_name!r}",
                              f"pass --soc {doc['soc']} or a mapping computed for {soc_name}")
        if prep is not None and doc["model"]["sha256"] != prep.loaded.sha256:
            from .errors import input_error

            raise input_error(text, "model.sha256", f"mapping was computed for model {doc['model'].get('name')!r}, "
                              f"not {prep.loaded.name!r}", "evaluate it on the model it was computed for")
        pt = select_point(doc, args.point or "best-throughput")
        mappings.append((pt["id"], mapping_from_point(problem, pt, text)))
    elif "," not in text and Path(text).is_file():
        for i, line in enumerate(Path(text).read_text().splitlines(), start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                mappings.append((line.strip(), parse_pu_list(problem, line, f"{text}: line {i}")))
    else:
        mappings.append((text, parse_pu_list(problem, text)))
    for label, m in mappings:
        ev = evaluate(problem, m)
        row = {"mapping": label, "period_s": ev.period_s, "throughput_per_s": ev.throughput_per_s,
               "latency_s": ev.latency_s, "energy_j": ev.energy_j, "stages": len(m.stages)}
        if args.json:
            print(json.dumps(row))
        else:
            print(f"period {ev.period_s * 1e3:.3f} ms ({ev.throughput_per_s:.2f}/s)  latency {ev.latency_s * 1e3:.3f} ms"
                  f"  energy {ev.energy_j * 1e3:.3f} mJ  stages {len(m.stages)}  {label[:60]}")
    return 0


def _optimize_blocks(args, problem, soc_name, options) -> int:
    """optimize --blocks FILE: search a block table and write pareto.json/pareto.png like for a model."""
    import hashlib

    from .mapping_doc import result_to_doc, write_json_atomic
    from .search.api import search
    from .workflow import _check_out_dir

    out = Path(args.out)
    _check_out_dir(out)
    sha = hashlib.sha256(Path(args.blocks).read_bytes()).hexdigest()
    result = search(problem, options)
    doc = result_to_doc(result, problem.name, sha, soc_name, blocks={b: [] for b in problem.block_names},
                        search={"seed": options.seed, "blocks_file": str(args.blocks)})
    if not args.no_plot:
        from .report.plots import plot_pareto

        tmp = out / ".pareto.png.tmp.png"
        plot_pareto(doc, tmp)
    write_json_atomic(doc, out / "pareto.json")
    if not args.no_plot:
        from .mapping_doc import default_file_mode

        os.chmod(tmp, default_file_mode())
        tmp.replace(out / "pareto.png")
    elif (out / "pareto.png").exists():
        (out / "pareto.png").unlink()
    if args.json:
        print(json.dumps(doc))
    else:
        print(f"{problem.name} on {soc_name}: {problem.n_blocks} blocks x {problem.n_pus} PUs")
        print(_front_table(doc))
    return 0


def _print_measured(head: str, thr: float, pred_thr: float, p50_s: float, pred_lat_s: float, p99_s: float) -> None:
    """The measured-next-to-predicted table shared by ``run`` and ``deploy``."""
    print(head)
    print(f"{'':<14} {'measured':>10} {'predicted':>10}")
    print(f"{'throughput/s':<14} {thr:>10.2f} {pred_thr:>10.2f}")
    print(f"{'latency ms':<14} {p50_s * 1e3:>10.2f} {pred_lat_s * 1e3:>10.2f}  (measured p50; p99 {p99_s * 1e3:.2f})")


def cmd_run(args) -> int:
    from .workflow import run_mapping

    rep = run_mapping(args.model, args.mapping, args.point, frames=args.frames, seed=args.seed)
    if args.trace:
        from .runtime import write_chrome_trace

        write_chrome_trace(rep.metrics, args.trace)
    if args.json:
        print(json.dumps(rep.to_json()))
    else:
        _print_measured(f"point {rep.point_id}: {rep.stages} stage(s), {rep.frames} frames", rep.throughput_per_s,
                        rep.predicted_throughput_per_s, rep.latency_p50_s, rep.predicted_latency_s, rep.latency_p99_s)
        print(f"outputs_match: {str(rep.outputs_match).lower()}  (max abs diff {rep.max_abs_diff:.3g}; "
              f"{rep.handed_over_tensors} handed-over tensors, max relative diff {rep.max_scaled_diff_handed_over:.3g})")
        print("note: predicted latency is one input through an idle pipeline; measured latency is taken with the "
              "pipeline kept full, so it includes waiting in the queues between stages")
    return 0 if rep.outputs_match else 1


def cmd_deploy(args) -> int:
    from .deploy.deploy import DeployOptions, deploy, describe_event
    from .deploy.hostspec import HostSpec

    spec = HostSpec.parse(args.host, identity=args.identity, known_hosts=args.known_hosts,
                          trust_new_host=args.trust_new_host)
    options = DeployOptions(frames=args.frames, warmup=args.warmup, seed=args.seed, keep=args.keep,
                            remote_dir=args.remote_dir, python=args.python)

    def show(event) -> None:
        line = describe_event(event)
        if line:
            print(f"parapipe: {line}", file=sys.stderr, flush=True)

    rep = deploy(args.model, args.mapping, args.point, spec, Path(args.out), options, on_event=show)
    r = rep.report
    if args.json:
        print(json.dumps(rep.to_json()))
    else:
        _print_measured(f"point {r['point']} on {rep.host}: {r['stages']} stage(s), {r['frames']} frames",
                        r["throughput_per_s"], r["predicted_throughput_per_s"], r["latency_p50_s"],
                        r["predicted_latency_s"], r["latency_p99_s"])
        print(f"outputs_match: {str(r['outputs_match']).lower()}  (max abs diff {r['max_abs_diff']:.3g})")
        print(f"wrote {rep.report_path} and {rep.trace_path}"
              + (f"; bundle kept in {rep.remote_folder}" if rep.kept else ""))
    return 0 if r["outputs_match"] else 1


def cmd_plot(args) -> int:
    from .errors import input_error

    if args.gantt == bool(args.trace):
        raise input_error("parapipe plot", None, "give exactly one of --gantt and --trace",
                          "use --gantt --mapping FILE --point ID (predicted) or --trace TRACE.json (measured)")
    if args.gantt:
        from .mapping_doc import load_doc, select_point
        from .report import plot_gantt

        if not args.mapping:
            raise input_error("--mapping", None, "is required with --gantt", "pass the pareto.json to draw")
        doc = load_doc(args.mapping)
        point = select_point(doc, args.point)
        plot_gantt(doc, point["id"], args.out, n_frames=args.frames, source=args.mapping)
    else:
        from .report import gantt_from_trace
        from .runtime.metrics import read_chrome_trace

        gantt_from_trace(read_chrome_trace(args.trace), args.out, title=f"measured run: {Path(args.trace).name}")
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



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="parapipe", description="Map ONNX inference onto heterogeneous SoCs: "
                                "pipelined stages x intra-stage parallelism, Pareto fronts of throughput, latency "
                                "and energy.")
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
                   "calibrated on it elsewhere")
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
    s.add_argument("--json", action="store_true", help="one JSON object per mapping")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("run", help="execute one mapping of a pareto.json (computed with --soc host) on this host")
    s.add_argument("model", help="the model the mapping was computed for (registry name or .onnx path)")
    s.add_argument("--mapping", required=True, help="pareto.json written by 'parapipe optimize'")
    s.add_argument("--point", default="best-throughput",
                   help="point id, or best-throughput | best-latency | best-energy (default best-throughput)")
    s.add_argument("--frames", type=int, default=200, help="frames to push through the pipeline (default 200)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--trace", default=None, help="write a Chrome trace (Perfetto) of the run to this file")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("deploy", help="run one mapping of a pareto.json (computed with --soc host on a matching "
                       "machine) on an SSH host; fetch its report and trace")
    s.add_argument("model")
    s.add_argument("--mapping", required=True, help="pareto.json written by 'parapipe optimize MODEL --soc host'")
    s.add_argument("--point", default="best-throughput",
                   help="point id, or best-throughput | best-latency | best-energy (default best-throughput)")
    s.add_argument("--host", required=True, help="user@address[:port]")
    s.add_argument("--identity", default=None, help="private key file (default: ssh-agent and ~/.ssh/id_*)")
    s.add_argument("--known-hosts", default=None, help="known_hosts file (default ~/.ssh/known_hosts)")
    s.add_argument("--trust-new-host", action="store_true",
                   help="accept a host key not in known_hosts and save it (a changed key is always refused)")
    s.add_argument("--frames", type=int, default=200, help="frames to push through the pipeline (default 200)")
    s.add_argument("--warmup", type=int, default=5)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--keep", action="store_true", help="leave the bundle on the host")
    s.add_argument("--remote-dir", default=".cache/parapipe/deploy",
                   help="folder of bundles on the host (default ~/.cache/parapipe/deploy)")
    s.add_argument("--python", default="python3", help="Python on the host (default python3)")
    s.add_argument("--out", default="out/deploy", help="local folder for report.json and trace.json "
                   "(default out/deploy)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_deploy)

    s = sub.add_parser("plot", help="draw a Gantt chart: predicted (--gantt) or measured (--trace)")
    s.add_argument("--gantt", action="store_true", help="the modelled schedule of --point in --mapping")
    s.add_argument("--mapping", default=None, help="pareto.json (with --gantt)")
    s.add_argument("--point", default="best-throughput", help="point id or best-* (with --gantt)")
    s.add_argument("--frames", type=int, default=3, help="frames drawn (with --gantt; default 3)")
    s.add_argument("--trace", default=None, help="Chrome trace JSON of a run ('parapipe run --trace', deploy)")
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
    try:
        return int(args.func(args))
    except ParapipeError as exc:
        print(f"parapipe: error: {exc}", file=sys.stderr)
        return exc.exit_code
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
