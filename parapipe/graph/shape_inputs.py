"""Inputs whose values ARE a shape: the one value each must take for the graph's known shapes to hold.

An integer input read as the target shape of ``Expand``, ``Reshape`` or ``ConstantOfShape``, or as the repeats
of ``Tile`` (:data:`SHAPE_OPERANDS`), has one valid value, not a range: generated zeros make ONNX Runtime fail
("invalid expand shape"). :func:`shape_operand_values` derives that value from the operator's output shape where
ONNX shape inference (or the model's own declaration) gives it statically, following the input through
``Identity`` and ``Cast`` (which keep the values). The operator semantics are those of the ONNX operator
specification (https://onnx.ai/onnx/operators/): Expand broadcasts the data's shape with the value (numpy rules),
Tile's output dim ``i`` is ``data dim i * repeats[i]``, Reshape's and ConstantOfShape's output shape is the value
(no ``0``/``-1`` is derived).

Used on the import's shape probe (:mod:`parapipe.graph.shapes`) and on generated frames
(:func:`parapipe.graph.feeds.input_specs`). Pure functions over ONNX nodes and a shape lookup.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import onnx

__all__ = ["SHAPE_OPERANDS", "shape_operand_values"]

#: Operators with an integer operand whose values are a shape (or per-axis repeats): op type -> operand index.
SHAPE_OPERANDS = {"Expand": 1, "Reshape": 1, "Tile": 1, "ConstantOfShape": 0}
#: Operators that hand their first input's values on unchanged (an integer Cast keeps them too).
_SAME_VALUE_OPS = frozenset({"Identity", "Cast"})

Shape = tuple[int, ...]


def _operand_value(node: onnx.NodeProto, length: int, shape_of: Callable[[str], Optional[Shape]]) -> Optional[Shape]:
    """The value of ``length`` elements the shape operand of ``node`` must hold to give its known output shape,
    or None (output shape unknown, or no such value)."""
    target = shape_of(node.output[0]) if node.output and node.output[0] else None
    if target is None:
        return None
    if node.op_type in ("Reshape", "ConstantOfShape"):
        return target if len(target) == length else None
    data = shape_of(node.input[0])
    if data is None:
        return None
    if node.op_type == "Expand":
        value = (1,) * max(length - len(target), 0) + target[max(len(target) - length, 0):]
        try:
            return value if tuple(int(d) for d in np.broadcast_shapes(data, value)) == target else None
        except ValueError:
            return None
    if node.op_type == "Tile" and len(data) == len(target) == length and all(
            d > 0 and t % d == 0 for d, t in zip(data, target)):
        return tuple(t // d for d, t in zip(data, target))
    return None


def shape_operand_values(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, Shape],
                         shape_of: Callable[[str], Optional[Shape]]) -> dict[str, Optional[Shape]]:
    """The one valid value of every input of ``inputs`` used as a shape operand by ``nodes``.

    Parameters
    ----------
    nodes : sequence of onnx.NodeProto
        The graph's nodes (ONNX domain op types are matched).
    inputs : mapping of str to tuple of int
        Integer data inputs and their static shapes; only those of rank 1 can be shapes.
    shape_of : callable (tensor name) -> tuple of int or None
        A tensor's static shape, None where unknown or data-dependent.

    Returns
    -------
    dict of str to tuple of int or None
        Input -> its value (flattened), or None when no value can be derived (an output shape unknown, or two
        uses that want different values): such a model needs real inputs. Inputs used in no shape operand are
        left out.

    Examples
    --------
    >>> from onnx import helper
    >>> node = helper.make_node("Expand", ["x", "s"], ["y"])
    >>> shapes = {"x": (1, 3, 1), "y": (1, 3, 3)}
    >>> shape_operand_values([node], {"s": (2,)}, shapes.get)
    {'s': (3, 3)}
    """
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for t in dict.fromkeys(node.input):
            consumers.setdefault(t, []).append(node)
    values: dict[str, Optional[Shape]] = {}
    for inp, shape in inputs.items():
        wanted: set[Optional[Shape]] = set()
        frontier, seen = [inp], {inp}
        while frontier:
            t = frontier.pop()
            for node in consumers.get(t, []):
                if node.domain not in ("", "ai.onnx"):
                    continue
                slot = SHAPE_OPERANDS.get(node.op_type)
                if slot is not None and len(node.input) > slot and node.input[slot] == t:
                    wanted.add(_operand_value(node, int(shape[0]), shape_of) if len(shape) == 1 else None)
                elif node.op_type in _SAME_VALUE_OPS and node.input[0] == t:
                    for out in node.output:
                        if out and out not in seen:
                            seen.add(out)
                            frontier.append(out)
        if wanted:
            values[inp] = wanted.pop() if len(wanted) == 1 else None
    return values
