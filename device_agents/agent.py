#!/usr/bin/env python3
"""parapipe on-device agent: profile ONNX models and tensor hand-offs on a host, driven over JSON lines.

ONE self-contained program for a board that has only Python >= 3.8, numpy and onnxruntime >= 1.19. It never
imports parapipe. It reads one JSON request per line on stdin and writes one JSON reply per line on stdout
(flushed after each); logs go to stderr. The same program therefore serves a local subprocess and an SSH exec
channel alike. Run ``python3 agent.py --help`` for its options.

Protocol (version :data:`PROTOCOL_VERSION`)
-------------------------------------------
Request: ``{"op": NAME, "id": ANY (optional, echoed back), ...fields of the op}``.
Reply:   ``{"id": ..., "ok": true, ...result}`` or
         ``{"id": ..., "ok": false, "error": {"type": TYPE, "message": TEXT}}``.

Ops (see each ``op_*`` function for its fields):

- ``hello``: Python / ONNX Runtime versions, execution providers, runtimes, CPU clusters, memory, platform.
- ``profile``: time a model on one processing unit (a CPU set, a provider, or another runtime's device)
  through the PU's runtime adapter (``ppexec/runtimes.py``).
- ``transfer``: time to hand a tensor of ``nbytes`` from a thread on one CPU set to a thread on another.
- ``run_pipeline``: run a deploy bundle's pipelined plan (the executor core, ``ppexec/`` next to this file),
  streaming progress events, and reply with the report.
- ``clean``: remove stale deploy bundles (left by a dropped connection) under a folder.
- ``bye``: reply, then exit with status 0.

Events: while a request runs, the agent may write lines ``{"id": ..., "event": NAME, ...}`` (no ``ok``)
before the reply; ``run_pipeline`` sends ``progress`` events. A client that does not expect them skips them.

Error types: ``BadRequest`` (malformed JSON or fields), ``UnknownOp``, ``ProviderUnavailable``, ``PinError``
(CPUs that this process may not use), ``ModelError`` (the model does not load or the session cannot be built),
``RunError`` (the session failed while running), ``Internal`` (a bug in the agent; its traceback goes to
stderr).
A request never crashes the agent; it exits 0 when stdin closes or after ``bye``.

Adding an op: write ``def op_name(request) -> dict`` and register it in :data:`OPS`.
"""
import argparse
import base64
import binascii
import json
import logging
import os
import platform
import queue
import sys
import threading
import time
import traceback

PROTOCOL_VERSION = 1
#: Default number of untimed runs before timing (first runs allocate arenas and warm caches).
DEFAULT_WARMUP = 3
#: Default number of timed runs; 10 gives a stable median and a usable p90 (nearest-rank) in a few seconds.
DEFAULT_REPEATS = 10
#: Default number of timed hand-offs for ``transfer``.
DEFAULT_TRANSFER_REPEATS = 20
#: Linux sysfs folder that describes CPUs (kernel Documentation/ABI/testing/sysfs-devices-system-cpu).
SYSFS_CPU = "/sys/devices/system/cpu"
#: Seconds a helper thread may take beyond its own work before the agent reports it as stuck.
THREAD_JOIN_TIMEOUT_S = 3600.0

log = logging.getLogger("parapipe-agent")


class AgentError(Exception):
    """An error that becomes an ``ok: false`` reply of the given type."""

    def __init__(self, error_type, message):
        Exception.__init__(self, message)
        self.error_type = error_type
        self.message = message


# ----------------------------------------------------------------------------------------------------------
# Request field helpers
# ------------------------------------------------------------------------------------------------------------

def _field(request, name, kind, default=None, required=False):
    """Return ``request[name]`` checked against ``kind`` (a type or tuple), else raise ``BadRequest``."""
    if name not in request or request[name] is None:
        if required:
            raise AgentError("BadRequest", "field %r is required" % name)
        return default
    value = request[name]
    if kind is int and isinstance(value, bool):
        raise AgentError("BadRequest", "field %r must be an integer, got %r" % (name, value))
    if not isinstance(value, kind):
        raise AgentError("BadRequest", "field %r has the wrong type: %r" % (name, value))
    return value


def _int_field(request, name, default, minimum):
    value = _field(request, name, int, default)
    if value < minimum:
        raise AgentError("BadRequest", "field %r must be >= %d, got %d" % (name, minimum, value))
    return value


