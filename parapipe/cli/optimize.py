"""``parapipe optimize``: search a model (or a block table) on a SoC, write the front, print its table; with
``--refine N`` the closed loop of :mod:`parapipe.app.refine`."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from parapipe.cli.common import (
    StepBars, add_host_options, add_input_options, host_spec, parsed_input_shapes, print_measurement,
    print_model_notes, problem_for, progress_bar, add_board_power_option)

if TYPE_CHECKING:
    from parapipe.app.prepare import Prepared
    from parapipe.app.refine import RefineStep
    from parapipe.cost.problem import MappingProblem
    from parapipe.mapping.model import ParetoDoc
    from parapipe.search.options import SearchOptions
    from parapipe.soc.profile import SoC

__all__ = ["add_parser", "handle", "front_table"]


#: Pareto-optimal rows a front table shows without ``--all``: a front with operating points can hold dozens of
#: points a few per cent apart, and a screenful is what a reader compares.
TABLE_PARETO_ROWS = 12


#: Rows per baseline strategy that is not Pareto-optimal (its best throughput, latency and energy) without
#: ``--all``: the pure-pipeline baseline alone can hold dozens of near-identical pipelines.
TABLE_BASELINE_ROWS = 3


def shown_points(points: Sequence[Any], show_all: bool = False, limit: int = TABLE_PARETO_ROWS
                 ) -> Tuple[List[Any], int, int]:
    """The points a front table lists, in their order, and how many Pareto-optimal points and how many other
    points (baselines) it leaves out.

    Of the Pareto-optimal points, at most ``limit``: the best throughput, the best latency, the best energy, and a
    spread over the rest by throughput (halving the intervals between the positions taken). Of the others, per
    ``strategy``, the best throughput, latency and energy (at most :data:`TABLE_BASELINE_ROWS`). ``show_all``
    lists every point.
    """
    if show_all:
        return list(points), 0, 0
    front = [p for p in points if p.pareto]
    keep = {id(p) for p in points if not p.pareto}
    by_strategy: Dict[str, List[Any]] = {}
    for p in points:
        if not p.pareto:
            by_strategy.setdefault(getattr(p, "strategy", ""), []).append(p)
    for group in by_strategy.values():
        if len(group) > TABLE_BASELINE_ROWS:
            keep -= {id(p) for p in group}
            keep |= {id(max(group, key=lambda p: p.throughput_per_s)), id(min(group, key=lambda p: p.latency_s)),
                     id(min(group, key=lambda p: p.energy_j))}
    if len(front) <= limit:
        keep |= {id(p) for p in front}
    else:
        by_thr = sorted(front, key=lambda p: -p.throughput_per_s)
        chosen = {id(by_thr[0]), id(min(front, key=lambda p: p.latency_s)), id(min(front, key=lambda p: p.energy_j))}
        n = len(by_thr) - 1
        level = 1  # positions 0, 1, 1/2, 1/4, 3/4, 1/8 ... of the throughput order, until the table is full
        fractions = [0.0, 1.0]
        while len(chosen) < limit:
            for x in fractions:
                chosen.add(id(by_thr[round(x * n)]))
                if len(chosen) >= limit:
                    break
            level *= 2
            fractions = [k / level for k in range(1, level, 2)]
        keep |= chosen
    shown = [p for p in points if id(p) in keep]
    n_front = sum(1 for p in shown if p.pareto)
    return shown, len(front) - n_front, len(points) - len(front) - (len(shown) - n_front)


def omitted_line(omitted: int, omitted_baselines: int = 0) -> List[str]:
    """The table's note on left-out points (none when nothing was left out)."""
    parts = ([f"{omitted} more Pareto-optimal points (an even spread is shown)"] if omitted else []) + (
        [f"{omitted_baselines} more baselines (each strategy's best throughput, latency and energy are shown)"]
        if omitted_baselines else [])
    return [f"... {' and '.join(parts)} not listed: --all lists every point; pareto.json holds them all"
            ] if parts else []


