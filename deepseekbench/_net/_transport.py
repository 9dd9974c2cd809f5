"""The HTTP transport under ``LiveGate.client()``: aiohttp on asyncio, httpcore on trio.

Why two: with one SSE event per read (how engines stream), httpx's own stack
(httpcore + h11) costs about three times the CPU per chunk of an aiohttp read
loop, and on asyncio the ``httpx-aiohttp`` package gives httpx's API on top of
aiohttp's connection pool. aiohttp runs only on asyncio, so under trio the
request goes to ``httpx.AsyncHTTPTransport`` (httpcore). The choice is made per
event loop on first use (``sniffio``), so one client object works on both.

Pool rules (a benchmark client must not queue requests the caller did not ask
it to queue): the pool follows the given :class:`httpx.Limits`
(``max_connections=None`` = no limit), and a limit that would close reusable
connections (``max_keepalive_connections`` below ``max_connections``) is
refused, not dropped.

Connection hand-over: a request carrying a :class:`PoolClock` in its
extensions (key :data:`POOL_CLOCK`) gets it stamped with
``time.perf_counter_ns()`` when it is handed its own connection — on aiohttp by
a connector subclass when its wait for a free connection ends, before it opens a
new one or as it returns a reused one (the moments of aiohttp's connection-queue /
create / reuse trace events, without a ``TraceConfig``'s per-event cost:
:func:`_stamping_types`), on httpcore at its first connection trace event — so a
measurement can start its clock there and record any wait for a pooled connection
apart. It is stamped again as its body is written (``written_ns``; on aiohttp as its
body writer starts, by a ``ClientRequest`` subclass; httpcore's
``http11.send_request_body.started``): aiohttp on Python < 3.12 writes the body
in a task of its own, which the event loop runs only after every callback
already ready — at 256 streams started together, after the other 255 requests
were built (fidelity at 256 streams).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpx
import sniffio

POOL_CLOCK = "deepseekbench.pool_clock"
"""Request-extension key of the :class:`PoolClock` a transport stamps."""

# httpcore trace events that mean "this request now owns a connection"
_HTTPCORE_ACQUIRED = frozenset(
    {"connection.connect_tcp.started", "http11.send_request_headers.started"}
)
_HTTPCORE_WRITTEN = "http11.send_request_body.started"
_CURRENT: contextvars.ContextVar[PoolClock | None] = contextvars.ContextVar(
    "deepseekbench_pool_clock", default=None
)


class PoolClock:
    """When a request got its own connection (``acquired_ns``) and when its body was
    written to it (``written_ns``; perf_counter ns, ``None`` until stamped)."""

    __slots__ = ("acquired_ns", "queued", "written_ns")

    def __init__(self) -> None:
        self.acquired_ns: int | None = None
        self.queued = False
        self.written_ns: int | None = None

    def mark(self) -> None:
        """Stamp the hand-over (first call wins)."""
        if self.acquired_ns is None:
            self.acquired_ns = time.perf_counter_ns()

    def mark_written(self) -> None:
        """Stamp the body's write (first call wins; only after the hand-over)."""
        if self.written_ns is None and self.acquired_ns is not None:
            self.written_ns = time.perf_counter_ns()


KEEPALIVE_S = 15.0
"""Idle connections are kept this long (s; aiohttp's default, as in vLLM's bench client)."""


def unbounded_limits() -> httpx.Limits:
    """The default pool: no connection limit, every idle connection kept ``KEEPALIVE_S``."""
    return httpx.Limits(
        max_connections=None, max_keepalive_connections=None, keepalive_expiry=KEEPALIVE_S
    )


