"""This machine, measured in process: the :class:`LocalTimer`, the ``host`` profile and block/stage times.

:class:`LocalTimer` is the in-process :class:`~parapipe.measure.timer.Timer`: its facts, model timings and
hand-offs come from :mod:`ppexec.timing`, the code the agent's ``hello``, ``profile`` and ``transfer`` run, so
the ``--soc host`` profile, ``soc detect`` and ``profile`` measure alike.

:func:`local_soc` builds the SoC of ``--soc host`` with :func:`parapipe.measure.detect.measured_soc` (the builder
``soc detect`` uses): every core in ``os.sched_getaffinity(0)`` becomes a PU ``cpu<i>`` (kind ``cpu``, one core,
pinned with ``execution.cpus = (i,)``, one ORT thread, all op types, fp32); peak FLOP/s, per-operator overhead,
memory bandwidth and the hand-off cost between every two cores are measured on the spot; the clock comes from
sysfs. No power meter is read, so the powers are placeholders marked ``confidence: low``: energy figures computed
with them are illustrative only.

:func:`measure_local` also times every block of a :class:`~parapipe.graph.coarsen.BlockGraph` the way the
pipelined executor runs it: the block's sub-model (:func:`~parapipe.graph.extract.extract_submodel`) loaded by the
PU's runtime adapter (:func:`ppexec.timing.time_model`: an ORT session made by
:func:`ppexec.session.create_session`, one thread, no spinning, ``ORT_ENABLE_ALL``) on a thread pinned to one
core, fed seeded random inputs of the block's shapes and dtypes. The cores of one machine are taken as
identical: each block is measured on the first allowed core only and that time is used for every PU. These
measured times replace the roofline wherever the cost model has them.
"""
from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar

import numpy as np
import onnx
import onnxruntime as ort

from ppexec import timing
from ppexec.frames import FrameInput, draw_frames, inputs_from_doc
from ppexec.plan import PUBinding
from ppexec.session import create_session, pin_current_thread

from parapipe.errors import ExecutionError, input_error
from parapipe.graph.coarsen import Block, BlockGraph
from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import OpGraph
from parapipe.measure.detect import measured_soc
from parapipe.measure.timer import LOCAL_HOST, check_timer_pus, pu_target
from parapipe.profiledb.catalog import block_signature
from parapipe.profiledb.db import ProfileDB
from parapipe.profiledb.records import Measurement, utc_now_iso
from parapipe.soc.identity import HOST_SOC
from parapipe.soc.profile import PU, Provenance, SoC

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["LocalTimer", "LocalProfile", "local_soc", "measure_local", "measure_ranges", "measure_block_sets",
           "measure_stages", "allowed_cpus", "LOCAL_PRIOR_TERMS", "STAGE_MIN_S"]

#: Source key and text of the numbers :func:`local_soc` measures.
LOCAL_SOURCE = ("measured", "Measured on this machine by parapipe.measure.local when the profile was built "
                            "(ppexec.timing: ONNX Runtime MatMul peak, Identity overhead, Scale bandwidth, "
                            "hand-offs between pinned threads).")
#: Source of the prior pipeline terms (:data:`LOCAL_PRIOR_TERMS`).
_FIDELITY = ("Pipeline terms fitted by benchmarks/fidelity.py (calibrate --runs on 165 pipeline runs of squeezenet, "
             "shufflenet and inception_v1) on parapipe's reference 2-core x86 virtual machine: a prior for this "
             "machine until 'calibrate --runs' or 'optimize --refine' fits its own.")
