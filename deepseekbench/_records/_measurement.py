"""The measurement record: what one streamed chat completion produced and how fast.

Holds :class:`StreamMeasurement` (the record every stage after measurement reads:
executor, store, analysis, report), its faults (:class:`StreamError`, their
:class:`ErrorKind` and :data:`ERROR_SEVERITY`) and :func:`is_unsent`. Definitions
and sources of every field: ``docs/measurement.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect, Speculative
from deepseekbench._types._clock import ServerRateSpan

__all__ = [
    "ERROR_SEVERITY",
    "ErrorKind",
    "StreamError",
    "StreamMeasurement",
    "is_unsent",
    "measurement_from_fields",
    "most_severe",
]


class ErrorKind(StrEnum):
    """What went wrong with a stream (server side or network; never a caller mistake).

    ``http_status``: non-2xx response; ``server_error_event``: an error object
    (or ``event: error``) inside the stream; ``truncated``: the stream ended
    without ``[DONE]`` and without a finish reason, or mid-event, or the
    connection broke mid-body; ``invalid_event``: an event that is not a JSON
    chunk object (reading goes on); ``content_encoding``: a compressed body
    this client cannot decode (an encoding the installed httpx has no decoder
    for, such as ``br`` without ``brotli``, or corrupt compressed bytes; nothing
    undecoded is read as text); ``timeout``: a connect, first-token or
    total deadline passed; ``connect``: no connection / no response head;
    ``worker_died``: the client worker process (or Ray actor) sending it died
    before the request finished (a client fault, recorded by the parent;
    see ``docs/workers.md``); ``budget_refused``: the run's budget
    (``LiveGate(max_requests=..., max_output_tokens=...)``) was spent before the
    request was sent, inside a client worker: nothing was sent for it (recorded
    so the requests admitted beside it are kept; see ``docs/workers.md``).
    """

    http_status = "http_status"
    server_error_event = "server_error_event"
    truncated = "truncated"
    invalid_event = "invalid_event"
    timeout = "timeout"
    connect = "connect"
    worker_died = "worker_died"
    content_encoding = "content_encoding"
    budget_refused = "budget_refused"


ERROR_SEVERITY: dict[ErrorKind, int] = {
    ErrorKind.timeout: 0,
    ErrorKind.connect: 1,
    ErrorKind.http_status: 2,
    ErrorKind.content_encoding: 3,
    ErrorKind.server_error_event: 4,
    ErrorKind.truncated: 5,
    ErrorKind.invalid_event: 6,
    ErrorKind.worker_died: 7,
    ErrorKind.budget_refused: 8,
}
"""Rank of each fault kind, most severe first (0): a measurement's ``error`` is the
most severe one recorded (:func:`most_severe`)."""


def most_severe(errors: Sequence[StreamError]) -> StreamError | None:
    """The most severe of ``errors`` (:data:`ERROR_SEVERITY`; the first of its rank),
    ``None`` when there are none."""
    return min(errors, key=lambda e: ERROR_SEVERITY[e.kind]) if errors else None


def is_unsent(m: StreamMeasurement) -> bool:
    """Whether ``m`` records a request that was never sent (error kind
    ``budget_refused``): no measurement, so no row counts it (``n_requests``,
    speed and parity figures); the results file keeps it, and a resume sends it."""
    return m.error is not None and m.error.kind is ErrorKind.budget_refused


class StreamError(BaseModel):
    """One recorded fault: its ``kind`` and a short ``message`` (never an API key)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ErrorKind
    message: str


