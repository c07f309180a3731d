"""Board-side timing: the one implementation of what parapipe measures on a machine.

The agent's ``hello``, ``profile`` and ``transfer`` ops (``device_agents/agent.py``) and parapipe's in-process
measurement (``parapipe.measure.local``, ``--soc host``) both call these functions, so a profile measured on this
machine and one measured on a board over SSH are measured alike. Python 3.8, numpy and onnxruntime only; never
imports parapipe.

- :func:`machine_facts`: CPUs (clusters by sysfs ``cpu_capacity`` / ``cpuinfo_max_freq``), memory, ONNX Runtime
  providers, runtime adapters, platform.
- :func:`time_model`: load a model with the PU's runtime adapter (:mod:`.runtimes`, what a pipeline run uses) on a
  thread pinned to the PU's CPUs (:func:`.session.pin_current_thread`, as a stage worker pins itself), then time
  ``warmup + repeats`` runs with ``time.perf_counter``.
- :func:`handoff_costs`: the cost of handing a tensor from a thread on one CPU set to a thread on another through
  the executor's stage queue (:class:`.queues.BoundedQueue`).
- :func:`stats`: median, p90 (nearest rank), min and spread of a list of times.
- :func:`cpu_sample`, :func:`load_between`, :func:`combine_loads`: the machine's load while something was
  measured: the share of the CPUs' time that other processes used (every reply of :func:`time_model` carries it).

Errors are :class:`TimingError`, whose ``error_type`` is the agent protocol's error type (``PinError``,
``ProviderUnavailable``, ``ModelError``, ``RunError``, ``BadRequest``).

One module (about 480 lines) because it is the one measuring code shared by the agent and the in-process
timer (machine facts, sub-model timing, hand-offs, load): one file, so both sides measure alike.
"""
import os
import platform
import queue
import threading
import time

import numpy as np

from .errors import PipelineError, PlanError
from .queues import BoundedQueue

__all__ = ["TimingError", "stats", "cpu_sample", "load_between", "combine_loads", "window_spread", "RUN_WINDOWS", "allowed_cpus", "cpu_clusters", "memory_bytes", "machine_facts", "run_pinned",
           "time_model", "handoff_costs", "pin", "SYSFS_CPU", "HANDOFF_WARMUP", "HANDOFF_TIMEOUT_S"]

#: Linux sysfs folder that describes CPUs (kernel Documentation/ABI/testing/sysfs-devices-system-cpu).
SYSFS_CPU = "/sys/devices/system/cpu"
#: Untimed hand-offs before the timed ones (the first ones fault the buffers in).
HANDOFF_WARMUP = 5
#: Longest the producer waits for the consumer's answer to one hand-off before giving up, s (one takes well
#: under a millisecond for the sizes parapipe times).
HANDOFF_TIMEOUT_S = 10.0
#: Poll interval of the producer's wait, s: it checks whether the consumer failed between polls.
_POLL_S = 0.05


class TimingError(Exception):
    """A measurement that could not be taken; ``error_type`` is the agent protocol's error type."""

    def __init__(self, error_type, message):
        Exception.__init__(self, message)
        self.error_type = error_type
        self.message = message


def pin(name, cpus):
    """Pin the calling thread to ``cpus`` (None: leave it) with :func:`.session.pin_current_thread`, as a stage
    worker pins itself; return the thread's CPUs (sorted). A CPU this process may not use is a ``PinError``."""
    from .session import pin_current_thread  # imports onnxruntime, which costing without measuring never needs

    try:
        return sorted(pin_current_thread(name, cpus))
    except PipelineError as exc:
        raise TimingError("PinError", str(exc))


