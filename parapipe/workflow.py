"""The library behind the CLI: prepare a problem, optimise it, run a chosen mapping on this host.

Each function does one job, logs instead of printing, and raises :class:`parapipe.errors.ParapipeError` subclasses
for user errors; the CLI (:mod:`parapipe.cli`) formats what they return.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence


from .errors import input_error

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOCKS = 48
"""Blocks the search works on by default: chains are merged further until at most this many remain
(measured: DenseNet-121 on a 4-PU profile searches in ~2 s at 48 blocks, ~250 s at its natural 242 blocks)."""

HOST_SOC = "host"


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
    if soc == HOST_SOC:
        from .graph.feeds import load_feeds
        from .profiling.host import measure_host

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
        timings["measure_s"] = time.perf_counter() - t1
    else:
        from .soc import load_soc

        soc_obj = load_soc(soc)
        check_declared(og.model, source, soc_obj.name, [p.supported_ops for p in soc_obj.pus.values()])
        if db:
            from .profiling.predict import costs_from_db

            soc_obj, measured = costs_from_db(bg, soc_obj, db)
    if pus:
        soc_obj = soc_obj.restrict(list(pus))
    problem = problem_from_blocks(bg, soc_obj, measured_s=measured, name=lm.name)
    return Prepared(lm, og, bg, soc_obj, problem, max_blocks, timings)


def optimize(prep: Prepared, options, out_dir: Path, progress=None, plot: bool = True) -> Dict[str, Any]:
    """Search ``prep`` and write ``out_dir/pareto.json`` and ``out_dir/pareto.png`` (both or neither).

    Returns the pareto.json document.
    """
    from .mapping_doc import result_to_doc, write_json_atomic
    from .search.api import search

    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    result = search(prep.problem, options, progress=progress)
    blocks = {b.name: list(b.ops) for b in prep.block_graph.blocks}
    doc = result_to_doc(result, prep.loaded.name, prep.loaded.sha256, prep.soc.name, blocks=blocks,
                        search={"max_blocks": prep.max_blocks, "seed": options.seed, **prep.timings_s})
    doc.update(model_notes(prep.opgraph))
    png = out_dir / "pareto.png"
    tmp_png = out_dir / ".pareto.png.tmp.png"
    if plot:
        from .report.plots import plot_pareto

        plot_pareto(doc, tmp_png)
    write_json_atomic(doc, out_dir / "pareto.json")
    if plot:
        from .mapping_doc import default_file_mode

        os.chmod(tmp_png, default_file_mode())
        tmp_png.replace(png)
    elif png.exists():
        png.unlink()  # a plot of an earlier result must not sit next to this pareto.json
    return doc


def model_notes(og) -> Dict[str, Any]:
    """The pareto.json fields about the model's inputs and costs: ``input_shapes`` (checked by ``run``) and
    ``cost_notes`` (dims parapipe chose, ops costed without a FLOP formula, ops whose cost is one sample's)."""
    return {"input_shapes": og.input_shapes,
            "cost_notes": {"input_dims_chosen": list(og.input_notes),
                           "ops_without_flop_formula": og.ops_without_flop_formula,
                           "data_dependent_ops": og.data_dependent_ops}}


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


@dataclass
class RunReport:
    """Measured next to predicted figures of one mapping run on this host."""

    point_id: str
    frames: int
    throughput_per_s: float
    latency_p50_s: float
    latency_p90_s: float
    latency_p99_s: float
    predicted_throughput_per_s: float
    predicted_latency_s: float
    outputs_match: bool
    max_abs_diff: float
    stages: int
    pu_utilisation: Dict[str, float]
    metrics: Any = None
    handed_over_tensors: int = 0
    max_scaled_diff_handed_over: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "metrics"}
        return d


def run_mapping(model: str, mapping_path: str, point: str, frames: int = 200, warmup: int = 5, seed: int = 0,
                atol: float = 1e-5, input_shapes: Optional[Dict[str, Sequence[int]]] = None,
                feeds: Optional[str] = None) -> RunReport:
    """Execute one point of a pareto.json on this host with the pipelined executor and check its outputs.

    Every model output and every tensor handed from one task to another is compared with the unsplit model on the
    same inputs (``max_abs_diff`` over the model outputs, which match within ``atol`` absolute or relative to their
    largest value; handed-over tensors relative to their largest value).
    The handed-over tensors matter: the onnx wheel's light zoo models have constant weights, so their final
    softmax hardly depends on the input and an output check alone would prove little.

    The inputs are ``feeds`` (an .npz, cycled to ``frames``) or seeded frames whose integer inputs lie in the range
    the graph allows (:func:`parapipe.graph.feeds.make_frames`); ``input_shapes`` must equal those stored in the
    mapping.

    Raises
    ------
    InputError
        Mapping computed for another model (sha256), another SoC than ``host``, other input shapes, unknown point,
        or block names that do not match the model; bad feeds, or feeds the unsplit model fails on (a feed error
        naming the input).
    ExecutionError
        A stage failed.
    """
    from .runtime import max_abs_diff, run_pipeline
    from .runtime.host_plan import load_host_mapping
    from .runtime.reference import handed_over_tensors, max_scaled_diff, reference_with_outputs, with_outputs

    if frames < 1:
        raise input_error("--frames", None, f"must be >= 1, got {frames}", "give a positive frame count")
    from .graph.feeds import feed_error, load_feeds, make_frames
    from .runtime import reference_outputs

    hm = load_host_mapping(model, mapping_path, point, input_shapes)
    og, pt = hm.opgraph, hm.point
    reference, handed = reference_with_outputs(hm.loaded.model, og, handed_over_tensors(hm.plan))
    plan = with_outputs(hm.plan, handed)
    outputs = list(hm.plan.model_outputs)
    if feeds:
        given = load_feeds(feeds, og)
        inputs = [given[i % len(given)] for i in range(frames)]
    else:
        inputs = make_frames(og, frames, seed)
    try:
        ref = reference_outputs(reference, inputs, threads=1)
    except Exception as exc:  # ONNX Runtime's errors: the unsplit model fails on these inputs
        raise feed_error(og, exc, f"--feeds {feeds}" if feeds else "generated inputs") from exc
    outs, metrics = run_pipeline(plan, inputs, warmup=warmup)
    diff = float(max_abs_diff([{k: o[k] for k in outputs} for o in outs], [{k: r[k] for k in outputs} for r in ref]))
    scaled = max([0.0] + [max_scaled_diff(o, r, handed) for o, r in zip(outs, ref)])
    # outputs of large magnitude (logits ~20 after an LSTM) differ by float rounding of fused kernels: an output
    # also matches within atol of its largest value, as handed-over tensors do
    out_scaled = max([0.0] + [max_scaled_diff(o, r, outputs) for o, r in zip(outs, ref)])
    return RunReport(point_id=pt["id"], frames=frames, throughput_per_s=metrics.throughput_per_s,
                     latency_p50_s=metrics.latency_p50_s, latency_p90_s=metrics.latency_p90_s,
                     latency_p99_s=metrics.latency_p99_s,
                     predicted_throughput_per_s=1.0 / pt["period_s"], predicted_latency_s=pt["latency_s"],
                     outputs_match=bool((diff <= atol or out_scaled <= atol) and scaled <= atol),
                     max_abs_diff=diff, stages=len(hm.stages),
                     pu_utilisation=dict(metrics.pu_utilisation), metrics=metrics, handed_over_tensors=len(handed),
                     max_scaled_diff_handed_over=scaled)
