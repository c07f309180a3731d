"""The DP passes of one search, and the record of how exactly each space was searched.

Four passes share one :class:`parapipe.search.transitions.StageCatalog`:

* ``disjoint``: hierarchical mappings (pipelined stages × intra-stage parallelism), each PU in at most one stage;
* ``pipeline``: the same restricted to one PU per stage (the pure-pipeline baseline);
* ``reuse``: hierarchical mappings in which a PU may serve several non-adjacent stages (contains the other two,
  and every pure pipeline in which PUs repeat);
* ``replicated``: the ``disjoint`` space plus replicated stages (a block range run whole by >= 2 replicas on
  disjoint PUs that take frames in turn; :mod:`.replicate`), memory limits respected. Up to ``exact_max_cells``
  replicas may be PU groups and the pass is exact (unless its time limit fires); above it replicas are single
  PUs, with its own label cap and stage-boundary restriction, and states keyed on replica PUs only.

Up to ``exact_max_cells`` (blocks × PUs) every pass is exact: no label grid, no label cap, stage boundaries
anywhere; the reuse pass still has a work budget and, if it runs out, is re-run approximately and marked so.

Budgets are counted work (:mod:`.budget`), set in deterministic seconds by the options' ``*_time_limit_s``: where a
pass stops depends on the inputs and options only, not on the machine's load. Each budget also has a wall-clock
safety limit; a pass it stops is reported in ``SpaceReport.stopped_by`` (and by the search as ``stopped_early``). Above
it, each pass runs with the bounds of :class:`parapipe.search.options.SearchOptions`, and :class:`SpaceReport` says
which of them cut anything (pareto.json ``search.spaces``).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..cost.mapping import Mapping
from ..cost.problem import MappingProblem
from ..errors import InfeasibleError
from .budget import DP_WORK_PER_S, PERIOD_WORK_PER_S, REPLICATED_WORK_PER_S, SAFETY_FACTOR, Budget
from .dp import DPDeadline, DPOptions, DPResult, dp_front
from .stages import STAGE_KINDS
from .replicate import ReplicatedDeadline, replicated_front
from .transitions import StageCatalog

__all__ = ["SpaceReport", "run_passes", "pass_workers", "period_pass", "import_solvers", "cpsat_wanted",
           "PARALLEL_MIN_CELLS"]

log = logging.getLogger(__name__)


@dataclass
class SpaceReport:
    """How one space was searched (written to pareto.json as ``search.spaces.<name>``).

    ``exact`` is true when the front of the space was computed exactly; otherwise the other fields say what
    bounded it: ``epsilon`` (label grid, a fraction of the total work), ``max_labels`` (labels per DP state;
    ``capped_states`` states lost labels to it), ``max_cut_tensors`` (stage boundaries only where at most that
    many tensors are live; ``cut_limited`` whether that excluded any), ``time_limit_s`` (the work budget in
    deterministic seconds, :mod:`.budget`; ``work_limit`` units, ``work`` spent; ``timed_out`` when it ran out,
    ``stopped_by`` saying whether the work budget or the wall-clock safety limit stopped it), or ``skipped`` (why
    the space was not searched at all).
    """

    searched: bool
    exact: bool
    epsilon: float = 0.0
    max_labels: int = 0
    max_cut_tensors: Optional[int] = None
    time_limit_s: Optional[float] = None
    capped_states: int = 0
    cut_limited: bool = False
    timed_out: bool = False
    skipped: str = ""
    states: int = 0
    seconds: float = 0.0
    work: Optional[int] = None
    work_limit: Optional[int] = None
    stopped_by: str = ""

    def charge(self, budget: Budget) -> None:
        """Record ``budget``'s count and limit."""
        self.work, self.work_limit = int(budget.used), None if budget.limit is None else int(budget.limit)

    def to_json(self) -> Dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", None)}


def _run(problem: MappingProblem, dpo: DPOptions, catalog: StageCatalog, progress=None,
         limit_s: Optional[float] = None) -> Tuple[Optional[DPResult], SpaceReport]:
    t0 = time.monotonic()
    rep = SpaceReport(searched=True, exact=False, epsilon=dpo.epsilon, max_labels=dpo.max_labels,
                      max_cut_tensors=dpo.max_cut_tensors, time_limit_s=limit_s)
    try:
        res = dp_front(problem, dpo, progress=progress, catalog=catalog)
    except DPDeadline as exc:
        rep.timed_out, rep.searched = True, False
        rep.skipped, rep.stopped_by = str(exc), exc.reason
        res = None
    except InfeasibleError as exc:
        rep.skipped = f"no mapping in this space ({exc})"
        rep.exact = dpo.epsilon == 0 and dpo.max_labels == 0 and dpo.max_cut_tensors is None
        res = None
    if res is not None:
        rep.exact = res.exact(dpo.epsilon)
        rep.capped_states, rep.cut_limited, rep.states = res.capped_states, res.cut_limited, res.n_states
    if dpo.budget is not None:
        rep.charge(dpo.budget)
    rep.seconds = time.monotonic() - t0
    return res, rep