def front_table(doc: ParetoDoc, show_all: bool = False) -> str:
    """The points of a :class:`parapipe.mapping.ParetoDoc` as a text table, one row per distinct mapping (a
    baseline that is also a front point is named in its ``same as`` column, not repeated)."""
    from parapipe.mapping import stages_text

    rows: List[Tuple[Any, List[str]]] = []
    same: Dict[str, List[str]] = {}
    for p in doc.points:
        key = json.dumps([[st.pus, st.blocks, st.assignment, st.order, st.frequency_hz,
                           [[r.pus, r.assignment, r.order, r.frequency_hz] for r in st.replicas or []]]
                          for st in p.stages])
        if key in same:
            same[key].append(p.id)
        else:
            same[key] = []
            rows.append((p, same[key]))
    # rows, not points, are thinned: a baseline equal to a front point stays in that point's "same as" column
    listed, omitted, omitted_baselines = shown_points([p for p, _ in rows], show_all)
    listed_ids = {id(p) for p in listed}
    rows = [(p, others) for p, others in rows if id(p) in listed_ids]
    b = doc.bounds
    bound = doc.search.get("bound", {})
    how = "proved optimal" if bound.get("period_proved_optimal") else bound.get("period_method", "lp")
    ops = doc.search.get("operating_points") or {}
    searched = ops.get("points_mhz") or {}
    id_w = max([13] + [len(p.id) for p, _ in rows])  # replicated-0-f0 and the like
    texts = [stages_text(p.stages) for p, _ in rows]
    st_w = min(max([34] + [len(t) for t in texts]), 48)  # longer stage lists run on, two spaces before "same as"
    lines = [f"gap = period / period lower bound - 1 (bound {b.period_lb_s * 1e3:.3f} ms, {how}); "
             "* = Pareto-optimal among all points; stages: a+b operator-parallel, {a,b} replicated"
             + ("; pu@MHz: the PU's operating point (a PU without @ runs at its highest)" if searched else ""),
             f"{'id':<{id_w}} {'strategy':<10} {'pareto':<6} {'thr/s':>8} {'period ms':>9} {'gap':>6} "
             f"{'latency ms':>10} {'energy mJ':>9}  {'stages (PUs)':<{st_w}}  same as"]
    for (p, others), stages in zip(rows, texts):
        gap = p.period_gap
        also = ", ".join(others[:4]) + (f", +{len(others) - 4}" if len(others) > 4 else "")
        lines.append(f"{p.id:<{id_w}} {p.strategy:<10} {'*' if p.pareto else '':<6} "
                     f"{p.throughput_per_s:>8.4g} {p.period_s * 1e3:>9.4g} "
                     f"{(f'{gap * 100:.0f}%' if gap is not None else '-'):>6} {p.latency_s * 1e3:>10.4g} "
                     f"{p.energy_j * 1e3:>9.4g}  {stages:<{st_w}}  {also}".rstrip())
    lines += omitted_line(omitted, omitted_baselines)
    for name, why in (doc.search.get("baselines_missing") or {}).items():
        lines.append(f"note: no {name} baseline: {why}")
    exact = doc.search.get("exact")
    lines.append(f"lower bounds: period {b.period_lb_s * 1e3:.3f} ms, latency {b.latency_lb_s * 1e3:.3f} ms;"
                 f" search {doc.search.get('search_s', 0):.2f} s"
                 + ("" if exact is None else ", exact front" if exact else
                    ", front approximate above the exact size (pareto.json search.spaces)"))
    if searched:
        lines.append("operating points searched: " + "; ".join(
            f"{pu} {', '.join(f'{m:g}' for m in mhz)} MHz" for pu, mhz in searched.items())
            + (f" ({ops['bounded_by']})" if ops.get("bounded_by") else "")
            + "; governor points: performance = every PU at its highest, schedutil = the kernel's 1.25 x "
              "utilisation rule, both on the best-throughput mapping")
    stopped = doc.search.get("stopped_early")
    if stopped:
        lines.append("warning: a wall-clock safety limit stopped the search early ("
                     + "; ".join(f"{s.get('space')}: {s.get('at')}" for s in stopped)
                     + "): the front may differ on a rerun (pareto.json search.stopped_early)")
    return "\n".join(lines)


