"""``measure_streamed``: time one streamed chat completion and read its acceptance.

Layers, kept apart: bytes (httpx ``aiter_bytes``, each read stamped with
``time.perf_counter_ns()`` before any parsing) -> events (:class:`SSEDecoder`)
-> timed deltas (:class:`_Accumulator`) -> :class:`StreamMeasurement`.

Timing (all in ms from ``start``: the moment the request's body is written to
its own connection, else the moment it is handed that connection, or just before
it is sent where the transport says neither; a wait for a pooled connection is
kept apart in ``pool_wait_ms``, the client's wait to write in ``send_wait_ms``):

* TTFT: arrival of the first chunk carrying a token (non-empty ``content``,
  ``reasoning_content``/``reasoning`` or ``tool_calls``); role-only and empty
  frames are not tokens.
* E2E: arrival of the last token-bearing chunk; a trailing usage chunk does
  not extend it.
* TPOT = (decode end - TTFT) / (completion_tokens - 1), ``None`` below 2 tokens.
  The decode end is the arrival of the answer's last chunk: the last token-bearing
  chunk, or the chunk carrying choice 0's ``finish_reason`` when it came later (the
  final token, EOS or a stop id, is counted in ``completion_tokens`` but streamed
  with no text: its chunk still marks when it was decoded; vLLM ``bench serve``
  ends its latency at the last chunk too), unless every counted token is known
  streamed by the last token-bearing chunk (per-chunk usage, else one token a
  chunk). Where the finish came with no later chunk and per-chunk usage shows
  tokens never streamed, the tokens are the ones streamed by the last
  token-bearing chunk (``tpot_tokens``).
  With several choices (``n > 1``) usage counts all of them while the times
  follow choice 0, so choice 0's own count is used (:attr:`StreamMeasurement.choice_tokens`).
* ITL: gaps between consecutive token-bearing chunks.
* output_toks_per_s = completion_tokens / (E2E / 1000).

Wire rules (``docs/measurement.md``): ``Accept-Encoding: identity`` is asked;
a compressed answer anyway is decoded by httpx and each event is stamped with the
read whose decoded bytes completed it (a coding without a decoder is the
``content_encoding`` error, never text). Events of another SSE type than
``message``/``error`` and every line after ``[DONE]`` are not read, only counted
in ``sse_ignored_lines``.

Faults never raise: they are recorded as a :class:`StreamError` with everything
received so far (an event over :class:`StreamLimits` too: it is dropped and
recorded as ``invalid_event``). Caller mistakes raise (see :func:`measure_streamed`).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from enum import StrEnum
from typing import Any, NamedTuple

import anyio
import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from deepseekbench._dialects import SERVER_TIME_FIELDS, dialect_for
from deepseekbench._errors import LiveGateError
from deepseekbench._measure._figures import counted_output_tokens, output_toks_per_s, tpot_ms
from deepseekbench._measure._selfcheck import current_selfcheck, host_load
from deepseekbench._measure._sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    SSEDecoder,
    SSEEvent,
)
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._net._transport import POOL_CLOCK, PoolClock, fast_reads
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect, Speculative
from deepseekbench._types._request import ChatRequest, coerce_request
from deepseekbench._types._secrets import (
    contains_secret,
    redact,
    redact_json,
    safe_server_text,
    secret_values,
)

__all__ = [
    "ABNORMAL_FINISH_REASONS",
    "ErrorKind",
    "MeasureStreamed",
    "StreamError",
    "StreamLimits",
    "StreamMeasurement",
    "Timeouts",
    "measure_streamed",
]

_ERROR_BODY_LIMIT = 64 * 1024
_DRAIN_LIMIT = 64 * 1024  # bytes read after [DONE] before the connection is given up
_DRAIN_S = 1.0  # seconds waited after [DONE] for the body's end
_MESSAGE_LIMIT = 500
# Messages are kept up to this many characters while measuring, redacted, and only
# then cut to _MESSAGE_LIMIT, so no key can straddle a cut and survive in part.
_RAW_MESSAGE_LIMIT = 64 * 1024


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


# The measurement's ``error`` is the most severe one recorded (first of its rank).
_SEVERITY: dict[ErrorKind, int] = {
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


class StreamError(BaseModel):
    """One recorded fault: its ``kind`` and a short ``message`` (never an API key)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ErrorKind
    message: str


class Timeouts(BaseModel):
    """Deadlines for one measurement, in seconds (``None`` = no deadline).

    ``connect_s``: TCP/TLS connect (httpx connect timeout); ``first_token_s``:
    from start to the first token-bearing chunk (an ``anyio`` cancel scope,
    lifted once a token arrives); ``total_s``: the whole measurement
    (``anyio.move_on_after``). A passed deadline is recorded as
    ``ErrorKind.timeout`` with the partial data kept.

    Raises:
        pydantic.ValidationError: a deadline that is not > 0 s, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect_s: float | None = Field(default=10.0, gt=0)
    first_token_s: float | None = Field(default=600.0, gt=0)
    total_s: float | None = Field(default=3600.0, gt=0)


class StreamLimits(BaseModel):
    """Size bounds for one streamed response, in bytes.

    ``max_line_bytes`` (default 8 MiB): the longest SSE line kept;
    ``max_event_bytes`` (default 16 MiB): the most data one SSE event may hold.
    An event over either bound is dropped and recorded as ``invalid_event``;
    reading goes on, and memory stays bounded whatever the server sends.

    Raises:
        pydantic.ValidationError: a bound below 1 byte, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_line_bytes: int = Field(default=DEFAULT_MAX_LINE_BYTES, ge=1)
    max_event_bytes: int = Field(default=DEFAULT_MAX_EVENT_BYTES, ge=1)


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
        default=None, description="The engine's own output rate (tokens/s; vLLM metrics)."
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
    # issue 22: client clock health (stall, CPU share, wait for a core)
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
    # issue 22 (item 6): the client's wait to write the request, kept out of TTFT
    send_wait_ms: float | None = Field(
        default=None,
        ge=0,
        description="Wait from the connection hand-over until the request's body was written "
        "(ms): the client's own event loop getting to the write (the asyncio transport on "
        "Python < 3.12 writes it in a task of its own). The times above start after it. "
        "None when the transport does not report the write.",
    )


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value >= 0 else None