#: Pipeline terms of the host profile (:mod:`parapipe.cost.pipeline_terms`) before this machine's runs are fitted:
#: what ``python benchmarks/fidelity.py`` fitted on parapipe's reference 2-core x86 virtual machine (leave-one-out
#: period MAPE 4.0 % with them, 12.6 % without). Without them a plain host model ranks pipelines whose cores
#: serve several stages with the replicated model (inception_v1 there: predicted 71.3/s vs 71.2/s, measured
#: 63.7/s vs 69.6/s): it misses the executor's cost per stage hop and the cache refill of a shared core. Overlap
#: is per PU and left out.
LOCAL_PRIOR_TERMS = {"dispatch_s": 122e-6, "handoff_s": 140e-6, "slowdown": 1.031, "sharing": 0.047}
#: Seconds of runs per set and pass in :func:`measure_stages`: ten runs of a 3 ms sub-model span 30 ms, short
#: enough for one transient on a shared machine to move their median (squeezenet's whole model timed loaded,
#: three times in a row on a 2-core virtual machine: one 10-run median 4.49 ms, then 3.10 and 3.14 ms).
STAGE_MIN_S = 0.15
#: Timed runs per micro-benchmark of :func:`local_soc` (as ``soc detect``'s default).
SOC_REPEATS = 5


def allowed_cpus() -> List[int]:
    """CPU ids this process may run on (:func:`ppexec.timing.allowed_cpus`)."""
    return timing.allowed_cpus()


def _timing_error(exc: "timing.TimingError") -> ExecutionError:
    return ExecutionError(" ".join(exc.message.split()))


class LocalTimer:
    """The in-process :class:`~parapipe.measure.timer.Timer` (:mod:`ppexec.timing` called directly).

    Parameters
    ----------
    cpus : sequence of int, optional
        The CPUs to measure on (default: all of ``os.sched_getaffinity(0)``); the facts' ``cpus_allowed``.

    Raises
    ------
    ExecutionError
        From :meth:`time_model` / :meth:`time_handoff`: a CPU that cannot be pinned, a model that does not load
        or run (one line naming it).
    """

    host = LOCAL_HOST

    def __init__(self, cpus: Optional[Sequence[int]] = None):
        self.facts: Dict[str, Any] = timing.machine_facts()
        if cpus is not None:
            self.facts["cpus_allowed"] = sorted(int(c) for c in cpus)

    @property
    def ort_version(self) -> str:
        """ONNX Runtime version in this process."""
        return str(self.facts["onnxruntime_version"])

    @property
    def cpus_allowed(self) -> List[int]:
        """CPUs the measurements use."""
        return list(self.facts["cpus_allowed"])

    def check_pus(self, soc: SoC, pus: Sequence[str]) -> None:
        """Refuse PUs this machine cannot run (:func:`~parapipe.measure.timer.check_timer_pus`)."""
        check_timer_pus(self.facts, self.host, soc, pus)

    def target(self, pu: PU) -> Dict[str, Any]:
        """:func:`~parapipe.measure.timer.pu_target` with this machine's CPUs."""
        return pu_target(pu, self.cpus_allowed)

    def time_model(self, model: onnx.ModelProto, pu: PU, optimization: str, warmup: int, repeats: int,
                   timeout_s: float = math.inf) -> Dict[str, Any]:
        """Time ``model`` on ``pu`` with :func:`ppexec.timing.time_model`, fed one seeded frame
        (:func:`ppexec.bundle_run.make_frames`, seed 0; dynamic dimensions 1); the agent's ``profile`` reply
        fields (``timeout_s`` is not enforced in process)."""
        spec = self.target(pu)
        options = dict(spec.get("runtime_options") or {})
        runtime = spec.get("runtime", "onnxruntime")
        if runtime == "onnxruntime":
            options.update(optimization=optimization, allow_spinning=False)
        cpus = spec.get("cpus")
        binding = PUBinding(cpus=None if cpus is None else tuple(cpus), threads=int(spec["threads"]),
                            provider=spec.get("provider", "CPUExecutionProvider"),
                            provider_options=dict(spec.get("provider_options") or {}), runtime=runtime,
                            runtime_options=options)

        def feeds_for(specs) -> dict:
            inputs = {name: {"shape": [d if isinstance(d, int) and d > 0 else 1 for d in shape],
                             "dtype": dtype or "float32"} for name, shape, dtype in specs}
            return draw_frames(inputs_from_doc(inputs), 1, 0)[0]

        try:
            timed = timing.time_model(model, binding, warmup, repeats, feeds_for)
        except timing.TimingError as exc:
            raise _timing_error(exc) from None
        reply = timing.stats(timed["times_s"])
        info = timed["runtime_info"]
        reply.update(runtime=runtime, runtime_info=info, provider=info.get("provider"), cpus=timed["cpus"],
                     threads=binding.threads, onnxruntime_version=self.ort_version)
        return reply

    def time_handoff(self, nbytes: int, src_cpus: Sequence[int], dst_cpus: Sequence[int], warmup: int = 3,
                     repeats: int = 20, timeout_s: float = math.inf) -> Dict[str, Any]:
        """Time handing ``nbytes`` between the CPU sets with :func:`ppexec.timing.handoff_costs`; the agent's
        ``transfer`` reply fields."""
        try:
            costs = timing.handoff_costs(int(nbytes), list(src_cpus), list(dst_cpus), warmup, repeats)
        except timing.TimingError as exc:
            raise _timing_error(exc) from None
        reply = timing.stats(costs)
        reply.update(nbytes=int(nbytes), src_cpus=list(src_cpus), dst_cpus=list(dst_cpus),
                     bandwidth_bytes_per_s=nbytes / reply["median_s"] if reply["median_s"] > 0 else None)
        return reply


