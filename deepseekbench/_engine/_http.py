"""A minimal HTTP/1.1 server: h11 state machines driven by anyio sockets.

Why h11 + anyio: h11 is a well-kept, sans-I/O HTTP/1.1 implementation already
in the dependency tree (through httpx), so the engine needs no new package; and
anyio sockets let the same server run under asyncio and trio, like the rest of
the library. It does keep-alive, chunked streaming (``Transfer-Encoding:
chunked`` is chosen by h11 when no ``Content-Length`` is given), and lets a
fault handler close the socket mid-body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

import anyio
import h11
from anyio.abc import ByteStream

MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest request body accepted (bytes); larger gets HTTP 413."""

Headers = list[tuple[str, str]]


class ConnectionGone(Exception):
    """The peer went away (or a fault dropped the connection) mid-response."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One parsed request: method and target as text, lower-cased header names."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


class Responder:
    """Writes one response on an h11 connection; every write may raise ConnectionGone."""

    def __init__(self, stream: ByteStream, conn: h11.Connection) -> None:
        self._stream = stream
        self._conn = conn
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
        """Send one body piece (one HTTP chunk when streaming)."""
        if data:
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
        event.method.decode("ascii"), event.target.decode("latin-1"), headers, b"".join(chunks)
    )


async def serve_connection(stream: ByteStream, handler: Handler) -> None:
    """Serve requests on one connection until either side closes it."""
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            try:
                request = await _read_request(stream, conn)
            except h11.RemoteProtocolError as exc:
                await _protocol_error(stream, conn, exc)
                return
            if request is None:
                return
            responder = Responder(stream, conn)
            try:
                await handler(request, responder)
            except ConnectionGone:
                return
            if responder.dropped or conn.our_state is not h11.DONE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
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