def _ms_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and v >= 0 else None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads_lenient(data: str) -> Any:
    """Parse JSON that orjson refuses although the JSON grammar allows it.

    The case seen: lone UTF-16 surrogate escapes (``"\\ud83d"``), sent by
    streamers that slice text by UTF-16 code units; the stdlib parser keeps them
    as lone surrogates, which :func:`_join_surrogates` pairs up later. NaN and
    Infinity stay refused (not JSON). Raises ``ValueError`` on invalid JSON.
    """
    return json.loads(data, parse_constant=_no_constant)


def _join_surrogates(text: str) -> str:
    """Pair surrogate halves that arrived in separate chunks; a lone one becomes U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _error_in(chunk: dict[str, Any]) -> Any:
    """An error object anywhere a server puts one in a chunk, else ``None``.

    Places: top-level ``error``, ``object: "error"`` (older vLLM ErrorResponse),
    a choice's ``error`` and a delta's ``error``. Null or empty values are no error.
    """
    err = chunk.get("error")
    if err:
        return err
    if chunk.get("object") == "error":
        return chunk
    choices = chunk.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, dict):
                err = choice.get("error")
                delta = choice.get("delta")
                if not err and isinstance(delta, dict):
                    err = delta.get("error")
                if err:
                    return err
    return None


ABNORMAL_FINISH_REASONS: frozenset[str] = frozenset(
    {"abort", "aborted", "error", "cancelled", "canceled"}
)
"""Finish reasons that say the engine interrupted the generation: a stream ending
with one is a ``server_error_event`` even without an error object (vLLM
``FinishReason.ABORT``/``ERROR`` stream as ``"abort"``/``"error"`` after HTTP 200,
vllm-project/vllm issue #57082; SGLang ``FINISH_ABORT`` as ``"abort"``). Compared
lower-cased; ``stop``, ``length``, ``tool_calls``, ``content_filter`` and any other
reason are completions."""

_THINKING_PARTS = frozenset({"thinking", "reasoning"})


def _part_text(value: Any) -> str:
    """The text of a part's payload: a string, or a list of ``{type: text, text}`` parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            p["text"]
            for p in value
            if isinstance(p, dict)
            and p.get("type", "text") == "text"
            and isinstance(p.get("text"), str)
        )
    return ""


def _content_parts(parts: list[Any]) -> tuple[str, str]:
    """``(answer text, reasoning text)`` from ``delta.content`` given as typed parts.

    ``{"type": "text", "text": ...}`` parts are the answer; ``{"type":
    "thinking", "thinking": [{"type": "text", "text": ...}]}`` (Mistral
    Magistral; BerriAI/litellm issue #16272) and ``"reasoning"`` parts are the
    reasoning, their payload a string or nested text parts. Other part types
    (images, refusals, ...) carry no token text here.
    """
    text: list[str] = []
    thoughts: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            text.append(_part_text(part.get("text")))
        elif kind in _THINKING_PARTS:
            payload = part.get(kind)
            thoughts.append(_part_text(payload if payload is not None else part.get("text")))
    return "".join(text), "".join(thoughts)


class _UsageCounts(NamedTuple):
    """The counts of a usage block that can be trusted (tokens; ``None`` = unknown)."""

    completion_tokens: int | None
    prompt_tokens: int | None
    reasoning_tokens: int | None
    contradiction: str | None


