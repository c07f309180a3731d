"""A measured SoC profile of the machine parapipe runs on (``--soc host``): one PU per allowed CPU core.

:func:`host_soc` builds the SoC: every core in ``os.sched_getaffinity(0)`` becomes a PU ``cpu<i>`` (kind
``cpu``, one core, pinned with ``execution.cpus = (i,)``, one ORT thread, all op types, fp32). Its peak
FLOP/s, per-operator overhead, memory bandwidth and the hand-off cost between two cores are measured on the
spot (about half a second); the clock comes from sysfs or ``/proc/cpuinfo``. There is no power meter on this
machine, so the powers are placeholders (:data:`PLACEHOLDER_ACTIVE_POWER_W` and friends), marked
``confidence: low`` in the profile's provenance: energy figures computed with them are illustrative only.

:func:`measure_host` also times every block of a :class:`~parapipe.graph.coarsen.BlockGraph` the way the
pipelined executor runs it: the block's sub-model (:func:`~parapipe.graph.extract.extract_submodel`) in an
ORT session made by :func:`ppexec.session.create_session` (one thread, no spinning,
``ORT_ENABLE_ALL``) on a thread pinned to one core, fed seeded random inputs of the block's shapes and dtypes.
The cores of one machine are taken as identical: each block is measured on the first allowed core only and
that time is used for every PU. These measured times replace the roofline wherever the cost model has them
(GUIDE §2).
"""
from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from ppexec import PUBinding
from ppexec.session import create_session

from parapipe.errors import ExecutionError, input_error
from parapipe.graph.coarsen import Block, BlockGraph
from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import OpGraph
from parapipe.profiledb.catalog import block_signature
from parapipe.profiledb.db import ProfileDB
from parapipe.profiledb.records import Measurement, utc_now_iso
from parapipe.measure.machine import (_copy_bandwidth, _frequency_hz, _gemm_and_overhead, _on_cpu, _start_pinned,
                                        _timed, allowed_cpus, measure_transfer)
from parapipe.soc.op_classes import OP_CLASSES
from parapipe.soc.profile import PU, Provenance, SoC
from parapipe.soc.resolve import HOST_SOC

logger = logging.getLogger(__name__)

__all__ = ["HostProfile", "host_soc", "measure_host", "measure_ranges", "measure_block_sets", "measure_stages",
           "measure_transfer", "allowed_cpus", "HOST_SOC_NAME"]

#: SoC name of the measured profile (reserved: soc_profiles/README.md forbids a bundled host.yaml).
HOST_SOC_NAME = HOST_SOC
#: Placeholder powers, W: no power meter can be read on this machine. 5 W per busy core, 1 W idle and 10 W for
#: the rest of the system are parapipe's round guesses for a server core, not measurements.
PLACEHOLDER_ACTIVE_POWER_W = 5.0
PLACEHOLDER_IDLE_POWER_W = 1.0
PLACEHOLDER_STATIC_POWER_W = 10.0
_SOURCES = {
    "measured": "Measured on this machine by parapipe.measure.local when the profile was built "
                "(ONNX Runtime MatMul, numpy copy, queue hand-off between pinned threads).",
    "cpuinfo": "Linux sysfs cpufreq/cpuinfo_max_freq, else 'cpu MHz' in /proc/cpuinfo, on this machine.",
    "parapipe": "parapipe's choice for the host profile: efficiency 1.0 for every op class, since measured "
                "block times replace the roofline.",
    "fidelity": "Pipeline terms fitted by benchmarks/fidelity.py (calibrate --runs on 165 pipeline runs of "
                "squeezenet, shufflenet and inception_v1) on parapipe's reference 2-core x86 VM (issue 10): a "
                "prior for this machine until 'calibrate --runs' or 'optimize --refine' fits its own.",
}
#: Pipeline terms of the host profile (:mod:`parapipe.cost.pipeline_terms`) before this machine's runs are fitted:
#: what benchmarks/fidelity.py fitted on the reference 2-core x86 VM (issue 10 closing note; leave-one-out period
#: MAPE 4.0 % with them, 12.6 % without). Without them a plain host model ranks pipelines whose cores serve
#: several stages with the replicated model (inception_v1: predicted 71.3/s vs 71.2/s, measured 63.7/s vs
#: 69.6/s; issue 13): it misses the executor's cost per stage hop and the cache refill of a shared core. Overlap is
#: per PU and left out.
HOST_PRIOR_TERMS = {"dispatch_s": 122e-6, "handoff_s": 140e-6, "slowdown": 1.031, "sharing": 0.047}
_PLACEHOLDER = Provenance(confidence="low", note="placeholder: no power meter on this machine")
#: Seconds of runs per set and pass in :func:`measure_stages`: ten runs of a 3 ms sub-model span 30 ms, short
#: enough for one transient on this shared VM to move their median (squeezenet's whole model timed loaded, three
#: times in a row on the 2-core VM: one 10-run median 4.49 ms, then 3.10 and 3.14 ms; issue 13).
STAGE_MIN_S = 0.15


