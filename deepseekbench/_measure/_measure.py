"""The HTTP exchange of one measurement: ``measure_streamed`` sends one streamed chat
completion and times what comes back.

Holds :func:`measure_streamed` (its alias :data:`MeasureStreamed`), its deadlines
(:class:`Timeouts`) and the exchange under it: gate checks, the connection clock,
the stale-connection retry, reading the body and draining it after ``[DONE]``.

Layers, kept apart: bytes (httpx ``aiter_bytes``, each read stamped with
``time.perf_counter_ns()`` before any parsing) -> events (:class:`SSEDecoder`)
-> timed deltas (:class:`~deepseekbench._measure._accumulator.StreamAccumulator`,
where the timing definitions are) -> :class:`StreamMeasurement`.

Wire rules (``docs/measurement.md``): ``Accept-Encoding: identity`` is asked;
a compressed answer anyway is decoded by httpx and each event is stamped with the
read whose decoded bytes completed it (a coding without a decoder is the
``content_encoding`` error, never text). Events of another SSE type than
``message``/``error`` and every line after ``[DONE]`` are not read, only counted
in ``sse_ignored_lines``.

Faults never raise: they are recorded as a :class:`StreamError` with everything
received so far. Caller mistakes raise (see :func:`measure_streamed`).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from deepseekbench._errors import LiveGateError
from deepseekbench._measure._accumulator import StreamAccumulator, StreamLimits, error_text
from deepseekbench._measure._prepared import build_post, parsed_url
from deepseekbench._measure._redact import redact_measurement
from deepseekbench._measure._selfcheck import current_selfcheck, host_load
from deepseekbench._measure._sse import SSEDecoder
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._net._transport import (
    POOL_CLOCK,
    PoolClock,
    body_ended,
    fast_reads,
    release_now,
)
from deepseekbench._records._figures import counted_output_tokens
from deepseekbench._records._measurement import ErrorKind, StreamMeasurement
from deepseekbench._types._request import ChatRequest, coerce_request
from deepseekbench._types._secrets import secret_values

__all__ = ["MeasureStreamed", "Timeouts", "measure_streamed"]

_ERROR_BODY_LIMIT = 64 * 1024
_DRAIN_LIMIT = 64 * 1024  # bytes read after [DONE] before the connection is given up
_DRAIN_S = 1.0  # seconds waited after [DONE] for the body's end


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


def _check_gated(client: httpx.AsyncClient, gate: LiveGate, url: httpx.URL) -> None:
    """Raise unless every transport of ``client`` (mounts included) passes ``gate``."""
    try:
        gate.check_client(client)
    except LiveGateError as exc:
        raise LiveGateError(
            f"measure_streamed: {exc}", host=url.host, missing=exc.missing
        ) from None


def _check_arguments(route: object, gate: object) -> None:
    """Raise a ``TypeError`` naming the argument when ``route`` or ``gate`` has the wrong type."""
    if not isinstance(route, EngineRoute):
        raise TypeError(
            "measure_streamed: route must be an EngineRoute (EngineRoute.model_validate(...) "
            f"makes one from a dict), not {type(route).__name__}"
        )
    if not isinstance(gate, LiveGate):
        raise TypeError(
            "measure_streamed: gate must be a LiveGate (LiveGate() admits loopback only), "
            f"not {type(gate).__name__}"
        )


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
        TypeError: ``request`` is neither a :class:`ChatRequest` nor a mapping,
            ``route`` is not an :class:`EngineRoute`, or ``gate`` is not a
            :class:`LiveGate`.
        pydantic.ValidationError: ``request`` is invalid (including an unknown
            key in a dict; see :func:`coerce_request`).
        LiveGateError: the gate refuses the URL (before any connection) or
            ``client`` is not gated by ``gate``.
    """
    _check_arguments(route, gate)
    req = coerce_request(request)
    timeouts = timeouts or Timeouts()
    url = parsed_url(route.chat_url)  # parsed once per URL: httpx re-parses a str each step
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
            acc = await _measure(own, url, headers, body, route, timeouts, limits)
    else:
        acc = await _measure(client, url, headers, body, route, timeouts, limits)
    health: dict[str, Any] | None = None
    if check is not None and begin is not None:
        end_ns = time.perf_counter_ns()
        cpu, wait = begin.shares_until(check.sched_now(after=begin))
        lag, stall = check.lag_and_stall_ms(begin_ns, end_ns)
        cores, load_1m = host_load()
        health = {
            "client_lag_ms": lag,
            "client_stall_ms": stall,
            "client_cpu_share": cpu,
            "client_core_wait_share": wait,
            "client_cores": cores,
            "client_load_1m": load_1m,
        }
    result = acc.measurement(route, health)  # built once, the client's health included
    # A server may echo the key (request headers in an error body, or in its text or
    # usage): no key may survive into the measurement, whether it came from the route
    # or was injected by the gate. Returns ``result`` itself when nothing needs a change.
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
) -> StreamAccumulator:
    """The exchange, timed into an accumulator (its measurement is built by the caller,
    once, with the client's health figures)."""
    http_request = build_post(client, url, headers, body, timeouts.connect_s)
    acc = StreamAccumulator(route.dialect, 0, limits, adapter=route.adapter)
    deadlines = _Deadlines(anyio.current_time(), timeouts)
    # one cancel scope for every deadline (first token, total, the drain after [DONE]):
    # its deadline is always the earliest one still in force
    with anyio.CancelScope(deadline=min(deadlines.first, deadlines.total)) as scope:
        acc.start_ns = time.perf_counter_ns()
        await _exchange(client, http_request, acc, scope, deadlines)
    if scope.cancelled_caught:
        deadlines.expired(acc, timeouts)
    acc.check_framing()
    return acc