def _usage_counts(usage: Mapping[str, Any] | None) -> _UsageCounts:
    """Read a usage block, refusing counts it contradicts itself about.

    ``reasoning_tokens`` is read where engines put it: the top level of
    ``usage`` (SGLang ``UsageInfo.reasoning_tokens``) or
    ``completion_tokens_details.reasoning_tokens`` (OpenAI, vLLM). Two checks
    (``total_tokens = prompt_tokens + completion_tokens`` is the OpenAI usage
    definition; reasoning tokens are part of the completion tokens):

    * prompt + completion != total: the completion count is not the output
      count (a gateway that leaves the thoughts out of it; mozilla-ai/any-llm
      issue #1290, router-for-me/CLIProxyAPI issue #5733): completion and
      reasoning counts are unknown (the output is then estimated, and said so);
    * reasoning > completion with a total that confirms the completion count:
      the reasoning count is impossible (SGLang counting a verified block past
      EOS, sgl-project/sglang issue #39826) and unknown, the completion count
      stands; with no total to settle it, both are unknown.

    ``contradiction`` says what was refused, ``None`` for a consistent block.
    """
    if not usage:
        return _UsageCounts(None, None, None, None)
    completion = _int_or_none(usage.get("completion_tokens"))
    prompt = _int_or_none(usage.get("prompt_tokens"))
    total = _int_or_none(usage.get("total_tokens"))
    details = usage.get("completion_tokens_details")
    reasoning = _int_or_none(usage.get("reasoning_tokens"))
    if reasoning is None and isinstance(details, Mapping):
        reasoning = _int_or_none(details.get("reasoning_tokens"))
    if completion is None:
        return _UsageCounts(None, prompt, reasoning, None)
    confirmed = prompt is not None and total is not None
    if prompt is not None and total is not None and prompt + completion != total:
        note = f"prompt_tokens {prompt} + completion_tokens {completion} != total_tokens {total}"
        if reasoning is not None and reasoning > completion:
            note += f"; reasoning_tokens {reasoning} > completion_tokens"
        return _UsageCounts(None, prompt, None, note + ": completion count not trusted")
    if reasoning is not None and reasoning > completion:
        note = f"reasoning_tokens {reasoning} > completion_tokens {completion}"
        if confirmed:
            return _UsageCounts(completion, prompt, None, note + ": reasoning count not trusted")
        return _UsageCounts(None, prompt, None, note + " and no total to settle it: not trusted")
    return _UsageCounts(completion, prompt, reasoning, None)


_CHUNK_EVENTS = frozenset({"message", "error"})
"""SSE event types read as the answer: ``message`` (the default) and ``error``."""


def _is_done(data: str) -> bool:
    """The ``[DONE]`` sentinel, also with whitespace around it (spaces, tabs, CR)."""
    return data == "[DONE]" or data.strip() == "[DONE]"


