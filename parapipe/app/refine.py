"""``parapipe optimize --refine N``: close the loop between the cost model and the machine that runs the mapping.

Each round: search (:func:`parapipe.app.optimize.optimize`, as ``optimize`` does); rank the front's points by the
period the full model (:func:`parapipe.cost.evaluate.evaluate` with the terms learnt so far) predicts;
run the most promising ones (the best and the next ``points`` − 1 not yet measured) on this machine
(:func:`parapipe.app.run.run_local`) or on a board (:func:`parapipe.app.deploy.deploy`), record them in the
``runs`` table; stop when every point of the round was predicted within ``tolerance`` (5 %) of its measured
period, or after ``rounds`` rounds; otherwise fit the pipeline terms on every run so far
(:func:`parapipe.calibration.runfit.calibrate_runs`) and search again. Each prediction in the trajectory was made
before the run it is compared with (out of sample).

A round whose points were all measured in earlier rounds ends the loop too (``unchanged``: the search with the
fitted terms proposes nothing new, so more rounds would re-measure the same mappings). Point ids (``p0``, ...) are
per round: the same id in two rounds may be two mappings, so every run also names its mapping by
:func:`mapping_id`, a hash of its stages, the same in every round and every document.

The trajectory goes into ``pareto.json`` (``search.refine``: rounds, tolerance, converged, why it stopped and what
to try next, the fitted terms and one row per run: round, mapping id, point, predicted and measured period and
latency, error), and the last fit into ``OUT/calibrated.yaml`` (the profile with the terms, ``source: runs``).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Set, Tuple
from typing import Mapping as TypingMapping

from parapipe.app.prepare import Prepared
from parapipe.cost.mapping import Mapping as CostMapping
from parapipe.cost.pipeline_terms import PipelineTerms
from parapipe.remote.hostspec import HostSpec
from parapipe.mapping.model import ParetoDoc
from parapipe.search.options import SearchOptions

if TYPE_CHECKING:  # the executor's report type only: importing ppexec loads ONNX Runtime
    from ppexec.report import RunReport

log = logging.getLogger(__name__)

__all__ = ["RefineStep", "RefineResult", "refine", "trajectory_table", "REFINE_TOLERANCE", "mapping_id",
           "STOP_REASONS"]

#: Relative period error at which the loop stops (5 %: a prediction this close ranks mappings as runs do).
REFINE_TOLERANCE = 0.05


#: Why the loop stopped -> (what it means, what to try next); ``{tol}`` is the tolerance in %.
STOP_REASONS = {
    "converged": ("converged: every point of the last round was predicted within {tol} of its measured period",
                  "deploy the front's best point; refine again after changing the board or the model"),
    "rounds": ("rounds exhausted: the last round still missed {tol}",
               "more rounds (a larger --refine), more points per round (--refine-points) or more frames per run "
               "(--frames) where the runs' spread is large; or calibrate the blocks again ('parapipe calibrate')"),
    "unchanged": ("the mappings stayed the same: the search with the fitted terms proposed only mappings already "
                  "measured, still off by more than {tol}",
                  "more points per round (--refine-points) to measure other mappings, or better block times "
                  "('parapipe profile --repeats', 'parapipe calibrate'): the pipeline terms cannot absorb the rest"),
}


def mapping_id(stages) -> str:
    """A stable short id of a mapping: ``m`` and 6 hex digits of the SHA-256 of its stages' PUs, blocks,
    operator assignment and replicas (a pareto.json point's ``stages``). The same mapping has the same id in
    every round and document; point ids (``p0``) are per document."""
    key = [[st.pus, st.blocks, sorted(st.assignment.items()),
            [[r.pus, sorted(r.assignment.items())] for r in st.replicas or []]] for st in stages]
    return "m" + hashlib.sha256(json.dumps(key).encode()).hexdigest()[:6]


@dataclass(frozen=True)
class RefineStep:
    """One measured point of the loop (s): predicted before it ran, then measured. ``point`` is the id in that
    round's document; ``mapping`` the stable :func:`mapping_id`."""

    round: int
    point: str
    predicted_period_s: float
    measured_period_s: float
    predicted_latency_s: float
    measured_latency_s: float
    error: float  # predicted / measured − 1 (period)
    mapping: str = ""


@dataclass(frozen=True)
class RefineResult:
    """The last document, the trajectory, whether it converged, the fitted terms, the profile written
    (``OUT/calibrated.yaml``; None when no round fitted terms), and the prepared problem of the last round with
    ``terms`` (what the points are to be re-evaluated with)."""

    doc: ParetoDoc
    steps: List[RefineStep]
    converged: bool
    terms: PipelineTerms
    calibrated: Optional[Path]
    prepared: Prepared
    stop_reason: str = "converged"  # a key of STOP_REASONS


def _key(mapping: CostMapping) -> tuple:
    return tuple((st.start, st.stop, st.pus, st.assignment) for st in mapping.stages)


def refine(prep: Prepared, options: SearchOptions, out_dir: Path, rounds: int, model: str, frames: int = 100,
           points: int = 3, tolerance: float = REFINE_TOLERANCE, db: Optional[str] = None,
           host: Optional[HostSpec] = None, python: str = "python3", plot: bool = True,
           progress: Optional[Callable[[int], None]] = None, on_step: Optional[Callable[[RefineStep], None]] = None,
           input_shapes: Optional[TypingMapping[str, Sequence[int]]] = None, feeds: Optional[str] = None,
           on_run: Optional[Callable[[int, str, str], None]] = None) -> RefineResult:
    """Run the loop of the module docstring.

    Parameters
    ----------
    prep : parapipe.app.prepare.Prepared
        Its ``terms`` are the starting terms (``prep`` is not changed: the result's ``prepared`` has the last).
    options : parapipe.search.options.SearchOptions
    out_dir : Path
    rounds : int
        Most rounds (>= 1).
    model : str
        The model as the user named it (run and deploy load it again).
    frames, points : int
        Measured frames per run; points run per round.
    tolerance : float
        Relative period error at which to stop.
    db : str, optional
        Profile database whose ``runs`` table keeps every run.
    host : parapipe.remote.hostspec.HostSpec, optional
        Run on this board (``deploy``) instead of this machine; its ``timeout_s`` (``--ssh-timeout``) bounds
        connecting and each short SSH step of every deploy, as for ``parapipe deploy``.
    python : str
        The board's interpreter.
    progress, on_step, on_run : callable, optional
        ``progress(blocks done)`` follows each round's search; ``on_step(RefineStep)`` gets each measured point;
        ``on_run(round, mapping id, point id)`` is called before each run starts (a run takes seconds).

    Raises
    ------
    InputError
        ``rounds`` or ``points`` < 1; what search, run or deploy raise.
    """
    from parapipe.app.optimize import optimize, write_outputs
    from parapipe.app.run import record_run
    from parapipe.cost.evaluate import evaluate
    from parapipe.errors import input_error
    from parapipe.mapping.index import mapping_from_point
    from parapipe.calibration.runfit import MeasuredRun, calibrate_runs

    for name, value in (("--refine", rounds), ("--refine-points", points), ("--frames", frames)):
        if value < 1:
            raise input_error(name, None, f"must be >= 1, got {value}", "give a positive count")
    out_dir = Path(out_dir)
    base = terms = prep.terms if prep.terms is not None else PipelineTerms()  # None: the plain model
    measured: List[MeasuredRun] = []
    seen: Set[tuple] = set()
    steps: List[RefineStep] = []
    converged, fit = False, None
    stop = "rounds"
    doc: Optional[ParetoDoc] = None
    for rnd in range(1, rounds + 1):
        doc, prep = optimize(replace(prep, terms=terms), options, out_dir, progress=progress, plot=False)
        ranked = []
        for pt in doc.points:
            if pt.strategy != "parapipe":
                continue
            m = mapping_from_point(prep.problem, pt, str(out_dir / "pareto.json"))
            ranked.append((evaluate(prep.problem, m, terms), pt, m))
        ranked.sort(key=lambda r: (r[0].period_s, r[0].latency_s))
        chosen = ranked[:1] + [r for r in ranked[1:] if _key(r[2]) not in seen][:points - 1]
        round_ok = True
        new = any(_key(m) not in seen for _, _, m in chosen)
        for ev, pt, m in chosen:
            if on_run is not None:
                on_run(rnd, mapping_id(pt.stages), pt.id)
            rep, runner = _run_point(model, out_dir, pt.id, frames, host, python, rnd, input_shapes, feeds)
            record_run(db, doc, pt, rep, runner)
            seen.add(_key(m))
            period = 1.0 / rep.throughput_per_s
            step = RefineStep(rnd, pt.id, ev.period_s, period, ev.latency_s, rep.idle_latency_s,
                              ev.period_s / period - 1.0, mapping_id(pt.stages))
            steps.append(step)
            if on_step is not None:
                on_step(step)
            round_ok = round_ok and abs(step.error) <= tolerance
            measured.append(MeasuredRun(prep.loaded.name, pt.id, prep.problem, m, period,
                                        rep.idle_latency_s or None, rep.energy_j, f"refine round {rnd}"))
        if round_ok:
            converged, stop = True, "converged"
            break
        if not new and rnd > 1:
            stop = "unchanged"
            break
        if rnd < rounds:
            fit = calibrate_runs(measured, base, soc=prep.soc, loo=False)
            terms = fit.terms
    prep = replace(prep, terms=terms)
    assert doc is not None  # rounds >= 1: the loop ran
    why, next_ = STOP_REASONS[stop]
    doc.search["refine"] = {"rounds": steps[-1].round, "tolerance": tolerance, "converged": converged,
                            "stop_reason": stop, "stopped": why.format(tol=f"{tolerance:.0%}"), "next": next_,
                            "terms": terms.to_json(),
                            "trajectory": [asdict(s) for s in steps]}
    write_outputs(doc, out_dir, plot)
    calibrated = None
    if fit is not None:
        from parapipe.calibration.runs_calibrate import calibrated_profile
        from parapipe.soc.loader import save_soc

        calibrated = out_dir / "calibrated.yaml"
        save_soc(calibrated_profile(prep.soc, fit, f"parapipe optimize --refine: {len(measured)} runs of "
                                    f"{prep.loaded.name}"), calibrated)
    return RefineResult(doc, steps, converged, terms, calibrated, prep, stop)


def _run_point(model: str, out_dir: Path, point: str, frames: int, host: Optional[HostSpec], python: str, rnd: int,
               input_shapes: Optional[TypingMapping[str, Sequence[int]]], feeds: Optional[str]) -> Tuple["RunReport", str]:
    """``(RunReport, runner)`` of one point of ``out_dir/pareto.json``, here or on ``host`` (deployed with
    ``host.timeout_s`` as the SSH deadlines, :func:`parapipe.app.deploy.with_ssh_timeout`)."""
    mapping = str(out_dir / "pareto.json")
    if host is None:
        from parapipe.app.run import run_local

        _, rep = run_local(model, mapping, point, frames=frames, input_shapes=input_shapes, feeds=feeds)
        return rep, "local"
    from parapipe.app.deploy import DeployOptions, deploy, with_ssh_timeout

    options = with_ssh_timeout(DeployOptions(frames=frames, python=python), host.timeout_s)
    res = deploy(model, mapping, point, host, out_dir / "refine" / f"round{rnd}-{point}", options,
                 input_shapes=input_shapes, feeds=feeds)
    return res.report, res.host


def trajectory_table(steps: Sequence[RefineStep]) -> str:
    """The trajectory as text (ms, %): one row per run, the mapping by its stable id, the round's point id next
    to it."""
    lines = [f"{'round':>5} {'mapping':<8} {'point':<8} {'predicted ms':>12} {'measured ms':>11} {'error':>7}"]
    for s in steps:
        lines.append(f"{s.round:>5} {s.mapping:<8} {s.point:<8} {s.predicted_period_s * 1e3:>12.3f} "
                     f"{s.measured_period_s * 1e3:>11.3f} {s.error * 100:>+6.1f}%")
    return "\n".join(lines)