def handle(args: argparse.Namespace) -> int:
    """``parapipe optimize``: search, write OUT/pareto.json (and .png), print the front table. Returns the
    exit status; raises :class:`~parapipe.errors.InputError` for bad options or inputs.

    One model with a plot to draw, off ``--soc host``: the plot process starts first
    (:func:`parapipe.app.plot_worker.start_plot_worker`), so that matplotlib loads on another core while this
    process imports its modules and reads and coarsens the model, single-threaded, instead of during the
    search, whose DP passes use every core. On ``--soc host`` it starts later, as before, after the
    measurements of the model's blocks."""
    from parapipe.soc.identity import is_host

    worker = None
    if (not args.no_plot and not args.workload and len(args.model or []) == 1 and not args.blocks
            and not args.refine and not is_host(args.soc)):
        from parapipe.app.plot_worker import start_plot_worker

        worker = start_plot_worker()
    try:
        return _handle(args, worker)
    finally:
        if worker is not None:
            worker.close()  # idempotent: optimize() ended it already where it got that far


def _handle(args: argparse.Namespace, worker) -> int:
    from parapipe.app.optimize import optimize
    from parapipe.app.prepare import prepare
    from parapipe.app.stage_timing import STAGE_TIMING_POINTS
    from parapipe.search.options import SearchOptions
    from parapipe.soc.identity import is_host

    models = list(args.model or [])
    if len(models) > 1 or args.workload:
        return _optimize_workload(args, models)
    if args.rates or args.latency_axis:
        from parapipe.errors import input_error

        raise input_error("--rates" if args.rates else "--latency-axis", None, "applies to a workload of several "
                          "models", "give two or more models (or --workload FILE), or drop the option")
    args.model = models[0] if models else None
    objectives = tuple(o.strip() for o in args.objectives.split(",") if o.strip())
    options = SearchOptions(objectives=objectives, max_stages=args.max_stages, time_limit_s=args.time_limit,
                            seed=args.seed, operating_points=args.operating_points)
    pus = [p.strip() for p in args.pus.split(",")] if args.pus else None
    if (args.host or args.refine) and (args.blocks or not args.model or not args.refine):
        from parapipe.errors import input_error

        raise input_error("--refine" if args.refine else "--host", None, "needs a model and --refine N"
                          if args.refine else "is only used with --refine", "give MODEL and --refine N (the loop "
                          "runs the model's points)" if args.refine else "add --refine N, or drop --host")
    if args.time_stages is not None and (args.time_stages < 0 or args.time_stages > 0 and (
            not is_host(args.soc) or args.blocks or args.refine)):
        from parapipe.errors import input_error

        raise input_error("--time-stages", None, f"must be >= 0, got {args.time_stages}" if args.time_stages < 0
                          else "is only used with a model on --soc host (without --refine)",
                          "give a count of front points, 0 to skip" if args.time_stages < 0
                          else "drop --time-stages or give 0")
    if args.board_power and not args.blocks:
        from parapipe.errors import input_error

        raise input_error("--board-power", None, "applies to a block table's watts (--blocks FILE)",
                          "give --blocks FILE, or drop --board-power")
    if args.blocks or not args.model:
        problem, soc, _ = problem_for(args)
        return _optimize_blocks(args, problem, soc, options)
    db = args.db
    if args.refine:  # the loop searches with the database it records its runs into
        db = db or "profile.sqlite"
        if not is_host(args.soc) and not Path(db).exists():
            db_search = None  # nothing measured yet: the profile's model alone
        else:
            db_search = db
    else:
        db_search = db
    steps = StepBars()
    try:
        if is_host(args.soc):
            steps.status("loading the model")
        prep = prepare(args.model, args.soc, pus=pus, max_blocks=args.max_blocks, progress=steps,
                       db=db_search, input_shapes=parsed_input_shapes(args), feeds=args.feeds)
    finally:
        steps.close()
    bars: Dict[str, Any] = {}

    def progress(done: int) -> None:
        if "search" not in bars:
            steps.close()
            bars["search"] = progress_bar(prep.problem.n_blocks, "searching")
        bars["search"].n = done
        bars["search"].refresh()

    def stage_steps(step: str, done: int, total: int) -> None:
        if "search" in bars:  # a search round ended: its bar gives way to the stage timing's
            bars.pop("search").close()
        steps(step, done, total)

    try:
        if args.refine:
            def between(step: str) -> None:  # a run of the loop: the round's search bar gives way to a status
                if "search" in bars:
                    bars.pop("search").close()
                steps.status(step)

            return _optimize_refine(args, prep, options, progress, db, db_search is not None, between)
        doc, prep = optimize(prep, options, Path(args.out), progress=progress, plot=not args.no_plot,
                             time_stages=STAGE_TIMING_POINTS if args.time_stages is None else args.time_stages,
                             steps=stage_steps, worker=worker)
    except KeyboardInterrupt:
        if "search" in bars:
            bars.pop("search").close()
        steps.close()
        print(f"parapipe: interrupted; nothing written to {args.out}", file=sys.stderr, flush=True)
        return 130
    finally:
        if "search" in bars:
            bars.pop("search").close()
        steps.close()
    if args.json:
        print(json.dumps(doc.model_dump(mode="json")))
        if (doc.search.get("measurement") or {}).get("warning"):
            print(f"parapipe: {doc.search['measurement']['warning']}", file=sys.stderr)
    else:
        print(f"{prep.loaded.name} on {prep.soc.name}: {prep.problem.n_blocks} blocks x {prep.problem.n_pus} PUs "
              f"({', '.join(prep.problem.pu_names)})")
        print(front_table(doc, args.all))
        print_model_notes(prep.opgraph)
        timing = doc.search.get("stage_timing")
        if timing and timing["rounds"]:
            print(stage_timing_note(timing))
        measurement = doc.search.get("measurement")
        if measurement:
            print_measurement(measurement, measurement.get("gap"), "", "timed runs of each block and stage",
                              warn=measurement.get("warning") or "")
        note = host_power_note(prep.soc)
        if note:
            print(note)
        print(f"wrote {Path(args.out) / 'pareto.json'}" + ("" if args.no_plot else f" and {Path(args.out) / 'pareto.png'}"))
    return 0


