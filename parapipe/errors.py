"""The parapipe error hierarchy.

Every error a user can cause derives from :class:`ParapipeError`; the CLI turns it into one line on stderr and
exit code 2. Anything else that escapes is a bug in parapipe and keeps its traceback.

Messages follow one shape so users can act on them: ``"<file>: <field>: <what is wrong>; <how to fix it>"``
(see :func:`input_error`).
"""
from __future__ import annotations

from typing import Optional


class ParapipeError(Exception):
    """Base class of all errors caused by input, environment or infeasible requests (CLI exit code 2)."""

    exit_code = 2


class InputError(ParapipeError, ValueError):
    """Bad user input: a file, a field in it, a command-line value."""


class InfeasibleError(ParapipeError):
    """The request has no feasible solution (e.g. a block that no allowed PU can run)."""


class ExecutionError(ParapipeError, RuntimeError):
    """Running a mapping failed (a stage raised, a provider is missing, a remote host failed)."""


class HostError(ParapipeError, RuntimeError):
    """A remote host cannot be reached or used (SSH, agent, Python/ONNX Runtime on the host)."""


def input_error(source: Optional[str], field: Optional[str], problem: str, fix: str) -> InputError:
    """Build an :class:`InputError` with the standard one-line message.

    Parameters
    ----------
    source : str or None
        File path (or ``--option`` name) the bad value came from.
    field : str or None
        Field, column, key or row inside ``source``.
    problem : str
        What is wrong, e.g. ``"must be > 0, got -3"``.
    fix : str
        How to fix it, e.g. ``"give the bandwidth in bytes/s"``.

    Returns
    -------
    InputError
        Not raised; the caller raises it (``raise input_error(...)``).
    """
    parts = [p for p in (source, field) if p]
    prefix = ": ".join(parts)
    msg = f"{prefix}: {problem}; {fix}" if prefix else f"{problem}; {fix}"
    return InputError(" ".join(msg.split()))
