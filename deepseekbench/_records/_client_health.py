"""Row-level client health: was the client itself a bottleneck while a row was measured?

Two figures from a row's measured requests (``StreamMeasurement``):
``client_saturated`` (a request saw the client's own event loop lag past the
plan's threshold; see :mod:`deepseekbench._measure._selfcheck`) and the longest wait
for a pooled connection (kept out of TTFT; see :mod:`deepseekbench._net._transport`).
"""

from __future__ import annotations

from collections.abc import Iterable

from deepseekbench._records._measurement import StreamMeasurement


def client_saturated(measured: Iterable[StreamMeasurement], threshold_ms: float) -> bool:
    """True when any request's ``client_lag_ms`` exceeds ``threshold_ms`` (ms)."""
    return any(m.client_lag_ms is not None and m.client_lag_ms > threshold_ms for m in measured)


def max_pool_wait_ms(measured: Iterable[StreamMeasurement]) -> float | None:
    """The longest ``pool_wait_ms`` among the requests (ms); ``None`` if none reported one."""
    waits = [m.pool_wait_ms for m in measured if m.pool_wait_ms is not None]
    return max(waits) if waits else None
