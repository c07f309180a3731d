"""Static shapes of a model's data inputs: ``--input-shape NAME:1x3x640x640`` and the rules for symbolic dims.

Exported models often leave input dims symbolic (``[N, 3, H, W]``, ``dim_param``, ``-1``, or no value at all).
parapipe needs one static shape per input (every tensor size, FLOP count and stage boundary follows from it), so
:func:`resolve_input_shapes` fixes each data input's shape from, in order:

1. the shape the user gave (``--input-shape NAME:1x3x640x640``, repeatable), which must have the input's rank
   and agree with every dim the model fixes;
2. a symbolic dim whose ``dim_param`` name also appears in a given shape takes that value (``input_ids`` and
   ``attention_mask`` both ``[batch, seq]``: giving one fixes ``seq`` in both);
3. the first dim (the batch dim) defaults to 1, and a note says so;
4. any other symbolic dim is refused with one line naming the input and the dim: there is no safe default
   (setting H and W to 1 made an unpadded conv net produce ``[1, 8, -5, -5]``).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import onnx

from parapipe.errors import input_error

__all__ = ["OPTION", "InputShapes", "parse_input_shapes", "data_inputs", "resolve_input_shapes",
           "apply_input_shapes"]

logger = logging.getLogger(__name__)

#: The command-line option the shapes come from (named in error messages).
OPTION = "--input-shape"
_SPEC = re.compile(r"^(?P<name>.+):(?P<dims>[0-9]+(?:x[0-9]+)*)$")


@dataclass
class InputShapes:
    """The static shape of every data input and how each was decided.

    Attributes
    ----------
    shapes : dict of str to tuple of int
        Input name -> shape (every dim >= 1), in model input order.
    notes : list of str
        One human-readable line per dim parapipe chose itself (the batch dim set to 1), for the CLI to show.
    """

    shapes: dict[str, tuple[int, ...]]
    notes: list[str] = field(default_factory=list)


def parse_input_shapes(specs: Optional[Sequence[str]]) -> dict[str, tuple[int, ...]]:
    """Parse ``--input-shape`` values ``NAME:D0xD1x...`` (dims >= 1) into ``{name: shape}``.

    ``NAME`` may itself contain ``:`` (the last one separates the dims). A scalar input has no dims and cannot
    be given (scalars are never symbolic).

    Raises
    ------
    InputError
        A value without ``:``, a dim that is not a whole number >= 1, or the same input given twice.

    Examples
    --------
    >>> parse_input_shapes(["x:1x3x640x640", "mask:1x128"])
    {'x': (1, 3, 640, 640), 'mask': (1, 128)}
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        match = _SPEC.match(spec.strip())
        if not match:
            raise input_error(OPTION, spec, "is not NAME:D0xD1x... with whole-number dims",
                              "write e.g. --input-shape images:1x3x640x640")
        dims = tuple(int(d) for d in match["dims"].split("x"))
        if any(d < 1 for d in dims):
            raise input_error(OPTION, spec, "has a dim < 1", "every dim must be a whole number >= 1")
        name = match["name"]
        if name in shapes:
            raise input_error(OPTION, name, "is given twice", "give each input once")
        shapes[name] = dims
    return shapes


def _dims(vi: onnx.ValueInfoProto) -> Optional[list[tuple[Optional[int], str]]]:
    """(fixed value or None, dim_param) per dim of a tensor input; None when the rank is unknown."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    out = []
    for d in tt.shape.dim:
        fixed = int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None
        out.append((fixed, d.dim_param if d.HasField("dim_param") else ""))
    return out


def data_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are data (not initializers listed as inputs, as IR < 4 models do)."""
    constants = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in constants]


