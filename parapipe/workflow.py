"""The library behind the CLI: prepare a problem (model x SoC profile) and optimise it.

Running a chosen mapping lives in :mod:`parapipe.runtime.run` (this machine) and :mod:`parapipe.deploy` (a board).

Each function does one job, logs instead of printing, and raises :class:`parapipe.errors.ParapipeError` subclasses
for user errors; the CLI (:mod:`parapipe.cli`) formats what they return.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .errors import input_error
from .soc.resolve import HOST_SOC, is_host

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOCKS = 48
"""Blocks the search works on by default: chains are merged further until at most this many remain
(measured: DenseNet-121 on a 4-PU profile searches in ~2 s at 48 blocks, ~250 s at its natural 242 blocks)."""

STAGE_TIMING_POINTS = 3
"""``--soc host``: the front points of highest throughput whose stages are timed as sub-models after the search
(:func:`search_prepared`; ``optimize --time-stages``)."""
STAGE_TIMING_MARGIN = 0.15
"""Only points whose predicted throughput is within this fraction of the best are timed: a point further behind
would need a larger error to lead than the host model makes (leave-one-out worst period error 12.7 %,
benchmarks/fidelity.py, issue 10)."""
STAGE_TIMING_ROUNDS = 3
"""Most measure-and-search-again rounds of :func:`search_prepared` (each round times only what earlier rounds did
not; on the zoo models the leading points were all timed after 1-2 rounds)."""

__all__ = ["DEFAULT_MAX_BLOCKS", "HOST_SOC", "STAGE_TIMING_POINTS", "STAGE_TIMING_MARGIN", "STAGE_TIMING_ROUNDS",
           "Prepared", "prepare", "search_prepared", "result_doc", "optimize"]


@dataclass
class Prepared:
    """A model imported, coarsened and costed on a SoC, ready for the search."""

    loaded: Any  # parapipe.graph.zoo.LoadedModel
    opgraph: Any
    block_graph: Any
    soc: Any
    problem: Any  # parapipe.cost.problem.MappingProblem
    max_blocks: Optional[int]
    timings_s: Dict[str, float] = field(default_factory=dict)
    #: Pipeline-level terms of the cost model (parapipe.cost.pipeline_terms.PipelineTerms): the profile's
    #: ``pipeline:`` section, or what ``optimize --refine`` learnt; every reported point must be re-evaluated
    #: with them (:func:`parapipe.cost.pipeline_terms.reevaluate`).
    terms: Any = None
    #: ``--soc host``: the blocks were timed on this machine, which can time stage sub-models too
    #: (:func:`search_prepared`); ``host_feeds`` are the input values used (None: generated).
    host: bool = False
    host_feeds: Optional[Dict[str, Any]] = None


def prepare(model: str, soc: str, pus: Optional[Sequence[str]] = None, max_blocks: Optional[int] = DEFAULT_MAX_BLOCKS,
            measure_progress: Optional[Callable[[int, int], None]] = None, db: Optional[str] = None,
            input_shapes: Optional[Dict[str, Sequence[int]]] = None, feeds: Optional[str] = None,
            loaded=None) -> Prepared:
    """Load ``model`` (registry name or .onnx path), coarsen it, and build its problem on ``soc``.
    ``loaded``: ``model`` already loaded (:func:`parapipe.graph.zoo.load_model`), so it is not read again.

    ``soc`` is a bundled profile name, a YAML path, or ``"host"``: this machine, each core a PU, with every block
    measured for real with ONNX Runtime (:func:`parapipe.measure.local.measure_local`). ``db``, a profile database:
    on ``host`` its block measurements are reused (and new ones stored); on another SoC the measured times replace
    the model where they exist and the model calibrated on the database fills the rest
    (:func:`parapipe.calibration.predict.costs_from_db`). ``input_shapes`` (``--input-shape``) fix symbolic input
    dims (:func:`parapipe.graph.inputs.resolve_input_shapes`); ``feeds`` (an .npz, ``--feeds``) are the input
    values the host measurement uses (default: :func:`parapipe.graph.feeds.make_frames`). A custom-domain
    operator no PU declares is refused before anything is measured
    (:func:`parapipe.graph.support.check_declared`).
    """
    from .cost.pipeline_terms import terms_from_soc
    from .cost.roofline import problem_from_blocks
    from .graph.coarsen import coarsen
    from .graph.opgraph import import_onnx
    from .graph.zoo import load_model

    t0 = time.perf_counter()
    from .graph.support import check_declared

    lm = loaded if loaded is not None else load_model(model)
    source = str(lm.path or model)
    og = import_onnx(lm.model, name=lm.name, source=source, input_shapes=input_shapes)
    bg = coarsen(og, max_blocks=max_blocks)
    timings = {"import_s": time.perf_counter() - t0}
    measured = None
    if is_host(soc):
        from .graph.feeds import load_feeds
        from .measure.local import measure_local, measure_ranges

        check_declared(og.model, source, HOST_SOC, [])  # host PUs run ONNX Runtime's CPU operators only
        frame = load_feeds(feeds, og)[0] if feeds else None
        t1 = time.perf_counter()
        if db:
            from .profiledb.db import ProfileDB

            with ProfileDB(db) as profile_db:
                hp = measure_local(bg, progress=measure_progress, db=profile_db, feeds=frame)
        else:
            hp = measure_local(bg, progress=measure_progress, feeds=frame)
        soc_obj, measured = hp.soc, hp.block_time_s
        # the whole model as one sub-model, as the single and replicated mappings run it (issue 13); alone when
        # the profile's pipeline terms model co-running (the host's prior does), else with every other core
        # running it too, as a replicated mapping's replicas do (1.00-1.06x slower on this 2-core VM)
        whole_s = measure_ranges(bg, [(0, len(bg.blocks))], feeds=frame,
                                 loaded=timed_loaded(terms_from_soc(soc_obj)))
        timings["measure_s"] = time.perf_counter() - t1
    else:
        from .soc.resolve import resolve_soc

        soc_obj = resolve_soc(soc)
        check_declared(og.model, source, soc_obj.name, [p.supported_ops for p in soc_obj.pus.values()])
        if db:
            from .calibration.predict import costs_from_db

            soc_obj, measured = costs_from_db(bg, soc_obj, db)
    if pus:
        soc_obj = soc_obj.restrict(list(pus))
    problem = problem_from_blocks(bg, soc_obj, measured_s=measured, name=lm.name)
    if is_host(soc):  # identical cores: the stage-level time holds on every PU
        problem.range_time_s = {(a, b, p): t for (a, b), t in whole_s.items() for p in range(problem.n_pus)}
    return Prepared(lm, og, bg, soc_obj, problem, max_blocks, timings, terms_from_soc(soc_obj), host=is_host(soc),
                    host_feeds=frame if is_host(soc) else None)


def search_prepared(prep: Prepared, options, progress=None, time_stages: int = STAGE_TIMING_POINTS,
                    rounds: int = STAGE_TIMING_ROUNDS, passes: int = 3, measure=None):
    """Search ``prep`` (:func:`parapipe.search.api.search`); on ``--soc host`` then time the stages of the
    ``time_stages`` front points of highest throughput (those within :data:`STAGE_TIMING_MARGIN` of the best)
    and of the replicated baseline, as the executor runs them (one sub-model per single-PU stage,
    replica or task, :func:`parapipe.cost.tasks.stage_block_sets`), install those times in ``prep.problem``
    (``range_time_s`` / ``task_time_s``, every core alike) and search again, until the leading points' stages
    are all timed or ``rounds`` rounds have run.

    Why: the search ranks by block sums, and isolated blocks mislead on stages (a stage sub-model ran 0.7-1.4×
    its blocks' sum, issue 13); two candidates predicted within a few per cent of each other from measurements
    taken at different moments were ranked wrongly on this shared 2-core VM (a shared-core pipeline predicted
    62.7/s ran at 61.1/s, the replicated model predicted 62.0/s ran at 67.0/s). The leading candidates' stages
    are timed in the same interleaved passes (:func:`parapipe.measure.local.measure_stages`), so they are
    compared on one footing. They are timed loaded unless ``prep.terms`` carry a co-running term of their own
    (:meth:`parapipe.cost.pipeline_terms.PipelineTerms.models_corunning`).

    ``measure(ranges, tasks, loaded) -> (range_s, task_s)`` replaces the host measurement (default
    :func:`parapipe.measure.local.measure_stages` with ``passes``). Returns the last
    :class:`parapipe.search.api.SearchResult`; its ``info["stage_timing"]`` says what was timed (``points``
    asked for, distinct mappings timed, rounds, ranges, tasks, ``timed_point_ids``: the points whose every
    stage has a measured time, seconds).

    Raises
    ------
    parapipe.errors.InfeasibleError, parapipe.errors.ExecutionError
        As the search and the host measurement.
    """
    from .search.api import search

    result = search(prep.problem, options, progress=progress, terms=prep.terms)
    if not prep.host or time_stages <= 0:
        return result
    timed_ranges: set = set()
    timed_tasks: set = set()
    timed_points: set = set()
    done_rounds, t0 = 0, time.perf_counter()
    for _ in range(rounds):
        leading = _leading(result, time_stages)
        ranges, tasks = time_mapping_stages(prep, [p.mapping for p in leading], passes, measure,
                                            skip=(timed_ranges, timed_tasks))
        if not (ranges or tasks):
            break
        timed_points.update(p.mapping for p in leading)
        timed_ranges.update(ranges)
        timed_tasks.update(tasks)
        result = search(prep.problem, options, progress=progress, terms=prep.terms)
        done_rounds += 1
    result.info["stage_timing"] = {"points": time_stages, "points_timed": len(timed_points), "rounds": done_rounds,
                                   "ranges": len(timed_ranges), "tasks": len(timed_tasks),
                                   "loaded": timed_loaded(prep.terms),
                                   "timed_point_ids": stage_timed_ids(prep.problem, result.points),
                                   "seconds": time.perf_counter() - t0}
    return result


def stage_timed_ids(problem, points) -> List[str]:
    """Ids of ``points`` whose every sub-model (:func:`parapipe.cost.tasks.stage_block_sets`) has a stage-level
    time in ``problem`` (``range_time_s`` / ``task_time_s``): their figures come from stages timed as the
    executor runs them, the others' from block sums."""
    from .cost.tasks import stage_block_sets

    have_ranges = {(a, b) for a, b, _ in (problem.range_time_s or {})}
    have_tasks = {blocks for _, blocks in (problem.task_time_s or {})}
    out = []
    for p in points:
        ranges, tasks = stage_block_sets(problem, [p.mapping])
        if all(r in have_ranges for r in ranges) and all(t in have_tasks for t in tasks):
            out.append(p.id)
    return out


def time_mapping_stages(prep: Prepared, mappings: Sequence, passes: int = 3, measure=None,
                        skip=((), ())) -> Tuple[List[tuple], List[tuple]]:
    """Time the stages of ``mappings`` on this host as the executor runs them (one sub-model per single-PU stage,
    replica or task, :func:`parapipe.cost.tasks.stage_block_sets`) and install the times in ``prep.problem``
    (``range_time_s`` / ``task_time_s``, every core alike), so that :func:`parapipe.cost.evaluate.evaluate`
    predicts what :func:`search_prepared` predicts for them. Ranges and tasks in ``skip`` (two collections) are
    not timed again. Timed loaded unless ``prep.terms`` model co-running
    (:meth:`parapipe.cost.pipeline_terms.PipelineTerms.models_corunning`).

    ``measure(ranges, tasks, loaded) -> (range_s, task_s)`` replaces the host measurement (default
    :func:`parapipe.measure.local.measure_stages` with ``passes``). Returns the ranges and tasks timed (empty
    when ``prep`` is not ``--soc host``).

    Raises
    ------
    parapipe.errors.ExecutionError
        A sub-model cannot be built or run.
    """
    from .cost.tasks import stage_block_sets

    if not prep.host:
        return [], []
    if measure is None:
        from .measure.local import measure_stages

        def measure(ranges, tasks, loaded):
            return measure_stages(prep.block_graph, ranges, tasks, loaded, passes=passes, feeds=prep.host_feeds)
    problem = prep.problem
    ranges, tasks = stage_block_sets(problem, list(mappings))
    ranges = [r for r in ranges if r not in skip[0]]
    tasks = [t for t in tasks if t not in skip[1]]
    if not (ranges or tasks):
        return [], []
    log.info("timing %d stage range(s) and %d task(s) of %s", len(ranges), len(tasks), problem.name)
    range_s, task_s = measure(ranges, tasks, timed_loaded(prep.terms))
    problem.range_time_s = {**(problem.range_time_s or {}), **{
        (a, b, p): t for (a, b), t in range_s.items() for p in range(problem.n_pus)}}
    problem.task_time_s = {**(problem.task_time_s or {}), **{
        (p, blocks): t for blocks, t in task_s.items() for p in range(problem.n_pus)}}
    return list(range_s), list(task_s)


def timed_loaded(terms) -> bool:
    """Whether stage-level times are taken loaded (every other core running the same sub-model) under the
    pipeline terms ``terms`` (None: the plain model): unless the terms slow co-running stages themselves
    (:meth:`parapipe.cost.pipeline_terms.PipelineTerms.models_corunning`), which needs times taken alone."""
    return terms is None or not terms.models_corunning()


def _leading(result, count: int) -> list:
    """The ``count`` front points of highest throughput within :data:`STAGE_TIMING_MARGIN` of the best
    predicted throughput, and the replicated baseline(s) wherever they stand: their whole-model time, taken once
    when the blocks were measured, can come out slow enough to push them out of the margin (shufflenet on this
    2-core VM: 2.26-3.15 ms over five runs), and they are what a pipeline has to beat."""
    front = sorted(result.front(), key=lambda p: p.objectives())[:count]
    best_s = min(p.evaluation.period_s for p in front)
    return [p for p in front if p.evaluation.period_s * (1.0 - STAGE_TIMING_MARGIN) <= best_s] + result.front(
        "replicated")


def optimize(prep: Prepared, options, out_dir: Path, progress=None, plot: bool = True,
             time_stages: int = STAGE_TIMING_POINTS):
    """Search ``prep`` (:func:`search_prepared`, which times the leading points' stages on ``--soc host``) and
    write ``out_dir/pareto.json`` and ``out_dir/pareto.png`` (both or neither).

    Returns the document (:class:`parapipe.mapping.ParetoDoc`).
    """
    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    doc = result_doc(prep, search_prepared(prep, options, progress=progress, time_stages=time_stages), options.seed)
    write_outputs(doc, out_dir, plot)
    return doc


def result_doc(prep: Prepared, result, seed: int):
    """The pareto.json document (:class:`parapipe.mapping.ParetoDoc`) of ``result``, a search of ``prep``: its
    blocks' operators, the search settings and timings, the model notes."""
    from .mapping import doc_from_result
    from .soc.resolve import soc_ref

    blocks = {b.name: list(b.ops) for b in prep.block_graph.blocks}
    return doc_from_result(result, prep.loaded.name, prep.loaded.sha256, soc_ref(prep.soc), blocks=blocks,
                           search={"max_blocks": prep.max_blocks, "seed": seed, **prep.timings_s},
                           **model_notes(prep.opgraph))


def model_notes(og) -> Dict[str, Any]:
    """The pareto.json fields about the model's inputs and costs: ``input_shapes`` (checked by ``run``) and
    ``cost_notes`` (dims parapipe chose, ops costed without a FLOP formula, ops whose cost is one sample's)."""
    return {"input_shapes": og.input_shapes,
            "cost_notes": {"input_dims_chosen": list(og.input_notes),
                           "ops_without_flop_formula": og.ops_without_flop_formula,
                           "data_dependent_ops": og.data_dependent_ops}}


def write_outputs(doc, out_dir: Path, plot: bool = True) -> None:
    """Write ``out_dir/pareto.json`` and, with ``plot``, ``out_dir/pareto.png`` (both or neither); without a
    plot, remove an earlier result's pareto.png so that no stale plot sits next to the new pareto.json."""
    from .files import atomic_path
    from .mapping import write_pareto

    png = out_dir / "pareto.png"
    if not plot:
        write_pareto(doc, out_dir / "pareto.json")
        if png.exists():
            png.unlink()
        return
    from .report.plots import plot_pareto

    with atomic_path(png, suffix=".png") as tmp_png:
        plot_pareto(doc.model_dump(mode="json"), tmp_png)
        write_pareto(doc, out_dir / "pareto.json")


def _check_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise input_error("--out", str(out_dir), f"cannot create the output folder ({exc.strerror or exc})",
                          "choose a writable folder") from None
    probe = out_dir / ".parapipe-write-test"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise input_error("--out", str(out_dir), f"output folder is not writable ({exc.strerror or exc})",
                          "choose a writable folder") from None
