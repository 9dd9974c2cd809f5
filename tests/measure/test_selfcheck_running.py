"""The self-check's per-request queries use a running structure, not a walk.

``SelfCheck.max_lag_ms`` and ``max_stall_ms`` are asked once per request; a walk over
the request's window costs one step per 10 ms tick, and at 256 streams the requests of
a wave end together, so the walks blocked the loop for most of a second. These tests
check the running range maximum against a plain walk (the same answers on random
ticks and windows) and bound the work a wave of 256 requests does by counting steps,
never by a clock.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from hypothesis import example, given
from hypothesis import strategies as st

from deepseekbench import SelfCheck
from deepseekbench._measure._running_max import RunningMax

PERIOD_NS = 10_000_000


def _walk_stall_ms(check: SelfCheck, start_ns: int, end_ns: int) -> float | None:
    """The walk ``max_stall_ms`` used to do: one step per tick of the window."""
    t, started = check._t, check._started_ns
    if started is None:
        return None
    lo = bisect_right(t, start_ns)
    hi = bisect_left(t, end_ns)
    prev = t[lo - 1] if lo > 0 else started
    longest = 0
    for i in range(lo, min(hi + 1, len(t))):
        wake = t[i]
        longest = max(longest, min(wake, end_ns) - max(prev, start_ns))
        prev = wake
    if hi >= len(t):
        longest = max(longest, end_ns - max(prev, start_ns))
    return max(0, longest) / 1e6


def _walk_lag_ms(check: SelfCheck, start_ns: int, end_ns: int) -> float | None:
    """The slice ``max_lag_ms`` used to take: one step per tick of the window."""
    t, lag = check._t, check._lag.values
    lo = bisect_left(t, start_ns)
    hi = bisect_right(t, end_ns)
    lags = list(lag[lo:hi])
    if hi < len(t) and t[hi] - lag[hi] <= end_ns:
        lags.append(lag[hi])
    last = t[hi - 1] if hi > 0 else check._started_ns
    if last is None:
        return None
    if hi == len(t):
        lags.append(max(0, end_ns - (last + int(check.interval_s * 1e9))))
    return max(lags) / 1e6 if lags else 0.0


def _check_with_ticks(started_ns: int, ticks: list[tuple[int, int]]) -> SelfCheck:
    """A started-looking check fed ``(wait after the previous tick, lag)`` pairs (ns)."""
    check = SelfCheck()
    check._started_ns = started_ns
    now = started_ns
    for wait, lag in ticks:
        now += wait
        check._record_tick(now, now - lag)
    return check


_TICKS = st.lists(
    st.tuples(
        st.one_of(st.integers(1, 3 * PERIOD_NS), st.integers(1, 900_000_000)),
        st.integers(0, 800_000_000),
    ),
    max_size=120,
)
_OFFSET = st.integers(-200_000_000, 3_000_000_000)


@given(ticks=_TICKS, a=_OFFSET, b=_OFFSET)
@example(ticks=[(PERIOD_NS, 0)] * 5, a=0, b=PERIOD_NS * 5)  # ends on a tick
@example(ticks=[(PERIOD_NS, 0), (300_000_000, 0)] * 2, a=PERIOD_NS, b=700_000_000)  # starts on one
@example(ticks=[(PERIOD_NS, 0), (500_000_000, 490_000_000)], a=20_000_000, b=30_000_000)
@example(ticks=[], a=5, b=10)
@example(  # the window ends inside a stall: its clipped last gap is the longest
    ticks=[(PERIOD_NS, 0)] * 3 + [(500_000_000, 0), (PERIOD_NS, 0)], a=5_000_000, b=430_000_000
)
def test_the_running_queries_answer_as_the_walk_did(
    ticks: list[tuple[int, int]], a: int, b: int
) -> None:
    started = 1_000_000_000
    check = _check_with_ticks(started, ticks)
    start, end = started + a, started + b
    assert check.max_stall_ms(start, end) == _walk_stall_ms(check, start, end)
    assert check.max_lag_ms(start, end) == _walk_lag_ms(check, start, end)
    both = (_walk_lag_ms(check, start, end), _walk_stall_ms(check, start, end))
    assert check.lag_and_stall_ms(start, end) == both


@given(
    values=st.lists(st.one_of(st.integers(-8, 8), st.integers(-(2**40), 2**40)), max_size=300),
    lo=st.integers(-5, 310),
    hi=st.integers(-5, 310),
)
@example(values=list(range(64)), lo=3, hi=61)
@example(values=list(range(64, 0, -1)), lo=0, hi=64)
@example(values=[5, 6], lo=0, hi=2)
def test_running_max_is_the_slice_max(values: list[int], lo: int, hi: int) -> None:
    rm = RunningMax()
    for v in values:
        rm.append(v)
    window = values[max(lo, 0) : max(hi, 0)]
    assert rm.max_between(lo, hi) == (max(window) if window else None)
    assert len(rm) == len(values) and list(rm.values) == values


def _wave_steps(window_ticks: int) -> int:
    """Steps of both queries for 256 requests whose windows end together, each
    ``window_ticks`` ticks long give or take their start offsets (10 ms ticks)."""
    ticks = [(PERIOD_NS + (i * 7919) % 3_000_000, (i * 104729) % 2_000_000) for i in range(60_000)]
    check = _check_with_ticks(0, ticks)
    end = check._t[-1] + 1_000_000  # the wave ends between two ticks
    before = check._lag.steps + check._gap.steps
    for r in range(256):  # 256 concurrent requests started over 2.56 s, ending together
        start = end - (window_ticks + r) * PERIOD_NS
        both = (_walk_lag_ms(check, start, end), _walk_stall_ms(check, start, end))
        assert check.lag_and_stall_ms(start, end) == both  # what measure_streamed asks
    return check._lag.steps + check._gap.steps - before


def test_a_wave_of_256_requests_does_bounded_work_whatever_their_windows() -> None:
    """256 requests ending together: the queries' work per request does not grow with
    the window (the walk took one step per tick: ~2,000 per request at 256 streams) and
    stays within a few bisects of 60,000 ticks (log2 < 16)."""
    short, long_ = _wave_steps(20), _wave_steps(2_000)
    assert long_ == short  # the window's length does not enter the cost
    assert long_ <= 256 * 2 * 16  # per request: two bisects of <= 16 comparisons each


def test_a_window_ending_before_the_newest_tick_also_takes_log_steps() -> None:
    ticks = [(PERIOD_NS, i % 5) for i in range(4096)]
    check = _check_with_ticks(0, ticks)
    for lo, hi in [(1, 4000), (1000, 3000), (17, 2049)]:
        before = check._gap.steps
        start, end = check._t[lo] + 1, check._t[hi] + 1
        assert check.max_stall_ms(start, end) == _walk_stall_ms(check, start, end)
        assert check._gap.steps - before <= 13  # one per level of 4,096 values
