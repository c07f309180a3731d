"""Width of a block DAG: how many blocks could run at the same time (see :func:`widest_parallel_section`)."""
from __future__ import annotations

__all__ = ["EXACT_WIDTH_MAX_BLOCKS", "widest_parallel_section"]

#: Above this many blocks :func:`widest_parallel_section` uses the level-width lower bound instead of the
#: exact maximum antichain (the exact method builds the transitive closure, O(n^2) pairs); parapipe choice.
EXACT_WIDTH_MAX_BLOCKS = 1500


def widest_parallel_section(bg) -> int:
    """The largest number of blocks that could run at the same time: the width of the block DAG.

    This is the size of a maximum antichain (a set of blocks no two of which are connected by a path),
    computed exactly with Dilworth's theorem: width = n - (maximum matching in the bipartite graph of the
    transitive closure) (Fulkerson 1956, "Note on Dilworth's decomposition theorem for partially ordered
    sets"). Above :data:`EXACT_WIDTH_MAX_BLOCKS` blocks it returns the widest level of the longest-path
    layering instead (blocks at the same depth are pairwise independent, so this is a lower bound).

    Returns
    -------
    int
        1 for a chain, 4 for an Inception module, 2 for a ResNet projection block; 0 for an empty graph.
    """
    n = len(bg.blocks)
    if n == 0:
        return 0
    order = [b.name for b in bg.blocks]
    if n > EXACT_WIDTH_MAX_BLOCKS:
        depth: dict[str, int] = {}
        for name in order:
            depth[name] = max((depth[p] + 1 for p in bg.graph.predecessors(name)), default=0)
        counts: dict[int, int] = {}
        for d in depth.values():
            counts[d] = counts.get(d, 0) + 1
        return max(counts.values())
    idx = {name: i for i, name in enumerate(order)}
    reach = [0] * n  # bitset of blocks reachable from block i (excluding i)
    for i in range(n - 1, -1, -1):
        bits = 0
        for s in bg.graph.successors(order[i]):
            j = idx[s]
            bits |= reach[j] | (1 << j)
        reach[i] = bits
    return n - _max_matching(reach, n)


def _max_matching(reach: list[int], n: int) -> int:
    """Maximum matching of the bipartite graph i -> j for each bit j of ``reach[i]`` (Kuhn's augmenting
    paths, iterative, with a greedy start)."""
    match_right = [-1] * n
    match_left = [-1] * n
    used = 0
    for i in range(n):  # greedy start
        free = reach[i] & ~used
        if free:
            low = free & -free
            j = low.bit_length() - 1
            match_right[j], match_left[i] = i, j
            used |= low
    for i in range(n):
        if match_left[i] != -1 or not reach[i]:
            continue
        seen = 0
        # stack of (left vertex, remaining candidate bits); parent links to flip the augmenting path
        stack = [(i, reach[i])]
        via: dict[int, int] = {}  # right vertex -> left vertex that reached it
        found = -1
        while stack and found < 0:
            left, bits = stack[-1]
            bits &= ~seen
            if not bits:
                stack.pop()
                continue
            low = bits & -bits
            j = low.bit_length() - 1
            stack[-1] = (left, bits ^ low)
            seen |= low
            via[j] = left
            if match_right[j] == -1:
                found = j
            else:
                nxt = match_right[j]
                stack.append((nxt, reach[nxt]))
        while found >= 0:  # flip the path back to i
            left = via[found]
            prev = match_left[left]
            match_right[found], match_left[left] = left, found
            found = prev if left != i else -1
    return sum(1 for j in range(n) if match_right[j] != -1)