def host_power_note(soc: Any) -> Optional[str]:
    """The note on ``--soc host``'s placeholder powers (None on a profile)."""
    if soc.name != "host":
        return None
    sensor = soc.power_sensor
    if sensor is None:
        return ("note: host energy uses placeholder powers (5 W active, 1 W idle per core, 10 W static): no power "
                "meter here; period and latency are predicted from times measured here")
    return (f"note: host energy uses placeholder powers; 'run' measures energy with the {sensor.kind}"
            " sensor and 'calibrate --runs' fits the powers from it")


def _optimize_refine(args: argparse.Namespace, prep: "Prepared", options: "SearchOptions",
                     progress: Callable[[int], None], db: str, searched_db: bool,
                     status: Callable[[str], None]) -> int:
    """optimize --refine N: search, run the most promising points, re-calibrate, search again
    (:func:`parapipe.app.refine.refine`); ``--host`` with its ``--ssh-timeout``. ``db`` keeps the runs;
    ``searched_db``: the search used its measurements too."""
    from parapipe.app.refine import refine, trajectory_table

    host = host_spec(args)

    def show(step: "RefineStep") -> None:
        print(f"parapipe: refine round {step.round}: {step.mapping} ({step.point}) predicted {step.predicted_period_s * 1e3:.3f} ms, "
              f"measured {step.measured_period_s * 1e3:.3f} ms ({step.error * 100:+.1f}%)", file=sys.stderr, flush=True)

    res = refine(prep, options, Path(args.out), args.refine, args.model, frames=args.frames, points=args.refine_points,
                 db=db, host=host, python=args.python or "python3", plot=not args.no_plot,
                 progress=progress, on_step=show, input_shapes=parsed_input_shapes(args), feeds=args.feeds,
                 on_run=lambda rnd, mid, pid: status(f"round {rnd}: running {mid} ({pid}) "
                                                     + (f"on {host}" if host is not None else "here")))
    if args.json:
        print(json.dumps(res.doc.model_dump(mode="json")))
        return 0
    print(front_table(res.doc, args.all))
    print(trajectory_table(res.steps))
    info = res.doc.search["refine"]
    print(f"stopped after round {info['rounds']} of {args.refine}: {info['stopped']}")
    print(f"next: {info['next']}")
    print(f"runs recorded in {db}" + ("; the search used its measured blocks" if searched_db else
                                      "; it had no measured blocks of this SoC yet ('parapipe profile' fills it)"))
    print(f"wrote {Path(args.out) / 'pareto.json'}" + (f" and {res.calibrated}" if res.calibrated else ""))
    return 0


