"""Profile a model on the PUs of a SoC through a :class:`~parapipe.measure.timer.Timer` (the agent, local or
over SSH), into the profile database, resumably.

:func:`profile_model` plans the work (:mod:`parapipe.measure.plan`): every distinct operator signature on
every PU that runs it (optimisation off), every distinct block, pair of consecutive blocks and longer spans
of blocks (optimisation on, as the executor runs them) and the hand-offs between CPU PUs. It records in the
catalog what each signature computes, then measures what the database does not hold yet (:func:`execute`),
storing each measurement in its own transaction as soon as it is taken: a run killed half-way keeps everything
it finished and a rerun measures only the rest; a second run of the same profile measures nothing.

With ``frequencies`` (``parapipe profile --frequencies``) the blocks are measured again on each PU at each of
its operating points: the agent sets the frequency for each measurement, reads back what the kernel set and
restores the board's settings after it (:func:`ppexec.dvfs.applied`); the rows carry the frequency
(``frequency_hz`` of the database; the rows at the board's own settings have
:data:`~parapipe.profiledb.db.BOARD_FREQUENCY`). A measurement the board throttled is not stored.

With ``budget < 1`` only the most informative fraction of operator signatures and blocks is measured
(:func:`parapipe.measure.plan.select_informative`); a seeded random held-out sample of the other operators
is measured too but kept out of the fit, and the calibrated model's error on it is reported
(:attr:`ProfileReport.holdout_mape_percent`).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from parapipe.remote.agent_client import AgentRequestError
from parapipe.errors import input_error
from parapipe.graph.coarsen import BlockGraph
from parapipe.graph.opgraph import OpGraph
from parapipe.measure import plan
from parapipe.calibration.calibrate import mape_percent, op_time
from parapipe.calibration.calibrated import fit_calibration, latest_rows
from parapipe.profiledb.catalog import Catalog, op_features
from parapipe.profiledb.db import BOARD_FREQUENCY, ProfileDB
from parapipe.profiledb.records import Measurement, utc_now_iso
from parapipe.measure.timer import Timer
from parapipe.soc.profile import SoC

log = logging.getLogger(__name__)

__all__ = ["ProfileOptions", "ProfileReport", "ExecuteResult", "execute", "profile_model", "profile_stages",
           "model_batch",
           "check_pus", "HOLDOUT_FRACTION"]

#: Share of all operator signatures measured as the held-out sample of a ``--budget`` run (at least 3).
#: 5 % is a parapipe choice: enough to see the error, small next to a 10 % budget.
HOLDOUT_FRACTION = 0.05
#: A measurement whose spread (p90 / median - 1) exceeds this was disturbed (another process shared the core
#: for part of the repeats: p90 can reach 5x the median on a loaded machine); it is taken again, up to
#: :data:`RETRIES` more times, and the attempt with the lowest median is kept. 0.5 is a parapipe choice:
#: undisturbed single-operator runs stayed below 0.3 on a 2-core x86 machine (the ``p90_s / median_s - 1`` of
#: the measurements ``parapipe profile squeezenet --soc host`` stores in the database).
MAX_SPREAD = 0.5
RETRIES = 2
#: Agent error types that mean "this work cannot run on that PU" (skip it, keep going) rather than a broken
#: host (``device_agents/agent.py``).
_SKIPPABLE = ("ModelError", "RunError")


@dataclass(frozen=True)
class ProfileOptions:
    """Options of :func:`profile_model`.

    Attributes
    ----------
    pus : sequence of str, optional
        PUs to profile (default: every PU of the SoC).
    budget : float
        Fraction of operator signatures (and blocks) to measure, in (0, 1]; 1 measures everything.
    warmup, repeats : int
        Untimed and timed runs per measurement (agent defaults 3 and 10).
    blocks, transfers : bool
        Also time the distinct blocks, consecutive block pairs and spans / the hand-offs between CPU PUs.
    seed : int
        Seed of the held-out sample.
    rounds : int
        Attempts per measurement, spread over the run; the lowest median is kept (see :func:`execute`).
    frequencies : dict of str to sequence of float
        PU -> operating points (Hz) its blocks are measured at besides the board's own settings (each an
        entry of the PU's cpufreq policy or devfreq table: the agent refuses others).
    """

    pus: Optional[Sequence[str]] = None
    budget: float = 1.0
    warmup: int = 3
    repeats: int = 10
    blocks: bool = True
    transfers: bool = True
    seed: int = 0
    rounds: int = 1
    frequencies: Mapping[str, Sequence[float]] = field(default_factory=dict)


@dataclass
class ExecuteResult:
    """What :func:`execute` did: items ``measured``, ``skipped`` (already in the database) and ``failed``
    (``"kind pu signature: reason"``)."""

    measured: int = 0
    skipped: int = 0
    failed: List[str] = field(default_factory=list)


@dataclass
class ProfileReport:
    """Summary of one profiling run (all times in seconds)."""

    model: str
    soc: str
    host: str
    ort_version: str
    batch: int
    pus: List[str]
    operators: int
    signatures: int
    blocks: int
    block_signatures: int
    planned: int
    measured: int
    skipped: int
    failed: List[str]
    elapsed_s: float
    budget: float
    selected_signatures: int
    holdout_signatures: int = 0
    holdout_measurements: int = 0
    holdout_mape_percent: Optional[float] = None
    #: How far the measurements taken can be trusted: :meth:`parapipe.measure.trust.MeasureLog.summary` (None:
    #: not recorded).
    measurement: Optional[Dict[str, Any]] = None
    #: PU -> operating points (Hz) its blocks were measured at (``--frequencies``; empty without).
    frequencies: Dict[str, List[float]] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The report as a JSON-ready dict."""
        return dict(self.__dict__)


