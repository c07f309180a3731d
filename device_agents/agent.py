#!/usr/bin/env python3
"""parapipe on-device agent: profile ONNX models and tensor hand-offs on a host, driven over JSON lines.

A program for a board that has only Python >= 3.8, numpy and onnxruntime >= 1.19, run next to the executor
core ``ppexec/`` (a deploy bundle and the agent upload ship both; ``ppexec/timing.py`` is what every measuring op
runs, the same code parapipe runs in process for ``--soc host``). It never imports parapipe. It reads one JSON
request per line on stdin and writes one JSON reply per line on stdout (flushed after each); logs go to
stderr. The same program therefore serves a local subprocess and an SSH exec channel alike. Run
``python3 agent.py --help`` for its options.

Protocol (version :data:`PROTOCOL_VERSION`)
-------------------------------------------
Request: ``{"op": NAME, "id": ANY (optional, echoed back), ...fields of the op}``.
Reply:   ``{"id": ..., "ok": true, ...result}`` or
         ``{"id": ..., "ok": false, "error": {"type": TYPE, "message": TEXT}}``.

Ops (see each ``op_*`` function for its fields):

- ``hello``: Python / ONNX Runtime versions, execution providers, runtimes, CPU clusters, memory, platform.
- ``profile``: time a model on one processing unit (a CPU set, a provider, or another runtime's device)
  through the PU's runtime adapter (``ppexec/runtimes.py``).
- ``transfer``: cost of handing a tensor of ``nbytes`` from a thread on one CPU set to a thread on another
  (beyond the receiver's read of it from its own cache: :func:`ppexec.timing.handoff_costs`).
- ``run_pipeline``: run a deploy bundle's pipelined plan (the executor core, ``ppexec/`` next to this file),
  streaming progress events, and reply with the report.
- ``clean``: remove stale deploy bundles (left by a dropped connection) under a folder.
- ``bye``: reply, then exit with status 0.

Events: while a request runs, the agent may write lines ``{"id": ..., "event": NAME, ...}`` (no ``ok``)
before the reply; ``run_pipeline`` sends ``progress`` events. A client that does not expect them skips them.

Error types: ``BadRequest`` (malformed JSON or fields; also every op but ``bye`` when ``ppexec/`` is not next to
the agent), ``UnknownOp``, ``ProviderUnavailable``, ``PinError``
(CPUs that this process may not use), ``ModelError`` (the model does not load or the session cannot be built),
``RunError`` (the session failed while running), ``Internal`` (a bug in the agent; its traceback goes to
stderr).
A request never crashes the agent; it exits 0 when stdin closes or after ``bye``.

Operating points: a bundle's plan may set CPU and GPU frequencies for its run (``ppexec/dvfs.py``); they are
restored when the run ends, however it ends. A run killed outright leaves a restore journal: the agent writes
the saved settings back when it starts and when its stdin closes (:func:`restore_frequencies`).

Adding an op: write ``def op_name(request) -> dict`` and register it in :data:`OPS`.

One file on purpose (about 500 lines): it is the protocol's dispatcher, run on a board as a script
(``python3 agent.py``) next to ``ppexec/``, and its request-field checks, ops, error types and serve loop are
the protocol read in one place; what the ops measure and run is ppexec's (:mod:`ppexec.timing`,
:mod:`ppexec.bundle_run`).
"""
import argparse
import base64
import binascii
import json
import logging
import os
import platform
import sys
import time
import traceback

PROTOCOL_VERSION = 1
#: Default number of untimed runs before timing (first runs allocate arenas and warm caches).
DEFAULT_WARMUP = 3
#: Default number of timed runs; 10 gives a stable median and a usable p90 (nearest-rank) in a few seconds.
DEFAULT_REPEATS = 10
#: Default number of timed hand-offs for ``transfer``.
DEFAULT_TRANSFER_REPEATS = 20

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
    allowed = _core().timing.allowed_cpus()
    missing = sorted(set(cpus) - set(allowed))
    if missing:
        raise AgentError("PinError", "CPUs %s in %r are not available to the agent; available: %s"
                         % (missing, name, allowed))
    return sorted(set(cpus))


# ----------------------------------------------------------------------------------------------------------
# hello
# ------------------------------------------------------------------------------------------------------------

