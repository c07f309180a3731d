"""Input values for runs: the user's (``--feeds FILE.npz``) or seeded ones that the model accepts.

Random integers are not valid inputs in general: a BERT-style ``token_type_ids`` indexes a 2-row embedding, so
any value but 0 and 1 makes ONNX Runtime fail. :func:`integer_input_ranges` derives, from the graph, the range
each integer input must lie in: following the input through value-preserving operators (Cast, Reshape,
Unsqueeze, Expand, Slice, Concat, ...) to the operators that use it as an index -- ``Gather`` /
``GatherElements`` (rows of their data along ``axis``), ``OneHot`` (``depth``) and ``com.microsoft``
``EmbedLayerNormalization`` (rows of the word/segment embedding) -- and keeping the tightest bound. Inputs with
no such use get 0. An integer input whose values ARE a shape (the target shape of ``Expand``, ``Reshape`` or
``ConstantOfShape``, the repeats of ``Tile``) has one valid value, not a range: :func:`shape_input_values`
derives it from the operator's statically known output shape. :func:`input_specs` hands these ranges and values,
with every input's shape and dtype, to the one generator of seeded frames, ``ppexec.frames.draw_frames`` (this
layer draws nothing itself).
"""
from __future__ import annotations

import logging
import re
import zipfile
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from parapipe.errors import input_error

__all__ = ["VALUE_PRESERVING_OPS", "integer_input_ranges", "input_specs", "load_feeds", "feed_error"]

logger = logging.getLogger(__name__)

#: Operators whose output holds (a subset or a copy of) the integer values of their first input.
VALUE_PRESERVING_OPS = frozenset({
    "Identity", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Transpose", "Slice", "Concat",
    "Tile", "Split", "Gather", "GatherElements", "GatherND", "Pad",
})
#: ORT's message for a failing node: "... running Gather node. Name:'/emb/Gather' Status Message: ...".
_NODE_IN_MESSAGE = re.compile(r"Name:'([^']*)'")


def _index_bound(og, op_name: str, tensor: str) -> Optional[int]:
    """Largest valid value of ``tensor`` when operator ``op_name`` uses it as an index, else None."""
    node = og.node(op_name)
    attrs = {a.name: a for a in node.attribute}
    op = og.op(op_name).op_type

    def rows(data: str, axis: int) -> Optional[int]:
        shape = og.tensors[data].shape if data in og.tensors else (
            tuple(og.initializer(data).dims) if data in og.constants else None)
        if not shape:
            return None
        return int(shape[axis % len(shape)])

    if op in ("Gather", "GatherElements") and len(node.input) > 1 and node.input[1] == tensor:
        axis = attrs["axis"].i if "axis" in attrs else 0
        n = rows(node.input[0], axis)
        return None if n is None else n - 1
    if op == "OneHot" and node.input[0] == tensor and node.input[1] in og.constants:
        from onnx import numpy_helper

        return int(numpy_helper.to_array(og.initializer(node.input[1])).reshape(-1)[0]) - 1
    if op == "com.microsoft.EmbedLayerNormalization":
        for ids, table in ((0, 2), (1, 3)):
            if len(node.input) > table and node.input[ids] == tensor and node.input[table]:
                n = rows(node.input[table], 0)
                return None if n is None else n - 1
    return None


def integer_input_ranges(og) -> dict[str, tuple[int, int]]:
    """The inclusive range ``(low, high)`` of valid values of every integer data input of ``og``.

    Pure: reads only the operator graph (an :class:`~parapipe.graph.opgraph.OpGraph`). ``(0, rows - 1)`` for an
    input that indexes ``rows`` rows (the smallest over all its index uses), ``(0, 0)`` when no use bounds it.
    """
    consumers: dict[str, list[str]] = {}
    for name in og.topo_order:
        for t in og.op(name).inputs:
            consumers.setdefault(t, []).append(name)
    ranges: dict[str, tuple[int, int]] = {}
    for inp in og.inputs:
        if np.dtype(og.tensors[inp].dtype).kind not in "iu":
            continue
        high: Optional[int] = None
        seen, frontier = {inp}, [inp]
        while frontier:
            t = frontier.pop()
            for op_name in consumers.get(t, []):
                bound = _index_bound(og, op_name, t)
                if bound is not None:
                    high = bound if high is None else min(high, bound)
                    continue
                node = og.node(op_name)
                if og.op(op_name).op_type in VALUE_PRESERVING_OPS and node.input and node.input[0] == t:
                    for out in node.output:
                        if out and out not in seen:
                            seen.add(out)
                            frontier.append(out)
        ranges[inp] = (0, max(high, 0) if high is not None else 0)
    return ranges