@dataclass
class HostProfile:
    """The host SoC with measured block times.

    Attributes
    ----------
    soc : SoC
        Named ``"host"``; PUs ``cpu<i>`` for the allowed cores ``i`` (see :func:`host_soc`).
    block_time_s : dict of (str, str) to float
        ``(block name, PU name)`` -> median time of the block on that PU, s; every block × every PU.
    measure_s : float
        Wall time :func:`measure_host` took, s.
    """

    soc: SoC
    block_time_s: dict[tuple[str, str], float]
    measure_s: float


def host_soc(n_cpus: Optional[int] = None, transfer: tuple[float, float] | None = None) -> SoC:
    """Build the SoC of this machine, measuring peak FLOP/s, bandwidth and (unless given) the hand-off cost.

    Parameters
    ----------
    n_cpus : int, optional
        Use the first ``n_cpus`` allowed cores (default: all of ``os.sched_getaffinity(0)``).
    transfer : (alpha_s, beta_bytes_per_s), optional
        Default transfer cost between cores; measured with :func:`measure_transfer` between the first two
        cores when None.

    Returns
    -------
    SoC
        Name ``"host"``; one PU ``cpu<i>`` per core ``i`` used (``cpu0..cpu<n-1>`` when the affinity is
        ``0..n-1``) with ``execution.cpus = (i,)``, ``threads = 1``, ``cores = 1``, all op types, fp32;
        ``peak_flops`` from a :data:`GEMM_N`-square fp32 MatMul in ORT on one pinned thread (best of 10),
        ``op_overhead_s`` the median run time of a one-element Identity, ``memory_bandwidth_bytes_per_s`` from
        a numpy copy of :data:`COPY_NBYTES` (read + write; with a huge last-level cache this may be cache
        rather than DRAM bandwidth), ``frequency_hz`` from sysfs or /proc/cpuinfo (else 1 GHz, noted),
        efficiency 1.0 for every op class (measured block times override the roofline), and the placeholder
        powers :data:`PLACEHOLDER_ACTIVE_POWER_W`, :data:`PLACEHOLDER_IDLE_POWER_W`,
        :data:`PLACEHOLDER_STATIC_POWER_W` (no power meter here; ``confidence: low`` in ``soc.provenance``);
        ``power_sensor`` the readable RAPL or INA3221 sensor, if any (:func:`ppexec.power.detect_sensor`);
        ``pipeline`` the prior terms :data:`HOST_PRIOR_TERMS` (``confidence: low``).
        Peak and overhead are measured on the first core and used for all: the cores are taken as identical.

    Raises
    ------
    InputError
        ``n_cpus`` < 1 or above the allowed cores, or a ``transfer`` with alpha < 0 or beta <= 0.
    ExecutionError
        A core cannot be pinned.
    """
    cpus = allowed_cpus()
    if n_cpus is not None and not 1 <= n_cpus <= len(cpus):
        raise input_error("--soc host", "n_cpus", f"must be between 1 and {len(cpus)} (the cores this "
                          f"process may use: {cpus}), got {n_cpus}", "give fewer cores or widen the affinity")
    cpus = cpus[:n_cpus] if n_cpus is not None else cpus
    if transfer is not None:
        alpha, beta = (float(v) for v in transfer)
        if not (math.isfinite(alpha) and alpha >= 0 and beta > 0):
            raise input_error("host_soc", "transfer", f"must be (alpha_s >= 0, beta_bytes_per_s > 0), got "
                              f"{tuple(transfer)}", "give seconds and bytes/s, or None to measure them")
    peak_flops, overhead_s = _on_cpu(cpus[0], _gemm_and_overhead)
    bandwidth = _on_cpu(cpus[0], _copy_bandwidth)
    if transfer is None:
        alpha, beta = measure_transfer(cpus[0], cpus[1] if len(cpus) > 1 else cpus[0])
    pus, provenance = [], {}
    for cpu in cpus:
        name = f"cpu{cpu}"
        freq, note = _frequency_hz(cpu)
        pus.append(PU(name=name, kind="cpu", cores=1, frequency_hz=freq, peak_flops=peak_flops,
                      precision="fp32", memory_bandwidth_bytes_per_s=bandwidth, efficiency={"other": 1.0},
                      op_overhead_s=overhead_s,
                      active_power_w=PLACEHOLDER_ACTIVE_POWER_W, idle_power_w=PLACEHOLDER_IDLE_POWER_W,
                      execution={"cpus": (cpu,), "threads": 1}))
        provenance[f"pus.{name}.frequency_hz"] = (Provenance(confidence="low", note=note) if note
                                                  else Provenance(source="cpuinfo"))
        for field in ("peak_flops", "memory_bandwidth_bytes_per_s", "op_overhead_s"):
            provenance[f"pus.{name}.{field}"] = Provenance(source="measured")
        for cls in OP_CLASSES:
            provenance[f"pus.{name}.efficiency.{cls}"] = Provenance(source="parapipe")
        for field in ("active_power_w", "idle_power_w"):
            provenance[f"pus.{name}.{field}"] = _PLACEHOLDER
    provenance["static_power_w"] = _PLACEHOLDER
    provenance["memory_bandwidth_bytes_per_s"] = Provenance(source="measured")
    provenance["transfers.default.alpha_s"] = provenance["transfers.default.beta_bytes_per_s"] = \
        Provenance(source="measured")
    soc = SoC.from_values(HOST_SOC_NAME, pus, static_power_w=PLACEHOLDER_STATIC_POWER_W,
                          memory_bandwidth_bytes_per_s=bandwidth, default_transfer=(alpha, beta),
                          description=f"this machine, {len(cpus)} core(s) measured by parapipe; powers are "
                                      "placeholders")
    from parapipe.soc.pipeline import PipelineParams

    for name in HOST_PRIOR_TERMS:
        provenance[f"pipeline.{name}"] = Provenance(source="fidelity", confidence="low",
                                                    note="prior from the reference VM, not this machine")
    soc = soc.model_copy(update={"pipeline": PipelineParams(**HOST_PRIOR_TERMS)})
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    from ppexec.power import detect_sensor

    sensor = detect_sensor()  # RAPL or a Jetson's INA3221 where readable: run/deploy then measure energy
    return SoC.model_validate({**fields, "sources": dict(_SOURCES), "provenance": provenance,
                               "power_sensor": sensor})