class _Accumulator:
    """Folds timed events into running totals. One per measurement."""

    def __init__(self, dialect: Dialect, start_ns: int, limits: StreamLimits | None = None) -> None:
        self.dialect = dialect
        self.adapter = dialect_for(dialect)
        self.start_ns = start_ns
        self.limits = limits or StreamLimits()
        self.text: list[str] = []
        self.reasoning: list[str] | None = None
        self.token_times: list[int] = []
        self.usage_at_token: list[int | None] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.finish_ns: int | None = None  # arrival of choice 0's first finish_reason
        self.acceptance: AcceptanceRecord | None = None
        self.server_timing: dict[str, Any] = {}
        self.token_ids: list[int] | None = None
        self.errors: list[StreamError] = []
        self.events = 0
        self.done = False
        self.status_code: int | None = None
        self.http_status: int | None = None
        self.ignored_lines = 0
        self.choice_indexes: set[int] = set()
        self.surrogates = False  # a chunk needed the lenient parser: pair halves at the end
        self.pool_wait_ns: int | None = None
        self.send_wait_ns: int | None = None  # issue 22 (item 6)
        self.stale_retries = 0
        self.content_encoding: str | None = None
        self.unexpected_content_type: str | None = None
        self.abnormal: set[str] = set()  # abnormal finish reasons already recorded

    def fail(self, kind: ErrorKind, message: str) -> None:
        # cut to _MESSAGE_LIMIT only after redaction (see redact_measurement)
        self.errors.append(StreamError(kind=kind, message=message[:_RAW_MESSAGE_LIMIT]))

    # -- framing ------------------------------------------------------------------
    def decoder(self) -> SSEDecoder:
        """A decoder for this response, bounded by ``limits``, reporting back here."""
        return SSEDecoder(
            max_line_bytes=self.limits.max_line_bytes,
            max_event_bytes=self.limits.max_event_bytes,
            on_ignored=self.on_ignored_line,
            on_oversized=self.on_oversized,
            is_last=_is_done,
        )

    def on_ignored_line(self, name: bytes, value: bytes) -> None:
        """Count a line the SSE rules ignore; an ``error:`` field is a server error."""
        self.ignored_lines += 1
        if name.strip().lower() == b"error":
            text = value.decode("utf-8", errors="replace")
            self.fail(ErrorKind.server_error_event, _error_text(text) or "error field")

    def on_oversized(self, message: str) -> None:
        self.fail(ErrorKind.invalid_event, message)

    def check_framing(self) -> None:
        """A 200 body under another content-type than ``text/event-stream``.

        Read as an event stream anyway: holding at least one SSE data event it
        is measured, and ``unexpected_content_type`` says the type was wrong
        (any incompleteness is judged as for any stream); holding none (a plain
        JSON completion, an HTML page) it is ``invalid_event``.
        """
        ctype = self.unexpected_content_type
        if ctype is None or self.events > 0:
            return
        if any(e.kind in (ErrorKind.timeout, ErrorKind.content_encoding) for e in self.errors):
            return  # the body was not read to its end: that fault says why
        self.fail(
            ErrorKind.invalid_event,
            f"content-type is {ctype!r}, not text/event-stream, and the body holds no "
            "SSE data event (not an event stream)",
        )

    def end_of_stream(self, decoder: SSEDecoder) -> None:
        """The body ended before ``[DONE]`` was dispatched: complete or truncated?

        A ``[DONE]`` whose block lacked only its blank line ends the stream like a
        dispatched one; any other unterminated event, or no finish reason, is
        ``truncated``.
        """
        pending = decoder.pending
        tail = decoder.flush(time.perf_counter_ns())
        if tail is not None and _is_done(tail.data):
            self.on_event(tail)
        elif self.unexpected_content_type is not None and self.events == 0:
            return  # not an event stream at all: one invalid_event (check_framing), no more
        elif pending:
            self.fail(ErrorKind.truncated, "stream ended inside an event")
        elif self.finish_reason is None:
            self.fail(ErrorKind.truncated, "stream ended without [DONE] or a finish_reason")

    # -- events -------------------------------------------------------------------
    def on_event(self, event: SSEEvent) -> bool:
        """Fold one event; return True when it carried a token."""
        data = event.data
        if _is_done(data):
            self.events += 1
            self.done = True
            self._check_delivered()
            return False
        if not data.strip():
            return False  # an empty data frame is a keep-alive, not an event to parse
        if event.event not in _CHUNK_EVENTS:
            # another event type (WHATWG SSE: dispatched under its own name, never to a
            # 'message' listener): not a chat chunk; its data and event lines are counted
            self.ignored_lines += data.count("\n") + 2
            return False
        self.events += 1
        if event.event == "error":
            self.fail(ErrorKind.server_error_event, _error_text(data))
            return False
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            try:
                chunk = _loads_lenient(data)
            except ValueError:
                excerpt = data[:_RAW_MESSAGE_LIMIT]
                self.fail(ErrorKind.invalid_event, f"not JSON ({exc}): {excerpt!r}")
                return False
            self.surrogates = True
        if not isinstance(chunk, dict):
            self.fail(ErrorKind.invalid_event, f"not a JSON object: {data[:_RAW_MESSAGE_LIMIT]!r}")
            return False
        return self.on_chunk(chunk, event.arrival_ns)

    def _check_delivered(self) -> None:
        """``[DONE]`` after no token and no finish reason is no answer, not a success."""
        if self.token_times or self.finish_reason is not None:
            return
        if any(e.kind is ErrorKind.server_error_event for e in self.errors):
            return
        self.fail(ErrorKind.truncated, "[DONE] arrived with no token and no finish_reason")

    def on_chunk(self, chunk: dict[str, Any], arrival_ns: int) -> bool:
        err = _error_in(chunk)
        if err is not None:
            self.fail(ErrorKind.server_error_event, _error_text(err))
        choices = chunk.get("choices")
        if choices is None:
            choices = []  # null where a list is usual: no choices
        if not isinstance(choices, list):
            self.fail(ErrorKind.invalid_event, "'choices' is not a list")
            choices = []
        has_token = False
        # acceptance adapters run only where a chunk can carry acceptance figures
        spec_keys, choice_keys = self.adapter.spec_keys, self.adapter.choice_spec_keys
        spec = any(k in chunk for k in spec_keys)
        for choice in choices:
            if choice is None:
                continue
            if not isinstance(choice, dict):
                self.fail(ErrorKind.invalid_event, "a choice is not an object")
                continue
            spec = spec or any(k in choice for k in choice_keys)
            index = choice.get("index", 0)
            if isinstance(index, int):
                self.choice_indexes.add(index)
            if index not in (0, None):
                continue
            has_token = self._on_choice(choice) or has_token
            if self.finish_reason is not None and self.finish_ns is None:
                self.finish_ns = arrival_ns
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        if spec:
            self._on_spec(chunk)
        if has_token:
            self.token_times.append(arrival_ns)
            ct = _int_or_none(usage.get("completion_tokens")) if isinstance(usage, dict) else None
            self.usage_at_token.append(ct)
        return has_token

    def _on_spec(self, chunk: dict[str, Any]) -> None:
        record = self.adapter.read_acceptance(chunk)
        if record is not None:
            self.acceptance = record
        times = self.adapter.server_times(chunk)
        if times is not None:
            self.server_timing = dict(times)

    def _on_choice(self, choice: dict[str, Any]) -> bool:
        has_token = False
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        if not isinstance(delta, dict):
            self.fail(ErrorKind.invalid_event, "'delta' is not an object")
            delta = {}
        content = delta.get("content")
        if isinstance(content, list):
            text, thoughts = _content_parts(content)
            content = text
            if thoughts:
                self._add_reasoning(thoughts)
                has_token = True
        if isinstance(content, str) and content:
            self.text.append(content)
            has_token = True
        reasoning = delta.get("reasoning_content")
        if reasoning is None:
            reasoning = delta.get("reasoning")  # newer vLLM name
        if isinstance(reasoning, str) and reasoning:
            self._add_reasoning(reasoning)
            has_token = True
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list) and tool_calls:
            has_token = True
        ids = choice.get("token_ids")
        if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
            if self.token_ids is None:
                self.token_ids = []
            self.token_ids.extend(ids)
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self.finish_reason = finish
            if finish.strip().lower() in ABNORMAL_FINISH_REASONS and finish not in self.abnormal:
                self.abnormal.add(finish)
                self.fail(
                    ErrorKind.server_error_event,
                    f"finish_reason {finish!r}: the engine ended the generation abnormally "
                    "(no error object sent); the answer is cut off",
                )
        return has_token

    def _add_reasoning(self, text: str) -> None:
        if self.reasoning is None:
            self.reasoning = []
        self.reasoning.append(text)

    # -- results ----------------------------------------------------------------
    def _choice_tokens(self) -> tuple[int | None, bool]:
        """Choice 0's own output tokens when several choices streamed, and whether estimated."""
        if len(self.choice_indexes) <= 1:
            return None, False
        if self.token_ids:
            return len(self.token_ids), False
        return len(self.token_times), True

    def _texts(self) -> tuple[str, str | None]:
        text = "".join(self.text)
        reasoning = "".join(self.reasoning) if self.reasoning is not None else None
        if self.surrogates:
            text = _join_surrogates(text)
            reasoning = _join_surrogates(reasoning) if reasoning is not None else None
        return text, reasoning

    def _server_times(self) -> dict[str, Any]:  # float | None each (Any: ** into the model)
        m = self.server_timing
        return {name: _ms_or_none(m.get(name)) for name in SERVER_TIME_FIELDS}

    def measurement(self, route: EngineRoute) -> StreamMeasurement:
        usage = self.usage
        counts = _usage_counts(usage)
        completion = counts.completion_tokens
        prompt = counts.prompt_tokens
        details = usage.get("completion_tokens_details") if usage else None
        details = details if isinstance(details, dict) else {}
        estimated: int | None = None
        if completion is None:
            estimated = len(self.token_ids) if self.token_ids else len(self.token_times)
        choice_tokens, choice_estimated = self._choice_tokens()
        n_tokens = completion if completion is not None else estimated
        if choice_tokens is not None:
            n_tokens = choice_tokens  # usage counts every choice; the times are choice 0's
        ms = [(t - self.start_ns) / 1e6 for t in self.token_times]
        ttft = ms[0] if ms else None
        e2e = ms[-1] if ms else None
        finish = (self.finish_ns - self.start_ns) / 1e6 if self.finish_ns is not None else None
        decode_end, tpot_tokens = self._decode_window(e2e, finish, n_tokens, choice_tokens)
        tpot = tpot_ms(ttft, decode_end, tpot_tokens)
        tps = output_toks_per_s(e2e, n_tokens)
        itl = [b - a for a, b in itertools.pairwise(ms)]
        per_chunk = self._tokens_per_chunk() if choice_tokens is None else None
        per_token: list[float] | None = None
        if per_chunk is not None:
            per_token = []
            for gap, k in zip(itl, per_chunk[1:], strict=True):
                per_token.extend([gap / k] * k)
        acc = self.acceptance
        error = min(self.errors, key=lambda e: _SEVERITY[e.kind]) if self.errors else None
        text, reasoning = self._texts()
        by_pos = acc.acceptance_by_position if acc else None
        return StreamMeasurement(
            text=text,
            reasoning_text=reasoning,
            completion_tokens=completion,
            prompt_tokens=prompt,
            reasoning_tokens=counts.reasoning_tokens,
            usage_contradiction=counts.contradiction,
            tokens_estimated=completion is None,
            estimated_completion_tokens=estimated,
            tokens_estimated_by=(
                None if completion is not None else ("token_ids" if self.token_ids else "chunks")
            ),
            ttft_ms=ttft,
            e2e_ms=e2e,
            tpot_ms=tpot,
            finish_ms=finish,
            tpot_tokens=tpot_tokens,
            itl_ms=itl,
            tokens_per_chunk=per_chunk,
            itl_per_token_ms=per_token,
            chunk_arrival_ms=ms,
            output_toks_per_s=tps,
            finish_reason=self.finish_reason,
            http_status=self.http_status,
            status_code=self.status_code,
            error=error,
            errors=list(self.errors),
            draft_tokens=acc.draft_tokens if acc else None,
            accepted_tokens=acc.accepted_tokens if acc else None,
            accepted_token_ratio=acc.accepted_token_ratio if acc else None,
            acceptance_length=acc.acceptance_length if acc else None,
            acceptance=acc,
            accepted_prediction_tokens=_int_or_none(details.get("accepted_prediction_tokens")),
            rejected_prediction_tokens=_int_or_none(details.get("rejected_prediction_tokens")),
            usage=usage,
            token_ids=self.token_ids,
            start_perf_ns=self.start_ns,
            events=self.events,
            done=self.done,
            dialect=route.dialect,
            speculative=route.speculative,
            route_label=route.label,
            acceptance_by_position=list(by_pos) if by_pos is not None else None,
            spec_tokens=(acc.spec_tokens if acc else None) or route.served_spec_tokens,
            acceptance_source=acc.source if acc else None,
            sse_ignored_lines=self.ignored_lines,
            content_encoding=self.content_encoding,
            unexpected_content_type=self.unexpected_content_type,
            choices_seen=max(1, len(self.choice_indexes)),
            choice_tokens=choice_tokens,
            choice_tokens_estimated=choice_estimated,
            **self._server_times(),
            pool_wait_ms=self.pool_wait_ns / 1e6 if self.pool_wait_ns is not None else None,
            send_wait_ms=self.send_wait_ns / 1e6 if self.send_wait_ns is not None else None,
            stale_connection_retries=self.stale_retries,
        )

    def _decode_window(
        self,
        e2e: float | None,
        finish: float | None,
        n_tokens: int | None,
        choice_tokens: int | None,
    ) -> tuple[float | None, int | None]:
        """TPOT's window end (ms) and the tokens decoded by then (module docstring).

        The tokens streamed by the last token-bearing chunk: its cumulative usage
        count (continuous usage), else at least one a chunk. When they are all the
        counted tokens, that chunk ends the window. Else the counted tokens past
        them (an unstreamed final EOS or stop id) were decoded by the finish chunk:
        it ends the window when it came later; when it did not, the untimed tokens
        leave the count (known only from per-chunk usage).
        """
        if e2e is None or n_tokens is None or choice_tokens is not None:
            return e2e, n_tokens
        counted = self.usage_at_token[-1] if self.usage_at_token else None
        streamed = counted if counted is not None else len(self.token_times)
        if streamed >= n_tokens:
            return e2e, n_tokens
        if finish is not None and finish > e2e:
            return finish, n_tokens
        return e2e, (counted if counted is not None else n_tokens)

    def _tokens_per_chunk(self) -> list[int] | None:
        """Tokens per token-bearing chunk from cumulative usage on each, else None."""
        counts = self.usage_at_token
        if not counts or any(c is None for c in counts):
            return None
        out: list[int] = []
        prev = 0
        for c in counts:
            assert c is not None
            k = c - prev
            if k <= 0:
                return None  # a token-bearing chunk that did not raise the count: unusable
            out.append(k)
            prev = c
        return out


