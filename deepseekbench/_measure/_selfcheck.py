"""The measuring client watches itself: event-loop lag (a ticker) and CPU use.

A client whose event loop is late stamps every arrival late, and that delay
reads as server latency. ``SelfCheck`` runs a ticker task that asks to wake
every ``interval_s`` and records how late it woke (the lag, ms) and the
process CPU time; :func:`measure_streamed` reads the largest lag seen during
its own request (``StreamMeasurement.client_lag_ms``), and the analysis flags a
row ``client_saturated`` when a measured request saw a lag above the plan's
``client_lag_threshold_ms``. Works on asyncio and trio.

Reading a CPU clock (``thread_time_ns``, ``process_time_ns``, ``/proc/thread-self/schedstat``)
makes the kernel settle the thread's run time, and on a busy host that is where it
takes the core away: under load such a read took 2-4 ms at p99 (15 ms at worst) where
``getppid`` took 6 µs. So the loop thread's clocks are read at most once per five ticker
periods (50 ms by default), one reading shared by every request that starts or ends in
that time (:meth:`SelfCheck.sched_now`), and the ticker reads the process CPU time once
per ten periods; never once per request: at 256 streams, per-request reads put 512
such yields per wave on the event loop (fidelity at 256 streams;
``benchmarks/check_request_path.py`` holds it).

Usage::

    async with SelfCheck() as check:
        m = await measure_streamed(...)   # m.client_lag_ms is set
    check.summary()                        # SelfCheckSummary
"""

from __future__ import annotations

import contextvars
import os
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from deepseekbench._measure._running_max import RunningMax
from deepseekbench._types._selfcheck import DEFAULT_LAG_THRESHOLD_MS

__all__ = [
    "DEFAULT_LAG_THRESHOLD_MS",
    "SchedSample",
    "SelfCheck",
    "SelfCheckSummary",
    "current_selfcheck",
    "host_load",
    "sched_sample",
]

_CURRENT: contextvars.ContextVar[SelfCheck | None] = contextvars.ContextVar(
    "deepseekbench_selfcheck", default=None
)


# --- the client's CPU share and its wait for a core ----------------------------------
_SCHEDSTAT = Path("/proc/thread-self/schedstat")


@dataclass(frozen=True, slots=True)
class SchedSample:
    """The calling thread's clocks at one moment (all ns).

    ``wall_ns``: ``time.perf_counter_ns()``; ``cpu_ns``: the thread's CPU time
    (``time.thread_time_ns()``); ``wait_ns``: its cumulative time runnable but
    waiting for a core (second field of Linux ``/proc/thread-self/schedstat``,
    see the kernel's Documentation/scheduler/sched-stats.rst), ``None`` where the
    OS does not give it.
    """

    wall_ns: int
    cpu_ns: int
    wait_ns: int | None

    def shares_until(self, later: SchedSample) -> tuple[float | None, float | None]:
        """``(cpu_share, core_wait_share)`` between this sample and ``later``: the
        thread's CPU time and its run-queue wait per wall second (dimensionless,
        0..1 for one thread); ``None`` for an empty window or an unknown wait."""
        wall = later.wall_ns - self.wall_ns
        if wall <= 0:
            return None, None
        cpu = min(1.0, max(0.0, (later.cpu_ns - self.cpu_ns) / wall))
        if self.wait_ns is None or later.wait_ns is None:
            return cpu, None
        return cpu, min(1.0, max(0.0, (later.wait_ns - self.wait_ns) / wall))