def _random_feeds(og: OpGraph, names: Sequence[str], rng: np.random.Generator,
                  given: Optional[dict] = None) -> dict[str, np.ndarray]:
    """Seeded inputs: ``given`` values (the user's feeds) for the model's inputs, standard normal for floating
    point tensors, zeros (valid indices) for the others."""
    feeds = {}
    for name in names:
        info = og.tensors[name]
        dtype = np.dtype(info.dtype)
        if given is not None and name in given:
            feeds[name] = np.asarray(given[name])
        elif np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(info.shape).astype(dtype)
        else:
            feeds[name] = np.zeros(info.shape, dtype)
    return feeds


def _real_index_values(bg: BlockGraph, feeds: Optional[dict]) -> dict[str, np.ndarray]:
    """``feeds`` (default: one seeded frame) plus the values of the integer and boolean tensors that cross
    blocks, from one run of the whole model: random values there would be wrong shapes or indices."""
    from parapipe.graph.feeds import make_frames
    from ppexec import reference_outputs

    og = bg.opgraph
    values = dict(feeds) if feeds is not None else make_frames(og, 1)[0]
    wanted = sorted({t for _, _, ts in bg.graph.edges(data="tensors") for t in ts
                     if t in og.tensors and np.dtype(og.tensors[t].dtype).kind in "iub"
                     and not og.tensors[t].sequence})
    if wanted:
        probe = onnx.ModelProto()
        probe.CopyFrom(og.model)
        present = {o.name for o in probe.graph.output}
        probe.graph.output.extend(og.value_info(t) for t in wanted if t not in present)
        try:
            (ran,) = reference_outputs(probe, [values])
        except Exception as exc:  # the feeds do not run: measure with seeded values, as before
            logger.warning("%s: the whole model does not run on its inputs (%s); blocks get seeded values",
                           og.name, " ".join(str(exc).split())[:200])
            return values
        values.update({t: ran[t] for t in wanted})
    return values


