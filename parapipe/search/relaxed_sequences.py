"""Mappings read off the period relaxation: a primal heuristic for the PU-reuse space.

The relaxation of :mod:`.relaxation` charges every mapping no more than it costs. Along its single-PU modes a
label is a *sequence*: a PU for every block so far and the blocks where stages begin, which describes one mapping,
a pipeline of single-PU stages in which a PU may serve several stages; the label's largest busy time is at most
that mapping's period (and equals it for a chain of blocks without pipeline terms, where the relaxation is
exact). :func:`relaxed_sequence_mappings` walks the blocks once with such labels:

* per block and mode, the Pareto set of busy vectors, without those that reach ``limit_s`` (the best period found
  so far: a sequence whose relaxed period reaches it cannot give a faster mapping) or whose busy time plus the
  remaining blocks' fastest times, spread over the PUs, reaches it, or, with the Lagrangian ``guide``, whose
  ``λ``-weighted busy time plus the least ``λ``-weighted cost of the remaining blocks reaches it (the probe's
  pruning, :meth:`parapipe.search.relaxation.RelaxedDP.probe`);
* cut to the ``beam`` labels of least estimated period (the largest busy time so far, or the guide's estimate if
  larger), with a back-pointer each;

and the ``count`` complete sequences of least relaxed period become mappings (consecutive stages on one PU
merged), for the caller to evaluate with the full cost model.

Why: the PU-reuse DP pass keeps a few labels per state and the least-period pass stops at its work budget on
48-block tables, and both miss the long pipelines that hop between an NPU and the CPUs around each operator the
NPU cannot run. The relaxation's guide sees those hops' costs block by block. The best period of
``parapipe optimize MODEL --soc SOC`` (pareto.json; ``python benchmarks/search_bench.py`` prints its gap) before
and after: ResNet-50 on the A311D profile 78.2 -> 66.5 ms, on the RK3588 profile 33.4 -> 29.1 ms, Inception-v1
on the A1000 profile 4.67 -> 3.62 ms (3.86 ms read off the relaxation, then 3.62 ms from the least-period pass,
which the tighter limit lets finish), ShuffleNet on the A311D profile 17.18 -> 16.96 ms; 0.01-0.14 CPU s each.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..cost.mapping import Mapping, mapping_from_pu_list
from .pareto import pareto_mask

__all__ = ["BEAM", "COUNT", "relaxed_sequence_mappings"]

BEAM = 64
"""Labels kept per block and mode. ``python benchmarks/search_bench.py --sequence-beams
resnet50/amlogic_a311d,shufflenet/amlogic_a311d`` printed, at 64 sequences evaluated (ResNet-50 / A311D, best
78.18 ms without them): beams of 8, 16, 32, 64, 128 and 256 give 68.63, 67.78, 67.78, 66.54, 65.61 and 66.16 ms
in 0.05, 0.07, 0.12, 0.14, 0.21 and 0.38 CPU s (ShuffleNet / A311D, 17.18 ms without: 17.85, 17.85, 17.75, 16.96,
17.63, 17.41 ms): a larger beam is not reliably better, and costs more."""
COUNT = 64
"""Complete sequences turned into mappings (each costs one exact evaluation, about 1 ms on 48 blocks). The
relaxation leaves out the transfers of edges that skip a stage, so its order is not the evaluated one: the same
command printed, at a beam of 64, 67.68, 66.54 and 66.54 ms for 16, 64 and 256 sequences on ResNet-50 / A311D, in
0.09, 0.14 and 0.20 CPU s."""


def relaxed_sequence_mappings(dp, limit_s: float, guide: Optional[Tuple[np.ndarray, np.ndarray]] = None,
                              beam: Optional[int] = BEAM, count: int = COUNT,
                              max_stages: Optional[int] = None) -> List[Tuple[float, Mapping]]:
    """Mappings of single-PU stages (PUs reused) from the least sequences of ``dp``'s relaxation (module
    docstring).

    Parameters
    ----------
    dp : parapipe.search.relaxation.RelaxedDP
        The relaxation, on the problem (or one with times no longer) whose blocks the mappings cover.
    limit_s : float
        Only sequences whose relaxed period is below it, s (``inf``: all).
    guide : (ndarray (k,), ndarray (n, NM)), optional
        The Lagrangian weights and the cost-to-go of ``dp``'s expanded modes
        (:attr:`parapipe.search.relaxation.Relaxed.h_probe`).
    beam : int or None
        Labels kept per block and mode (None: every Pareto-optimal one; exact and exponential).
    count : int
        Sequences returned at most.
    max_stages : int, optional
        Mappings with more stages are left out.

    Returns
    -------
    list of (relaxed_period_s, Mapping)
        Least relaxed period first (ties in the order the labels were built); distinct mappings; empty when no
        sequence is below ``limit_s``.
    """
    n, k = dp.n, dp.k
    modes = np.flatnonzero(dp.single)
    lam, togo = guide if guide is not None else (None, None)

    def admit(x: np.ndarray, v: int, m: int) -> np.ndarray:
        """Indices of the rows of ``x`` (labels of mode ``m`` after block ``v``) kept, best estimate first."""
        top = x.max(axis=1)
        ok = (top < limit_s) & (x.sum(axis=1) + dp.rest[v + 1] < limit_s * k)
        score = top
        if lam is not None and togo is not None:
            est = x @ lam + togo[v, m]
            ok &= est < limit_s
            score = np.maximum(top, est)
        idx = np.flatnonzero(ok)
        if len(idx) > 1:
            idx = idx[pareto_mask(x[idx])]
        if beam is not None and len(idx) > beam:
            idx = idx[np.argsort(score[idx], kind="stable")[:beam]]
        return idx

    # Per block, the kept labels of every mode in one array: busy (r, k), mode, and the parent row in the previous
    # block's arrays (-1 at block 0). A single-PU mode cannot open a stage on its own PU (RelaxedDP.moves), so
    # a stage begins exactly where the PU changes.
    rows, mode_of, parent = [], [], []
    first = [(m, dp.open[m] + dp.node[0, m]) for m in modes.tolist() if dp.opened[0, m]]
    first = [(m, x) for m, x in first if len(admit(x[None], 0, m))]
    rows.append(np.array([x for _, x in first]).reshape(len(first), k))
    mode_of.append(np.array([m for m, _ in first], dtype=int))
    parent.append(np.full(len(first), -1))
    for v in range(1, n):
        prev, prev_mode = rows[-1], mode_of[-1]
        if not len(prev):
            return []
        move_a, move_b = dp.moves(v)
        xs, ms, ps = [], [], []
        for m2 in modes[dp.opened[v, modes]].tolist():
            cost_b, cost_a = move_b[prev_mode, m2], move_a[prev_mode, m2]
            new_stage, same = np.flatnonzero(np.isfinite(cost_b)), np.flatnonzero(np.isfinite(cost_a))
            if not len(new_stage) and not len(same):
                continue
            cand = np.concatenate([  # a new stage on the mode's PU (its dispatch, its input hand-off) / the same
                prev[new_stage] + dp.open[m2] + dp.node[v, m2] + cost_b[new_stage, None] * dp.charge[m2],
                prev[same] + dp.node[v, m2] + cost_a[same, None] * dp.member[m2]])
            idx = admit(cand, v, m2)
            xs.append(cand[idx])
            ms.append(np.full(len(idx), m2))
            ps.append(np.concatenate([new_stage, same])[idx])
        rows.append(np.concatenate(xs) if xs else np.empty((0, k)))
        mode_of.append(np.concatenate(ms) if ms else np.empty(0, dtype=int))
        parent.append(np.concatenate(ps) if ps else np.empty(0, dtype=int))
    final = rows[-1].max(axis=1) if len(rows[-1]) else np.empty(0)
    out: List[Tuple[float, Mapping]] = []
    seen = set()
    for i in np.argsort(final, kind="stable").tolist():
        pus, r = [0] * n, i
        for v in range(n - 1, -1, -1):
            pus[v] = int(dp.pu[mode_of[v][r]])
            r = int(parent[v][r])
        mapping = mapping_from_pu_list(dp.problem, pus)  # runs of one PU: a stage each
        if max_stages is not None and len(mapping.stages) > max_stages:
            continue
        if mapping in seen:
            continue
        seen.add(mapping)
        out.append((float(final[i]), mapping))
        if len(out) >= count:
            break
    return out
