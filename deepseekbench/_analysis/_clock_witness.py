"""The engine's own clock as a witness of the client's speed figures.

Where the engine reports its own per-request timings (``StreamMeasurement.server_*``,
read by each dialect's ``server_times``), a row carries the server-side TTFT
(``server_ttft_ms``) and TPOT (``server_tpot_ms``: median of the engine's mean ITL)
beside the client's. :func:`clock_disagrees` compares a client-clock speedup with
the server-clock speedup of the same rows; :func:`server_value` gives the server
figure a ``clock = "server"`` verdict is judged on.

**The engine's figures are witnesses, not the judge.** Before a ``clock = "server"``
verdict uses them, each request's engine figures are held against the client's own
clock of the same request (:func:`request_faults`): a figure of zero, a decode time
shorter than the client's first-to-last-token window beyond the tolerance
(:data:`~deepseekbench._types._clock.CLOCK_TOLERANCE`, 25 %, plus
:data:`~deepseekbench._types._clock.SERVER_WINDOW_SLACK_MS`, 50 ms, plus the client's
own recorded stall: network jitter and stream buffering can only stretch the client's
window by that much), a TTFT longer than the client's, or a token count that is not
the usage count (the engine's output rate × the span it divides by: the generation
time on llama.cpp, TTFT + generation time on vLLM 0.32; :func:`rate_span_ms`). A row
records every fault any of its requests showed
(``Row.server_clock_faults``) and :func:`witness_faults` adds what the row's own
medians contradict; ``compare_speedup`` refuses a server-clock verdict over either
with the fault's name. The reverse stays allowed: an engine window longer than the
client's (the first chunk delivered late) is no contradiction.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._clock import (
    CLOCK_TOLERANCE,
    SERVER_COUNT_SLACK,
    SERVER_WINDOW_SLACK_MS,
    ServerClockFault,
    ServerRateSpan,
)
from deepseekbench._types._row import Row

__all__ = [
    "SERVER_FIGURES",
    "SERVER_SAMPLES",
    "clock_disagrees",
    "count_check_skipped",
    "rate_span_ms",
    "request_faults",
    "server_clock_fields",
    "server_value",
    "witness_faults",
]

SERVER_FIGURES: dict[str, str] = {"tpot_ms": "server_tpot_ms", "ttft_ms": "server_ttft_ms"}
"""Row field of the engine's own figure for each client metric it can witness (ms)."""

SERVER_SAMPLES: dict[str, str] = {"tpot_ms": "server_mean_itl_ms", "ttft_ms": "server_ttft_ms"}
"""Per-request ``StreamMeasurement`` field of the engine's own figure (ms)."""


def server_clock_fields(measured: Sequence[StreamMeasurement]) -> dict[str, Any]:
    """``{"server_tpot_ms": ..., "server_clock_faults": (...)}``: the median of the
    successful requests' engine-reported mean inter-token latency (ms; vLLM
    ``metrics.mean_itl_ms``, llama.cpp ``timings.predicted_per_token_ms``), ``None``
    when no request carried one; and every :class:`ServerClockFault` any successful
    request showed (:func:`request_faults`), in vocabulary order."""
    values = [
        m.server_mean_itl_ms
        for m in measured
        if m.error is None and m.server_mean_itl_ms is not None
    ]
    faults: set[ServerClockFault] = set()
    for m in measured:
        faults |= request_faults(m)
    return {
        "server_tpot_ms": statistics.median(values) if values else None,
        "server_clock_faults": tuple(f for f in ServerClockFault if f in faults),
    }


def _positive(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value > 0)


def _shorter(server_ms: float, client_ms: float, slack_ms: float) -> bool:
    """True when a server window (ms) is shorter than the client's beyond the tolerance."""
    return server_ms * (1 + CLOCK_TOLERANCE) + slack_ms < client_ms


def request_faults(m: StreamMeasurement) -> frozenset[ServerClockFault]:
    """The faults of one request's engine figures against its client clock (ms, tokens).

    ``n``: the request's usage count (``completion_tokens``; choice 0's count with
    several choices). Faults (:class:`ServerClockFault`): a present engine TTFT, or, with
    ``n >= 2``, mean ITL or generation time that is not > 0; an engine decode time
    (mean ITL × (n − 1), and the generation time) with ``decode × 1.25 + slack <``
    the client's ``e2e_ms − ttft_ms``, or an engine TTFT with ``client TTFT × 1.25 +
    slack <`` it, where slack = 50 ms + the client's own longest stall or loop lag
    (``client_stall_ms``/``client_lag_ms``); an engine count (output rate × the span its
    dialect divides it by, :func:`rate_span_ms`, / 1000) further than 1 token + 2 % from
    ``n`` (only with a usage count, not an estimate, and a stated span). A failed
    request, or one without engine figures, has none."""
    F = ServerClockFault
    if m.error is not None:
        return frozenset()
    n = m.choice_tokens if m.choice_tokens is not None else m.completion_tokens
    many = n is not None and n >= 2
    out: set[ServerClockFault] = set()
    if not _positive(m.server_ttft_ms) or (
        many and not (_positive(m.server_mean_itl_ms) and _positive(m.server_generation_ms))
    ):
        out.add(F.server_clock_not_positive)
    stall = max((v for v in (m.client_stall_ms, m.client_lag_ms) if v is not None), default=0.0)
    slack = SERVER_WINDOW_SLACK_MS + stall
    if many and n is not None and m.ttft_ms is not None and m.e2e_ms is not None:
        window = m.e2e_ms - m.ttft_ms  # the client's first-to-last-token window
        decode = [m.server_generation_ms]
        if m.server_mean_itl_ms is not None:
            decode.append(m.server_mean_itl_ms * (n - 1))
        if any(d is not None and _shorter(d, window, slack) for d in decode):
            out.add(F.server_clock_contradicts_client)
    client_ttft, server_ttft = m.ttft_ms, m.server_ttft_ms  # the client's includes it
    if client_ttft is not None and server_ttft is not None:  # noqa: SIM102 (narrowing)
        if _shorter(client_ttft, server_ttft, slack):
            out.add(F.server_clock_contradicts_client)
    if _count_mismatch(m):
        out.add(F.server_clock_count_mismatch)
    return frozenset(out)