def _time_block(og: OpGraph, block: Block, binding: PUBinding, repeats: int, warmup: int,
                given: Optional[dict] = None) -> list[float]:
    """Run on the pinned measuring thread: times of ``repeats`` runs of the block's sub-model, s."""
    return _time_ops(og, block.ops, block.name, binding, repeats, warmup, given)


def _time_ops(og: OpGraph, ops: Sequence[str], name: str, binding: PUBinding, repeats: int, warmup: int,
              given: Optional[dict] = None, min_s: float = 0.0) -> list[float]:
    """Run on the pinned measuring thread: times of ``repeats`` runs of the sub-model of ``ops``, s (more runs
    until they add up to ``min_s``)."""
    try:
        sub = extract_submodel(og, ops, name=name, check=False)
        sess = create_session(sub.model, binding, "CPUExecutionProvider")
        feeds = _random_feeds(og, sub.inputs, np.random.default_rng(0), given)
        for _ in range(warmup):
            sess.run(sub.outputs, feeds)
        times = [_timed(lambda: sess.run(sub.outputs, feeds)) for _ in range(repeats)]
        while sum(times) < min_s:
            times.append(_timed(lambda: sess.run(sub.outputs, feeds)))
        return times
    except Exception as exc:
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ExecutionError(f"measuring block {name!r} of {og.name!r} on the host failed: {detail}; "
                             "check that the model runs in ONNX Runtime on its own") from exc


