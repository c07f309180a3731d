"""Reference results: the unsplit model in one ORT session, and the distance between two sets of outputs.

The implementation is the executor core's (``device_agents/ppexec/reference.py``, see
:mod:`parapipe.runtime._core`), so a board compares outputs exactly as parapipe does.
"""
from __future__ import annotations

from parapipe.runtime._core import core

reference_outputs = core.reference.reference_outputs
max_abs_diff = core.reference.max_abs_diff

__all__ = ["reference_outputs", "max_abs_diff"]
