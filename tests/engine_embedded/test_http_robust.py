"""No request ends the engine: HEAD, unknown methods, malformed heads, oversized headers,
early disconnects, a failing handler; the request parser fuzzed with hypothesis; and the
ground-truth timelines served over HTTP."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable

import anyio
import h11
import httpx
import orjson
import pytest
from anyio.abc import ByteStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Found

from deepseekbench import EmbeddedEngine, EngineConfig
from deepseekbench._engine import FAST_COSTS
from deepseekbench._engine._http import (
    HttpRequest,
    Responder,
    _read_request,
    serve_connection,
)

# -- an in-memory byte stream: the parser fuzzed without sockets -------------------


class FakeStream(ByteStream):
    """Hands out ``incoming`` piece by piece, then end-of-stream; keeps what was sent."""

    def __init__(self, incoming: list[bytes]) -> None:
        self.incoming = list(incoming)
        self.sent = b""
        self.closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.closed:
            raise anyio.ClosedResourceError
        if not self.incoming:
            raise anyio.EndOfStream
        return self.incoming.pop(0)

    async def send(self, item: bytes) -> None:
        if self.closed:
            raise anyio.ClosedResourceError
        self.sent += item

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        self.closed = True


async def engine_like(request: HttpRequest, responder: Responder) -> None:
    """Answers like the engine's GET routes; raises for one path (a handler bug)."""
    if request.target == "/boom":
        raise RuntimeError("a handler bug")
    if request.target.startswith("/stream"):
        await responder.start(200, [("content-type", "text/event-stream")])
        await responder.write(b"data: [DONE]\n\n")
        await responder.end()
        return
    await responder.full(200, [("content-type", "application/json")], b'{"status":"ok"}')


Handler = Callable[[HttpRequest, Responder], Awaitable[None]]
Server = Callable[[ByteStream, Handler], Awaitable[None]]


def run_server(server: Server, pieces: list[bytes]) -> bytes:
    stream = FakeStream(pieces)

    async def main() -> None:
        with anyio.fail_after(5):
            await server(stream, engine_like)

    anyio.run(main)
    return stream.sent


def answered_well(sent: bytes) -> bool:
    """Every answer the server wrote is a sequence of parseable HTTP/1.1 responses."""
    if not sent:
        return True
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
    client.send(h11.EndOfMessage())
    try:
        client.receive_data(sent)
        event = client.next_event()
    except h11.RemoteProtocolError:
        return False
    return isinstance(event, h11.Response | h11.InformationalResponse)


TOKENS = st.sampled_from(
    [
        b"GET",
        b"HEAD",
        b"POST",
        b"BREW",
        b"",
        b" ",
        b"/health",
        b"/stream",
        b"/boom",
        b"HTTP/1.1",
        b"HTTP/1.0",
        b"HTTP/9",
        b"\r\n",
        b"\n",
        b"Host: x",
        b"Content-Length: 3",
        b"Content-Length: -1",
        b"Transfer-Encoding: chunked",
        b"0\r\n\r\n",
        b"abc",
        b"\x00\xff",
        b":",
        b"x" * 20000,
    ]
)
HEADS = st.one_of(
    st.lists(TOKENS, max_size=14).map(b"".join),
    st.binary(max_size=300),
)
INPUTS = st.lists(HEADS, min_size=0, max_size=3)


def never_raises(server: Server, pieces: list[bytes]) -> None:
    sent = run_server(server, pieces)
    assert answered_well(sent), sent[:200]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(INPUTS)
def test_fuzzed_requests_never_raise_and_get_a_proper_answer(pieces: list[bytes]) -> None:
    never_raises(serve_connection, pieces)


async def unguarded(stream: ByteStream, handler: Handler) -> None:
    """A deliberately broken server: the parser's and the handler's errors escape."""
    conn = h11.Connection(h11.SERVER)
    request = await _read_request(stream, conn)
    if request is not None:
        await handler(request, Responder(stream, conn))