def _optimize_blocks(args: argparse.Namespace, problem: "MappingProblem", soc: "SoC",
                     options: "SearchOptions") -> int:
    """optimize --blocks FILE: search a block table and write pareto.json/pareto.png like for a model."""
    import hashlib

    from parapipe.app.optimize import check_out_dir, write_outputs
    from parapipe.app.resolve import soc_ref
    from parapipe.cost.pipeline_terms import terms_from_soc
    from parapipe.mapping import doc_from_result
    from parapipe.search.api import search

    out = Path(args.out)
    check_out_dir(out)
    sha = hashlib.sha256(Path(args.blocks).read_bytes()).hexdigest()
    result = search(problem, options, terms=terms_from_soc(soc))
    doc = doc_from_result(result, problem.name, sha, soc_ref(soc), blocks={b: [] for b in problem.block_names},
                          search={"seed": options.seed, "blocks_file": str(args.blocks),
                                  "block_power": "board" if args.board_power else "pu"})
    write_outputs(doc, out, plot=not args.no_plot)
    if args.json:
        print(json.dumps(doc.model_dump(mode="json")))
    else:
        print(f"{problem.name} on {soc.name}: {problem.n_blocks} blocks x {problem.n_pus} PUs")
        print(front_table(doc, args.all))
        print(f"wrote {out / 'pareto.json'}" + ("" if args.no_plot else f" and {out / 'pareto.png'}"))
    return 0


def workload_input_shapes(values: Optional[List[str]], models: List[str]
                          ) -> List[Optional[Dict[str, Tuple[int, ...]]]]:
    """``--input-shape MODEL:INPUT=D0xD1x...`` (repeatable) as one ``{input: shape}`` per model (None where none
    was given); ``MODEL`` is a model as given on the command line or its file stem.

    Raises
    ------
    InputError
        A value without ``MODEL:`` and ``=``, or naming a model not in the workload.
    """
    from parapipe.errors import input_error
    from parapipe.graph.inputs import parse_input_shapes

    out: List[Optional[Dict[str, Tuple[int, ...]]]] = [None] * len(models)
    keys = [{m, Path(m).stem} for m in models]
    for value in values or []:
        model, sep, rest = value.partition(":")
        if not sep or "=" not in rest:
            raise input_error("--input-shape", value, "a workload needs the model of each input shape",
                              "write MODEL:INPUT=D0xD1x..., e.g. squeezenet:data_0=1x3x224x224")
        hits = [i for i, k in enumerate(keys) if model in k]
        if not hits:
            raise input_error("--input-shape", value, f"no model {model!r} in the workload",
                              f"use one of {', '.join(models)}")
        name, _, dims = rest.partition("=")
        parsed = parse_input_shapes([f"{name}:{dims}"]) or {}
        out[hits[0]] = {**(out[hits[0]] or {}), **parsed}
    return out


