"""A measured SoC profile of the machine parapipe runs on (``--soc host``): one PU per allowed CPU core.

:func:`host_soc` builds the SoC: every core in ``os.sched_getaffinity(0)`` becomes a PU ``cpu<i>`` (kind
``cpu``, one core, pinned with ``execution.cpus = (i,)``, one ORT thread, all op types, fp32). Its peak
FLOP/s, per-operator overhead, memory bandwidth and the hand-off cost between two cores are measured on the
spot (about half a second); the clock comes from sysfs or ``/proc/cpuinfo``. There is no power meter on this
machine, so the powers are placeholders (:data:`PLACEHOLDER_ACTIVE_POWER_W` and friends), marked
``confidence: low`` in the profile's provenance: energy figures computed with them are illustrative only.

:func:`measure_host` also times every block of a :class:`~parapipe.graph.coarsen.BlockGraph` the way the
pipelined executor runs it: the block's sub-model (:func:`~parapipe.graph.extract.extract_submodel`) in an
ORT session made by :func:`parapipe.runtime.session.create_session` (one thread, no spinning,
``ORT_ENABLE_ALL``) on a thread pinned to one core, fed seeded random inputs of the block's shapes and dtypes.
The cores of one machine are taken as identical: each block is measured on the first allowed core only and
that time is used for every PU. These measured times replace the roofline wherever the cost model has them
(GUIDE §2).
"""
from __future__ import annotations

import hashlib
import logging
import math
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, TypeVar

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from parapipe.errors import ExecutionError, input_error
from parapipe.graph.coarsen import Block, BlockGraph
from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import OpGraph
from parapipe.profiling.db import ProfileDB
from parapipe.profiling.records import Measurement, utc_now_iso
from parapipe.runtime.plan import PUBinding
from parapipe.runtime.session import create_session, pin_current_thread, session_options
from parapipe.soc.op_classes import OP_CLASSES
from parapipe.soc.profile import PU, Provenance, SoC

logger = logging.getLogger(__name__)

__all__ = ["HostProfile", "host_soc", "measure_host", "block_signature", "measure_transfer", "allowed_cpus",
           "HOST_SOC_NAME"]

#: SoC name of the measured profile (reserved: soc_profiles/README.md forbids a bundled host.yaml).
HOST_SOC_NAME = "host"
#: Placeholder powers, W: no power meter can be read on this machine. 5 W per busy core, 1 W idle and 10 W for
#: the rest of the system are parapipe's round guesses for a server core, not measurements.
PLACEHOLDER_ACTIVE_POWER_W = 5.0
PLACEHOLDER_IDLE_POWER_W = 1.0
PLACEHOLDER_STATIC_POWER_W = 10.0
#: Clock used when neither sysfs (cpufreq/cpuinfo_max_freq) nor /proc/cpuinfo gives one, Hz (a round guess).
FALLBACK_FREQUENCY_HZ = 1e9
#: Side of the square fp32 MatMul timed for peak FLOP/s (2·N³ FLOPs, about 5 ms on one core here).
GEMM_N = 512
#: Bytes copied (numpy, one thread) to measure memory bandwidth; counted twice (read + write), as STREAM Copy.
COPY_NBYTES = 64 * 2**20
#: Tensor sizes, bytes, of the two-point hand-off fit (1 KiB: fixed cost; 4 MiB: a large activation).
TRANSFER_SMALL_NBYTES = 2**10
TRANSFER_LARGE_NBYTES = 4 * 2**20
#: Frames per size in the hand-off measurement (median taken; both sizes take about 0.25 s here). The 4 MiB
#: costs have a long load-dependent tail on this shared 2-core machine; 100 frames keep the median steady.
TRANSFER_FRAMES = 100
#: Longest the producer waits for the consumer's answer before giving up, s (a frame takes about 1 ms).
HANDOFF_TIMEOUT_S = 10.0