def _cpu_list(request, name, required):
    cpus = _field(request, name, list, None, required)
    if cpus is None:
        return None
    if not cpus or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus):
        raise AgentError("BadRequest",
                         "field %r must be a non-empty list of CPU numbers, got %r" % (name, cpus))
    allowed = _allowed_cpus()
    missing = sorted(set(cpus) - set(allowed))
    if missing:
        raise AgentError("PinError", "CPUs %s in %r are not available to the agent; available: %s"
                         % (missing, name, allowed))
    return sorted(set(cpus))


def _allowed_cpus():
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _pin_current_thread(cpus):
    """Pin the calling thread (Linux: pid 0 is the calling thread) to ``cpus``; threads it starts inherit."""
    if cpus is None:
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise AgentError("PinError", "this platform (%s) cannot pin threads to CPUs" % platform.system())
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:
        raise AgentError("PinError", "cannot pin to CPUs %s: %s" % (cpus, exc))
    return sorted(os.sched_getaffinity(0))


def _stats(times_s):
    """Median, p90 (nearest rank), min and spread of a list of durations in seconds."""
    ordered = sorted(times_s)
    n = len(ordered)
    mid = n // 2
    median = ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
    # Nearest-rank percentile: the smallest value with at least 90 % of the samples at or below it.
    p90 = ordered[max(0, -(-9 * n // 10) - 1)]
    p90 = max(p90, median)
    spread = (p90 / median - 1.0) if median > 0 else 0.0
    return {"median_s": median, "p90_s": p90, "min_s": ordered[0], "spread": spread, "repeats": n}


def _run_in_thread(name, target):
    """Run ``target()`` in a new thread and return its result, re-raising its exception here."""
    box = {}

    def body():
        try:
            box["result"] = target()
        except BaseException as exc:  # carried back to the caller, which turns it into a reply
            box["error"] = exc
            box["traceback"] = traceback.format_exc()

    worker = threading.Thread(target=body, name=name, daemon=True)
    worker.start()
    worker.join(THREAD_JOIN_TIMEOUT_S)
    if worker.is_alive():
        raise AgentError("Internal", "thread %s did not finish within %.0f s" % (name, THREAD_JOIN_TIMEOUT_S))
    if "error" in box:
        if not isinstance(box["error"], AgentError):
            log.error("%s failed:\n%s", name, box["traceback"])
        raise box["error"]
    return box["result"]


# ----------------------------------------------------------------------------------------------------------
# hello
# ------------------------------------------------------------------------------------------------------------

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


def _memory_bytes():
    total = available = None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    value = int(rest.split()[0]) * 1024  # /proc/meminfo reports kB (proc(5))
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


def op_hello(request):
    """Describe the host. Fields: none. Returns versions, providers, ``runtimes`` (``{name: {"available",
    "version", "reason", ...}}`` of every runtime adapter of ``ppexec/runtimes.py``; ``onnxruntime`` only when
    ``ppexec/`` is not next to the agent), CPU clusters, memory, platform."""
    import numpy
    try:
        import onnxruntime as ort
        ort_version = ort.__version__
        providers = list(ort.get_available_providers())
    except ImportError as exc:
        ort_version, providers = None, []
        log.warning("onnxruntime does not import: %s", exc)
    core = _core(required=False)
    if core is not None:
        runtimes = core.runtimes.probe_all()
    else:  # the agent alone (profiling uploads agent.py only): ONNX Runtime is all it can run
        runtimes = {"onnxruntime": {"available": ort_version is not None, "version": ort_version,
                                    "reason": None if ort_version else "onnxruntime does not import",
                                    "providers": providers}}
    clusters, source = cpu_clusters()
    total, available = _memory_bytes()
    return {
        "protocol_version": PROTOCOL_VERSION,
        "python_version": platform.python_version(),
        "numpy_version": numpy.__version__,
        "onnxruntime_version": ort_version,
        "providers": providers,
        "runtimes": runtimes,
        "cpu_clusters": clusters,
        "cpu_topology_source": source,
        "cpu_count": os.cpu_count(),
        "cpus_allowed": _allowed_cpus(),
        "memory_bytes": total,
        "memory_available_bytes": available,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "pid": os.getpid(),
        "ops": sorted(OPS),
    }


# ----------------------------------------------------------------------------------------------------------
# profile
# ------------------------------------------------------------------------------------------------------------

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16", "tensor(uint16)": "uint16",
    "tensor(int32)": "int32", "tensor(uint32)": "uint32",
    "tensor(int64)": "int64", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def _load_model(request):
    b64 = _field(request, "model_b64", str)
    path = _field(request, "model_path", str)
    if (b64 is None) == (path is None):
        raise AgentError("BadRequest", "give exactly one of 'model_b64' (base64 ONNX bytes) or 'model_path'")
    if b64 is not None:
        try:
            return base64.b64decode(b64.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
            raise AgentError("BadRequest", "'model_b64' is not valid base64: %s" % exc)
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise AgentError("ModelError", "model file %s does not exist on this host" % path)
    return path


def _random_feeds(specs, overrides, seed):
    """Seeded random feeds for a loaded model's ``input_specs`` (``(name, shape with None where dynamic, dtype
    name or None)``); ``overrides`` gives ``{name: {"shape", "dtype"}}``. Returns ``(feeds, shapes)``. The values
    follow ppexec's one rule (``ppexec.frames.draw_frames``: floats standard normal, booleans 0/1, integers 0,
    as no range bounds them here)."""
    import numpy as np
    _core()  # ppexec/ next to this file (BadRequest without it)
    from ppexec.frames import FrameInput, draw_frames
    names = [name for name, _, _ in specs]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise AgentError("BadRequest", "'inputs' names %s that the model does not have; its inputs: %s"
                         % (unknown, names))
    inputs = []
    for name, model_shape, model_dtype in specs:
        spec = overrides.get(name) or {}
        if not isinstance(spec, dict):
            raise AgentError("BadRequest",
                             "'inputs'[%r] must be an object with 'shape' and/or 'dtype'" % name)
        shape = spec.get("shape")
        if shape is None:
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in model_shape]  # dynamic dims -> 1
        elif not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise AgentError("BadRequest", "'inputs'[%r]['shape'] must be a list of sizes, got %r"
                             % (name, shape))
        dtype = spec.get("dtype") or model_dtype
        if dtype is None:
            raise AgentError("BadRequest", "input %r has no plain tensor type; give 'inputs'[%r]['dtype']"
                             % (name, name))
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise AgentError("BadRequest",
                             "'inputs'[%r]['dtype'] %r is not a numpy dtype" % (name, dtype))
        if dtype.kind not in "fbiu":
            raise AgentError("BadRequest", "input %r: dtype %s is not supported" % (name, dtype))
        inputs.append(FrameInput(name, tuple(shape), dtype.name))
    feeds = draw_frames(inputs, 1, seed)[0]
    shapes = {name: {"shape": list(feeds[name].shape), "dtype": str(feeds[name].dtype)} for name in names}
    return feeds, shapes


def _session_options(ort, optimization, threads, provider, allow_spinning):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimization == "all"
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    options.log_severity_level = 3  # errors only; ORT warnings would flood stderr
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    if provider != "CPUExecutionProvider":
        # Never book CPU time as accelerator time: fail instead of falling back (ORT session option).
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return options


class _SessionRunner(object):
    """An ORT session behind ppexec's Runner protocol, for an agent running without ``ppexec/`` next to it
    (profiling uploads ``agent.py`` alone): the ``onnxruntime`` runtime only."""

    def __init__(self, session, ort):
        self.session, self.version = session, ort.__version__
        self.input_specs = [(i.name, [d if isinstance(d, int) else None for d in (i.shape or [])],
                             _ORT_TYPES.get(i.type)) for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]

    def run(self, output_names, feeds):
        return self.session.run(output_names, feeds)

    def describe(self):
        used = self.session.get_providers()
        return {"runtime": "onnxruntime", "version": self.version, "provider": used[0], "providers": used}

    def close(self):
        self.session = None


def _profile_runner(runtime, pu_spec, model, optimization, allow_spinning):
    """Load ``model`` for the PU described by ``pu_spec`` on the calling (pinned) thread.

    With ``ppexec/`` next to the agent the PU's runtime adapter loads it (``ppexec.runtimes``: what the
    deployed pipeline runs); without, only the ``onnxruntime`` runtime, through :class:`_SessionRunner`.
    """
    what = pu_spec["provider"] if runtime == "onnxruntime" else "runtime %s" % runtime
    core = _core(required=runtime != "onnxruntime")
    if core is None:
        import onnxruntime as ort
        provider, provider_options = pu_spec["provider"], pu_spec["provider_options"]
        available = list(ort.get_available_providers())
        if provider not in available:
            raise AgentError("ProviderUnavailable",
                             "execution provider %s is not available in onnxruntime %s on this host; "
                             "available: %s" % (provider, ort.__version__, ", ".join(available)))
        options = _session_options(ort, optimization, pu_spec["threads"], provider, allow_spinning)
        providers = [(provider, provider_options)] if provider_options else [provider]
        load = lambda: _SessionRunner(ort.InferenceSession(model, sess_options=options, providers=providers),
                                      ort)
    else:
        try:
            adapter = core.runtimes.get_adapter(runtime, pu="profile")
        except core.errors.PlanError as exc:
            raise AgentError("BadRequest", str(exc))
        binding = core.plan.PUBinding(cpus=pu_spec["cpus"], threads=pu_spec["threads"],
                                 provider=pu_spec["provider"], provider_options=pu_spec["provider_options"],
                                 runtime=runtime, runtime_options=pu_spec["runtime_options"])
        problem = adapter.check("profile", binding)
        if problem is not None:
            raise AgentError("ProviderUnavailable", problem)
        load = lambda: adapter.load(model, binding, "profile")
    try:
        return load()
    except AgentError:
        raise
    except Exception as exc:  # runtimes raise several unrelated exception types here
        raise AgentError("ModelError",
                         "cannot create a session with %s: %s" % (what, " ".join(str(exc).split())))


def op_profile(request):
    """Time a model on one processing unit, with the runtime the PU is bound to.

    Fields: ``model_b64`` or ``model_path``; ``pu``: ``{"cpus": [int], "threads": int}`` or
    ``{"provider": str, "provider_options": {}, "cpus": [int] (optional)}``, either with ``"runtime"``
    (default ``"onnxruntime"``; another one needs ``ppexec/`` next to the agent) and ``"runtime_options"``
    (the runtime adapter's, ``ppexec/runtimes.py``); ``optimization``: ``"all"`` or ``"disabled"``
    (default ``"disabled"``, so per-op figures are not fused away; ONNX Runtime only); ``warmup``
    (default 3); ``repeats`` (default 10); ``inputs``: ``{name: {"shape": [...], "dtype": "float32"}}``
    (default: from the model, dynamic dims -> 1); ``seed`` (default 0); ``allow_spinning`` (default false,
    as pipeline stages run; ONNX Runtime only).

    Returns ``median_s``, ``p90_s``, ``min_s``, ``spread`` (p90/median - 1), ``repeats``, ``runtime``,
    ``runtime_info`` (the runner's ``describe()``: provider or device, version), ``provider`` (the one ORT
    actually used first; ``None`` for another runtime), ``providers``, ``cpus`` (the affinity the model ran
    under), ``threads``, ``optimization`` (``None`` for another runtime), ``inputs`` (shapes and dtypes
    used), ``onnxruntime_version``.
    """
    model = _load_model(request)
    pu = _field(request, "pu", dict, required=True)
    runtime = _field(pu, "runtime", str, "onnxruntime")
    provider = _field(pu, "provider", str, "CPUExecutionProvider")
    cpus = _cpu_list(pu, "cpus", required=runtime == "onnxruntime" and provider == "CPUExecutionProvider")
    pu_spec = {"cpus": cpus, "provider": provider,
               "provider_options": _field(pu, "provider_options", dict, {}),
               "threads": _int_field(pu, "threads", len(cpus) if cpus else 1, 1),
               "runtime_options": dict(_field(pu, "runtime_options", dict, {}))}
    optimization = _field(request, "optimization", str, "disabled")
    if optimization not in ("all", "disabled"):
        raise AgentError("BadRequest", "'optimization' must be 'all' or 'disabled', got %r" % optimization)
    warmup = _int_field(request, "warmup", DEFAULT_WARMUP, 0)
    repeats = _int_field(request, "repeats", DEFAULT_REPEATS, 1)
    overrides = _field(request, "inputs", dict, {})
    seed = _int_field(request, "seed", 0, 0)
    allow_spinning = bool(_field(request, "allow_spinning", bool, False))
    if runtime == "onnxruntime":
        pu_spec["runtime_options"].update(optimization=optimization, allow_spinning=allow_spinning)
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise AgentError("ProviderUnavailable", "onnxruntime does not import: %s" % exc)

    def measure():
        pinned = _pin_current_thread(cpus)  # before loading: the runtime's pool threads inherit the mask
        runner = _profile_runner(runtime, pu_spec, model, optimization, allow_spinning)
        try:
            feeds, shapes = _random_feeds(runner.input_specs, overrides, seed)
            times = []
            try:
                for index in range(warmup + repeats):
                    start = time.perf_counter()
                    runner.run(runner.output_names, feeds)
                    elapsed = time.perf_counter() - start
                    if index >= warmup:
                        times.append(elapsed)
            except Exception as exc:
                raise AgentError("RunError",
                                 "the model failed on %s: %s" % (runtime, " ".join(str(exc).split())))
            info = runner.describe()
        finally:
            runner.close()
        result = _stats(times)
        result.update({"runtime": runtime, "runtime_info": info, "provider": info.get("provider"),
                       "providers": info.get("providers", []), "cpus": pinned if pinned else _allowed_cpus(),
                       "threads": pu_spec["threads"], "inputs": shapes,
                       "optimization": optimization if runtime == "onnxruntime" else None,
                       "onnxruntime_version": ort.__version__})
        return result

    return _run_in_thread("profile", measure)


# ----------------------------------------------------------------------------------------------------------
# transfer
# ------------------------------------------------------------------------------------------------------------

def op_transfer(request):
    """Time handing a tensor of ``nbytes`` from a thread pinned to ``src_cpus`` to one pinned to ``dst_cpus``.

    The producer writes its numpy buffer (so it is hot in the source caches), stamps the time and puts it on a
    queue; the consumer copies it into its own buffer and stamps the time; one hand-off is the difference. The
    producer waits for each hand-off to finish before the next. Fields: ``nbytes`` (>= 1), ``src_cpus``,
    ``dst_cpus``, ``warmup`` (default 3), ``repeats`` (default 20). Returns ``median_s``, ``p90_s``,
    ``min_s``, ``spread``, ``repeats``, ``nbytes``, ``bandwidth_bytes_per_s`` (nbytes / median_s).
    """
    import numpy as np
    nbytes = _field(request, "nbytes", int, required=True)
    if isinstance(nbytes, bool) or nbytes < 1:
        raise AgentError("BadRequest", "field 'nbytes' must be an integer >= 1, got %r" % nbytes)
    src = _cpu_list(request, "src_cpus", required=True)
    dst = _cpu_list(request, "dst_cpus", required=True)
    warmup = _int_field(request, "warmup", DEFAULT_WARMUP, 0)
    repeats = _int_field(request, "repeats", DEFAULT_TRANSFER_REPEATS, 1)
    total = warmup + repeats
    handoff = queue.Queue(maxsize=1)
    done = queue.Queue(maxsize=1)
    errors = []

    def consumer():
        try:
            _pin_current_thread(dst)
            out = np.empty(nbytes, dtype=np.uint8)
            while True:
                item = handoff.get()
                if item is None:
                    return
                index, buffer = item
                np.copyto(out, buffer)
                stamp = time.perf_counter()
                if out[0] != index % 256 or out[-1] != index % 256:
                    raise AgentError("Internal", "transfer check failed at hand-off %d" % index)
                done.put(stamp)
        except BaseException as exc:
            errors.append(exc)
            done.put(None)

    def producer():
        _pin_current_thread(src)
        buffer = np.empty(nbytes, dtype=np.uint8)
        times = []
        worker = threading.Thread(target=consumer, name="transfer-consumer", daemon=True)
        worker.start()
        try:
            for index in range(total):
                buffer.fill(index % 256)
                start = time.perf_counter()
                handoff.put((index, buffer))
                stamp = done.get(timeout=THREAD_JOIN_TIMEOUT_S)
                if stamp is None:
                    break
                if index >= warmup:
                    times.append(stamp - start)
        finally:
            if not errors:
                handoff.put(None)
            worker.join(THREAD_JOIN_TIMEOUT_S)
        if errors:
            raise errors[0]
        return times

    times = _run_in_thread("transfer-producer", producer)
    result = _stats(times)
    result.update({"nbytes": nbytes, "src_cpus": src, "dst_cpus": dst,
                   "bandwidth_bytes_per_s": nbytes / result["median_s"] if result["median_s"] > 0 else None})
    return result


# ----------------------------------------------------------------------------------------------------------
# run_pipeline, clean (deploy bundles; the executor core is the package ppexec/ next to this file)
# ------------------------------------------------------------------------------------------------------------

#: Writes one event line for a request; set by :func:`serve` (None: events are dropped).
_event_writer = None


def _emit(request, event):
    """Send ``event`` (a dict with ``"event"``) for ``request`` now; raises if the client has gone away."""
    if _event_writer is not None:
        line = {"id": request.get("id")}
        line.update(event)
        _event_writer(line)


def _core(required=True):
    """Import the executor core ``ppexec`` from this file's folder (a deploy bundle ships it there).

    Without it (or when it does not import): ``None`` if not ``required``, else a ``BadRequest``.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.isfile(os.path.join(here, "ppexec", "__init__.py")):
        if not required:
            return None
        raise AgentError("BadRequest", "the executor core ppexec/ is not next to %s; run the agent from a "
                         "deploy bundle" % here)
    if here not in sys.path:
        sys.path.insert(0, here)
    sys.dont_write_bytecode = True  # leave no __pycache__ in the bundle: it holds the manifest's files only
    try:
        import ppexec.bundle_run  # the executor, its runtime adapters, numpy and onnxruntime
        import ppexec.errors
        import ppexec.plan
        import ppexec.runtimes
    except ImportError as exc:  # numpy or onnxruntime missing on this host
        if not required:
            log.warning("the executor core ppexec/ does not import: %s", exc)
            return None
        raise AgentError("ProviderUnavailable", "the executor core ppexec/ does not import: %s" % exc)
    return ppexec


def _core_call(core, fn):
    try:
        return fn()
    except (BrokenPipeError, ConnectionError):  # the client went away while events were sent: stop serving
        raise
    except core.errors.PlanError as exc:
        raise AgentError("BadRequest", str(exc))
    except core.errors.PipelineError as exc:
        raise AgentError("RunError", str(exc))
    except OSError as exc:
        raise AgentError("BadRequest", "%s: %s" % (type(exc).__name__, exc))


def op_run_pipeline(request):
    """Run a deploy bundle: verify its files, run its plan, compare with the unsplit model, write the report.

    Fields: ``bundle`` (folder, required); ``frames`` (200); ``warmup`` (5); ``seed`` (0); ``distinct_frames``
    (8); ``atol``, ``rtol`` (1e-5 each: a tensor matches when ``max|out - ref| <= atol + rtol * max|ref|``,
    widened per dtype); ``idle_frames`` (10); ``progress_interval_s`` (0.5); ``verify`` (true); ``lock_wait_s``
    (30); ``dispatch`` (``"pull"``: each replica of a replicated stage takes the next frame when it is free;
    ``"shares"``: frames dealt by the plan's shares). Sends
    ``progress`` events (``phase``, ``frames_done``, ``frames``, ``elapsed_s``, ``throughput_per_s``) while it
    runs. Returns the report (``ppexec.report.RunReport`` as JSON), also written to ``out/report.json`` with the
    Chrome trace in ``out/trace.json``. A failing stage is a ``RunError`` naming stage, PU and task; a bad or
    incomplete bundle a ``BadRequest``.
    """
    core = _core()
    from ppexec import bundle_run
    folder = os.path.expanduser(_field(request, "bundle", str, required=True))
    atol = _field(request, "atol", (int, float), 1e-5)
    rtol = _field(request, "rtol", (int, float), 1e-5)
    interval = _field(request, "progress_interval_s", (int, float), 0.5)
    lock_wait = _field(request, "lock_wait_s", (int, float), 30.0)
    kwargs = dict(frames=_int_field(request, "frames", 200, 1), warmup=_int_field(request, "warmup", 5, 0),
                  seed=_int_field(request, "seed", 0, 0),
                  distinct_frames=_int_field(request, "distinct_frames", 8, 1), atol=float(atol),
                  idle_frames=_int_field(request, "idle_frames", 10, 0),
                  rtol=float(rtol),
                  progress_interval_s=float(interval), verify=bool(_field(request, "verify", bool, True)),
                  lock_wait_s=float(lock_wait), emit=lambda event: _emit(request, event),
                  dispatch=_field(request, "dispatch", str, "pull"))
    if not os.path.isdir(folder):
        raise AgentError("BadRequest", "bundle folder %s does not exist on this host" % folder)
    return {"report": _core_call(core, lambda: bundle_run.run_bundle(folder, **kwargs).to_json())}


def op_clean(request):
    """Remove stale deploy bundles: folders ``bundle-*`` under ``root`` whose run has ended.

    Fields: ``root`` (required); ``keep`` (list of folder names to leave, default none); ``wait_s`` (seconds
    to wait for a locked folder's run to end, default 10). Folders marked ``.keep`` are left. Returns
    ``removed``, ``busy`` (still locked by a live run) and ``kept`` folder names.
    """
    core = _core()
    from ppexec import bundle_run
    root = os.path.expanduser(_field(request, "root", str, required=True))
    keep = _field(request, "keep", list, [])
    if not all(isinstance(k, str) for k in keep):
        raise AgentError("BadRequest", "field 'keep' must be a list of folder names, got %r" % keep)
    wait_s = float(_field(request, "wait_s", (int, float), 10.0))
    return _core_call(core, lambda: bundle_run.clean_stale(root, keep, wait_s))


def op_bye(request):
    """Say goodbye; the agent exits with status 0 after this reply."""
    return {"bye": True}


#: Dispatch table: op name -> handler(request dict) -> result dict. Add new ops here.
OPS = {
    "hello": op_hello,
    "profile": op_profile,
    "transfer": op_transfer,
    "run_pipeline": op_run_pipeline,
    "clean": op_clean,
    "bye": op_bye,
}


# ----------------------------------------------------------------------------------------------------------
# Serving loop
# ------------------------------------------------------------------------------------------------------------

def _error(request_id, error_type, message):
    return {"id": request_id, "ok": False, "error": {"type": error_type, "message": message}}


def handle_line(line):
    """Turn one request line (bytes) into ``(reply dict, stop)``; never raises for a bad request."""
    try:
        request = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return _error(None, "BadRequest", "the line is not JSON: %s" % exc), False
    if not isinstance(request, dict):
        problem = "a request must be a JSON object, got %s" % type(request).__name__
        return _error(None, "BadRequest", problem), False
    request_id = request.get("id")
    op = request.get("op")
    handler = OPS.get(op) if isinstance(op, str) else None
    if handler is None:
        problem = "unknown op %r; known ops: %s" % (op, ", ".join(sorted(OPS)))
        return _error(request_id, "UnknownOp", problem), False
    started = time.perf_counter()
    try:
        result = handler(request)
    except AgentError as exc:
        log.info("%s failed: %s: %s", op, exc.error_type, exc.message)
        return _error(request_id, exc.error_type, exc.message), False
    except (BrokenPipeError, ConnectionError):  # an event found the client gone: serve() ends the agent
        raise
    except Exception as exc:  # a bug in the agent: report it, keep serving
        log.error("%s raised:\n%s", op, traceback.format_exc())
        return _error(request_id, "Internal", "%s: %s" % (type(exc).__name__, exc)), False
    log.debug("%s done in %.3f s", op, time.perf_counter() - started)
    reply = {"id": request_id, "ok": True}
    reply.update(result)
    return reply, op == "bye"


def serve(in_stream, out_stream):
    """Serve requests from ``in_stream`` (binary lines) to ``out_stream`` (binary) until EOF or ``bye``."""
    global _event_writer

    def write_event(line):
        out_stream.write((json.dumps(line) + "\n").encode("utf-8"))
        out_stream.flush()

    _event_writer = write_event
    while True:
        line = in_stream.readline()
        if not line:
            log.info("stdin closed; exiting")
            return 0
        if not line.strip():
            continue
        reply, stop = handle_line(line.strip())
        out_stream.write((json.dumps(reply) + "\n").encode("utf-8"))
        out_stream.flush()
        if stop:
            log.info("bye; exiting")
            return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description="parapipe on-device agent (JSON lines on stdin/stdout)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--protocol-version", action="store_true", help="print the protocol version and exit")
    args = parser.parse_args(argv)
    if args.protocol_version:
        print(PROTOCOL_VERSION)
        return 0
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level),
                        format="agent[%(process)d] %(levelname)s %(message)s")
    # Keep the protocol on a private copy of stdout and send fd 1 to stderr, so that anything a native
    # library prints cannot corrupt the JSON stream.
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    log.info("agent protocol %d ready (python %s)", PROTOCOL_VERSION, platform.python_version())
    try:
        return serve(sys.stdin.buffer, protocol_out)
    except (BrokenPipeError, ConnectionError):
        log.info("the client closed the connection; exiting")
        return 0
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