def op_hello(request):
    """Describe the host. Fields: none. Returns ``protocol_version``, ``ops``, ``pid`` and the machine's facts
    (:func:`ppexec.timing.machine_facts`: versions, providers, ``runtimes`` (``{name: {"available", "version",
    "reason", ...}}`` of every runtime adapter of ``ppexec/runtimes.py``), CPU clusters, memory, platform)."""
    facts = _core().timing.machine_facts()
    reply = {"protocol_version": PROTOCOL_VERSION}
    reply.update(facts)
    reply.update({"pid": os.getpid(), "ops": sorted(OPS)})
    return reply


# ----------------------------------------------------------------------------------------------------------
# profile
# ------------------------------------------------------------------------------------------------------------

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


def op_profile(request):
    """Time a model on one processing unit, with the runtime the PU is bound to.

    Fields: ``model_b64`` or ``model_path``; ``pu``: ``{"cpus": [int], "threads": int}`` or
    ``{"provider": str, "provider_options": {}, "cpus": [int] (optional)}``, either with ``"runtime"``
    (default ``"onnxruntime"``) and ``"runtime_options"``
    (the runtime adapter's, ``ppexec/runtimes.py``), and ``"precision"`` (default ``"fp32"``: what the adapter
    sets its runtime to compute in, ``ppexec/precision.py``); ``optimization``: ``"all"`` or ``"disabled"``
    (default ``"disabled"``, so per-op figures are not fused away; ONNX Runtime only); ``warmup``
    (default 3); ``repeats`` (default 10); ``inputs``: ``{name: {"shape": [...], "dtype": "float32"}}``
    (default: from the model, dynamic dims -> 1); ``seed`` (default 0); ``allow_spinning`` (default false,
    as pipeline stages run; ONNX Runtime only).

    Returns ``median_s``, ``p90_s``, ``min_s``, ``spread`` (p90/median - 1), ``repeats``, ``runtime``,
    ``runtime_info`` (the runner's ``describe()``: provider or device, version), ``provider`` (the one ORT
    actually used first; ``None`` for another runtime), ``providers``, ``cpus`` (the affinity the model ran
    under), ``threads``, ``optimization`` (``None`` for another runtime), ``inputs`` (shapes and dtypes
    used), ``onnxruntime_version``, ``load`` (the share of the CPUs' time other processes used while it was
    measured, with its window: :func:`ppexec.timing.load_between`; null where unknown).

    Optional ``frequency``: ``{"frequency_hz": Hz, "cpus": [...] | "devfreq": name, "pu": name}``: the PU's
    operating point, set for this measurement and restored after it (``ppexec/dvfs.py``); the reply's
    ``frequency`` then gives ``requested_hz``, ``readback_hz``, ``readback_end_hz``, ``status``, ``domain``. A
    frequency that cannot be set is a ``BadRequest`` (one line) and nothing is changed.
    """
    model = _load_model(request)
    pu = _field(request, "pu", dict, required=True)
    runtime = _field(pu, "runtime", str, "onnxruntime")
    precision = _field(pu, "precision", str, "fp32")
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
    core = _core()
    if precision not in core.precision.PRECISIONS:
        raise AgentError("BadRequest", "pu.precision %r is not one of %s" % (precision,
                                                                          ", ".join(core.precision.PRECISIONS)))
    binding = core.plan.PUBinding(cpus=None if cpus is None else tuple(cpus), threads=pu_spec["threads"],
                             provider=provider, provider_options=pu_spec["provider_options"], runtime=runtime,
                             runtime_options=pu_spec["runtime_options"], precision=precision)
    frequency = _field(request, "frequency", dict)

    def measure():
        return _timing_call(lambda: core.timing.time_model(
            model, binding, warmup, repeats, lambda specs: _random_feeds(specs, overrides, seed)))

    read_back = None
    if frequency:
        from ppexec import dvfs
        name = str(frequency.get("pu") or "pu")
        try:
            with dvfs.applied({name: frequency}) as state:
                timed = measure()
                state.read_back(end=True)
        except dvfs.DvfsRefused as exc:
            raise AgentError("BadRequest", str(exc))
        read_back = state.report()[name]
    else:
        timed = measure()
    info = timed["runtime_info"]
    result = core.timing.stats(timed["times_s"])
    result.update({"runtime": runtime, "runtime_info": info, "provider": info.get("provider"),
                   "providers": info.get("providers", []), "cpus": timed["cpus"],
                   "threads": pu_spec["threads"], "inputs": timed["fed"][1],
                   "optimization": optimization if runtime == "onnxruntime" else None,
                   "onnxruntime_version": _ort_version(), "load": timed.get("load")})
    if read_back is not None:
        result["frequency"] = read_back
    return result


