"""``parapipe run``: one point of a mapping loaded with its model (:func:`load_mapping`), executed on this
machine, verified, and recorded.

The local run is the run-and-verify of a deploy bundle (:func:`ppexec.bundle_run.run_verified`), fed in memory:
:func:`run_spec` holds what a bundle would carry (the plan built once by
:func:`parapipe.execution.plan.build_plan`, the reference model, the frames, the predicted figures), so no
bundle is written or read back and the plan is validated once, by the executor. A local run and a board run
(``parapipe deploy``: :func:`ppexec.bundle_run.run_bundle`) therefore report the same figures
(:class:`ppexec.report.RunReport`) in the same way; a local report has no ``bundle_id``. Before the run, the
machine's facts are checked against every PU binding (:func:`parapipe.execution.facts.check_board`).

Operating points: ``frequencies_hz`` (PU -> Hz; by default those the point states, :func:`point_frequencies`;
``--frequency`` gives others, ``--no-dvfs`` none) are set on the machine that runs the plan for the run and
restored after it (:func:`ppexec.dvfs.applied`, inside the run-and-verify); each PU's frequency domain is its
profile's ``execution.devfreq`` device, else the cpufreq policy of its CPUs (:func:`frequency_domains`). The
report records per PU what was asked and what the kernel read back; :func:`frequency_warnings` says when the
board refused or throttled one (the prediction then does not apply).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ppexec.bundle_run import DISTINCT_FRAMES, ReferenceRunError, RunSpec, run_verified
from ppexec.frames import draw_frames
from ppexec.plan import ExecutionPlan
from ppexec.reference import handed_over_tensors
from ppexec.report import RunReport

from parapipe.errors import input_error
from parapipe.execution.bindings import bindings_for
from parapipe.execution.plan import build_plan
from parapipe.execution.reference import reference_for_check
from parapipe.graph.coarsen import BlockGraph, coarsen
from parapipe.graph.feeds import read_feeds
from parapipe.graph.opgraph import OpGraph, import_onnx
from parapipe.graph.zoo import LoadedModel, load_model
from parapipe.mapping import ParetoDoc, Point, check_model, read_pareto, select_point

log = logging.getLogger(__name__)

__all__ = ["LoadedMapping", "load_mapping", "load_point", "run_spec", "run_local", "record_run", "check_dispatch",
           "frequency_domains", "frequency_warnings"]


@dataclass(frozen=True)
class LoadedMapping:
    """One point of a pareto.json with its model and its execution plan.

    Attributes
    ----------
    loaded : LoadedModel
    opgraph : OpGraph
    block_graph : BlockGraph
        Coarsened as the mapping was (``search.max_blocks`` of the document).
    doc : ParetoDoc
    point : Point
    plan : ExecutionPlan
        Bindings as the profile says, except the substituted PUs (its task models may be edited, e.g. by tests).
    substituted : dict of str to tuple of int
        PU -> CPUs it runs on instead of its profile binding (``--bind``).
    source : str
        The mapping file (for messages).
    feeds : str, optional
        An .npz of input frames (``--feeds``) the run uses instead of generated ones.
    frequencies_hz : dict of str to float
        PU -> operating point (Hz) set for the run (``--frequency``); empty: the board's own settings.
    frequency_domains : dict of str to dict
        PU -> its frequency domain (``{"cpus": [...]}`` or ``{"devfreq": name}``) for every PU of
        ``frequencies_hz`` (:func:`frequency_domains`).
    frequencies_required : bool
        True when the frequencies were asked for (``--frequency``): a board that cannot set them refuses the
        run; False when they are the point's own: the run then goes ahead at the board's settings, saying so.
    """

    loaded: LoadedModel
    opgraph: OpGraph
    block_graph: BlockGraph
    doc: ParetoDoc
    point: Point
    plan: ExecutionPlan
    substituted: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    source: str = "mapping"
    feeds: Optional[str] = None
    frequencies_hz: Dict[str, float] = field(default_factory=dict)
    frequency_domains: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    frequencies_required: bool = True

    @property
    def predicted_throughput_per_s(self) -> float:
        """``1 / period_s`` of the point (the cost model's throughput)."""
        return 1.0 / float(self.point.period_s)

    @property
    def predicted_latency_s(self) -> float:
        """The point's modelled latency, s."""
        return float(self.point.latency_s)

    def predicted(self) -> Dict[str, float]:
        """The cost model's figures a run reports next to its own: ``energy_j`` (J per inference),
        ``latency_s`` (s), ``period_s`` (s), ``throughput_per_s`` (keys in the order a bundle's plan.json
        stores them, so a local and a board report print alike)."""
        return {"energy_j": float(self.point.energy_j), "latency_s": self.predicted_latency_s,
                "period_s": float(self.point.period_s), "throughput_per_s": self.predicted_throughput_per_s}

    def model_id(self) -> Dict[str, str]:
        """``{"name", "sha256"}`` of the model, as a run report and a bundle record it."""
        return {"name": self.loaded.name, "sha256": self.loaded.sha256}


def load_mapping(model: str, mapping_path: str, point: str,
                 binds: Optional[Mapping[str, Sequence[int]]] = None,
                 input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                 feeds: Optional[str] = None, frequencies_hz: Optional[Mapping[str, float]] = None) -> LoadedMapping:
    """Load ``model`` (once: imported and coarsened once), read the mapping, select ``point`` and build its
    execution plan.

    Parameters
    ----------
    model : str
        Registry name or .onnx path (the model the mapping was computed for).
    mapping_path : str
        pareto.json written by ``parapipe optimize`` for any SoC profile.
    point : str
        Point id or ``best-throughput`` | ``best-latency`` | ``best-energy``.
    binds : dict of str to sequence of int, optional
        PUs to run on CPUs instead (``--bind``).
    input_shapes : dict of str to sequence of int, optional
        ``--input-shape`` values; they must equal the shapes stored in the mapping (``input_shapes``), which are
        used when none are given.
    feeds : str, optional
        ``--feeds``: an .npz of input frames, kept in the result for the run.
    frequencies_hz : dict of str to float, optional
        PU -> operating point, Hz (``--frequency``), set for the run; empty (``--no-dvfs``): the board's own
        settings; None (default): the operating points the point states (:func:`point_frequencies`).

    Raises
    ------
    InputError
        Unreadable or inconsistent mapping, a mapping for another model (sha256), input shapes other than those
        the mapping was computed for, an unknown point, block names that do not match the model, a bad
        ``--bind``, a frequency for a PU the profile lacks or whose domain it does not name.
    """
    doc = read_pareto(mapping_path)
    lm = load_model(model)
    check_model(doc, lm, mapping_path)
    pt = select_point(doc, point, path=mapping_path)
    return load_point(lm, doc, pt, mapping_path, binds, input_shapes, feeds, frequencies_hz)


def load_point(lm: LoadedModel, doc: ParetoDoc, pt: Point, mapping_path: str,
               binds: Optional[Mapping[str, Sequence[int]]] = None,
               input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
               feeds: Optional[str] = None, frequencies_hz: Optional[Mapping[str, float]] = None) -> LoadedMapping:
    """:func:`load_mapping` for a loaded model and a point already selected from its document (checked to be
    this model's, :func:`parapipe.mapping.check_model`): the model imported and coarsened once, its blocks
    checked against the document's, the plan built. ``mapping_path`` names the document in messages; the other
    parameters and the errors as :func:`load_mapping`'s.
    """
    stored = doc.input_shapes
    for name, shape in (input_shapes or {}).items():
        if stored is not None and [int(d) for d in shape] != stored.get(name):
            planned = ", ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in stored.items())
            raise input_error("--input-shape", name, f"{'x'.join(map(str, shape))} differs from the shapes the "
                              f"mapping was computed for ({planned})",
                              "run with those shapes, or optimize again with the new ones")
    og = import_onnx(lm.model, name=lm.name, source=str(lm.path or lm.name),
                     input_shapes=stored if stored is not None else input_shapes,
                     feeds=read_feeds(feeds) if feeds else None)
    bg = coarsen(og, max_blocks=doc.search.get("max_blocks"))
    if {b.name: list(b.ops) for b in bg.blocks} != doc.blocks:
        raise input_error(mapping_path, "blocks", "block structure differs from this model's",
                          "re-run 'parapipe optimize' with this version of parapipe")
    bindings, substituted = bindings_for(doc, pt, binds, mapping_path)
    plan = build_plan(og, bg, pt.stages, bindings)
    if frequencies_hz is None:
        freqs = point_frequencies(doc, pt, substituted)
    else:
        freqs = {str(pu): float(hz) for pu, hz in frequencies_hz.items()}
    domains = frequency_domains(doc, freqs, substituted)
    if any(b.runtime == "ncnn" for b in bindings.values()):  # converted on this host, before any upload
        from parapipe.execution.ncnn_convert import compile_plan

        compile_plan(plan)
    log.info("point %s of %s: %d stage(s), %d task(s)", pt.id, mapping_path, len(pt.stages),
             sum(len(s) for s in plan.stages))
    return LoadedMapping(lm, og, bg, doc, pt, plan, substituted, mapping_path, feeds, freqs, domains,
                         frequencies_hz is not None)


def frequency_domains(doc: ParetoDoc, frequencies_hz: Mapping[str, float],
                      substituted: Optional[Mapping[str, Sequence[int]]] = None) -> Dict[str, Dict[str, Any]]:
    """The frequency domain of every PU of ``frequencies_hz``, as the board side finds it
    (:func:`ppexec.dvfs.find_domain`): ``{"devfreq": name}`` where the profile's ``execution.devfreq`` names
    one, else ``{"cpus": [...]}`` (the cpufreq policy holding them; a ``--bind`` substitution's CPUs).

    Raises
    ------
    InputError
        A PU the profile lacks, a frequency that is not a positive number of Hz, a PU with neither
        ``execution.cpus`` nor ``execution.devfreq``.
    """
    import math

    substituted = substituted or {}
    domains: Dict[str, Dict[str, Any]] = {}
    for pu, hz in frequencies_hz.items():
        if pu not in doc.soc.pus:
            raise input_error("--frequency", pu, f"is not a PU of the profile {doc.soc.name} "
                              f"(PUs: {', '.join(sorted(doc.soc.pus))})", "name one of its PUs")
        if not math.isfinite(hz) or hz <= 0:
            raise input_error("--frequency", pu, f"must be a positive frequency, got {hz!r} Hz",
                              "give one of the PU's operating points in MHz, e.g. big=1800")
        execution = doc.soc.pus[pu].execution
        if execution.devfreq and pu not in substituted:
            domains[pu] = {"devfreq": execution.devfreq}
            continue
        cpus = list(substituted.get(pu) or execution.cpus or ())
        if not cpus:
            raise input_error("--frequency", pu, "the profile gives this PU neither execution.cpus nor "
                              "execution.devfreq, so its frequency domain is unknown",
                              "add execution.devfreq (the /sys/class/devfreq device) to the profile, or leave "
                              f"--frequency {pu} out")
        domains[pu] = {"cpus": [int(c) for c in cpus]}
    return domains


def point_frequencies(doc: ParetoDoc, point, substituted: Optional[Mapping[str, Sequence[int]]] = None
                      ) -> Dict[str, float]:
    """The operating points a point states (``frequency_hz`` of its stages and replicas), one per PU, as the run
    sets them: a PU the point runs at several points (stages at different frequencies) is held at the highest of
    them for the whole run (the executor does not switch per stage; logged, and the prediction then assumes
    more switching and less speed than the run has); a PU substituted with ``--bind`` keeps its new CPUs' own
    settings; a PU whose profile names no frequency domain (neither ``execution.cpus`` nor ``execution.devfreq``)
    is left at the board's settings (logged)."""
    out: Dict[str, float] = {}
    bound = []
    for pu, freqs in point.frequencies_hz().items():
        if pu in (substituted or {}):
            bound.append(f"{pu} {max(freqs) / 1e6:g} MHz")
            continue
        execution = doc.soc.pus[pu].execution if pu in doc.soc.pus else None
        if execution is None or not (execution.cpus or execution.devfreq):
            log.warning("PU %s: the profile names no frequency domain (execution.cpus or execution.devfreq), so "
                        "its operating point %g MHz is not set; the board's governor decides", pu,
                        max(freqs) / 1e6)
            continue
        if len(freqs) > 1:
            log.warning("PU %s serves stages at %s: the run holds it at %g MHz (no switching per stage), so the "
                        "prediction does not apply exactly", pu, ", ".join(f"{f / 1e6:g}" for f in freqs),
                        max(freqs) / 1e6)
        out[pu] = max(freqs)
    if bound:
        log.warning("the point's operating points of the PUs run with --bind (%s) are not set: their CPUs keep the "
                    "board's own settings", ", ".join(bound))
    return out


def frequency_warnings(report: RunReport) -> List[str]:
    """One line per PU whose operating point the board refused or throttled (``report.frequencies``), saying
    the prediction does not apply to the run."""
    lines = []
    unset = []
    for pu, f in sorted(getattr(report, "frequencies", {}).items()):
        if f.get("domain") is None:  # not set at all (the point's own operating points, on a board that cannot)
            unset.append((pu, f))
        elif f.get("status") != "ok":
            lines.append(f"PU {pu}: asked {f['requested_hz'] / 1e6:g} MHz, the board {f.get('status')} it: "
                         f"{f.get('reason')}; the prediction does not apply to this run")
    if unset:
        reason = str(unset[0][1].get("reason") or "").split("; run with --no-dvfs")[0]
        asked = ", ".join(f"{pu} {f['requested_hz'] / 1e6:g} MHz" for pu, f in unset)
        lines.append(f"the point's operating points ({asked}) were not set ({reason}): the run used the board's own "
                     "settings, so the prediction does not apply (set them as root on the board, or pass --no-dvfs "
                     "to say so)")
    return lines


def check_dispatch(dispatch: str) -> None:
    """Refuse a replica dispatch policy the executor does not know (InputError naming
    ``--replica-dispatch``)."""
    from ppexec.executor import DISPATCH_POLICIES

    if dispatch not in DISPATCH_POLICIES:
        raise input_error("--replica-dispatch", None, f"unknown policy {dispatch!r}",
                          f"use one of {', '.join(DISPATCH_POLICIES)}")


def run_local(model: str, mapping_path: str, point: str, frames: int = 200, warmup: int = 5, seed: int = 0,
              binds: Optional[Mapping[str, Sequence[int]]] = None, atol: float = 1e-5, rtol: float = 1e-5,
              idle_frames: int = 10, trace: Optional[str] = None,
              on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
              input_shapes: Optional[Mapping[str, Sequence[int]]] = None, feeds: Optional[str] = None,
              dispatch: str = "pull", frequencies_hz: Optional[Mapping[str, float]] = None):
    """Run one point of a pareto.json on this machine with the pipelined executor and check its outputs.

    Every model output and every tensor handed from one task to another is compared with the unsplit model on
    the same frames (``distinct_frames`` seeded frames fed cyclically): the onnx wheel's light zoo models have
    constant weights, so their softmax hardly depends on the input and an output check alone would prove little.

    Parameters
    ----------
    model, mapping_path, point : str
        As for :func:`load_mapping`.
    frames, warmup, seed : int
        Measured frames (>= 1), unmeasured frames first, seed of the frames.
    binds : dict of str to sequence of int, optional
        ``--bind`` substitutions.
    atol, rtol : float
        Match tolerances (widened per dtype; :func:`ppexec.reference.dtype_tolerance`).
    idle_frames : int
        Frames sent one at a time for the idle latency.
    trace : str, optional
        Write the Chrome trace of the run here.
    on_event : callable(dict), optional
        Progress events (as ``deploy``'s ``progress`` events).
    input_shapes : dict of str to sequence of int, optional
        ``--input-shape``: must equal the shapes stored in the mapping.
    feeds : str, optional
        An .npz of input frames (``--feeds``) used instead of generated frames (seeded; integer inputs drawn
        from the range the graph allows, :func:`parapipe.graph.feeds.integer_input_ranges`).
    dispatch : str
        How a replicated stage's frames reach its replicas (``--replica-dispatch``): ``"pull"`` (default) or
        ``"shares"`` (:data:`ppexec.executor.DISPATCH_POLICIES`).
    frequencies_hz : dict of str to float, optional
        PU -> operating point (Hz) set on this machine for the run and restored after it, however it ends
        (``--frequency``); None or empty: the machine's own settings (``--no-dvfs``). The sysfs root is
        ``$PPEXEC_SYSFS_ROOT`` or ``/sys``.

    Returns
    -------
    (LoadedMapping, RunReport)

    Raises
    ------
    InputError
        Bad mapping, point, ``--bind``, counts, feeds, dispatch policy; a PU this machine cannot run as bound
        (CPUs, runtime, provider); inputs the unsplit model fails on (a feed error naming the input); a
        ``--frequency`` for an unknown PU.
    ppexec.dvfs.DvfsRefused
        A frequency that cannot be set (not in the domain's table, no permission), before anything ran.
    ppexec.errors.PipelineError
        A stage failed (naming stage, PU and task).
    """
    from parapipe.execution.facts import check_board, local_facts

    if frames < 1:
        raise input_error("--frames", None, f"must be >= 1, got {frames}", "give a positive frame count")
    check_dispatch(dispatch)
    lm = load_mapping(model, mapping_path, point, binds, input_shapes, feeds, frequencies_hz)
    check_board(lm.plan.bindings, local_facts(), "this machine")
    spec = run_spec(lm, seed)
    try:
        report, trace_doc = run_verified(spec, frames=frames, warmup=warmup, atol=atol, rtol=rtol,
                                         idle_frames=idle_frames, emit=on_event, dispatch=dispatch)
    except ReferenceRunError as exc:  # the unsplit model fails on these inputs: a feed error
        from parapipe.graph.feeds import feed_error

        raise feed_error(lm.opgraph, exc.__cause__ or exc,
                         f"--feeds {feeds}" if feeds else "generated inputs", generated=not feeds) from exc
    for line in frequency_warnings(report):
        log.warning(line)
    if trace:
        from parapipe.files import atomic_path

        with atomic_path(Path(trace)) as out, open(out, "w") as handle:
            json.dump(trace_doc, handle)  # as ppexec writes a bundle's out/trace.json
    return lm, report


def run_spec(lm: LoadedMapping, seed: int = 0, distinct_frames: int = DISTINCT_FRAMES) -> RunSpec:
    """What the run-and-verify of ``lm`` needs, in memory (what its deploy bundle carries on disk:
    :func:`parapipe.deploy.bundle.build_bundle`).

    Parameters
    ----------
    lm : LoadedMapping
    seed, distinct_frames : int
        The frames drawn when ``lm.feeds`` is None: ``ppexec.frames.draw_frames`` over the model's inputs
        (:func:`parapipe.graph.feeds.input_specs`), as a board draws them from a bundle's ``plan.json``.

    Returns
    -------
    ppexec.bundle_run.RunSpec
        The plan as built (not validated here: the executor validates it once), the unsplit model with the
        handed-over tensors as extra outputs, the frames, the predicted figures and ``--bind`` substitutions.

    Raises
    ------
    InputError
        ``lm.feeds`` cannot be read or does not fit the model (:func:`parapipe.graph.feeds.load_feeds`).
    """
    from parapipe.graph.feeds import input_specs, load_feeds

    og = lm.opgraph
    reference, checked, softmax = reference_for_check(lm.loaded.model, og, handed_over_tensors(lm.plan))
    frames = load_feeds(lm.feeds, og) if lm.feeds else draw_frames(input_specs(og), distinct_frames, seed)
    return RunSpec(plan=lm.plan, reference_model=reference, check_tensors=tuple(checked), frames=tuple(frames),
                   model=lm.model_id(), point=lm.point.id, predicted=lm.predicted(),
                   substituted={pu: list(cpus) for pu, cpus in lm.substituted.items()},
                   power_sensor=lm.doc.soc.power_sensor, softmax_inputs=softmax, frequencies_hz=dict(lm.frequencies_hz),
                   frequency_domains={pu: dict(d) for pu, d in lm.frequency_domains.items()},
                   frequencies_required=lm.frequencies_required)


def record_run(db_path: Optional[str], doc, point, report: RunReport, runner: str) -> Optional[int]:
    """Append the run to the ``runs`` table of the profile database ``db_path`` (None: keep nothing).

    Returns the row id, or None when ``db_path`` is None.
    """
    if not db_path:
        return None
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import append_run, record_from_run

    with ProfileDB(db_path) as db:
        row = append_run(db, record_from_run(doc, point, report, runner))
    log.info("recorded run %d in %s", row, db_path)
    return row