def rate_span_ms(m: StreamMeasurement) -> float | None:
    """The span (ms) the engine divided ``m.server_toks_per_s`` by, per its dialect's
    :class:`~deepseekbench.ServerRateSpan` (``m.server_rate_span``): the generation time
    (llama.cpp), or TTFT + generation time (vLLM 0.32). ``None`` when the span is not
    stated (the count check is skipped: :func:`count_check_skipped` says why) or a
    figure it needs is missing or not > 0."""
    span, gen, ttft = m.server_rate_span, m.server_generation_ms, m.server_ttft_ms
    if span is None or gen is None or not gen > 0:
        return None
    if span is ServerRateSpan.generation:
        return gen
    return gen + ttft if ttft is not None and ttft > 0 else None


def count_check_skipped(m: StreamMeasurement) -> str | None:
    """Why :func:`request_faults` made no count check of ``m``, or ``None`` when it
    made one (or there was no engine rate to check)."""
    if m.server_toks_per_s is None:
        return None
    if m.tokens_estimated or m.choices_seen > 1 or m.completion_tokens is None:
        return "no usage count of one choice to hold the engine's rate against"
    if m.server_rate_span is None:
        return "the dialect states no span for the engine's output rate"
    if rate_span_ms(m) is None:
        return f"a figure of the rate's span ({m.server_rate_span.value}) is missing or not > 0"
    return None


def _count_mismatch(m: StreamMeasurement) -> bool:
    """The engine's count (its rate × the span it divides by) is not usage's; no check
    where :func:`count_check_skipped` gives a reason."""
    rate, span, usage = m.server_toks_per_s, rate_span_ms(m), m.completion_tokens
    if count_check_skipped(m) is not None or rate is None or not rate > 0:
        return False
    assert span is not None and usage is not None  # count_check_skipped ruled both out
    tokens, share = SERVER_COUNT_SLACK
    return abs(rate * span / 1000 - usage) > tokens + share * usage


def witness_faults(row: Row, metric: str) -> tuple[ServerClockFault, ...]:
    """Why ``row``'s engine figure for ``metric`` is no witness, in vocabulary order:
    the faults its requests showed (``row.server_clock_faults``), a figure that is not
    > 0, and for ``tpot_ms`` a median engine TPOT the row's own client medians
    contradict (:func:`request_faults`' rule, the window spread over the median
    output length less one: ``output_tokens.p50 − 1``, else ``(e2e − ttft) / tpot``).
    Empty when the engine reported no figure for ``metric`` (that is
    ``server_clock_missing``)."""
    value = server_value(row, metric)
    if value is None:
        return ()
    F = ServerClockFault
    faults = set(row.server_clock_faults)
    if not _positive(value):
        faults.add(F.server_clock_not_positive)
    elif metric == "tpot_ms" and row.tpot_ms is not None:
        steps = _decode_steps(row)
        slack = SERVER_WINDOW_SLACK_MS + (row.client_stall_ms or 0.0)
        if steps is not None and _shorter(value * steps, row.tpot_ms * steps, slack):
            faults.add(F.server_clock_contradicts_client)
    elif (
        metric == "ttft_ms"
        and row.ttft_ms is not None
        and _shorter(row.ttft_ms, value, SERVER_WINDOW_SLACK_MS + (row.client_stall_ms or 0.0))
    ):
        faults.add(F.server_clock_contradicts_client)
    return tuple(f for f in F if f in faults)


def _decode_steps(row: Row) -> float | None:
    """Inter-token steps of the row's median request: output tokens − 1."""
    p50 = row.output_tokens.p50 if row.output_tokens is not None else None
    if p50 is not None:
        return p50 - 1 if p50 >= 2 else None
    if row.e2e_ms is not None and row.ttft_ms is not None and row.tpot_ms:
        steps = (row.e2e_ms - row.ttft_ms) / row.tpot_ms
        return steps if steps >= 1 else None
    return None


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
