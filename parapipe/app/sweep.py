"""One job of a sweep (one model on one SoC profile): what a sweep's worker process or Dask worker runs.

A job (:class:`Job`) imports and coarsens the model, costs it on the SoC profile, searches the parapipe front
and the baselines (:func:`parapipe.search.api.search`), and returns a :class:`JobResult` holding the
``pareto.json`` document, the preparation and search times, and (optionally) the PNG bytes of its figures, so
that results come back the same way from a local process or from a remote Dask worker.

This module is part of the installed package on purpose: a Dask scheduler unpickles the task graph, and a Dask
worker the task, by importing the module that defines the function and its argument types; a worker machine
therefore needs only ``pip install 'parapipe[experiments]'`` (the same version as the submitting client), not a
checkout. The driver (``python -m experiments.reproduce``, the tables and the report) stays in the repository's
``experiments/`` folder.
"""
from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from parapipe.mapping import ParetoDoc, Point

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """One model on one SoC profile, with the search options (plain data: it travels to Dask workers).

    ``model`` and ``soc`` are registry / bundled names or file paths; a path must name the same file on the
    machine that runs the job.
    """

    model: str
    soc: str
    search: Dict[str, Any] = field(default_factory=dict)
    max_blocks: Optional[int] = 48
    figures: bool = True

    @property
    def key(self) -> str:
        """``<model>__<soc>`` with path characters replaced: file-name stem of the job's figures."""
        def stem(s: str) -> str:
            return Path(s).stem if s.endswith((".onnx", ".yaml", ".yml")) else s

        return f"{stem(self.model)}__{stem(self.soc)}".replace("/", "_")


@dataclass
class JobResult:
    """What a job returns.

    Attributes
    ----------
    job : Job
    doc : parapipe.mapping.ParetoDoc
        The search result as its pareto.json document.
    prepare_s : float
        Wall time of import, coarsening and costing (the "profiling" part for bundled profiles), seconds.
    search_s : float
        Wall time of the search (``SearchResult.stats["search_s"]``), seconds.
    n_blocks, n_pus : int
        Problem size.
    throughput_point : str
        ``id`` of the throughput-optimal parapipe point (min period, ties: min energy).
    figures : dict
        File name (in ``figures/``) -> PNG bytes; empty when figures are off.
    """

    job: Job
    doc: ParetoDoc
    prepare_s: float
    search_s: float
    n_blocks: int
    n_pus: int
    throughput_point: str
    figures: Dict[str, bytes] = field(default_factory=dict)


def throughput_optimal(points: Sequence[Point], strategy: str) -> Optional[Point]:
    """The point of ``strategy`` with the smallest period, ties broken by the smallest energy (then latency).

    Returns None when the document has no point of that strategy.
    """
    pts = [p for p in points if p.strategy == strategy]
    if not pts:
        return None
    return min(pts, key=lambda p: (p.period_s, p.energy_j, p.latency_s))


def _render(doc: ParetoDoc, point: Point, key: str) -> Dict[str, bytes]:
    from parapipe.report import plot_gantt, plot_pareto, plot_utilisation

    out: Dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="parapipe-fig-") as tmp:
        for suffix, draw in (("front", lambda p: plot_pareto(doc, p)),
                             ("gantt", lambda p: plot_gantt(doc, point, p)),
                             ("utilisation", lambda p: plot_utilisation(doc, point, p))):
            path = Path(tmp) / f"{key}_{suffix}.png"
            draw(path)
            out[path.name] = path.read_bytes()
    return out


def result_seed(job: Job) -> int:
    """The search seed of ``job`` (SearchOptions' default when the configuration sets none)."""
    from parapipe.search.options import SearchOptions

    return int(job.search.get("seed", SearchOptions().seed))


def run_job(job: Job) -> JobResult:
    """Prepare, search and (optionally) draw one model on one SoC.

    Raises
    ------
    parapipe.errors.ParapipeError
        Bad model or profile, or no feasible mapping (carried back to the caller by both runners).
    """
    from parapipe.app.prepare import prepare
    from parapipe.app.resolve import soc_ref
    from parapipe.mapping import doc_from_result
    from parapipe.search.options import SearchOptions
    from parapipe.search.api import search

    t0 = time.perf_counter()
    prep = prepare(job.model, job.soc, max_blocks=job.max_blocks)
    prepare_s = time.perf_counter() - t0
    result = search(prep.problem, SearchOptions(**job.search), terms=prep.terms)
    blocks = {b.name: list(b.ops) for b in prep.block_graph.blocks}
    doc = doc_from_result(result, prep.loaded.name, prep.loaded.sha256, soc_ref(prep.soc), blocks=blocks,
                          search={"max_blocks": prep.max_blocks, "seed": result_seed(job),
                                  "prepare_s": prepare_s, **prep.timings_s})
    best = throughput_optimal(doc.points, "parapipe")
    assert best is not None, "search returned no parapipe point"
    figures = _render(doc, best, job.key) if job.figures else {}
    log.info("%s on %s: %d blocks, search %.2f s", job.model, job.soc, prep.problem.n_blocks,
             result.stats["search_s"])
    return JobResult(job=job, doc=doc, prepare_s=prepare_s, search_s=float(result.stats["search_s"]),
                     n_blocks=prep.problem.n_blocks, n_pus=prep.problem.n_pus, throughput_point=best.id,
                     figures=figures)
