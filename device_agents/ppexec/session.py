"""ONNX Runtime sessions for one PU: provider resolution, thread pinning and session options.

The settings follow ONNX Runtime's threading documentation
(https://onnxruntime.ai/docs/performance/tune-performance/threading.html): ORT's default intra-op pool spins
and pins one thread per core, so several sessions in one process collide; every session here sets
``intra_op_num_threads`` explicitly, turns spinning off (``session.intra_op.allow_spinning = "0"``, an ORT
session config key) and uses ``inter_op_num_threads = 1``. Pinning is done by the calling thread with
``os.sched_setaffinity(0, cpus)`` *before* the session exists, so ORT's worker threads inherit the mask.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional, Sequence

import onnxruntime as ort

from .errors import PipelineError
from .plan import PUBinding

__all__ = ["provider_problem", "resolve_provider", "pin_current_thread", "ORT_RUNTIME_OPTIONS",
           "session_options", "model_source", "create_session"]

logger = logging.getLogger(__name__)


def provider_problem(pu: str, binding: PUBinding, fallback_provider: Optional[str] = None) -> Optional[str]:
    """One line saying why neither ``binding.provider`` nor ``fallback_provider`` is available in this
    onnxruntime build (naming the PU, the providers there and the fixes), or ``None`` if one is."""
    available = ort.get_available_providers()
    if binding.provider in available or (fallback_provider is not None and fallback_provider in available):
        return None
    wanted = binding.provider
    if fallback_provider is not None:
        wanted = "%s (or %s)" % (binding.provider, fallback_provider)
    return ("PU %r: execution provider %s is not available in onnxruntime %s (available: %s); install an "
            "onnxruntime build with it, bind the PU to another provider, or pass fallback_provider"
            % (pu, wanted, ort.__version__, ", ".join(available)))


def resolve_provider(pu: str, binding: PUBinding, fallback_provider: Optional[str] = None) -> str:
    """Return the execution provider to use for ``pu``.

    Parameters
    ----------
    pu : str
        PU name (for messages).
    binding : PUBinding
        The PU's binding; ``binding.provider`` is tried first.
    fallback_provider : str, optional
        Provider used instead when ``binding.provider`` is not available in this onnxruntime build.

    Returns
    -------
    str
        ``binding.provider`` if available, else ``fallback_provider``.

    Raises
    ------
    PipelineError
        Neither provider is available (the message names the PU and the provider).
    """
    problem = provider_problem(pu, binding, fallback_provider)
    if problem is not None:
        raise PipelineError(problem)
    if binding.provider in ort.get_available_providers():
        return binding.provider
    logger.warning("PU %s: provider %s not available, falling back to %s", pu, binding.provider,
                   fallback_provider)
    return str(fallback_provider)


def pin_current_thread(pu: str, cpus: Optional[Sequence[int]]) -> frozenset:
    """Pin the calling thread to ``cpus`` (no-op for ``None``) and return the thread's resulting CPU set.

    Raises
    ------
    PipelineError
        The CPU ids are invalid on this host or affinity is not supported (message names the PU).
    """
    if cpus is not None:
        if not hasattr(os, "sched_setaffinity"):
            raise PipelineError("PU %r: cannot pin to CPUs %s: os.sched_setaffinity is not available on "
                                   "this OS; bind the PU with cpus=None" % (pu, tuple(cpus)))
        try:
            os.sched_setaffinity(0, set(cpus))
        except (OSError, ValueError) as exc:
            raise PipelineError("PU %r: cannot pin to CPUs %s (%s); use CPU ids from "
                                   "os.sched_getaffinity(0) = %s"
                                   % (pu, tuple(cpus), exc, sorted(os.sched_getaffinity(0))))
    return frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


#: Keys of ``PUBinding.runtime_options`` for the ``onnxruntime`` runtime and what they set.
ORT_RUNTIME_OPTIONS = {
    "optimization": "graph optimisation: 'all' (default, ORT_ENABLE_ALL) or 'disabled' (ORT_DISABLE_ALL, "
                    "for per-operator profiling: ORT fuses and renames nodes otherwise)",
    "allow_spinning": "let ORT's intra-op threads spin while idle (default false: stages wait on queues)",
    "session_config": "extra ORT session config entries {key: value}, e.g. "
                      "{'session.intra_op_thread_affinities': '2;3'}",
}
_OPTIMIZATION_LEVELS = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}


def session_options(binding: PUBinding, provider: Optional[str] = None) -> ort.SessionOptions:
    """Build the session options for one PU: ``binding.threads`` intra-op threads, one inter-op thread,
    sequential execution, no spinning, full graph optimisation (``binding.runtime_options`` may change the
    last two and add config entries: :data:`ORT_RUNTIME_OPTIONS`). For a ``provider`` other than the CPU
    one, ``session.disable_cpu_ep_fallback = 1``: a node the provider cannot run fails the session instead
    of running on the CPU, so accelerator time is never CPU time (as when profiling)."""
    options = binding.runtime_options if binding.runtime == "onnxruntime" else {}
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(binding.threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = _OPTIMIZATION_LEVELS[options.get("optimization", "all")]
    spinning = "1" if options.get("allow_spinning", False) else "0"
    so.add_session_config_entry("session.intra_op.allow_spinning", spinning)
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if provider is not None and provider != "CPUExecutionProvider":
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    for key, value in (options.get("session_config") or {}).items():
        so.add_session_config_entry(str(key), str(value))
    so.log_severity_level = 4  # fatal only: ORT warns about unused initializers in cut models, and run
    # errors reach the caller as exceptions (re-raised as execution errors): its own log would repeat them
    return so


def model_source(model: Any) -> Any:
    """What ``InferenceSession`` takes for a task's model: bytes stay bytes, a path becomes ``str``, anything
    else (an ``onnx.ModelProto``) is serialised."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        return os.fspath(model)
    return model.SerializeToString()


def create_session(model: Any, binding: PUBinding, provider: str) -> ort.InferenceSession:
    """Create an ORT session for ``model`` on the calling thread (pin the thread first).

    Parameters
    ----------
    model : onnx.ModelProto, bytes or str
        Self-contained model (weights as initializers), its bytes or the path of its file.
    binding : PUBinding
        Threads and provider options.
    provider : str
        Provider resolved with :func:`resolve_provider` (a non-CPU one gets no CPU fallback:
        :func:`session_options`).

    Returns
    -------
    onnxruntime.InferenceSession
    """
    options = binding.provider_options if provider == binding.provider else {}
    providers = [(provider, dict(options))] if options else [provider]
    return ort.InferenceSession(model_source(model), sess_options=session_options(binding, provider),
                                providers=providers)
