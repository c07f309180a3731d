"""The one converter from names to indices: a typed mapping (:class:`parapipe.mapping.Stage` list) or a PU list
written by people (``gpu,gpu,big,big,gpu``) -> the index form the cost model evaluates
(:class:`parapipe.cost.mapping.Mapping`). The other direction is :func:`parapipe.mapping.doc_from_result`.

Both check the structural rules once (:func:`parapipe.cost.rules.check_stages`) and raise a one-line
:class:`~parapipe.errors.InputError` naming the field.
"""
from __future__ import annotations

from typing import Callable, Iterable, List, Optional, Sequence

from parapipe.cost.mapping import Mapping, ReplicaMapping, StageMapping, mapping_from_pu_list
from parapipe.cost.problem import MappingProblem
from parapipe.cost.rules import RuleViolation, check_stages
from parapipe.errors import input_error
from parapipe.mapping.model import Point, Stage

__all__ = ["parse_pu_list", "index_mapping", "mapping_from_point", "mapping_from_stages"]


def parse_pu_list(problem: MappingProblem, text: str, source: str = "--mapping") -> Mapping:
    """Mapping from one PU name per block in topological order; runs of the same entry form a stage.

    An entry ``a|b`` (PU names joined by ``|``) runs the block on a replicated stage: a run of the same such
    entry is one stage whose replicas are the single PUs ``a``, ``b``, ... (frames dealt in proportion to
    speed, :mod:`parapipe.cost.replication`), e.g. ``cpu0|cpu1,cpu0|cpu1,cpu0|cpu1`` for two copies of a
    three-block model.

    Raises
    ------
    InputError
        Wrong length, an unknown PU name, a PU listed twice in an entry, or a PU that cannot run its block.
    """
    names = [t.strip() for t in text.split(",") if t.strip()]
    if len(names) != problem.n_blocks:
        raise input_error(source, None, f"mapping has {len(names)} entries but the problem has {problem.n_blocks} "
                          f"blocks ({', '.join(problem.block_names[:3])}{', ...' if problem.n_blocks > 3 else ''})",
                          "give one PU per block in topological order (a model's blocks: 'parapipe inspect MODEL "
                          "--max-blocks 48 --blocks'; a block table's: its rows)")
    entries = []
    for i, n in enumerate(names):
        alts = [a.strip() for a in n.split("|")]
        for a in alts:
            if not a:
                raise input_error(source, f"entry {i + 1}", f"empty PU name in {n.strip()!r}",
                                  "separate the replicas of a stage with '|' between PU names, e.g. 'big|gpu'")
            if a not in problem.pu_names:
                raise input_error(source, f"entry {i + 1}", f"unknown PU {a!r}",
                                  f"choose from {', '.join(problem.pu_names)}")
        if len(set(alts)) != len(alts):
            raise input_error(source, f"entry {i + 1}", f"a PU is listed twice in {n!r}",
                              "give each replica of a stage its own PU")
        entries.append(tuple(problem.pu_names.index(a) for a in alts))
    for j, entry in enumerate(entries):
        for p in entry:
            if problem.time_s[j, p] == float("inf"):
                raise input_error(source, f"entry {j + 1}", f"PU {problem.pu_names[p]!r} cannot run block "
                                  f"{problem.block_names[j]!r}", "map it to a PU that supports its op types")
    if all(len(alts) == 1 for alts in entries):
        return mapping_from_pu_list(problem, [alts[0] for alts in entries])
    stages = []
    start = 0
    for i in range(1, len(entries) + 1):
        if i == len(entries) or entries[i] != entries[start]:
            first, *others = entries[start]
            stages.append(StageMapping(start, i, (first,), (first,) * (i - start), None,
                                       tuple(ReplicaMapping((p,), (p,) * (i - start)) for p in others)))
            start = i
    return Mapping(tuple(stages))


def index_mapping(stages: Sequence[Stage], block_names: Sequence[str], pu_names: Sequence[str], source: str,
                  where: str = "", preds: Optional[Callable[[str], Iterable[str]]] = None) -> Mapping:
    """The index form of typed ``stages``: block ``i`` is ``block_names[i]`` (a topological order), PU ``p`` is
    ``pu_names[p]``. Each stage keeps its PUs in the order it lists them.

    Parameters
    ----------
    stages : sequence of Stage
        First stage first (a point's ``stages``).
    block_names, pu_names : sequence of str
        The index spaces (a :class:`MappingProblem`'s, or a coarsened graph's blocks and a plan's PUs).
    source, where : str
        The file and the field path of the stages' parent in messages (``where="points[p3].mapping."``).
    preds : callable, optional
        Block name -> its producers' names: also check each stage's order against the dependencies.

    Raises
    ------
    InputError
        A PU outside ``pu_names``, or a structural rule broken (:mod:`parapipe.cost.rules`): the message names
        ``source`` and the field.
    """
    pu_index = {p: i for i, p in enumerate(pu_names)}
    try:
        check_stages(stages, block_names, preds)
    except RuleViolation as exc:
        raise input_error(source, exc.where(f"{where}stages"), exc.problem, exc.fix) from None
    index = {b: i for i, b in enumerate(block_names)}
    out: List[StageMapping] = []
    for s, st in enumerate(stages):
        views = st.replica_stages()
        for r, view in enumerate(views):
            for pu in view.pus:
                if pu not in pu_index:
                    at = f"{where}stages[{s}]" + (f".replicas[{r}]" if len(views) > 1 else "") + ".pus"
                    raise input_error(source, at, f"unknown PU {pu!r}", f"use one of {', '.join(pu_names)}")
        start = min(index[b] for b in st.blocks)
        stop = start + len(st.blocks)
        units = [(tuple(pu_index[p] for p in v.pus),
                  tuple(pu_index[v.pu_of(block_names[i])] for i in range(start, stop)),
                  tuple(index[b] for b in v.order) or None) for v in views]
        (pus, assign, order), others = units[0], units[1:]
        out.append(StageMapping(start, stop, pus, assign, order, tuple(ReplicaMapping(*u) for u in others)))
    return Mapping(tuple(out))


def mapping_from_point(problem: MappingProblem, point: Point, source: str) -> Mapping:
    """The index form of a pareto.json point on ``problem`` (:func:`index_mapping` with the problem's block and
    PU names; the schedule order checked against its block DAG).

    Raises
    ------
    InputError
        As :func:`index_mapping`: the point does not fit the problem's blocks and PUs.
    """
    return mapping_from_stages(problem, point.stages, source, f"points[{point.id}].mapping.")


def mapping_from_stages(problem: MappingProblem, stages: Sequence[Stage], source: str,
                        where: str = "") -> Mapping:
    """The index form of typed ``stages`` on ``problem`` (:func:`index_mapping` with the problem's block and
    PU names; the schedule order checked against its block DAG). ``where``: the field path of the stages'
    parent in messages, as for :func:`index_mapping`.

    Raises
    ------
    InputError
        As :func:`index_mapping`: the stages do not fit the problem's blocks and PUs.
    """
    names = problem.block_names
    index = {b: i for i, b in enumerate(names)}
    return index_mapping(stages, names, problem.pu_names, source, where,
                         lambda b: [names[u] for u in problem.preds[index[b]]])