def workload_table(doc: Any, show_all: bool = False) -> str:
    """The points of a :class:`parapipe.mapping.workload.WorkloadDoc` as a text table: the workload's figures
    and each model's latency and stages."""
    from parapipe.mapping import stages_text

    names = doc.model_names()
    b = doc.bounds
    axis = "largest model latency" if doc.latency_axis == "max" else "rate-weighted mean of the model latencies"
    lines = [f"workload frame = " + " + ".join(f"{m.rate:g} x {m.name}" for m in doc.models)
             + f"; latency = {axis}; energy per workload frame; * = Pareto-optimal among all points",
             f"{'id':<9} {'strategy':<9} {'pareto':<6} {'wl/s':>8} {'gap':>6} {'latency ms':>10} {'energy mJ':>9}  "
             + "  ".join(f"{n[:14] + ' ms':>17}" for n in names) + "  stages per model"]
    listed, omitted, omitted_baselines = shown_points(doc.points, show_all)
    for p in listed:
        gap = f"{p.period_gap * 100:.0f}%" if p.period_gap is not None else "-"
        lines.append(f"{p.id:<9} {p.strategy:<9} {'*' if p.pareto else '':<6} {p.throughput_per_s:>8.4g} {gap:>6} "
                     f"{p.latency_s * 1e3:>10.4g} {p.energy_j * 1e3:>9.4g}  "
                     + "  ".join(f"{p.latency_s_per_model[n] * 1e3:>17.4g}" for n in names) + "  "
                     + " ; ".join(f"{n}: {stages_text(p.mappings[n].stages)}" for n in names))
    lines += omitted_line(omitted, omitted_baselines)
    info = doc.search.get("workload", {})
    for name, why in (info.get("baselines_breaking") or {}).items():
        lines.append(f"note: {name} breaks {' and '.join(why)}: a baseline only, never Pareto-marked or on the front")
    for name, why in (info.get("baselines_missing") or {}).items():
        lines.append(f"note: no {name} baseline: {why}")
    bounded = info.get("bounded_by", [])
    lines.append(f"lower bounds: period {b.period_lb_s * 1e3:.3f} ms per workload frame "
                 f"({info.get('period_bound', {}).get('method', 'lp')}), latency {b.latency_lb_s * 1e3:.3f} ms; "
                 f"search {info.get('search_s', 0):.2f} s, "
                 + ("exact front" if info.get("exact") else "front approximate: " + "; ".join(bounded[:1])
                    + (f" (+{len(bounded) - 1} more in pareto.json search.workload.bounded_by)"
                       if len(bounded) > 1 else "")))
    return "\n".join(lines)


