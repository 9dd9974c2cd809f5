"""Issue 22: the engine's own clock as a witness of the client's speed figures.

Where the engine reports its own per-request timings (``StreamMeasurement.server_*``,
read by each dialect's ``server_times``), a row carries the server-side TTFT
(``server_ttft_ms``) and TPOT (``server_tpot_ms``: median of the engine's mean ITL)
beside the client's. :func:`clock_disagrees` compares a client-clock speedup with
the server-clock speedup of the same rows; :func:`server_value` gives the server
figure a ``clock = "server"`` verdict is judged on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from deepseekbench._measure._measure import StreamMeasurement
from deepseekbench._types._row import Row

__all__ = [
    "SERVER_FIGURES",
    "SERVER_SAMPLES",
    "clock_disagrees",
    "server_clock_fields",
    "server_value",
]

SERVER_FIGURES: dict[str, str] = {"tpot_ms": "server_tpot_ms", "ttft_ms": "server_ttft_ms"}
"""Row field of the engine's own figure for each client metric it can witness (ms)."""

SERVER_SAMPLES: dict[str, str] = {"tpot_ms": "server_mean_itl_ms", "ttft_ms": "server_ttft_ms"}
"""Per-request ``StreamMeasurement`` field of the engine's own figure (ms)."""


def server_clock_fields(measured: Sequence[StreamMeasurement]) -> dict[str, Any]:
    """``{"server_tpot_ms": ...}``: the median of the successful requests' engine-reported
    mean inter-token latency (ms; vLLM ``metrics.mean_itl_ms``, llama.cpp
    ``timings.predicted_per_token_ms``), ``None`` when no request carried one."""
    values = [
        m.server_mean_itl_ms
        for m in measured
        if m.error is None and m.server_mean_itl_ms is not None
    ]
    return {"server_tpot_ms": statistics.median(values) if values else None}


def server_value(row: Row, metric: str) -> float | None:
    """``row``'s engine-reported figure for ``metric`` (ms), or ``None`` when the
    engine reported none or the metric has no server counterpart."""
    name = SERVER_FIGURES.get(metric)
    value: Any = getattr(row, name) if name is not None else None
    return None if value is None else float(value)


def clock_disagrees(
    baseline: Row, candidate: Row, metric: str, client_speedup: float, tolerance: float
) -> bool:
    """True when both rows carry the engine's own figure for ``metric`` and the
    server-clock speedup (``baseline / candidate``, lower is better) differs from
    ``client_speedup`` by more than the ratio ``tolerance`` (0.25 = 25 %) either way."""
    b, c = server_value(baseline, metric), server_value(candidate, metric)
    if b is None or c is None or not (b > 0 and c > 0):
        return False
    ratio = client_speedup / (b / c)
    return abs(math.log(ratio)) > math.log1p(tolerance)
