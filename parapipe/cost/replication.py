"""Replicated stages (data parallelism inside the pipeline): the formulas, as pure functions.

A **replicated stage** runs one contiguous block range *whole* on each of ``R`` replicas; a replica is one PU or a
PU group that list-schedules the blocks among its PUs (intra-stage operator parallelism), exactly as an ordinary
stage does. Frames are dealt to the replicas in proportion to their speed (the executor deals them by smooth
weighted round robin with these shares, ``ppexec``'s dispatcher). With ``T_r`` the time replica ``r`` takes for
one frame (its input hand-off plus the makespan of its schedule, as for any stage; s):

* **share of frames** ``w_r = (1 / T_r) / Σ_j (1 / T_j)`` (a replica that cannot run the blocks, ``T_r = inf``,
  gets none);
* **period contribution** ``P_s = 1 / Σ_r (1 / T_r)``: the replicas together finish one frame every ``P_s`` s;
* **busy time per inference** of every PU of replica ``r``: ``w_r · T_r = P_s`` (the replica holds its PUs for
  ``T_r`` on each of its frames, a fraction ``w_r`` of all frames), added to what the PU does in other stages;
* **latency**: a frame dealt to replica ``r`` spends ``T_r`` in the stage. The model's latency (the one the
  search minimises and ``run`` compares with the idle latency it measures) is the **mean over the dealt
  frames**, ``L_s = Σ_r w_r · T_r``; the **worst replica**, ``max_r T_r``, is reported next to it
  (``Evaluation.latency_worst_s``);
* **energy per inference**: the blocks of a frame run on one replica, so the dynamic energy is
  ``Σ_r w_r · E_dyn,r``; idle and static power are paid over the period as for any mapping;
* **memory**: every replica holds its own copy of the weights of the blocks it runs, so a PU holds the weights
  of every block assigned to it in any stage or replica: ``Σ weight_nbytes[v]`` over those blocks, which must
  not exceed the PU's memory limit when the profile gives one.

Hand-offs into a replicated stage, and out of it into a later stage, go from whichever replica produced the
tensor for that frame. The replicas of different stages are dealt independently, so the mean input time of a
stage is the share-weighted mean over its producers' replicas, and its worst case takes each producing stage's
worst replica (:func:`mean_and_worst_input_s`).

A stage with one replica gives back the plain model (``P_s = L_s = T``), so every non-replicated result is
unchanged. Units: seconds, bytes, joules.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Sequence, Tuple, Union

import numpy as np

__all__ = ["replica_shares", "replicated_period_s", "replicated_energy_j", "mean_and_worst_input_s",
           "pu_weight_nbytes", "memory_violations"]


def replica_shares(times_s: Sequence[float]) -> Tuple[float, ...]:
    """Share of the frames each replica gets: ``(1 / T_r) / Σ_j (1 / T_j)``.

    Parameters
    ----------
    times_s : sequence of float, length R >= 1
        Time of one frame on each replica, s (>= 0; ``inf`` for a replica that cannot run the blocks).

    Returns
    -------
    tuple of float, length R
        Non-negative shares summing to 1. Replicas with ``T_r = 0`` share the frames equally among themselves;
        if every replica is ``inf`` the shares are equal (the stage cannot run; its period is ``inf``).

    Raises
    ------
    ValueError
        No replica, or a negative or NaN time.
    """
    times = [float(t) for t in times_s]
    if not times:
        raise ValueError("a stage needs at least one replica")
    if any(math.isnan(t) or t < 0 for t in times):
        raise ValueError(f"replica times must be >= 0, got {times}")
    zero = [t == 0.0 for t in times]
    if any(zero):
        return tuple((1.0 / sum(zero)) if z else 0.0 for z in zero)
    inverse = [0.0 if math.isinf(t) else 1.0 / t for t in times]
    total = sum(inverse)
    if total == 0.0:
        return tuple(1.0 / len(times) for _ in times)
    return tuple(x / total for x in inverse)


def replicated_period_s(times_s: Sequence[float]) -> float:
    """Period contribution of a replicated stage, ``1 / Σ_r (1 / T_r)`` s (``T`` itself for one replica; 0 if a
    replica takes no time; ``inf`` if none can run). Raises ValueError as :func:`replica_shares`."""
    times = [float(t) for t in times_s]
    replica_shares(times)  # validates
    if len(times) == 1:
        return times[0]
    if any(t == 0.0 for t in times):
        return 0.0
    total = sum(0.0 if math.isinf(t) else 1.0 / t for t in times)
    return 1.0 / total if total > 0 else math.inf


def replicated_energy_j(dyn_energy_j: Sequence[float], shares: Sequence[float]) -> float:
    """Dynamic energy per inference of a replicated stage, ``Σ_r w_r · E_dyn,r`` J (``E_dyn,r`` the energy one
    frame's blocks draw above idle on replica ``r``)."""
    return float(sum(w * e for w, e in zip(shares, dyn_energy_j) if w > 0))


def mean_and_worst_input_s(terms: Iterable[Tuple[int, Sequence[float], Sequence[float]]]) -> Tuple[float, float]:
    """Mean and worst stage input time when producers may be replicated.

    Parameters
    ----------
    terms : iterable of (producer stage, shares, seconds)
        One entry per hand-off ``(producer block, receiving PU)`` into the replica: the index of the stage that
        produced the tensor, that stage's replica shares, and the hand-off time from each of its replicas (same
        length; one entry for a non-replicated producer).

    Returns
    -------
    (mean_s, worst_s)
        ``Σ_terms Σ_j w_j · t_j`` and ``Σ_producer stages max_j Σ_terms of that stage t_j`` (the stages deal
        independently; one producing stage's replica is the same for all its tensors of a frame).
    """
    mean = 0.0
    per_stage: Dict[int, np.ndarray] = {}
    for stage, shares, seconds in terms:
        mean += sum(w * t for w, t in zip(shares, seconds))
        acc = per_stage.get(stage)
        per_stage[stage] = np.asarray(seconds, dtype=float) + (0.0 if acc is None else acc)
    worst = sum(float(v.max()) for v in per_stage.values())
    return mean, worst


def pu_weight_nbytes(weight_nbytes: Union[Sequence[float], np.ndarray], placements: Iterable[Tuple[int, int]],
                     n_pus: int) -> np.ndarray:
    """Weight bytes each PU holds: ``Σ weight_nbytes[v]`` over every (block ``v``, PU ``p``) placement.

    Parameters
    ----------
    weight_nbytes : sequence of float, length n
        Constant (weight) bytes of each block.
    placements : iterable of (block, PU)
        Every block of every stage on the PU that runs it, once per replica (so a replicated block counts once
        on each replica's PU: each replica holds its own copy).
    n_pus : int

    Returns
    -------
    numpy.ndarray, shape (n_pus,)
    """
    held = np.zeros(n_pus)
    for v, p in placements:
        held[p] += float(weight_nbytes[v])
    return held


def memory_violations(held_nbytes: Union[Sequence[float], np.ndarray],
                      limit_nbytes: Union[Sequence[float], np.ndarray]) -> List[int]:
    """PU indices whose held weight bytes exceed their memory limit (``inf`` or NaN limit: none)."""
    out = []
    for p, (held, limit) in enumerate(zip(held_nbytes, limit_nbytes)):
        if np.isfinite(limit) and held > limit:
            out.append(p)
    return out