def stats(times_s):
    """``{"median_s", "p90_s", "min_s", "spread", "repeats"}`` of durations in seconds: p90 by nearest rank (the
    smallest value with at least 90 % of the samples at or below it, and at least the median), spread =
    p90 / median - 1 (0 for a zero median)."""
    ordered = sorted(times_s)
    n = len(ordered)
    mid = n // 2
    median = ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
    p90 = max(ordered[max(0, -(-9 * n // 10) - 1)], median)
    spread = (p90 / median - 1.0) if median > 0 else 0.0
    return {"median_s": median, "p90_s": p90, "min_s": ordered[0], "spread": spread, "repeats": n}


#: Kernel CPU statistics (proc(5): per-CPU lines of jiffies spent in user, nice, system, idle, iowait, irq,
#: softirq, steal, ...).
PROC_STAT = "/proc/stat"


def cpu_sample(cpus=None, proc_stat=PROC_STAT):
    """A snapshot of how busy ``cpus`` (default :func:`allowed_cpus`) have been since boot, for
    :func:`load_between`: ``{"wall_s": time.monotonic(), "busy_s": seconds those CPUs spent neither idle nor in
    iowait (steal counts as busy: another guest had the core), "own_s": this process's user + system seconds
    (``os.times()``, all its threads), "cpus": how many of them were found}``; None where ``proc_stat`` cannot
    be read (not Linux). Jiffies are converted with ``os.sysconf("SC_CLK_TCK")`` (proc(5))."""
    wanted = set(allowed_cpus() if cpus is None else cpus)
    try:
        hz = float(os.sysconf("SC_CLK_TCK"))
        busy = 0.0
        found = 0
        with open(proc_stat) as handle:
            for line in handle:
                name, _, rest = line.partition(" ")
                if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in wanted:
                    continue
                values = [int(v) for v in rest.split()]
                total = sum(values[:8])  # guest time is already inside user and nice
                busy += total - values[3] - (values[4] if len(values) > 4 else 0)
                found += 1
    except (OSError, ValueError, AttributeError):
        return None
    if not found:
        return None
    times = os.times()
    return {"wall_s": time.monotonic(), "busy_s": busy / hz, "own_s": times.user + times.system,
            "cpus": found}


def load_between(before, after):
    """The machine's load between two :func:`cpu_sample` snapshots: ``{"load": share of the CPUs' time that
    other processes used, 0 (only this process ran) to 1 (every CPU busy with others all along), "foreign_s":
    those CPU-seconds, "window_s": wall seconds, "cpus": count}``; None when a snapshot is None or the window
    is empty. ``load`` is the CPUs' busy time less this process's own CPU time, over ``window_s * cpus``: a
    process running beside a pinned measurement takes a share of the core from it, which is what makes
    repeated measurements disagree. Resolution: one jiffy (10 ms at USER_HZ 100) per CPU per snapshot."""
    if not before or not after or after["wall_s"] <= before["wall_s"]:
        return None
    window = after["wall_s"] - before["wall_s"]
    cpus = min(before["cpus"], after["cpus"])
    foreign = max(0.0, (after["busy_s"] - before["busy_s"]) - (after["own_s"] - before["own_s"]))
    return {"load": min(1.0, foreign / (window * cpus)), "foreign_s": foreign, "window_s": window, "cpus": cpus}


def combine_loads(loads):
    """One :func:`load_between` dict for several windows (None entries skipped): CPU-seconds and windows
    summed, so each window weighs by its length; None when none is known."""
    known = [x for x in loads if x and x.get("window_s")]
    if not known:
        return None
    foreign = sum(float(x["foreign_s"]) for x in known)
    window = sum(float(x["window_s"]) for x in known)
    capacity = sum(float(x["window_s"]) * int(x["cpus"]) for x in known)
    return {"load": min(1.0, foreign / capacity), "foreign_s": foreign, "window_s": window,
            "cpus": max(int(x["cpus"]) for x in known)}


#: Windows a pipeline run's measured frames are split into for its spread (:func:`window_spread`): each window's
#: period is the mean over its frames, so one frame's hiccup does not count as the run's spread; ten windows
#: give the nearest-rank p90 of :func:`stats` a value of its own. A parapipe choice.
RUN_WINDOWS = 10


def window_spread(start_s, done_s, windows=RUN_WINDOWS):
    """Spread (:func:`stats`: p90 / median - 1) of a pipeline run's period over ``windows`` consecutive windows of
    its frames: ``done_s`` are the times (``time.perf_counter``) each measured frame came out, in order,
    ``start_s`` when the first went in. None with fewer than two frames per window for two windows."""
    n = len(done_s)
    windows = min(int(windows), n // 2)
    if windows < 2:
        return None
    periods = []
    previous = start_s
    for w in range(windows):
        last = (w + 1) * n // windows - 1
        first = w * n // windows
        periods.append((done_s[last] - previous) / (last - first + 1))
        previous = done_s[last]
    return stats(periods)["spread"]


def allowed_cpus():
    """CPU ids this process may run on (``os.sched_getaffinity(0)``, sorted; ``[0..cpu_count)`` elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _read_int(path):
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _parse_cpu_ranges(text):
    """Parse a kernel CPU list such as ``"0-3,6"`` into ``[0, 1, 2, 3, 6]``."""
    cpus = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.extend(range(int(low), int(high) + 1))
        else:
            cpus.append(int(part))
    return cpus


def cpu_clusters(sysfs=SYSFS_CPU):
    """Group the online CPUs into clusters of equal ``cpu_capacity`` and ``cpuinfo_max_freq``.

    Returns ``(clusters, source)``: clusters sorted fastest first, each ``{"cpus": [...], "capacity": int
    or None, "max_freq_hz": int or None}``; ``source`` names the sysfs files used, or ``"fallback"`` (one
    cluster of all CPUs) when neither file exists. ``cpuinfo_max_freq`` is in kHz (kernel cpufreq ABI).
    """
    try:
        with open(os.path.join(sysfs, "online")) as handle:
            cpus = _parse_cpu_ranges(handle.read())
    except (OSError, ValueError):
        cpus = list(range(os.cpu_count() or 1))
    groups = {}
    used = set()
    for cpu in cpus:
        base = os.path.join(sysfs, "cpu%d" % cpu)
        capacity = _read_int(os.path.join(base, "cpu_capacity"))
        freq_khz = _read_int(os.path.join(base, "cpufreq", "cpuinfo_max_freq"))
        if capacity is not None:
            used.add("cpu_capacity")
        if freq_khz is not None:
            used.add("cpuinfo_max_freq")
        groups.setdefault((capacity, freq_khz), []).append(cpu)
    if not used:
        return [{"cpus": cpus, "capacity": None, "max_freq_hz": None}], "fallback"
    clusters = []
    for (capacity, freq_khz), members in sorted(groups.items(),
                                                key=lambda kv: (-(kv[0][0] or 0), -(kv[0][1] or 0))):
        clusters.append({"cpus": sorted(members), "capacity": capacity,
                         "max_freq_hz": None if freq_khz is None else freq_khz * 1000})
    return clusters, "+".join(sorted(used))


def memory_bytes():
    """``(total, available)`` memory in bytes from /proc/meminfo (kB there, proc(5)); total from sysconf
    elsewhere; None where unknown."""
    total = available = None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    value = int(rest.split()[0]) * 1024
                    if key == "MemTotal":
                        total = value
                    else:
                        available = value
    except (OSError, ValueError, IndexError):
        pass
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, OSError, ValueError):
            total = None
    return total, available


def machine_facts():
    """The facts of this machine, as the agent's ``hello`` reports them: ``python_version``,
    ``numpy_version``, ``onnxruntime_version``, ``providers``, ``runtimes`` (:func:`.runtimes.probe_all`),
    ``cpu_clusters``, ``cpu_topology_source`` (:func:`cpu_clusters`), ``cpu_count``, ``cpus_allowed``,
    ``memory_bytes``, ``memory_available_bytes``, ``machine``, ``platform``, ``hostname``."""
    import onnxruntime as ort
    from .runtimes import probe_all

    clusters, source = cpu_clusters()
    total, available = memory_bytes()
    return {
        "python_version": platform.python_version(),
        "numpy_version": np.__version__,
        "onnxruntime_version": ort.__version__,
        "providers": list(ort.get_available_providers()),
        "runtimes": _with_ncnn(probe_all()),
        "cpu_clusters": clusters,
        "cpu_topology_source": source,
        "cpu_count": os.cpu_count(),
        "cpus_allowed": allowed_cpus(),
        "memory_bytes": total,
        "memory_available_bytes": available,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "hostname": platform.node(),
    }


def ncnn_facts():
    """``{"available", "version", "reason", "gpu_count", "gpus"}`` of the ncnn Python package on this machine:
    ``gpu_count`` is ``ncnn.get_gpu_count()`` (Vulkan devices; 0 without a Vulkan driver, when ncnn runs a
    Vulkan net on the CPU), ``gpus`` their names. ncnn is imported only when installed
    (``importlib.util.find_spec``); never raises."""
    import importlib
    import importlib.util

    out = {"available": False, "version": None, "reason": None, "gpu_count": 0, "gpus": []}
    try:
        if importlib.util.find_spec("ncnn") is None:
            out["reason"] = "the ncnn package is not installed (pip install ncnn)"
            return out
        ncnn = importlib.import_module("ncnn")
        out.update(available=True, version=str(getattr(ncnn, "__version__", None) or "") or None)
        count = int(_quiet_stderr(ncnn.get_gpu_count))  # it prints 'dlopen failed libvulkan.so.1' without a loader
        names = []
        for i in range(count):
            try:
                names.append(str(ncnn.get_gpu_info(i).device_name()))
            except Exception:  # older wheels lack get_gpu_info or device_name
                names.append("vulkan%d" % i)
        out.update(gpu_count=count, gpus=names)
    except Exception as exc:  # a broken install, a Vulkan loader failing
        out.update(available=False, reason="ncnn failed to load: %s" % " ".join(str(exc).split()))
    return out


def _quiet_stderr(fn):
    """``fn()`` with file descriptor 2 sent to /dev/null (a C library's messages that Python cannot catch)."""
    try:
        saved = os.dup(2)
    except OSError:
        return fn()
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            return fn()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _with_ncnn(runtimes):
    """``runtimes`` (:func:`.runtimes.probe_all`) with an ``ncnn`` entry from :func:`ncnn_facts` where no adapter
    reported one, and ``gpu_count``/``gpus`` added to an adapter's entry that lacks them."""
    entry = runtimes.get("ncnn")
    if entry is None:
        runtimes["ncnn"] = ncnn_facts()
    elif entry.get("available") and "gpu_count" not in entry:
        facts = ncnn_facts()
        runtimes["ncnn"] = dict(entry, gpu_count=facts["gpu_count"], gpus=facts["gpus"])
    return runtimes


def run_pinned(cpus, fn, name="parapipe-timing"):
    """Run ``fn()`` in a new thread pinned to ``cpus`` (None: not pinned) and return its result, re-raising its
    exception here; a CPU this process may not use is a ``PinError``.

    A KeyboardInterrupt (Ctrl-C) while ``fn`` runs is passed on once the thread has finished: the thread holds
    ONNX Runtime sessions, and an interpreter that exits while one runs aborts the process ("terminate called
    without an active exception", exit status -6) instead of exiting 130. Further Ctrl-Cs meanwhile are ignored.
    """
    box = {}
    finished = threading.Event()  # not Thread.join: a join interrupted by Ctrl-C marks the thread stopped

    def body():
        try:
            pin(name, cpus)
            box["result"] = fn()
        except BaseException as exc:  # carried back to the caller
            box["error"] = exc
        finally:
            finished.set()

    worker = threading.Thread(target=body, name=name, daemon=True)
    worker.start()
    try:
        finished.wait()
    except BaseException:
        while not finished.is_set():
            try:
                finished.wait()
            except BaseException:
                pass
        raise
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _load(model, binding):
    """A runner of ``model`` on ``binding`` from its runtime adapter, on the calling (pinned) thread."""
    from .runtimes import get_adapter

    try:
        adapter = get_adapter(binding.runtime, pu="profile")
    except PlanError as exc:
        raise TimingError("BadRequest", str(exc))
    problem = adapter.check("profile", binding)
    if problem is not None:
        raise TimingError("ProviderUnavailable", problem)
    try:
        return adapter.load(model, binding, "profile")
    except Exception as exc:  # runtimes raise several unrelated exception types here
        what = binding.provider if binding.runtime == "onnxruntime" else "runtime %s" % binding.runtime
        raise TimingError("ModelError", "cannot create a session with %s: %s" % (what, " ".join(str(exc).split())))


def time_model(model, binding, warmup, repeats, feeds_for, min_s=0.0):
    """Time ``model`` on the PU ``binding`` describes, as a pipeline stage runs it.

    On a new thread pinned to ``binding.cpus`` (before loading, so the runtime's pool threads inherit the mask),
    the PU's runtime adapter loads the model (ONNX Runtime: :func:`.session.create_session` with
    ``binding.runtime_options``); ``feeds_for(runner.input_specs)`` gives the inputs; ``warmup`` untimed runs,
    then ``repeats`` timed ones (more until they add up to ``min_s`` seconds).

    Parameters
    ----------
    model : onnx.ModelProto, bytes or str
        The model, its serialised bytes or its file.
    binding : PUBinding
    warmup, repeats : int
        ``>= 0`` and ``>= 1``.
    feeds_for : callable (input_specs) -> dict of str to numpy.ndarray
        ``input_specs``: ``(name, shape with None where dynamic, dtype name or None)`` per input.
    min_s : float
        Least total of the timed runs, s.

    Returns
    -------
    dict
        ``times_s`` (the timed runs, s), ``runtime_info`` (the runner's ``describe()``), ``fed`` (what
        ``feeds_for`` returned: the feeds, or a tuple whose first item is the feeds), ``cpus`` (the measuring
        thread's CPUs, sorted), ``load`` (:func:`load_between` over the whole measurement, loading included;
        None where unknown).

    Raises
    ------
    TimingError
        ``PinError``, ``BadRequest`` (unknown runtime), ``ProviderUnavailable``, ``ModelError`` (it does not
        load) or ``RunError`` (a run failed); an exception ``feeds_for`` raises passes through.
    """
    def measure():
        runner = _load(model, binding)
        try:
            fed = feeds_for(runner.input_specs)
            feeds = fed[0] if isinstance(fed, tuple) else fed
            names = runner.output_names
            times = []
            try:
                for _ in range(warmup):
                    runner.run(names, feeds)
                while len(times) < repeats or sum(times) < min_s:
                    start = time.perf_counter()
                    runner.run(names, feeds)
                    times.append(time.perf_counter() - start)
            except Exception as exc:
                raise TimingError("RunError", "the model failed on %s: %s"
                                  % (binding.runtime, " ".join(str(exc).split())))
            return {"times_s": times, "runtime_info": runner.describe(), "fed": fed,
                    "cpus": allowed_cpus() if binding.cpus is None else sorted(os.sched_getaffinity(0))}
        finally:
            runner.close()

    before = cpu_sample()
    result = run_pinned(binding.cpus, measure, "parapipe-time-model")
    result["load"] = load_between(before, cpu_sample())
    return result


def handoff_costs(nbytes, src_cpus, dst_cpus, warmup=HANDOFF_WARMUP, repeats=20):
    """Costs of handing a tensor of ``nbytes`` from a thread pinned to ``src_cpus`` to one pinned to ``dst_cpus``,
    as a pipeline hands a stage's output to the next stage.

    The producer writes its buffer (``np.copyto``, so the bytes sit dirty in its cache, as a stage's last
    operator leaves them), stamps the time and puts it on a :class:`.queues.BoundedQueue` (the executor's stage
    queue); the consumer takes it and reads every byte (``np.copyto`` into its own buffer, as the next stage's
    first operator reads its input). One cost is the time from the put until that read is done, less the time
    the consumer takes to read the same bytes again from its own cache: block and stage times are measured with
    their inputs in cache, so only the difference is a hand-off cost (0 when noise makes it negative). The
    producer waits for each hand-off before the next.

    Parameters
    ----------
    nbytes : int
        ``>= 1``.
    src_cpus, dst_cpus : sequence of int
        CPUs this process may use (equal on a one-core machine: then only the queue wake-up is measured).
    warmup, repeats : int
        Untimed and timed hand-offs.

    Returns
    -------
    list of float
        ``repeats`` costs in seconds.

    Raises
    ------
    TimingError
        ``PinError`` for a CPU this process may not use; ``RunError`` when the consumer stops answering within
        :data:`HANDOFF_TIMEOUT_S`.
    """
    to_consumer = BoundedQueue(1)
    to_producer = BoundedQueue(1)
    costs = []
    total = warmup + repeats
    failed = {}

    def consume():
        try:
            pin("transfer-consumer", dst_cpus)
            dst = np.zeros(nbytes, np.uint8)
            for index in range(total):
                put_s, buf = to_consumer.get()
                np.copyto(dst, buf)
                done_s = time.perf_counter()
                start = time.perf_counter()
                np.copyto(dst, buf)
                cached_s = time.perf_counter() - start
                if dst[0] != index % 256 or dst[-1] != index % 256:
                    raise TimingError("RunError", "transfer check failed at hand-off %d" % index)
                if index >= warmup:
                    costs.append(max(done_s - put_s - cached_s, 0.0))
                to_producer.put(None)
        except BaseException as exc:
            failed["error"] = exc

    def produce():
        src = np.empty(nbytes, np.uint8)
        buf = np.empty_like(src)
        worker = threading.Thread(target=consume, name="transfer-consumer", daemon=True)
        worker.start()
        for index in range(total):
            src.fill(index % 256)
            np.copyto(buf, src)  # the producer's write
            to_consumer.put((time.perf_counter(), buf))
            deadline = time.monotonic() + HANDOFF_TIMEOUT_S
            while True:
                try:
                    to_producer.get(timeout=_POLL_S)
                    break
                except queue.Empty:
                    if "error" in failed or time.monotonic() > deadline:
                        worker.join(_POLL_S)
                        cause = failed.get("error")
                        if isinstance(cause, TimingError):
                            raise cause
                        raise TimingError("RunError", "hand-off %s -> %s: the consumer stopped (%s)"
                                          % (list(src_cpus), list(dst_cpus), cause or "no answer"))
        worker.join()
        return list(costs)

    return run_pinned(src_cpus, produce, "transfer-producer")

