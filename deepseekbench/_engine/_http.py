"""A minimal HTTP/1.1 server: h11 state machines driven by anyio sockets.

Why h11 + anyio: h11 is a well-kept, sans-I/O HTTP/1.1 implementation already
in the dependency tree (through httpx), so the engine needs no new package; and
anyio sockets let the same server run under asyncio and trio, like the rest of
the library. It does keep-alive, chunked streaming (``Transfer-Encoding:
chunked`` is chosen by h11 when no ``Content-Length`` is given), and lets a
fault handler close the socket mid-body.

No request can end the server: ``HEAD`` gets the headers of the matching
``GET`` with no body, malformed request lines and oversized headers (h11's
16 KiB limit) get a 4xx and a closed connection, a peer that leaves early just
ends its connection, and any error a handler raises closes that one connection
(a 500 first when nothing was sent yet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

import anyio
import h11
from anyio.abc import ByteStream

MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest request body accepted (bytes); larger gets HTTP 413."""

Headers = list[tuple[str, str]]

_LINGER_S = 1.0  # longest wait for a refused request's sender to stop (s)
_LINGER_READS = 64  # reads of up to 64 KiB discarded after a refusal

_log = logging.getLogger(__name__)


class ConnectionGone(Exception):
    """The peer went away (or a fault dropped the connection) mid-response."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One parsed request: method and target as text, lower-cased header names.

    ``arrival_s``: ``time.perf_counter()`` when the request head was parsed (s).
    """

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    arrival_s: float = 0.0


class Responder:
    """Writes one response on an h11 connection; every write may raise ConnectionGone."""

    def __init__(self, stream: ByteStream, conn: h11.Connection, *, head: bool = False) -> None:
        self._stream = stream
        self._conn = conn
        self._head = head  # a HEAD request: headers only, every body write skipped
        self.started = False
        self.dropped = False

    async def _send(self, event: h11.Event) -> None:
        data = self._conn.send(event)
        if data:
            try:
                await self._stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise ConnectionGone from exc

    async def start(self, status: int, headers: Headers) -> None:
        """Send the status line and headers (no Content-Length: body is chunked)."""
        self.started = True
        await self._send(h11.Response(status_code=status, headers=headers))

    async def write(self, data: bytes) -> None:
        """Send one body piece (one HTTP chunk when streaming); nothing for HEAD."""
        if data and not self._head:
            await self._send(h11.Data(data=data))

    async def end(self) -> None:
        """Finish the body."""
        await self._send(h11.EndOfMessage())

    async def full(self, status: int, headers: Headers, body: bytes) -> None:
        """Send a complete response with a Content-Length."""
        await self.start(status, [*headers, ("content-length", str(len(body)))])
        await self.write(body)
        await self.end()

    async def drop(self) -> None:
        """Close the socket now, mid-response (the dropped-connection fault)."""
        self.dropped = True
        await self._stream.aclose()


Handler = Callable[[HttpRequest, Responder], Awaitable[None]]


async def _next_event(stream: ByteStream, conn: h11.Connection) -> h11.Event | type[h11.PAUSED]:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return cast("h11.Event | type[h11.PAUSED]", event)
        try:
            data = await stream.receive(65536)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            data = b""
        conn.receive_data(data)


async def _read_request(stream: ByteStream, conn: h11.Connection) -> HttpRequest | None:
    event = await _next_event(stream, conn)
    if not isinstance(event, h11.Request):
        return None
    arrival = time.perf_counter()
    chunks: list[bytes] = []
    size = 0
    while True:
        ev = await _next_event(stream, conn)
        if isinstance(ev, h11.Data):
            size += len(ev.data)
            if size > MAX_BODY_BYTES:
                raise h11.RemoteProtocolError("request body too large", 413)
            chunks.append(bytes(ev.data))
        elif isinstance(ev, h11.EndOfMessage):
            break
        else:
            return None
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
    return HttpRequest(
        event.method.decode("ascii"),
        event.target.decode("latin-1"),
        headers,
        b"".join(chunks),
        arrival,
    )


async def serve_connection(stream: ByteStream, handler: Handler) -> None:
    """Serve requests on one connection until either side closes it.

    Never raises (cancellation aside): whatever goes wrong ends this connection only.
    """
    conn = h11.Connection(h11.SERVER)
    async with stream:
        try:
            await _serve(stream, conn, handler)
        except (ConnectionGone, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        except Exception:
            _log.exception("request handling failed; connection closed")


async def _serve(stream: ByteStream, conn: h11.Connection, handler: Handler) -> None:
    while True:
        try:
            request = await _read_request(stream, conn)
        except h11.RemoteProtocolError as exc:
            await _protocol_error(stream, conn, exc)
            return
        if request is None:
            return
        responder = Responder(stream, conn, head=request.method == "HEAD")
        try:
            await handler(request, responder)
        except ConnectionGone:
            return
        except Exception:
            if not responder.started and not responder.dropped:
                await _internal_error(stream, conn)
            raise
        if responder.dropped or conn.our_state is not h11.DONE:
            return
        try:
            conn.start_next_cycle()
        except h11.LocalProtocolError:
            return


async def _internal_error(stream: ByteStream, conn: h11.Connection) -> None:
    body = b'{"error":{"message":"internal engine error","type":"InternalServerError"}}'
    try:
        await Responder(stream, conn).full(500, [("content-type", "application/json")], body)
    except (ConnectionGone, h11.LocalProtocolError):
        return


async def _protocol_error(
    stream: ByteStream, conn: h11.Connection, exc: h11.RemoteProtocolError
) -> None:
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = b'{"error":{"message":"malformed HTTP request","type":"invalid_request_error"}}'
    status = exc.error_status_hint
    try:
        responder = Responder(stream, conn)
        await responder.full(status, [("content-type", "application/json")], body)
    except (ConnectionGone, h11.LocalProtocolError):
        return
    await _linger(stream)


async def _linger(stream: ByteStream) -> None:
    """Half-close, then read what the peer still sends (bounded) before closing, so
    unread input does not turn the close into a reset that loses the error response."""
    with anyio.move_on_after(_LINGER_S):
        try:
            await stream.send_eof()
            for _ in range(_LINGER_READS):
                await stream.receive(65536)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
