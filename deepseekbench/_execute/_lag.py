"""Schedule lag: how late an open-loop request's send started against its due time.

An open loop's request ``j`` is due at ``block start + offsets_s[j]``. Its *send
start* is when the client began the HTTP exchange, i.e. asked the connection pool
for a connection: after any wait for a free slot (the executor's in-flight cap)
and the client's own preparation of the request (building and encoding it, the
gate's checks). The lag, ``queue_ms``, is the send start less the due time: the
client's delay, not the server's.

What follows the send start is recorded apart: the wait for a pooled connection
until the pool hands one over (``pool_wait_ms``), then the wait for the client's
loop to write the body (``send_wait_ms``); the clock (TTFT, E2E) starts at that
write. So the send start is the measurement's ``start_perf_ns`` less
both waits, and the time from the due time to the body write is
``queue_ms + pool_wait_ms + send_wait_ms`` with no gap (before, the preparation
was in none of them).
"""

from __future__ import annotations

from deepseekbench._records._measurement import StreamMeasurement


def send_started_ns(m: StreamMeasurement) -> int | None:
    """The request's send start: ``time.perf_counter_ns()`` (ns, CLOCK_MONOTONIC on
    Linux) when the client asked the pool for a connection, i.e. ``start_perf_ns`` less
    ``pool_wait_ms`` and ``send_wait_ms``; ``None`` when the measurement has no start."""
    if m.start_perf_ns is None:
        return None
    waits_ms = (m.pool_wait_ms or 0.0) + (m.send_wait_ms or 0.0)
    return m.start_perf_ns - round(waits_ms * 1e6)


def schedule_lag_ms(m: StreamMeasurement, due_ns: int, fallback_ns: int) -> float:
    """``queue_ms`` of one open-loop request: :func:`send_started_ns` − ``due_ns`` (ms).

    Args:
        m: the request's measurement (its first turn for a conversation).
        due_ns: its scheduled send on the ``time.perf_counter_ns()`` clock (ns).
        fallback_ns: the executor's own send stamp on the same clock (ns), used when
            the measurement has no start.

    Returns:
        the lag (ms), clamped at 0: a send that starts a little before its due time
        (a timer waking early) counts as on time.
    """
    sent = send_started_ns(m)
    return max(0, (fallback_ns if sent is None else sent) - due_ns) / 1e6