def test_the_fuzz_property_finds_a_crash_in_an_unguarded_server() -> None:
    @settings(max_examples=2000, deadline=None, database=None, report_multiple_bugs=False)
    @given(INPUTS)
    def prop(pieces: list[bytes]) -> None:
        try:
            never_raises(unguarded, pieces)
        except Exception as exc:
            raise Found from exc

    with pytest.raises(Found):
        prop()


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n", 200),
        (b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", 200),  # engine_like has no 405
        (b"NOT A REQUEST\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431),
        (b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n", 500),
    ],
)
def test_each_bad_request_gets_an_answer(head: bytes, status: int) -> None:
    pieces = [head[i : i + 65536] for i in range(0, len(head), 65536)]  # as a socket reads
    sent = run_server(serve_connection, pieces)
    assert sent.startswith(b"HTTP/1.1 %d " % status), sent[:100]


def test_head_gets_headers_and_no_body() -> None:
    sent = run_server(serve_connection, [b"HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\n"])
    assert sent.startswith(b"HTTP/1.1 200 ")
    assert b"[DONE]" not in sent


def test_an_early_disconnect_ends_only_that_connection() -> None:
    for pieces in (
        [b"GET /health HTTP/1.1\r\nHo"],
        [b"POST /x HTTP/1.1\r\nContent-Length: 9\r\n\r\nab"],
    ):
        run_server(serve_connection, pieces)  # returns: no exception, no hang


# -- the engine over real sockets -------------------------------------------------


def _raw(port: int, data: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if not read:
            return b""
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


@pytest.mark.anyio
async def test_engine_survives_head_junk_and_disconnects_and_serves_timelines() -> None:
    config = EngineConfig(cost=FAST_COSTS, record_send_times=True)
    async with EmbeddedEngine(config) as engine:
        port = engine.port
        head = await anyio.to_thread.run_sync(
            _raw, port, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")  # no body
        brew = b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n"
        unknown = await anyio.to_thread.run_sync(_raw, port, brew)
        assert unknown.startswith(b"HTTP/1.1 405 ")
        big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"
        oversized = await anyio.to_thread.run_sync(_raw, port, big)
        assert oversized.startswith(b"HTTP/1.1 431 ")
        junk = await anyio.to_thread.run_sync(_raw, port, b"\x00\xffnot http\r\n\r\n")
        assert junk.startswith(b"HTTP/1.1 400 ")
        await anyio.to_thread.run_sync(
            lambda: _raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Len", read=False)
        )
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root, timeout=30) as client:
            body = {
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "max_tokens": 4,
            }
            r = await client.post(
                "/v1/chat/completions", json=body, headers={"x-request-id": "req-7"}
            )
            assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
            timelines = (await client.get("/v1/timelines")).json()
    (line,) = [t for t in timelines["data"] if t["request_id"] == "req-7"]
    assert line["id"] == r.headers["x-request-id"]
    times = [c["t_s"] for c in line["chunks"]]
    assert line["arrival_s"] <= times[0] and times == sorted(times)
    assert sum(c["tokens"] for c in line["chunks"]) == 4
    assert "perf" in timelines["clock"] or "MONOTONIC" in timelines["clock"]


@pytest.mark.anyio
async def test_timelines_need_recording() -> None:
    async with EmbeddedEngine(EngineConfig(cost=FAST_COSTS)) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root) as client:
            r = await client.get("/v1/timelines")
    assert r.status_code == 404 and orjson.loads(r.content)["error"]["code"] == "not_recorded"


def test_curl_head_against_serve_and_the_server_keeps_serving() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepseekbench", "serve", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        url = banner.split(" at ", 1)[1].split()[0].removesuffix("/v1")
        assert url.startswith("http://127.0.0.1:")
        if shutil.which("curl"):
            out = subprocess.run(
                ["curl", "-sS", "-I", "--max-time", "10", f"{url}/health"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        else:  # the same request curl -I sends
            port = int(url.rsplit(":", 1)[1])
            out = _raw(port, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n").decode()
        assert out.startswith("HTTP/1.1 200")
        for _ in range(2):  # still serving
            assert httpx.get(f"{url}/health", timeout=10).json() == {"status": "ok"}
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)