def run_passes(problem: MappingProblem, opts, catalog: StageCatalog,
               progress: Optional[Callable[[int], None]] = None
               ) -> Tuple[Dict[str, List[Mapping]], Dict[str, SpaceReport], int]:
    """Run the disjoint, pipeline, replicated and reuse passes for ``opts`` (a ``SearchOptions``).

    With :func:`pass_workers` >= 2 the replicated and reuse passes run in forked worker processes
    (:mod:`.parallel`) while this process runs the disjoint pass (which drives ``progress``); the results are
    those of the passes run one after another here (the passes are deterministic and share nothing but the
    memoised ``catalog``, whose run numbering does not reach a result).

    Returns
    -------
    (mappings, reports, states)
        ``mappings[name]``: the front mappings of each pass (empty when it found none); ``reports[name]``:
        :class:`SpaceReport`; ``states``: DP states over all passes.
    """
    small = problem.n_blocks * problem.n_pus <= opts.exact_max_cells
    workers = pass_workers(problem, opts)
    log.debug("%s: DP passes in %d process(es)", problem.name, workers)
    if workers >= 2:
        from .parallel import run_in_workers

        # the reuse pass is forked with the budget it gets when the disjoint pass finds a mapping (nearly always);
        # it is only needed otherwise beyond reuse_max_blocks, then run here after the disjoint pass
        jobs: Dict[str, Tuple[Callable[..., Any], tuple]] = {}
        if opts.reuse_pus and problem.n_blocks <= opts.reuse_max_blocks:
            jobs["reuse"] = (_reuse, (problem, opts, catalog, small, True))
        jobs["replicated"] = (_replicated, (problem, opts, catalog, small))
        for kind in STAGE_KINDS:  # children inherit the catalogue: built here once, not once per process
            for i in range(problem.n_blocks):
                catalog.exits(i, kind)
        mine: Dict[str, Any] = {}

        def here() -> Tuple[Dict[str, List[Mapping]], Dict[str, SpaceReport], int]:
            mine["disjoint"] = _disjoint(problem, opts, catalog, small, progress)
            return mine["disjoint"]

        def idle() -> None:
            import_solvers(cpsat=cpsat_wanted(problem, opts, mine["disjoint"][0]["disjoint"]))

        out, reports, states, results = run_in_workers(jobs, workers - 1, here, idle=idle if opts.polish else None)
        for name in ("replicated", "reuse"):
            if name == "reuse" and not out["disjoint"]:
                results.pop(name, None)  # its budget depends on the disjoint pass's (empty) result: run it again
            got = results.get(name)
            if got is None:
                got = (_reuse(problem, opts, catalog, small, bool(out["disjoint"])) if name == "reuse"
                       else _replicated(problem, opts, catalog, small))
            out[name], reports[name] = got
            states += reports[name].states
        return out, reports, states
    out, reports, states = _disjoint(problem, opts, catalog, small, progress)
    out["replicated"], reports["replicated"] = _replicated(problem, opts, catalog, small)
    out["reuse"], reports["reuse"] = _reuse(problem, opts, catalog, small, bool(out["disjoint"]))
    return out, reports, states + reports["replicated"].states + reports["reuse"].states


def import_solvers(cpsat: bool = True) -> None:
    """Import OR-Tools' GLOP (the bounds' LP) and, with ``cpsat``, CP-SAT (the polish's solver) now, while this
    process would only wait for the DP passes' workers: each is otherwise imported on first use, on the search's
    critical path (``python -X importtime -c "from ortools.sat.python import cp_model"``: 0.22 s, 0.17 s of it
    pandas, which ``cp_model`` imports; ``ortools.linear_solver.pywraplp``: 0.04 s, both on a 2-core x86-64 VM)."""
    from ortools.linear_solver import pywraplp  # noqa: F401

    if cpsat:
        from ortools.sat.python import cp_model  # noqa: F401