def measure_host(bg: BlockGraph, repeats: int = 10, warmup: int = 3, db: Optional[ProfileDB] = None,
                 progress: Optional[Callable[[int, int], None]] = None,
                 feeds: Optional[dict] = None) -> HostProfile:
    """Build :func:`host_soc` and time every block of ``bg`` on it.

    Each distinct block (by :func:`block_signature`) is run ``warmup`` times, then timed ``repeats`` times
    with ``time.perf_counter`` in one thread pinned to the first allowed core, in a session made exactly as
    the executor makes it (:func:`ppexec.session.create_session`, one thread); the median is its
    time on every PU (the cores are taken as identical).

    Parameters
    ----------
    bg : BlockGraph
        Blocks of ``bg.opgraph``.
    repeats : int
        Timed runs per block (>= 1; default 10).
    warmup : int
        Unmeasured runs first (>= 0; default 3: ORT allocates on the first runs).
    db : ProfileDB, optional
        Rows of kind ``"block"`` (soc ``"host"``, PU of the measured core, this ORT version) are reused
        instead of measuring again; each new measurement is stored as soon as it is taken (one row per
        distinct block, for the measured PU only), so an interrupted run resumes where it stopped.
    progress : callable (done, total), optional
        Called in the calling thread after each block, ``total = len(bg.blocks)``.
    feeds : dict of str to numpy.ndarray, optional
        Values of the model's data inputs (one frame of ``--feeds``; default
        :func:`parapipe.graph.feeds.make_frames`). Blocks read them, and the real values of every integer or
        boolean tensor handed between blocks (shape vectors, indices, masks: :func:`_real_index_values`, one run
        of the whole model); other block inputs get seeded standard-normal values.

    Returns
    -------
    HostProfile
        ``block_time_s`` has an entry for every block × every PU of ``soc``.

    Raises
    ------
    InputError
        ``repeats`` < 1 or ``warmup`` < 0.
    ExecutionError
        A block's sub-model cannot be built or run (message names the block), or the core cannot be pinned.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise input_error("measure_host", "repeats", f"must be an integer >= 1, got {repeats!r}", "use 10")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise input_error("measure_host", "warmup", f"must be an integer >= 0, got {warmup!r}", "use 3")
    start = time.perf_counter()
    soc = host_soc()
    og = bg.opgraph
    measured_pu = soc.pu_names[0]
    cpu = soc.pus[measured_pu].execution.cpus[0]
    binding = PUBinding(cpus=(cpu,), threads=1)
    batch = og.tensors[og.inputs[0]].shape[0] if og.inputs and og.tensors[og.inputs[0]].shape else 1
    batch = batch if isinstance(batch, int) and batch >= 1 else 1
    feeds = _real_index_values(bg, feeds)
    by_signature: dict[str, float] = {}
    block_time_s: dict[tuple[str, str], float] = {}
    new_rows: list[Measurement] = []
    for done, block in enumerate(bg.blocks, start=1):
        sig = block_signature(og, block)
        if sig not in by_signature:
            row = None if db is None else db.get(HOST_SOC_NAME, measured_pu, sig, batch, "block",
                                                 ort.__version__)
            if row is None:
                times = _on_cpu(cpu, lambda: _time_block(og, block, binding, repeats, warmup, feeds))
                median, p90 = float(np.median(times)), float(np.percentile(times, 90))
                summary = "+".join(dict.fromkeys(block.op_types))[:200]
                row = Measurement(HOST_SOC_NAME, measured_pu, sig, summary, batch, ort.__version__, median,
                                  max(p90, median), repeats, utc_now_iso(), "local", "block",
                                  int(block.in_nbytes + block.out_nbytes))
                new_rows.append(row)
                if db is not None:
                    db.put([row])  # one transaction per block: a run killed half-way keeps what it measured
            by_signature[sig] = row.median_s
        for pu in soc.pu_names:
            block_time_s[(block.name, pu)] = by_signature[sig]
        if progress is not None:
            progress(done, len(bg.blocks))
    measure_s = time.perf_counter() - start
    logger.info("host profile of %s: %d block(s), %d measured, %.2f s", og.name, len(bg.blocks),
                len(new_rows), measure_s)
    return HostProfile(soc=soc, block_time_s=block_time_s, measure_s=measure_s)


@contextlib.contextmanager
def _load_other_cores(og: OpGraph, ops: Sequence[str], name: str, cpu: int, given: Optional[dict]):
    """Keep every allowed core but ``cpu`` running the sub-model of ``ops`` (own session, one thread, pinned)
    until the block ends; enter once each has run it once."""
    stop, ready = threading.Event(), []

    def spin(core: int) -> Callable[[], None]:
        def body() -> None:
            sub = extract_submodel(og, ops, name=name, check=False)
            sess = create_session(sub.model, PUBinding(cpus=(core,), threads=1), "CPUExecutionProvider")
            feeds = _random_feeds(og, sub.inputs, np.random.default_rng(0), given)
            sess.run(sub.outputs, feeds)
            flag.set()
            while not stop.is_set():
                sess.run(sub.outputs, feeds)
        flag = threading.Event()
        ready.append(flag)
        return body

    started = [_start_pinned(core, spin(core)) for core in allowed_cpus() if core != cpu]
    try:
        for (thread, _), flag in zip(started, ready):
            while not flag.wait(0.05) and thread.is_alive():
                pass
        yield
    finally:
        stop.set()
        for thread, box in started:
            thread.join()
            if "error" in box:
                logger.warning("loading another core while timing %s failed (%s); timed without that load",
                               name, box["error"])


def measure_ranges(bg: BlockGraph, ranges: Sequence[tuple[int, int]], repeats: int = 10, warmup: int = 3,
                   feeds: Optional[dict] = None, cpu: Optional[int] = None,
                   loaded: bool = True, min_s: float = 0.0) -> dict[tuple[int, int], float]:
    """Stage-level times: each block range ``[start, stop)`` of ``bg`` run as ONE sub-model, as the executor
    runs a stage (:func:`ppexec.session.create_session`, one thread, ``ORT_ENABLE_ALL``, no spinning) on a
    thread pinned to ``cpu`` (default the first allowed core); the median of ``repeats`` runs after ``warmup``
    (more runs until they add up to ``min_s`` seconds).

    A stage's sub-model keeps the fusions and layout changes ONNX Runtime makes across its blocks (and pays one
    session call), which isolated block times miss: the sum of a stage's block times measured here was
    0.7–1.4× the stage's own time (issue 13). The result goes to ``MappingProblem.range_time_s``.

    ``loaded`` (default): while a range is timed, every other allowed core runs the same sub-model in its own
    pinned session, as in a saturated pipeline or replicated stage, where all cores compute at once and share
    caches, the memory bus and the package's all-core clock. Measured on this 2-core machine: a whole model
    runs 1.00-1.06× slower so (median 1.02 over squeezenet, inception_v1, resnet50, 3 repeats each), which is
    the gap between a replicated mapping's measured throughput and one predicted from the model timed alone.

    Returns
    -------
    dict of (start, stop) to float
        Seconds per range.

    Raises
    ------
    InputError
        An empty or out-of-order range.
    ExecutionError
        A range's sub-model cannot be built or run (naming its first block).
    """
    n = len(bg.blocks)
    sets = {}
    for start, stop in dict.fromkeys((int(a), int(b)) for a, b in ranges):
        if not 0 <= start < stop <= n:
            raise input_error("measure_ranges", f"range {start}:{stop}", f"not a block range of 0:{n}",
                              "give 0 <= start < stop <= the number of blocks")
        sets[(start, stop)] = (range(start, stop), f"{bg.blocks[start].name}..{bg.blocks[stop - 1].name}")
    return _time_block_sets(bg, sets, repeats, warmup, feeds, cpu, loaded, min_s)


def measure_block_sets(bg: BlockGraph, block_sets: Sequence[Sequence[int]], repeats: int = 10, warmup: int = 3,
                       feeds: Optional[dict] = None, cpu: Optional[int] = None,
                       loaded: bool = False, min_s: float = 0.0) -> dict[tuple[int, ...], float]:
    """Task-level times: each set of block indices (a task of a multi-PU stage,
    :func:`parapipe.cost.tasks.stage_tasks`: a convex operator set) run as ONE sub-model, timed as
    :func:`measure_ranges` times a range (alone by default: the other cores run the stage's other tasks).

    Returns
    -------
    dict of tuple to float
        Seconds per set (key: its sorted block indices).

    Raises
    ------
    InputError
        An empty set or a block index out of range.
    ExecutionError
        A set's sub-model cannot be built or run (naming its first block).
    """
    n = len(bg.blocks)
    sets = {}
    for blocks in block_sets:
        key = tuple(sorted({int(v) for v in blocks}))
        if not key or key[0] < 0 or key[-1] >= n:
            raise input_error("measure_block_sets", f"block set {list(blocks)}", f"empty or not blocks of 0:{n}",
                              "give block indices 0 <= v < the number of blocks")
        sets[key] = (key, ";".join(bg.blocks[v].name for v in key))
    return _time_block_sets(bg, sets, repeats, warmup, feeds, cpu, loaded, min_s)


def measure_stages(bg: BlockGraph, ranges: Sequence[tuple[int, int]], tasks: Sequence[Sequence[int]], loaded: bool,
                   passes: int = 3, repeats: int = 10, warmup: int = 3, feeds: Optional[dict] = None,
                   min_s: float = STAGE_MIN_S) -> tuple[dict[tuple[int, int], float], dict[tuple[int, ...], float]]:
    """Stage-level times of what mappings run as one sub-model (:func:`parapipe.cost.tasks.stage_block_sets`),
    measured so that they compare with each other: ``passes`` passes, each timing every range and task once
    (:func:`measure_ranges` / :func:`measure_block_sets`, ``repeats`` runs after ``warmup`` and at least
    ``min_s`` seconds of runs), and per set the median of its passes' medians. A disturbance of this shared
    machine then lands on one pass of a few sets, not on all measurements of one candidate (on this 2-core VM
    one 10-run median of inception_v1 came out 8 % slow, enough to rank a shared-core pipeline above the
    replicated model it ran 9 % slower than; issue 13).

    ``loaded``: every other allowed core runs the same sub-model meanwhile, for a cost model without a
    co-running term of its own (:meth:`parapipe.cost.pipeline_terms.PipelineTerms.models_corunning`); alone
    otherwise.

    Returns
    -------
    (dict of (start, stop) to float, dict of tuple to float)
        Seconds per range, seconds per task (key: sorted block indices).

    Raises
    ------
    InputError
        ``passes`` < 1, or a range or task as :func:`measure_ranges` / :func:`measure_block_sets` refuse it.
    ExecutionError
        A sub-model cannot be built or run.
    """
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise input_error("measure_stages", "passes", f"must be an integer >= 1, got {passes!r}", "use 3")
    range_s: dict = {}
    task_s: dict = {}
    for _ in range(passes):
        if ranges:
            for key, t in measure_ranges(bg, ranges, repeats, warmup, feeds, loaded=loaded, min_s=min_s).items():
                range_s.setdefault(key, []).append(t)
        if tasks:
            for key, t in measure_block_sets(bg, tasks, repeats, warmup, feeds, loaded=loaded, min_s=min_s).items():
                task_s.setdefault(key, []).append(t)
    return ({k: float(np.median(v)) for k, v in range_s.items()}, {k: float(np.median(v)) for k, v in task_s.items()})


def _time_block_sets(bg: BlockGraph, sets: dict, repeats: int, warmup: int, feeds: Optional[dict],
                     cpu: Optional[int], loaded: bool, min_s: float = 0.0) -> dict:
    """``{key: median seconds}`` of each ``key -> (block indices, name)`` run as one sub-model on ``cpu``."""
    og = bg.opgraph
    cpu = allowed_cpus()[0] if cpu is None else int(cpu)
    binding = PUBinding(cpus=(cpu,), threads=1)
    given = _real_index_values(bg, feeds)
    topo = {op: i for i, op in enumerate(og.topo_order)}
    out: dict = {}
    for key, (blocks, name) in sets.items():
        ops = sorted((op for v in blocks for op in bg.blocks[v].ops), key=topo.__getitem__)
        with _load_other_cores(og, ops, name, cpu, given) if loaded else contextlib.nullcontext():
            times = _on_cpu(cpu, lambda: _time_ops(og, ops, name, binding, repeats, warmup, given, min_s))
        out[key] = float(np.median(times))
    logger.info("stage-level times of %s: %s", og.name, {name: round(out[k] * 1e3, 3)
                                                         for k, (_, name) in sets.items()})
    return out
