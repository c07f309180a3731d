"""The ``replicated`` pass: hierarchical mappings whose stages may also be *replicated* (data parallelism).

The space: contiguous stages, each PU in at most one stage (as the ``disjoint`` pass), where a stage is

* a plain stage of the shared catalogue (:mod:`.stages`: one PU, or a PU group list-scheduled), or
* a **replicated stage**: the same block range run whole by ``R >= 2`` replicas on pairwise disjoint PU sets,
  each replica a catalogue run (one PU, or — with ``group_replicas`` — a list-scheduled group) starting at the
  same block and valid at the same stop; frames dealt in proportion to speed.

Costs follow :mod:`parapipe.cost.replication` exactly (the same functions :func:`parapipe.cost.evaluate.evaluate`
calls): with ``T_r`` replica ``r``'s time for one frame (its input hand-off plus its makespan, s), shares
``w_r = (1/T_r) / Σ 1/T_j``, period contribution ``P_s = 1 / Σ_r 1/T_r`` (every replica PU busy that long per
inference), latency ``L_s = Σ_r w_r T_r``, dynamic energy ``Σ_r w_r E_dyn,r``. A stage after a replicated one
receives each tensor from whichever replica produced it: the input time is ``Σ_j w_j · comm(pu_j, q, nbytes)``
per hand-off. A single-PU stage (or replica) whose blocks have a stage-level measurement as one sub-model on its PU
(``MappingProblem.submodel_time_s``) takes the measured time, its dynamic energy scaled alike.

**DP.** States ``(j, used PUs, live producers' tokens[, stages])``; a token is a PU index (plain producer) or the
tuple ``((pu, w), ...)`` of a replicated producer's PUs and shares — the shares are a function of the stage and
its source state, so equal tokens mean equal futures. A label is ``(period_s, latency_s, dyn_energy_j)`` with
period the largest stage contribution (PUs are disjoint, so a PU's busy time is its stage's contribution);
every final objective (energy ``E_dyn + (ΣP_idle + P_static)·period``) is monotone in it, so per-state Pareto
sets lose no Pareto-optimal mapping: without label cap, cut restriction or budget the front is exact for the
space. **Operating points**: with a catalogue over operating points every run (plain stage or replica) is at
one combination of its PUs' points, and every stop is read (a faster replica takes more frames, so a variant
dominated in (time, energy) can still lower a replicated stage's energy); PUs are disjoint, so no PU switches
points. **Memory**: a PU holds the weights of the blocks it runs in its one stage (or replica), so a run whose
held weights exceed ``MappingProblem.memory_bytes`` on some PU is never placed — the front is exact over the
mappings that fit.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import combinations
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..cost.mapping import Mapping, ReplicaMapping, StageMapping
from ..cost.problem import MappingProblem, block_range
from ..cost.replication import replica_shares, replicated_energy_j, replicated_period_s
from .budget import Budget, BudgetExceeded
from .listsched import schedule_ranges
from .pareto import pareto_mask
from .partitions import set_partitions
from .relaxation import MAX_PUS
from .stages import STAGE_KINDS
from .transitions import StageCatalog

__all__ = ["ReplicatedDeadline", "ReplicatedResult", "replicated_front", "whole_model_group_replicas",
           "WHOLE_REPLICATED_KEEP"]

log = logging.getLogger(__name__)


class ReplicatedDeadline(BudgetExceeded):
    """The replicated pass ran past its budget."""


@dataclass
class ReplicatedResult:
    """Front of the replicated space: mappings, objectives ``(period_s, latency_s, energy_j)``, statistics.

    ``capped_states`` counts states where ``max_labels`` dropped non-dominated labels; ``cut_limited`` whether
    ``cut_ok`` excluded a boundary. Exact when both are zero/false.
    """

    mappings: List[Mapping]
    objectives: np.ndarray
    n_states: int = 0
    capped_states: int = 0
    cut_limited: bool = False

    @property
    def exact(self) -> bool:
        return self.capped_states == 0 and not self.cut_limited


def _held_ok(problem: MappingProblem, start: int, assignment: Sequence[int], stop: int) -> bool:
    """True if no PU of the run holds more weight bytes over ``[start, stop)`` than its memory limit."""
    mem = problem.memory_bytes
    if not np.isfinite(mem).any():
        return True
    held: Dict[int, float] = {}
    for off in range(stop - start):
        p = assignment[off]
        held[p] = held.get(p, 0.0) + float(problem.weight_nbytes[start + off])
    return all(not (h > mem[p]) for p, h in held.items())


class _Stops:
    """Per catalogue run: ``stop -> (makespan_s, dyn_energy_j, transfers, live template)`` for the stops whose
    weights fit memory, makespans replaced by stage-level measurements where the problem has them."""

    def __init__(self, problem: MappingProblem, run, ex):
        self.run, self.mask = run, ex.mask
        self.by_stop: Dict[int, tuple] = {}
        single = len(run.group) == 1
        for j, mk, dyn, transfers, tmpl in ex.items:
            if not _held_ok(problem, run.start, run.assignment, j):
                continue
            if single and problem.submodel_time_s and mk > 0:
                at = problem.at_operating_points(run.op_choice())
                measured = (at.submodel_time_s or {}).get((run.group[0], block_range(run.start, j)))
                if measured is not None:
                    dyn, mk = dyn * float(measured) / mk, float(measured)
            self.by_stop[j] = (mk + ex.dispatch_s, dyn, transfers, tmpl)  # d_s: the pipeline terms' hop


def _input_s(problem: MappingProblem, transfers, live: tuple) -> float:
    """Mean input hand-off of a stage whose live producers carry ``live`` tokens (module docstring)."""
    t = 0.0
    for x, q, nb in transfers:
        tok = live[x]
        if isinstance(tok, tuple):
            t += sum(w * problem.comm_s(r, q, nb) for r, w in tok)
        else:
            t += problem.comm_s(tok, q, nb)
    return t


def replicated_front(problem: MappingProblem, catalog: Optional[StageCatalog] = None,
                     max_stages: Optional[int] = None, group_replicas: bool = True, max_labels: int = 0,
                     max_cut_tensors: Optional[int] = None, budget: Optional[Budget] = None,
                     plain_kinds: Sequence[str] = STAGE_KINDS, coarse: bool = False
                     ) -> Optional[ReplicatedResult]:
    """Pareto front (period, latency, energy) of the replicated space (module docstring).

    Parameters
    ----------
    problem : MappingProblem
    catalog : StageCatalog, optional
        Shared with the other passes (built here if not given).
    max_stages : int or None
        Most stages (a replicated stage counts once).
    group_replicas : bool
        Let a replica be a list-scheduled PU group (else one PU per replica).
    max_labels : int
        Labels kept per state (0: all; otherwise the kept ones are spread along the period axis: not exact).
    max_cut_tensors : int or None
        Stage boundaries only where at most this many producers are live (None: anywhere); the last stage may
        also start at any boundary after the last such one (a model's head, such as a residual add with the
        classifier, often runs only on a PU the body does not use).
    budget : parapipe.search.budget.Budget or None
        Work budget (labels pushed, checked after each block position); past it (or its wall-clock safety
        limit) :class:`ReplicatedDeadline` is raised.
    plain_kinds : sequence of str
        Stage kinds of the non-replicated stages (:data:`parapipe.search.stages.STAGE_KINDS`).
    coarse : bool
        Key states on the PUs of a replicated producer only, not its shares: the state keeps the shares of the
        first transition that reached it, so later hand-offs from it are costed with those (not exact; every
        mapping found is evaluated exactly by the caller). Cuts the states of large problems.

    Returns
    -------
    ReplicatedResult or None
        None if no mapping of the space exists (e.g. every mapping exceeds a memory limit).
    """
    n = problem.n_blocks
    cat = catalog if catalog is not None else StageCatalog(problem)
    live_sets = cat.live
    if coarse:
        def state_key(j, used, live, nst):
            return (j, used, tuple(tuple(r for r, _ in t) if isinstance(t, tuple) else t for t in live), nst)
    else:
        def state_key(j, used, live, nst):
            return (j, used, live, nst)
    cut_ok = [max_cut_tensors is None or j == n or len(live_sets[j]) <= max_cut_tensors for j in range(n + 1)]
    # the last stage may also start at a boundary past the last one ``max_cut_tensors`` allows (a model's head
    # often runs where its body cannot): a state there only moves on to the end
    last_cut = max((j for j in range(n) if cut_ok[j]), default=0)
    may_end = [cut_ok[j] or j > last_cut for j in range(n + 1)]
    to_end = [j == n for j in range(n + 1)]
    idle_static = float(problem.idle_power_w.sum()) + problem.static_power_w
    staged = max_stages is not None
    # states: key -> sid; labels[sid]: array (m, 3) of (P, L, E); backs[sid]: (src sids, src rows, stage ids)
    # with stages[stage id] = (stop, runs); a bucket of pending[key] holds one (src sid, period, latency, energy,
    # stage id) per move: every label of the source, with the move's costs, is a candidate of the state
    keys: List[tuple] = []
    labels: List[np.ndarray] = []
    backs: List[Optional[tuple]] = []
    stages: List[tuple] = []
    pending: Dict[tuple, list] = {}
    by_pos: Dict[int, List[tuple]] = {}
    capped = 0

    def finish(key: tuple, moves: list) -> int:
        nonlocal capped
        src = np.array([mv[0] for mv in moves], dtype=np.int64)
        add = np.array([mv[1:4] for mv in moves], dtype=float).reshape(-1, 3)
        counts = np.array([len(labels[s]) for s in src.tolist()], dtype=np.int64)
        vals = np.concatenate([labels[s] for s in src.tolist()]) if len(moves) > 1 else labels[int(src[0])].copy()
        rep = np.repeat(np.arange(len(moves)), counts)
        np.maximum(vals[:, 0], add[rep, 0], out=vals[:, 0])
        vals[:, 1] += add[rep, 1]
        vals[:, 2] += add[rep, 2]
        keep = np.flatnonzero(pareto_mask(vals))
        if max_labels and len(keep) > max_labels:
            capped += 1
            order = keep[np.argsort(vals[keep, 0], kind="stable")]
            keep = np.sort(order[np.unique(np.linspace(0, len(order) - 1, max_labels).round().astype(int))])
        rows = np.arange(len(vals)) - np.repeat(np.cumsum(counts) - counts, counts)
        stage_ids = np.array([mv[4] for mv in moves], dtype=np.int64)
        keys.append(key)
        labels.append(vals[keep])
        backs.append((src[rep[keep]], rows[keep], stage_ids[rep[keep]]))
        return len(keys) - 1

    state_live: Dict[tuple, tuple] = {}
    n_push = 0  # labels pushed: the pass's counted work
    spent = 0

    def push(key: tuple, live: tuple, move: tuple) -> None:
        bucket = pending.get(key)
        if bucket is None:
            bucket = pending[key] = []
            by_pos.setdefault(key[0], []).append(key)
            state_live[key] = live
        bucket.append(move)

    keys.append((0, 0, (), 0))
    labels.append(np.zeros((1, 3)))
    backs.append(None)
    here = [0]
    for i in range(n):
        if i > 0:
            here = [finish(key, pending.pop(key)) for key in by_pos.pop(i, [])]
        if not here:
            continue
        stop_ok = may_end if cut_ok[i] else to_end  # a stage starting at i may end at these boundaries
        kinds = STAGE_KINDS if group_replicas else ("single-pu",)
        all_runs = [_Stops(problem, cat.runs[rid], ex) for kind in kinds for rid, ex in cat.exits(i, kind)]
        all_runs = [r for r in all_runs if r.by_stop]
        runs = [r for r in all_runs if r.run.kind in plain_kinds]
        rep_runs = [r for r in all_runs if group_replicas or len(r.run.group) == 1]
        if not group_replicas and "list-scheduled" in plain_kinds:
            runs += [_Stops(problem, cat.runs[rid], ex) for rid, ex in cat.exits(i, "list-scheduled")]
            runs = [r for r in runs if r.by_stop]
        combos = []  # sets of >= 2 runs with pairwise disjoint groups, with the stops valid for all
        for size in range(2, problem.n_pus + 1):
            for combo in combinations(range(len(rep_runs)), size):
                mask, ok = 0, True
                for c in combo:
                    if mask & rep_runs[c].mask:
                        ok = False
                        break
                    mask |= rep_runs[c].mask
                if not ok:
                    continue
                common = set.intersection(*(set(rep_runs[c].by_stop) for c in combo))
                stops = sorted(j for j in common if stop_ok[j])
                if stops:
                    combos.append((mask, tuple(rep_runs[c] for c in combo), stops))
        plain_moves: Dict[tuple, list] = {}  # (run index, live tokens) -> moves: the same for every source state
        combo_moves: Dict[tuple, list] = {}
        for sid in here:
            _, used, _, n_st = keys[sid]
            live = state_live.pop(keys[sid], keys[sid][2])
            if staged and n_st >= max_stages:
                continue
            n_rows = len(labels[sid])
            nst = n_st + 1 if staged else 0
            for ri, r in enumerate(runs):
                if used & r.mask:
                    continue
                moves = plain_moves.get((ri, live))
                if moves is None:
                    moves = []
                    for j, (mk, dyn, transfers, tmpl) in r.by_stop.items():
                        if not stop_ok[j]:
                            continue
                        new_live = tuple(live[x] if x >= 0 else -1 - x for x in tmpl)
                        stages.append((j, (r.run,)))
                        moves.append((j, _input_s(problem, transfers, live) + mk, dyn, new_live,
                                      state_key(j, 0, new_live, 0)[2], len(stages) - 1))
                    plain_moves[(ri, live)] = moves
                mask = used | r.mask
                for j, t_s, dyn, new_live, klive, stage in moves:
                    key = (j, mask, klive, nst)
                    push(key, new_live, (sid, t_s, t_s, dyn, stage))
                    n_push += n_rows
            for ci, (mask, reps, stops) in enumerate(combos):
                if used & mask:
                    continue
                moves = combo_moves.get((ci, live))
                if moves is None:
                    moves = []
                    for j in stops:
                        items = [r.by_stop[j] for r in reps]
                        times = [_input_s(problem, it[2], live) + it[0] for it in items]
                        shares = replica_shares(times)
                        p_s = replicated_period_s(times)
                        l_s = sum(w * t for w, t in zip(shares, times) if w > 0)
                        e_s = replicated_energy_j([it[1] for it in items], shares)
                        start = i
                        new_live = tuple(
                            live[x] if x >= 0 else tuple((r.run.assignment[u - start], w) for r, w in zip(reps, shares))
                            for x, u in zip(items[0][3], live_sets[j]))
                        stages.append((j, tuple(r.run for r in reps)))
                        moves.append((j, p_s, l_s, e_s, new_live, state_key(j, 0, new_live, 0)[2],
                                      len(stages) - 1))
                    combo_moves[(ci, live)] = moves
                umask = used | mask
                for j, p_s, l_s, e_s, new_live, klive, stage in moves:
                    key = (j, umask, klive, nst)
                    push(key, new_live, (sid, p_s, l_s, e_s, stage))
                    n_push += n_rows
        if budget is not None:
            budget.spend(n_push - spent)
            spent = n_push
            why = budget.over()
            if why is not None:
                budget.stop_point = f"block {i + 1} of {n}"
                raise ReplicatedDeadline(f"replicated pass stopped at block {i + 1} of {n} ({why})", why)
    finals = by_pos.pop(n, [])
    if not finals:
        return None
    objs, refs = [], []
    for key in finals:
        sid = finish(key, pending.pop(key))
        lab = labels[sid]
        objs.append(np.column_stack([lab[:, 0], lab[:, 1], lab[:, 2] + idle_static * lab[:, 0]]))
        refs += [(sid, row) for row in range(len(lab))]
    objs_a = np.concatenate(objs).reshape(-1, 3)
    keep = np.flatnonzero(pareto_mask(objs_a))
    mappings = [_rebuild(backs, stages, *refs[t]) for t in keep]
    return ReplicatedResult(mappings, objs_a[keep], n_states=len(keys), capped_states=capped,
                            cut_limited=not all(cut_ok))


def _rebuild(backs: List[Optional[tuple]], stage_runs: List[tuple], sid: int, row: int) -> Mapping:
    stages: List[StageMapping] = []
    while True:
        back = backs[sid]
        if back is None:
            break
        src, src_row, stop_runs = int(back[0][row]), int(back[1][row]), int(back[2][row])
        stop, runs = stage_runs[stop_runs]
        views = []
        for run in runs:
            assign = tuple(run.assignment[: stop - run.start])
            pus = tuple(sorted(set(assign)))
            ops = None if run.ops is None else tuple(run.ops[run.group.index(p)] for p in pus)
            views.append((pus, assign, ops))
        (pus, assign, ops), others = views[0], views[1:]
        stages.append(StageMapping(runs[0].start, stop, pus, assign, None,
                                   tuple(ReplicaMapping(p, a, ops=o) for p, a, o in others), ops=ops))
        sid, row = src, src_row
    return Mapping(tuple(reversed(stages)))


WHOLE_REPLICATED_KEEP = 3
"""How many whole-model replicated mappings with PU-group replicas (:func:`whole_model_group_replicas`), the shortest
estimated periods, are offered to the front."""


def whole_model_group_replicas(catalog: StageCatalog, keep: int = WHOLE_REPLICATED_KEEP) -> List[Mapping]:
    """The whole model as one stage replicated over >= 2 replicas, at least one of them a list-scheduled PU group
    (the replicated pass above the exact size takes single-PU replicas only; the ``replicated`` baselines are
    those): for every set of disjoint PU groups that each run every block, the greedy schedule of each group
    (:mod:`.listsched`, on the catalogue's problems: its pipeline terms included), ranked by the period
    ``1 / Σ_r 1/(T_r + d_r)`` they estimate (no input hand-off into a first stage); the ``keep`` shortest."""
    problem, sched = catalog.problem, catalog.stage_problem
    n, k = problem.n_blocks, problem.n_pus
    if k > MAX_PUS or k < 2:
        return []
    terms = catalog.terms
    runs: Dict[Tuple[int, ...], Optional[Tuple[Tuple[int, ...], Tuple[int, ...], float]]] = {}

    def run(g: Tuple[int, ...]):
        if g not in runs:
            rs = schedule_ranges(sched, 0, g)
            if len(rs.assignment) < n:
                runs[g] = None
            else:
                used = tuple(sorted(set(rs.assignment)))
                d = 0.0 if terms is None else terms.stage_dispatch_s(problem.pu_names, used)
                runs[g] = (used, tuple(rs.assignment), float(rs.makespan_s[-1]) + d)
        return runs[g]

    scored = []
    for mask in range(3, 1 << k):
        pus = tuple(p for p in range(k) if mask >> p & 1)
        for part in set_partitions(pus):
            if len(part) < 2 or all(len(g) == 1 for g in part):
                continue
            views = [run(g) for g in part]
            if any(v is None for v in views):
                continue
            used = [p for v in views for p in v[0]]
            if len(used) != len(pus):
                continue  # a group left a PU idle: the same replicas on fewer PUs come from another set
            scored.append((1.0 / sum(1.0 / v[2] for v in views), views))
    scored.sort(key=lambda x: x[0])
    out = []
    for _, views in scored[:keep]:
        (g0, a0, _), rest = views[0], views[1:]
        out.append(Mapping((StageMapping(0, n, g0, a0, None, tuple(ReplicaMapping(g, a) for g, a, _ in rest)),)))
    return out