def cpsat_wanted(problem: MappingProblem, opts, disjoint: List[Mapping]) -> bool:
    """Whether the polish (``opts.polish``) will hand a stage to CP-SAT that is known before the other passes end:
    one of the ``disjoint`` pass's mappings or of the parallel baselines has a stage
    :func:`parapipe.search.polish.polishable`. Where none has, CP-SAT's import (0.2 s, :func:`import_solvers`)
    would only outlast the workers (DenseNet-121 on the A1000 profile: no stage to polish, and the import ran
    0.12 s past the last worker); a mapping of another pass that wants it imports it on first use."""
    from .baselines import parallel_mappings
    from .polish import polishable

    return bool(opts.polish) and any(polishable(st, opts.cpsat_max_blocks) for m in
                                     [*disjoint, *parallel_mappings(problem)] for st in m.stages)


PARALLEL_MIN_CELLS = 96
"""Blocks × PUs from which :func:`pass_workers` forks worker processes. Forking and collecting two workers takes
10-20 ms and the workers repeat some memoised work (0.1-0.4 CPU s on DenseNet-121); the passes of the zoo models
take 0.16 s (AlexNet, 13 blocks × 4 PUs) to 2 s (ResNet-50, 48 × 4) in one process, 0.7 s from VGG-19's 24 × 4 on
(the A311D and A1000 profiles; pareto.json ``search.spaces.<pass>.seconds`` of ``parapipe optimize``)."""


def pass_workers(problem: MappingProblem, opts) -> int:
    """Processes the DP passes of ``problem`` run in: ``opts.workers`` (1: all in this process; at most 3), or
    with ``opts.workers == 0`` (automatic) one process per idle CPU plus one, at most 3 (this process and the
    replicated and reuse passes): idle CPUs are those this process may run on (``os.sched_getaffinity``, at least
    2) less the other processes runnable now (:func:`_other_runnable`; workers would only take turns with them).
    Three processes on two idle CPUs share them out better than two (the parent would run the disjoint and
    replicated passes in turn): DenseNet-121 on the A1000 profile, passes 1.26 s in one process, 0.96 s in two,
    0.78 s in three (best of 8 runs of :func:`run_passes` with ``SearchOptions.workers`` 1, 2, 3 on a 2-core
    x86-64 VM); 1 below :data:`PARALLEL_MIN_CELLS` blocks × PUs or where the ``fork`` start method does not
    exist. The search forks its CP-SAT polish next to the bounds where this is 2 or more. Whatever the count, the
    results are the same."""
    if opts.workers == 1 or not hasattr(os, "fork"):
        return 1
    if opts.workers > 1:
        return min(opts.workers, 3)
    if problem.n_blocks * problem.n_pus < PARALLEL_MIN_CELLS:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return 1
    return max(1, min(3, 1 + cpus - _other_runnable()))


def _other_runnable() -> int:
    """Processes other than this one and its own children running or waiting for a CPU now: the least, over
    :data:`LOAD_READINGS` readings, of Linux ``/proc/loadavg``'s fourth field (proc(5)) less this process and its
    children in state R (``/proc/<pid>/stat``), such as the plot process importing matplotlib
    (:mod:`parapipe.app.plot_worker`), whose work is this command's own and is done well before the search's;
    elsewhere the 1-minute load average less this process, rounded.

    Measured: with the plot process counted, ``parapipe optimize densenet121 --soc black_sesame_a1000`` forked one
    worker, not two, and ran the replicated pass after the disjoint pass here (0.32 s more on the search's
    critical path of a 2-core x86-64 VM)."""
    others = None
    for _ in range(LOAD_READINGS):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, IndexError, ValueError):
            break
        now = max(0, running - 1 - _running_children())
        others = now if others is None else min(others, now)
        if others == 0:
            break
        time.sleep(LOAD_READING_GAP_S)
    if others is not None:
        return others
    try:
        return max(0, int(round(os.getloadavg()[0])) - 1)
    except (AttributeError, OSError):
        return 0


LOAD_READINGS = 3
"""Readings of ``/proc/loadavg`` :func:`_other_runnable` takes the least of, :data:`LOAD_READING_GAP_S` apart: one
reading also counts a kernel thread that runs for microseconds (on an idle 2-core x86-64 VM, ``python -c`` reading
it 2000 times 0.5 ms apart counted one other process in 10 of them)."""

LOAD_READING_GAP_S = 0.001


