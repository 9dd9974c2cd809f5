"""A closed loop's ramp: its streams' first starts spread over a stated time.

A closed loop of C streams starts all C at once by default (``arrival.ramp_ms = 0``).
With ``ramp_ms = R``, stream ``s`` (0-based) may send its first request at
``s · R / C`` ms after the load point's start, and from then on runs as a closed
loop (its next request when the previous one ends). The streams are counted by a
capacity limiter: it starts with one token (stream 0) and gains one at each later
stream's start, so at time ``t`` at most ``⌊t · C / R⌋ + 1`` requests are in flight.

Across client workers, stream ``s`` belongs to worker ``s % active``
(:mod:`~deepseekbench._execute._workshare`): worker ``w``'s ``k``-th stream is stream
``k · active + w``, so the workers together start the streams at the same times as
one client would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio

__all__ = ["ramp_limiter", "stream_starts_s"]


def stream_starts_s(
    concurrency: int, ramp_ms: float, *, worker: int = 0, active: int = 1
) -> tuple[float, ...]:
    """When each of one worker's streams may first send (s after the load point's start).

    ``concurrency``: the load point's streams (all workers); ``ramp_ms``: the ramp (ms,
    0 = all at once); ``worker`` / ``active``: this worker and the workers taking part.
    Returns one time per stream of the worker (ascending; all 0.0 without a ramp).

    Raises:
        ValueError: ``concurrency`` or ``active`` below 1, ``worker`` outside
            ``0..active-1``, or ``ramp_ms`` below 0.
    """
    if concurrency < 1 or active < 1 or not 0 <= worker < active or ramp_ms < 0:
        raise ValueError("need concurrency, active >= 1, 0 <= worker < active, ramp_ms >= 0")
    streams = range(worker, concurrency, active)
    return tuple(s * ramp_ms / 1000.0 / concurrency for s in streams)


async def ramp_limiter(
    limiter: anyio.CapacityLimiter,
    starts_s: Sequence[float],
    start_ns: int,
    clock_ns: Callable[[], int] = time.perf_counter_ns,
) -> None:
    """Hold ``limiter`` to the streams started so far: one more token at each start
    after the first (``start_ns`` + ``starts_s[k]``, on ``clock_ns``), ``len(starts_s)``
    from the last on. The caller sets ``limiter.total_tokens = 1`` before any sender
    can borrow (the first stream) and waits for ``starts_s[0]`` itself; it runs this
    beside the senders and cancels it when they are done."""
    for k, offset in enumerate(starts_s[1:], start=2):
        delay = start_ns + round(offset * 1e9) - clock_ns()
        if delay > 0:
            await anyio.sleep(delay / 1e9)
        limiter.total_tokens = k