def local_soc(n_cpus: Optional[int] = None, transfer: Optional[tuple[float, float]] = None) -> SoC:
    """Build the SoC of this machine (``--soc host``), measuring it as ``soc detect --per-core`` does.

    Parameters
    ----------
    n_cpus : int, optional
        Use the first ``n_cpus`` allowed cores (default: all of ``os.sched_getaffinity(0)``).
    transfer : (alpha_s, beta_bytes_per_s), optional
        Default transfer cost between cores; measured between every two cores (up to
        :data:`parapipe.measure.detect.MAX_PAIR_PUS` cores, else the first two) when None.

    Returns
    -------
    SoC
        Name ``"host"``; one PU ``cpu<i>`` per core ``i`` used with ``execution.cpus = (i,)``, ``threads = 1``,
        ``cores = 1``, all op types, fp32: :func:`parapipe.measure.detect.measured_soc` with ``per_core`` and no
        accelerators (peak FLOP/s of a 512-square fp32 MatMul, overhead of a one-element Identity, bandwidth of a
        64 MiB Scale, all in ONNX Runtime on one pinned thread; the cores are taken as identical; the clock from
        sysfs, else a 1 GHz guess; placeholder powers, ``confidence: low``); ``power_sensor`` the readable RAPL
        or INA3221 sensor, if any (:func:`ppexec.power.detect_sensor`); ``pipeline`` the prior terms
        :data:`LOCAL_PRIOR_TERMS` (``confidence: low``).

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
            raise input_error("local_soc", "transfer", f"must be (alpha_s >= 0, beta_bytes_per_s > 0), got "
                              f"{tuple(transfer)}", "give seconds and bytes/s, or None to measure them")
        transfer = (alpha, beta)
    soc = measured_soc(LocalTimer(cpus), HOST_SOC, per_core=True, repeats=SOC_REPEATS, accelerators=False,
                       source=LOCAL_SOURCE, transfer=transfer,
                       description=f"this machine, {len(cpus)} core(s) measured by parapipe; powers are "
                                   "placeholders")
    from parapipe.soc.pipeline import PipelineParams
    from ppexec.power import detect_sensor

    provenance = dict(soc.provenance)
    for name in LOCAL_PRIOR_TERMS:
        provenance[f"pipeline.{name}"] = Provenance(source="fidelity", confidence="low",
                                                    note="prior from the reference machine, not this one")
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    sensor = detect_sensor()  # RAPL or a Jetson's INA3221 where readable: run/deploy then measure energy
    return SoC.model_validate({**fields, "pipeline": PipelineParams(**LOCAL_PRIOR_TERMS),
                               "sources": {**soc.sources, "fidelity": _FIDELITY}, "provenance": provenance,
                               "power_sensor": sensor})


def _start_pinned(cpu: int, fn: Callable[[], T]) -> tuple[threading.Thread, dict]:
    """Start ``fn`` in a daemon thread pinned to ``cpu``; the dict gets ``result`` or ``error``."""
    box: dict = {}

    def target() -> None:
        try:
            pin_current_thread(f"cpu{cpu}", (cpu,))
            box["result"] = fn()
        except BaseException as exc:  # carried back to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"parapipe-local-cpu{cpu}", daemon=True)
    thread.start()
    return thread, box


@dataclass(frozen=True)
class LocalProfile:
    """This machine's SoC with measured block times.

    Attributes
    ----------
    soc : SoC
        Named ``"host"``; PUs ``cpu<i>`` for the allowed cores ``i`` (see :func:`local_soc`).
    block_time_s : dict of (str, str) to float
        ``(block name, PU name)`` -> median time of the block on that PU, s; every block × every PU.
    measure_s : float
        Wall time :func:`measure_local` took, s.
    """

    soc: SoC
    block_time_s: dict[tuple[str, str], float]
    measure_s: float


def _random_feeds(og: OpGraph, names: Sequence[str], given: Optional[dict] = None,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """The inputs of a sub-model whose inputs are ``names``: ``given`` values (the user's feeds, the real index
    values) where there are some, else seeded values drawn by :func:`ppexec.frames.draw_frames` (floats standard
    normal, booleans 0/1, integers 0: no range bounds an inner tensor)."""
    given = given or {}
    drawn = draw_frames([FrameInput(n, og.tensors[n].shape, og.tensors[n].dtype) for n in names if n not in given],
                        1, seed)[0]
    return {name: np.asarray(given[name]) if name in given else drawn[name] for name in names}


def _real_index_values(bg: BlockGraph, feeds: Optional[dict]) -> dict[str, np.ndarray]:
    """``feeds`` (default: one seeded frame) plus the values of the integer and boolean tensors that cross
    blocks, from one run of the whole model: random values there would be wrong shapes or indices.

    Raises
    ------
    InputError
        The whole model fails on these inputs (a feed error naming the inputs that reach the failing node and
        the ``--feeds`` remedy, :func:`parapipe.graph.feeds.feed_error`); run only when integer or boolean values
        matter (such a tensor crosses blocks, or the model has such an input).
    """
    from parapipe.graph.feeds import feed_error, input_specs
    from ppexec.reference import reference_outputs

    og = bg.opgraph
    values = dict(feeds) if feeds is not None else draw_frames(input_specs(og), 1)[0]
    wanted = sorted({t for _, _, ts in bg.graph.edges(data="tensors") for t in ts
                     if t in og.tensors and np.dtype(og.tensors[t].dtype).kind in "iub"
                     and not og.tensors[t].sequence})
    if wanted or any(np.dtype(og.tensors[n].dtype).kind in "iub" for n in og.inputs):
        probe = onnx.ModelProto()
        probe.CopyFrom(og.model)
        present = {o.name for o in probe.graph.output}
        probe.graph.output.extend(og.value_info(t) for t in wanted if t not in present)
        try:
            (ran,) = reference_outputs(probe, [values])
        except Exception as exc:  # the inputs are wrong, not the model: ORT runs it on others
            raise feed_error(og, exc, "--feeds" if feeds is not None else "generated inputs",
                             generated=feeds is None) from exc
        values.update({t: ran[t] for t in wanted})
    return values


def _time_block(og: OpGraph, block: Block, binding: PUBinding, repeats: int, warmup: int,
                given: Optional[dict] = None) -> list[float]:
    """Times of ``repeats`` runs of the block's sub-model on ``binding``, s (:func:`_time_ops`)."""
    return _time_ops(og, block.ops, block.name, binding, repeats, warmup, given)


