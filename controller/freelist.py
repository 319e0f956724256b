"""Sorted sets of integers and of used-address runs, so that the next free address is found in
O(log n) of the addresses in use, never by walking a pool.

A pool may be a /8 or a /64; MetalLB walks it from its first address testing each one, which is
linear in the number of used addresses ahead of the answer. Here the addresses in use are kept as
maximal runs `[start, end]` of consecutive integers: the first free address at or after `x` is
`x` itself unless a run covers it, and then it is that run's `end + 1` (runs are maximal, so that
address is free). Finding the run is a predecessor search over run starts.

The run starts live in a blocked sorted list (`SortedInts`): a list of sorted blocks of at most
`2 * LOAD` integers plus the list of each block's maximum. A search is two bisections, O(log n); an
insertion or deletion bisects and then shifts at most one block (O(LOAD), a memmove of a few KiB),
splitting it when it grows past `2 * LOAD`. A single flat list would make every insert an O(n)
memmove; the `structure` figures of `bench/allocator_micro.py` put the two side by side.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

# Block size: large enough that the list of block maxima stays short, small enough that shifting
# one block on insert is cheap. 512 is the order of magnitude sortedcontainers settled on too.
LOAD = 512


class SortedInts:
    """A set of ints kept in order, with predecessor/successor search."""

    __slots__ = ("_blocks", "_len", "_maxes")

    def __init__(self) -> None:
        self._blocks: list[list[int]] = []
        self._maxes: list[int] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[int]:
        for block in self._blocks:
            yield from block

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        found = self.ceil(value)
        return found is not None and found == value

    def add(self, value: int) -> bool:
        """Insert `value`; False if it was already present."""
        maxes = self._maxes
        if not maxes:
            self._blocks.append([value])
            maxes.append(value)
            self._len = 1
            return True
        i = bisect.bisect_left(maxes, value)
        if i == len(maxes):
            i -= 1
            block = self._blocks[i]
            block.append(value)
            maxes[i] = value
        else:
            block = self._blocks[i]
            j = bisect.bisect_left(block, value)
            if block[j] == value:
                return False
            block.insert(j, value)
        self._len += 1
        if len(block) > 2 * LOAD:
            half = len(block) // 2
            self._blocks.insert(i + 1, block[half:])
            del block[half:]
            maxes.insert(i, block[-1])
        return True

    def discard(self, value: int) -> bool:
        """Remove `value`; False if it was absent."""
        maxes = self._maxes
        i = bisect.bisect_left(maxes, value)
        if i == len(maxes):
            return False
        block = self._blocks[i]
        j = bisect.bisect_left(block, value)
        if block[j] != value:
            return False
        del block[j]
        self._len -= 1
        if not block:
            del self._blocks[i]
            del maxes[i]
        elif j == len(block):
            maxes[i] = block[-1]
        return True

    def ceil(self, value: int) -> int | None:
        """The smallest member >= value, or None."""
        maxes = self._maxes
        i = bisect.bisect_left(maxes, value)
        if i == len(maxes):
            return None
        block = self._blocks[i]
        return block[bisect.bisect_left(block, value)]

    def floor(self, value: int) -> int | None:
        """The largest member <= value, or None."""
        maxes = self._maxes
        i = bisect.bisect_right(maxes, value)
        if i < len(maxes):
            block = self._blocks[i]
            j = bisect.bisect_right(block, value)
            if j:
                return block[j - 1]
        return maxes[i - 1] if i else None


class RunSet:
    """A set of ints stored as maximal runs of consecutive values.

    Sequential allocation, the common case, keeps a whole pool's used addresses in one run; the
    worst case (every other address used) has one run per address and still costs O(log n).
    """

    __slots__ = ("_count", "_end", "_start_of", "_starts")

    def __init__(self) -> None:
        self._starts = SortedInts()
        self._end: dict[int, int] = {}  # run start -> run end
        self._start_of: dict[int, int] = {}  # run end -> run start
        self._count = 0

    def __len__(self) -> int:
        """How many integers are in the set (not how many runs)."""
        return self._count

    @property
    def run_count(self) -> int:
        return len(self._starts)

    def runs(self) -> Iterator[tuple[int, int]]:
        for start in self._starts:
            yield start, self._end[start]

    def run_at(self, value: int) -> tuple[int, int] | None:
        """The run covering `value`, or None when `value` is absent."""
        start = self._starts.floor(value)
        if start is None:
            return None
        end = self._end[start]
        return (start, end) if end >= value else None

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.run_at(value) is not None

    def first_absent(self, value: int) -> int:
        """The smallest integer >= value that is not in the set."""
        run = self.run_at(value)
        return value if run is None else run[1] + 1

    def add(self, value: int) -> bool:
        if self.run_at(value) is not None:
            return False
        left = self._start_of.pop(value - 1, None)  # a run ending just below joins
        right_end = self._end.pop(value + 1, None)  # a run starting just above joins
        if right_end is not None:
            self._starts.discard(value + 1)
        start = value if left is None else left
        end = value if right_end is None else right_end
        if left is None:
            self._starts.add(start)
        self._end[start] = end
        self._start_of[end] = start
        self._count += 1
        return True

    def remove(self, value: int) -> bool:
        run = self.run_at(value)
        if run is None:
            return False
        start, end = run
        del self._end[start]
        del self._start_of[end]
        if start == value:
            self._starts.discard(start)
        if start < value:  # the part below stays, with a new end
            self._end[start] = value - 1
            self._start_of[value - 1] = start
        if value < end:  # the part above becomes its own run
            self._starts.add(value + 1)
            self._end[value + 1] = end
            self._start_of[end] = value + 1
        self._count -= 1
        return True