def model_batch(og: OpGraph) -> int:
    """Batch size of a model: the first dimension of its first data input (1 when unknown)."""
    if og.inputs and og.tensors[og.inputs[0]].shape:
        batch = og.tensors[og.inputs[0]].shape[0]
        if isinstance(batch, int) and batch >= 1:
            return batch
    return 1


def check_pus(soc: SoC, pus: Optional[Sequence[str]]) -> List[str]:
    """The PUs to use: ``pus`` checked against ``soc`` (default: all of them, in profile order).

    Raises
    ------
    InputError
        ``"--pus: unknown PU 'x'; choose from ..."``.
    """
    if not pus:
        return list(soc.pu_names)
    return list(soc.restrict(list(pus)).pu_names)


def execute(items: Sequence[plan.WorkItem], timer: Timer, db: ProfileDB, soc: SoC, batch: int, warmup: int,
            repeats: int, progress: Optional[Callable[[int, int], None]] = None,
            rounds: int = 1, frequency: Optional[Dict[str, Any]] = None) -> ExecuteResult:
    """Measure the items the database does not hold yet, storing each one as soon as it is taken.

    With ``rounds`` > 1 the new items are measured again in further rounds (all items once per round, so the
    attempts of one item are spread over the run and meet different background load), and an attempt replaces
    the stored row when its median is lower: the least disturbed attempt is kept.

    Parameters
    ----------
    items : sequence of WorkItem
    timer : Timer
    db : ProfileDB
        Checked with :meth:`~parapipe.profiledb.db.ProfileDB.has` for ``(soc, pu, signature, batch, kind,
        ort_version)``; each new :class:`~parapipe.profiledb.records.Measurement` is one transaction.
    soc : SoC
    batch, warmup, repeats : int
    progress : callable (done, total), optional
        Called after each measurement; ``total`` counts the measurements still to take (items × rounds). An
        exception it raises stops the run (what was stored stays).
    rounds : int
        Attempts per new item (>= 1).
    frequency : dict, optional
        ``{"frequency_hz", "cpus" | "devfreq"}``: the operating point every item is measured at (set by the
        timer for each measurement); the rows are stored with its ``frequency_hz``, and a measurement the
        board throttled or refused is counted as failed, not stored.

    Returns
    -------
    ExecuteResult

    Raises
    ------
    HostError
        The agent died or timed out.
    AgentRequestError
        The agent refused a request for another reason than the work itself (e.g. ``PinError``).
    """
    result = ExecuteResult()
    todo = []
    at_hz = float(frequency["frequency_hz"]) if frequency else BOARD_FREQUENCY
    for item in items:
        if db.has(soc.name, item.pu, item.signature, batch, item.kind, timer.ort_version, at_hz):
            result.skipped += 1
        else:
            todo.append(item)
    best: dict = {}
    failed: set = set()
    total, done = len(todo) * max(1, rounds), 0
    for round_ in range(max(1, rounds)):
        for index, item in enumerate(todo):
            done += 1
            if index in failed:
                continue
            try:
                reply = _measure(item, timer, soc, warmup, repeats, frequency)
            except AgentRequestError as exc:
                if exc.error_type not in _SKIPPABLE:
                    raise
                log.warning("cannot time %s %s on %s: %s", item.kind, item.op_type, item.pu, exc)
                result.failed.append(f"{item.kind} {item.pu} {item.signature}: {exc.error_type}")
                failed.add(index)
            else:
                ran = reply.get("frequency") or {}
                if frequency and ran.get("status") != "ok":
                    log.warning("%s %s on %s: %s", item.kind, item.op_type, item.pu, ran.get("reason"))
                    result.failed.append(f"{item.kind} {item.pu} {item.signature}: {ran.get('status')} at "
                                         f"{at_hz / 1e6:g} MHz")
                    failed.add(index)
                    if progress is not None:
                        progress(done, total)
                    continue
                median = float(reply["median_s"])
                if index not in best or median < best[index]:
                    best[index] = median
                    db.put([Measurement(soc.name, item.pu, item.signature, item.op_type, batch,
                                        timer.ort_version, median, max(float(reply["p90_s"]), median),
                                        int(reply["repeats"]), utc_now_iso(), timer.host, item.kind,
                                        int(item.nbytes))], at_hz)
                if round_ == 0:
                    result.measured += 1
            if progress is not None:
                progress(done, total)
    return result


