"""Outer level of the hierarchical search: dynamic programming over stage boundaries × stages.

Blocks are in a topological order; a stage is a contiguous range ``[i, j)`` of that order (a downward-closed cut,
as in PipeDream's DP) run by one of the stage kinds of :mod:`.stages` (one PU, or a PU group list-scheduled).
States are ``(j, used PUs, PUs of the live producers at j[, number of stages])``: the live producers are the
blocks before ``j`` whose outputs are read at or after ``j``, and their PUs are exactly what the next stages'
input transfers depend on. Each state keeps the Pareto set of its labels; every final objective is monotone in
the label, so keeping only non-dominated labels loses no Pareto-optimal mapping of the space searched.

Two spaces:

* ``reuse_pus=False``: each PU serves at most one stage (the stage groups are disjoint). The period is then the
  largest stage time and a label is ``(max T_s, latency, E_dyn)`` with ``energy = E_dyn + (ΣP_idle +
  P_static)·period``.
* ``reuse_pus=True``: a PU may serve several non-adjacent stages (its busy time is the sum); the label carries the
  busy time of every PU, ``(busy_1..busy_k, latency, E_dyn)``, and the state drops the used-PU set. This space
  contains the first one and every pure pipeline in which PUs repeat.

With ``epsilon = 0``, no label cap, no cut restriction and no budget the result is the exact front of the space
(tests check it against brute force). ``epsilon > 0`` merges labels closer than ``epsilon`` × the total work on a
grid (ε-dominance, Laumanns et al., Evolutionary Computation 10(3), 2002), ``max_labels`` keeps at most that many
labels per state, ``max_cut_tensors`` restricts stage boundaries, ``budget`` (counted work,
:mod:`.budget`) stops the DP: each bounds the work on large problems and :class:`DPResult` says which of them cut anything.

**Operating points.** With a catalogue built over operating points (:class:`.transitions.StageCatalog`
``op_sets``), every run is a stage at one combination of its PUs' points, and the front covers mappings ×
operating points. A PU that serves several stages at different points pays its ``transition_s`` per switch per
inference (:func:`parapipe.cost.schedule.switching_s`: busy time, not latency). Disjoint groups never switch. With
``reuse_pus`` and a PU whose points cost a switch, the state also carries, per PU, the points of its first and
last stage so far: a stage at another point than the last adds ``transition_s`` to that PU's busy time in the
label, and the final labels add the switch from the last stage back to the first (the next inference) — the
labels are then the cost model's and the front stays exact. Variants that another variant of the same stage
dominates are skipped (:attr:`.transitions.Exits.plain`) except in that case, where a dominated point can still
save a switch.

Implementation: transitions are recorded as scalars ``(source state, stage time, energy, run)`` and the labels of
a state are built in one vectorised step when the state is finalised (all its sources lie at earlier positions).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..cost.mapping import Mapping, StageMapping
from ..cost.problem import MappingProblem
from .budget import Budget, BudgetExceeded
from .labels import LabelStore
from .pareto import pareto_mask, spread_rows
from .stages import STAGE_KINDS, StageRun
from .transitions import StageCatalog

__all__ = ["DPOptions", "DPDeadline", "DPResult", "dp_front", "rebuild"]

log = logging.getLogger(__name__)


@dataclass
class DPOptions:
    """Options of :func:`dp_front`.

    Attributes
    ----------
    groups : list of tuple of int or None
        PU groups a stage may use (PU indices); ``None`` = every non-empty subset of at most ``max_group_size``.
    max_group_size : int or None
        Largest group when ``groups`` is None (None = all PUs).
    kinds : tuple of str
        Stage kinds (:data:`parapipe.search.stages.STAGE_KINDS`); ``("single-pu",)`` gives pure pipelines.
    max_stages : int or None
        Most stages in a mapping (None = unbounded).
    epsilon : float
        Relative grid for label merging (0 = exact).
    max_labels : int
        Most labels kept per state (0 = unbounded); the kept ones are spread along the period axis.
    reuse_pus : bool
        Let a PU serve several non-adjacent stages (see the module docstring).
    max_cut_tensors : int or None
        Stage boundaries only where at most this many producers are live (None = anywhere). Cuts through the
        middle of a wide parallel section move many tensors and multiply the DP states (stage boundaries are
        best at cut points where few bytes cross).
    budget : parapipe.search.budget.Budget or None
        Work budget: label candidates built plus transitions recorded, checked after each block position; past
        it (or past its wall-clock safety limit) the DP gives up with :class:`DPDeadline`.
    period_below : float or None
        Period-only search (with ``reuse_pus``): labels are busy times only, and only those that can still end
        below this period are kept; the result is one mapping of least period, if any is below it.
    guide : tuple or None
        ``(λ, togo)`` for ``period_below``: see :class:`parapipe.search.labels.LabelStore`.
    max_ops_only : bool
        Use only the catalogue's runs with every PU at its highest operating point.
    per_pu_front : int
        When > 0: keep the final labels non-dominated in (busy time of every PU, latency, dynamic energy) — with
        ``reuse_pus`` — or in (PUs used, largest stage time, latency, dynamic energy) without, instead of the three
        objectives: the front for every subset of the PUs at once (the candidates of a multi-model workload, whose
        period depends on each PU's busy time), at most this many of them spread over the front
        (:func:`parapipe.search.pareto.spread_rows`; ``DPResult.thinned`` then says how many there were).
    project_budget : bool
        Also give up once the work counted so far, extrapolated linearly over the block positions, passes the
        budget (:meth:`parapipe.search.budget.Budget.over_projected`): for a pass of no use unless it finishes.
    """

    groups: Optional[List[Tuple[int, ...]]] = None
    max_group_size: Optional[int] = None
    kinds: Tuple[str, ...] = STAGE_KINDS
    max_stages: Optional[int] = None
    epsilon: float = 0.0
    max_labels: int = 0
    reuse_pus: bool = False
    max_cut_tensors: Optional[int] = None
    budget: Optional[Budget] = None
    period_below: Optional[float] = None
    guide: Optional[tuple] = None
    max_ops_only: bool = False
    per_pu_front: int = 0
    project_budget: bool = False


class DPDeadline(BudgetExceeded):
    """The DP ran past ``DPOptions.budget`` (the caller keeps what it had)."""


@dataclass
class DPResult:
    """Non-dominated mappings found by the DP, with their objectives (period_s, latency_s, energy_j).

    ``capped_states`` counts the states where ``max_labels`` dropped non-dominated labels, ``cut_limited``
    whether ``max_cut_tensors`` excluded a boundary; with ``epsilon == 0`` and both zero/false the front is
    exact for the space. ``kinds_used``: the stage kinds of the transitions recorded (a run with the same
    options restricted to these kinds records the same transitions in the same order, so returns the same
    result).
    """

    mappings: List[Mapping]
    objectives: np.ndarray  # (m, 3)
    n_states: int = 0
    n_labels: int = 0
    n_transitions: int = 0
    capped_states: int = 0
    cut_limited: bool = False
    thinned: int = 0  # with DPOptions.per_pu_front: how many non-dominated labels were thinned to the mappings
    kinds_used: Tuple[str, ...] = ()

    def exact(self, epsilon: float) -> bool:
        """True if the run with grid ``epsilon`` returned the exact front of its space."""
        return epsilon == 0 and self.capped_states == 0 and not self.cut_limited


def dp_front(problem: MappingProblem, options: Optional[DPOptions] = None,
             progress: Optional[Callable[[int], None]] = None, catalog: Optional[StageCatalog] = None) -> DPResult:
    """Pareto front (period, latency, energy) of hierarchical mappings of ``problem``.

    Parameters
    ----------
    problem : MappingProblem
    options : DPOptions, optional
    progress : callable, optional
        Called with the number of block positions finished (0..n) for progress bars.
    catalog : StageCatalog, optional
        Stage runs and moves of ``problem`` shared with other passes (built here if not given).

    Returns
    -------
    DPResult

    Raises
    ------
    parapipe.errors.InfeasibleError
        If no mapping exists (e.g. groups exclude every PU that can run some block).
    DPDeadline
        If ``options.budget`` runs out before the DP ends.
    ValueError
        An unknown stage kind.
    """
    from ..errors import InfeasibleError

    opts = options or DPOptions()
    n, k = problem.n_blocks, problem.n_pus
    cat = catalog if catalog is not None else StageCatalog(problem)
    allowed = {tuple(sorted(g)) for g in opts.groups} if opts.groups is not None else None
    top = opts.max_group_size
    live = cat.live
    cut_ok = [opts.max_cut_tensors is None or len(live[j]) <= opts.max_cut_tensors or j == n
              for j in range(n + 1)]
    cut_limited = not all(cut_ok)
    idle_static = float(problem.idle_power_w.sum()) + problem.static_power_w
    reuse = opts.reuse_pus
    nb = k if reuse else 1  # label columns holding busy time (per PU, or the largest stage time)
    staged = opts.max_stages is not None
    grid = None
    if opts.epsilon > 0:  # a fraction of the total work on the fastest PUs
        ref_t = float(np.nanmin(np.where(np.isfinite(problem.time_s), problem.time_s, np.nan), axis=1).sum())
        ref_e = float(np.abs(np.nan_to_num(problem.time_s * (problem.active_power_w - problem.idle_power_w),
                                           posinf=0.0)).min(axis=1).sum()) or 1.0
        extra = [] if opts.period_below is not None else [ref_t, ref_e]
        grid = np.array([ref_t] * nb + extra) * opts.epsilon

    def usable(i: int) -> list:
        return [(rid, ex) for kind in opts.kinds for rid, ex in cat.exits(i, kind)
                if (allowed is None or ex.run.group in allowed) and (top is None or len(ex.run.group) <= top)
                and not (opts.max_ops_only and ex.run.ops is not None)]

    # switching costs (module docstring): per PU its transition time when it has several points to choose from
    trans = [0.0] * k
    if reuse and cat.op_sets is not None and problem.operating_points is not None and not opts.max_ops_only:
        for p, table in enumerate(problem.operating_points):
            if table is not None and len(cat.op_sets[p]) > 1:
                trans[p] = float(table.transition_s)
    track = any(t > 0 for t in trans)
    max_ops = [problem.max_op(p) for p in range(k)]

    period_only = opts.period_below is not None
    rest = None
    if period_only:
        rest = np.concatenate([np.cumsum(np.min(problem.time_s, axis=1)[::-1])[::-1], [0.0]]).tolist()
    store = LabelStore(per_pu=reuse, n_pus=k, with_latency_energy=not period_only, shares=cat.shares, grid=grid,
                       max_labels=opts.max_labels, admit_below=opts.period_below, rest_s=rest, guide=opts.guide)
    keys = store.keys
    pending: Dict[tuple, list] = {}
    by_pos: Dict[int, List[tuple]] = {}
    n_trans = spent = 0
    kinds_used = set()
    for i in range(n):
        here = [store.start((0, 0, (), 0) + (((None,) * k,) if track else ()))] if i == 0 else [store.add(key, pending.pop(key))
                                                            for key in by_pos.pop(i, [])]
        here = [sid for sid in here if store.size(sid)]
        runs_here = usable(i) if here else []
        for sid in here:
            _, used_mask, livepus, n_st = keys[sid][:4]
            if staged and n_st >= opts.max_stages:
                continue
            for run_id, ex in runs_here:
                if not reuse and used_mask & ex.mask:
                    continue
                recorded = n_trans
                mask = 0 if reuse else used_mask | ex.mask
                opkey: tuple = ()
                sw = None
                if track:
                    opst = list(keys[sid][4])
                    swl = [0.0] * k
                    run = ex.run
                    for x, p in enumerate(run.group):
                        o = max_ops[p] if run.ops is None else run.ops[x]
                        cur = opst[p]
                        if cur is None:
                            opst[p] = (o, o)
                        elif cur[1] != o:
                            swl[p] = trans[p]
                            opst[p] = (cur[0], o)
                    opkey = (tuple(opst),)
                    sw = tuple(swl) if any(swl) else None
                for j, t_s, dyn, new_live in ex.moves(livepus, track):
                    if not cut_ok[j]:
                        continue
                    nkey = (j, mask, new_live, n_st + 1 if staged else 0) + opkey
                    bucket = pending.get(nkey)
                    if bucket is None:
                        bucket = pending[nkey] = []
                        by_pos.setdefault(j, []).append(nkey)
                    bucket.append((sid, t_s, dyn, run_id) if sw is None else (sid, t_s, dyn, run_id, sw))
                    n_trans += 1
                if n_trans > recorded:
                    kinds_used.add(ex.run.kind)
        if progress is not None:
            progress(i + 1)
        if opts.budget is not None:
            opts.budget.spend(store.n_candidates + n_trans - spent)
            spent = store.n_candidates + n_trans
            why = opts.budget.over_projected(i + 1, n) if opts.project_budget else opts.budget.over()
            if why is not None:
                opts.budget.stop_point = f"block {i + 1} of {n}"
                projected = "" if opts.budget.projected is None else f", projected {opts.budget.projected:.3g} units"
                raise DPDeadline(f"DP stopped at block {i + 1} of {n} ({why}{projected})", why)
    finals = by_pos.pop(n, [])
    if not finals and period_only:
        raise InfeasibleError(f"{problem.name}: no mapping with a period below {opts.period_below:.6g} s")
    if not finals:
        raise InfeasibleError(f"{problem.name}: no mapping exists with the allowed PU groups; some block cannot run "
                              "on any allowed PU — allow more PUs (--pus)")
    objs, ref_sid, ref_row = [], [], []
    wide: list = []
    for key in finals:  # final labels are judged on the final objectives only (3 numbers)
        sid = store.add(key, pending.pop(key), prune=False)
        v = store.array(sid)
        if track:  # the switch from the last stage back to the first one (module docstring)
            wrap = [trans[p] if st is not None and st[0] != st[1] else 0.0 for p, st in enumerate(key[4])]
            if any(wrap):
                v = v.copy()
                v[:, :nb] += np.array(wrap)
        period = v[:, :nb].max(axis=1)
        if period_only:
            objs.append(np.column_stack([period, np.zeros(len(v)), np.zeros(len(v))]))
        else:
            objs.append(np.column_stack([period, v[:, nb], v[:, nb + 1] + idle_static * period]))
        ref_sid.append(np.full(len(v), sid))
        ref_row.append(np.arange(len(v)))
        if opts.per_pu_front:  # module docstring of DPOptions.per_pu_front
            used = np.array([key[1] >> p & 1 for p in range(k)], dtype=float)
            wide.append(np.column_stack([v[:, :k], v[:, nb:]]) if reuse else
                        np.column_stack([np.tile(used, (len(v), 1)), v]))
    objs_a = np.concatenate(objs)
    if period_only and not len(objs_a):
        raise InfeasibleError(f"{problem.name}: no mapping with a period below {opts.period_below:.6g} s")
    wide_a = np.concatenate(wide) if wide else None
    mask = pareto_mask(objs_a if wide_a is None else wide_a)
    thinned = 0
    if wide_a is not None and mask.sum() > opts.per_pu_front:
        thinned = int(mask.sum())
        on = np.flatnonzero(mask)
        mask = np.zeros_like(mask)
        mask[on[spread_rows(wide_a[on], opts.per_pu_front)]] = True
    sids, rows = np.concatenate(ref_sid)[mask], np.concatenate(ref_row)[mask]
    mappings = [rebuild(store, cat.runs, int(s), int(r)) for s, r in zip(sids, rows)]
    return DPResult(mappings=mappings, objectives=objs_a[mask], n_states=len(keys), n_labels=store.n_labels,
                    n_transitions=n_trans, capped_states=store.capped_states, cut_limited=cut_limited,
                    thinned=thinned,
                    kinds_used=tuple(k for k in opts.kinds if k in kinds_used))


def rebuild(store: LabelStore, runs: List[StageRun], sid: int, row: int) -> Mapping:
    """The mapping of label ``row`` of state ``sid`` (keys start with the stop position), following
    back-pointers to the start state."""
    stages: List[StageMapping] = []
    while True:
        back = store.back(sid, row)
        if back is None:
            break
        src, src_row, run_id = back
        run = runs[run_id]
        stop = store.keys[sid][0]
        assign = tuple(run.assignment[: stop - run.start])
        pus = tuple(sorted(set(assign)))
        ops = None if run.ops is None else tuple(run.ops[run.group.index(p)] for p in pus)
        stages.append(StageMapping(run.start, stop, pus, assign, ops=ops))
        sid, row = src, src_row
    return Mapping(tuple(reversed(stages)))
