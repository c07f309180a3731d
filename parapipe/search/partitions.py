"""Set partitions of a PU set: the ways a stage's PUs split into replicas (:mod:`.replicate`, :mod:`.stage_bound`,
:mod:`.relaxation`)."""
from __future__ import annotations

from typing import Iterator, List, Tuple

__all__ = ["set_partitions"]


def set_partitions(items: Tuple[int, ...]) -> Iterator[List[Tuple[int, ...]]]:
    """Every partition of ``items`` into non-empty blocks, each a list of tuples (the Bell number of them: 15 for
    4 items, 203 for 6), every block's items in the order of ``items``; ``[[]]`` for no items."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        yield [(first,)] + part
        for i in range(len(part)):
            yield part[:i] + [(first,) + part[i]] + part[i + 1:]
