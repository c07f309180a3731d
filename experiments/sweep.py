"""One job per model x SoC, and two ways to run a list of them: local processes or a Dask cluster.

A job (:class:`Job`) imports and coarsens the model, costs it on the SoC profile, searches the parapipe front
and the baselines (:func:`parapipe.search.api.search`), and returns a :class:`JobResult` holding the
``pareto.json`` document, the preparation and search times, and (optionally) the PNG bytes of its figures, so
that results come back the same way from a local process or from a remote Dask worker.

Both runners return the results in job order, whatever order they finish in; the search is deterministic
(one CP-SAT worker, fixed seed), so both give the same points.
"""
from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from parapipe.errors import input_error
from parapipe.mapping import ParetoDoc, Point

log = logging.getLogger(__name__)

#: Seconds to wait for a Dask scheduler to answer before giving up (a parapipe choice: a live scheduler on a
#: LAN answers in milliseconds; a dead address would otherwise block for distributed's default 30 s).
DEFAULT_SCHEDULER_TIMEOUT_S = 10.0

Progress = Callable[["JobResult"], None]


@dataclass(frozen=True)
class Job:
    """One model on one SoC profile, with the search options (plain data: it travels to Dask workers)."""

    model: str
    soc: str
    search: Dict[str, Any] = field(default_factory=dict)
    max_blocks: Optional[int] = 48
    figures: bool = True

    @property
    def key(self) -> str:
        """``<model>__<soc>`` with path characters replaced: file-name stem of the job's figures."""
        stem = lambda s: Path(s).stem if s.endswith((".onnx", ".yaml", ".yml")) else s  # noqa: E731
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


def run_job(job: Job) -> JobResult:
    """Prepare, search and (optionally) draw one model on one SoC.

    Raises
    ------
    parapipe.errors.ParapipeError
        Bad model or profile, or no feasible mapping (carried back to the caller by both runners).
    """
    from parapipe.mapping import doc_from_result
    from parapipe.search.api import SearchOptions, search
    from parapipe.app.prepare import prepare
    from parapipe.app.resolve import soc_ref

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


def result_seed(job: Job) -> int:
    """The search seed of ``job`` (SearchOptions' default when the configuration sets none)."""
    from parapipe.search.api import SearchOptions

    return int(job.search.get("seed", SearchOptions().seed))


def run_local(jobs: Sequence[Job], workers: int, progress: Optional[Progress] = None) -> List[JobResult]:
    """Run ``jobs`` on ``workers`` local processes (spawned: no inherited solver or ORT threads).

    Parameters
    ----------
    jobs : sequence of Job
    workers : int
        Processes (>= 1); 1 runs the jobs in this process, one after another.
    progress : callable, optional
        Called with each result as it finishes.

    Returns
    -------
    list of JobResult
        In the order of ``jobs``.

    Raises
    ------
    parapipe.errors.ParapipeError
        The first job error; the remaining jobs are cancelled.
    """
    if workers <= 1 or len(jobs) <= 1:
        results = []
        for job in jobs:
            results.append(run_job(job))
            if progress:
                progress(results[-1])
        return results
    ctx = multiprocessing.get_context("spawn")
    out: Dict[int, JobResult] = {}
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
        try:
            for fut in cf.as_completed(futures):
                out[futures[fut]] = fut.result()
                if progress:
                    progress(out[futures[fut]])
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return [out[i] for i in range(len(jobs))]


def connect_dask(address: str, timeout_s: float = DEFAULT_SCHEDULER_TIMEOUT_S):
    """A ``distributed.Client`` connected to the scheduler at ``address``.

    Raises
    ------
    InputError
        dask.distributed is not installed, or no scheduler answers at ``address`` within ``timeout_s``.
    """
    try:
        from distributed import Client
    except ImportError:
        raise input_error("--scheduler", address, "dask.distributed is not installed",
                          "pip install 'parapipe[experiments]' (or 'dask[distributed]')") from None
    try:
        return Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise input_error("--scheduler", address, f"no Dask scheduler answers ({reason})",
                          "start one ('dask scheduler' and 'dask worker ADDRESS' in the repository root) "
                          "or omit --scheduler to run on local processes") from None


def run_dask(jobs: Sequence[Job], client, progress: Optional[Progress] = None) -> List[JobResult]:
    """Run ``jobs`` on the Dask cluster of ``client`` (its workers must be able to import ``experiments``:
    start them in the repository root).

    Returns
    -------
    list of JobResult
        In the order of ``jobs``.

    Raises
    ------
    parapipe.errors.ParapipeError
        The first job error (Dask re-raises it here); the remaining jobs are cancelled.
    """
    from distributed import as_completed

    futures = [client.submit(run_job, job, key=f"parapipe-{i}-{job.key}", pure=False)
               for i, job in enumerate(jobs)]
    index = {f.key: i for i, f in enumerate(futures)}
    out: Dict[int, JobResult] = {}
    try:
        with client.as_current():  # as_completed looks the client up; ours is not the global default
            for fut in as_completed(futures):
                out[index[fut.key]] = fut.result()
                if progress:
                    progress(out[index[fut.key]])
    except BaseException:
        client.cancel(futures)
        raise
    return [out[i] for i in range(len(jobs))]
