"""Run independent search passes in forked worker processes while this process runs another: the PU-reuse and
replicated DP passes next to the disjoint one (:func:`parapipe.search.passes.run_passes`), the CP-SAT polish next
to the bounds (:func:`parapipe.search.api.search`).

:func:`run_in_workers` forks one process per job (``multiprocessing``'s ``fork`` start method: a child starts
with everything this process has imported and built, such as the memoised stage catalogue, in a few
milliseconds, where ``spawn`` or ``forkserver`` would import the package again), runs the caller's own work here
(and then, while a child still works, what the caller needs next: ``idle``), and collects each job's return value
over a pipe (pickled).

Robustness:

* Ctrl-C: a child ignores SIGINT (the signal is blocked from before the fork until the child ignores it, so no
  child ever raises KeyboardInterrupt); this process gets the usual KeyboardInterrupt, and on it, or on any other
  exception, terminates (SIGTERM) and reaps every child before the exception propagates. On Linux a child also
  gets SIGKILL when this process dies (``prctl(PR_SET_PDEATHSIG)``), so none outlives a killed parent.
* A job that raises, or a child that dies without an answer, is left out of the results: the caller runs that
  job in its own process, where it raises the same exception (the jobs are deterministic) or succeeds.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["run_in_workers"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when ``parent`` dies (Linux ``prctl(2)``); exit at once if it already has."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def _child(conn: Any, parent: int, fn: Callable[..., Any], args: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards a SIGINT pending since the fork
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with_parent(parent)
    try:
        answer: Tuple[str, Any] = ("ok", fn(*args))
    except BaseException as exc:  # noqa: B902 - reported to the parent, which runs the job itself
        answer = ("error", f"{type(exc).__name__}: {exc}")
    try:
        conn.send(answer)
    except Exception as exc:  # an unpicklable result: the parent runs the job itself
        conn.send(("error", f"cannot send the result: {type(exc).__name__}: {exc}"))
    conn.close()


def run_in_workers(jobs: Dict[str, Tuple[Callable[..., Any], tuple]], n_workers: int,
                   here: Callable[[], Any], idle: Optional[Callable[[], None]] = None) -> Any:
    """Fork up to ``n_workers`` children, each running one of ``jobs`` (``name: (function, args)``, the first
    ``n_workers`` in order), run ``here()`` in this process meanwhile, and collect the children's answers.
    ``idle()``, if given, runs here after ``here()`` when a child is still working (this process would only wait):
    work the caller needs next whatever the answers, such as an import.

    Returns
    -------
    tuple
        ``here()``'s value (a tuple) followed by ``{name: function(*args)}`` for each job a child completed;
        jobs not forked, and jobs whose child raised or died, are missing (the caller runs them).

    Raises
    ------
    BaseException
        Whatever ``here()`` raises (KeyboardInterrupt included), after every child was terminated and reaped.
    """
    import multiprocessing

    import numpy.ma  # noqa: F401  numpy 2's np.unique imports it on first use (about 25 ms): once, before the fork

    ctx = multiprocessing.get_context("fork")
    procs: List[Tuple[str, Any, Any]] = []  # (name, process, read end)
    parent = os.getpid()
    try:
        for name, (fn, args) in list(jobs.items())[:max(0, n_workers)]:
            read, write = ctx.Pipe(duplex=False)
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                proc = ctx.Process(target=_child, args=(write, parent, fn, args), name=f"parapipe-{name}",
                                   daemon=True)
                proc.start()
            except (AssertionError, OSError) as exc:  # a daemonic process may not fork; out of processes
                log.info("cannot start a worker process for the %s pass (%s); running it here", name, exc)
                read.close()
                break
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
                write.close()
            procs.append((name, proc, read))
        mine = here()
        if idle is not None and not all(read.poll() for _, _, read in procs):
            idle()
        results: Dict[str, Any] = {}
        for name, proc, read in procs:
            try:
                status, value = read.recv()
            except (EOFError, OSError) as exc:
                status, value = "error", f"worker process ended without an answer ({type(exc).__name__})"
            if status == "ok":
                results[name] = value
            else:
                log.info("the %s pass failed in a worker process (%s); running it here", name, value)
        return (*mine, results)
    finally:
        for _, proc, read in procs:
            read.close()
            if proc.is_alive():
                proc.terminate()
            proc.join()
