"""The stream accumulator: fold one response's timed SSE events into a :class:`StreamMeasurement`.

Holds :class:`StreamAccumulator` (one per measurement: framing checks, chunk folding,
the record at the end), the chunk readers it uses (error objects, typed content
parts, usage blocks and their contradictions), :class:`StreamLimits` (the size
bounds of its decoder) and :func:`error_text`. No I/O: the HTTP exchange
(:mod:`deepseekbench._measure._measure`) feeds it events stamped at their read.

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

Faults never raise: they are recorded as a :class:`StreamError` with everything
received so far (an event over :class:`StreamLimits` too: it is dropped and
recorded as ``invalid_event``).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._dialects import SERVER_TIME_FIELDS, EngineDialect, dialect_for
from deepseekbench._measure._sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    SSEDecoder,
    SSEEvent,
)
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._figures import output_toks_per_s, tpot_ms
from deepseekbench._records._measurement import (
    ErrorKind,
    StreamError,
    StreamMeasurement,
    measurement_from_fields,
    most_severe,
)
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect

__all__ = ["ABNORMAL_FINISH_REASONS", "StreamAccumulator", "StreamLimits", "error_text"]

_RAW_MESSAGE_LIMIT = 64 * 1024
"""Messages are kept up to this many characters while measuring, redacted, and only
then cut to a report's length (:mod:`deepseekbench._measure._redact`), so no key can
straddle a cut and survive in part."""


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


_DEFAULT_LIMITS = StreamLimits()
"""The default bounds, one frozen instance (not validated again for every stream)."""


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


_NO_SERVER_TIMES: dict[str, Any] = {
    **dict.fromkeys(SERVER_TIME_FIELDS),
    "server_rate_span": None,
}
"""The server-time fields of a stream that streamed none (all unknown)."""

_CHUNK_EVENTS = frozenset({"message", "error"})
"""SSE event types read as the answer: ``message`` (the default) and ``error``."""


def _is_done(data: str) -> bool:
    """The ``[DONE]`` sentinel, also with whitespace around it (spaces, tabs, CR)."""
    if data == "[DONE]":
        return True
    # strip() copies the whole event: only where an end is whitespace (else it is data)
    return (data[:1].isspace() or data[-1:].isspace()) and data.strip() == "[DONE]"


def _is_blank(data: str) -> bool:
    """Nothing but whitespace (``not data.strip()``, without copying the event)."""
    return not data or data.isspace()


class StreamAccumulator:
    """Folds timed events into running totals. One per measurement."""

    def __init__(
        self,
        dialect: Dialect,
        start_ns: int,
        limits: StreamLimits | None = None,
        adapter: EngineDialect | None = None,
    ) -> None:
        """``adapter``: the route's own (``EngineRoute.adapter``), else looked up by ``dialect``."""
        self.dialect = dialect
        self.adapter = adapter if adapter is not None else dialect_for(dialect)
        self.start_ns = start_ns
        self.limits = limits or _DEFAULT_LIMITS
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
        self.send_wait_ns: int | None = None  # fidelity at 256 streams
        self.stale_retries = 0
        self.content_encoding: str | None = None
        self.unexpected_content_type: str | None = None
        self.abnormal: set[str] = set()  # abnormal finish reasons already recorded

    def fail(self, kind: ErrorKind, message: str) -> None:
        # cut to its report length only after redaction (see redact_measurement)
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
            self.fail(ErrorKind.server_error_event, error_text(text) or "error field")

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
        if _is_blank(data):
            return False  # an empty data frame is a keep-alive, not an event to parse
        if event.event not in _CHUNK_EVENTS:
            # another event type (WHATWG SSE: dispatched under its own name, never to a
            # 'message' listener): not a chat chunk; its data and event lines are counted
            self.ignored_lines += data.count("\n") + 2
            return False
        self.events += 1
        if event.event == "error":
            self.fail(ErrorKind.server_error_event, error_text(data))
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
            self.fail(ErrorKind.server_error_event, error_text(err))
        choices = chunk.get("choices")
        if choices is None:
            choices = []  # null where a list is usual: no choices
        if not isinstance(choices, list):
            self.fail(ErrorKind.invalid_event, "'choices' is not a list")
            choices = []
        has_token = False
        # acceptance adapters run only where a chunk can carry acceptance figures
        spec_keys, choice_keys = self.adapter.spec_keys, self.adapter.choice_spec_keys
        spec = not spec_keys.isdisjoint(chunk)  # a key of chunk among spec_keys
        for choice in choices:
            if choice is None:
                continue
            if not isinstance(choice, dict):
                self.fail(ErrorKind.invalid_event, "a choice is not an object")
                continue
            spec = spec or not choice_keys.isdisjoint(choice)
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
        if not m:  # no server times streamed (most engines): every one unknown
            return dict(_NO_SERVER_TIMES)
        times: dict[str, Any] = {name: _ms_or_none(m.get(name)) for name in SERVER_TIME_FIELDS}
        rated = times["server_toks_per_s"] is not None  # the rate's span, as the dialect says
        times["server_rate_span"] = self.adapter.server_rate_span if rated else None
        return times

    def measurement(
        self, route: EngineRoute, health: Mapping[str, Any] | None = None
    ) -> StreamMeasurement:
        """The record of this stream: the folded totals, timed from ``start_ns``, for
        ``route``; ``health``: the client's own figures (``client_lag_ms`` and the
        other ``client_*`` fields of the self-check), set in the same construction."""
        counts = _usage_counts(self.usage)
        completion = counts.completion_tokens
        estimated: int | None = None
        if completion is None:
            estimated = len(self.token_ids) if self.token_ids else len(self.token_times)
        choice_tokens, choice_estimated = self._choice_tokens()
        n_tokens = completion if completion is not None else estimated
        if choice_tokens is not None:
            n_tokens = choice_tokens  # usage counts every choice; the times are choice 0's
        text, reasoning = self._texts()
        fields: dict[str, Any] = dict(
            text=text,
            reasoning_text=reasoning,
            **self._count_fields(counts, estimated),
            **self._timing_fields(n_tokens, choice_tokens),
            finish_reason=self.finish_reason,
            http_status=self.http_status,
            status_code=self.status_code,
            error=most_severe(self.errors),
            errors=list(self.errors),
            **self._acceptance_fields(route),
            usage=self.usage,
            token_ids=self.token_ids,
            start_perf_ns=self.start_ns,
            events=self.events,
            done=self.done,
            dialect=route.dialect,
            speculative=route.speculative,
            route_label=route.label,
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
        if health:
            fields.update(health)
        # every value typed here: no validation on the hot path
        return measurement_from_fields(fields)

    def _count_fields(self, counts: _UsageCounts, estimated: int | None) -> dict[str, Any]:
        """The token counts: usage's trusted ones, else the client's estimate, and the
        OpenAI Predicted Outputs counts (Any: ** into the model)."""
        completion = counts.completion_tokens
        details = self.usage.get("completion_tokens_details") if self.usage else None
        details = details if isinstance(details, dict) else {}
        return {
            "completion_tokens": completion,
            "prompt_tokens": counts.prompt_tokens,
            "reasoning_tokens": counts.reasoning_tokens,
            "usage_contradiction": counts.contradiction,
            "tokens_estimated": completion is None,
            "estimated_completion_tokens": estimated,
            "tokens_estimated_by": (
                None if completion is not None else ("token_ids" if self.token_ids else "chunks")
            ),
            "accepted_prediction_tokens": _int_or_none(details.get("accepted_prediction_tokens")),
            "rejected_prediction_tokens": _int_or_none(details.get("rejected_prediction_tokens")),
        }

    def _timing_fields(self, n_tokens: int | None, choice_tokens: int | None) -> dict[str, Any]:
        """The times (ms from ``start_ns``) and speeds of the token-bearing chunks, over
        ``n_tokens`` output tokens (module docstring; Any: ** into the model)."""
        ms = [(t - self.start_ns) / 1e6 for t in self.token_times]
        ttft = ms[0] if ms else None
        e2e = ms[-1] if ms else None
        finish = (self.finish_ns - self.start_ns) / 1e6 if self.finish_ns is not None else None
        decode_end, tpot_tokens = self._decode_window(e2e, finish, n_tokens, choice_tokens)
        itl = [b - a for a, b in itertools.pairwise(ms)]
        per_chunk = self._tokens_per_chunk() if choice_tokens is None else None
        per_token: list[float] | None = None
        if per_chunk is not None:
            per_token = []
            for gap, k in zip(itl, per_chunk[1:], strict=True):
                per_token.extend([gap / k] * k)
        return {
            "ttft_ms": ttft,
            "e2e_ms": e2e,
            "tpot_ms": tpot_ms(ttft, decode_end, tpot_tokens),
            "finish_ms": finish,
            "tpot_tokens": tpot_tokens,
            "itl_ms": itl,
            "tokens_per_chunk": per_chunk,
            "itl_per_token_ms": per_token,
            "chunk_arrival_ms": ms,
            "output_toks_per_s": output_toks_per_s(e2e, n_tokens),
        }

    def _acceptance_fields(self, route: EngineRoute) -> dict[str, Any]:
        """The speculative acceptance the stream reported, and the route's served depth
        where the stream gave none (Any: ** into the model)."""
        acc = self.acceptance
        by_pos = acc.acceptance_by_position if acc else None
        return {
            "draft_tokens": acc.draft_tokens if acc else None,
            "accepted_tokens": acc.accepted_tokens if acc else None,
            "accepted_token_ratio": acc.accepted_token_ratio if acc else None,
            "acceptance_length": acc.acceptance_length if acc else None,
            "acceptance": acc,
            "acceptance_by_position": list(by_pos) if by_pos is not None else None,
            "spec_tokens": (acc.spec_tokens if acc else None) or route.served_spec_tokens,
            "acceptance_source": acc.source if acc else None,
        }

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


def error_text(err: Any) -> str:
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
