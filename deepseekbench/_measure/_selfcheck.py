"""The measuring client watches itself: event-loop lag (a ticker) and CPU use.

A client whose event loop is late stamps every arrival late, and that delay
reads as server latency. ``SelfCheck`` runs a ticker task that asks to wake
every ``interval_s`` and records how late it woke (the lag, ms) and the
process CPU time; :func:`measure_streamed` reads the largest lag seen during
its own request (``StreamMeasurement.client_lag_ms``), and the analysis flags a
row ``client_saturated`` when a measured request saw a lag above the plan's
``client_lag_threshold_ms``. Works on asyncio and trio.

Usage::

    async with SelfCheck() as check:
        m = await measure_streamed(...)   # m.client_lag_ms is set
    check.summary()                        # SelfCheckSummary
"""

from __future__ import annotations

import contextvars
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup

__all__ = ["DEFAULT_LAG_THRESHOLD_MS", "SelfCheck", "SelfCheckSummary", "current_selfcheck"]

DEFAULT_LAG_THRESHOLD_MS = 10.0
"""Event-loop lag above which a row is flagged ``client_saturated`` (ms)."""

_CURRENT: contextvars.ContextVar[SelfCheck | None] = contextvars.ContextVar(
    "deepseekbench_selfcheck", default=None
)


def current_selfcheck() -> SelfCheck | None:
    """The :class:`SelfCheck` running around the caller, if any."""
    return _CURRENT.get()


@dataclass(frozen=True, slots=True)
class SelfCheckSummary:
    """The client's own health over a window.

    ``ticks``: ticker wake-ups; ``max_lag_ms`` / ``p99_lag_ms``: how late the
    ticker woke (ms); ``cpu_share``: process CPU seconds per wall second (1.0 =
    one core busy; the event loop runs on one core).
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
        self._lag = array("q")  # how late it woke, ns
        self._cpu = array("q")  # process CPU time at the tick, ns
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
            self._t.append(now)
            self._lag.append(max(0, now - due))
            self._cpu.append(time.process_time_ns())
            due = now + period

    def max_lag_ms(self, start_ns: int, end_ns: int) -> float | None:
        """Largest lag of a tick that woke within ``[start_ns, end_ns]`` (perf_counter
        ns), counting the tick just after ``end_ns`` when it was late already then.
        When no tick was due inside the window (a request shorter than the
        ticker period), how far ``end_ns`` passed the next tick's due time (0 when
        it had not); ``None`` when the check was never started.
        """
        lo = bisect_left(self._t, start_ns)
        hi = bisect_right(self._t, end_ns)
        lags = list(self._lag[lo:hi])
        if hi < len(self._t) and self._t[hi] - self._lag[hi] <= end_ns:
            lags.append(self._lag[hi])  # its wake-up was due inside the window
        if lags:
            return max(lags) / 1e6
        # No tick was due inside a window shorter than the period: the loop can only
        # be late by how far ``end_ns`` passed the next tick's due time (usually 0).
        last = self._t[hi - 1] if hi > 0 else self._started_ns
        if last is None:
            return None
        return max(0, end_ns - (last + int(self.interval_s * 1e9))) / 1e6

    def summary(self, start_ns: int | None = None, end_ns: int | None = None) -> SelfCheckSummary:
        """Ticks, lag (max, p99; ms) and CPU share between two perf_counter ns times
        (default: everything recorded)."""
        lo = 0 if start_ns is None else bisect_left(self._t, start_ns)
        hi = len(self._t) if end_ns is None else bisect_right(self._t, end_ns)
        lags = sorted(self._lag[lo:hi])
        if not lags:
            return SelfCheckSummary(ticks=0, max_lag_ms=0.0, p99_lag_ms=0.0, cpu_share=0.0)
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))]
        wall = self._t[hi - 1] - self._t[lo]
        cpu = self._cpu[hi - 1] - self._cpu[lo]
        return SelfCheckSummary(
            ticks=len(lags),
            max_lag_ms=lags[-1] / 1e6,
            p99_lag_ms=p99 / 1e6,
            cpu_share=cpu / wall if wall > 0 else 0.0,
        )
