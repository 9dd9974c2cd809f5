"""A loopback HTTP/1.1 server that replays a scripted response, write by write.

Built on a raw anyio TCP listener (runs under asyncio and trio). Each write is
sent after its delay as its own ``send`` (TCP_NODELAY is on for anyio sockets),
so reads on the client side see the case's segmentation. Used by the shared
case replays, the fault tests and ``benchmarks/bench_client_overhead.py``.

Usage::

    async with replay_server(Script.from_case(case)) as server:
        m = await measure_streamed(req, route=EngineRoute(base_url=server.base_url, ...), ...)
        assert server.connections == 1
"""

from __future__ import annotations

import http
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.abc import SocketAttribute, SocketStream

from deepseekbench import EngineRoute

__all__ = ["RecordedRequest", "ReplayServer", "Script", "Write", "replay_server"]


@dataclass(frozen=True)
class Write:
    """``data`` bytes sent after waiting ``delay_ms`` (ms) since the previous write."""

    delay_ms: float
    data: bytes


@dataclass(frozen=True)
class Script:
    """One scripted HTTP response.

    ``framing``: ``"chunked"`` (each write is one chunk; a terminating chunk
    ends the body unless ``abort``) or ``"close"`` (body delimited by closing
    the connection). ``abort``: close without the terminating chunk (a broken
    body). ``head_delay_ms``: wait before sending the status line and headers.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    writes: tuple[Write, ...] = ()
    framing: Literal["chunked", "close"] = "chunked"
    abort: bool = False
    head_delay_ms: float = 0.0

    @classmethod
    def from_case(cls, case: dict[str, Any]) -> Script:
        """Build from a shared case (``status``, ``headers``, ``writes`` with text/hex)."""
        writes = []
        for w in case["writes"]:
            data = bytes.fromhex(w["hex"]) if "hex" in w else w["text"].encode("utf-8")
            writes.append(Write(float(w.get("delay_ms", 0)), data))
        return cls(status=int(case["status"]), headers=dict(case["headers"]), writes=tuple(writes))

    @classmethod
    def sse(cls, frames: Iterable[str | bytes], *, delay_ms: float = 0.0, **kw: Any) -> Script:
        """A 200 event-stream response with one write per frame, each after ``delay_ms``."""
        writes = tuple(
            Write(delay_ms, f.encode("utf-8") if isinstance(f, str) else f) for f in frames
        )
        return cls(writes=writes, **kw)

    def body(self) -> bytes:
        """All writes concatenated."""
        return b"".join(w.data for w in self.writes)


@dataclass
class RecordedRequest:
    """A request the server received: method, path, lower-cased headers, raw body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


ScriptSource = Script | Callable[[RecordedRequest], Script]


@dataclass
class ReplayServer:
    """A running replay server; ``connections`` and ``requests`` are what it saw."""

    host: str
    port: int
    source: ScriptSource
    connections: int = 0
    requests: list[RecordedRequest] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://127.0.0.1:<port>/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    async def _handle(self, stream: SocketStream) -> None:
        self.connections += 1
        async with stream:
            try:
                request = await _read_request(stream)
                if request is None:
                    return
                self.requests.append(request)
                script = self.source(request) if callable(self.source) else self.source
                await _send_script(stream, script)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
                pass


async def _read_request(stream: SocketStream) -> RecordedRequest | None:
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            buf += await stream.receive()
        except anyio.EndOfStream:
            return None
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        rest += await stream.receive()
    return RecordedRequest(method=method, path=path, headers=headers, body=rest[:length])


async def _send_script(stream: SocketStream, script: Script) -> None:
    if script.head_delay_ms:
        await anyio.sleep(script.head_delay_ms / 1000)
    try:
        reason = http.HTTPStatus(script.status).phrase
    except ValueError:
        reason = "Status"
    head = [f"HTTP/1.1 {script.status} {reason}"]
    head += [f"{k}: {v}" for k, v in script.headers.items()]
    if script.framing == "chunked":
        head.append("transfer-encoding: chunked")
    head.append("connection: close")
    await stream.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    for write in script.writes:
        if write.delay_ms:
            await anyio.sleep(write.delay_ms / 1000)
        if not write.data:
            continue
        if script.framing == "chunked":
            await stream.send(b"%x\r\n%s\r\n" % (len(write.data), write.data))
        else:
            await stream.send(write.data)
    if script.framing == "chunked" and not script.abort:
        await stream.send(b"0\r\n\r\n")


@asynccontextmanager
async def replay_server(source: ScriptSource) -> AsyncIterator[ReplayServer]:
    """Serve ``source`` (a Script, or a function of the request) on 127.0.0.1, a free port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    server = ReplayServer(host="127.0.0.1", port=port, source=source)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server._handle)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


async def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port: int = listener.extra(SocketAttribute.local_port)
    await listener.aclose()
    return port


async def skip_request(stream: SocketStream, buf: bytearray) -> bool:
    """Read one request (head + content-length body) from ``stream`` into nothing,
    keeping what follows it in ``buf``; False at EOF."""
    while b"\r\n\r\n" not in buf:
        try:
            buf += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return False
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        rest += await stream.receive()
    buf[:] = rest[length:]
    return True


@asynccontextmanager
async def answering(
    answer: Callable[[SocketStream], Awaitable[None]], *, model: str = "m"
) -> AsyncIterator[EngineRoute]:
    """A loopback route whose server reads each request and lets ``answer`` write the
    raw response bytes (any head, any body, any pacing); a client that hangs up ends
    the answer quietly."""

    async def handle(stream: SocketStream) -> None:
        buf = bytearray()
        async with stream:
            if not await skip_request(stream, buf):
                return
            try:
                await answer(stream)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model=model)
        tg.cancel_scope.cancel()
