"""Schedule lag: how late an open-loop request reached the HTTP client against its due time.

An open loop's request ``j`` is due at ``block start + offsets_s[j]``; it is *sent*
when the executor hands it to the HTTP client, after any wait for a free slot
(the in-flight cap) and the client's own preparation of the request (building and
encoding it, the gate's checks). That moment is the measurement's
``start_perf_ns`` less its ``pool_wait_ms`` and ``send_wait_ms`` (the waits for a
connection and for the client's loop to write it, recorded apart: the clock
starts at the body write, issue 22). The lag, ``queue_ms``, is that moment less
the due time: the client's delay, not the server's. Nothing between the due time
and the body write goes unrecorded (before, the preparation did).
"""

from __future__ import annotations

from deepseekbench._measure._measure import StreamMeasurement


def handed_over_ns(m: StreamMeasurement) -> int | None:
    """When the request was handed to the HTTP client: ``time.perf_counter_ns()`` (ns,
    CLOCK_MONOTONIC on Linux), i.e. ``start_perf_ns`` less ``pool_wait_ms`` and
    ``send_wait_ms``; ``None`` when the measurement has no start (refused before it)."""
    if m.start_perf_ns is None:
        return None
    waits_ms = (m.pool_wait_ms or 0.0) + (m.send_wait_ms or 0.0)
    return m.start_perf_ns - round(waits_ms * 1e6)


def schedule_lag_ms(m: StreamMeasurement, due_ns: int, fallback_ns: int) -> float:
    """``queue_ms`` of one open-loop request: :func:`handed_over_ns` − ``due_ns`` (ms, ≥ 0).

    Args:
        m: the request's measurement (its first turn for a conversation).
        due_ns: its scheduled send on the ``time.perf_counter_ns()`` clock (ns).
        fallback_ns: the executor's own send stamp on the same clock (ns), used when
            the measurement has no start.
    """
    sent = handed_over_ns(m)
    return max(0, (fallback_ns if sent is None else sent) - due_ns) / 1e6