class _Deadlines:
    """The deadlines of one measurement on anyio's clock (s; ``math.inf`` = none) and
    the drain in progress, if any. One cancel scope carries the earliest; when it
    fires, :meth:`expired` records what the nested scopes this replaces recorded:
    the innermost deadline wins a tie (drain, then first token, then total)."""

    __slots__ = ("decoder", "drain", "first", "total")

    def __init__(self, now: float, timeouts: Timeouts) -> None:
        total, first = timeouts.total_s, timeouts.first_token_s
        self.total = math.inf if total is None else now + total
        self.first = math.inf if first is None else now + first
        self.drain = math.inf
        self.decoder: SSEDecoder | None = None  # set while draining after [DONE]

    def first_token_came(self, scope: anyio.CancelScope) -> None:
        """Lift the first-token deadline (the total one stays)."""
        self.first = math.inf
        scope.deadline = self.total

    def expired(self, acc: StreamAccumulator, timeouts: Timeouts) -> None:
        """Record the deadline that cancelled the scope."""
        if self.decoder is not None and self.drain <= min(self.first, self.total):
            # the drain's own bound: not a fault; what was read after [DONE] is counted
            self.decoder.flush(0)
            acc.ignored_lines += self.decoder.lines_after_end
        elif self.first <= self.total:
            acc.fail(ErrorKind.timeout, f"no token within first_token_s={timeouts.first_token_s}")
        else:
            acc.fail(ErrorKind.timeout, f"stream not finished within total_s={timeouts.total_s}")


def _secret_values(*keys: SecretStr | None) -> tuple[str, ...]:
    return secret_values(*keys)


_STALE_RETRIES = 1
"""Re-sends after a reused connection closed before any response byte."""