def shape_input_values(og) -> dict[str, Optional[tuple[int, ...]]]:
    """The one valid value of every integer data input of ``og`` used as a shape operand
    (:func:`parapipe.graph.shape_inputs.shape_operand_values` over the operator graph's static shapes; a shape
    measured on one sample counts as unknown). None for such an input when no value can be derived: generated
    frames cannot run that model, it needs ``--feeds``. Pure; inputs used in no shape operand are left out."""
    from parapipe.graph.shape_inputs import shape_operand_values

    def shape_of(name: str) -> Optional[tuple[int, ...]]:
        info = og.tensors.get(name)
        if info is not None:
            return None if info.data_dependent_axes or info.sequence else tuple(int(d) for d in info.shape)
        return tuple(int(d) for d in og.initializer(name).dims) if name in og.constants else None

    ints = {n: tuple(int(d) for d in og.tensors[n].shape) for n in og.inputs
            if np.dtype(og.tensors[n].dtype).kind in "iu"}
    return shape_operand_values([og.node(n) for n in og.topo_order], ints, shape_of)


#: One input of seeded frames: ``(name, shape, numpy dtype name, inclusive integer range or None, fixed value or
#: None)``, the form ``ppexec.frames.FrameInput`` takes (ppexec draws the values: one rule on the board and here).
InputSpec = tuple[str, tuple[int, ...], str, Optional[tuple[int, int]], Optional[tuple[int, ...]]]


def input_specs(og, ranges: Optional[Mapping[str, tuple[int, int]]] = None) -> list[InputSpec]:
    """What seeded frames for the data inputs of ``og`` are drawn from: every input's name, shape and dtype, for
    an integer input its range of valid values (:func:`integer_input_ranges`, or ``ranges``) and, for one that is
    a shape, its one valid value (:func:`shape_input_values`), in input order.

    Pure; the values are drawn above this layer, by ``ppexec.frames.draw_frames(input_specs(og), count, seed)``
    (floats standard normal, booleans 0/1, integers uniform in their range, shapes their value).
    """
    ranges = integer_input_ranges(og) if ranges is None else ranges
    fixed = shape_input_values(og)
    specs: list[InputSpec] = []
    for name in og.inputs:
        info = og.tensors[name]
        dtype = np.dtype(info.dtype)
        bounds = ranges.get(name, (0, 0)) if dtype.kind in "iu" else None
        specs.append((name, tuple(int(d) for d in info.shape), dtype.name, bounds, fixed.get(name)))
    return specs


