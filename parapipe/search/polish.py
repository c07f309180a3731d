"""CP-SAT polish of multi-PU stages (:mod:`.cpsat`) at their operating points, memoised per (start, stop, group,
operating points), within a budget of CP-SAT
deterministic time (the same stages are solved, with the same results, whatever the machine's load).

OR-Tools' CP-SAT module is imported on the first stage that needs it (the import costs about 0.2 s; mappings with
single-PU stages only never pay it), unless the forked DP passes left this process idle to import it
(:func:`parapipe.search.passes.import_solvers`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..cost.mapping import Mapping, StageMapping
from ..cost.problem import MappingProblem
from .budget import CPSAT_DET_PER_S, CPSAT_MODEL_S_PER_CELL
from .cpsat import StageSchedule, solve_stage

__all__ = ["stage_kinds", "polishable", "Polisher"]


def stage_kinds(mapping: Mapping) -> List[str]:
    """Schedule label per stage: ``single-pu`` or ``greedy`` (list-scheduled); a replicated stage's label is its
    first replica's."""
    return ["single-pu" if len(st.pus) == 1 else "greedy" for st in mapping.stages]


def polishable(stage: StageMapping, max_blocks: int) -> bool:
    """Whether the polish hands ``stage`` to CP-SAT: multi-PU, at most ``max_blocks`` blocks, and not replicated (a
    replicated stage keeps its replicas' list schedules)."""
    return len(stage.pus) > 1 and stage.stop - stage.start <= max_blocks and not stage.replicas


class Polisher:
    """Re-schedules the multi-PU stages of mappings with CP-SAT.

    Parameters
    ----------
    problem : MappingProblem
    max_blocks : int
        Largest stage (in blocks) handed to CP-SAT.
    stage_limit_s : float
        Budget per stage in deterministic seconds: CP-SAT gets ``stage_limit_s ×``
        :data:`parapipe.search.budget.CPSAT_DET_PER_S` of its deterministic time.
    total_s : float
        Budget of all stages in deterministic seconds, each solve charged its CP-SAT deterministic time /
        ``CPSAT_DET_PER_S`` plus :data:`parapipe.search.budget.CPSAT_MODEL_S_PER_CELL` per block × PU: once spent
        (less than 0.05 s left), no new stage is solved.

    After polishing, ``spent_s`` is the deterministic time used and ``wall_stops`` lists the stages whose solve the
    wall-clock safety limit ended (``start-stop@pus``; the polish is then not reproducible).
    seed : int
        CP-SAT random seed (one worker: same seed, same schedule).
    """

    def __init__(self, problem: MappingProblem, max_blocks: int, stage_limit_s: float, total_s: float,
                 seed: int = 0):
        self.problem = problem
        self.max_blocks = max_blocks
        self.stage_limit_s = stage_limit_s
        self.total_s = total_s
        self.spent_s = 0.0
        self.wall_stops: List[str] = []
        self.seed = seed
        self.memo: Dict[tuple, Optional[StageSchedule]] = {}
        self.n_solves = 0
        self.patience_stop = False

    def outcome(self) -> Dict[str, Any]:
        """What :meth:`adopt` takes: the counters a polish run in a forked process sends back (``n_solves``,
        ``spent_s``, ``wall_stops``, ``patience_stop``)."""
        return {"n_solves": self.n_solves, "spent_s": self.spent_s, "wall_stops": list(self.wall_stops),
                "patience_stop": self.patience_stop}

    def adopt(self, outcome: Dict[str, Any]) -> None:
        """Take the counters of :meth:`outcome` (of this polisher's copy in a forked process)."""
        self.n_solves, self.spent_s = int(outcome["n_solves"]), float(outcome["spent_s"])
        self.wall_stops, self.patience_stop = list(outcome["wall_stops"]), bool(outcome["patience_stop"])

    def wants(self, mapping: Mapping) -> bool:
        """True if some stage of ``mapping`` is multi-PU and small enough to polish."""
        return any(polishable(st, self.max_blocks) for st in mapping.stages)

    def polish(self, mapping: Mapping, solve: bool = True) -> Tuple[Mapping, List[str]]:
        """``mapping`` with each polishable stage replaced by CP-SAT's schedule, and the schedule labels
        (``cp-sat optimal`` | ``cp-sat feasible`` where CP-SAT answered, else as :func:`stage_kinds`).
        ``solve=False``: only stages solved before are replaced (the others keep their list schedules), and
        nothing is solved; ``n_solves`` counts the stages CP-SAT was run on."""
        stages, kinds = [], []
        for st, kind in zip(mapping.stages, stage_kinds(mapping)):
            new = st
            if polishable(st, self.max_blocks):
                key = (st.start, st.stop, st.pus, st.ops)
                at = self.problem.at_operating_points(st.op_choice())
                if key not in self.memo and not solve:
                    pass
                elif key not in self.memo:
                    left = self.total_s - self.spent_s
                    if left <= 0.05:
                        self.memo[key] = None
                    else:
                        rep: Dict[str, Any] = {}
                        self.n_solves += 1
                        det_s = min(left, self.stage_limit_s) * CPSAT_DET_PER_S
                        self.memo[key] = solve_stage(at, st.start, st.stop, st.pus, hint=st.assignment,
                                                     time_limit_s=det_s, seed=self.seed, report=rep)
                        cells = (st.stop - st.start) * len(st.pus)
                        self.spent_s += rep["deterministic_s"] / CPSAT_DET_PER_S + CPSAT_MODEL_S_PER_CELL * cells
                        if rep["wall_stopped"]:
                            self.wall_stops.append(f"{st.start}-{st.stop}@{','.join(map(str, st.pus))}")
                sol = self.memo.get(key)
                if sol is not None:
                    pus = tuple(sorted(set(sol.assignment)))
                    new = StageMapping(st.start, st.stop, pus, sol.assignment, sol.order,
                                       ops=None if st.ops is None else tuple(st.ops[st.pus.index(p)] for p in pus))
                    kind = "cp-sat optimal" if sol.optimal else "cp-sat feasible"
            stages.append(new)
            kinds.append(kind)
        return Mapping(tuple(stages)), kinds
