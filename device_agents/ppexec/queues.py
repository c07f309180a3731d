"""A bounded FIFO queue whose blocking calls run in C, for the executor's per-frame hand-offs.

``queue.Queue`` implements ``put`` and ``get`` with timeouts in Python (a Condition, a fresh lock per wait): on
squeezenet's replicated host mapping (2 cores, ~3.5 ms per frame) the caller's thread spent ~60 µs of CPU per
frame in the executor, most of it there, on cores that the workers' inference needs. :class:`BoundedQueue` keeps
two ``queue.SimpleQueue`` (C): the items, and one token per free slot; ``put`` takes a token, ``get`` gives one
back, and both block (with a timeout, the GIL released) inside ``SimpleQueue.get``. Standard library only
(Python >= 3.8).
"""
from __future__ import annotations

import queue
from typing import Any, Optional

__all__ = ["BoundedQueue"]


class BoundedQueue:
    """FIFO queue of at most ``maxsize`` items; the subset of ``queue.Queue`` the executor uses.

    Items put by one thread come out in that order; puts by several threads are ordered by whoever takes a free
    slot and appends first (the executor puts into a stage under that stage's lock).

    Parameters
    ----------
    maxsize : int
        Capacity (>= 1).

    Raises
    ------
    ValueError
        ``maxsize`` < 1.
    """

    __slots__ = ("maxsize", "_items", "_free")

    def __init__(self, maxsize: int):
        if int(maxsize) < 1:
            raise ValueError("BoundedQueue needs maxsize >= 1, got %r" % (maxsize,))
        self.maxsize = int(maxsize)
        self._items: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._free: "queue.SimpleQueue[None]" = queue.SimpleQueue()
        for _ in range(self.maxsize):
            self._free.put(None)

    def put(self, item: Any, timeout: Optional[float] = None) -> None:
        """Append ``item``, waiting up to ``timeout`` seconds (None: forever) for a free slot; ``queue.Full``
        when none came."""
        try:
            self._free.get(timeout=timeout)
        except queue.Empty:
            raise queue.Full from None
        self._items.put(item)

    def put_nowait(self, item: Any) -> None:
        """Append ``item`` if a slot is free, else ``queue.Full``."""
        try:
            self._free.get_nowait()
        except queue.Empty:
            raise queue.Full from None
        self._items.put(item)

    def get(self, timeout: Optional[float] = None) -> Any:
        """Take the oldest item, waiting up to ``timeout`` seconds (None: forever); ``queue.Empty`` when none
        came."""
        item = self._items.get(timeout=timeout)
        self._free.put(None)
        return item

    def get_nowait(self) -> Any:
        """Take the oldest item if there is one, else ``queue.Empty``."""
        item = self._items.get_nowait()
        self._free.put(None)
        return item

    def qsize(self) -> int:
        """Items waiting now (approximate while other threads use the queue)."""
        return self._items.qsize()