def pool_limits(concurrency: int) -> httpx.Limits:
    """A pool of ``concurrency`` connections (requests), all kept alive for reuse
    (idle ones for ``KEEPALIVE_S`` = 15 s).

    Raises:
        ValueError: ``concurrency`` below 1.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 (got {concurrency})")
    return httpx.Limits(
        max_connections=concurrency,
        max_keepalive_connections=concurrency,
        keepalive_expiry=KEEPALIVE_S,
    )


def check_limits(limits: httpx.Limits) -> None:
    """Refuse pool limits that would close connections a benchmark could reuse.

    Raises:
        ValueError: ``max_keepalive_connections`` is set and below
            ``max_connections`` (or set while ``max_connections`` is unlimited).
    """
    keep, most = limits.max_keepalive_connections, limits.max_connections
    if keep is not None and (most is None or keep < most):
        raise ValueError(
            f"limits keep {keep} idle connections of {most or 'unlimited'}: closed connections "
            "put connect time into TTFT; use max_keepalive_connections=None or >= "
            "max_connections (deepseekbench.pool_limits(concurrency) does)"
        )


class BenchTransport(httpx.AsyncBaseTransport):
    """An httpx transport that picks aiohttp (asyncio) or httpcore (trio) on first use.

    Args:
        limits: connection pool limits (checked by :func:`check_limits`);
            ``None`` = :func:`unbounded_limits`.

    Raises:
        ValueError: ``limits`` refused by :func:`check_limits`.
    """

    def __init__(self, limits: httpx.Limits | None = None) -> None:
        self.limits = limits if limits is not None else unbounded_limits()
        check_limits(self.limits)
        self._inner: httpx.AsyncBaseTransport | None = None
        self._library: str | None = None
        # Built now, like httpx's own transport, so the first request's clock holds no
        # certificate loading (~0.1 s) and no import.
        self._ssl = httpx.create_ssl_context(trust_env=False)
        with contextlib.suppress(sniffio.AsyncLibraryNotFoundError):  # no loop: pick later
            self._pick()

    @property
    def library(self) -> str | None:
        """``"asyncio"`` or ``"trio"`` once the first request picked a transport."""
        return self._library

    def _pick(self) -> httpx.AsyncBaseTransport:
        library = sniffio.current_async_library()
        if self._inner is None:
            self._library = library
            if library == "asyncio":
                self._inner = _AiohttpTransport(self.limits, self._ssl)
            else:
                self._inner = _HttpcoreTransport(self.limits, self._ssl)
        elif library != self._library:
            raise RuntimeError(
                f"this client was first used under {self._library}; it cannot serve {library}"
            )
        return self._inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on the event loop's transport.

        Raises:
            httpx.TransportError: connect, read or protocol failures.
            RuntimeError: the client is used under a second event-loop library.
        """
        return await self._pick().handle_async_request(request)

    async def aclose(self) -> None:
        """Close pooled connections."""
        if self._inner is not None:
            await self._inner.aclose()


# -- trio (and any non-asyncio loop): httpcore ------------------------------------


class _HttpcoreTransport(httpx.AsyncBaseTransport):
    """httpcore pools of at most ``_SHARD`` connections, as many as the limits allow.

    httpcore's pool rescans every connection for every queued request on each
    state change (cubic in the streams in flight): one pool of 256 streams
    stalls for seconds. Requests go to the least busy shard; a shard keeps its
    connections, so sequential requests still reuse one.
    """

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext) -> None:
        self._limits = limits
        self._shards: list[_Shard] = []
        self._ssl = ssl_context  # one for all shards (each would cost ~0.1 s)

    def _pick(self) -> _Shard:
        free = [s for s in self._shards if s.active < s.cap]
        if free:
            return min(free, key=lambda s: s.active)
        most = self._limits.max_connections
        room = _SHARD if most is None else most - sum(s.cap for s in self._shards)
        if room > 0:
            cap = min(_SHARD, room)
            limits = httpx.Limits(
                max_connections=cap,
                max_keepalive_connections=cap,
                keepalive_expiry=self._limits.keepalive_expiry,
            )
            inner = httpx.AsyncHTTPTransport(verify=self._ssl, limits=limits, trust_env=False)
            shard = _Shard(inner, cap)
            self._shards.append(shard)
            return shard
        return min(self._shards, key=lambda s: s.active)  # all full: wait in the pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        clock = request.extensions.get(POOL_CLOCK)
        if isinstance(clock, PoolClock):
            request.extensions = {**request.extensions, "trace": _httpcore_trace(clock)}
        shard = self._pick()
        shard.active += 1
        try:
            response = await shard.transport.handle_async_request(request)
        except BaseException:
            shard.active -= 1
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Releasing(response.stream, shard)
        return response

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.transport.aclose()