def _time_ops(og: OpGraph, ops: Sequence[str], name: str, binding: PUBinding, repeats: int, warmup: int,
              given: Optional[dict] = None, min_s: float = 0.0) -> list[float]:
    """Times of ``repeats`` runs of the sub-model of ``ops`` on ``binding`` (:func:`ppexec.timing.time_model`,
    on a thread pinned to its CPUs), s (more runs until they add up to ``min_s``)."""
    try:
        sub = extract_submodel(og, ops, name=name, check=False)
        feeds = _random_feeds(og, sub.inputs, given)
        return timing.time_model(sub.model, binding, warmup, repeats, lambda specs: feeds, min_s)["times_s"]
    except Exception as exc:
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ExecutionError(f"measuring block {name!r} of {og.name!r} on this machine failed: {detail}; "
                             "check that the model runs in ONNX Runtime on its own") from exc


def measure_local(bg: BlockGraph, repeats: int = 10, warmup: int = 3, db: Optional[ProfileDB] = None,
                 progress: Optional[Callable[[int, int], None]] = None,
                 feeds: Optional[dict] = None) -> LocalProfile:
    """Build :func:`local_soc` and time every block of ``bg`` on it.

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
        Values of the model's data inputs (one frame of ``--feeds``; default one seeded frame,
        :func:`ppexec.frames.draw_frames`). Blocks read them, and the real values of every integer or
        boolean tensor handed between blocks (shape vectors, indices, masks: :func:`_real_index_values`, one run
        of the whole model); other block inputs get seeded standard-normal values.

    Returns
    -------
    LocalProfile
        ``block_time_s`` has an entry for every block × every PU of ``soc``.

    Raises
    ------
    InputError
        ``repeats`` < 1 or ``warmup`` < 0.
    ExecutionError
        A block's sub-model cannot be built or run (message names the block), or the core cannot be pinned.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise input_error("measure_local", "repeats", f"must be an integer >= 1, got {repeats!r}", "use 10")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise input_error("measure_local", "warmup", f"must be an integer >= 0, got {warmup!r}", "use 3")
    start = time.perf_counter()
    soc = local_soc()
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
            row = None if db is None else db.get(HOST_SOC, measured_pu, sig, batch, "block",
                                                 ort.__version__)
            if row is None:
                times = _time_block(og, block, binding, repeats, warmup, feeds)
                median, p90 = float(np.median(times)), float(np.percentile(times, 90))
                summary = "+".join(dict.fromkeys(block.op_types))[:200]
                row = Measurement(HOST_SOC, measured_pu, sig, summary, batch, ort.__version__, median,
                                  max(p90, median), repeats, utc_now_iso(), LOCAL_HOST, "block",
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
    logger.info("local profile of %s: %d block(s), %d measured, %.2f s", og.name, len(bg.blocks),
                len(new_rows), measure_s)
    return LocalProfile(soc=soc, block_time_s=block_time_s, measure_s=measure_s)


@contextlib.contextmanager
def _load_other_cores(og: OpGraph, ops: Sequence[str], name: str, cpu: int, given: Optional[dict]):
    """Keep every allowed core but ``cpu`` running the sub-model of ``ops`` (own session, one thread, pinned)
    until the block ends; enter once each has run it once."""
    stop, ready = threading.Event(), []

    def spin(core: int) -> Callable[[], None]:
        def body() -> None:
            sub = extract_submodel(og, ops, name=name, check=False)
            sess = create_session(sub.model, PUBinding(cpus=(core,), threads=1), "CPUExecutionProvider")
            feeds = _random_feeds(og, sub.inputs, given)
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
    0.7–1.4× the stage's own time on a 2-core x86 virtual machine. The result goes to
    ``MappingProblem.range_time_s``.

    ``loaded`` (default): while a range is timed, every other allowed core runs the same sub-model in its own
    pinned session, as in a saturated pipeline or replicated stage, where all cores compute at once and share
    caches, the memory bus and the package's all-core clock. Measured on a 2-core x86 virtual machine: a whole
    model runs 1.00-1.06× slower so (median 1.02 over squeezenet, inception_v1, resnet50, 3 repeats each), which is
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
    machine then lands on one pass of a few sets, not on all measurements of one candidate (on a 2-core x86 VM
    one 10-run median of inception_v1 came out 8 % slow, enough to rank a shared-core pipeline above the
    replicated model it ran 9 % slower than).

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
            times = _time_ops(og, ops, name, binding, repeats, warmup, given, min_s)
        out[key] = float(np.median(times))
    logger.info("stage-level times of %s: %s", og.name, {name: round(out[k] * 1e3, 3)
                                                         for k, (_, name) in sets.items()})
    return out