async def _exchange(
    client: httpx.AsyncClient,
    http_request: httpx.Request,
    acc: StreamAccumulator,
    scope: anyio.CancelScope,
    deadlines: _Deadlines,
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
        ctype, encodings = _content_headers(response.headers)
        if ctype and "text/event-stream" not in ctype.lower():
            # read anyway: judged at the end by what the body held (StreamAccumulator.check_framing)
            acc.unexpected_content_type = ctype
        if not _decodable(encodings, acc):
            return
        await _read_stream(response, acc, scope, deadlines)
    finally:
        if not release_now(response):  # an await: shielded from the deadline
            with anyio.CancelScope(shield=True):
                await response.aclose()


def _content_headers(headers: httpx.Headers) -> tuple[str, list[str]]:
    """``headers.get("content-type", "")`` and ``headers.get_list("content-encoding",
    split_commas=True)`` in one pass, decoding only those two headers, as ASCII (which
    httpx's ASCII, UTF-8 and Latin-1 all decode alike); a value that is not ASCII, or
    headers set to another encoding, take httpx's two calls."""
    if headers._encoding in (None, "ascii", "utf-8", "iso-8859-1"):
        types: list[str] = []
        encodings: list[str] = []
        try:
            for _, key, value in headers._list:
                if key == b"content-type":
                    types.append(value.decode("ascii"))
                elif key == b"content-encoding":
                    encodings.extend(item.strip() for item in value.decode("ascii").split(","))
        except UnicodeDecodeError:
            pass
        else:
            return ", ".join(types), encodings
    return headers.get("content-type", ""), headers.get_list("content-encoding", split_commas=True)


def _decodable(encodings: list[str], acc: StreamAccumulator) -> bool:
    """Note a compressed body (``encodings``: the ``Content-Encoding`` values, split at
    commas); False (recorded as ``content_encoding``) when httpx has no decoder for one
    of its codings: its bytes would be read as garbage text."""
    codings = [c.strip().lower() for c in encodings if c.strip()]
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
    response: httpx.Response,
    acc: StreamAccumulator,
    scope: anyio.CancelScope,
    deadlines: _Deadlines,
) -> None:
    decoder = acc.decoder()
    waiting_first = True
    parts = fast_reads(response) or response.aiter_bytes()
    try:
        async for raw in parts:
            arrival = time.perf_counter_ns()  # stamped before any parsing
            lifted = False
            for event in decoder.feed(raw, arrival):
                if acc.on_event(event) and waiting_first:
                    waiting_first, lifted = False, True
                    deadlines.first = math.inf
                if acc.done:
                    # the drain sets the scope's deadline itself (none when the body has
                    # already ended: nothing is left to wait for)
                    await _drain(parts, decoder, scope, deadlines, ended=body_ended(response))
                    acc.ignored_lines += decoder.lines_after_end
                    return
            if lifted:  # the first-token deadline is lifted before the next await
                deadlines.first_token_came(scope)
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


def _start_at_handover(acc: StreamAccumulator, clock: PoolClock) -> None:
    """Move the clock's zero to the connection hand-over, and on to the body's write
    where the transport stamps it; keep both waits apart."""
    if clock.acquired_ns is None or clock.acquired_ns < acc.start_ns:
        return  # a transport that does not stamp (a test's MockTransport, a caller's own)
    acc.pool_wait_ns = clock.acquired_ns - acc.start_ns
    acc.start_ns = clock.acquired_ns
    # the client's own wait to write the request is not server time
    if clock.written_ns is not None and clock.written_ns >= clock.acquired_ns:
        acc.send_wait_ns = clock.written_ns - clock.acquired_ns
        acc.start_ns = clock.written_ns


async def _drain(
    parts: AsyncIterator[bytes],
    decoder: SSEDecoder,
    scope: anyio.CancelScope | None = None,
    deadlines: _Deadlines | None = None,
    *,
    ended: bool = False,
) -> None:
    """Read what follows ``[DONE]`` (the chunked terminator) unstamped, so the
    connection goes back to the pool; give up past a size (64 KiB) or time bound (1 s).

    Lines after ``[DONE]`` change nothing measured: the ended ``decoder`` only
    counts them (``lines_after_end``), up to the bound. With a measurement's
    ``scope`` and ``deadlines`` the time bound is set on that scope (no scope of its
    own; :meth:`_Deadlines.expired` flushes if it fires), else on a scope made here.
    ``ended``: the transport says the body has already ended (all of it read and
    buffered), so the reads below cannot wait and no time bound is set."""
    if ended:
        if await _drain_reads(parts, decoder):
            decoder.flush(0)
        return
    if scope is None or deadlines is None:
        with anyio.move_on_after(_DRAIN_S):
            if not await _drain_reads(parts, decoder):
                return
        decoder.flush(0)
        return
    deadlines.drain = anyio.current_time() + _DRAIN_S
    deadlines.decoder = decoder
    # the first-token deadline is lifted by now ([DONE] came): the earlier of the
    # drain's and the total deadline
    scope.deadline = min(deadlines.drain, deadlines.total)
    ended = await _drain_reads(parts, decoder)
    # the scope keeps the drain's deadline: nothing after the drain awaits unshielded
    deadlines.decoder = None
    if ended:
        decoder.flush(0)


async def _drain_reads(parts: AsyncIterator[bytes], decoder: SSEDecoder) -> bool:
    """Feed ``decoder`` the rest of the body; ``False`` when given up (over the size
    bound, or a broken connection)."""
    size = 0
    try:
        async for part in parts:
            size += len(part)
            if size > _DRAIN_LIMIT:
                return False  # a server still talking after [DONE]: drop the connection
            decoder.feed(part, 0)
    except httpx.HTTPError:
        return False
    return True


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
    detail = error_text(text) if text else response.reason_phrase
    return f"HTTP {response.status_code}: {detail}"
