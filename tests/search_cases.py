"""Tiny mapping problems and brute-force enumerations shared by the search tests.

The enumerations are written independently of the search (parapipe/search/): PU groups are the bit masks
``1 .. 2^k - 1``, and a stage's greedy list schedule is recomputed here from its definition
(:func:`greedy_assignment`) rather than taken from :mod:`parapipe.search.listsched`. Only the cost model
(:func:`parapipe.cost.evaluate.evaluate`, the definition of the objectives) is shared with the code under test.
"""
from __future__ import annotations

from functools import lru_cache
from typing import List, Optional, Tuple

import numpy as np

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import Mapping, StageMapping
from parapipe.cost.problem import MappingProblem

def _preds(shape: str, n: int, rng: np.random.Generator) -> List[Tuple[int, ...]]:
    if shape == "chain":
        return [()] + [(j - 1,) for j in range(1, n)]
    if shape == "diamond":  # 0 -> {1, 2} -> 3 -> {4, 5} -> 6 ...: fork/join repeated
        preds: List[Tuple[int, ...]] = [()]
        for j in range(1, n):
            pos = j % 3
            preds.append((j - pos,) if pos else (j - 2, j - 1))
        return preds
    # "dag": each block reads 1-3 random earlier blocks (multi-branch, skips, several sinks possible).
    preds = [()]
    for j in range(1, n):
        m = int(rng.integers(1, min(3, j) + 1))
        preds.append(tuple(sorted(int(u) for u in rng.choice(j, size=m, replace=False))))
    return preds


def random_problem(n: int, k: int, seed: int, shape: str = "dag") -> MappingProblem:
    """Random tiny problem: times 1-10 ms (15 % of (block, PU) pairs unsupported), 1 kB-1 MB edges,
    transfers 0.1-1 ms + 0.1-1 GB/s, active power 1-5 W, idle 0.1-0.5 W, static 1 W."""
    rng = np.random.default_rng(seed)
    preds = _preds(shape, n, rng)
    t = rng.uniform(1e-3, 10e-3, (n, k))
    t[rng.random((n, k)) < 0.15] = np.inf
    for j in range(n):
        if not np.isfinite(t[j]).any():
            t[j, rng.integers(k)] = 5e-3
    edges = {(i, j): float(rng.integers(1_000, 1_000_000)) for j in range(n) for i in preds[j]}
    return MappingProblem([f"b{i}" for i in range(n)], preds, edges, [f"p{i}" for i in range(k)], t,
                          rng.uniform(1, 5, (n, k)), rng.uniform(0.1, 0.5, k), 1.0,
                          rng.uniform(1e-4, 1e-3, (k, k)), rng.uniform(1e8, 1e9, (k, k)),
                          name=f"{shape}{seed}")


def pu_groups(k: int) -> List[Tuple[int, ...]]:
    """Every non-empty set of the PUs ``0 .. k-1``, as sorted tuples (from the bit masks 1 .. 2^k - 1)."""
    return [tuple(p for p in range(k) if mask >> p & 1) for mask in range(1, 2 ** k)]


