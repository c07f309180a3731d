"""Which exceptions the pipeline core raises, so that one implementation serves the board and parapipe.

On a board (the bundle's agent) the core raises :class:`PipelineError` and :class:`PlanError`. parapipe
(:mod:`parapipe.execution`) passes an :class:`ErrorKinds` that builds its own ``ExecutionError`` and
``InputError`` instead, so callers there see parapipe's error hierarchy and messages unchanged.
"""


class PipelineError(RuntimeError):
    """Running a plan failed: a stage raised, a provider is missing, CPU ids are unusable."""


class PlanError(ValueError):
    """A plan, a frame or an option is invalid (the message says which and how to fix it)."""


def one_line_message(source, field, problem, fix):
    """``"<source>: <field>: <problem>; <fix>"`` on one line (whitespace runs collapsed)."""
    prefix = ": ".join(p for p in (source, field) if p)
    msg = "%s: %s; %s" % (prefix, problem, fix) if prefix else "%s; %s" % (problem, fix)
    return " ".join(msg.split())


class ErrorKinds(object):
    """Factories of the exceptions the core raises.

    Parameters
    ----------
    execution : callable(str) -> BaseException
        Builds a run failure (default :class:`PipelineError`).
    input : callable(source, field, problem, fix) -> BaseException
        Builds an input error (default: :class:`PlanError` with :func:`one_line_message`).
    passthrough : tuple of exception types
        Errors that already name the PU and the fix; the executor prefixes them with the stage only
        (default: the two classes above).
    """

    def __init__(self, execution=None, input=None, passthrough=None):
        self.execution = execution or PipelineError
        self.input = input or (lambda source, field, problem, fix:
                               PlanError(one_line_message(source, field, problem, fix)))
        self.passthrough = tuple(passthrough) if passthrough else (PipelineError, PlanError)


#: The board's error kinds.
DEFAULT_ERRORS = ErrorKinds()
