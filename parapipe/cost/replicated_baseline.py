"""The ``replicated`` baseline: every PU that can run the whole model serves its own frames.

What a user does first for throughput (one single-thread session pinned per core, frames dealt alternately),
generalised to heterogeneous PUs: one stage holding every block, replicated over every PU that supports all the
blocks and can hold the whole model's weights (``MappingProblem.memory_bytes``), frames dealt in proportion to
speed. Evaluated with the shared cost model (:func:`parapipe.cost.evaluate.evaluate`, replication formulas in
:mod:`parapipe.cost.replication`): period ``1 / Σ_p 1/T_p`` with ``T_p`` the whole model's time on PU ``p``.

Pure (numpy only), like the rest of :mod:`parapipe.cost`; the search offers these mappings next to its other
baselines (strategy ``replicated`` in pareto.json).
"""
from __future__ import annotations

from itertools import combinations
from typing import List, Optional, Tuple

import numpy as np

from .evaluate import evaluate
from .mapping import Mapping, ReplicaMapping, StageMapping
from .schedule import Evaluation
from .problem import MappingProblem

__all__ = ["whole_model_pus", "replicated_mapping", "replicated_baseline", "replicated_mappings"]


def whole_model_pus(problem: MappingProblem) -> List[int]:
    """PU indices that can run every block and hold every block's weights, in PU order."""
    weights = float(np.sum(problem.weight_nbytes))
    return [p for p in range(problem.n_pus)
            if np.isfinite(problem.time_s[:, p]).all() and not weights > problem.memory_bytes[p]]


def replicated_mapping(problem: MappingProblem, pus: Optional[List[int]] = None) -> Optional[Mapping]:
    """One stage of all blocks replicated over ``pus`` (default :func:`whole_model_pus`), one PU per replica.

    Returns
    -------
    Mapping or None
        None when fewer than two PUs are given or able (one PU is the ``single`` baseline).

    Raises
    ------
    ValueError
        A PU of ``pus`` that cannot run some block, or one listed twice.
    """
    pus = whole_model_pus(problem) if pus is None else list(pus)
    if len(set(pus)) != len(pus):
        raise ValueError(f"PU listed twice in {pus}")
    for p in pus:
        if not np.isfinite(problem.time_s[:, p]).all():
            raise ValueError(f"PU {problem.pu_names[p]!r} cannot run every block")
    if len(pus) < 2:
        return None
    n = problem.n_blocks
    first, *others = pus
    return Mapping((StageMapping(0, n, (first,), (first,) * n, None,
                                 tuple(ReplicaMapping((p,), (p,) * n) for p in others)),))


def replicated_baseline(problem: MappingProblem) -> Optional[Tuple[Mapping, Evaluation]]:
    """The ``replicated`` baseline: every PU able to run the whole model (:func:`whole_model_pus`) serves its own
    frames. Returns ``(mapping, evaluation)``, or None when fewer than two PUs can run the whole model."""
    mapping = replicated_mapping(problem)
    return None if mapping is None else (mapping, evaluate(problem, mapping))


def replicated_mappings(problem: MappingProblem) -> List[Tuple[Mapping, Evaluation]]:
    """Every subset of at least two whole-model PUs as a replicated mapping, with its evaluation.

    Dropping a slow, power-hungry PU can save energy per inference at a lower throughput, so the subsets give
    the replicated strategy's own front (``2^k - k - 1`` mappings for ``k`` able PUs; the full set, the
    :func:`replicated_baseline`, first).
    """
    able = whole_model_pus(problem)
    out = []
    for size in range(len(able), 1, -1):
        for subset in combinations(able, size):
            mapping = replicated_mapping(problem, list(subset))
            assert mapping is not None  # two or more able PUs always make a replicated mapping
            out.append((mapping, evaluate(problem, mapping)))
    return out