class StreamMeasurement(BaseModel):
    """What one streamed chat completion produced and how fast.

    Times are ms from the moment the request was written to its own connection
    (see ``pool_wait_ms`` and ``send_wait_ms``; just before sending where unknown); token counts
    in tokens; ``None`` = unknown (never 0 for unknown). Definitions and
    sources: ``docs/measurement.md``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(default="", description="Concatenated delta.content (choice 0).")
    reasoning_text: str | None = Field(
        default=None, description="Concatenated delta.reasoning_content; None if none streamed."
    )
    completion_tokens: int | None = Field(
        default=None, description="From the last usage block seen (tokens); None without usage."
    )
    prompt_tokens: int | None = Field(default=None, description="From usage (tokens).")
    reasoning_tokens: int | None = Field(
        default=None,
        description="usage.reasoning_tokens (SGLang) or "
        "usage.completion_tokens_details.reasoning_tokens (tokens); None when absent or "
        "impossible (see usage_contradiction).",
    )
    tokens_estimated: bool = Field(
        default=True,
        description="True when no trusted usage gave completion_tokens (none sent, or a "
        "usage block that contradicts itself).",
    )
    usage_contradiction: str | None = Field(
        default=None,
        description="Why counts of the last usage block were refused: prompt + completion "
        "!= total, or reasoning > completion; None for a consistent block.",
    )
    estimated_completion_tokens: int | None = Field(
        default=None,
        description="When tokens_estimated: token ids streamed if exposed, else token-bearing "
        "chunks (a lower bound under multi-token chunks). Used for tpot/throughput then.",
    )
    tokens_estimated_by: str | None = Field(
        default=None,
        description="How estimated_completion_tokens was counted: 'token_ids', 'chunks', or "
        "the tokenizer's name (e.g. 'endpoint:<url>') after a recount; None when not estimated.",
    )
    ttft_ms: float | None = Field(default=None, description="Time to first token (ms).")
    e2e_ms: float | None = Field(default=None, description="Time to last token (ms).")
    tpot_ms: float | None = Field(
        default=None,
        description="(decode_end - ttft) / (tpot_tokens - 1) (ms/token); docs/measurement.md.",
    )
    finish_ms: float | None = Field(
        default=None,
        description="Arrival of the chunk carrying choice 0's first finish_reason (ms); None "
        "when none came.",
    )
    tpot_tokens: int | None = Field(
        default=None,
        description="The tokens tpot_ms divides the decode window over: usage's count, or the "
        "count streamed by the last token-bearing chunk when the last tokens were never "
        "streamed and no later chunk timed them (tokens).",
    )
    itl_ms: list[float] = Field(
        default_factory=list, description="Gaps between token-bearing chunks (ms)."
    )
    tokens_per_chunk: list[int] | None = Field(
        default=None, description="Tokens in each token-bearing chunk, from continuous usage."
    )
    itl_per_token_ms: list[float] | None = Field(
        default=None,
        description="Each chunk gap divided evenly over the chunk's tokens (ms/token); "
        "needs tokens_per_chunk.",
    )
    chunk_arrival_ms: list[float] = Field(
        default_factory=list, description="Arrival of each token-bearing chunk (ms from start)."
    )
    output_toks_per_s: float | None = Field(
        default=None, description="tokens / (e2e / 1000) (tokens/s)."
    )
    finish_reason: str | None = None
    http_status: int | None = Field(
        default=None, description="The status of a non-2xx response; None for 2xx or none."
    )
    status_code: int | None = Field(default=None, description="The response status, any value.")
    error: StreamError | None = Field(default=None, description="The most severe fault.")
    errors: list[StreamError] = Field(default_factory=list, description="Every fault, in order.")
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    accepted_token_ratio: float | None = Field(
        default=None, description="accepted draft tokens / drafted tokens (ratio)."
    )
    acceptance_length: float | None = Field(
        default=None, description="1 + accepted / verify steps (tokens per step)."
    )
    acceptance: AcceptanceRecord | None = None
    accepted_prediction_tokens: int | None = Field(
        default=None, description="OpenAI Predicted Outputs count; not speculative acceptance."
    )
    rejected_prediction_tokens: int | None = Field(
        default=None, description="OpenAI Predicted Outputs count; not speculative acceptance."
    )
    usage: dict[str, Any] | None = Field(default=None, description="The last raw usage block.")
    token_ids: list[int] | None = Field(
        default=None, description="Output token ids, where the engine streams them."
    )
    start_perf_ns: int | None = Field(
        default=None,
        description="time.perf_counter_ns() when the request was written to its connection "
        "(else got it): the zero of every *_ms time here, to align them with other "
        "perf_counter records (ns).",
    )
    events: int = Field(default=0, description="Data events received (incl. [DONE]).")
    done: bool = Field(default=False, description="Whether data: [DONE] was received.")
    dialect: Dialect = Dialect.auto
    speculative: Speculative = Speculative.off
    route_label: str | None = None
    acceptance_by_position: list[float] | None = Field(
        default=None,
        description="Per draft position k = 1, 2, ...: the fraction of verify steps whose "
        "k-th draft token was accepted (ratio); None where the engine did not report it.",
    )
    spec_tokens: int | None = Field(
        default=None,
        description="Speculative depth the engine reported (draft tokens/step): per request "
        "(vLLM num_spec_tokens), else the route's served_spec_tokens (its config endpoint).",
    )
    acceptance_source: str | None = Field(
        default=None,
        description="Where acceptance was read, e.g. 'sglext.spec_tokens_details', "
        "'choices[].meta_info', 'metrics.speculative_decoding'.",
    )
    sse_ignored_lines: int = Field(
        default=0,
        description="Non-empty SSE lines not read as the answer: lines the event-stream rules "
        "ignore (unknown or padded field names such as ' data :'), the lines of events of "
        "another type than 'message'/'error', and non-comment lines after [DONE]: >0 marks "
        "a stream whose text may be incomplete.",
    )
    content_encoding: str | None = Field(
        default=None,
        description="The response's content-encoding when not identity (e.g. 'gzip'): the "
        "server compressed although identity was asked; times are those of the decoded "
        "events, so any compressor buffering is inside them.",
    )
    unexpected_content_type: str | None = Field(
        default=None,
        description="The response's content-type when it was not text/event-stream (e.g. "
        "'application/json'): the body was read as an event stream anyway and measured "
        "when it held SSE data events; None for text/event-stream or no header.",
    )
    choices_seen: int = Field(
        default=1, description="Distinct choice indexes streamed (n > 1 gives several)."
    )
    choice_tokens: int | None = Field(
        default=None,
        description="With several choices: choice 0's own output tokens (token ids if "
        "streamed, else its token-bearing chunks, a lower bound); TPOT and throughput "
        "use it, since usage counts every choice.",
    )
    choice_tokens_estimated: bool = Field(
        default=False, description="True when choice_tokens counts chunks, not tokens."
    )
    server_ttft_ms: float | None = Field(
        default=None, description="The engine's own time to first token (ms; vLLM metrics)."
    )
    server_queue_ms: float | None = Field(
        default=None, description="The engine's own queueing time (ms; vLLM metrics)."
    )
    server_generation_ms: float | None = Field(
        default=None, description="The engine's own generation time (ms; vLLM metrics)."
    )
    server_mean_itl_ms: float | None = Field(
        default=None, description="The engine's own mean inter-token latency (ms; vLLM)."
    )
    server_toks_per_s: float | None = Field(
        default=None,
        description="The engine's own output rate (tokens/s; vLLM metrics.tokens_per_second, "
        "llama.cpp timings.predicted_per_second).",
    )
    server_rate_span: ServerRateSpan | None = Field(
        default=None,
        description="The span the engine divides server_toks_per_s by, as its dialect "
        "states it (generation: the generation time alone, llama.cpp; ttft_and_generation: "
        "TTFT + generation time, vLLM 0.32); None when no rate was read or the dialect "
        "states no span (the count check is then skipped).",
    )
    pool_wait_ms: float | None = Field(
        default=None,
        description="Wait for a pooled connection before the request got its own (ms); the "
        "times above start after it. None when the transport does not report hand-over.",
    )
    stale_connection_retries: int = Field(
        default=0,
        ge=0,
        description="Times the request was re-sent because a pooled keep-alive connection "
        "turned out closed by the server before any response byte (at most 1); the times "
        "above are those of the attempt that got a response.",
    )
    client_lag_ms: float | None = Field(
        default=None,
        description="Largest lag of the client's own event loop during this request (ms), "
        "from a running SelfCheck; None without one.",
    )
    # client clock health (stall, CPU share, wait for a core)
    client_stall_ms: float | None = Field(
        default=None,
        ge=0,
        description="Longest stretch during this request in which the client's event loop "
        "did not run at all (ms; a healthy loop: about the SelfCheck period), from a "
        "running SelfCheck; None without one.",
    )
    client_cpu_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="CPU time of the client's event-loop thread per wall second during this "
        "request (0..1); None without a running SelfCheck.",
    )
    client_core_wait_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of this request's wall time the client's event-loop thread was "
        "runnable but waiting for a CPU core (0..1; Linux /proc/thread-self/schedstat); "
        "None where the OS does not report it or without a running SelfCheck.",
    )
    client_cores: int | None = Field(
        default=None,
        ge=1,
        description="CPU cores the client process may run on at this request's end "
        "(affinity mask); None without a running SelfCheck.",
    )
    client_load_1m: float | None = Field(
        default=None,
        ge=0,
        description="The client host's 1-minute load average at this request's end "
        "(runnable tasks); None without a running SelfCheck or where the OS has none.",
    )
    # the client's wait to write the request, kept out of TTFT
    send_wait_ms: float | None = Field(
        default=None,
        ge=0,
        description="Wait from the connection hand-over until the request's body was written "
        "(ms): the client's own event loop getting to the write (the asyncio transport on "
        "Python < 3.12 writes it in a task of its own). The times above start after it. "
        "None when the transport does not report the write.",
    )


_DEFAULTS: dict[str, Any] = {
    name: None if field.default_factory is not None else field.default
    for name, field in StreamMeasurement.model_fields.items()
}
"""Every field in the model's order (what the serializer keeps), with its default;
``None`` stands for a default factory's value until one is made."""
_FACTORY_FIELDS = tuple(
    (name, field.default_factory)
    for name, field in StreamMeasurement.model_fields.items()
    if field.default_factory is not None
)
_object_setattr = object.__setattr__


def measurement_from_fields(fields: dict[str, Any]) -> StreamMeasurement:
    """A :class:`StreamMeasurement` of ``fields`` (field name -> value, each already
    of its field's type; the others get their defaults), built without validation.

    For the measuring hot path only, where every value was typed by the code that
    made it (``StreamAccumulator.measurement``): validating 63 fields costs about
    8 µs a request, and pydantic's own ``model_construct`` more. What it sets is what
    ``model_construct`` sets (the values with defaults filled in, the given names as
    ``model_fields_set``, no extra, no private state); tests check, for every shared
    stream case, that validating the result gives an equal object with the same types.
    Raises nothing (wrong types are not caught: callers own them).
    """
    values = dict(_DEFAULTS)  # the model's field order, kept by update()
    values.update(fields)
    for name, factory in _FACTORY_FIELDS:
        if name not in fields:
            values[name] = factory()  # type: ignore[call-arg]
    m = StreamMeasurement.__new__(StreamMeasurement)
    _object_setattr(m, "__dict__", values)
    _object_setattr(m, "__pydantic_fields_set__", set(fields))
    _object_setattr(m, "__pydantic_extra__", None)
    _object_setattr(m, "__pydantic_private__", None)
    return m
