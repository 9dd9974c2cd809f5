"""An append-only integer sequence that answers "largest value in ``[lo, hi)``" fast.

The client's self-check asks, once per request, for the largest ticker lag and the
longest gap between ticker wake-ups inside the request's window. Walking the window
costs one step per tick (about 2,000 at 256 streams with 10 ms ticks), and the
requests of a wave end together, so the walks add up on the event loop. This
structure keeps two running summaries instead:

- a monotone stack of the suffix maxima (indices whose value is larger than every
  later value): the largest value from ``lo`` to the end is the first stack entry at
  or after ``lo``, one C ``bisect`` (O(log n)); appending pops the entries it beats
  (amortized O(1)). A request's window ends at the newest tick, so this is the
  common case.
- per-level block maxima (level ``k`` holds the maximum of each complete aligned block
  of ``2**k`` values): any other ``[lo, hi)`` decomposes into at most two blocks per
  level, O(log n) steps; appending completes at most one block per level (amortized
  O(1), no rebuild).

``steps`` counts the work the queries did (a bisect's comparisons, one per level visited), so a
test can bound it without a clock. Standard range-maximum techniques (a bottom-up
segment tree stored by levels; the monotone-stack sliding-window maximum).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

__all__ = ["RunningMax"]


class RunningMax:
    """Append-only ``int`` sequence with range-maximum queries.

    ``append`` is amortized O(1) (worst O(log n)); ``max_between(lo, hi)`` is O(log n);
    memory about 3 x n integers. Values are ``int`` (ns in the self-check).
    """

    __slots__ = ("_levels", "_stack_idx", "_stack_val", "steps")

    def __init__(self) -> None:
        self._levels: list[array[int]] = [array("q")]  # level k: max of blocks of 2**k
        self._stack_idx = array("q")  # indices of the suffix maxima, increasing
        self._stack_val = array("q")  # their values, strictly decreasing
        self.steps = 0  # query work done so far (bisects + levels visited)

    def __len__(self) -> int:
        return len(self._levels[0])

    def __getitem__(self, i: int) -> int:
        return self._levels[0][i]

    @property
    def values(self) -> array[int]:
        """The sequence itself (do not modify it)."""
        return self._levels[0]

    def append(self, value: int) -> None:
        """Add ``value`` at index ``len(self)``."""
        levels = self._levels
        levels[0].append(value)
        i = len(levels[0])
        stack_idx, stack_val = self._stack_idx, self._stack_val
        while stack_val and stack_val[-1] <= value:
            stack_val.pop()
            stack_idx.pop()
        stack_idx.append(i - 1)
        stack_val.append(value)
        k = 1
        while i % 2 == 0:  # the new value completes a block at level k
            if k == len(levels):
                levels.append(array("q"))
            below = levels[k - 1]
            levels[k].append(max(below[-2], below[-1]))
            i //= 2
            k += 1

    def max_between(self, lo: int, hi: int) -> int | None:
        """Largest value at indices ``lo <= i < hi`` (clipped to the sequence); ``None``
        for an empty range."""
        n = len(self._levels[0])
        lo, hi = max(lo, 0), min(hi, n)
        if lo >= hi:
            return None
        if hi == n:  # a suffix: the first suffix maximum at or after lo
            self.steps += len(self._stack_idx).bit_length()  # the bisect's comparisons
            return self._stack_val[bisect_left(self._stack_idx, lo)]
        best: int | None = None
        for level in self._levels:
            if lo >= hi:
                break
            self.steps += 1
            if lo & 1:
                best = level[lo] if best is None else max(best, level[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                best = level[hi] if best is None else max(best, level[hi])
            lo //= 2
            hi //= 2
        return best
