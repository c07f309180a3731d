"""Mappings written by people: a PU list (``gpu,gpu,big,big,gpu``) or a stage list from pareto.json."""
from __future__ import annotations

from typing import Any, Dict, List

from ..errors import input_error
from .evaluate import Mapping, Replica, StageMapping, mapping_from_pu_list
from .problem import MappingProblem


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
    for j, alts in enumerate(entries):
        for p in alts:
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
                                       tuple(Replica((p,), (p,) * (i - start)) for p in others)))
            start = i
    return Mapping(tuple(stages))


def mapping_from_point(problem: MappingProblem, point: Any, source: str) -> Mapping:
    """Mapping from a pareto.json point (a :class:`parapipe.mapping.Point`: stages with ``pus``, ``blocks``,
    ``assignment``, ``order``).

    Raises
    ------
    InputError
        Unknown block or PU, or stages that are not contiguous in the problem's block order.
    """
    index = {b: i for i, b in enumerate(problem.block_names)}
    stages: List[StageMapping] = []
    start = 0
    for s, st in enumerate(point.stages):
        where = f"points[{point.id}].mapping.stages[{s}]"
        try:
            blocks = [index[b] for b in st.blocks]
            pus = tuple(sorted(problem.pu_names.index(p) for p in st.pus))
            assign = {index[b]: problem.pu_names.index(p) for b, p in st.assignment.items()}
        except (KeyError, ValueError) as exc:
            raise input_error(source, where, f"unknown block or PU {exc}", "evaluate the mapping on the model "
                              "and SoC it was computed for") from None
        if sorted(blocks) != list(range(start, start + len(blocks))):
            raise input_error(source, where, "blocks are not contiguous in the topological order",
                              "stages must cover consecutive blocks")
        stop = start + len(blocks)
        if len(pus) == 1 and not assign:
            assign = {v: pus[0] for v in blocks}
        order = tuple(index[b] for b in st.order) or None
        replicas = tuple(_replica_from_doc(problem, rep, index, blocks, f"{where}.replicas[{r}]", source)
                         for r, rep in enumerate(st.replicas or []) if r > 0)
        stages.append(StageMapping(start, stop, pus, tuple(assign[v] for v in range(start, stop)), order,
                                   replicas))
        start = stop
    if start != problem.n_blocks:
        raise input_error(source, "mapping.stages", f"covers {start} of {problem.n_blocks} blocks",
                          "evaluate the mapping on the model it was computed for")
    return Mapping(tuple(stages))


def _replica_from_doc(problem: MappingProblem, rep: Any, index: Dict[str, int], blocks: List[int], where: str,
                      source: str) -> Replica:
    """A document replica (:class:`parapipe.mapping.Replica`) of the stage over ``blocks`` as a cost-model
    :class:`Replica`. Raises InputError for an unknown PU or block."""
    try:
        pus = tuple(sorted(problem.pu_names.index(p) for p in rep.pus))
        assign = {v: problem.pu_names.index(rep.pu_of(problem.block_names[v])) for v in blocks}
        order = tuple(index[b] for b in rep.order) or None
    except (KeyError, ValueError) as exc:
        raise input_error(source, where, f"unknown block or PU {exc}", "evaluate the mapping on the model "
                          "and SoC it was computed for") from None
    return Replica(pus, tuple(assign[v] for v in sorted(blocks)), order)
