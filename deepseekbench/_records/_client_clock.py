"""Was the client's clock fit to judge speed? Bursts, starvation, row figures.

A starved client (its event-loop thread waiting for a CPU core, or its loop blocked)
cannot read chunks as they arrive: the kernel buffers them, and when the loop runs
again it reads them all in the same millisecond. Their inter-token latencies then
read ~0 and the request's TPOT holds client delay, not decode speed.

Per request (:class:`~deepseekbench._records._measurement.StreamMeasurement`):

- :func:`burst_share`: the share of token-chunk gaps shorter than
  :data:`BURST_WINDOW_MS` (chunks that "arrived together").
- :func:`request_starved`: bunched (share >= :data:`STARVED_BURST_SHARE`) while
  the server paced its tokens apart (its own mean ITL, where it reports one, is
  above the burst window) or the client's loop stalled past the lag threshold.

Per row (:func:`client_clock_fields`): the longest stall, the median CPU share and
wait-for-a-core share, the count of starved requests, and ``client_starved`` when
more than :data:`STARVED_ROW_SHARE` of the measured requests were starved. Such a
row gets no TPOT speedup (:func:`~deepseekbench.compare_speedup` refuses with
``client_starved``); parity and acceptance still stand.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from deepseekbench._records._measurement import StreamMeasurement

__all__ = [
    "BURST_WINDOW_MS",
    "STARVED_BURST_SHARE",
    "STARVED_ROW_SHARE",
    "burst_share",
    "client_clock_fields",
    "request_starved",
]

BURST_WINDOW_MS = 1.0
"""Two token chunks whose arrivals are closer than this (ms) arrived together: no
engine's decode step is this short, so only buffered delivery produces such gaps."""

STARVED_BURST_SHARE = 0.5
"""A request whose share of bunched chunk gaps reaches this (0..1) is bunched."""

STARVED_ROW_SHARE = 0.25
"""A row whose share of starved measured requests exceeds this (0..1) is
``client_starved``: its TPOT is not used for a verdict."""


def burst_share(
    chunk_arrival_ms: Sequence[float], window_ms: float = BURST_WINDOW_MS
) -> float | None:
    """Share (0..1) of gaps between consecutive token chunks shorter than ``window_ms``
    (ms); ``None`` with fewer than 3 chunks (under 2 gaps say nothing about pacing).

    Raises:
        ValueError: ``window_ms`` is not > 0.
    """
    if not window_ms > 0:
        raise ValueError("window_ms must be > 0")
    gaps = [b - a for a, b in itertools.pairwise(chunk_arrival_ms)]
    if len(gaps) < 2:
        return None
    return sum(g < window_ms for g in gaps) / len(gaps)


def request_starved(m: StreamMeasurement, lag_threshold_ms: float) -> bool:
    """True when ``m``'s chunks were bunched by the client, not by the server.

    Bunched: :func:`burst_share` >= :data:`STARVED_BURST_SHARE`. By the client: the
    engine's own mean ITL (``server_mean_itl_ms``, vLLM ``metrics``) says it paced
    tokens further apart than :data:`BURST_WINDOW_MS`, or the client's loop stalled
    (``client_stall_ms`` or ``client_lag_ms``) past ``lag_threshold_ms`` (ms) during
    the request. A failed request is never starved (it has no verdict to spoil).
    """
    if m.error is not None:
        return False
    share = burst_share(m.chunk_arrival_ms)
    if share is None or share < STARVED_BURST_SHARE:
        return False
    paced = m.server_mean_itl_ms is not None and m.server_mean_itl_ms > BURST_WINDOW_MS
    stalled = any(
        v is not None and v > lag_threshold_ms for v in (m.client_stall_ms, m.client_lag_ms)
    )
    return paced or stalled


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def client_clock_fields(
    measured: Sequence[StreamMeasurement], lag_threshold_ms: float
) -> dict[str, Any]:
    """The row's client-clock fields from its measured requests: ``client_stall_ms``
    (longest, ms), ``client_cpu_share`` and ``client_core_wait_share`` (medians,
    0..1), ``client_cores`` (fewest seen) and ``client_load_1m`` (median load
    average), ``n_client_starved`` (requests, see :func:`request_starved`) and
    ``client_starved`` (their share exceeds :data:`STARVED_ROW_SHARE`)."""
    stalls = [m.client_stall_ms for m in measured if m.client_stall_ms is not None]
    starved = sum(request_starved(m, lag_threshold_ms) for m in measured)
    return {
        "client_stall_ms": max(stalls) if stalls else None,
        "client_cpu_share": _median(m.client_cpu_share for m in measured),
        "client_core_wait_share": _median(m.client_core_wait_share for m in measured),
        "client_cores": min(cores)
        if (cores := [m.client_cores for m in measured if m.client_cores])
        else None,
        "client_load_1m": _median(m.client_load_1m for m in measured),
        "n_client_starved": starved,
        "client_starved": bool(measured) and starved / len(measured) > STARVED_ROW_SHARE,
    }
