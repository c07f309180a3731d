"""The structural rules of a mapping, stated once for both of its forms.

A mapping is an ordered list of stages. The rules (every other place that needs them calls :func:`check_stages`:
the pareto.json reader :class:`parapipe.mapping.ParetoDoc`, the converter :mod:`parapipe.mapping.index`, the
plan builder :func:`parapipe.execution.plan.build_plan` and :func:`parapipe.cost.evaluate.evaluate`):

1. **Coverage and order**: every block is in exactly one stage, and each stage holds the run of blocks that
   follows the previous stage's in the block order (a topological order of the block DAG), so no block depends
   on a later stage.
2. **Placement**: a stage (or a replica) lists each of its PUs once, and runs each of its blocks on one of them.
3. **Replicas**: the replicas of a stage use disjoint PUs.
4. **Schedule order**: a stage's (replica's) execution order lists exactly its blocks, each once, and, when the
   block DAG is given, every block after its in-stage producers.

The rules are generic in the block and PU keys: block names and PU names on the typed document
(:class:`parapipe.mapping.Stage`), indices on the index form (:class:`parapipe.cost.mapping.StageMapping`). A
stage needs ``blocks``, ``pus``, ``pu_of(block)``, ``block_order()`` and ``replica_stages()`` (every replica as
a stage over the same blocks, the stage's own first; ``(stage,)`` when not replicated).
"""
from __future__ import annotations

import operator
from typing import Callable, Dict, Hashable, Iterable, Optional, Sequence, SupportsIndex, TypeVar

__all__ = ["RuleViolation", "check_stages"]

#: A block key: a block name (the document form) or a block index (the index form).
K = TypeVar("K", bound=Hashable)


class RuleViolation(ValueError):
    """A mapping that breaks a rule of this module.

    Attributes
    ----------
    stage : int or None
        Index of the offending stage (None: the mapping as a whole).
    replica : int or None
        Index of the offending replica of that stage (0 is the stage's own; None: the stage).
    field : str
        The stage's (replica's) field at fault, as the document names it: ``blocks``, ``pus``,
        ``assignment.<block>``, ``order`` (empty for the stage list itself).
    problem, fix : str
        What is wrong and what to do, for a one-line error.
    """

    def __init__(self, stage: Optional[int], replica: Optional[int], field: str, problem: str, fix: str) -> None:
        self.stage, self.replica, self.field, self.problem, self.fix = stage, replica, field, problem, fix
        super().__init__(f"{self.where()}: {problem}")

    def where(self, stages: str = "stages") -> str:
        """The field path under ``stages`` (``stages[1].replicas[2].pus``, ``stages[0].assignment.b``)."""
        out = stages if self.stage is None else f"{stages}[{self.stage}]"
        if self.replica is not None:
            out += f".replicas[{self.replica}]"
        return f"{out}.{self.field}" if self.field else out


def _name(key: Hashable, names: Optional[Sequence[str]]) -> Hashable:
    """``names[key]`` for an integer key when ``names`` are given, else the key itself (a name)."""
    if names is not None and isinstance(key, SupportsIndex):
        return names[operator.index(key)]
    return key


def check_stages(stages: Sequence, blocks: Optional[Sequence[K]], preds: Optional[Callable[[K], Iterable[K]]] = None,
                 block_names: Optional[Sequence[str]] = None, pu_names: Optional[Sequence[str]] = None) -> None:
    """Check ``stages`` against the rules of this module; return None or raise at the first violation.

    Parameters
    ----------
    stages : sequence of stages
        First stage first (see the module docstring for what a stage needs).
    blocks : sequence of block keys, optional
        Every block in the block order (a topological order); None skips the coverage and order rule (a
        document without a block list).
    preds : callable, optional
        Block -> its producer blocks; None skips the schedule order's dependency check.
    block_names, pu_names : sequence of str, optional
        Names of integer keys, for the messages (keys are their own names when None).

    Raises
    ------
    RuleViolation
        Naming the stage, replica and field, with a fix.
    """
    bname = (lambda b: repr(_name(b, block_names)))
    pname = (lambda p: repr(_name(p, pu_names)))
    index: Dict[Hashable, int] = {b: i for i, b in enumerate(blocks)} if blocks is not None else {}
    seen: Dict[Hashable, int] = {}
    last = -1
    for s, st in enumerate(stages):
        for b in st.blocks:
            if blocks is not None and b not in index:
                raise RuleViolation(s, None, "blocks", f"unknown block {bname(b)}",
                                    "use block names from the document's 'blocks'")
            if b in seen:
                raise RuleViolation(s, None, "blocks", f"block {bname(b)} is already in stage {seen[b]}",
                                    "put every block in exactly one stage")
            seen[b] = s
        if not len(st.blocks):
            raise RuleViolation(s, None, "blocks", "the stage has no blocks", "drop the empty stage")
        if blocks is not None:
            pos = sorted(index[b] for b in st.blocks)
            if pos[0] <= last or pos != list(range(pos[0], pos[0] + len(pos))):
                raise RuleViolation(s, None, "blocks", "stages out of order: a stage must hold the blocks that "
                                    "follow the previous stage's in the document's block order",
                                    "keep the stages in block order, each a contiguous run of blocks")
            last = pos[-1]
        views = st.replica_stages()
        used: Dict[Hashable, int] = {}
        for r, view in enumerate(views):
            rep = r if len(views) > 1 else None
            what = "replica" if rep is not None else "stage"
            if len(set(view.pus)) != len(view.pus) or not len(view.pus):
                raise RuleViolation(s, rep, "pus", f"a PU is listed twice in {[_name(p, pu_names) for p in view.pus]}"
                                    if len(view.pus) else "the stage has no PUs", "list each PU once")
            for pu in view.pus:
                if pu in used:
                    raise RuleViolation(s, rep, "pus", f"PU {pname(pu)} is already in replica {used[pu]}",
                                        "give every replica of a stage its own PUs")
                used[pu] = r
            for b in st.blocks:
                pu = view.pu_of(b)
                if pu not in view.pus:
                    raise RuleViolation(s, rep, f"assignment.{_name(b, block_names)}",
                                        f"PU {pname(pu)} is not one of the {what}'s PUs "
                                        f"{[_name(p, pu_names) for p in view.pus]}",
                                        f"assign the block to a PU of its {what}" +
                                        (" or add the PU to the stage" if what == "stage" else ""))
            order = list(view.block_order())
            members = set(st.blocks)  # the stage's blocks, each once (checked above)
            if len(order) != len(members) or set(order) != members:
                raise RuleViolation(s, rep, "order", "does not list exactly the stage's blocks",
                                    "list every block of the stage once, in execution order")
            if preds is not None:
                done = set()
                for b in order:
                    for u in preds(b):
                        if u in members and u not in done:
                            raise RuleViolation(s, rep, "order", f"block {bname(b)} comes before its producer "
                                                f"{bname(u)}", "give the stage's blocks in a topological order")
                    done.add(b)
    if blocks is not None and len(seen) != len(index):
        missing = [_name(b, block_names) for b in blocks if b not in seen]
        raise RuleViolation(None, None, "", f"{len(missing)} block(s) in no stage, e.g. {missing[:3]}",
                            "put every block in exactly one stage")
