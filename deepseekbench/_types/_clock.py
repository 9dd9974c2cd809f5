"""Which clock a speed verdict is judged on.

``client``: the times the measuring client stamped on arrival (TTFT, TPOT as the
standard definitions say; they include network and client delay). ``server``: the
engine's own per-request timings (vLLM ``metrics``: ``time_to_first_token_ms``,
``mean_itl_ms``; llama.cpp ``timings``: ``prompt_ms``, ``predicted_per_token_ms``),
which exclude the network and the client.
"""

from __future__ import annotations

from typing import Literal

from deepseekbench._types._axes import _ClosedEnum

__all__ = [
    "CLOCK_TOLERANCE",
    "SERVER_COUNT_SLACK",
    "SERVER_WINDOW_SLACK_MS",
    "Clock",
    "ServerClockFault",
    "ServerClockFaultName",
    "ServerRateSpan",
]

CLOCK_TOLERANCE = 0.25
"""How far (as a ratio, 0.25 = 25 %) a client-clock speedup may differ from the
server-clock speedup of the same rows before the client's verdict is withheld
(refusal ``clock_disagreement``)."""


SERVER_WINDOW_SLACK_MS = 50.0
"""Fixed part (ms) of how much shorter than the client's own first-to-last-token window
the engine's decode time of one request may be before the engine's figures are refused
(``server_clock_contradicts_client``); the proportional part is :data:`CLOCK_TOLERANCE`.

Why a slack at all: the engine stamps a token when it makes it, the client when it
reads it, so the two windows differ by how much later the last chunk was delivered
than the first — network jitter, a proxy's or the server's stream buffering (a flush
held back, Nagle/delayed-ACK pauses of ~40 ms on Linux), and the client's own event
loop reading late. Per-chunk delays grow with the stream (the 25 % part); one-off
pauses do not (this 50 ms part). Beyond both, the engine's figure is not a clock of
this request: an inter-token latency of 1e-9 ms cannot produce a stream the client
read over hundreds of milliseconds."""

SERVER_COUNT_SLACK = (1, 0.02)
"""How far the engine's own token count (its output rate × its generation time) may be
from the usage count of the same request: 1 token (engines count the first token in
or out of the generation window) plus 2 % (rounding of the reported ms and rates)."""


class ServerClockFault(_ClosedEnum):
    """Why the engine's own per-request figures are not a witness of a request's speed
    (``Row.server_clock_faults``); a verdict on ``clock = "server"`` over a row with any
    is refused with the fault's name.

    ``server_clock_not_positive``: an engine figure of zero, or negative or not finite
    (an inter-token latency of 0 ms over two or more tokens, a TTFT of 0 ms).
    ``server_clock_contradicts_client``: the engine's decode time (its mean ITL × (n − 1),
    or its generation time) is shorter than the client's own first-to-last-token window
    of the same request by more than :data:`CLOCK_TOLERANCE` and
    :data:`SERVER_WINDOW_SLACK_MS`, or its TTFT is longer than the client's (which
    includes it) by more than the same.
    ``server_clock_count_mismatch``: the engine's token count (output rate × generation
    time) differs from the request's usage count by more than :data:`SERVER_COUNT_SLACK`.
    """

    server_clock_not_positive = "server_clock_not_positive"
    server_clock_contradicts_client = "server_clock_contradicts_client"
    server_clock_count_mismatch = "server_clock_count_mismatch"


ServerClockFaultName = Literal[
    "server_clock_not_positive", "server_clock_contradicts_client", "server_clock_count_mismatch"
]
"""The string values :class:`ServerClockFault` accepts."""


class ServerRateSpan(_ClosedEnum):
    """The time span an engine divides its per-request output rate (tokens/s) by, so
    the count check (``server_clock_count_mismatch``) multiplies the rate by the same
    span (ms) to get the engine's own token count.

    ``generation``: the generation time alone, first to last token (llama.cpp
    ``timings.predicted_per_second`` = ``predicted_n`` / ``predicted_ms``;
    tools/server/server.cpp ``timings``). ``ttft_and_generation``: the engine's TTFT
    plus its generation time (vLLM 0.32 ``metrics.tokens_per_second`` = completion
    tokens / (``time_to_first_token_ms`` + ``generation_time_ms``); the shared case
    ``sse/21-vllm-0.32-ngram-per-request-metrics``: 128 / (871.34 + 80.69) ms =
    134.45 tokens/s). A dialect that states no span (``None``) has its count check
    skipped, never guessed.
    """

    generation = "generation"
    ttft_and_generation = "ttft_and_generation"


class Clock(_ClosedEnum):
    """The clock a speedup is judged on: ``client`` (default) or ``server``."""

    client = "client"
    server = "server"
