"""The transitions of the outer DP (:mod:`.dp`), built once per problem and shared by its passes.

A DP state at block position ``i`` knows the PUs of the *live producers* (blocks before ``i`` whose outputs are
read at or after ``i``). From it, a stage run (:mod:`.stages`) starting at ``i`` can stop at any allowed
``j``; the move costs the run's makespan plus the input transfers from the live producers' PUs to the stage's
PUs (:func:`parapipe.cost.evaluate.stage_input_transfers`: the largest edge per producer and destination PU),
and leads to a state at ``j`` whose live producers sit on known PUs. :class:`StageCatalog` computes the runs,
their stops and the transfer terms once, and the moves once per (run, live PUs); every DP pass of a search
(disjoint groups, PU reuse, pure-pipeline baseline) reads them.

**Operating points.** With ``op_sets`` the catalogue holds one run per combination of operating points of a
group (:func:`parapipe.search.stages.stage_runs`). A move's input transfers and the PUs its live producers end on
depend on the group and the blocks' assignment only, never on the points; so of the variants of one (start, group,
stop, assignment), one whose (makespan, dynamic energy) another weakly dominates can only lead to dominated labels
wherever the stage's cost enters a label as a sum or a maximum of its time and energy: :attr:`Exits.plain` marks
the stops that survive that filter (equal pairs: the first, i.e. the highest points, is kept). A replicated stage's
energy weighs its replicas by their speed, and a PU that switches points pays per switch, so the replicated pass
and a PU-reuse pass with switching costs read every stop.

**Pipeline terms** (:mod:`parapipe.cost.pipeline_terms`): given ``terms``, a move costs what the full model
charges a stage: ``κ·T_s + d_s`` (``d_s`` = ``dispatch_s`` + the largest ``invoke_s`` of the run's PUs), with the
runs of multi-PU groups scheduled with ``alpha + handoff_s`` between their PUs
(:func:`parapipe.cost.pipeline_terms.search_problems`); :attr:`StageCatalog.problem` is then the ``κ``-scaled
problem the passes must be given. With ``sharing``, ``contention`` and ``overlap`` at 0 a mapping's labels are
its full-model period, latency and energy.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple


from ..cost.pipeline_terms import search_problems
from ..cost.problem import MappingProblem
from .stages import StageRun, all_groups, stage_runs

__all__ = ["live_sets", "Exits", "StageCatalog"]


def live_sets(problem: MappingProblem) -> List[Tuple[int, ...]]:
    """``live[i]``: blocks ``u < i`` with a successor ``>= i`` (sorted), for ``i = 0..n``."""
    n = problem.n_blocks
    last_use = [max(s) if s else -1 for s in problem.succs]
    live: List[Tuple[int, ...]] = []
    cur: List[int] = []
    for i in range(n + 1):
        live.append(tuple(cur))
        if i < n:
            cur = [u for u in cur if last_use[u] > i]
            if last_use[i] > i:
                cur.append(i)
    return live


class Exits:
    """The stops of one run, with what a move needs that does not depend on the source state.

    ``items[t] = (j, makespan_s, dyn_energy_j, transfers, live_template)``: ``transfers`` lists the input
    transfers ``(position of the producer in live[i], destination PU, nbytes)``; ``live_template`` gives, per
    block of ``live[j]``, its position in ``live[i]`` (``>= 0``) or ``-1 - PU`` for a block of the stage.
    ``plain[t]``: False when another operating-point variant of the same stage dominates stop ``t`` (module
    docstring); all True without operating points. ``dispatch_s``: the ``d_s`` every stop adds to the stage time
    (0 without pipeline terms), not included in ``items``' makespans.
    """

    __slots__ = ("run", "mask", "items", "plain", "by_live", "alpha", "beta", "dispatch_s")

    def __init__(self, problem: MappingProblem, run: StageRun, live: List[Tuple[int, ...]],
                 dispatch_s: float = 0.0):
        self.run = run
        self.dispatch_s = dispatch_s
        self.mask = run.mask
        rows = problem.rows()
        self.alpha, self.beta = rows.alpha_s, rows.beta_bytes_per_s
        self.by_live: Dict[tuple, list] = {}
        i = run.start
        pos = {u: x for x, u in enumerate(live[i])}
        need: Dict[Tuple[int, int], float] = {}
        items = []
        for off, q in enumerate(run.assignment):
            v = i + off
            for u in problem.preds[v]:
                if u < i:
                    nb = problem.edge_nbytes.get((u, v), 0.0)
                    if nb > need.get((u, q), -1.0):
                        need[(u, q)] = nb
            if not run.valid[off]:
                continue
            j = v + 1
            transfers = tuple((pos[u], q2, nb) for (u, q2), nb in need.items() if nb > 0)
            tmpl = tuple(pos[u] if u < i else -1 - run.assignment[u - i] for u in live[j])
            items.append((j, float(run.makespan_s[off]), float(run.dyn_energy_j[off]), transfers, tmpl))
        self.items = items
        self.plain = [True] * len(items)

    def moves(self, livepus: tuple, every: bool = False) -> list:
        """``[(j, stage time, dyn energy, live PUs at j)]`` from a state whose live producers sit on ``livepus``
        (only the :attr:`plain` stops unless ``every``)."""
        got = self.by_live.get((livepus, every))
        if got is None:
            alpha, beta, d = self.alpha, self.beta, self.dispatch_s
            got = []
            for (j, mk, dyn, transfers, tmpl), keep in zip(self.items, self.plain):
                if not (keep or every):
                    continue
                t_in = 0.0
                for x, q, nb in transfers:
                    r = livepus[x]
                    if r != q:
                        t_in += alpha[r][q] + nb / beta[r][q]
                got.append((j, (t_in + d) + mk, dyn, tuple(livepus[x] if x >= 0 else -1 - x for x in tmpl)))
            self.by_live[(livepus, every)] = got
        return got


class StageCatalog:
    """Runs of every stage kind on every PU group, with their moves, per start block (built lazily).

    Attributes
    ----------
    live : list of tuple of int
        :func:`live_sets` of the problem.
    runs : list of StageRun
        Every run built so far; a run id indexes it (and ``shares``).
    shares : list of tuple of float
        ``busy_share`` of each run as a tuple.
    op_sets : list of list of int, or None
        Per PU, the operating points the runs may use (None: every PU at its highest point only).
    problem : MappingProblem
        The problem the passes run on: the one given, ``κ``-scaled with ``terms`` (module docstring).
    terms : PipelineTerms or None
        The pipeline terms the moves include (module docstring).
    """

    def __init__(self, problem: MappingProblem, op_sets: Optional[Sequence[Sequence[int]]] = None, terms=None):
        self.terms = None if terms is None or terms.is_default() else terms
        self.problem, self.stage_problem = search_problems(problem, self.terms)
        self.op_sets = None if op_sets is None else [tuple(o) for o in op_sets]
        self.live = live_sets(problem)
        self.groups = all_groups(problem.n_pus)
        self.runs: List[StageRun] = []
        self.shares: List[Tuple[float, ...]] = []
        self._exits: Dict[Tuple[int, str], List[Tuple[int, Exits]]] = {}

    def exits(self, i: int, kind: str) -> List[Tuple[int, Exits]]:
        """``[(run id, Exits)]`` of the runs of ``kind`` starting at block ``i`` (every group, every stop).

        Raises
        ------
        ValueError
            An unknown kind.
        """
        got = self._exits.get((i, kind))
        if got is None:
            got = []
            names = self.problem.pu_names
            for run in stage_runs(self.stage_problem, i, self.groups, (kind,), self.op_sets):
                d = 0.0 if self.terms is None else self.terms.stage_dispatch_s(names, run.group)
                ex = Exits(self.problem, run, self.live, d)
                if ex.items:
                    self.runs.append(run)
                    self.shares.append(tuple(run.busy_share.tolist()))
                    got.append((len(self.runs) - 1, ex))
            if self.op_sets is not None:
                _mark_dominated([ex for _, ex in got])
            self._exits[(i, kind)] = got
        return got


def _mark_dominated(exits: List[Exits]) -> None:
    """Clear :attr:`Exits.plain` of the stops another variant of the same (group, stop, assignment) weakly
    dominates in (makespan, dynamic energy); of equal pairs the first (highest points first) stays."""
    by_key: Dict[tuple, List[Tuple[float, float, Exits, int]]] = {}
    for ex in exits:
        run = ex.run
        for t, item in enumerate(ex.items):
            j = item[0]
            key = (run.group, j, run.assignment[: j - run.start])
            by_key.setdefault(key, []).append((item[1], item[2], ex, t))
    for rows in by_key.values():
        if len(rows) < 2:
            continue
        kept: List[Tuple[float, float]] = []
        for mk, dyn, ex, t in rows:
            if any(a <= mk and b <= dyn for a, b in kept):
                ex.plain[t] = False
            else:
                kept = [(a, b) for a, b in kept if not (mk <= a and dyn <= b)] + [(mk, dyn)]
        # a stop dropped from ``kept`` by a later variant is dominated by it: mark it too
        for mk, dyn, ex, t in rows:
            if ex.plain[t] and (mk, dyn) not in kept:
                ex.plain[t] = False