def _optimize_workload(args: argparse.Namespace, models: List[str]) -> int:
    """optimize A B ... (or --workload FILE): prepare every model, search the workload, write and print."""
    from parapipe.app.workload import WorkloadSpec, optimize_workload, parse_rates, prepare_workload, read_app_file
    from parapipe.errors import input_error
    from parapipe.search.options import SearchOptions

    # the single-model options a workload does not use: refused, not silently ignored
    for flag, bad in (("--blocks", args.blocks), ("--refine", args.refine), ("--feeds", args.feeds),
                      ("--board-power", args.board_power), ("--host", args.host),
                      ("--identity", args.identity), ("--known-hosts", args.known_hosts),
                      ("--trust-new-host", args.trust_new_host), ("--python", args.python),
                      ("--ssh-timeout", args.ssh_timeout is not None),
                      ("--refine-points", args.refine_points != 3), ("--frames", args.frames != 100)):
        if bad:
            raise input_error(flag, None, "is not supported for a workload of several models",
                              "drop it, or optimize one model")
    objectives = tuple(o.strip() for o in args.objectives.split(",") if o.strip())
    if set(objectives) != {"throughput", "latency", "energy"}:
        raise input_error("--objectives", args.objectives, "a workload's front is always on workload throughput, "
                          "the latency axis and energy per workload frame", "drop --objectives for a workload")
    if args.time_stages is not None and args.time_stages < 0:
        raise input_error("--time-stages", None, f"must be >= 0, got {args.time_stages}", "give 0 or drop it")
    if args.workload:
        if models:
            raise input_error("--workload", args.workload, "lists the models; MODEL arguments were given too",
                              "give either MODEL arguments or --workload FILE")
        spec = read_app_file(args.workload)
        if args.rates:
            spec.rates = parse_rates(args.rates, len(spec.models))
            print(f"parapipe: note: --rates {args.rates} overrides the rates of {args.workload}", file=sys.stderr)
        if args.input_shape:
            spec.input_shapes = workload_input_shapes(args.input_shape, spec.models)
            spec.shapes_from_file = False
            print(f"parapipe: note: --input-shape overrides the input_shapes of {args.workload}", file=sys.stderr)
        if args.latency_axis and args.latency_axis != spec.latency_axis:
            print(f"parapipe: note: --latency-axis {args.latency_axis} overrides the latency_axis "
                  f"({spec.latency_axis}) of {args.workload}", file=sys.stderr)
    else:
        spec = WorkloadSpec(models, parse_rates(args.rates, len(models)),
                            workload_input_shapes(args.input_shape, models), [None] * len(models))
    if args.latency_axis:
        spec.latency_axis = args.latency_axis
    options = SearchOptions(objectives=objectives, max_stages=args.max_stages, time_limit_s=args.time_limit,
                            seed=args.seed, operating_points=args.operating_points)
    pus = [p.strip() for p in args.pus.split(",")] if args.pus else None
    if args.time_stages:  # only when the user asked for it
        logging.getLogger(__name__).warning(
            "--time-stages: stage timing is skipped for a workload (the search uses each model's measured block "
            "and whole-model times)")
    steps = StepBars()
    try:
        preps = prepare_workload(spec, args.soc, pus=pus, max_blocks=args.max_blocks, db=args.db, progress=steps)
        steps.status("searching the workload")
        doc, _ = optimize_workload(preps, spec, options, Path(args.out), plot=not args.no_plot)
    finally:
        steps.close()
    measurement: Dict[str, Any] = doc.search.get("measurement") or {}
    if args.json:
        print(json.dumps(doc.model_dump(mode="json")))
        if measurement.get("warning"):
            print(f"parapipe: {measurement['warning']}", file=sys.stderr)
        return 0
    pr = preps[0].problem
    print(" + ".join(f"{p.loaded.name} ({p.problem.n_blocks} blocks)" for p in preps)
          + f" on {preps[0].soc.name}: {pr.n_pus} PUs ({', '.join(pr.pu_names)})")
    print(workload_table(doc, args.all))
    if measurement:
        print_measurement(measurement, measurement.get("gap"), "", "timed runs of each model's blocks",
                          warn=measurement.get("warning") or "")
    note = host_power_note(preps[0].soc)
    if note:
        print(note)
    print(f"wrote {Path(args.out) / 'pareto.json'}" + ("" if args.no_plot else f" and {Path(args.out) / 'pareto.png'}"))
    return 0


