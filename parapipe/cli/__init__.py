"""The ``parapipe`` command: subcommands, ``-v`` counting, ``main(argv) -> int``, domain errors to exit code 2.

Human-readable text goes to stderr/stdout as tables; machine output to files or ``--json`` (stdout). One module
per command holds its parser (``add_parser(sub)``) and its handler (``handle(args) -> int``); what they share is
:mod:`parapipe.cli.common`. The handlers import the application layer (:mod:`parapipe.app`) and the executor
when they run, so ``--help``, ``parapipe socs`` and ``parapipe models`` load none of onnx, ONNX Runtime,
pydantic, numpy or matplotlib (tests/test_startup.py).
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import List, NoReturn, Optional

from parapipe import __version__
from parapipe.cli import (
    calibrate, deploy, evaluate, export, import_csv, inspect, models, optimize, plot, profile, run, runs, soc_detect,
    socs)
from parapipe.errors import ParapipeError

__all__ = ["build_parser", "main", "entry"]

log = logging.getLogger("parapipe")

#: The command modules, in the order ``parapipe --help`` lists them.
COMMANDS = (models, socs, inspect, optimize, evaluate, run, deploy, runs, plot, export, profile, calibrate,
            import_csv, soc_detect)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (what is wrong and where help is) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``parapipe`` parser: global options and every command of :data:`COMMANDS` (``args.func`` is the
    command's handler)."""
    p = _Parser(prog="parapipe", description="Map ONNX inference onto heterogeneous SoCs: pipelined stages x "
                "intra-stage parallelism, Pareto fronts of throughput, latency and energy.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-v info, -vv debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars on stderr (they are also hidden "
                   "when stderr is not a terminal); results, notes and warnings still print")
    p.add_argument("--version", action="version", version=f"parapipe {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    for command_parser in sub.choices.values():  # also after the command: parapipe optimize ... --quiet
        command_parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                                    help="no progress bars on stderr")
    return p


def _executor_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of the executor's own errors (:class:`ppexec.errors.PlanError`,
    :class:`ppexec.errors.PipelineError`; ppexec knows nothing of parapipe). Looked up among the loaded modules:
    a command that never loaded the executor's errors cannot have raised one."""
    errors = sys.modules.get("ppexec.errors")
    return errors is not None and isinstance(exc, (errors.PlanError, errors.PipelineError))


def _caused_by_interrupt(exc: BaseException) -> bool:
    """True when ``exc`` was raised while handling a Ctrl-C: an extension module whose initialisation a
    ``KeyboardInterrupt`` stopped re-raises it as ``ImportError: initialization failed`` with the interrupt as
    its cause (pybind11's module-init wrapper; OR-Tools' ``pywraplp`` is one, imported lazily mid-search)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def _lower_level(record: logging.LogRecord) -> bool:
    """Logging filter: gives each record ``levelname_lower`` (``warning``) for the default format."""
    record.levelname_lower = record.levelname.lower()
    return True


def main(argv: Optional[List[str]] = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 outputs differ, 2 user error, 130 interrupted)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    # By default the library's warnings read like the CLI's own lines; -v adds the level and the logger's name.
    fmt = "parapipe: %(levelname_lower)s: %(message)s" if args.verbose == 0 else "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level, format=fmt, stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_lower_level)
    from parapipe.cli.common import set_quiet

    set_quiet(args.quiet)
    try:
        return int(args.func(args))
    except ParapipeError as exc:
        print(f"parapipe: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("parapipe: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if _caused_by_interrupt(exc):
            print("parapipe: interrupted", file=sys.stderr)
            return 130
        if not _executor_error(exc):
            raise
        print(f"parapipe: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return ParapipeError.exit_code


def entry() -> None:
    """Console-script entry point (a closed stdout pipe, e.g. ``| head``, ends quietly); ends the process with
    :func:`exit_without_teardown`."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    exit_without_teardown(main())


def exit_without_teardown(code: int) -> NoReturn:
    """End the process with exit status ``code`` as ``sys.exit`` would, less the interpreter's teardown of every
    module and object, which costs about 0.1 s once onnx, ONNX Runtime and OR-Tools are loaded (median of 6
    alternating runs of ``parapipe optimize densenet121 --soc black_sesame_a1000``: 2.00 s wall with
    ``sys.exit``, 1.92 s with this; ``python -c "import onnxruntime, ortools.sat.python.cp_model"`` and
    ``os._exit(0)`` at its end show the same per library). The ``atexit`` handlers run (logging's flush,
    multiprocessing's clean-up, ``weakref.finalize``'s temporary folders), then stdout and stderr are flushed.
    Where another thread still runs (a thread pool's idle workers, an SSH transport), or a flush fails, it is
    ``sys.exit(code)`` after all, so nothing is cut short: files the command wrote were closed by then
    (``parapipe.files.atomic_path``), SQLite commits are on disk at commit."""
    import atexit
    import os
    import threading

    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)  # CPython's; absent elsewhere: the usual exit
    if threading.active_count() > 1 or run_exitfuncs is None:
        sys.exit(code)
    try:
        run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        sys.exit(code)  # the usual exit reports what failed
    os._exit(code)
