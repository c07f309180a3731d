"""Exact evaluation of one hierarchical mapping under the shared cost model.

The model, stated once (every search, baseline and report uses it through :func:`evaluate`):

* A mapping is an ordered list of stages; stage ``s`` owns a contiguous range of blocks (in the problem's
  topological order), a group of PUs, and an assignment of each of its blocks to one PU of the group.
* **Stage time** ``T_s = T_in_s + makespan_s``. ``T_in_s`` is the input hand-off: for every block ``u`` of an
  earlier stage and every PU ``q`` of this stage that reads ``u``'s output, one transfer
  ``alpha[pu(u), q] + nbytes / beta[pu(u), q]`` (nbytes = the largest edge ``u → v`` with ``v`` on ``q``), done
  one after the other. ``makespan_s`` is the list schedule of the stage's blocks in ``order`` on their PUs: one
  block at a time per PU, a block starts when its PU is free and its in-stage predecessors' outputs have arrived
  (plus a transfer when the predecessor ran on another PU).
* A stage reserves all PUs of its group for ``T_s`` per inference. A PU may serve several (non-adjacent) stages:
  its **busy time** per inference is the sum of their ``T_s``.
* **Period** ``P = max_pu busy[pu]``; **throughput** ``1 / P``; **latency** ``L = Σ_s T_s`` (one input through an
  idle pipeline).
* **Energy per inference** ``E = Σ_blocks t·p_active + Σ_pu P_idle[pu]·(P − compute[pu]) + P_static·P`` where
  ``compute[pu]`` is the time the PU runs blocks. Transfers lengthen stages (hence the period and the idle and
  static energy) but draw no power of their own: memory-traffic power is part of the board's static power.
  Written as ``E = E_dyn + (Σ_pu P_idle + P_static)·P`` with ``E_dyn = Σ (p_active − P_idle)·t``, which is how the
  search accumulates it stage by stage.
* **Measured sub-models** (``MappingProblem.submodel_time_s``): the executor runs each single-PU stage (or
  replica) as one sub-model, and each task of a multi-PU stage (:func:`parapipe.cost.tasks.stage_tasks`) as one.
  Where those blocks have a measured time as one sub-model on that PU, a single-PU stage takes it instead of its
  block sum (its blocks' times scaled to it), and a task's blocks are scaled to it alike.
* **Replicated stages** (``StageMapping.replicas``): the block range runs whole on each replica (a PU or a PU
  group), frames dealt in proportion to speed; period contribution ``1 / Σ_r 1/T_r``, every replica PU busy
  that long per inference, latency the mean over dealt frames (worst replica in ``latency_worst_s``), dynamic
  energy ``Σ_r w_r E_dyn,r``, weights held once per replica. Formulas and their derivation:
  :mod:`parapipe.cost.replication`. A mapping without replicas is evaluated exactly as before.
* **Operating points** (``StageMapping.ops``, :mod:`parapipe.soc.operating_points`): a stage runs each of its PUs
  at one point; its blocks take that point's times and powers (:meth:`MappingProblem.at_operating_points`). A PU
  serving several stages at different points pays its ``transition_s`` per switch per inference, added to its
  busy time (:func:`parapipe.cost.schedule.switching_s`); the switch is not on a frame's path, so the latency
  does not include it. Idle power is the same at every point. Without ``ops`` every PU runs at its highest point.
* **Pipeline terms** (:mod:`parapipe.cost.pipeline_terms`, optional): a plain mapping gets all of them
  (:func:`parapipe.cost.pipeline_terms.apply_terms`); a mapping with replicated stages gets the slowdown ``κ``
  (every block, range, task and transfer time × ``κ``), the hand-off ``h`` between the PUs of a multi-PU stage
  or replica, and the dispatch ``d`` with the invocation ``i_p`` (added to every stage's and every replica's
  time ``T_r``: each frame dealt to a replica hops into it as into any stage). Its stages' PUs are disjoint, so
  sharing and overlap do not arise; memory contention is not modelled for it.
"""
from __future__ import annotations

from typing import Optional

from .mapping import Mapping
from .pipeline_terms import PipelineTerms, apply_terms, replicated_with_terms
from .problem import MappingProblem
from .rules import RuleViolation, check_stages
from .schedule import Evaluation, evaluate_plain

__all__ = ["evaluate", "check_operating_points"]


def check_operating_points(problem: MappingProblem, mapping: Mapping) -> None:
    """Every stated operating point exists in its PU's table.

    Raises
    ------
    parapipe.cost.rules.RuleViolation
        ``stages[s].ops`` (or a replica's) names a point index the PU does not have.
    """
    for s, st in enumerate(mapping.stages):
        for r, view in enumerate(st.replica_stages()):
            for p, o in view.op_choice():
                if not 0 <= o < problem.n_operating_points(p):
                    raise RuleViolation(s, r if st.replicas else None, "ops",
                                        f"PU {problem.pu_names[p]} has {problem.n_operating_points(p)} operating "
                                        f"point(s), not an index {o}", "choose one of its operating points")


def evaluate(problem: MappingProblem, mapping: Mapping, terms: Optional[PipelineTerms] = None) -> Evaluation:
    """Period, latency and energy per inference of ``mapping`` (model in the module docstring).

    ``terms`` adds the pipeline-level terms learnt from measured runs (:func:`parapipe.cost.pipeline_terms.apply_terms`):
    what every point must be evaluated with before it is reported. None or default terms give the plain model
    exactly. A mapping with replicated stages takes the slowdown, hand-off, dispatch and invocation only (module
    docstring).

    Raises
    ------
    parapipe.cost.rules.RuleViolation
        A ``ValueError``: the mapping breaks a structural rule (:mod:`parapipe.cost.rules`: stages that do not
        cover blocks ``0..n-1`` contiguously in order, a block's PU outside its stage's or replica's, two replicas
        of a stage sharing a PU, a schedule order against the dependencies).
    """
    check_stages(mapping.stages, range(problem.n_blocks), problem.preds.__getitem__, problem.block_names,
                 problem.pu_names)
    check_operating_points(problem, mapping)
    if terms is None or terms.is_default():
        return evaluate_plain(problem, mapping)
    if mapping.replicated:  # slowdown and dispatch; the other terms do not arise or are not modelled here
        return replicated_with_terms(problem, mapping, terms)
    return apply_terms(problem, mapping, evaluate_plain(problem, mapping), terms)
