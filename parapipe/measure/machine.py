"""Micro-measurements of the machine parapipe runs on, for the measured ``host`` profile
(:mod:`parapipe.measure.local`): peak FLOP/s and per-operator overhead (an ORT MatMul), memory bandwidth (a numpy
copy), the clock (sysfs or /proc/cpuinfo), and the hand-off cost between two pinned cores (a queue hand-off as
the pipelined executor does it). Each runs on a thread pinned to one core.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Callable, Optional, TypeVar

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from parapipe.errors import ExecutionError, input_error
from ppexec import PUBinding
from ppexec.session import pin_current_thread, session_options

logger = logging.getLogger(__name__)
T = TypeVar("T")

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

    Replicates the executor's hand-off (:mod:`ppexec.executor`): a producer thread pinned to
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