_SHARD = 32  # connections per httpcore pool


class _Shard:
    __slots__ = ("active", "cap", "transport")

    def __init__(self, transport: httpx.AsyncHTTPTransport, cap: int) -> None:
        self.transport = transport
        self.cap = cap
        self.active = 0


class _Releasing(httpx.AsyncByteStream):
    """A response stream that frees its shard's slot once closed."""

    def __init__(self, inner: httpx.AsyncByteStream, shard: _Shard) -> None:
        self._inner = inner
        self._shard: _Shard | None = shard

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._inner:
            yield part

    async def aclose(self) -> None:
        shard, self._shard = self._shard, None
        if shard is not None:
            shard.active -= 1
        await self._inner.aclose()


def _httpcore_trace(clock: PoolClock) -> Callable[[str, Mapping[str, Any]], Awaitable[None]]:
    async def trace(event: str, info: Mapping[str, Any]) -> None:
        if event in _HTTPCORE_ACQUIRED:
            clock.mark()
        elif event == _HTTPCORE_WRITTEN:
            clock.mark_written()

    return trace


# -- asyncio: aiohttp through httpx-aiohttp ---------------------------------------


class _AiohttpTransport(httpx.AsyncBaseTransport):
    """``httpx_aiohttp.AiohttpTransport`` on our own connector, with httpx's error kinds.

    httpx-aiohttp maps every ``aiohttp.ClientConnectionError`` (a refused connect,
    a server that hung up mid-body) to ``httpx.ConnectTimeout``; a measurement
    must tell those apart, so the aiohttp cause is mapped again here.
    """

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext) -> None:
        import aiohttp  # noqa: F401  (imported now, not inside the first request)
        from httpx_aiohttp import AiohttpTransport
        from httpx_aiohttp.transport import AiohttpResponseStream

        self._stream_type = AiohttpResponseStream
        self._limits = limits
        self._ssl = ssl_context
        self._inner = AiohttpTransport(
            verify=ssl_context, limits=limits, trust_env=False, client=self._session
        )

    def _session(self) -> Any:
        import aiohttp

        connector_type, request_type = _stamping_types()
        expiry = self._limits.keepalive_expiry
        connector = connector_type(
            limit=self._limits.max_connections or 0,  # 0 = no limit
            limit_per_host=0,
            keepalive_timeout=expiry if expiry is not None else 3600.0,
            force_close=False,
            ssl=self._ssl,
        )
        return aiohttp.ClientSession(
            connector=connector,
            request_class=request_type,
            trust_env=False,
            auto_decompress=False,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        clock = request.extensions.get(POOL_CLOCK)
        token = _CURRENT.set(clock if isinstance(clock, PoolClock) else None)
        try:
            if self._inner.proxy is None:
                response = await self._send(request)
            else:  # httpx-aiohttp's own proxy plumbing (proxy URL, auth, headers)
                response = await self._inner.handle_async_request(request)
        except httpx.TransportError as exc:
            raise _remap(exc, body=False, url=request.url) from exc.__cause__
        except Exception as exc:
            malformed = _malformed(exc)
            if malformed is None:
                raise
            # httpx-aiohttp passes aiohttp's parser errors through unmapped (a bad
            # status line, ``content-length: abc``, an over-long header, ...): the
            # same kind httpcore gives on trio, so a run records them as it does there
            raise httpx.RemoteProtocolError(malformed) from exc
        finally:
            _CURRENT.reset(token)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _RemappedStream(response.stream)
        return response

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """What ``httpx_aiohttp.AiohttpTransport.handle_async_request`` does without a
        proxy (same session call, same arguments, same error mapping), minus its
        per-request rebuilding: the timeout is built once per deadline set and the
        headers go to aiohttp as a list (no per-key lookups in ``httpx.Headers``).

        Raises:
            httpx.TransportError: httpx-aiohttp's mapping of an aiohttp error.
        """
        inner = self._inner
        session: Any = inner.client
        if not _is_session(session):
            session = inner.client = inner.get_client()
        timeout = request.extensions.get("timeout", {})
        data: Any
        try:
            data = request.content or None
        except httpx.RequestNotRead:
            data = request.stream
            request.headers.pop("transfer-encoding", None)  # handled by aiohttp
        try:
            response = await session.request(
                method=request.method,
                url=str(request.url),
                headers=_header_items(request.headers),
                data=data,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=_client_timeout(
                    timeout.get("connect"), timeout.get("read"), timeout.get("pool")
                ),
                server_hostname=request.extensions.get("sni_hostname"),
            ).__aenter__()
        except Exception as exc:
            from httpx_aiohttp.transport import map_aiohttp_exceptions

            with map_aiohttp_exceptions():
                raise
            raise AssertionError("unreachable: the mapping re-raises") from exc
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=self._stream_type(response),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def _header_items(headers: httpx.Headers) -> Any:
    """``headers.items()`` (names lowercased, repeats joined with ``", "``, in first-seen
    order), decoded as ASCII without httpx's encoding property read twice per header
    (and its scan of every header when not yet done); headers that are not all ASCII,
    or whose encoding is set to another, take ``headers.items()`` itself."""
    # unset: what ``headers.encoding`` picks first when every header is ASCII
    if headers._encoding is None or headers._encoding == "ascii":
        items: dict[str, str] = {}
        try:
            for _, key, value in headers._list:
                name = key.decode("ascii")
                if name in items:
                    items[name] += f", {value.decode('ascii')}"
                else:
                    items[name] = value.decode("ascii")
        except UnicodeDecodeError:
            return headers.items()
        return items.items()
    return headers.items()


def _is_session(obj: object) -> bool:
    import aiohttp

    return isinstance(obj, aiohttp.ClientSession)


@functools.lru_cache(maxsize=64)
def _client_timeout(connect: float | None, read: float | None, pool: float | None) -> Any:
    """httpx-aiohttp's ``aiohttp.ClientTimeout`` for httpx's deadlines (s), built once
    per set (it is immutable)."""
    import aiohttp

    return aiohttp.ClientTimeout(sock_connect=connect, sock_read=read, connect=pool)


@functools.cache
def _stamping_types() -> tuple[Any, Any]:
    """aiohttp's ``TCPConnector`` and ``ClientRequest`` subclassed to stamp the
    :class:`PoolClock` of the request in flight (held in a context variable, which
    asyncio copies into aiohttp's body-writer task).

    The stamps are the ones aiohttp's trace events gave (a ``TraceConfig`` on the
    session): ``queued`` as the request starts waiting for a free connection
    (``on_connection_queued_start``), the hand-over when that wait ends
    (``on_connection_queued_end``), before a new connection is opened
    (``on_connection_create_start``) or once a pooled one is reused
    (``on_connection_reuseconn``: ``connect`` returning), and the write as the body
    writer starts (``on_request_chunk_sent`` of the first chunk). With any
    ``TraceConfig`` set, aiohttp builds trace objects and awaits its signal handlers
    for every event of every request (about 20 µs a request); these overrides cost
    a context-variable read each. Mirrors aiohttp 3.14's ``BaseConnector.connect``,
    ``_wait_for_available_connection``, ``_create_connection`` and
    ``ClientRequest.write_bytes``; each override passes ``*args, **kwargs`` through,
    and ``connect`` stamps the hand-over itself should a hook be renamed (first stamp
    wins).
    """
    import aiohttp

    class _StampingConnector(aiohttp.TCPConnector):
        async def connect(self, req: Any, *args: Any, **kwargs: Any) -> Any:
            conn = await super().connect(req, *args, **kwargs)
            clock = _CURRENT.get()
            if clock is not None:
                clock.mark()  # a reused connection; a no-op after the hooks below
            return conn

        async def _wait_for_available_connection(self, *args: Any, **kwargs: Any) -> None:
            clock = _CURRENT.get()
            if clock is not None:
                clock.queued = True
            await super()._wait_for_available_connection(*args, **kwargs)
            if clock is not None:
                clock.mark()

        async def _create_connection(self, *args: Any, **kwargs: Any) -> Any:
            clock = _CURRENT.get()
            if clock is not None:
                clock.mark()  # before connecting, as on_connection_create_start
            return await super()._create_connection(*args, **kwargs)

    class _StampingRequest(aiohttp.ClientRequest):
        async def write_bytes(self, *args: Any, **kwargs: Any) -> None:
            clock = _CURRENT.get()
            if clock is not None:
                clock.mark_written()
            await super().write_bytes(*args, **kwargs)

    return _StampingConnector, _StampingRequest


class _RemappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._inner:
                yield part
        except httpx.TransportError as exc:
            raise _remap(exc, body=True) from exc.__cause__
        except Exception as exc:
            malformed = _malformed(exc)
            if malformed is None:
                raise
            raise httpx.ReadError(malformed) from exc

    def release(self) -> bool:
        """Give the connection back to aiohttp's pool now, without an await (aiohttp's
        ``ClientResponse.release()``, what closing the response does first); ``False``
        when this stream holds no aiohttp response (close it with ``aclose`` then)."""
        response = getattr(self._inner, "_aiohttp_response", None)
        if response is None or not hasattr(response, "release"):
            return False
        response.release()
        return True

    def reads(self) -> AsyncIterator[bytes] | None:
        """Each socket read as aiohttp hands it over, without httpx's layers; ``None``
        when httpx-aiohttp's stream no longer exposes its aiohttp response."""
        response = getattr(self._inner, "_aiohttp_response", None)
        content = getattr(response, "content", None)
        if content is None or not hasattr(content, "iter_any"):
            return None
        return self._reads(content)

    async def _reads(self, content: Any) -> AsyncIterator[bytes]:

        import aiohttp
        from aiohttp.http_exceptions import HttpProcessingError

        try:
            async for part in content.iter_any():
                yield part
        except (TimeoutError, aiohttp.ClientError, HttpProcessingError) as exc:
            wrapped = httpx.ReadError(_malformed(exc) or str(exc) or type(exc).__name__)
            wrapped.__cause__ = exc
            raise _remap(wrapped, body=True) from exc

    async def aclose(self) -> None:
        with contextlib.suppress(httpx.TransportError):  # a broken connection: nothing to add
            await self._inner.aclose()


def release_now(response: httpx.Response) -> bool:
    """Close ``response`` at once when it came from this module's aiohttp transport (its
    connection goes back to the pool, no await, so no shielding from cancellation is
    needed); ``False`` for any other response: ``await response.aclose()`` it then."""
    stream = response.stream
    return isinstance(stream, _RemappedStream) and stream.release()


def body_ended(response: httpx.Response) -> bool:
    """Whether the body of ``response`` (from this module's aiohttp transport) has been
    received to its end and every byte of it already handed over or buffered, so no
    further read can wait (aiohttp's ``StreamReader.at_eof()``); ``False`` for any other
    response or when unsure."""
    stream = response.stream
    if not isinstance(stream, _RemappedStream):
        return False
    content = getattr(getattr(stream._inner, "_aiohttp_response", None), "content", None)
    at_eof = getattr(content, "at_eof", None)
    return bool(at_eof()) if callable(at_eof) else False


def fast_reads(response: httpx.Response) -> AsyncIterator[bytes] | None:
    """The response body's reads straight from aiohttp (no content decoding), when the
    response came from this module's aiohttp transport with no ``content-encoding``;
    else ``None`` (read ``response.aiter_bytes()`` then). Errors are httpx's kinds.
    """
    stream = response.stream
    if not isinstance(stream, _RemappedStream) or "content-encoding" in response.headers:
        return None
    return stream.reads()


_MALFORMED_TEXT_LIMIT = 300
"""Characters of aiohttp's parser message kept (it quotes the offending bytes)."""


def _malformed(exc: BaseException) -> str | None:
    """One line for an aiohttp parser error about the server's response (a malformed
    status line, header or chunk: ``ClientResponseError``, ``ClientPayloadError``,
    ``http_exceptions.HttpProcessingError``), else ``None``.

    aiohttp's ``ClientResponseError`` text starts with a made-up ``400`` and ends with
    the URL; only its message is kept, whitespace folded, cut at
    ``_MALFORMED_TEXT_LIMIT`` characters.
    """
    import aiohttp
    from aiohttp import http_exceptions

    if isinstance(exc, aiohttp.ClientResponseError):
        text = f"malformed response: {exc.message}"
    elif isinstance(exc, aiohttp.ClientPayloadError | http_exceptions.HttpProcessingError):
        text = f"malformed response: {type(exc).__name__}: {exc}"
    else:
        return None
    text = " ".join(text.split())
    if len(text) > _MALFORMED_TEXT_LIMIT:
        text = text[: _MALFORMED_TEXT_LIMIT - 3] + "..."
    return text


def connect_error_text(url: httpx.URL, reason: str) -> str:
    """``cannot connect to http://host:port: <reason>``: scheme, host and port of
    ``url`` only (never its user-info, path or query), the port filled in from the
    scheme when the URL has none."""
    port = url.port or (443 if url.scheme == "https" else 80)
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"cannot connect to {url.scheme}://{host}:{port}: {reason}"


def _connector_reason(cause: Any) -> str:
    """Why aiohttp could not connect (the OS error's text, e.g. ``Connection refused``),
    without aiohttp's ``host:port ssl:default`` prefix."""
    os_error = getattr(cause, "os_error", None)
    errno = getattr(os_error, "errno", None)
    if isinstance(errno, int) and errno > 0:
        return os.strerror(errno)  # asyncio's own text is "Connect call failed (host, port)"
    return str(os_error or "") or type(cause).__name__


def _remap(
    exc: httpx.TransportError, *, body: bool, url: httpx.URL | None = None
) -> httpx.TransportError:
    """httpx's error kind for the aiohttp error behind ``exc``.

    A connect failure's message names the URL's scheme, host and port and the OS
    error (:func:`connect_error_text`) instead of aiohttp's text, which says
    ``ssl:default`` even for a plain-http URL; TLS errors keep aiohttp's text.
    """
    import aiohttp

    cause = exc.__cause__
    msg = str(exc) or type(cause).__name__
    if isinstance(cause, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(msg)
    if isinstance(cause, aiohttp.SocketTimeoutError | aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(msg)
    if isinstance(cause, aiohttp.ClientConnectorError):
        if url is not None and not isinstance(cause, aiohttp.ClientSSLError):
            msg = connect_error_text(url, _connector_reason(cause))
        return httpx.ConnectError(msg)
    if body:
        return httpx.ReadError(msg)
    if isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(msg)
    if isinstance(cause, aiohttp.ClientError):
        return httpx.ConnectError(msg)
    return exc