def _error_text(err: Any) -> str:
    """A message from an OpenAI-style error object or raw text (cut only after redaction)."""
    if isinstance(err, str):
        raw: str = err
        try:
            err = json.loads(raw)
        except ValueError:
            return raw
    if isinstance(err, Mapping) and "error" in err:
        err = err["error"]
    if isinstance(err, Mapping):
        parts = [str(err[k]) for k in ("message", "type", "code") if err.get(k) is not None]
        if parts:
            return " | ".join(parts)
        detail = err.get("detail")
        if detail is not None:
            return str(detail)
    return str(err)


def redact_measurement(m: StreamMeasurement, secrets: Iterable[str | None]) -> StreamMeasurement:
    """``m`` with every secret removed from its texts, usage and error messages.

    Each occurrence of a non-blank secret in ``text``, ``reasoning_text``,
    ``finish_reason``, ``content_encoding``, ``usage`` (keys and values, at any
    depth) and every error message becomes ``***``
    (:func:`deepseekbench._types._secrets.redact`, the one redaction). Error
    messages and ``content_encoding`` (a server's header) then have their control
    characters escaped (:func:`~deepseekbench._types._secrets.printable`: no
    terminal escape sequence reaches a report or stderr) and messages are cut to
    500 characters (redaction first, so no part of a key survives a cut). Returns
    ``m`` itself when there is nothing to change.
    """
    keys = secret_values(*secrets)

    def clean(e: StreamError) -> StreamError:
        msg = safe_server_text(e.message, keys)[:_MESSAGE_LIMIT]
        return e if msg == e.message else StreamError(kind=e.kind, message=msg)

    update: dict[str, Any] = {}
    if any(safe_server_text(e.message, keys)[:_MESSAGE_LIMIT] != e.message for e in m.errors):
        update["errors"] = [clean(e) for e in m.errors]
        update["error"] = clean(m.error) if m.error is not None else None
    if m.content_encoding is not None:
        coding = safe_server_text(m.content_encoding, keys)
        if coding != m.content_encoding:
            update["content_encoding"] = coding
    if keys:
        for name in ("text", "reasoning_text", "finish_reason"):
            text = getattr(m, name)
            if text is not None and contains_secret(text, keys):
                update[name] = redact(text, keys)
        if m.usage is not None and contains_secret(orjson.dumps(m.usage).decode(), keys):
            update["usage"] = redact_json(m.usage, keys)
    return m.model_copy(update=update) if update else m


