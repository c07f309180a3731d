"""Mappings written by people: a PU list (``gpu,gpu,big,big,gpu``) or a stage list from pareto.json."""
from __future__ import annotations

from typing import Any, Dict, List

from ..errors import input_error
from .evaluate import Mapping, StageMapping, mapping_from_pu_list
from .problem import MappingProblem


def parse_pu_list(problem: MappingProblem, text: str, source: str = "--mapping") -> Mapping:
    """Mapping from one PU name per block in topological order; runs of the same PU form a stage.

    Raises
    ------
    InputError
        Wrong length or an unknown PU name.
    """
    names = [t.strip() for t in text.split(",") if t.strip()]
    if len(names) != problem.n_blocks:
        raise input_error(source, None, f"mapping has {len(names)} entries but the problem has {problem.n_blocks} "
                          "blocks", "give one PU per block in topological order (list them with "
                          "'parapipe inspect MODEL --max-blocks 48 --blocks')")
    idx = []
    for i, n in enumerate(names):
        if n not in problem.pu_names:
            raise input_error(source, f"entry {i + 1}", f"unknown PU {n!r}",
                              f"choose from {', '.join(problem.pu_names)}")
        idx.append(problem.pu_names.index(n))
    for j, p in enumerate(idx):
        if problem.time_s[j, p] == float("inf"):
            raise input_error(source, f"entry {j + 1}", f"PU {problem.pu_names[p]!r} cannot run block "
                              f"{problem.block_names[j]!r}", "map it to a PU that supports its op types")
    return mapping_from_pu_list(problem, idx)


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
        stages.append(StageMapping(start, stop, pus, tuple(assign[v] for v in range(start, stop)), order))
        start = stop
    if start != problem.n_blocks:
        raise input_error(source, "mapping.stages", f"covers {start} of {problem.n_blocks} blocks",
                          "evaluate the mapping on the model it was computed for")
    return Mapping(tuple(stages))
