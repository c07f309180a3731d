"""Runtime adapters: how a PU loads and runs its stage sub-models (ONNX Runtime, OpenVINO, a vendor SDK).

A PU binding names its runtime (``PUBinding.runtime``, default ``"onnxruntime"``) and that runtime's options
(``PUBinding.runtime_options``). Many PUs have no ONNX Runtime execution provider (Mali GPUs on Linux, Black
Sesame DLA/DSP, vendor NPU SDKs): an adapter over the vendor's runtime makes them usable by the executor
without touching it. The protocol (:class:`RuntimeAdapter`, :class:`LoadedModel`):

- ``name``: the key in :data:`ADAPTERS` and the value of ``PUBinding.runtime``.
- ``probe() -> dict``: ``{"available": bool, "version": str or None, "reason": str or None, ...}``
  (``"providers"`` for ONNX Runtime, ``"devices"`` for OpenVINO); cheap, never raises. The agent's ``hello``
  reports it for every adapter.
- ``check(pu, binding) -> str or None``: one line naming the PU, what the binding needs that this host lacks
  (a provider, a device, an option) and the fix; ``None`` if the binding can run here. Called before any
  worker starts.
- ``load(model, binding, pu) -> LoadedModel``: called on the PU's worker thread AFTER it pinned itself
  (``os.sched_setaffinity``); ``model`` is an ``onnx.ModelProto``, its bytes or an ``.onnx`` path.
- LoadedModel: ``input_names`` and ``output_names`` (lists of str, the model's), ``input_specs`` (list of
  ``(name, shape, dtype)``: dims ``None`` where dynamic, ``dtype`` a numpy dtype name or ``None``),
  ``run(output_names, feeds) -> list of numpy.ndarray`` (``feeds``: name -> array; the arrays returned are
  the caller's to keep; the GIL released while it computes, so stages run in parallel), ``describe() ->
  dict`` (what actually runs: provider or device, version, and ``"precision"``: what the runtime computes
  in, read back from it after loading) and ``close()``.
- Precision: ``load`` sets the runtime to compute in ``binding.precision`` (the PU's profile precision) where
  the runtime has a setting for it, and ``describe()["precision"]`` reports what the runtime says it will
  use, one of ``"fp32"``, ``"fp16"``, ``"bf16"`` (:mod:`.precision`: the convention, and the output
  tolerance the verified run then applies).
- Optional host-side step ``compile(model_bytes: bytes, binding) -> bytes``: parapipe runs it on each
  sub-model before bundling, for runtimes that need an offline conversion (a vendor compiler producing a
  blob that ``load`` then receives as bytes). The ONNX Runtime and OpenVINO adapters read ONNX directly; ncnn's
  conversion (pnnx) is parapipe's ``parapipe.execution.ncnn_convert``, which gives ``load`` a manifest path or
  the bytes of a pack (:mod:`.ncnn_runtime`).

Shipped: :class:`OnnxRuntimeAdapter` (``"onnxruntime"``) and :class:`OpenVINOAdapter` (``"openvino"``,
``pip install openvino``; imported lazily, so ppexec itself needs only numpy and onnxruntime) and
:class:`.ncnn_runtime.NcnnAdapter` (``"ncnn"``, ``pip install ncnn``, also lazy). Adding one:
device_agents/README.md, "Runtime adapters".
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnxruntime as ort

from .errors import plan_error
from .ncnn_runtime import NcnnAdapter
from .plan import PUBinding
from .precision import normalise_precision
from .session import ORT_RUNTIME_OPTIONS, create_session, model_source, provider_problem

try:  # typing.Protocol is Python >= 3.8; documentation only
    from typing import Protocol
except ImportError:  # pragma: no cover
    Protocol = object  # type: ignore

__all__ = ["LoadedModel", "RuntimeAdapter", "OnnxRuntimeModel", "OnnxRuntimeAdapter", "ORT_PRECISION_OPTIONS",
           "OPENVINO_CPU_DEFAULTS", "OPENVINO_OPTIONS", "OPENVINO_PRECISION_HINTS", "OpenVINOModel", "OpenVINOAdapter", "ADAPTERS",
           "get_adapter", "probe_all"]

logger = logging.getLogger(__name__)

#: ``(name, shape, dtype)`` of one model input: dims ``None`` where dynamic, dtype a numpy name or ``None``.
InputSpec = Tuple[str, List[Optional[int]], Optional[str]]


class LoadedModel(Protocol):
    """One loaded sub-model (protocol; see the module docstring)."""

    input_names: List[str]
    output_names: List[str]
    input_specs: List[InputSpec]

    def run(self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        """Run once; return the arrays of ``output_names`` in that order (owned by the caller)."""

    def describe(self) -> Dict[str, Any]:
        """What runs the model: ``{"runtime", "version", "precision", ...}`` (provider, device, threads;
        ``precision`` read back from the runtime: :mod:`.precision`)."""

    def close(self) -> None:
        """Release the model (idempotent)."""


class RuntimeAdapter(Protocol):
    """A runtime the executor can load sub-models with (protocol; see the module docstring)."""

    name: str

    def probe(self) -> Dict[str, Any]:
        """``{"available", "version", "reason", ...}`` for this host; never raises."""

    def check(self, pu: str, binding: PUBinding) -> Optional[str]:
        """One-line problem with ``binding`` on this host, with the fix; ``None`` if it can run."""

    def load(self, model: Any, binding: PUBinding, pu: str) -> LoadedModel:
        """Load ``model`` for ``pu`` on the calling (already pinned) thread."""


_warned: set = set()
_warned_lock = threading.Lock()


def _warn_once(key: Tuple[Any, ...], message: str, *args: Any) -> None:
    """Log ``message`` as a warning once per ``key`` in this process (one line per PU, not one per task)."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message, *args)