def _check_gated(client: httpx.AsyncClient, gate: LiveGate, url: httpx.URL) -> None:
    """Raise unless every transport of ``client`` (mounts included) passes ``gate``."""
    try:
        gate.check_client(client)
    except LiveGateError as exc:
        raise LiveGateError(
            f"measure_streamed: {exc}", host=url.host, missing=exc.missing
        ) from None


async def measure_streamed(
    request: ChatRequest | Mapping[str, Any],
    *,
    route: EngineRoute,
    gate: LiveGate,
    client: httpx.AsyncClient | None = None,
    timeouts: Timeouts | None = None,
    limits: StreamLimits | None = None,
) -> StreamMeasurement:
    """Stream ``POST {route.base_url}/chat/completions`` once and measure it.

    Args:
        request: a :class:`ChatRequest` or a dict of OpenAI body fields.
        route: where to send it, the dialect and engine-scoped extras.
        gate: the :class:`LiveGate` every request passes; charged with the
            output tokens (usage count, else the estimate) afterwards.
        client: a shared ``httpx.AsyncClient`` made by ``gate.client()``; when
            ``None`` a gated client is made and closed here. Safe to share
            between concurrent calls.
        timeouts: connect / first-token / total deadlines (s).
        limits: SSE line and event size bounds (bytes); default
            :class:`StreamLimits` (8 MiB line, 16 MiB event). An event over them
            is dropped and recorded as ``invalid_event``.

    Returns:
        A :class:`StreamMeasurement`. Times are milliseconds from the moment the
        request was written to its own connection (any wait for a pooled connection is
        ``pool_wait_ms``, the client's wait to write it ``send_wait_ms``; neither is
        part of TTFT): ``ttft_ms``, ``e2e_ms``, ``tpot_ms`` (ms per output
        token after the first) and ``itl_ms`` (one gap per pair of token-bearing
        chunks, ms); ``output_toks_per_s`` is tokens/s; token counts are tokens.
        Definitions and sources: ``docs/measurement.md``. Server faults (HTTP
        errors, error events, truncation, invalid events, timeouts, refused
        connections) are recorded in ``error``/``errors`` with everything
        received so far; they never raise.

    Raises:
        TypeError: ``request`` is neither a :class:`ChatRequest` nor a mapping.
        pydantic.ValidationError: ``request`` is invalid (including an unknown
            key in a dict; see :func:`coerce_request`).
        LiveGateError: the gate refuses the URL (before any connection) or
            ``client`` is not gated by ``gate``.
    """
    req = coerce_request(request)
    timeouts = timeouts or Timeouts()
    url = httpx.URL(route.chat_url)  # parsed once: httpx re-parses a str at every step
    headers = route.request_headers()
    refusal = gate.refusal(url, has_auth_header="authorization" in headers)
    if refusal is not None:
        raise refusal
    if client is not None:
        _check_gated(client, gate, url)
    body = orjson.dumps(route.build_body(req))
    check = current_selfcheck()
    begin = check.sched_now() if check is not None else None  # shared: no read per request
    begin_ns = time.perf_counter_ns()
    if client is None:
        async with gate.client() as own:
            result = await _measure(own, url, headers, body, route, timeouts, limits)
    else:
        result = await _measure(client, url, headers, body, route, timeouts, limits)
    if check is not None and begin is not None:
        end_ns = time.perf_counter_ns()
        cpu, wait = begin.shares_until(check.sched_now(after=begin))
        update = {
            "client_lag_ms": check.max_lag_ms(begin_ns, end_ns),
            "client_stall_ms": check.max_stall_ms(begin_ns, end_ns),
            "client_cpu_share": cpu,
            "client_core_wait_share": wait,
        }
        update["client_cores"], update["client_load_1m"] = host_load()
        result = result.model_copy(update=update)
    # A server may echo the key (request headers in an error body, or in its text or
    # usage): no key may survive into the measurement, whether it came from the route
    # or was injected by the gate.
    result = redact_measurement(result, _secret_values(route.api_key, gate.api_key))
    gate.charge_output_tokens(counted_output_tokens(result))
    return result