def _running_children() -> int:
    """Children of this process in state R (Linux ``/proc/self/task/<tid>/children`` and ``/proc/<pid>/stat``);
    0 where those cannot be read."""
    try:
        children = set()
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                children.update(f.read().split())
    except OSError:
        return 0
    n = 0
    for pid in children:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:  # it has exited
            continue
        n += stat[stat.rfind(")") + 2:stat.rfind(")") + 3] == "R"
    return n


def _dp_options(problem: MappingProblem, opts, small: bool) -> DPOptions:
    if small:
        return DPOptions(max_stages=opts.max_stages)
    return DPOptions(max_stages=opts.max_stages, epsilon=opts.epsilon, max_labels=opts.max_labels,
                     max_cut_tensors=opts.max_cut_tensors)


def _disjoint(problem: MappingProblem, opts, catalog: StageCatalog, small: bool,
              progress: Optional[Callable[[int], None]]
              ) -> Tuple[Dict[str, List[Mapping]], Dict[str, SpaceReport], int]:
    """The ``disjoint`` and ``pipeline`` passes (the latter taken from the former where it is the same)."""
    dpo = _dp_options(problem, opts, small)
    out: Dict[str, List[Mapping]] = {}
    reports: Dict[str, SpaceReport] = {}
    states = 0
    res, reports["disjoint"] = _run(problem, dpo, catalog, progress)
    out["disjoint"] = res.mappings if res is not None else []
    states += reports["disjoint"].states
    pipe = replace(dpo, kinds=("single-pu",))
    if res is not None and res.kinds_used == pipe.kinds and dpo.budget is None:
        # the disjoint pass recorded single-PU transitions only: the pipeline pass would record the same ones
        # in the same order (dp.DPResult.kinds_used), so its result is the same
        out["pipeline"] = list(res.mappings)
        reports["pipeline"] = replace(reports["disjoint"], seconds=0.0)
    else:
        res, reports["pipeline"] = _run(problem, pipe, catalog, None)
        out["pipeline"] = res.mappings if res is not None else []
        states += reports["pipeline"].states
    return out, reports, states


def _reuse(problem: MappingProblem, opts, catalog: StageCatalog, small: bool, disjoint_found: bool
           ) -> Tuple[List[Mapping], SpaceReport]:
    """The ``reuse`` pass; its budget is ten times larger when the disjoint pass found no mapping
    (``disjoint_found`` false), and it is skipped above ``reuse_max_blocks`` blocks unless so."""
    if not opts.reuse_pus:
        return [], SpaceReport(searched=False, exact=False, skipped="reuse_pus is off")
    if problem.n_blocks > opts.reuse_max_blocks and disjoint_found:
        return [], SpaceReport(searched=False, exact=False,
                               skipped=f"more than reuse_max_blocks={opts.reuse_max_blocks} blocks")
    dpo = _dp_options(problem, opts, small)
    limit = opts.reuse_time_limit_s if disjoint_found else 10 * opts.reuse_time_limit_s
    approx = DPOptions(max_stages=opts.max_stages, epsilon=max(dpo.epsilon, opts.reuse_epsilon),
                       max_labels=opts.reuse_max_labels, max_cut_tensors=opts.max_cut_tensors, reuse_pus=True)
    sf = opts.wall_safety_factor
    res = None
    if small:
        res, rep = _run(problem, replace(dpo, reuse_pus=True, budget=Budget.of_seconds(limit, DP_WORK_PER_S, sf)),
                        catalog, None, limit)
        if res is None and rep.timed_out:
            log.info("%s: exact PU-reuse search used its budget (%s); searching it approximately", problem.name,
                     rep.skipped)
    if res is None and (not small or rep.timed_out):
        res, rep = _run(problem, replace(approx, budget=Budget.of_seconds(limit, DP_WORK_PER_S, sf)), catalog,
                        None, limit)
        if rep.timed_out:
            log.info("%s: PU-reuse search skipped: %s", problem.name, rep.skipped)
    return (res.mappings if res is not None else []), rep