def _option_problem(pu: str, runtime: str, options: Mapping[str, Any], known: Sequence[str]) -> Optional[str]:
    unknown = sorted(str(k) for k in options if k not in known)
    if unknown:
        return ("PU %r: runtime_options %s are not options of runtime %s (known: %s); remove them"
                % (pu, unknown, runtime, ", ".join(sorted(known))))
    return None


# ------------------------------------------------------------------------------------------ ONNX Runtime
def _ort_dtype(type_name: str) -> Optional[str]:
    """numpy dtype name of an ORT type string such as ``"tensor(float)"`` (None if not a plain tensor)."""
    inner = type_name[len("tensor("):-1] if type_name.startswith("tensor(") else ""
    inner = {"float": "float32", "double": "float64"}.get(inner, inner)
    try:
        return np.dtype(inner).name if inner else None
    except TypeError:
        return None


#: ONNX Runtime provider options that make a provider compute in a precision other than the model's own types
#: (TensorRT execution provider documentation, onnxruntime.ai, "TensorRT Execution Provider", Configurations):
#: provider -> {precision: option set to "True"}. The CPU and CUDA providers have none: they run each operator
#: in the model's tensor types, so a float32 model runs in fp32 there whatever the profile says.
ORT_PRECISION_OPTIONS: Dict[str, Dict[str, str]] = {
    "TensorrtExecutionProvider": {"fp16": "trt_fp16_enable", "bf16": "trt_bf16_enable"},
}


def _ort_precision(session: ort.InferenceSession) -> str:
    """The precision the session's first provider computes a float32 model in, from its provider options as
    the session reports them (``InferenceSession.get_provider_options``)."""
    provider = session.get_providers()[0]
    options = session.get_provider_options().get(provider, {})
    for precision in ("bf16", "fp16"):  # TensorRT takes the least precise of the enabled ones per layer
        key = ORT_PRECISION_OPTIONS.get(provider, {}).get(precision)
        if key and str(options.get(key, "0")).lower() in ("1", "true"):
            return precision
    return "fp32"