def greedy_assignment(pr: MappingProblem, a: int, b: int, group: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    """The greedy earliest-finish-time list schedule of blocks ``a .. b-1`` on ``group``, from its definition.

    Blocks in index order; each goes to the PU of the group where it finishes first: it starts when that PU is
    free and every producer inside the range has finished plus, from another PU, ``alpha + nbytes / beta``.
    Ties go to the lower dynamic energy (time x (active - idle power)), then to the earlier PU of ``group``.
    Producers before ``a`` are ready at 0. None if some block runs on no PU of the group.
    """
    free = {p: 0.0 for p in group}
    finish: dict = {}
    where: dict = {}
    for v in range(a, b):
        best = None
        for p in group:
            t = float(pr.time_s[v, p])
            if not np.isfinite(t):
                continue
            ready = 0.0
            for u in pr.preds[v]:
                if u < a:
                    continue
                nbytes = pr.edge_nbytes.get((u, v), 0.0)
                arrive = finish[u]
                if where[u] != p and nbytes > 0:
                    arrive += float(pr.alpha_s[where[u], p]) + nbytes / float(pr.beta_bytes_per_s[where[u], p])
                ready = max(ready, arrive)
            end = max(free[p], ready) + t
            energy = t * (float(pr.active_power_w[v, p]) - float(pr.idle_power_w[p]))
            if best is None or (end, energy) < best[0]:
                best = ((end, energy), p)
        if best is None:
            return None
        (end, _), p = best
        free[p] = finish[v] = end
        where[v] = p
    return tuple(where[v] for v in range(a, b))


def with_handoff(pr: MappingProblem, terms) -> MappingProblem:
    """``pr`` as a multi-PU stage sees it under pipeline ``terms``: ``alpha + handoff_s`` between different PUs
    (a shallow copy; :func:`greedy_assignment` reads ``alpha_s`` only). ``pr`` itself without terms."""
    if terms is None or not terms.handoff_s:
        return pr
    import copy

    out = copy.copy(pr)
    out.alpha_s = pr.alpha_s + terms.handoff_s * (1.0 - np.eye(pr.n_pus))
    return out


def all_mapping_objectives(pr: MappingProblem, reuse: bool, max_stages: Optional[int] = None,
                           terms=None) -> np.ndarray:
    """(period, latency, energy) of every mapping of the DP's space, by enumeration and :func:`evaluate`.

    Every composition of the blocks into contiguous stages, every PU group for every stage (pairwise disjoint
    unless ``reuse``); each stage's assignment is the greedy list schedule of exactly that range on that
    group (with pipeline ``terms``: with their hand-off cost between the group's PUs, :func:`with_handoff`;
    evaluated with them; a group whose schedule leaves a PU idle is the stage on the PUs it uses, which pays
    only their invocation costs, so it is left out).
    """
    n = pr.n_blocks
    groups = pu_groups(pr.n_pus)
    sched = with_handoff(pr, terms)

    @lru_cache(maxsize=None)
    def stage(a: int, b: int, gi: int) -> Optional[StageMapping]:
        assignment = greedy_assignment(sched, a, b, groups[gi])
        if assignment is None:
            return None  # some block of the range runs on no PU of the group
        if terms is not None and set(assignment) != set(groups[gi]):
            return None  # a PU left idle: the stage on the PUs it uses is the mapping (it pays their invocation)
        return StageMapping(a, b, groups[gi], assignment)

    out = []

    def extend(a: int, stages: list, used: frozenset) -> None:
        if a == n:
            out.append(evaluate(pr, Mapping(tuple(stages)), terms))
            return
        if max_stages is not None and len(stages) == max_stages:
            return
        for b in range(a + 1, n + 1):
            for gi, g in enumerate(groups):
                if not reuse and used & set(g):
                    continue
                st = stage(a, b, gi)
                if st is not None:
                    extend(b, stages + [st], used | set(g))

    extend(0, [], frozenset())
    return np.array([(ev.period_s, ev.latency_s, ev.energy_j) for ev in out])


def sorted_rows(a: np.ndarray) -> np.ndarray:
    return a[np.lexsort(a.T[::-1])]


def all_pipeline_objectives(pr: MappingProblem, terms=None) -> np.ndarray:
    """(period, latency, energy) of every pure pipeline with PU reuse: every PU per block, each run of blocks on
    one PU a single-PU stage, evaluated with :func:`evaluate`."""
    import itertools

    ok = [[p for p in range(pr.n_pus) if np.isfinite(pr.time_s[v, p])] for v in range(pr.n_blocks)]
    out = []
    for pus in itertools.product(*ok):
        stages, a = [], 0
        for b in range(1, len(pus) + 1):
            if b == len(pus) or pus[b] != pus[a]:
                stages.append(StageMapping(a, b, (pus[a],), (pus[a],) * (b - a)))
                a = b
        ev = evaluate(pr, Mapping(tuple(stages)), terms)
        out.append((ev.period_s, ev.latency_s, ev.energy_j))
    return np.array(out)


def uncovered(points: np.ndarray, front: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Rows of ``points`` that no row of ``front`` weakly dominates (within ``rtol``)."""
    if not len(points):
        return points
    covered = np.any(np.all(front[None, :, :] <= points[:, None, :] * (1 + rtol), axis=2), axis=1)
    return points[~covered]


def all_replicated_objectives(pr: MappingProblem, max_stages: Optional[int] = None,
                              group_replicas: bool = True, terms=None) -> np.ndarray:
    """(period, latency, energy) of every mapping of the replicated space that fits memory, by enumeration and
    :func:`evaluate`: every composition into contiguous stages; per stage a PU group (list-scheduled as in
    :func:`all_mapping_objectives`) or a replicated stage over >= 2 pairwise disjoint groups (one PU each unless
    ``group_replicas``), each replica list-scheduled on exactly that range (with ``terms``' hand-off, as in
    :func:`all_mapping_objectives`); PUs disjoint across stages; evaluated with ``terms``."""
    from itertools import combinations

    from parapipe.cost.mapping import ReplicaMapping

    n = pr.n_blocks
    groups = pu_groups(pr.n_pus)
    sched = with_handoff(pr, terms)

    @lru_cache(maxsize=None)
    def view(a: int, b: int, gi: int):
        assignment = greedy_assignment(sched, a, b, groups[gi])
        if assignment is not None and terms is not None and set(assignment) != set(groups[gi]):
            return None  # a PU left idle (see all_mapping_objectives)
        return None if assignment is None else (groups[gi], assignment)

    options = []  # tuples of group indices: one = plain stage, several = replicated
    rep_groups = [gi for gi, g in enumerate(groups) if group_replicas or len(g) == 1]
    options += [(gi,) for gi in range(len(groups))]
    for size in range(2, pr.n_pus + 1):
        for combo in combinations(rep_groups, size):
            pus = [p for gi in combo for p in groups[gi]]
            if len(pus) == len(set(pus)):
                options.append(combo)
    out = []

    def extend(a: int, stages: list, used: frozenset) -> None:
        if a == n:
            ev = evaluate(pr, Mapping(tuple(stages)), terms)
            if ev.fits_memory:
                out.append((ev.period_s, ev.latency_s, ev.energy_j))
            return
        if max_stages is not None and len(stages) == max_stages:
            return
        for b in range(a + 1, n + 1):
            for combo in options:
                pus = frozenset(p for gi in combo for p in groups[gi])
                if used & pus:
                    continue
                views = [view(a, b, gi) for gi in combo]
                if any(v is None for v in views):
                    continue
                (g0, a0), rest = views[0], views[1:]
                st = StageMapping(a, b, g0, a0, None, tuple(ReplicaMapping(g, asg) for g, asg in rest))
                extend(b, stages + [st], used | pus)

    extend(0, [], frozenset())
    return np.array(out).reshape(-1, 3)


def branchy_block_table(path, n: int = 40, pus: Tuple[str, ...] = ("big", "little", "gpu", "npu"), seed: int = 1):
    """Write a seeded ``--blocks`` CSV (:mod:`parapipe.cost.blocktable`) of ``n`` blocks with parallel branches:
    a chain interrupted by fork/join sections of 2-4 branches of 1-3 blocks each (an Inception-like shape);
    times 0.2-8 ms per PU (the NPU cannot run 20 % of the blocks), outputs 10 kB-1 MB. Returns ``path``."""
    rng = np.random.default_rng(seed)
    names: List[str] = []
    deps: List[Tuple[str, ...]] = []
    last = ""
    while len(names) < n:
        left = n - len(names)
        if left >= 4 and rng.random() < 0.6:  # a fork/join section: branches, then a join block
            ends = []
            for _ in range(int(rng.integers(2, 5))):
                prev = last
                for _ in range(int(rng.integers(1, 4))):
                    if n - len(names) <= 1:
                        break
                    names.append(f"b{len(names)}")
                    deps.append((prev,) if prev else ())
                    prev = names[-1]
                if prev != last:
                    ends.append(prev)
            names.append(f"b{len(names)}")
            deps.append(tuple(ends) if ends else ((last,) if last else ()))
        else:
            names.append(f"b{len(names)}")
            deps.append((last,) if last else ())
        last = names[-1]
    rows = ["block,deps,out_bytes," + ",".join(f"t_{p}" for p in pus)]
    for name, d in zip(names, deps):
        times = []
        for p in pus:
            t = float(rng.uniform(0.2e-3, 8e-3))
            times.append("" if p == "npu" and rng.random() < 0.2 else f"{t:.6g}")
        rows.append(f"{name},{';'.join(d)},{int(rng.integers(10_000, 1_000_000))}," + ",".join(times))
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")
    return path