_SOURCES = {
    "measured": "Measured on this machine by parapipe.profiling.host when the profile was built "
                "(ONNX Runtime MatMul, numpy copy, queue hand-off between pinned threads).",
    "cpuinfo": "Linux sysfs cpufreq/cpuinfo_max_freq, else 'cpu MHz' in /proc/cpuinfo, on this machine.",
    "parapipe": "parapipe's choice for the host profile: efficiency 1.0 for every op class, since measured "
                "block times replace the roofline.",
}
_PLACEHOLDER = Provenance(confidence="low", note="placeholder: no power meter on this machine")
T = TypeVar("T")


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


def allowed_cpus() -> list[int]:
    """CPU ids this process may run on (``os.sched_getaffinity(0)``, sorted; ``[0..cpu_count)`` elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _start_pinned(cpu: int, fn: Callable[[], T]) -> tuple[threading.Thread, dict]:
    """Start ``fn`` in a daemon thread pinned to ``cpu``; the dict gets ``result`` or ``error``."""
    box: dict = {}

    def target() -> None:
        try:
            pin_current_thread(f"cpu{cpu}", (cpu,))
            box["result"] = fn()
        except BaseException as exc:  # carried back to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"parapipe-host-cpu{cpu}", daemon=True)
    thread.start()
    return thread, box


def _on_cpu(cpu: int, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a fresh thread pinned to ``cpu``; return its result or re-raise its exception."""
    thread, box = _start_pinned(cpu, fn)
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _single_thread_session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), sess_options=session_options(PUBinding(cpus=None)),
                                providers=["CPUExecutionProvider"])


def _gemm_and_overhead() -> tuple[float, float]:
    """(peak FLOP/s, per-run overhead s) of one ORT thread: best of 10 MatMuls, median of 50 Identities."""
    f32 = TensorProto.FLOAT
    n = GEMM_N
    matmul = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm",
        [helper.make_tensor_value_info("a", f32, [n, n]), helper.make_tensor_value_info("b", f32, [n, n])],
        [helper.make_tensor_value_info("c", f32, [n, n])]), opset_imports=[helper.make_opsetid("", 13)])
    ident = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "ident", [helper.make_tensor_value_info("x", f32, [1])],
        [helper.make_tensor_value_info("y", f32, [1])]), opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal((n, n)).astype(np.float32) for k in ("a", "b")}
    sess = _single_thread_session(matmul)
    for _ in range(2):
        sess.run(None, feeds)
    best = min(_timed(lambda: sess.run(None, feeds)) for _ in range(10))
    sess = _single_thread_session(ident)
    x = {"x": np.zeros(1, np.float32)}
    for _ in range(5):
        sess.run(None, x)
    overhead = float(np.median([_timed(lambda: sess.run(None, x)) for _ in range(50)]))
    return 2.0 * n ** 3 / best, overhead


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _copy_bandwidth() -> float:
    """Bytes/s of one thread copying :data:`COPY_NBYTES` with numpy (best of 3, read + write counted)."""
    src = np.ones(COPY_NBYTES, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in first
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(3))
    return 2.0 * COPY_NBYTES / best


