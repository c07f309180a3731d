"""Prepare a problem: a model imported, coarsened and costed on a SoC profile, ready for the search.

The library behind every command that searches or evaluates a model (``optimize``, ``evaluate``): functions log
instead of printing and raise :class:`parapipe.errors.ParapipeError` subclasses for user errors; the CLI
(:mod:`parapipe.cli`) formats what they return. Searching a prepared problem is :mod:`parapipe.app.optimize`;
running a chosen mapping is :mod:`parapipe.app.run` (this machine) and :mod:`parapipe.app.deploy` (a board).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Optional, Sequence, Tuple
from typing import Mapping as TypingMapping

import numpy as np

from parapipe.cost.pipeline_terms import PipelineTerms
from parapipe.cost.problem import MappingProblem, block_range
from parapipe.graph.coarsen import BlockGraph
from parapipe.graph.opgraph import OpGraph
from parapipe.graph.zoo import LoadedModel
from parapipe.measure.trust import MeasureLog, StepProgress
from parapipe.soc.identity import HOST_SOC, is_host
from parapipe.soc.profile import SoC

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_BLOCKS", "Prepared", "prepare", "model_notes", "timed_loaded"]

DEFAULT_MAX_BLOCKS = 48
"""Blocks the search works on by default: chains are merged further until at most this many remain
(measured: DenseNet-121 on a 4-PU profile searches in ~2 s at 48 blocks, ~250 s at its natural 242 blocks)."""


@dataclass(frozen=True)
class Prepared:
    """A model imported, coarsened and costed on a SoC, ready for the search.

    Frozen: a search round that installs stage-level times builds a new one (:func:`dataclasses.replace` with a
    new :class:`~parapipe.cost.problem.MappingProblem`), as ``optimize --refine`` does with new terms.

    Attributes
    ----------
    loaded : LoadedModel
        The model as loaded (name, path, SHA-256, ONNX proto).
    opgraph : OpGraph
        Its operator graph at the input shapes used.
    block_graph : BlockGraph
        Its blocks (coarsened to at most ``max_blocks``).
    soc : SoC
        The profile searched (restricted to ``--pus``); on ``--soc host`` the profile measured here.
    problem : MappingProblem
        Blocks x PUs costs (s, W, bytes); stage-level times in ``submodel_time_s`` where measured.
    max_blocks : int or None
        The coarsening target (None: no limit).
    timings_s : dict of str to float
        Seconds spent: ``import_s`` (import and coarsening), ``measure_s`` (``--soc host`` block timing).
    terms : PipelineTerms or None
        Pipeline-level terms of the cost model: the profile's ``pipeline:`` section, or what ``optimize
        --refine`` learnt; every reported point must be re-evaluated with them
        (:func:`parapipe.cost.evaluate.evaluate`). None: the plain model.
    host : bool
        ``--soc host``: the blocks were timed on this machine, which can time stage sub-models too
        (:func:`parapipe.app.stage_timing.time_mapping_stages`).
    host_feeds : dict of str to ndarray, optional
        ``--soc host``: the input values the measurement used, one array per model input (None: generated).
    measure_log : MeasureLog, optional
        ``--soc host``: the spread and load of every measurement taken for it (stage timing adds to it).
    """

    loaded: LoadedModel
    opgraph: OpGraph
    block_graph: BlockGraph
    soc: SoC
    problem: MappingProblem
    max_blocks: Optional[int]
    timings_s: Dict[str, float] = field(default_factory=dict)
    terms: Optional[PipelineTerms] = None
    host: bool = False
    host_feeds: Optional[Dict[str, np.ndarray]] = None
    measure_log: Optional[MeasureLog] = None


def prepare(model: str, soc: str, pus: Optional[Sequence[str]] = None, max_blocks: Optional[int] = DEFAULT_MAX_BLOCKS,
            measure_progress: Optional[Callable[[int, int], None]] = None, db: Optional[str] = None,
            input_shapes: Optional[TypingMapping[str, Sequence[int]]] = None, feeds: Optional[str] = None,
            loaded: Optional[LoadedModel] = None, progress: Optional[StepProgress] = None,
            host_soc: Optional[Any] = None) -> Prepared:
    """Load ``model`` (registry name or .onnx path), coarsen it, and build its problem on ``soc``.
    ``loaded``: ``model`` already loaded (:func:`parapipe.graph.zoo.load_model`), so it is not read again.
    ``host_soc``: on ``host``, this machine's profile measured by an earlier ``prepare`` (``Prepared.soc``): only
    the model's blocks are measured (the machine's transfer and power figures do not depend on the model).

    ``soc`` is a bundled profile name, a YAML path, or ``"host"``: this machine, each core a PU, with every block
    measured for real with ONNX Runtime (:func:`parapipe.measure.submodels.measure_local`). ``db``, a profile database:
    on ``host`` its block measurements and the whole model's stage-level time are reused (and new ones stored;
    the whole model's is timed again with ``feeds``), so that every command costing the model on that database
    costs it alike; on another SoC the measured times replace
    the model where they exist and the model calibrated on the database fills the rest
    (:func:`parapipe.calibration.predict.costs_from_db`). ``input_shapes`` (``--input-shape``) fix symbolic input
    dims (:func:`parapipe.graph.inputs.resolve_input_shapes`); ``feeds`` (an .npz, ``--feeds``) are the input
    values the host measurement uses (default: one frame drawn by :func:`ppexec.frames.draw_frames`). A custom-domain
    operator no PU declares is refused before anything is measured
    (:func:`parapipe.graph.support.check_declared`). ``progress(step, done, total)`` follows the host's long
    steps (``measuring this machine``, ``measuring blocks`` unless ``measure_progress`` is given, ``timing the
    whole model``); the spread and load of every host measurement go to ``Prepared.measure_log``.
    """
    from parapipe.cost.pipeline_terms import terms_from_soc
    from parapipe.cost.roofline import problem_from_blocks
    from parapipe.graph.coarsen import coarsen
    from parapipe.graph.feeds import read_feeds
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.support import check_declared
    from parapipe.graph.zoo import load_model

    t0 = time.perf_counter()

    lm = loaded if loaded is not None else load_model(model)
    source = str(lm.path or model)
    og = import_onnx(lm.model, name=lm.name, source=source, input_shapes=input_shapes,
                     feeds=read_feeds(feeds) if feeds else None)
    bg = coarsen(og, max_blocks=max_blocks)
    timings = {"import_s": time.perf_counter() - t0}
    measured = None
    measured_at: Optional[Dict[Tuple[str, str, float], float]] = None
    record = MeasureLog() if is_host(soc) else None

    def step(name: str) -> Optional[Callable[[int, int], None]]:
        return None if progress is None else (lambda done, total: progress(name, done, total))

    if is_host(soc):
        from parapipe.graph.feeds import load_feeds
        from parapipe.measure.submodels import measure_local

        check_declared(og.structure, source, HOST_SOC, [])  # host PUs run ONNX Runtime's CPU operators only
        frame = load_feeds(feeds, og)[0] if feeds else None
        t1 = time.perf_counter()
        if db:
            from parapipe.profiledb.db import ProfileDB

            with ProfileDB(db) as profile_db:
                hp = measure_local(bg, progress=measure_progress or step("measuring blocks"), db=profile_db,
                                   feeds=frame, record=record, soc_progress=step("measuring this machine"), soc=host_soc)
        else:
            hp = measure_local(bg, progress=measure_progress or step("measuring blocks"), feeds=frame,
                               record=record, soc_progress=step("measuring this machine"), soc=host_soc)
        soc_obj, measured = hp.soc, hp.block_time_s
        # the whole model as one sub-model, as the single and replicated mappings run it; alone when the
        # profile's pipeline terms model co-running (the host's prior does), else with every other core running
        # it too, as a replicated mapping's replicas do (measured 1.00-1.06x slower than alone on two cores)
        whole_s = _whole_model_time(bg, soc_obj, frame, timed_loaded(terms_from_soc(soc_obj)), record,
                                    step("timing the whole model"), None if feeds else db)
        timings["measure_s"] = time.perf_counter() - t1
    else:
        from parapipe.app.resolve import resolve_soc

        soc_obj = resolve_soc(soc)
        check_declared(og.structure, source, soc_obj.name, [p.supported_ops for p in soc_obj.pus.values()])
        if db:
            from parapipe.calibration.predict import block_times_at_frequencies, costs_from_db

            soc_obj, measured = costs_from_db(bg, soc_obj, db)
            measured_at = block_times_at_frequencies(bg, soc_obj, db)
    if pus:
        soc_obj = soc_obj.restrict(list(pus))
    problem = problem_from_blocks(bg, soc_obj, measured_s=measured, name=lm.name, measured_at_s=measured_at)
    if is_host(soc):  # identical cores: the stage-level time holds on every PU
        problem = replace(problem, submodel_time_s={(p, blocks): t for blocks, t in whole_s.items()
                                                    for p in range(problem.n_pus)})
    return Prepared(lm, og, bg, soc_obj, problem, max_blocks, timings, terms_from_soc(soc_obj), host=is_host(soc),
                    host_feeds=frame if is_host(soc) else None, measure_log=record)


def _whole_model_time(bg: BlockGraph, soc: SoC, frame, loaded: bool, record, progress, db: Optional[str]
                      ) -> Dict[Tuple[int, ...], float]:
    """The stage-level time of the whole model on this machine (:func:`parapipe.measure.submodels.
    measure_submodels`), keyed by its block indices; with ``db`` reused from (or stored in) that database as a
    ``stage`` row of soc ``host`` (signature: the blocks' signatures and whether it was timed loaded), as block
    times are, so that the same model is costed alike by every command given that database."""
    import hashlib

    import onnxruntime as ort

    from parapipe.measure.submodels import measure_submodels
    from parapipe.measure.timer import LOCAL_HOST
    from parapipe.profiledb.catalog import block_signature
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.records import Measurement, utc_now_iso

    key = block_range(0, len(bg.blocks))
    og = bg.opgraph
    digest = hashlib.sha256("\n".join(block_signature(og, b) for b in bg.blocks).encode()).hexdigest()
    signature = f"whole-model:{'loaded' if loaded else 'alone'}:{digest}"
    batch = og.tensors[og.inputs[0]].shape[0] if og.inputs and og.tensors[og.inputs[0]].shape else 1
    batch = batch if isinstance(batch, int) and batch >= 1 else 1
    pu = soc.pu_names[0]
    if db:
        with ProfileDB(db) as profile_db:
            row = profile_db.get(HOST_SOC, pu, signature, batch, "stage", ort.__version__)
        if row is not None:
            log.info("whole-model time of %s reused from %s: %.3f ms", og.name, db, row.median_s * 1e3)
            return {tuple(key): row.median_s}
    whole_s = measure_submodels(bg, [key], feeds=frame, loaded=loaded, record=record, progress=progress)
    if db:
        t = float(whole_s[tuple(key)])
        nbytes = int(sum(b.in_nbytes + b.out_nbytes for b in bg.blocks))
        with ProfileDB(db) as profile_db:
            profile_db.put([Measurement(HOST_SOC, pu, signature, "whole model", batch, ort.__version__, t, t, 10,
                                        utc_now_iso(), LOCAL_HOST, "stage", nbytes)])
    return whole_s


def model_notes(og: OpGraph) -> Dict[str, Any]:
    """The pareto.json fields about the model's inputs and costs: ``input_shapes`` (checked by ``run``) and
    ``cost_notes`` (dims parapipe chose, ops costed without a FLOP formula, ops whose cost is one sample's)."""
    return {"input_shapes": og.input_shapes,
            "cost_notes": {"input_dims_chosen": list(og.input_notes),
                           "ops_without_flop_formula": og.ops_without_flop_formula,
                           "data_dependent_ops": og.data_dependent_ops}}


def timed_loaded(terms: Optional[PipelineTerms]) -> bool:
    """Whether stage-level times are taken loaded (every other core running the same sub-model) under the
    pipeline terms ``terms`` (None: the plain model): unless the terms slow co-running stages themselves
    (:meth:`parapipe.cost.pipeline_terms.PipelineTerms.models_corunning`), which needs times taken alone."""
    return terms is None or not terms.models_corunning()