MeasureStreamed = measure_streamed
"""Alias of :func:`measure_streamed`."""


async def _measure(
    client: httpx.AsyncClient,
    url: httpx.URL,
    headers: dict[str, str],
    body: bytes,
    route: EngineRoute,
    timeouts: Timeouts,
    limits: StreamLimits | None = None,
) -> StreamMeasurement:
    http_timeout = httpx.Timeout(None, connect=timeouts.connect_s)
    http_request = client.build_request(
        "POST", url, content=body, headers=headers, timeout=http_timeout
    )
    acc = _Accumulator(route.dialect, 0, limits)
    with anyio.move_on_after(math.inf if timeouts.total_s is None else timeouts.total_s) as total:
        first = math.inf if timeouts.first_token_s is None else timeouts.first_token_s
        with anyio.move_on_after(first) as first_token:
            acc.start_ns = time.perf_counter_ns()
            await _exchange(client, http_request, acc, first_token)
        if first_token.cancelled_caught:
            acc.fail(ErrorKind.timeout, f"no token within first_token_s={timeouts.first_token_s}")
    if total.cancelled_caught:
        acc.fail(ErrorKind.timeout, f"stream not finished within total_s={timeouts.total_s}")
    acc.check_framing()
    return acc.measurement(route)


def _secret_values(*keys: SecretStr | None) -> tuple[str, ...]:
    return secret_values(*keys)


_STALE_RETRIES = 1
"""Re-sends after a reused connection closed before any response byte."""


async def _exchange(
    client: httpx.AsyncClient,
    http_request: httpx.Request,
    acc: _Accumulator,
    first_token: anyio.CancelScope,
) -> None:
    direct = _direct_transport(client, http_request.url)
    attempt = 0
    while True:
        clock = PoolClock()
        http_request.extensions[POOL_CLOCK] = clock
        try:
            if direct is not None:
                response = await direct.handle_async_request(http_request)
            else:
                response = await client.send(http_request, stream=True)
        except httpx.TimeoutException as exc:
            _start_at_handover(acc, clock)
            acc.fail(ErrorKind.timeout, f"connect: {type(exc).__name__}: {exc}")
            return
        except httpx.RemoteProtocolError as exc:
            _start_at_handover(acc, clock)
            if attempt < _STALE_RETRIES:
                # A pooled keep-alive connection the server had already closed (its idle
                # timeout raced our reuse): nothing was answered, so send once more on a
                # new connection and restart the clock; the retry is recorded.
                attempt += 1
                acc.stale_retries += 1
                acc.start_ns = time.perf_counter_ns()
                continue
            acc.fail(ErrorKind.connect, f"{type(exc).__name__}: {exc}")
            return
        except httpx.TransportError as exc:
            _start_at_handover(acc, clock)
            acc.fail(ErrorKind.connect, f"{type(exc).__name__}: {exc}")
            return
        _start_at_handover(acc, clock)
        break
    try:
        acc.status_code = response.status_code
        if not response.is_success:
            acc.http_status = response.status_code
            acc.fail(ErrorKind.http_status, await _error_body(response))
            return
        ctype = response.headers.get("content-type", "")
        if ctype and "text/event-stream" not in ctype.lower():
            # read anyway: judged at the end by what the body held (_Accumulator.check_framing)
            acc.unexpected_content_type = ctype
        if not _decodable(response, acc):
            return
        await _read_stream(response, acc, first_token)
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()


