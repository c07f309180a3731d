"""The two exceptions ppexec raises, and the one-line message shape they carry.

:class:`PlanError`: a plan, a frame or an option is invalid; :class:`PipelineError`: running a plan failed.
Every message is one line, ``"<source>: <field>: <problem>; <fix>"`` (:func:`plan_error`), so the agent can send
it as is and parapipe's CLI can print it as ``parapipe: error: ...`` (exit code 2). ppexec never imports
parapipe; parapipe maps these two classes to its own error output in one place, the CLI's ``main``.
"""

__all__ = ["PipelineError", "PlanError", "one_line_message", "plan_error"]


class PipelineError(RuntimeError):
    """Running a plan failed: a stage raised, a provider is missing, CPU ids are unusable."""


class PlanError(ValueError):
    """A plan, a frame or an option is invalid (the message says which and how to fix it)."""


def one_line_message(source, field, problem, fix):
    """``"<source>: <field>: <problem>; <fix>"`` on one line (whitespace runs collapsed)."""
    prefix = ": ".join(p for p in (source, field) if p)
    msg = "%s: %s; %s" % (prefix, problem, fix) if prefix else "%s; %s" % (problem, fix)
    return " ".join(msg.split())


def plan_error(source, field, problem, fix):
    """A :class:`PlanError` with :func:`one_line_message` (not raised; the caller raises it)."""
    return PlanError(one_line_message(source, field, problem, fix))
