"""``parapipe optimize``: search a prepared problem, time the leading stages on ``--soc host``, write the front.

:func:`optimize` = :func:`search_prepared` + :func:`result_doc` + :func:`write_outputs`. Functions log instead of
printing and raise :class:`parapipe.errors.ParapipeError` subclasses for user errors; the CLI
(:mod:`parapipe.cli.optimize`) formats what they return.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Set, Tuple

from parapipe.app.plot_worker import PlotWorker, start_plot_worker
from parapipe.app.prepare import Prepared, model_notes, timed_loaded
from parapipe.app.stage_timing import (
    STAGE_TIMING_POINTS, STAGE_TIMING_ROUNDS, Measure, leading_points, stage_timed_ids, submodel_counts,
    time_mapping_stages)
from parapipe.cost.mapping import Mapping as CostMapping
from parapipe.cost.problem import SubmodelBlocks
from parapipe.errors import input_error
from parapipe.mapping.model import ParetoDoc
from parapipe.measure.trust import MeasureLog, StepProgress, front_gap, warning
from parapipe.search.options import SearchOptions
from parapipe.search.api import SearchResult
from parapipe.soc.profile import SoC

log = logging.getLogger(__name__)

__all__ = ["search_prepared", "measurement_info", "OPTIMIZE_REMEDY", "optimize", "result_doc", "write_outputs", "check_out_dir"]


def search_prepared(prep: Prepared, options: SearchOptions, progress: Optional[Callable[[int], None]] = None,
                    time_stages: int = STAGE_TIMING_POINTS, rounds: int = STAGE_TIMING_ROUNDS, passes: int = 3,
                    measure: Optional[Measure] = None, steps: Optional[StepProgress] = None) -> SearchResult:
    """Search ``prep`` (:func:`parapipe.search.api.search`); on ``--soc host`` then time the stages of the
    ``time_stages`` front points of highest throughput (those within
    :data:`~parapipe.app.stage_timing.STAGE_TIMING_MARGIN` of the best) and of the replicated baseline, as the
    executor runs them (:func:`parapipe.app.stage_timing.time_mapping_stages`), and search again on a new
    problem holding those times, until the leading points' stages are all timed or ``rounds`` rounds have run.

    Why: the search ranks by block sums, and isolated blocks mislead on stages (a stage sub-model can run at
    0.7-1.4x its blocks' sum, :mod:`parapipe.measure.submodels`: ORT fuses across blocks); and two candidates
    predicted within a few per cent of each other from measurements taken at different moments can swap places
    when run, since the load of a shared machine changes between the moments (compare ``parapipe optimize
    --soc host`` predictions with ``parapipe run`` of the same points). The leading candidates' stages are
    timed in the same interleaved passes (:func:`parapipe.measure.submodels.measure_submodels`), so they are compared
    on one footing. They are timed loaded unless ``prep.terms`` carry a co-running term of their own
    (:meth:`parapipe.cost.pipeline_terms.PipelineTerms.models_corunning`).

    ``measure`` replaces the host measurement (default :func:`parapipe.measure.submodels.measure_submodels` with
    ``passes``). ``prep`` is not changed. Returns the last :class:`parapipe.search.api.SearchResult`: its
    ``problem`` holds the stage-level times measured (``prep.problem`` when none were), its
    ``info["stage_timing"]`` says what was timed (``points`` asked for, distinct mappings timed, rounds, the
    sub-models timed as ``ranges`` and ``tasks``, :func:`~parapipe.app.stage_timing.submodel_counts`, ``loaded``,
    ``timed_point_ids``: the points whose every stage has a measured time, seconds) and its
    ``info["measurement"]`` how far the host's measurements can be trusted (:func:`measurement_info`).
    ``steps(step, done, total)`` follows the stage timing.

    Raises
    ------
    parapipe.errors.InfeasibleError, parapipe.errors.ExecutionError
        As the search and the host measurement.
    """
    from parapipe.search.api import search

    result = search(prep.problem, options, progress=progress, terms=prep.terms)
    if not prep.host or time_stages <= 0:
        if prep.measure_log is not None:
            result.info["measurement"] = measurement_info(prep.measure_log, result)
        return result
    timed_submodels: Set[SubmodelBlocks] = set()
    timed_points: Set[CostMapping] = set()
    done_rounds, t0 = 0, time.perf_counter()
    for _ in range(rounds):
        leading = leading_points(result, time_stages)
        timed = time_mapping_stages(prep, [p.mapping for p in leading], passes, measure, skip=timed_submodels,
                                    progress=steps)
        if not timed.submodels:
            break
        prep = timed.prepared
        timed_points.update(p.mapping for p in leading)
        timed_submodels.update(timed.submodels)
        result = search(prep.problem, options, progress=progress, terms=prep.terms)
        done_rounds += 1
    result.info["stage_timing"] = {"points": time_stages, "points_timed": len(timed_points), "rounds": done_rounds,
                                   **submodel_counts(timed_submodels), "loaded": timed_loaded(prep.terms),
                                   "timed_point_ids": stage_timed_ids(prep.problem, result.points),
                                   "seconds": time.perf_counter() - t0}
    if prep.measure_log is not None:
        result.info["measurement"] = measurement_info(prep.measure_log, result)
    return result


def measurement_info(record: MeasureLog, result: SearchResult) -> Dict[str, Any]:
    """pareto.json's ``search.measurement``: :meth:`parapipe.measure.trust.MeasureLog.summary` of the host's
    measurements, ``gap`` (the best front point's throughput over the next one's, less 1; None with one point)
    and ``warning`` (:func:`parapipe.measure.trust.warning`, None when the figures are within their
    thresholds)."""
    summary = record.summary()
    gap = front_gap([p.evaluation.throughput_per_s for p in result.front()])
    return {**summary, "gap": gap, "warning": warning(summary, gap, OPTIMIZE_REMEDY)}


#: What a user can do when ``optimize --soc host``'s measurements were disturbed.
OPTIMIZE_REMEDY = ("run it again at a quieter moment (stop other CPU-bound processes), or time more of the front "
                   "on one footing (--time-stages K larger, then compare with 'parapipe run')")


def optimize(prep: Prepared, options: SearchOptions, out_dir: Path, progress: Optional[Callable[[int], None]] = None,
             plot: bool = True, time_stages: int = STAGE_TIMING_POINTS,
             steps: Optional[StepProgress] = None,
             worker: Optional[PlotWorker] = None) -> Tuple[ParetoDoc, Prepared]:
    """Search ``prep`` (:func:`search_prepared`, which times the leading points' stages on ``--soc host``) and
    write ``out_dir/pareto.json`` and ``out_dir/pareto.png`` (both or neither).

    ``worker``: a plot process the caller started earlier (:func:`start_plot_worker`, as soon as it knew it
    would plot: matplotlib then loads while the model is read); this call ends it, drawn or not. Without one,
    and with ``plot``, the call starts its own.

    Returns the document and ``prep`` with the problem searched last (the stage-level times measured
    installed; ``prep`` itself when none were).

    Raises
    ------
    parapipe.errors.InputError
        ``out_dir`` cannot be created or written (checked before the search).
    KeyboardInterrupt
        Passed on after removing the folders this call created (empty: nothing was written).
    """
    out_dir = Path(out_dir)
    created = [d for d in (out_dir, *out_dir.parents) if not d.exists()]  # deepest first
    try:
        check_out_dir(out_dir)
        if worker is None and plot:
            worker = start_plot_worker()  # imports matplotlib on another core during the search
        result = search_prepared(prep, options, progress=progress, time_stages=time_stages, steps=steps)
        if result.problem is not prep.problem:
            prep = replace(prep, problem=result.problem)
        doc = result_doc(prep, result, options.seed)
        if steps is not None and plot:
            steps("drawing pareto.png", 0, 1)
        write_outputs(doc, out_dir, plot, soc=prep.soc, worker=worker)
    except BaseException:  # Ctrl-C (KeyboardInterrupt) or an error: leave no empty folder of this run behind
        if worker is not None:
            worker.close()  # before the folders go: it writes nothing more
        for folder in created:
            try:
                folder.rmdir()  # only if still empty: write_outputs writes both files or neither
            except OSError:
                break
        raise
    finally:
        if worker is not None:
            worker.close()
    return doc, prep


def result_doc(prep: Prepared, result: SearchResult, seed: int) -> ParetoDoc:
    """The pareto.json document of ``result``, a search of ``prep``: its blocks' operators, the search settings
    and timings, the model notes."""
    from parapipe.app.resolve import soc_ref
    from parapipe.mapping import doc_from_result

    blocks = {b.name: list(b.ops) for b in prep.block_graph.blocks}
    return doc_from_result(result, prep.loaded.name, prep.loaded.sha256, soc_ref(prep.soc), blocks=blocks,
                           search={"max_blocks": prep.max_blocks, "seed": seed, **prep.timings_s},
                           **model_notes(prep.opgraph))


def write_outputs(doc: ParetoDoc, out_dir: Path, plot: bool = True, soc: Optional[SoC] = None,
                  worker: Optional[PlotWorker] = None) -> None:
    """Write ``out_dir/pareto.json`` and, with ``plot``, ``out_dir/pareto.png`` (both or neither); without a
    plot, remove an earlier result's pareto.png so that no stale plot sits next to the new pareto.json.
    ``soc``: the profile the document was computed with (the plot notes placeholder powers from its
    provenance; default: found from the document). ``worker``: a started plot process to draw the plot
    (:mod:`parapipe.app.plot_worker`; drawn here when it cannot)."""
    from parapipe.files import atomic_path
    from parapipe.mapping import write_pareto

    png = out_dir / "pareto.png"
    if not plot:
        write_pareto(doc, out_dir / "pareto.json")
        if png.exists():
            png.unlink()
        return
    with atomic_path(png, suffix=".png") as tmp_png, atomic_path(out_dir / "pareto.json") as tmp_json:
        # pareto.json is written while the worker draws; both are renamed into place once both are written
        if worker is None or not worker.draw(doc, soc, tmp_png, meanwhile=lambda: write_pareto(doc, tmp_json)):
            from parapipe.report.plots import plot_pareto

            plot_pareto(doc, tmp_png, soc=soc)
        if worker is None:
            write_pareto(doc, tmp_json)


def check_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` and check that a file can be written in it.

    Raises
    ------
    parapipe.errors.InputError
        ``--out``: the folder cannot be created, or is not writable.
    """
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
