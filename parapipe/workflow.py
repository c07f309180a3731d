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
from typing import Any, Callable, Dict, Optional, Sequence

from .errors import input_error
from .soc.resolve import HOST_SOC, is_host

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOCKS = 48
"""Blocks the search works on by default: chains are merged further until at most this many remain
(measured: DenseNet-121 on a 4-PU profile searches in ~2 s at 48 blocks, ~250 s at its natural 242 blocks)."""

__all__ = ["DEFAULT_MAX_BLOCKS", "HOST_SOC", "Prepared", "prepare", "optimize"]


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


def prepare(model: str, soc: str, pus: Optional[Sequence[str]] = None, max_blocks: Optional[int] = DEFAULT_MAX_BLOCKS,
            measure_progress: Optional[Callable[[int, int], None]] = None, db: Optional[str] = None,
            input_shapes: Optional[Dict[str, Sequence[int]]] = None, feeds: Optional[str] = None) -> Prepared:
    """Load ``model`` (registry name or .onnx path), coarsen it, and build its problem on ``soc``.

    ``soc`` is a bundled profile name, a YAML path, or ``"host"``: this machine, each core a PU, with every block
    measured for real with ONNX Runtime (:func:`parapipe.profiling.host.measure_host`). ``db``, a profile database:
    on ``host`` its block measurements are reused (and new ones stored); on another SoC the measured times replace
    the model where they exist and the model calibrated on the database fills the rest
    (:func:`parapipe.profiling.predict.costs_from_db`). ``input_shapes`` (``--input-shape``) fix symbolic input
    dims (:func:`parapipe.graph.inputs.resolve_input_shapes`); ``feeds`` (an .npz, ``--feeds``) are the input
    values the host measurement uses (default: :func:`parapipe.graph.feeds.make_frames`). A custom-domain
    operator no PU declares is refused before anything is measured
    (:func:`parapipe.graph.support.check_declared`).
    """
    from .cost.roofline import problem_from_blocks
    from .graph.coarsen import coarsen
    from .graph.opgraph import import_onnx
    from .graph.zoo import load_model

    t0 = time.perf_counter()
    from .graph.support import check_declared

    lm = load_model(model)
    source = str(lm.path or model)
    og = import_onnx(lm.model, name=lm.name, source=source, input_shapes=input_shapes)
    bg = coarsen(og, max_blocks=max_blocks)
    timings = {"import_s": time.perf_counter() - t0}
    measured = None
    if is_host(soc):
        from .graph.feeds import load_feeds
        from .profiling.host import measure_host, measure_ranges

        check_declared(og.model, source, HOST_SOC, [])  # host PUs run ONNX Runtime's CPU operators only
        frame = load_feeds(feeds, og)[0] if feeds else None
        t1 = time.perf_counter()
        if db:
            from .profiling.db import ProfileDB

            with ProfileDB(db) as profile_db:
                hp = measure_host(bg, progress=measure_progress, db=profile_db, feeds=frame)
        else:
            hp = measure_host(bg, progress=measure_progress, feeds=frame)
        soc_obj, measured = hp.soc, hp.block_time_s
        # the whole model as one sub-model, as the single and replicated mappings run it (issue 13), timed with
        # every other core running it too: a replicated mapping's replicas run at once (its measured throughput
        # was 0.94-0.96x the prediction from the model timed alone; 0.99x so); a single mapping on an otherwise
        # idle machine runs ~2 % faster than this
        whole_s = measure_ranges(bg, [(0, len(bg.blocks))], feeds=frame)
        timings["measure_s"] = time.perf_counter() - t1
    else:
        from .soc.resolve import resolve_soc

        soc_obj = resolve_soc(soc)
        check_declared(og.model, source, soc_obj.name, [p.supported_ops for p in soc_obj.pus.values()])
        if db:
            from .profiling.predict import costs_from_db

            soc_obj, measured = costs_from_db(bg, soc_obj, db)
    if pus:
        soc_obj = soc_obj.restrict(list(pus))
    problem = problem_from_blocks(bg, soc_obj, measured_s=measured, name=lm.name)
    if is_host(soc):  # identical cores: the stage-level time holds on every PU
        problem.range_time_s = {(a, b, p): t for (a, b), t in whole_s.items() for p in range(problem.n_pus)}
    from .cost.pipeline_terms import terms_from_soc

    return Prepared(lm, og, bg, soc_obj, problem, max_blocks, timings, terms_from_soc(soc_obj))


def optimize(prep: Prepared, options, out_dir: Path, progress=None, plot: bool = True):
    """Search ``prep`` and write ``out_dir/pareto.json`` and ``out_dir/pareto.png`` (both or neither).

    Returns the document (:class:`parapipe.mapping.ParetoDoc`).
    """
    from .mapping import doc_from_result
    from .search.api import search
    from .soc.resolve import soc_ref

    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    result = search(prep.problem, options, progress=progress, terms=prep.terms)
    blocks = {b.name: list(b.ops) for b in prep.block_graph.blocks}
    doc = doc_from_result(result, prep.loaded.name, prep.loaded.sha256, soc_ref(prep.soc), blocks=blocks,
                          search={"max_blocks": prep.max_blocks, "seed": options.seed, **prep.timings_s},
                          **model_notes(prep.opgraph))
    write_outputs(doc, out_dir, plot)
    return doc


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
