"""The self-check's own cost at a wave's end: 256 requests ending together.

At 256 streams a request's window spans about 2,000 ticks of the 10 ms ticker, and the
requests of a wave end together, so the per-request queries (``SelfCheck.max_lag_ms``
and ``max_stall_ms``) run back to back on the event loop: whatever they cost, the loop
is blocked for 256 times that. This script feeds a ``SelfCheck`` an hour of synthetic
ticks (360,000), then times the queries of one wave (256 windows of 2,000-2,255 ticks
ending at the same moment) against the walk over the window the stall query used to
do, over several repeats, and prints min/median/max and the load average.

Target: the whole wave's bookkeeping under 1 ms of the loop thread's CPU time (the
loop lag it causes on an otherwise idle core; the wall time, printed beside it, also
holds whatever else the host ran meanwhile).

Run: ``python benchmarks/bench_selfcheck.py [--repeats 7]``; exit 0 = target met.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from bisect import bisect_left, bisect_right
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deepseekbench import SelfCheck

PERIOD_NS = 10_000_000


def _walk_stall(check: SelfCheck, start_ns: int, end_ns: int) -> int:
    """The former per-request walk (one Python step per tick of the window)."""
    t = check._t
    lo, hi = bisect_right(t, start_ns), bisect_left(t, end_ns)
    prev = t[lo - 1] if lo > 0 else 0
    longest = 0
    for i in range(lo, min(hi + 1, len(t))):
        longest = max(longest, min(t[i], end_ns) - max(prev, start_ns))
        prev = t[i]
    return longest


def _feed(ticks: int) -> SelfCheck:
    check = SelfCheck()
    check._started_ns = now = 0
    for i in range(ticks):
        now += PERIOD_NS + (i * 7919) % 3_000_000
        check._record_tick(now, now - (i * 104729) % 2_000_000)
    return check


def _wave_ms(check: SelfCheck, walk: bool) -> tuple[float, float]:
    """(CPU ms, wall ms) of one wave's queries on this thread."""
    end = check._t[-1] + 1_000_000
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    for r in range(256):
        start = end - (2_000 + r) * PERIOD_NS
        if walk:
            _walk_stall(check, start, end)
        else:
            check.lag_and_stall_ms(start, end)  # what measure_streamed asks per request
    return (time.thread_time_ns() - c0) / 1e6, (time.perf_counter_ns() - t0) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ticks", type=int, default=360_000)
    args = parser.parse_args()
    check = _feed(args.ticks)
    new = [_wave_ms(check, walk=False) for _ in range(args.repeats)]
    old = [_wave_ms(check, walk=True) for _ in range(args.repeats)]
    load = os.getloadavg()
    for name, runs in (("running structure (lag + stall)", new), ("former stall walk", old)):
        for clock, xs in (("CPU", [c for c, _ in runs]), ("wall", [w for _, w in runs])):
            print(
                f"{name}: one wave of 256 requests, {clock}: min {min(xs):.3f} / median "
                f"{statistics.median(xs):.3f} / max {max(xs):.3f} ms "
                f"({args.repeats} repeats, {args.ticks} ticks)"
            )
    print(f"load average 1/5/15 min: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")
    met = statistics.median(c for c, _ in new) < 1.0
    print(("MET" if met else "MISSED") + ": the wave's bookkeeping under 1 ms of CPU (median)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