class OnnxRuntimeModel:
    """An ``onnxruntime.InferenceSession`` behind the :class:`LoadedModel` protocol (``.session`` is public)."""

    def __init__(self, session: ort.InferenceSession):
        self.session = session
        self.precision = _ort_precision(session)
        inputs = session.get_inputs()
        self.input_names = [i.name for i in inputs]
        self.output_names = [o.name for o in session.get_outputs()]
        self.input_specs = [(i.name, [d if isinstance(d, int) and d > 0 else None for d in (i.shape or [])],
                             _ort_dtype(i.type)) for i in inputs]

    def run(self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        return self.session.run(list(output_names), dict(feeds))

    def describe(self) -> Dict[str, Any]:
        used = self.session.get_providers()
        return {"runtime": "onnxruntime", "version": ort.__version__, "provider": used[0], "providers": used,
                "precision": self.precision, "precision_read_back": True}

    def close(self) -> None:
        self.session = None


class OnnxRuntimeAdapter:
    """Runtime ``"onnxruntime"``: the binding's ``provider`` with ``provider_options``, CPU fallback off for a
    non-CPU provider, ``threads`` intra-op threads, no spinning (:func:`.session.session_options`).
    ``runtime_options``: :data:`.session.ORT_RUNTIME_OPTIONS`.

    Precision: for a provider with an option for ``binding.precision`` (:data:`ORT_PRECISION_OPTIONS`:
    TensorRT's ``trt_fp16_enable``, ``trt_bf16_enable``) that option is set unless ``provider_options`` gives
    it; any other provider (CPU, CUDA, ...) runs the model in its own types, and a PU whose profile says fp16 or
    bf16 then runs in fp32 (one warning per PU). ``describe()["precision"]`` is read back from the session's
    provider options."""

    name = "onnxruntime"
    options = ORT_RUNTIME_OPTIONS

    def probe(self) -> Dict[str, Any]:
        return {"available": True, "version": ort.__version__, "reason": None,
                "providers": list(ort.get_available_providers())}

    def check(self, pu: str, binding: PUBinding) -> Optional[str]:
        options = binding.runtime_options
        problem = _option_problem(pu, self.name, options, list(ORT_RUNTIME_OPTIONS))
        if problem is None and options.get("optimization", "all") not in ("all", "disabled"):
            problem = "PU %r: runtime_options.optimization is %r; use 'all' or 'disabled'" % (
                pu, options["optimization"])
        if problem is None and not isinstance(options.get("allow_spinning", False), bool):
            problem = "PU %r: runtime_options.allow_spinning must be true or false" % pu
        if problem is None and not isinstance(options.get("session_config", {}), dict):
            problem = "PU %r: runtime_options.session_config must be an object {key: value}" % pu
        return problem or provider_problem(pu, binding)

    def load(self, model: Any, binding: PUBinding, pu: str) -> OnnxRuntimeModel:
        option = ORT_PRECISION_OPTIONS.get(binding.provider, {}).get(binding.precision)
        if option and option not in binding.provider_options:
            binding = dataclasses.replace(binding, provider_options=dict(binding.provider_options,
                                                                           **{option: "True"}))
        loaded = OnnxRuntimeModel(create_session(model, binding, binding.provider))
        if binding.precision in ("fp16", "bf16") and loaded.precision != binding.precision:
            _warn_once((pu, "onnxruntime", binding.precision, loaded.precision),
                       "PU %s: its profile says %s, but ONNX Runtime's %s has no option for it and runs the "
                       "model in its own types (%s); times and outputs are %s ones", pu, binding.precision,
                       loaded.session.get_providers()[0], loaded.precision, loaded.precision)
        return loaded


# ------------------------------------------------------------------------------------------ OpenVINO
#: OpenVINO properties set for the CPU device unless ``runtime_options`` gives them (OpenVINO property names):
#: ENABLE_CPU_PINNING off: when on, OpenVINO re-pins the calling thread to the whole process mask and its
#: workers to cores of its own choosing (measured, OpenVINO 2026.4); one stream, latency hint: one inference
#: at a time, as a pipeline stage runs. The precision is set for every device: :data:`OPENVINO_PRECISION_HINTS`.
OPENVINO_CPU_DEFAULTS = {"ENABLE_CPU_PINNING": False, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
#: ``INFERENCE_PRECISION_HINT`` (OpenVINO's "inference precision" property: the element type floating-point
#: operators compute in) set from ``PUBinding.precision`` on every device that lists the property, unless
#: ``runtime_options`` gives it. Without it OpenVINO picks per device: bf16 on CPUs with AVX512-BF16 or AMX
#: (``python -c "import openvino as ov; print(ov.Core().get_property('CPU', 'INFERENCE_PRECISION_HINT'))"``),
#: f16 on GPUs. ``int8`` maps to f32: OpenVINO runs int8 where the model is quantized (its own
#: quantize/dequantize operators), which is no property of the device.
OPENVINO_PRECISION_HINTS = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "int8": "f32"}
#: ``runtime_options`` keys of the ``openvino`` runtime besides OpenVINO properties.
OPENVINO_OPTIONS = {
    "device": "OpenVINO device name (default 'CPU'; e.g. 'GPU', 'GPU.1', 'NPU', 'AUTO:GPU,CPU')",
    "allow_unpinned_threads": "accept threads > 1 on a CPU subset although OpenVINO's extra worker threads "
                              "run on every CPU of the process (default false)",
}
_VIRTUAL_DEVICES = ("AUTO", "HETERO", "MULTI", "BATCH")


class OpenVINOModel:
    """An OpenVINO compiled model and its infer request behind the :class:`LoadedModel` protocol."""

    def __init__(self, ov: Any, compiled: Any, device: str, asked: str = "fp32"):
        self._ov, self.compiled, self.device = ov, compiled, device
        try:
            self.inference_precision: Optional[str] = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
        except Exception:  # a device (or virtual device) without the property: RuntimeError
            self.inference_precision = None
        read = normalise_precision(self.inference_precision) if self.inference_precision else None
        self.precision_read_back = read is not None
        self.precision = read or asked
        self.request = compiled.create_infer_request()
        self._in = {n: i for i, port in enumerate(compiled.inputs) for n in port.get_names()}
        self._out = {n: i for i, port in enumerate(compiled.outputs) for n in port.get_names()}
        self.input_names = [port.get_any_name() for port in compiled.inputs]
        self.output_names = [port.get_any_name() for port in compiled.outputs]
        self.input_specs = [(port.get_any_name(),
                             [d.get_length() if d.is_static else None for d in port.get_partial_shape()],
                             np.dtype(port.get_element_type().to_dtype()).name) for port in compiled.inputs]

    def run(self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        unknown = [n for n in list(feeds) + list(output_names) if n not in self._in and n not in self._out]
        if unknown:
            raise KeyError("the OpenVINO model has no tensors %s (inputs %s, outputs %s)"
                           % (unknown, sorted(self._in), sorted(self._out)))
        results = self.request.infer({self._in[n]: v for n, v in feeds.items()})  # outputs are copies
        return [results[self._out[n]] for n in output_names]

    def describe(self) -> Dict[str, Any]:
        info = {"runtime": "openvino", "version": self._ov.get_version(), "device": self.device,
                "execution_devices": list(self.compiled.get_property("EXECUTION_DEVICES"))}
        if self.device == "CPU":
            info["threads"] = int(self.compiled.get_property("INFERENCE_NUM_THREADS"))
        if self.inference_precision is not None:
            info["inference_precision"] = self.inference_precision
        info.update(precision=self.precision, precision_read_back=self.precision_read_back)
        return info

    def close(self) -> None:
        self.request = self.compiled = None


class OpenVINOAdapter:
    """Runtime ``"openvino"``: OpenVINO Runtime (``pip install openvino``; wheels for x86-64 and aarch64)
    reads each ONNX sub-model directly (``Core.read_model``) and compiles it for ``runtime_options.device``.

    ``runtime_options``: :data:`OPENVINO_OPTIONS` plus any OpenVINO property of the device (checked against
    the device's ``SUPPORTED_PROPERTIES``). On the CPU device: ``INFERENCE_NUM_THREADS = binding.threads``
    and :data:`OPENVINO_CPU_DEFAULTS`. ``provider`` / ``provider_options`` do not apply.

    Precision: ``INFERENCE_PRECISION_HINT`` from ``binding.precision`` (:data:`OPENVINO_PRECISION_HINTS`) on a
    device that lists the property; a ``runtime_options`` hint that contradicts the profile's precision is
    refused by :meth:`check`. After compiling, the compiled model's ``INFERENCE_PRECISION_HINT`` is read back:
    ``describe()["precision"]`` is what OpenVINO will compute in, which may differ from the one asked for
    (the CPU device of an x86 CPU without fp16 arithmetic turns f16 into bf16, measured with OpenVINO 2026.4);
    that difference is logged once per PU and the verified run checks at the tolerance of what ran.

    Pinning (measured with OpenVINO 2026.4, oneTBB threading, on this host): with ENABLE_CPU_PINNING off,
    the calling thread and the threads OpenVINO creates from it keep the worker's mask, and with
    ``threads = 1`` every inference runs on the calling thread: the pin holds. With ``threads > 1`` the extra
    oneTBB worker threads take the PROCESS's mask (the main thread's), not the caller's, and OpenVINO caps
    the thread count at the process's CPU count; so :meth:`check` refuses ``threads > 1`` on CPUs that are a
    strict subset of the process's unless ``allow_unpinned_threads`` is set.
    """

    name = "openvino"
    options = OPENVINO_OPTIONS

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probe: Optional[Dict[str, Any]] = None
        self._supported: Dict[str, List[str]] = {}

    @staticmethod
    def _import() -> Any:
        import openvino  # lazy: an optional dependency of the board
        return openvino

    def probe(self) -> Dict[str, Any]:
        with self._lock:
            if self._probe is None:
                try:
                    ov = self._import()
                    self._probe = {"available": True, "version": ov.get_version(), "reason": None,
                                   "devices": list(ov.Core().available_devices)}
                except Exception as exc:  # ImportError, a broken install, a plugin failing to load
                    reason = "openvino is not usable: %s; pip install 'openvino>=2024.0'" % " ".join(
                        ("%s: %s" % (type(exc).__name__, exc)).split())
                    self._probe = {"available": False, "version": None, "reason": reason, "devices": []}
            return dict(self._probe)

    def _supported_properties(self, device: str) -> List[str]:
        with self._lock:
            if device not in self._supported:
                props = self._import().Core().get_property(device, "SUPPORTED_PROPERTIES")
                self._supported[device] = sorted(k for k, mode in props.items() if str(mode) != "RO")
            return self._supported[device]

    def check(self, pu: str, binding: PUBinding) -> Optional[str]:
        probe = self.probe()
        if not probe["available"]:
            return "PU %r: runtime openvino: %s, or bind the PU to runtime onnxruntime" % (
                pu, probe["reason"])
        if binding.provider != "CPUExecutionProvider" or binding.provider_options:
            return ("PU %r: provider %s applies to runtime onnxruntime only; give OpenVINO's device as "
                    "runtime_options.device instead" % (pu, binding.provider))
        options = dict(binding.runtime_options)
        device = options.pop("device", "CPU")
        if not isinstance(device, str) or not device:
            return "PU %r: runtime_options.device must be an OpenVINO device name such as 'CPU'" % pu
        base, _, listed = device.partition(":")
        wanted = [d for d in listed.split(",") if d] if base in _VIRTUAL_DEVICES else [device]
        missing = [d for d in wanted if d not in probe["devices"] and d.split(".")[0] not in probe["devices"]]
        if missing:
            return ("PU %r: OpenVINO device %s is not available here (available: %s); install its driver, or "
                    "set runtime_options.device to one of those" % (pu, ", ".join(missing),
                                                                   ", ".join(probe["devices"]) or "none"))
        unpinned_ok = options.pop("allow_unpinned_threads", False)
        if base not in _VIRTUAL_DEVICES:
            try:
                supported = self._supported_properties(device)
            except Exception as exc:  # OpenVINO raises RuntimeError for a device it cannot open
                return "PU %r: OpenVINO cannot query device %s (%s); check its driver" % (
                    pu, device, " ".join(str(exc).split()))
            problem = _option_problem(pu, "openvino on " + device, options,
                                      supported + list(OPENVINO_OPTIONS))
            if problem:
                return problem
        hint = options.get("INFERENCE_PRECISION_HINT")
        wanted_hint = OPENVINO_PRECISION_HINTS.get(binding.precision)
        if hint is not None and wanted_hint is not None and normalise_precision(hint) != normalise_precision(
                wanted_hint):
            return ("PU %r: runtime_options.INFERENCE_PRECISION_HINT %r contradicts the PU's precision %s; remove "
                    "it and set the PU's precision in the profile instead" % (pu, hint, binding.precision))
        pinning = str(options.get("ENABLE_CPU_PINNING", False)).lower() in ("true", "yes")
        if binding.cpus is not None and pinning:
            return ("PU %r: ENABLE_CPU_PINNING makes OpenVINO move the worker off CPUs %s at its first "
                    "inference; remove it from runtime_options, or bind the PU with cpus=None"
                    % (pu, tuple(binding.cpus)))
        process = os.sched_getaffinity(os.getpid()) if hasattr(os, "sched_getaffinity") else set()
        if (device == "CPU" and binding.threads > 1 and binding.cpus is not None and not unpinned_ok
                and set(binding.cpus) < process):
            return ("PU %r: OpenVINO runs threads=%d on CPUs %s only partly: its extra worker threads "
                    "(oneTBB) take the process's CPUs %s, not the pinned thread's; use threads=1, bind the "
                    "PU to all the process's CPUs, or set runtime_options.allow_unpinned_threads"
                    % (pu, binding.threads, tuple(binding.cpus), sorted(process)))
        return None

    def properties(self, binding: PUBinding) -> Tuple[str, Dict[str, Any]]:
        """``(device, properties)`` that :meth:`load` compiles with (see the class docstring)."""
        options = dict(binding.runtime_options)
        device = str(options.pop("device", "CPU"))
        options.pop("allow_unpinned_threads", None)
        props: Dict[str, Any] = {}
        if device == "CPU":
            props.update(OPENVINO_CPU_DEFAULTS)
            props["INFERENCE_NUM_THREADS"] = int(binding.threads)
        hint = OPENVINO_PRECISION_HINTS.get(binding.precision)
        if hint is not None and device.partition(":")[0] not in _VIRTUAL_DEVICES:
            try:
                if "INFERENCE_PRECISION_HINT" in self._supported_properties(device):
                    props["INFERENCE_PRECISION_HINT"] = hint
            except Exception:  # a device OpenVINO cannot query: compile_model names it
                pass
        props.update(options)
        return device, props

    def load(self, model: Any, binding: PUBinding, pu: str) -> OpenVINOModel:
        ov = self._import()
        core = ov.Core()
        device, props = self.properties(binding)
        compiled = core.compile_model(core.read_model(model=model_source(model)), device, props)
        logger.debug("PU %s: OpenVINO %s compiled a sub-model for %s with %s", pu, ov.get_version(), device,
                     props)
        loaded = OpenVINOModel(ov, compiled, device, binding.precision if binding.precision != "int8" else "fp32")
        asked = normalise_precision(props.get("INFERENCE_PRECISION_HINT", ""))
        if asked is not None and loaded.precision_read_back and loaded.precision != asked:
            _warn_once((pu, "openvino", device, asked, loaded.precision),
                       "PU %s: OpenVINO on %s computes in %s, not the profile's %s (the device has no %s "
                       "arithmetic); outputs are checked at %s tolerance", pu, device, loaded.precision, asked,
                       asked, loaded.precision)
        return loaded


# ------------------------------------------------------------------------------------------ registry
#: Runtime name -> adapter. Add an adapter here (device_agents/README.md, "Runtime adapters").
ADAPTERS: Dict[str, RuntimeAdapter] = {a.name: a for a in (OnnxRuntimeAdapter(), OpenVINOAdapter(),
                                                            NcnnAdapter())}


def get_adapter(name: str, pu: Optional[str] = None) -> RuntimeAdapter:
    """The adapter registered as ``name`` in :data:`ADAPTERS`.

    Raises
    ------
    PlanError
        ``name`` is not implemented in this ppexec (the message lists the adapters and how to add one).
    """
    adapter = ADAPTERS.get(name)
    if adapter is None:
        field = "bindings.%s.runtime" % pu if pu is not None else "runtime"
        raise plan_error("execution plan", field,
                           "runtime %r is not implemented in this ppexec (runtimes: %s)"
                           % (name, ", ".join(sorted(ADAPTERS))),
                           "bind the PU to one of those, or add an adapter module to device_agents/ppexec "
                           "and an ADAPTERS entry (device_agents/README.md, 'Runtime adapters')")
    return adapter


def probe_all() -> Dict[str, Dict[str, Any]]:
    """``{runtime name: adapter.probe()}`` for every adapter of :data:`ADAPTERS` (never raises)."""
    return {name: adapter.probe() for name, adapter in ADAPTERS.items()}
