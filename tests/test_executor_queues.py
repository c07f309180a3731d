"""ppexec's BoundedQueue (the executor's stage queues): FIFO, capacity, timeouts, a blocked put released by a
get, and several producers and consumers losing or duplicating nothing."""
from __future__ import annotations

import queue
import threading

import pytest

from ppexec.queues import BoundedQueue


def test_fifo_capacity_and_timeouts():
    q = BoundedQueue(2)
    q.put("a")
    q.put_nowait("b")
    assert q.qsize() == 2
    with pytest.raises(queue.Full):
        q.put_nowait("c")
    with pytest.raises(queue.Full):
        q.put("c", timeout=0.01)
    assert q.get() == "a" and q.get_nowait() == "b"
    with pytest.raises(queue.Empty):
        q.get_nowait()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.01)
    q.put("c")  # the slots given back by the gets are usable again
    q.put("d")
    assert [q.get(), q.get()] == ["c", "d"]
    with pytest.raises(ValueError, match="maxsize >= 1"):
        BoundedQueue(0)


def test_a_blocked_put_goes_through_when_a_slot_frees():
    q = BoundedQueue(1)
    q.put(0)
    done = threading.Event()

    def producer():
        q.put(1, timeout=10.0)
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    assert not done.wait(0.1)  # full: the producer waits
    assert q.get(timeout=1.0) == 0
    assert done.wait(10.0) and q.get(timeout=1.0) == 1
    t.join()


def test_many_producers_and_consumers_lose_nothing():
    q = BoundedQueue(3)
    n, producers, consumers = 2000, 3, 3
    got = [[] for _ in range(consumers)]

    def produce(p):
        for i in range(n):
            q.put((p, i), timeout=10.0)

    def consume(c):
        while True:
            item = q.get(timeout=10.0)
            if item is None:
                return
            got[c].append(item)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    threads += [threading.Thread(target=consume, args=(c,)) for c in range(consumers)]
    for t in threads:
        t.start()
    for t in threads[:producers]:
        t.join()
    for _ in range(consumers):
        q.put(None, timeout=10.0)
    for t in threads[producers:]:
        t.join()
    items = [x for g in got for x in g]
    assert sorted(items) == sorted((p, i) for p in range(producers) for i in range(n))
    for g in got:  # each producer's items reach each consumer in the order they were put
        for p in range(producers):
            seq = [i for (pp, i) in g if pp == p]
            assert seq == sorted(seq)
    assert q.qsize() == 0