def _measure(item: plan.WorkItem, timer: Timer, soc: SoC, warmup: int, repeats: int,
             frequency: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One measurement, retaken while disturbed (see :data:`MAX_SPREAD`); the lowest-median attempt.

    Raises ValueError for an item other than a transfer without a model to time (``item.build`` None)."""
    model = item.build() if item.build is not None else None
    best: Optional[Dict[str, Any]] = None
    for _ in range(1 + RETRIES):
        if item.kind == "transfer":
            src, dst = item.pu.split("->")
            reply = timer.time_handoff(item.nbytes, timer.target(soc.pus[src])["cpus"],
                                       timer.target(soc.pus[dst])["cpus"], repeats=max(repeats, 20))
        elif model is not None and frequency:
            reply = timer.time_model(model, soc.pus[item.pu], item.optimization, warmup, repeats,
                                     frequency=frequency)
        elif model is not None:
            reply = timer.time_model(model, soc.pus[item.pu], item.optimization, warmup, repeats)
        else:
            raise ValueError(f"{item.kind} work item {item.op_type!r} on {item.pu} has no model to time")
        if best is None or reply["median_s"] < best["median_s"]:
            best = reply
        if float(reply.get("spread", 0.0)) <= MAX_SPREAD:
            break
        log.debug("%s %s on %s disturbed (spread %.2f); measuring again", item.kind, item.op_type, item.pu,
                  reply.get("spread", 0.0))
    if best is None:  # the loop above runs 1 + RETRIES >= 1 times
        raise RuntimeError("no measurement was taken")
    return best


def frequency_request(soc: SoC, pu: str, frequency_hz: float) -> Dict[str, Any]:
    """What the agent needs to set ``pu`` to ``frequency_hz``: ``{"frequency_hz", "devfreq"}`` where the
    profile's ``execution.devfreq`` names the PU's device, else ``{"frequency_hz", "cpus"}`` (the cpufreq policy
    of its CPUs).

    Raises
    ------
    InputError
        An unknown PU, a frequency that is not positive, a PU with neither ``execution.cpus`` nor
        ``execution.devfreq``.
    """
    if pu not in soc.pus:
        raise input_error("--frequencies", pu, f"is not a PU of {soc.name} (PUs: {', '.join(sorted(soc.pus))})",
                          "name one of its PUs")
    if not (math.isfinite(frequency_hz) and frequency_hz > 0):
        raise input_error("--frequencies", pu, f"must be positive frequencies, got {frequency_hz!r} Hz",
                          "give the PU's operating points in MHz, e.g. big=1200,1800")
    execution = soc.pus[pu].execution
    if execution.devfreq:
        return {"frequency_hz": float(frequency_hz), "devfreq": execution.devfreq}
    if not execution.cpus:
        raise input_error("--frequencies", pu, "the profile gives this PU neither execution.cpus nor "
                          "execution.devfreq, so its frequency domain is unknown",
                          "add execution.devfreq (its /sys/class/devfreq device) to the profile")
    return {"frequency_hz": float(frequency_hz), "cpus": [int(c) for c in execution.cpus]}


def profile_model(og: OpGraph, bg: BlockGraph, soc: SoC, timer: Timer, db: ProfileDB, catalog: Catalog,
                  options: ProfileOptions = ProfileOptions(),
                  progress: Optional[Callable[[int, int], None]] = None) -> ProfileReport:
    """Profile ``og`` on ``soc`` through ``timer`` into ``db`` (see the module docstring).

    Parameters
    ----------
    og : OpGraph
    bg : BlockGraph
        Blocks of ``og`` (coarsened as the search will use them).
    soc : SoC
        Its name is the ``soc`` column; its PUs say how each PU runs (CPU set and threads, or provider).
    timer : Timer
    db : ProfileDB
    catalog : Catalog
        Of the same file as ``db``.
    options : ProfileOptions
    progress : callable (done, total), optional
        See :func:`execute`.

    Returns
    -------
    ProfileReport

    Raises
    ------
    InputError
        Unknown PU in ``options.pus``; ``budget`` outside (0, 1]; ``warmup`` < 0 or ``repeats`` < 1.
    HostError
        A PU whose execution provider or CPUs the host lacks (before anything is measured); a dead agent.
    """
    if not (isinstance(options.budget, (int, float)) and 0.0 < options.budget <= 1.0):
        raise input_error("--budget", None, f"must be a fraction in (0, 1], got {options.budget!r}",
                          "give e.g. 0.1 to measure a tenth of the operators, or 1 for all")
    if options.warmup < 0 or options.repeats < 1 or options.rounds < 1:
        raise input_error("--repeats", None, f"need repeats >= 1, warmup >= 0 and rounds >= 1, got "
                          f"{options.repeats}, {options.warmup}, {options.rounds}",
                          "use the defaults (10, 3, 1)")
    start = time.perf_counter()
    pus = check_pus(soc, options.pus)
    at_points = {(pu, hz): frequency_request(soc, pu, hz) for pu, points in options.frequencies.items()
                 for hz in points}  # checked before anything is measured
    unprofiled = sorted(set(options.frequencies) - set(pus))
    if unprofiled:
        raise input_error("--frequencies", ", ".join(unprofiled), "names PUs that are not profiled",
                          f"profile them too (--pus {','.join(pus + unprofiled)}) or leave them out")
    timer.check_pus(soc, pus)
    batch = model_batch(og)
    first_op = plan.distinct_ops(og)
    features = {sig: op_features(og, name) for sig, name in first_op.items()}
    blocks = plan.distinct_blocks(og, bg)
    signatures = list(first_op)
    holdout: List[str] = []
    if options.budget < 1.0:
        chosen = plan.select_informative(list(features.values()), options.budget)
        holdout = plan.holdout_sample(signatures, chosen, HOLDOUT_FRACTION, options.seed)
        block_feats = [_block_proxy(sig, b) for sig, b in blocks.items()]
        kept_blocks = set(plan.select_informative(block_feats, options.budget))
        chosen_blocks = [b for sig, b in blocks.items() if sig in kept_blocks]
    else:
        chosen, chosen_blocks = signatures, list(blocks.values())
    catalog.add_ops(features.values())
    catalog.add_work(plan.block_entries(og, list(blocks.values())))
    items = plan.op_items(og, soc, pus, chosen + holdout)
    if options.blocks:
        items += plan.block_items(og, soc, pus, chosen_blocks)
        pairs, pair_entries = plan.pair_items(og, bg, soc, pus, chosen_blocks)
        catalog.add_work(pair_entries)
        items += pairs
        if options.budget >= 1.0:
            spans, span_entries = plan.span_items(og, bg, soc, pus,
                                                  plan.stage_ranges(bg, DEFAULT_STAGE_SPLITS))
            catalog.add_work(span_entries)
            items += spans
    if options.transfers:
        items += plan.transfer_items(soc, pus)
    log.info("profiling %s on %s (%s): %d operators, %d signatures, %d blocks; %d measurement(s) planned",
             og.name, soc.name, timer.host, len(og.topo_order), len(signatures), len(bg.blocks), len(items))
    result = execute(items, timer, db, soc, batch, options.warmup, options.repeats, progress, options.rounds)
    for pu, points in sorted(options.frequencies.items()):
        block_items = plan.block_items(og, soc, [pu], chosen_blocks)
        for hz in points:
            log.info("profiling the %d blocks of %s on %s at %g MHz", len(block_items), og.name, pu, hz / 1e6)
            more = execute(block_items, timer, db, soc, batch, options.warmup, options.repeats, progress,
                           options.rounds, at_points[(pu, hz)])
            result.measured += more.measured
            result.skipped += more.skipped
            result.failed += more.failed
            items = items + block_items
    report = ProfileReport(
        model=og.name, soc=soc.name, host=timer.host, ort_version=timer.ort_version, batch=batch, pus=pus,
        operators=len(og.topo_order), signatures=len(signatures), blocks=len(bg.blocks),
        block_signatures=len(blocks), planned=len(items), measured=result.measured, skipped=result.skipped,
        failed=result.failed, elapsed_s=0.0, budget=float(options.budget), selected_signatures=len(chosen),
        holdout_signatures=len(holdout),
        frequencies={pu: [float(hz) for hz in points] for pu, points in sorted(options.frequencies.items())})
    if holdout:
        _score_holdout(report, soc, db, catalog, chosen, holdout, features, batch, timer.ort_version)
    report.elapsed_s = time.perf_counter() - start
    return report


def _block_proxy(sig: str, block) -> "plan.OpFeatures":
    """A block as pseudo operator features (for :func:`~parapipe.measure.plan.select_informative`)."""
    from parapipe.profiledb.catalog import OpFeatures
    from parapipe.soc.op_classes import op_class

    main = op_class(block.op_types[0]) if block.op_types else "other"
    return OpFeatures(sig, "block", main, float(block.flops),
                      int(block.in_nbytes), int(block.out_nbytes), int(block.param_nbytes))


def _score_holdout(report: ProfileReport, soc: SoC, db: ProfileDB, catalog: Catalog, chosen: Sequence[str],
                   holdout: Sequence[str], features: dict, batch: int, ort_version: str) -> None:
    """Fit on the chosen operators only, predict the held-out ones, store the MAPE in ``report``."""
    chosen_set = set(chosen)
    others = {r.signature for r in latest_rows(db, soc) if r.kind == "op"} - chosen_set
    cal = fit_calibration(soc, db, catalog, exclude=others)
    predicted, measured = [], []
    for sig in holdout:
        for pu in report.pus:
            row = db.get(soc.name, pu, sig, batch, "op", ort_version)
            if row is not None and row.median_s > 0:
                t = op_time(features[sig], soc.pus[pu], cal.isolated[pu])
                if math.isfinite(t):
                    predicted.append(t)
                    measured.append(row.median_s)
    report.holdout_measurements = len(measured)
    report.holdout_mape_percent = mape_percent(predicted, measured) if measured else None
    log.info("budget %.2f: %d signature(s) fitted, held-out MAPE %s over %d measurement(s)", report.budget,
             len(chosen), report.holdout_mape_percent, len(measured))


#: Rounds of stage measurements (:func:`execute`): stages are few, and a whole-model median is easily
#: disturbed as a block (a second process on the core for the whole 60 ms run). 3 is a parapipe choice.
STAGE_ROUNDS = 3
#: Stage splits timed by ``parapipe calibrate --model``: the whole model, halves and quarters of about equal
#: FLOPs (7 stages), as a pipeline of 1, 2 or 4 stages would cut it.
DEFAULT_STAGE_SPLITS = (1, 2, 4)


def profile_stages(og: OpGraph, bg: BlockGraph, soc: SoC, timer: Timer, db: ProfileDB, catalog: Catalog,
                   pus: Optional[Sequence[str]] = None, splits: Sequence[int] = DEFAULT_STAGE_SPLITS,
                   warmup: int = 3, repeats: int = 10,
                   progress: Optional[Callable[[int, int], None]] = None,
                   rounds: int = STAGE_ROUNDS) -> ExecuteResult:
    """Time contiguous block ranges of ``og`` as whole stages (optimisation on) for validating the
    calibration.

    Stages are :func:`parapipe.measure.plan.stage_ranges` of ``bg`` for each ``k`` in ``splits``; they are
    stored as rows of kind ``stage`` and recorded in the catalog with their blocks and operators, so
    :func:`parapipe.calibration.accuracy.evaluate` can compare predictions with them. Resumable like
    :func:`execute`; each stage is timed in ``rounds`` rounds and its least disturbed median kept.

    Raises
    ------
    InputError
        Unknown PU.
    HostError
        A PU the host cannot run; a dead agent.
    """
    pus = check_pus(soc, pus)
    timer.check_pus(soc, pus)
    items, entries = plan.stage_items(og, bg, soc, pus, plan.stage_ranges(bg, splits))
    catalog.add_ops(op_features(og, n) for n in og.topo_order)
    catalog.add_work(entries)
    return execute(items, timer, db, soc, model_batch(og), warmup, repeats, progress, rounds)