def _decodable(response: httpx.Response, acc: _Accumulator) -> bool:
    """Note a compressed body; False (recorded as ``content_encoding``) when httpx
    has no decoder for one of its codings: its bytes would be read as garbage text."""
    codings = [
        c.strip().lower()
        for c in response.headers.get_list("content-encoding", split_commas=True)
        if c.strip()
    ]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return True
    acc.content_encoding = ", ".join(codings)
    unknown = [c for c in codings if c not in _DECODERS]
    if unknown:
        acc.fail(
            ErrorKind.content_encoding,
            f"content-encoding {acc.content_encoding!r}: no decoder for {', '.join(unknown)} "
            f"(this client decodes {', '.join(sorted(_DECODERS))}); body not read",
        )
        return False
    return True


_DECODERS: frozenset[str] = frozenset(
    getattr(httpx._decoders, "SUPPORTED_DECODERS", {"gzip": None, "deflate": None})
) - {"identity"}
"""Content codings the installed httpx decodes (``br`` needs brotli, ``zstd`` zstandard)."""


async def _read_stream(
    response: httpx.Response, acc: _Accumulator, first_token: anyio.CancelScope
) -> None:
    decoder = acc.decoder()
    waiting_first = True
    parts = fast_reads(response) or response.aiter_bytes()
    try:
        async for raw in parts:
            arrival = time.perf_counter_ns()  # stamped before any parsing
            for event in decoder.feed(raw, arrival):
                if acc.on_event(event) and waiting_first:
                    waiting_first = False
                    first_token.deadline = math.inf
                if acc.done:
                    await _drain(parts, decoder)
                    acc.ignored_lines += decoder.lines_after_end
                    return
    except httpx.DecodingError as exc:
        acc.fail(ErrorKind.content_encoding, f"compressed body not decodable: {exc}")
        return
    except httpx.TimeoutException as exc:
        acc.fail(ErrorKind.timeout, f"read: {type(exc).__name__}: {exc}")
        return
    except httpx.TransportError as exc:
        acc.fail(ErrorKind.truncated, f"connection broke mid-stream: {type(exc).__name__}: {exc}")
        return
    acc.end_of_stream(decoder)


def _direct_transport(client: httpx.AsyncClient, url: httpx.URL) -> httpx.AsyncBaseTransport | None:
    """The client's (gated) transport for ``url`` when ``client.send`` would add nothing
    to one POST — no redirects to follow, no auth flow, no event hooks — else ``None``.

    Skipping ``client.send`` halves the client's CPU per request, which at high
    concurrency is time every other stream waits; the request still passes the
    gate (``_check_gated`` made sure the transport is a ``GatedTransport``).
    """
    if client.follow_redirects or client.auth is not None:
        return None
    if any(client.event_hooks.values()):
        return None
    return client._transport_for_url(url)


def _start_at_handover(acc: _Accumulator, clock: PoolClock) -> None:
    """Move the clock's zero to the connection hand-over, and on to the body's write
    where the transport stamps it; keep both waits apart."""
    if clock.acquired_ns is None or clock.acquired_ns < acc.start_ns:
        return  # a transport that does not stamp (a test's MockTransport, a caller's own)
    acc.pool_wait_ns = clock.acquired_ns - acc.start_ns
    acc.start_ns = clock.acquired_ns
    # issue 22 (item 6): the client's own wait to write the request is not server time
    if clock.written_ns is not None and clock.written_ns >= clock.acquired_ns:
        acc.send_wait_ns = clock.written_ns - clock.acquired_ns
        acc.start_ns = clock.written_ns


async def _drain(parts: AsyncIterator[bytes], decoder: SSEDecoder) -> None:
    """Read what follows ``[DONE]`` (the chunked terminator) unstamped, so the
    connection goes back to the pool; give up past a size or time bound.

    Lines after ``[DONE]`` change nothing measured: the ended ``decoder`` only
    counts them (``lines_after_end``), up to the bound."""
    size = 0
    with anyio.move_on_after(_DRAIN_S):
        try:
            async for part in parts:
                size += len(part)
                if size > _DRAIN_LIMIT:
                    return  # a server still talking after [DONE]: drop the connection
                decoder.feed(part, 0)
        except httpx.HTTPError:
            return
    decoder.flush(0)


async def _error_body(response: httpx.Response) -> str:
    """``HTTP <status>: <message>`` from a (JSON) error body, read up to 64 KiB."""
    raw = b""
    try:
        async for part in response.aiter_bytes():
            raw += part
            if len(raw) >= _ERROR_BODY_LIMIT:
                break
    except httpx.HTTPError:
        pass
    text = raw[:_ERROR_BODY_LIMIT].decode("utf-8", errors="replace").strip()
    detail = _error_text(text) if text else response.reason_phrase
    return f"HTTP {response.status_code}: {detail}"
