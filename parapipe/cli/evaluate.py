"""``parapipe evaluate``: period, latency and energy of given mappings of a model or block table."""
from __future__ import annotations

import argparse
import sys
import json
from pathlib import Path
from typing import Dict

from parapipe.cli.common import (StepBars, add_board_power_option, add_input_options, parsed_input_shapes,
                                 print_measurement, problem_for)

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe evaluate``: period, latency and energy of the given mappings (``--json``: JSON Lines).
    Returns the exit status; raises :class:`~parapipe.errors.InputError` for bad options or inputs (exit
    code 2 in :func:`parapipe.cli.main`)."""
    from parapipe.cost.evaluate import evaluate
    from parapipe.mapping.index import mapping_from_point, parse_pu_list

    text = args.mapping
    doc = lm = None
    if text.endswith(".json"):
        from parapipe.mapping import read_pareto

        doc = read_pareto(text)
        if args.model:  # before the stored input shapes are applied to it: another model's names would not fit
            from parapipe.graph.zoo import load_model
            from parapipe.mapping import check_model

            lm = load_model(args.model)
            check_model(doc, lm, text)
    elif args.point:
        from parapipe.errors import input_error

        raise input_error("--point", None, "applies to a pareto.json mapping only",
                          "drop --point, or pass --mapping out/pareto.json")
    stored = doc.input_shapes if doc is not None and args.model and not parsed_input_shapes(args) else None
    steps = StepBars()
    try:  # at the shapes the mapping was computed for
        problem, soc, prep = problem_for(args, stored, lm, progress=steps)
    finally:
        steps.close()
    soc_name = soc.name
    mappings = []
    lines_of: Dict[int, int] = {}  # mapping -> its line in a mappings file
    if doc is not None:
        from parapipe.mapping import select_point

        if doc.soc.name != soc_name:
            from parapipe.errors import input_error

            raise input_error(text, "soc.name", f"mapping was computed for SoC {doc.soc.name!r}, not {soc_name!r}",
                              f"pass --soc {doc.soc.name} or a mapping computed for {soc_name}")
        if prep is not None and doc.input_shapes not in (None, prep.opgraph.input_shapes):
            from parapipe.errors import input_error

            raise input_error(text, "input_shapes", f"mapping was computed for inputs {doc.input_shapes}, "
                              f"not {prep.opgraph.input_shapes}",
                              "evaluate it without --input-shape, or optimize again with these shapes")
        pt = select_point(doc, args.point or "best-throughput", path=text)
        mappings.append((pt.id, mapping_from_point(problem, pt, text)))
    elif "," not in text and Path(text).is_file():
        try:
            lines = Path(text).read_text(encoding="utf-8-sig").splitlines()
        except UnicodeDecodeError:
            from parapipe.errors import input_error

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
        from parapipe.app.stage_timing import submodel_counts, time_mapping_stages

        try:
            stages = time_mapping_stages(prep, [m for _, m in mappings], progress=steps)
        finally:
            steps.close()
        problem = stages.prepared.problem  # the stage-level times installed
        timed = submodel_counts(stages.submodels)
        if not args.json:
            print(f"stage times measured here: {timed['ranges']} stage range(s), {timed['tasks']} task(s)")
    from parapipe.cost.pipeline_terms import terms_from_soc

    terms = terms_from_soc(soc)  # the profile's pipeline: section (calibrate --runs); defaults: the plain model
    if not terms.is_default() and not args.json:
        print(f"pipeline terms of {soc.name}: slowdown {terms.slowdown:.4g}, dispatch {terms.dispatch_s * 1e6:.1f} us"
              f"/stage, hand-off {terms.handoff_s * 1e6:.1f} us, contention {terms.contention:.3g}, sharing "
              f"{terms.sharing:.3g}, overlap "
              + (", ".join(f"{pu} {v:.2f}" for pu, v in terms.overlap.items()) or "none")
              + "".join(f", invocation {pu} {v * 1e6:.0f} us" for pu, v in terms.invoke_s.items() if v))
    measurement = prep.measure_log.summary() if prep is not None and prep.measure_log is not None else None
    evaluations = [evaluate(problem, m, terms) for _, m in mappings]
    for k, (label, m) in enumerate(mappings):
        ev = evaluations[k]
        row = {"mapping": label, "period_s": ev.period_s, "throughput_per_s": ev.throughput_per_s,
               "latency_s": ev.latency_s, "energy_j": ev.energy_j, "stages": len(m.stages)}
        if k in lines_of:
            row["line"] = lines_of[k]
            label = f"line {lines_of[k]}: {label}"
        if timed is not None:  # stage sub-models timed on this machine (all the mappings' together)
            row["stage_timing"] = timed
        if measurement is not None:  # spread and load of every measurement taken here (blocks and stages)
            row["measurement"] = measurement
        # latency_worst_s: None only before Evaluation.__post_init__ sets it to latency_s
        worst_s = ev.latency_worst_s if ev.latency_worst_s is not None else ev.latency_s
        if m.replicated:  # latency is the mean over the frames dealt to the replicas; the worst next to it
            row["latency_worst_s"] = worst_s
        exceeded = [problem.pu_names[p] for p in ev.memory_exceeded]
        if not ev.fits_memory:
            row["memory_exceeded"] = exceeded
        if args.json:
            print(json.dumps(row))
        else:
            print(f"period {ev.period_s * 1e3:.3f} ms ({ev.throughput_per_s:.2f}/s)  latency {ev.latency_s * 1e3:.3f} ms"
                  + (f" (worst replica {worst_s * 1e3:.3f} ms)" if m.replicated else "")
                  + f"  energy {ev.energy_j * 1e3:.3f} mJ  stages {len(m.stages)}  "
                  + (label if len(label) <= 60 else label[:57] + "...")
                  + (f"  weights exceed the memory of {', '.join(exceeded)}"
                     if not ev.fits_memory else ""))
    if measurement is not None:
        from parapipe.measure.trust import front_gap, warning

        gap = front_gap([ev.throughput_per_s for ev in evaluations])
        remedy = "evaluate again at a quieter moment (stop other CPU-bound processes)"
        if args.json:
            warned = warning(measurement, gap, remedy)
            if warned:
                print(f"parapipe: {warned}", file=sys.stderr)
        else:
            print_measurement(measurement, gap, remedy, "timed runs of each block and stage")
    return 0


def add_parser(sub) -> None:
    """Register ``evaluate`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("evaluate", help="period, latency and energy of given mappings")
    s.add_argument("model", nargs="?", help="registry name or .onnx path (or use --blocks)")
    s.add_argument("--blocks", default=None, help="a block table CSV instead of a model")
    s.add_argument("--soc", required=True, help="bundled profile name, a profile YAML path, or 'host'")
    s.add_argument("--mapping", required=True, help="PU per block ('gpu,gpu,big,…'; 'big@1800' at an operating point; '[..][..]' states the stages), a file with one such list "
                   "per line, or a pareto.json (with --point)")
    s.add_argument("--point", default=None, help="point of a pareto.json (default best-throughput)")
    s.add_argument("--pus", default=None, help="comma-separated PUs to keep (default: all)")
    s.add_argument("--max-blocks", type=int, default=48, help="block granularity, as for optimize (default 48)")
    s.add_argument("--json", action="store_true", help="one JSON object per mapping, one per line (JSON Lines)")
    add_board_power_option(s)
    add_input_options(s)
    s.set_defaults(func=handle)
