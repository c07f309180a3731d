"""The one converter from names to indices: a typed mapping (:class:`parapipe.mapping.Stage` list) or a PU list
written by people (``gpu,gpu,big,big,gpu``) -> the index form the cost model evaluates
(:class:`parapipe.cost.mapping.Mapping`). The other direction is :func:`parapipe.mapping.doc_from_result`.

Both check the structural rules once (:func:`parapipe.cost.rules.check_stages`) and raise a one-line
:class:`~parapipe.errors.InputError` naming the field.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from parapipe.cost.mapping import Mapping, ReplicaMapping, StageMapping
from parapipe.cost.problem import MappingProblem
from parapipe.cost.rules import RuleViolation, check_stages
from parapipe.errors import input_error
from parapipe.mapping.model import Point, Stage
from parapipe.soc.operating_points import format_mhz, match_index, parse_mhz, points_text

__all__ = ["parse_pu_list", "index_mapping", "mapping_from_point", "mapping_from_stages", "op_tables"]


def parse_pu_list(problem: MappingProblem, text: str, source: str = "--mapping") -> Mapping:
    """Mapping from one entry per block in topological order, as people write it.

    * An entry is a PU name, optionally at an operating point in MHz: ``big@1800`` (a bare ``big`` runs at its
      highest point; the problem's operating points, :attr:`MappingProblem.operating_points`, list the others).
    * Without square brackets, runs of the same entry form a stage: ``big@1800,big@1800,gpu@600`` is two stages.
    * An entry ``a|b`` (PU entries joined by ``|``) runs the block on a replicated stage: a run of the same such
      entry is one stage whose replicas are the single PUs ``a``, ``b``, ... (frames dealt in proportion to
      speed, :mod:`parapipe.cost.replication`), e.g. ``cpu0|cpu1,cpu0|cpu1,cpu0|cpu1`` for two copies of a
      three-block model.
    * Square brackets state the stages: ``[big@1800,gpu@600,big@1800][little@1000,little@1000]`` is two stages,
      the first running its blocks on big and gpu (operator parallelism; each PU at one point within a stage).
      A mapping with brackets has exactly the bracketed stages; one bracket per block runs one frame at a time
      through every block in turn.

    Raises
    ------
    InputError
        Wrong length, an unknown PU name, a frequency the PU has no operating point at (the message lists its
        points), a PU listed twice in an entry or at two points in one stage, text outside brackets, or a PU
        that cannot run its block.
    """
    text = text.strip()
    if "[" in text or "]" in text:
        groups = _bracket_groups(text, source)
    else:
        groups = [[t for t in text.split(",") if t.strip()]]
    entries: List[Tuple[Tuple[int, Optional[int]], ...]] = []
    bounds: List[int] = []
    for group in groups:
        for raw in group:
            entries.append(_entry(problem, raw.strip(), len(entries) + 1, source))
        bounds.append(len(entries))
    if len(entries) != problem.n_blocks:
        raise input_error(source, None, f"mapping has {len(entries)} entries but the problem has "
                          f"{problem.n_blocks} blocks ({', '.join(problem.block_names[:3])}"
                          f"{', ...' if problem.n_blocks > 3 else ''})",
                          "give one PU per block in topological order (a model's blocks: 'parapipe inspect MODEL "
                          "--max-blocks 48 --blocks'; a block table's: its rows)")
    for j, entry in enumerate(entries):
        for p, _ in entry:
            if problem.time_s[j, p] == float("inf"):
                raise input_error(source, f"entry {j + 1}", f"PU {problem.pu_names[p]!r} cannot run block "
                                  f"{problem.block_names[j]!r}", "map it to a PU that supports its op types")
    with_ops = problem.operating_points is not None

    def ops_of(pairs) -> Optional[Tuple[int, ...]]:
        return tuple(problem.max_op(p) if o is None else o for p, o in pairs) if with_ops else None

    stages: List[StageMapping] = []
    if len(groups) > 1 or "[" in text:
        start = 0
        for s, stop in enumerate(bounds):
            block_entries = entries[start:stop]
            if any(len(e) > 1 for e in block_entries):
                raise input_error(source, f"stage {s + 1}", "a replicated entry ('a|b') inside brackets",
                                  "write replicated stages without brackets, e.g. 'a|b,a|b'")
            chosen: Dict[int, Optional[int]] = {}
            for e in block_entries:
                p, o = e[0]
                if p in chosen and chosen[p] != o:
                    raise input_error(source, f"stage {s + 1}", f"PU {problem.pu_names[p]} at two operating "
                                      "points in one stage", "give each PU one frequency within a stage")
                chosen[p] = o
            pus = tuple(chosen)
            stages.append(StageMapping(start, stop, pus, tuple(e[0][0] for e in block_entries),
                                       ops=ops_of(chosen.items())))
            start = stop
        return Mapping(tuple(stages))
    start = 0
    for i in range(1, len(entries) + 1):
        if i == len(entries) or entries[i] != entries[start]:
            (first, first_op), *others = entries[start]
            stages.append(StageMapping(start, i, (first,), (first,) * (i - start), None,
                                       tuple(ReplicaMapping((p,), (p,) * (i - start), None, ops_of([(p, o)]))
                                             for p, o in others), ops_of([(first, first_op)])))
            start = i
    return Mapping(tuple(stages))


def _bracket_groups(text: str, source: str) -> List[List[str]]:
    """``[a,b][c]`` -> ``[["a", "b"], ["c"]]``; InputError for text outside brackets or unbalanced ones."""
    groups: List[List[str]] = []
    rest = text
    while rest:
        rest = rest.lstrip(" ,")
        if not rest:
            break
        if not rest.startswith("[") or "]" not in rest:
            raise input_error(source, None, f"text outside square brackets near {rest[:20]!r}",
                              "with brackets, put every block's entry inside one: '[big,big][gpu@600]'")
        body, rest = rest[1:].split("]", 1)
        if "[" in body:
            raise input_error(source, None, "nested square brackets", "one level of brackets: one per stage")
        items = [t for t in body.split(",") if t.strip()]
        if not items:
            raise input_error(source, None, "an empty stage '[]'", "give each stage at least one block's entry")
        groups.append(items)
    return groups


def _entry(problem: MappingProblem, raw: str, number: int,
           source: str) -> Tuple[Tuple[int, Optional[int]], ...]:
    """One entry (``big``, ``big@1800``, ``a|b@600``) -> ``((pu, op or None), ...)`` (None: highest point)."""
    out: List[Tuple[int, Optional[int]]] = []
    for alt in (a.strip() for a in raw.split("|")):
        if not alt:
            raise input_error(source, f"entry {number}", f"empty PU name in {raw!r}",
                              "separate the replicas of a stage with '|' between PU names, e.g. 'big|gpu'")
        name, at, mhz = alt.partition("@")
        name = name.strip()
        if name not in problem.pu_names:
            raise input_error(source, f"entry {number}", f"unknown PU {name!r}",
                              f"choose from {', '.join(problem.pu_names)}")
        p = problem.pu_names.index(name)
        op: Optional[int] = None
        if at:
            try:
                f = parse_mhz(mhz.strip())
            except ValueError:
                raise input_error(source, f"entry {number}", f"{mhz.strip()!r} in {alt!r} is not a frequency",
                                  "write PU@MHz, e.g. big@1800") from None
            table = op_tables(problem)
            freqs = table[p] if table is not None else None
            if freqs is None:
                raise input_error(source, f"entry {number}", f"PU {name} has one operating point",
                                  f"write {name} without @ (its profile or table lists no other frequencies)")
            op = match_index(freqs, f)
            if op is None:
                raise input_error(source, f"entry {number}", f"PU {name} has no operating point at "
                                  f"{format_mhz(f)} MHz", f"choose one of {points_text(freqs)}")
        if op is None and problem.n_operating_points(p) > 1:
            op = problem.max_op(p)  # a bare PU runs at its highest point: 'big' and 'big@2208' are one entry
        out.append((p, op))
    if len({p for p, _ in out}) != len(out):
        raise input_error(source, f"entry {number}", f"a PU is listed twice in {raw!r}",
                          "give each replica of a stage its own PU")
    return tuple(out)


def index_mapping(stages: Sequence[Stage], block_names: Sequence[str], pu_names: Sequence[str], source: str,
                  where: str = "", preds: Optional[Callable[[str], Iterable[str]]] = None,
                  op_tables: Optional[Sequence[Optional[Sequence[float]]]] = None) -> Mapping:
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
    op_tables : sequence of (sequence of float or None), optional
        Per PU index, its operating-point frequencies in Hz (None: a PU with one point): the stages'
        ``frequency_hz`` become operating-point indices. None: operating points are left out of the result.

    Raises
    ------
    InputError
        A frequency a PU has no operating point at (the message lists its points), a PU outside ``pu_names``,
        or a structural rule broken (:mod:`parapipe.cost.rules`): the message names
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
                  tuple(index[b] for b in v.order) or None,
                  _ops(v, pu_index, op_tables, source, f"{where}stages[{s}]" + (
                      f".replicas[{r}]" if len(views) > 1 else "")))
                 for r, v in enumerate(views)]
        (pus, assign, order, ops), others = units[0], units[1:]
        out.append(StageMapping(start, stop, pus, assign, order, tuple(ReplicaMapping(*u) for u in others), ops))
    return Mapping(tuple(out))


def _ops(stage: Stage, pu_index: Dict[str, int], op_tables: Optional[Sequence[Optional[Sequence[float]]]],
         source: str, at: str) -> Optional[Tuple[int, ...]]:
    """Operating-point indices of a typed stage's PUs (``stage.frequency_hz``: PU -> Hz); None when the stage
    states none or no tables are given. A PU without a table (``op_tables[p]`` None) has one point, index 0."""
    if not stage.frequency_hz or op_tables is None:
        return None
    out = []
    for pu in stage.pus:
        table = op_tables[pu_index[pu]]
        f = stage.frequency_hz.get(pu)
        if table is None:
            out.append(0)
            continue
        if f is None:
            out.append(len(table) - 1)
            continue
        i = match_index(table, f)
        if i is None:
            raise input_error(source, f"{at}.frequency_hz.{pu}", f"PU {pu} has no operating point at "
                              f"{format_mhz(f)} MHz", f"choose one of {points_text(table)}")
        out.append(i)
    return tuple(out)


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
                         lambda b: [names[u] for u in problem.preds[index[b]]], op_tables(problem))


def op_tables(problem: MappingProblem) -> Optional[List[Optional[Tuple[float, ...]]]]:
    """Per PU of ``problem``, its operating-point frequencies (Hz), None for a PU with one point; None overall
    for a problem without operating points."""
    if problem.operating_points is None:
        return None
    return [None if t is None else tuple(t.frequency_hz) for t in problem.operating_points]
