"""ONNX Runtime sessions for one PU: provider resolution, thread pinning and session options.

The settings follow the checked pitfalls in parapipe's design guide (section 6): ORT's default intra-op pool
spins and pins one thread per core, so several sessions in one process collide; every session here sets
``intra_op_num_threads`` explicitly, turns spinning off (``session.intra_op.allow_spinning = "0"``, an ORT
session config key) and uses ``inter_op_num_threads = 1``. Pinning is done by the calling thread with
``os.sched_setaffinity(0, cpus)`` *before* the session exists, so ORT's worker threads inherit the mask.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional, Sequence

import onnxruntime as ort

from .errors import DEFAULT_ERRORS
from .plan import PUBinding

logger = logging.getLogger(__name__)


def resolve_provider(pu: str, binding: PUBinding, fallback_provider: Optional[str] = None,
                     errors=DEFAULT_ERRORS) -> str:
    """Return the execution provider to use for ``pu``.

    Parameters
    ----------
    pu : str
        PU name (for messages).
    binding : PUBinding
        The PU's binding; ``binding.provider`` is tried first.
    fallback_provider : str, optional
        Provider used instead when ``binding.provider`` is not available in this onnxruntime build.
    errors : ErrorKinds
        Exception factories.

    Returns
    -------
    str
        ``binding.provider`` if available, else ``fallback_provider``.

    Raises
    ------
    PipelineError (or ``errors.execution``'s type)
        Neither provider is available (the message names the PU and the provider).
    """
    available = ort.get_available_providers()
    if binding.provider in available:
        return binding.provider
    if fallback_provider is not None and fallback_provider in available:
        logger.warning("PU %s: provider %s not available, falling back to %s", pu, binding.provider,
                       fallback_provider)
        return fallback_provider
    wanted = binding.provider
    if fallback_provider is not None:
        wanted = "%s (or %s)" % (binding.provider, fallback_provider)
    raise errors.execution("PU %r: execution provider %s is not available in onnxruntime %s (available: %s); "
                           "install an onnxruntime build with it, bind the PU to another provider, or pass "
                           "fallback_provider" % (pu, wanted, ort.__version__, ", ".join(available)))


def pin_current_thread(pu: str, cpus: Optional[Sequence[int]], errors=DEFAULT_ERRORS) -> frozenset:
    """Pin the calling thread to ``cpus`` (no-op for ``None``) and return the thread's resulting CPU set.

    Raises
    ------
    PipelineError (or ``errors.execution``'s type)
        The CPU ids are invalid on this host or affinity is not supported (message names the PU).
    """
    if cpus is not None:
        if not hasattr(os, "sched_setaffinity"):
            raise errors.execution("PU %r: cannot pin to CPUs %s: os.sched_setaffinity is not available on "
                                   "this OS; bind the PU with cpus=None" % (pu, tuple(cpus)))
        try:
            os.sched_setaffinity(0, set(cpus))
        except (OSError, ValueError) as exc:
            raise errors.execution("PU %r: cannot pin to CPUs %s (%s); use CPU ids from "
                                   "os.sched_getaffinity(0) = %s"
                                   % (pu, tuple(cpus), exc, sorted(os.sched_getaffinity(0))))
    return frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


def session_options(binding: PUBinding) -> ort.SessionOptions:
    """Build the session options for one PU (threads, no spinning, full graph optimisation)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(binding.threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
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
        Provider resolved with :func:`resolve_provider`.

    Returns
    -------
    onnxruntime.InferenceSession
    """
    options = binding.provider_options if provider == binding.provider else {}
    providers = [(provider, dict(options))] if options else [provider]
    return ort.InferenceSession(model_source(model), sess_options=session_options(binding),
                                providers=providers)