def _replicated(problem: MappingProblem, opts, catalog: StageCatalog, small: bool
                ) -> Tuple[List[Mapping], SpaceReport]:
    """The ``replicated`` pass (:func:`parapipe.search.replicate.replicated_front`) for ``opts``: exact up to
    ``exact_max_cells`` (PU-group replicas, no cap) unless its time limit fires; else single-PU replicas, the
    label cap ``replicate_max_labels``, stage boundaries where at most ``replicate_max_cut_tensors`` tensors are
    live and states keyed on replica PUs only (``coarse``)."""
    if not opts.replicate:
        return [], SpaceReport(searched=False, exact=False, skipped="replicate is off")
    if problem.n_pus < 2:
        return [], SpaceReport(searched=True, exact=True, skipped="one PU: no replicated stage exists")
    t0 = time.monotonic()
    limit = opts.replicate_time_limit_s
    kw: Dict[str, Any]
    if small:
        kw = dict(group_replicas=True, max_labels=0, max_cut_tensors=None)
    else:  # zoo (48 blocks x 4 PUs): 0.05-0.4 s; 8 labels and 2-tensor cuts took 1-3 s (benchmarks/search_bench.py)
        limit = opts.replicate_large_time_limit_s
        kw = dict(group_replicas=False, max_labels=opts.replicate_max_labels,
                  max_cut_tensors=opts.replicate_max_cut_tensors, coarse=True)
    rep = SpaceReport(searched=True, exact=False, max_labels=kw["max_labels"], max_cut_tensors=kw["max_cut_tensors"],
                      time_limit_s=limit)
    budget = Budget.of_seconds(limit, REPLICATED_WORK_PER_S, opts.wall_safety_factor)
    try:
        res = replicated_front(problem, catalog, max_stages=opts.max_stages, budget=budget, **kw)
    except ReplicatedDeadline as exc:
        rep.timed_out, rep.searched, rep.skipped, rep.stopped_by = True, False, str(exc), exc.reason
        rep.charge(budget)
        rep.seconds = time.monotonic() - t0
        log.info("%s: replicated-stage search skipped: %s", problem.name, exc)
        return [], rep
    rep.seconds = time.monotonic() - t0
    rep.charge(budget)
    if res is None:
        rep.exact = small
        rep.skipped = "no mapping in this space fits"
        return [], rep
    rep.exact = small and res.exact
    rep.capped_states, rep.cut_limited, rep.states = res.capped_states, res.cut_limited, res.n_states
    return res.mappings, rep


def period_pass(problem: MappingProblem, best_period_s: float, catalog: StageCatalog, guide,
                time_limit_s: float, epsilon: float = 0.0, safety_factor: Optional[float] = None,
                max_stages: Optional[int] = None) -> Tuple[Optional[Mapping], Dict[str, Any]]:
    """The least period over the PU-reuse space (every hierarchical mapping the DP can build, PUs shared or
    not; every PU at its highest operating point, where times are least; at most ``max_stages`` stages), searched exactly with busy-time labels only, pruned at ``best_period_s`` and by ``guide`` (the
    relaxation's Lagrangian cost-to-go, :mod:`.relaxation`).

    Returns
    -------
    (mapping, report)
        ``mapping``: one mapping with a period below ``best_period_s``, or None if there is none (then
        ``best_period_s`` is the least period of the space: ``report["exact"]``) or time ran out. With
        ``epsilon > 0`` labels are merged on that grid (a fraction of the total work): not exact then.
        ``time_limit_s`` is a work budget in deterministic seconds (:mod:`.budget`); ``report`` gives ``work``,
        ``work_limit`` and, when the budget stopped the pass, ``timed_out`` and ``stopped_by``. The pass gives a
        mapping only if it finishes, so it also stops once its work so far, extrapolated linearly over the
        blocks, passes the budget (then ``projected_work``; :meth:`parapipe.search.budget.Budget.over_projected`):
        on the zoo models × bundled profiles every pass that finished within its budget stayed below that
        projection at every block (``python benchmarks/search_bench.py --period-curves`` prints the curves).
    """
    t0 = time.monotonic()
    budget = Budget.of_seconds(time_limit_s, PERIOD_WORK_PER_S, SAFETY_FACTOR if safety_factor is None else safety_factor)
    dpo = DPOptions(reuse_pus=True, period_below=best_period_s * (1 - 1e-9), guide=guide, epsilon=epsilon,
                    budget=budget, max_ops_only=True, project_budget=True, max_stages=max_stages)
    report: Dict[str, Any] = {"searched": True, "exact": False, "epsilon": epsilon, "time_limit_s": time_limit_s}
    mapping = None
    try:
        res = dp_front(problem, dpo, catalog=catalog)
        mapping = res.mappings[0]
        report["exact"], report["states"] = epsilon == 0, res.n_states
    except InfeasibleError:
        report["exact"] = epsilon == 0
    except DPDeadline as exc:
        report["timed_out"], report["skipped"], report["stopped_by"] = True, str(exc), exc.reason
    report.update(budget.to_json())
    report["seconds"] = time.monotonic() - t0
    return mapping, report
