"""Draw the Pareto plot in a second process that imports matplotlib while the search runs.

Importing matplotlib and warming up Agg costs about 0.5 s of CPU (``python -X importtime -m parapipe.report.serve``
with no input); started as soon as ``parapipe optimize`` knows it will plot, that runs on another core during
the search, and the main process only hands over the document when the search is done. The main process never
imports matplotlib on this path.

Robustness: the worker runs in its own session (a terminal's Ctrl-C reaches only the parent) and ignores SIGINT;
the parent kills and reaps it on any exception, before the temp file it was writing is removed
(:func:`parapipe.files.atomic_path`); a worker whose parent died reads end of input and exits. A worker that fails
in any way (cannot start, dies, answers an error) costs nothing but its time: :meth:`PlotWorker.draw` returns
False and the caller draws in its own process, which raises the error a user should see.
"""
from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional

log = logging.getLogger(__name__)

__all__ = ["PlotWorker", "start_plot_worker"]


class PlotWorker:
    """A started ``python -m parapipe.report.serve`` (the protocol is its module's docstring)."""

    def __init__(self) -> None:
        import parapipe

        env = dict(os.environ)
        root = str(Path(parapipe.__file__).resolve().parent.parent)  # the worker imports this very parapipe
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self.proc = subprocess.Popen([sys.executable, "-m", "parapipe.report.serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                     start_new_session=True)

    def draw(self, doc: Any, soc: Any, path: Path, meanwhile: Optional[Callable[[], None]] = None) -> bool:
        """Have the worker write the Pareto plot of ``doc`` to ``path`` (a temp file the caller owns); run
        ``meanwhile()`` here while it draws (such as writing pareto.json: the plot takes about 0.5 s); wait for it.

        Returns
        -------
        bool
            True when the worker wrote ``path``; False when it could not (it has exited: draw it here).

        Raises
        ------
        BaseException
            Anything raised by ``meanwhile()`` or while waiting (KeyboardInterrupt), after the worker was killed
            and reaped, so that it writes nothing more.
        """
        reply = b""
        try:
            payload = pickle.dumps((doc, soc, str(path)), protocol=pickle.HIGHEST_PROTOCOL)
            stdin, stdout = self.proc.stdin, self.proc.stdout
            assert stdin is not None and stdout is not None
            try:
                stdin.write(b"%d\n" % len(payload) + payload)
                stdin.close()
            except OSError as exc:  # the worker is gone (broken pipe)
                log.debug("plot worker: %s", exc)
            if meanwhile is not None:
                meanwhile()
            try:
                reply = stdout.readline()
            except OSError as exc:
                log.debug("plot worker: %s", exc)
        finally:
            self.close()
        if reply != b"ok\n":
            log.debug("plot worker did not draw (%s): drawing here", reply.decode(errors="replace").strip() or
                      f"exit status {self.proc.returncode}")
            return False
        return True

    def close(self) -> None:
        """End the worker (killed if still running) and reap it; idempotent."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except OSError:
                    pass


def start_plot_worker() -> Optional[PlotWorker]:
    """A started :class:`PlotWorker`, or None where it gains nothing (one CPU available to this process) or
    cannot start (logged)."""
    try:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    except OSError:
        cpus = os.cpu_count() or 1
    if cpus < 2 or not sys.executable:
        return None
    try:
        return PlotWorker()
    except OSError as exc:
        log.debug("plot worker not started: %s", exc)
        return None