def _run_queue_wait_ns() -> int | None:
    try:
        return int(_SCHEDSTAT.read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def sched_sample() -> SchedSample:
    """The calling thread's wall, CPU and run-queue-wait clocks now (see
    :class:`SchedSample`); never raises (the wait is ``None`` when unreadable)."""
    return SchedSample(time.perf_counter_ns(), time.thread_time_ns(), _run_queue_wait_ns())


def host_load() -> tuple[int | None, float | None]:
    """``(cores, load_1m)``: the CPU cores this process may run on (its affinity mask,
    else ``os.cpu_count()``) and the host's 1-minute load average (runnable tasks;
    ``os.getloadavg``), ``None`` where the OS gives neither; never raises."""
    try:
        cores: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    return cores, load


_CPU_EVERY = 10
"""The ticker reads the process CPU time every this many periods (100 ms by default)."""


_SCHED_EVERY = 5
"""A shared reading of the loop thread's clocks serves this many periods (50 ms by default)."""


def current_selfcheck() -> SelfCheck | None:
    """The :class:`SelfCheck` running around the caller, if any."""
    return _CURRENT.get()


@dataclass(frozen=True, slots=True)
class SelfCheckSummary:
    """The client's own health over a window.

    ``ticks``: ticker wake-ups; ``max_lag_ms`` / ``p99_lag_ms``: how late the
    ticker woke (ms); ``cpu_share``: process CPU seconds per wall second (1.0 =
    one core busy; the event loop runs on one core), read every ten ticker periods.
    """

    ticks: int
    max_lag_ms: float
    p99_lag_ms: float
    cpu_share: float


class SelfCheck:
    """An event-loop lag ticker and CPU sampler, as an async context manager.

    Args:
        interval_s: ticker period (s); each tick costs a few µs of CPU.

    Raises:
        ValueError: ``interval_s`` is not > 0.
    """

    def __init__(self, interval_s: float = 0.01) -> None:
        if not interval_s > 0:
            raise ValueError("interval_s must be > 0")
        self.interval_s = interval_s
        self._t = array("q")  # wake time of each tick, perf_counter ns
        self._lag = RunningMax()  # how late it woke, ns
        self._gap = RunningMax()  # wake time minus the previous one's (or start()'s), ns
        self._cpu_t = array("q")  # when the process CPU time was read, perf_counter ns
        self._cpu = array("q")  # process CPU time then, ns (every _CPU_EVERY periods)
        self._sched: SchedSample | None = None  # the shared sample (sched_now)
        self.sched_reads = 0  # how many times the thread's clocks were read
        self._tg: TaskGroup | None = None
        self._token: contextvars.Token[SelfCheck | None] | None = None
        self._started_ns: int | None = None  # perf_counter ns at start()

    async def __aenter__(self) -> SelfCheck:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:  # the exception propagates
        await self.aclose()

    async def start(self) -> SelfCheck:
        """Start the ticker and make this the check :func:`current_selfcheck` returns
        in this task and the tasks it starts afterwards.

        Raises:
            RuntimeError: already started.
        """
        if self._tg is not None:
            raise RuntimeError("this SelfCheck is already running")
        self._started_ns = time.perf_counter_ns()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._tick)
        self._token = _CURRENT.set(self)
        return self

    async def aclose(self) -> None:
        """Stop the ticker (in the task that started it); a no-op when not running."""
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    async def _tick(self) -> None:
        period = int(self.interval_s * 1e9)
        due = time.perf_counter_ns() + period
        while True:
            await anyio.sleep(max(0, due - time.perf_counter_ns()) / 1e9)
            now = time.perf_counter_ns()
            self._record_tick(now, due)
            if not self._cpu_t or now - self._cpu_t[-1] >= _CPU_EVERY * period:
                self._cpu_t.append(now)
                self._cpu.append(time.process_time_ns())
            due = now + period

    def _record_tick(self, now_ns: int, due_ns: int) -> None:
        """One ticker wake-up at ``now_ns`` that was due at ``due_ns`` (perf_counter ns):
        amortized O(1), so the per-request queries need no walk over the window."""
        prev = self._t[-1] if self._t else self._started_ns
        self._t.append(now_ns)
        self._lag.append(max(0, now_ns - due_ns))
        self._gap.append(now_ns - (prev if prev is not None else now_ns))

    def sched_now(self, after: SchedSample | None = None) -> SchedSample:
        """The event-loop thread's clocks (:class:`SchedSample`), read afresh only when
        the last reading is five ticker periods old or more (50 ms by default), or is
        ``after`` itself (a window needs two readings), else that reading: the requests
        that start or end within those periods share it, so a request's CPU share and
        core wait cover its window to within five periods at each end. Never raises.
        """
        now = time.perf_counter_ns()
        last = self._sched
        max_age = int(_SCHED_EVERY * self.interval_s * 1e9)
        if last is None or last is after or now - last.wall_ns >= max_age:
            last = self._sched = sched_sample()
            self.sched_reads += 1
        return last

    def max_lag_ms(self, start_ns: int, end_ns: int) -> float | None:
        """Largest lag of a tick that woke within ``[start_ns, end_ns]`` (perf_counter
        ns), counting the tick just after ``end_ns`` when it was late already then.
        When no tick was due inside the window (a request shorter than the
        ticker period), how far ``end_ns`` passed the next tick's due time (0 when
        it had not); ``None`` when the check was never started. O(log n) in the
        ticks recorded (a running range maximum, no walk over the window).
        """
        t, n = self._t, len(self._t)
        lo = bisect_left(t, start_ns)
        hi = n if not t or t[-1] <= end_ns else bisect_right(t, end_ns)  # usually n
        found = self._lag.max_between(lo, hi)
        lags = [] if found is None else [found]
        if hi < n and t[hi] - self._lag[hi] <= end_ns:
            lags.append(self._lag[hi])  # its wake-up was due inside the window
        last = t[hi - 1] if hi > 0 else self._started_ns
        if last is None:
            return None
        if hi == n:
            # a stall that ends with the request (the loop blocked until the
            # end was stamped) has not let the next tick wake yet: account the overdue
            # tick now, by how far ``end_ns`` passed its due time (0 when on time).
            lags.append(max(0, end_ns - (last + int(self.interval_s * 1e9))))
        return max(lags) / 1e6 if lags else 0.0

    def max_stall_ms(self, start_ns: int, end_ns: int) -> float | None:
        """Longest stretch inside ``[start_ns, end_ns]`` (perf_counter ns) in which the
        event loop did not run the ticker (ms): the gap between two wake-ups clipped to
        the window, the last one open until ``end_ns`` when the next tick has not woken
        yet. A loop blocked for N ms inside the window gives at least N ms; a healthy
        loop about ``interval_s``. ``None`` when the check was never started.
        (The stall-proof lag self-check.) O(log n) in the ticks recorded: the gaps
        wholly inside the window come from a running range maximum, only the two
        clipped ends are computed here.
        """
        if self._started_ns is None:
            return None
        t, n = self._t, len(self._t)
        lo = bisect_right(t, start_ns)  # first wake-up after the window's start
        hi = n if not t or t[-1] < end_ns else bisect_left(t, end_ns)  # first at/after its end
        stop = min(hi + 1, n)  # wake-ups lo..stop-1 close a gap that meets the window
        prev = t[lo - 1] if lo > 0 else self._started_ns
        longest = 0
        if lo < stop:
            longest = min(t[lo], end_ns) - max(prev, start_ns)  # the clipped first gap
            inner = self._gap.max_between(lo + 1, min(hi, stop))  # wholly inside
            if inner is not None:
                longest = max(longest, inner)
            if lo < hi < n:  # the gap that the window's end clips
                longest = max(longest, end_ns - t[hi - 1])
            prev = t[stop - 1]
        if hi >= n:  # the tick after the window's last one has not woken yet
            longest = max(longest, end_ns - max(prev, start_ns))
        return max(0, longest) / 1e6

    def lag_and_stall_ms(self, start_ns: int, end_ns: int) -> tuple[float | None, float | None]:
        """``(max_lag_ms(start_ns, end_ns), max_stall_ms(start_ns, end_ns))`` (ms each), the
        two searches of the window shared: what a request asks once, at its end."""
        if self._started_ns is None:
            return None, None
        t, n, lag, gap = self._t, len(self._t), self._lag, self._gap
        # max_stall_ms starts at bisect_right(t, start_ns); a wake-up exactly at the
        # start closes a gap of length 0 there, so bisect_left gives the same answer
        lo_l = lo_r = bisect_left(t, start_ns)
        if not t or t[-1] < end_ns:
            hi_l = hi_r = n
        else:
            hi_l, hi_r = bisect_left(t, end_ns), bisect_right(t, end_ns)
        # the lag (max_lag_ms: ticks lo_l..hi_r-1, the next one when due inside)
        found = lag.max_between(lo_l, hi_r)
        worst = -1 if found is None else found
        if hi_r < n and t[hi_r] - lag[hi_r] <= end_ns:
            worst = max(worst, lag[hi_r])
        if hi_r == n:
            last = t[hi_r - 1] if hi_r > 0 else self._started_ns
            worst = max(worst, end_ns - (last + int(self.interval_s * 1e9)), 0)
        lag_ms = worst / 1e6 if worst >= 0 else 0.0
        # the stall (max_stall_ms: gaps closed by wake-ups lo_r..stop-1, clipped)
        stop = min(hi_l + 1, n)
        prev = t[lo_r - 1] if lo_r > 0 else self._started_ns
        longest = 0
        if lo_r < stop:
            longest = min(t[lo_r], end_ns) - max(prev, start_ns)
            inner = gap.max_between(lo_r + 1, min(hi_l, stop))
            if inner is not None and inner > longest:
                longest = inner
            if lo_r < hi_l < n:
                longest = max(longest, end_ns - t[hi_l - 1])
            prev = t[stop - 1]
        if hi_l >= n:
            longest = max(longest, end_ns - max(prev, start_ns))
        return lag_ms, max(0, longest) / 1e6

    def summary(self, start_ns: int | None = None, end_ns: int | None = None) -> SelfCheckSummary:
        """Ticks, lag (max, p99; ms) and CPU share between two perf_counter ns times
        (default: everything recorded)."""
        lo = 0 if start_ns is None else bisect_left(self._t, start_ns)
        hi = len(self._t) if end_ns is None else bisect_right(self._t, end_ns)
        lags = sorted(self._lag.values[lo:hi])
        if not lags:
            return SelfCheckSummary(ticks=0, max_lag_ms=0.0, p99_lag_ms=0.0, cpu_share=0.0)
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))]
        c_lo = 0 if start_ns is None else bisect_left(self._cpu_t, start_ns)
        c_hi = len(self._cpu_t) if end_ns is None else bisect_right(self._cpu_t, end_ns)
        wall = self._cpu_t[c_hi - 1] - self._cpu_t[c_lo] if c_hi > c_lo else 0
        cpu = self._cpu[c_hi - 1] - self._cpu[c_lo] if c_hi > c_lo else 0
        return SelfCheckSummary(
            ticks=len(lags),
            max_lag_ms=lags[-1] / 1e6,
            p99_lag_ms=p99 / 1e6,
            cpu_share=cpu / wall if wall > 0 else 0.0,
        )
