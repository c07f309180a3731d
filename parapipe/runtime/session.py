"""ONNX Runtime sessions for one PU: provider resolution, thread pinning and session options.

The implementation is the executor core's (``device_agents/ppexec/session.py``, see
:mod:`parapipe.runtime._core`); here its failures are :class:`~parapipe.errors.ExecutionError`. The settings
follow the checked pitfalls in the design guide (section 6): explicit ``intra_op_num_threads``, spinning off,
one inter-op thread, and pinning by the calling thread before the session exists so ORT's threads inherit it.
"""
from __future__ import annotations

from typing import Optional, Sequence

from parapipe.runtime._core import PARAPIPE_ERRORS, core

PUBinding = core.PUBinding
session_options = core.session.session_options
create_session = core.session.create_session

__all__ = ["resolve_provider", "pin_current_thread", "session_options", "create_session"]


def resolve_provider(pu: str, binding: PUBinding, fallback_provider: Optional[str] = None) -> str:
    """Return the execution provider to use for ``pu``: ``binding.provider`` if this onnxruntime has it, else
    ``fallback_provider``.

    Raises
    ------
    ExecutionError
        Neither provider is available (the message names the PU and the provider).
    """
    return core.session.resolve_provider(pu, binding, fallback_provider, PARAPIPE_ERRORS)


def pin_current_thread(pu: str, cpus: Optional[Sequence[int]]) -> frozenset:
    """Pin the calling thread to ``cpus`` (no-op for ``None``) and return the thread's resulting CPU set.

    Raises
    ------
    ExecutionError
        The CPU ids are invalid on this host or affinity is not supported (message names the PU).
    """
    return core.session.pin_current_thread(pu, cpus, PARAPIPE_ERRORS)