def _ort_version():
    import onnxruntime as ort
    return ort.__version__


def _timing_call(fn):
    """Run a :mod:`ppexec.timing` measurement; its ``TimingError`` becomes the reply's error type."""
    core = _core()
    try:
        return fn()
    except core.timing.TimingError as exc:
        raise AgentError(exc.error_type, exc.message)


# ----------------------------------------------------------------------------------------------------------
# transfer
# ------------------------------------------------------------------------------------------------------------

def op_transfer(request):
    """Time handing a tensor of ``nbytes`` from a thread pinned to ``src_cpus`` to one pinned to ``dst_cpus``.

    :func:`ppexec.timing.handoff_costs`: the producer writes its buffer and puts it on the executor's stage
    queue; the consumer reads every byte; one cost is the time from the put until the read is done, less the
    consumer's read of the same bytes from its own cache. Fields: ``nbytes`` (>= 1), ``src_cpus``, ``dst_cpus``,
    ``warmup`` (default 3), ``repeats`` (default 20). Returns ``median_s``, ``p90_s``, ``min_s``, ``spread``,
    ``repeats``, ``nbytes``, ``src_cpus``, ``dst_cpus``, ``bandwidth_bytes_per_s`` (nbytes / median_s; None for a
    zero median).
    """
    nbytes = _field(request, "nbytes", int, required=True)
    if isinstance(nbytes, bool) or nbytes < 1:
        raise AgentError("BadRequest", "field 'nbytes' must be an integer >= 1, got %r" % nbytes)
    src = _cpu_list(request, "src_cpus", required=True)
    dst = _cpu_list(request, "dst_cpus", required=True)
    warmup = _int_field(request, "warmup", DEFAULT_WARMUP, 0)
    repeats = _int_field(request, "repeats", DEFAULT_TRANSFER_REPEATS, 1)
    core = _core()
    costs = _timing_call(lambda: core.timing.handoff_costs(nbytes, src, dst, warmup, repeats))
    result = core.timing.stats(costs)
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


def _core():
    """Import the executor core ``ppexec`` from this file's folder (a deploy bundle and the agent upload ship it
    there); a ``BadRequest`` without it, ``ProviderUnavailable`` when it does not import (numpy or onnxruntime
    missing)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.isfile(os.path.join(here, "ppexec", "__init__.py")):
        raise AgentError("BadRequest", "the executor core ppexec/ is not next to %s; run the agent from a "
                         "deploy bundle" % here)
    if here not in sys.path:
        sys.path.insert(0, here)
    sys.dont_write_bytecode = True  # leave no __pycache__ in the bundle: it holds the manifest's files only
    try:
        import ppexec.bundle_run  # the executor, its runtime adapters, numpy and onnxruntime
        import ppexec.errors
        import ppexec.plan
        import ppexec.precision
        import ppexec.runtimes
        import ppexec.timing
    except ImportError as exc:  # numpy or onnxruntime missing on this host
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
    runs. A workload bundle (a ``workload.json``: several models at once, ``ppexec.workload_run``) runs
    ``frames`` workload frames. Returns the report (``ppexec.report.RunReport`` as JSON; of a workload bundle
    ``ppexec.report.WorkloadReport``, ``"kind": "workload"``), also written to ``out/report.json`` with the
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
    if os.path.isfile(os.path.join(folder, "workload.json")):  # several models at once (ppexec.workload_run)
        from ppexec import workload_run
        return {"report": _core_call(core, lambda: workload_run.run_workload_bundle(folder, **kwargs).to_json())}
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


def restore_frequencies():
    """Write back the frequency settings a killed run left in its journal (``ppexec.dvfs.restore_leftover``:
    only once the process that wrote it is gone). Needs only the standard library; never raises (logged)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.isfile(os.path.join(here, "ppexec", "dvfs.py")):
        return None
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        from ppexec import dvfs
        return dvfs.restore_leftover()
    except Exception as exc:  # a broken journal must not stop the agent: say so and serve on
        log.warning("could not restore the frequency settings a stopped run left: %s: %s", type(exc).__name__, exc)
        return None


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
            restore_frequencies()
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
    sys.dont_write_bytecode = True  # as _core: leave no __pycache__ in a bundle
    restore_frequencies()
    try:
        return serve(sys.stdin.buffer, protocol_out)
    except (BrokenPipeError, ConnectionError):
        log.info("the client closed the connection; exiting")
        return 0
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
