"""Two ways to run a list of sweep jobs: local processes or a Dask cluster.

A job (:class:`parapipe.app.sweep.Job`, run by :func:`parapipe.app.sweep.run_job`) is one model on one SoC
profile; it returns a :class:`parapipe.app.sweep.JobResult`. The job code is part of the installed ``parapipe``
package, not of this folder, so that a Dask scheduler and its workers can unpickle the tasks with only
``pip install 'parapipe[experiments]'`` (README.md in this folder: what a worker machine needs).

Both runners return the results in job order, whatever order they finish in; the search is deterministic
(one CP-SAT worker, fixed seed), so both give the same points.
"""
from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
from typing import Any, Callable, Dict, List, Optional, Sequence

import parapipe
from parapipe.app.sweep import Job, JobResult, result_seed, run_job, throughput_optimal
from parapipe.errors import input_error

__all__ = ["Job", "JobResult", "run_job", "result_seed", "throughput_optimal", "run_local", "connect_dask",
           "check_cluster", "run_dask", "DEFAULT_SCHEDULER_TIMEOUT_S"]

log = logging.getLogger(__name__)

#: Seconds to wait for a Dask scheduler to answer before giving up (a parapipe choice: a live scheduler on a
#: LAN answers in milliseconds; a dead address would otherwise block for distributed's default 30 s).
DEFAULT_SCHEDULER_TIMEOUT_S = 10.0

Progress = Callable[["JobResult"], None]


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
                          "start one ('dask scheduler', then 'dask worker ADDRESS' on each machine that has "
                          f"'pip install parapipe[experiments]=={parapipe.__version__}') "
                          "or omit --scheduler to run on local processes") from None


def _parapipe_probe() -> Callable[[], Dict[str, str]]:
    """A function that tells which parapipe its process imports: ``{"version": "0.1.0"}`` or ``{"error": ...}``.

    It is built inside this function so that Dask pickles it by value (cloudpickle sends functions it cannot
    find by module and name with their code): the scheduler and the workers run it without this folder.
    """
    def probe() -> Dict[str, str]:
        try:
            import parapipe as pp
            import parapipe.app.sweep  # noqa: F401  (what the tasks are unpickled with)
        except Exception as exc:  # any import failure is the answer, not an error of the probe
            return {"error": f"cannot import parapipe.app.sweep ({type(exc).__name__}: {exc})"}
        return {"version": str(pp.__version__)}

    return probe


def check_cluster(client, address: str, timeout_s: float = DEFAULT_SCHEDULER_TIMEOUT_S) -> int:
    """Check that the scheduler and the workers of ``client`` import the parapipe version of this process.

    A scheduler unpickles the task graph and a worker its tasks by importing :mod:`parapipe.app.sweep`; without
    it, or with another version, the jobs would fail with a traceback from inside Dask (or give other results).

    Returns
    -------
    int
        The number of workers.

    Raises
    ------
    InputError
        No worker joins within ``timeout_s``, or the scheduler or a worker cannot import
        ``parapipe.app.sweep`` or has another ``parapipe.__version__`` (naming the machine and the install
        command).
    """
    want = str(parapipe.__version__)
    fix = f"run pip install 'parapipe[experiments]=={want}' there and restart it (experiments/README.md)"
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError:
        raise input_error("--scheduler", address, f"no Dask worker joined within {timeout_s:g} s",
                          f"start workers with 'dask worker {address}'") from None
    probe = _parapipe_probe()
    answers: Dict[str, Any] = {f"the scheduler {address}": client.run_on_scheduler(probe)}
    workers = client.run(probe, on_error="return")
    answers.update((f"the worker {w}", a) for w, a in sorted(workers.items()))
    for where, answer in answers.items():
        if not isinstance(answer, dict):
            answer = {"error": f"the check failed ({type(answer).__name__}: {answer})"}
        if "error" in answer:
            raise input_error("--scheduler", address, f"{where} {answer['error']}", fix)
        if answer["version"] != want:
            raise input_error("--scheduler", address, f"{where} has parapipe {answer['version']}, this "
                              f"client {want}", fix)
    return len(workers)


def run_dask(jobs: Sequence[Job], client, progress: Optional[Progress] = None) -> List[JobResult]:
    """Run ``jobs`` on the Dask cluster of ``client`` (its scheduler and workers import
    :mod:`parapipe.app.sweep` from their installed parapipe: :func:`check_cluster` checks it).

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
