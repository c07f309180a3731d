"""Seeded random input frames: the one rule every run and measurement draws its inputs by.

A frame is one value per model input (``{name: numpy array}``). :func:`draw_frames` draws ``count`` frames from
per-input descriptions (:class:`FrameInput`: name, shape, dtype and, for an integer input, the inclusive range
of its valid values) and a seed, by one rule:

- floating point inputs: standard normal, cast to the input's dtype;
- booleans: 0 or 1 with equal odds;
- integers: uniform in the input's inclusive range ``(low, high)``; 0 when no range bounds it (integers
  mostly index rows or count things, and 0 is valid for every such use);
- any other dtype (complex, strings): zeros of that dtype (no value is valid in general: pass real inputs);
- an input with a fixed ``value`` (an integer input that IS a shape: the target of an ``Expand`` or
  ``Reshape``, the repeats of a ``Tile``, where only one value is valid): that value in every frame, drawing
  nothing.

The inputs of a frame are drawn in the order of their names, frame after frame, from one
``numpy.random.RandomState(seed)``: the legacy generator, whose stream numpy keeps fixed across versions (NEP 19),
so a board and the host computer with different numpy versions draw the same frames from the same seed.

The ranges come from the model's graph on the host computer (parapipe's ``graph.feeds.integer_input_ranges``:
the rows of the embedding or ``Gather`` an input indexes); a deploy bundle carries them in ``plan.json``
(``"inputs"``: ``{name: {"shape", "dtype", "range"?, "value"?}}``, read by :func:`inputs_from_doc`). Standard
library and
numpy only (Python >= 3.8).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

__all__ = ["FrameInput", "draw_frames", "inputs_from_doc"]


class FrameInput(NamedTuple):
    """One input of the frames to draw.

    Attributes
    ----------
    name : str
        The model input's name.
    shape : tuple of int
        Its static shape.
    dtype : str
        A numpy dtype name (``"float32"``, ``"int64"``, ``"bool"``).
    int_range : (int, int), optional
        For an integer input, the inclusive range ``(low, high)`` of its valid values; None draws 0.
    value : tuple of int, optional
        The input's one valid value, flattened (row-major, as many elements as ``shape`` holds): used as is in
        every frame.
    """

    name: str
    shape: Tuple[int, ...]
    dtype: str
    int_range: Optional[Tuple[int, int]] = None
    value: Optional[Tuple[int, ...]] = None


def _draw(rng: np.random.RandomState, spec: FrameInput) -> np.ndarray:
    shape = tuple(int(d) for d in spec.shape)
    dtype = np.dtype(spec.dtype)
    if spec.value is not None:
        return np.asarray(spec.value, dtype=dtype).reshape(shape)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.randint(0, 2, size=shape).astype(dtype)
    if dtype.kind in "iu" and spec.int_range is not None:
        low, high = (int(v) for v in spec.int_range)
        return rng.randint(low, high + 1, size=shape).astype(dtype)
    return np.zeros(shape, dtype)


def draw_frames(inputs: Iterable[Sequence[Any]], count: int, seed: int = 0) -> List[Dict[str, np.ndarray]]:
    """``count`` seeded frames for ``inputs`` by the rule of the module docstring.

    Parameters
    ----------
    inputs : iterable of FrameInput
        One per model input (plain ``(name, shape, dtype, int_range)`` tuples are taken too).
    count : int
        Frames to draw (>= 0).
    seed : int
        Seed of the ``numpy.random.RandomState`` (>= 0).

    Returns
    -------
    list of dict of str to numpy.ndarray
        ``count`` frames, each with every input of ``inputs``.

    Raises
    ------
    ValueError
        An integer range with ``low > high`` (numpy's message), a negative seed.
    TypeError
        A dtype numpy does not know.

    Examples
    --------
    >>> frames = draw_frames([FrameInput("ids", (2, 3), "int64", (0, 4)), FrameInput("x", (2,), "float32")], 2)
    >>> [sorted(f) for f in frames], frames[0]["ids"].dtype, int(frames[0]["ids"].max()) <= 4
    ([['ids', 'x'], ['ids', 'x']], dtype('int64'), True)
    """
    specs = sorted((FrameInput(*spec) for spec in inputs), key=lambda spec: spec.name)
    rng = np.random.RandomState(seed)
    return [{spec.name: _draw(rng, spec) for spec in specs} for _ in range(count)]


def inputs_from_doc(doc: Mapping[str, Mapping[str, Any]]) -> List[FrameInput]:
    """The :class:`FrameInput` list of a ``plan.json`` ``"inputs"`` object ``{name: {"shape": [...], "dtype"
    (default ``"float32"``), "range": [low, high] (optional), "value": [v0, v1, ...] (optional, flattened)}}``."""
    found = []
    for name, entry in doc.items():
        bounds = entry.get("range")
        value = entry.get("value")
        found.append(FrameInput(str(name), tuple(int(d) for d in entry["shape"]), str(entry.get("dtype", "float32")),
                                None if bounds is None else (int(bounds[0]), int(bounds[1])),
                                None if value is None else tuple(int(v) for v in value)))
    return found