def _frequency_hz(cpu: int) -> tuple[float, Optional[str]]:
    """Clock of ``cpu`` in Hz and a note when it is the :data:`FALLBACK_FREQUENCY_HZ` guess."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq") as handle:
            return float(handle.read().strip()) * 1e3, None  # the file is in kHz
    except (OSError, ValueError):
        pass
    try:
        current = None
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "processor":
                    current = int(value)
                elif key.strip() == "cpu MHz" and current == cpu:
                    return float(value) * 1e6, None
    except (OSError, ValueError):
        pass
    logger.info("no clock frequency found for cpu%d; using %.0f Hz", cpu, FALLBACK_FREQUENCY_HZ)
    return FALLBACK_FREQUENCY_HZ, "not found in sysfs or /proc/cpuinfo: 1 GHz guess"


def measure_transfer(src_cpu: int, dst_cpu: int, frames: int = TRANSFER_FRAMES) -> tuple[float, float]:
    """Fit the hand-off cost ``alpha_s + nbytes / beta_bytes_per_s`` between two pinned threads.

    Replicates the executor's hand-off (:mod:`parapipe.runtime.executor`): a producer thread pinned to
    ``src_cpu`` writes a tensor (as a stage's last operator would), stamps the time and puts it in a
    ``queue.Queue``; a consumer pinned to ``dst_cpu`` takes it and reads every byte (``np.copyto`` into a
    buffer of its own), as the next stage's first operator would. The cost of one frame is the time from the
    put until the read is done, less the time the consumer takes to read the same bytes again from its own
    cache (block times are measured with inputs already in cache, so only the difference is a transfer
    cost). The medians at :data:`TRANSFER_SMALL_NBYTES` and :data:`TRANSFER_LARGE_NBYTES` give the line.

    Parameters
    ----------
    src_cpu, dst_cpu : int
        Allowed CPU ids (equal on a one-core machine: then only the queue wake-up is measured).
    frames : int
        Frames per size (default :data:`TRANSFER_FRAMES`), after 5 unmeasured ones.

    Returns
    -------
    alpha_s : float
        Fixed cost per hand-off, s (>= 0).
    beta_bytes_per_s : float
        Bytes/s of the size-dependent part (> 0). When the large tensor costs no more than the small one
        (noise, cores sharing a cache), the numpy copy bandwidth is used instead and a warning logged. On
        this 2-core VM the 4 MiB penalty is only tens of microseconds, so beta varies between runs (1e10 to
        1.5e11 B/s observed); alpha (about 30 us, the queue wake-up) is steady.

    Raises
    ------
    InputError
        ``frames`` < 1.
    ExecutionError
        A CPU id cannot be pinned (message names it and lists the allowed ones).
    """
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise input_error("measure_transfer", "frames", f"must be an integer >= 1, got {frames!r}", "use 50")
    costs = [float(np.median(_handoff_costs(src_cpu, dst_cpu, nbytes, frames)))
             for nbytes in (TRANSFER_SMALL_NBYTES, TRANSFER_LARGE_NBYTES)]
    span = TRANSFER_LARGE_NBYTES - TRANSFER_SMALL_NBYTES
    if costs[1] > costs[0]:
        beta = span / (costs[1] - costs[0])
    else:
        beta = _copy_bandwidth()
        logger.warning("hand-off cpu%d->cpu%d: %d B cost no more than %d B (%.1f vs %.1f us); using the copy "
                       "bandwidth %.3g B/s", src_cpu, dst_cpu, TRANSFER_LARGE_NBYTES, TRANSFER_SMALL_NBYTES,
                       costs[1] * 1e6, costs[0] * 1e6, beta)
    alpha = max(costs[0] - TRANSFER_SMALL_NBYTES / beta, 0.0)
    logger.info("hand-off cpu%d->cpu%d: alpha %.1f us, beta %.3g B/s", src_cpu, dst_cpu, alpha * 1e6, beta)
    return alpha, beta


def _handoff_costs(src_cpu: int, dst_cpu: int, nbytes: int, frames: int) -> list[float]:
    warm = 5
    to_consumer: "queue.Queue" = queue.Queue(maxsize=1)
    to_producer: "queue.Queue" = queue.Queue(maxsize=1)
    costs: list[float] = []

    def consume() -> None:
        dst = np.zeros(nbytes, np.uint8)
        for i in range(warm + frames):
            put_s, buf = to_consumer.get()
            np.copyto(dst, buf)
            done_s = time.perf_counter()
            cached_s = _timed(lambda: np.copyto(dst, buf))
            if i >= warm:
                costs.append(done_s - put_s - cached_s)
            to_producer.put(None)

    def produce() -> None:
        src = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
        buf = np.empty_like(src)
        for _ in range(warm + frames):
            np.copyto(buf, src)  # the producer's write: the bytes sit dirty in its cache
            to_consumer.put((time.perf_counter(), buf))
            deadline = time.monotonic() + HANDOFF_TIMEOUT_S
            while True:
                try:
                    to_producer.get(timeout=0.05)
                    break
                except queue.Empty:
                    if "error" in box or time.monotonic() > deadline:
                        cause = box.get("error")
                        raise ExecutionError(f"hand-off cpu{src_cpu}->cpu{dst_cpu}: the consumer stopped "
                                             f"({cause or 'no answer'})") from cause

    consumer, box = _start_pinned(dst_cpu, consume)
    _on_cpu(src_cpu, produce)
    consumer.join()
    return costs


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
        :data:`PLACEHOLDER_STATIC_POWER_W` (no power meter here; ``confidence: low`` in ``soc.provenance``).
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
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    return SoC.model_validate({**fields, "sources": dict(_SOURCES), "provenance": provenance})


def block_signature(og: OpGraph, block: Block) -> str:
    """Stable id of what a block computes: ``"block:"`` + SHA-256 (first 24 hex digits) of its operators'
    :attr:`~parapipe.graph.opgraph.Operator.signature` strings in block order (op types, input shapes/dtypes,
    attributes); equal for blocks that cost the same, in this model or another."""
    text = "\n".join(og.graph.nodes[op]["op"].signature for op in block.ops)
    return "block:" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _random_feeds(og: OpGraph, names: Sequence[str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Seeded inputs: standard normal for floating point tensors, zeros (valid indices) for the others."""
    feeds = {}
    for name in names:
        info = og.tensors[name]
        dtype = np.dtype(info.dtype)
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(info.shape).astype(dtype)
        else:
            feeds[name] = np.zeros(info.shape, dtype)
    return feeds


def _time_block(og: OpGraph, block: Block, binding: PUBinding, repeats: int, warmup: int) -> list[float]:
    """Run on the pinned measuring thread: times of ``repeats`` runs of the block's sub-model, s."""
    try:
        sub = extract_submodel(og, block.ops, name=block.name, check=False)
        sess = create_session(sub.model, binding, "CPUExecutionProvider")
        feeds = _random_feeds(og, sub.inputs, np.random.default_rng(0))
        for _ in range(warmup):
            sess.run(sub.outputs, feeds)
        return [_timed(lambda: sess.run(sub.outputs, feeds)) for _ in range(repeats)]
    except Exception as exc:
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ExecutionError(f"measuring block {block.name!r} of {og.name!r} on the host failed: {detail}; "
                             "check that the model runs in ONNX Runtime on its own") from exc


def measure_host(bg: BlockGraph, repeats: int = 10, warmup: int = 3, db: Optional[ProfileDB] = None,
                 progress: Optional[Callable[[int, int], None]] = None) -> HostProfile:
    """Build :func:`host_soc` and time every block of ``bg`` on it.

    Each distinct block (by :func:`block_signature`) is run ``warmup`` times, then timed ``repeats`` times
    with ``time.perf_counter`` in one thread pinned to the first allowed core, in a session made exactly as
    the executor makes it (:func:`parapipe.runtime.session.create_session`, one thread); the median is its
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
    by_signature: dict[str, float] = {}
    block_time_s: dict[tuple[str, str], float] = {}
    new_rows: list[Measurement] = []
    for done, block in enumerate(bg.blocks, start=1):
        sig = block_signature(og, block)
        if sig not in by_signature:
            row = None if db is None else db.get(HOST_SOC_NAME, measured_pu, sig, batch, "block",
                                                 ort.__version__)
            if row is None:
                times = _on_cpu(cpu, lambda: _time_block(og, block, binding, repeats, warmup))
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