def read_feeds(path: str) -> dict[str, np.ndarray]:
    """The arrays of an ``--feeds`` .npz file by name, as stored (checked against a model by :func:`load_feeds`;
    before the model is imported they give the shape probe real values,
    :func:`parapipe.graph.opgraph.import_onnx`).

    Raises
    ------
    InputError
        The file cannot be read as an .npz (no pickled objects are loaded).
    """
    try:
        with np.load(Path(path), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise input_error(f"--feeds {path}", None, f"cannot be read as an .npz file ({exc})",
                          "save the inputs with numpy.savez(FILE, NAME=array, ...)") from None


def load_feeds(path: str, og) -> list[dict[str, np.ndarray]]:
    """The frames stored in an ``.npz`` file: one array per data input, named like it, holding one frame (the
    input's shape) or several (a leading frame axis). Integer values are checked against
    :func:`integer_input_ranges`.

    Raises
    ------
    InputError
        Unreadable file; a missing or unknown input; a wrong dtype or shape; inputs with different frame
        counts; an integer value outside the input's valid range (naming the input and the range).
    """
    src = f"--feeds {path}"
    arrays = read_feeds(path)
    missing = [n for n in og.inputs if n not in arrays]
    extra = sorted(set(arrays) - set(og.inputs))
    if missing or extra:
        what = f"has no array for input {missing[0]!r}" if missing else f"has an array {extra[0]!r}"
        raise input_error(src, None, f"{what}; the model's inputs are {', '.join(og.inputs)}",
                          "store one array per model input, named like it")
    counts = {}
    ranges = integer_input_ranges(og)
    for name in og.inputs:
        info, value = og.tensors[name], arrays[name]
        shape = tuple(info.shape)
        if value.dtype != np.dtype(info.dtype):
            raise input_error(src, name, f"has dtype {value.dtype}, the model wants {info.dtype}",
                              f"store it as {info.dtype}")
        if value.shape == shape:
            arrays[name] = value[None]
        elif value.shape[1:] != shape:
            raise input_error(src, name, f"has shape {list(value.shape)}; the model takes {list(shape)}",
                              f"store {list(shape)} (one frame) or [frames, {', '.join(map(str, shape))}]")
        counts[name] = arrays[name].shape[0]
        if name in ranges and value.size and ranges[name] != (0, 0):
            low, high = ranges[name]
            if value.min() < low or value.max() > high:
                raise input_error(src, name, f"holds values in [{value.min()}, {value.max()}], outside "
                                  f"[{low}, {high}], the rows it indexes", f"keep its values in [{low}, {high}]")
    if len(set(counts.values())) > 1:
        raise input_error(src, None, f"inputs hold different numbers of frames ({counts})",
                          "store the same number of frames for every input")
    n = next(iter(counts.values()), 0)
    if n == 0:
        raise input_error(src, None, "holds no frame", "store at least one frame")
    return [{name: np.asarray(arrays[name][i]) for name in og.inputs} for i in range(n)]  # 0-d arrays, not numpy scalars


def feed_error(og, exc: BaseException, source: str, feeds: Sequence[str] = (), *,
               generated: bool = False) -> Exception:
    """An InputError for a run that failed on its inputs: names the data inputs that reach the failing node
    (from ONNX Runtime's message) or, failing that, every input. ``generated``: the inputs were generated
    (:func:`input_specs`), so an input that is a shape with no derivable value (:func:`shape_input_values`) is
    named first, as the cause."""
    text = " ".join(str(exc).split())
    match = _NODE_IN_MESSAGE.search(text)
    names = list(og.inputs)
    if match and match.group(1) in og.graph:
        import networkx as nx

        node = match.group(1)
        upstream = set(nx.ancestors(og.graph, node)) | {node}
        reached = [i for i in og.inputs if any(i in og.op(o).inputs for o in upstream)]
        ints = [i for i in reached if np.dtype(og.tensors[i].dtype).kind in "iub"]
        names = ints or reached or names
    if generated:  # a shape input whose value the graph does not give is the likely cause
        unknown = [n for n, v in shape_input_values(og).items() if v is None]
        if unknown:
            names = unknown + [n for n in names if n not in unknown]
            return input_error(source, f"input {names[0]!r}" + (f" (or {', '.join(names[1:])})" if names[1:]
                                                                else ""),
                               "its values are a shape (of Expand, Reshape, Tile or ConstantOfShape) that parapipe "
                               f"cannot derive from the graph, and the model fails on generated ones ({text[:200]})",
                               "pass real inputs with --feeds FILE.npz (one array per input)")
    return input_error(source, f"input {names[0]!r}" + (f" (or {', '.join(names[1:])})" if names[1:] else ""),
                       f"feed error: the model fails on this input ({text[:240]})",
                       "pass real inputs with --feeds FILE.npz (one array per input)")