def stage_timing_note(timing: Dict[str, Any]) -> str:
    """The note on the stages timed as sub-models (``pareto.json``'s ``search.stage_timing``).

    Two counts, each next to what it counts: the leading mappings whose stages were timed (``points_timed``,
    over every round), and the points of the final front whose every stage has a measured time
    (``timed_point_ids``: more than the leading ones when other points share their stages, fewer when a leading
    mapping left the front); at most 8 ids are listed, then ``+N``.
    """
    from parapipe.app.stage_timing import STAGE_TIMING_MARGIN

    ids = list(timing.get("timed_point_ids") or [])
    shown = ", ".join(ids[:8]) + (f", +{len(ids) - 8}" if len(ids) > 8 else "")
    return (f"note: the stages of {timing['points_timed']} leading mapping(s) were timed as sub-models "
            f"(the front's best {timing['points']} within {STAGE_TIMING_MARGIN:.0%} of the best throughput, "
            f"--time-stages, and the replicated baseline; {timing['ranges']} range(s), {timing['tasks']} "
            f"task(s), {timing['rounds']} round(s), {timing['seconds']:.1f} s); the table uses those times"
            + (f"; {len(ids)} point(s) of the front have every stage measured: {shown}" if ids else ""))


def add_parser(sub) -> None:
    """Register ``optimize`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("optimize", help="search mappings; write OUT/pareto.json and OUT/pareto.png")
    s.add_argument("model", nargs="*", help="registry name or path to an .onnx file (or use --blocks); two or "
                   "more: a workload of models run at once, searched as one problem")
    s.add_argument("--rates", default=None, metavar="R1,R2,...", help="workload: frames of each model per "
                   "workload frame, in the models' order (default: 1 each)")
    s.add_argument("--workload", default=None, metavar="APP.yaml", help="workload: a YAML file listing the models "
                   "(model, rate, input_shapes, latency_bound_s in s) and latency_axis, instead of MODEL arguments "
                   "(format: README, 'Workload app file')")
    s.add_argument("--latency-axis", default=None, choices=("max", "weighted-mean"), help="workload: the front's "
                   "latency axis, the largest model latency (default) or their rate-weighted mean")
    s.add_argument("--blocks", default=None, help="a block table CSV instead of a model (block,deps,out_bytes,t_<pu>…)")
    s.add_argument("--soc", required=True, help="bundled profile name, a profile YAML path, or 'host'")
    s.add_argument("--out", default="out", help="output folder (default: out)")
    s.add_argument("--seed", type=int, default=0, help="CP-SAT seed; same seed, same front (default 0)")
    s.add_argument("--time-limit", type=float, default=20.0, help="CP-SAT budget in deterministic seconds (CP-SAT's work measure, about CPU seconds; "
                   "the same on a busy machine; default 20)")
    s.add_argument("--objectives", default="throughput,latency,energy",
                   help="comma-separated subset of throughput, latency, energy (default: all three)")
    s.add_argument("--max-stages", type=int, default=None, help="most pipeline stages (default: no limit)")
    s.add_argument("--operating-points", default="auto", metavar="auto|all|max|N",
                   help="PU frequencies (DVFS) searched where the profile or block table lists operating points: "
                        "auto (default: every point where the search stays exact and fast, else a spread subset "
                        "and re-timing of the front; pareto.json search.operating_points says which), all, max "
                        "(highest points only) or N points per PU spread over its table")
    s.add_argument("--pus", default=None, help="comma-separated PUs to use (default: all)")
    s.add_argument("--max-blocks", type=int, default=48, help="search granularity in blocks (default 48)")
    s.add_argument("--no-plot", action="store_true", help="write pareto.json only")
    s.add_argument("--all", action="store_true", help="list every point of the front in the table (default: "
                   "at most 12 Pareto-optimal points, the extremes and an even spread; pareto.json holds them all)")
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
    add_board_power_option(s)
    add_host_options(s)
    add_input_options(s, feeds=True)
    for action in s._actions:  # a workload names the model of each shape
        if action.dest == "input_shape":
            action.metavar = "NAME:D0xD1x...|MODEL:NAME=D0xD1x..."
            action.help = (f"{action.help}; for a workload of several models, MODEL:INPUT=D0xD1x..., e.g. "
                           "squeezenet:data_0=1x3x224x224")
    s.set_defaults(func=handle)
