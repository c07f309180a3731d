"""A process that draws one Pareto plot for its parent: ``python -m parapipe.report.serve``.

It imports matplotlib and renders a small warm-up figure (fonts, Agg, the PNG writer) at once, while the parent
is still searching, then reads one request from stdin: a decimal byte count on a line, then that many bytes of
``pickle`` of ``(doc, soc, path)`` (a :class:`parapipe.mapping.ParetoDoc`, the
:class:`parapipe.soc.profile.SoC` it was computed with or None, and the PNG's path). It writes the plot to
``path`` itself (the parent owns it as a temp file, :func:`parapipe.files.atomic_path`) and answers one line on
stdout: ``ok``, or ``error <type>: <message>``. End of input before a request: it exits, having written
nothing (the parent wants no plot, or is gone). SIGINT is ignored: the parent handles Ctrl-C and ends this
process. The client is :class:`parapipe.app.plot_worker.PlotWorker`; only a parapipe parent writes to it (the
request is a pickle, trusted as the parent's own data).
"""
from __future__ import annotations

import pickle
import signal
import sys


def warm_up() -> None:
    """Import and run once what the first plot uses: Agg text rendering and the PNG writer."""
    from io import BytesIO

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.image import imsave

    fig = Figure(figsize=(1, 1), dpi=100)
    fig.text(0.1, 0.5, "p0 (a) 10", fontsize=11)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    imsave(BytesIO(), canvas.buffer_rgba(), format="png")


def main() -> int:
    """Serve one request (see the module's docstring); returns the exit status (0: drawn or no request)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    from .plots import pareto_figure
    from ._common import write_rendered

    warm_up()
    size = stdin.readline()
    if not size.strip():
        return 0
    try:
        doc, soc, path = pickle.loads(stdin.read(int(size)))
        write_rendered(pareto_figure(doc, soc=soc), path)
    except Exception as exc:
        stdout.write(f"error {type(exc).__name__}: {exc}".replace("\n", " ").encode() + b"\n")
        stdout.flush()
        return 1
    stdout.write(b"ok\n")
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