def resolve_input_shapes(model: onnx.ModelProto, given: Optional[Mapping[str, Sequence[int]]],
                         source: str) -> InputShapes:
    """Decide the static shape of every data input of ``model`` (rules in the module docstring).

    Parameters
    ----------
    model : onnx.ModelProto
        The model as loaded (not modified).
    given : mapping of str to sequence of int, optional
        Shapes from ``--input-shape`` (see :func:`parse_input_shapes`).
    source : str
        File or model name for messages.

    Returns
    -------
    InputShapes

    Raises
    ------
    InputError
        A given name the model has no data input for (the message lists them), a given shape of the wrong rank
        or contradicting a dim the model fixes, an input of unknown rank without a given shape, or a symbolic
        non-batch dim without a given shape (naming the input and the dim).
    """
    given = {k: tuple(int(d) for d in v) for k, v in (given or {}).items()}
    inputs = [vi for vi in data_inputs(model) if vi.type.HasField("tensor_type")]
    names = [vi.name for vi in inputs]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise input_error(OPTION, unknown[0], f"{source} has no data input of that name",
                          f"its inputs are: {', '.join(names) or 'none'}")
    symbols: dict[str, int] = {}
    for vi in inputs:
        dims = _dims(vi)
        if vi.name not in given or dims is None:
            continue
        shape = given[vi.name]
        if len(shape) != len(dims):
            raise input_error(OPTION, vi.name, f"has rank {len(shape)}, but the model's input has rank "
                              f"{len(dims)} ({_describe(dims)})", f"give {len(dims)} dims")
        for axis, ((fixed, param), value) in enumerate(zip(dims, shape)):
            if fixed is not None and fixed != value:
                raise input_error(OPTION, vi.name, f"dim {axis} is {value}, but the model fixes it at {fixed} "
                                  f"({_describe(dims)})", f"give {fixed} for dim {axis}")
            if param:
                symbols.setdefault(param, value)
    result = InputShapes(shapes={})
    for vi in inputs:
        dims = _dims(vi)
        if vi.name in given:
            result.shapes[vi.name] = tuple(given[vi.name])
            continue
        if dims is None:
            raise input_error(source, f"input {vi.name!r}", "has no shape (not even a rank)",
                              f"give it with {OPTION} {vi.name}:D0xD1x...")
        shape = []
        for axis, (fixed, param) in enumerate(dims):
            if fixed is not None:
                shape.append(fixed)
            elif param and param in symbols:
                shape.append(symbols[param])
            elif axis == 0:
                shape.append(1)
                label = f"'{param}'" if param else "(unnamed)"
                result.notes.append(f"input {vi.name}: batch dim {label} set to 1 "
                                    f"(give {OPTION} {vi.name}:... to change it)")
            else:
                label = f" '{param}'" if param else ""
                example = "x".join(str(f) if f is not None else ("1" if i == 0 else "N")
                                   for i, (f, _) in enumerate(dims))
                raise input_error(source, f"input {vi.name!r} dim {axis}{label}",
                                  f"is symbolic ({_describe(dims)}) and parapipe needs a static size",
                                  f"give it with {OPTION} {vi.name}:{example} (N = the size to plan for)")
        result.shapes[vi.name] = tuple(shape)
    for note in result.notes:
        logger.info("%s: %s", source, note)
    return result


def _describe(dims: list[tuple[Optional[int], str]]) -> str:
    return "[" + ", ".join(str(f) if f is not None else (p or "?") for f, p in dims) + "]"


def apply_input_shapes(graph: onnx.GraphProto, shapes: Mapping[str, Sequence[int]]) -> None:
    """Set the data inputs of ``graph`` to ``shapes`` (in place) and drop graph-output shapes with symbolic dims.

    Those outputs' shapes (rank included) are left to shape inference; inputs not in ``shapes`` are left alone.
    """
    for vi in graph.input:
        if vi.name not in shapes or not vi.type.HasField("tensor_type"):
            continue
        shape = vi.type.tensor_type.shape
        del shape.dim[:]
        for d in shapes[vi.name]:
            shape.dim.add().dim_value = int(d)
    for vi in graph.output:  # a symbolic output shape is a guess of the exporter (sometimes of the wrong rank)
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and any(not d.HasField("dim_value") or d.dim_value <= 0 for d in tt.shape.dim):
            tt.ClearField("shape")
