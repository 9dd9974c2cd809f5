"""Wire-level fault kinds: compressed bodies, data after ``[DONE]``, close-delimited
bodies and ``connection: close``, and the SSE fields a chat stream rarely uses.

Every socket test talks to a loopback server on 127.0.0.1 and runs on asyncio
(aiohttp transport) and trio (httpcore transport); decoder-level members run
under several framings (LF, CRLF, CR, 3-byte and 1-byte reads).
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from deepseekbench import (
    Dialect,
    EngineRoute,
    LiveGate,
    StreamMeasurement,
    Timeouts,
    measure_streamed,
    pool_limits,
)
from deepseekbench._measure._accumulator import StreamAccumulator
from deepseekbench._measure._measure import _DECODERS, _drain
from tests._replay import RecordedRequest, Script, Write, replay_server, skip_request
from tests.measure.test_stream_kinds import DONE, FRAMINGS, GOOD, _framed, chunk, kind, usage

ROUTE = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m")
REQ = {"messages": [{"role": "user", "content": "x"}]}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _measure(base_url: str, **kw: object) -> StreamMeasurement:
    route = EngineRoute(base_url=base_url, model="m")
    return await measure_streamed(REQ, route=route, gate=LiveGate(), **kw)  # type: ignore[arg-type]


def fold_all(frames: list[str], framing: str = "lf") -> StreamMeasurement:
    """Decode and fold ``frames`` as ``_read_stream`` does, including the drain after [DONE]."""
    acc = StreamAccumulator(Dialect.auto, 0)
    decoder = acc.decoder()
    reads = _framed("".join(frames).encode("utf-8"), framing)
    clock = itertools.count(1_000_000, 1_000_000)

    async def rest(parts: list[bytes]) -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    for i, read in enumerate(reads):
        for event in decoder.feed(read, next(clock)):
            acc.on_event(event)
            if acc.done:
                anyio.run(_drain, rest(reads[i + 1 :]), decoder)
                acc.ignored_lines += decoder.lines_after_end
                return acc.measurement(ROUTE)
    acc.end_of_stream(decoder)
    return acc.measurement(ROUTE)


# -- 1. compressed streams ---------------------------------------------------------


def _gzip() -> zlib._Compress:
    return zlib.compressobj(wbits=31)


def _gzip_first_event() -> bytes:
    """The first good event, gzip-compressed and flushed (Z_SYNC_FLUSH)."""
    co = _gzip()
    return co.compress(GOOD[0].encode()) + co.flush(zlib.Z_SYNC_FLUSH)


def _gzip_script(*writes: Write, abort: bool = False) -> Script:
    """An event stream sent with ``content-encoding: gzip``."""
    headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    return Script(headers=headers, writes=writes, abort=abort)


def _compressed_writes(
    frames: list[str], make: Callable[[], zlib._Compress], delay_ms: float
) -> tuple[Write, ...]:
    """One write per event, each flushed (Z_SYNC_FLUSH) as a streaming compressor does."""
    co = make()
    writes = [
        Write(delay_ms, co.compress(f.encode()) + co.flush(zlib.Z_SYNC_FLUSH)) for f in frames
    ]
    return (*writes, Write(0, co.flush()))


ENCODERS: dict[str, Callable[[], zlib._Compress]] = {
    "gzip": _gzip,
    "deflate": zlib.compressobj,  # zlib-wrapped (RFC 1950), as the HTTP spec says
    "deflate-raw": lambda: zlib.compressobj(wbits=-15),  # raw deflate, as some servers send
}


@pytest.mark.anyio
@pytest.mark.parametrize("coding", list(ENCODERS))
async def test_a_compressed_stream_is_decoded_and_timed_per_event(coding: str) -> None:
    writes = _compressed_writes([*GOOD, DONE], ENCODERS[coding], delay_ms=60)
    header = coding.split("-")[0]
    script = Script(
        headers={"content-type": "text/event-stream", "content-encoding": header}, writes=writes
    )
    async with replay_server(script) as server:
        m = await _measure(server.base_url)
    assert kind(m) is None, m.errors
    assert (m.text, m.completion_tokens, m.finish_reason, m.done) == ("Hello", 2, "stop", True)
    assert m.content_encoding == header and m.sse_ignored_lines == 0
    # each event was its own compressed write, 60 ms apart: two token chunks, one gap
    assert len(m.chunk_arrival_ms) == 2 and m.itl_ms[0] >= 50
    assert m.ttft_ms is not None and m.ttft_ms >= 50


@pytest.mark.anyio
async def test_an_event_is_stamped_when_its_decoded_bytes_are_complete() -> None:
    """The first event's compressed bytes come in two writes 200 ms apart: the first
    half decodes to part of the event, so the token arrives with the second half."""
    co = _gzip()
    first = co.compress(GOOD[0].encode()) + co.flush(zlib.Z_SYNC_FLUSH)
    co2 = zlib.decompressobj(wbits=31)
    cut = len(first) // 2
    assert b"\n\n" not in co2.decompress(first[:cut])  # the cut leaves the event incomplete
    rest = b"".join(co.compress(f.encode()) for f in [*GOOD[1:], DONE]) + co.flush()
    writes = (Write(0, first[:cut]), Write(200, first[cut:]), Write(0, rest))
    script = Script(
        headers={"content-type": "text/event-stream", "content-encoding": "gzip"}, writes=writes
    )
    async with replay_server(script) as server:
        m = await _measure(server.base_url)
    assert kind(m) is None and m.text == "Hello", m.errors
    assert m.ttft_ms is not None and m.ttft_ms >= 190


@pytest.mark.anyio
async def test_a_buffering_compressor_puts_its_delay_into_ttft() -> None:
    """A server that compresses the whole answer before sending: every event arrives
    (decoded) at the end, so TTFT is the time the client could first read a token."""
    co = _gzip()
    body = co.compress("".join([*GOOD, DONE]).encode()) + co.flush()
    script = Script(
        headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
        writes=(Write(150, body),),
    )
    async with replay_server(script) as server:
        m = await _measure(server.base_url)
    assert kind(m) is None and m.text == "Hello", m.errors
    assert m.ttft_ms is not None and m.ttft_ms >= 140
    # one write, one read: every event completed by it bears its stamp, the last as the first
    assert m.chunk_arrival_ms == [m.ttft_ms] * len(m.chunk_arrival_ms) and m.e2e_ms == m.ttft_ms


@pytest.mark.anyio
@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "x-custom", "gzip, x-custom"])
async def test_an_encoding_without_a_decoder_is_a_typed_error_not_garbage(coding: str) -> None:
    if all(c.strip() in _DECODERS for c in coding.split(",")):
        pytest.skip(f"{coding} is decodable with the installed httpx")
    junk = bytes(range(256)) + b"data: " + GOOD[0].encode()  # undecoded bytes, even an event
    script = Script(
        headers={"content-type": "text/event-stream", "content-encoding": coding},
        writes=(Write(0, junk),),
    )
    async with replay_server(script) as server:
        m = await _measure(server.base_url)
    assert kind(m) == "content_encoding", m.errors
    assert m.text == "" and m.ttft_ms is None and m.events == 0
    assert m.content_encoding == coding


@pytest.mark.anyio
async def test_a_corrupt_compressed_body_is_a_typed_error_with_what_came_before() -> None:
    script = _gzip_script(Write(0, _gzip_first_event()), Write(20, b"\xff" * 64))
    async with replay_server(script) as server:
        m = await _measure(server.base_url)
    assert kind(m) == "content_encoding" and m.text == "Hel", m.errors


@pytest.mark.anyio
async def test_a_compressed_stream_cut_short_is_truncated() -> None:
    script = _gzip_script(Write(0, _gzip_first_event()), abort=True)
    async with replay_server(script) as server:
        m = await _measure(server.base_url)
    assert kind(m) == "truncated" and m.text == "Hel", m.errors


@pytest.mark.anyio
async def test_the_client_asks_for_an_uncompressed_stream() -> None:
    async with replay_server(Script.sse([*GOOD, DONE])) as server:
        m = await _measure(server.base_url)
    assert kind(m) is None and m.content_encoding is None
    assert server.requests[0].headers.get("accept-encoding") == "identity"


# -- 2. data after [DONE] ------------------------------------------------------------


AFTER_DONE = [
    ([usage(7)], 1),  # usage after [DONE]: not read
    ([DONE], 1),  # a second [DONE]
    (["garbage\n\n"], 1),
    (["event: ping\ndata: {}\n\n"], 2),
    (["data: a\ndata: b\n\n"], 2),
    ([": keep-alive\n\n"], 0),  # a comment is never counted
    (['data: {"error": {"message": "late"}}\n\n'], 1),  # not an error of this answer
    (['error: {"message": "late"}\n\n'], 1),
    ([chunk("MORE", finish="length")], 1),
    (['data: {"choices": []}'], 1),  # unterminated at the end of the body
    ([usage(7), DONE, "junk"], 3),
]


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize(("after", "count"), AFTER_DONE)
def test_nothing_after_done_is_read_but_every_line_is_counted(
    after: list[str], count: int, framing: str
) -> None:
    m = fold_all([*GOOD, DONE, *after], framing)
    assert kind(m) is None, m.errors
    assert (m.text, m.completion_tokens, m.finish_reason) == ("Hello", 2, "stop")
    assert m.sse_ignored_lines == count
    assert m.events == 4  # the three chunks and the first [DONE]


@pytest.mark.anyio
@pytest.mark.parametrize(("after", "count"), [AFTER_DONE[0], AFTER_DONE[1], AFTER_DONE[-1]])
async def test_data_after_done_over_a_socket(after: list[str], count: int) -> None:
    async with replay_server(Script.sse([*GOOD, DONE, *after])) as server:
        m = await _measure(server.base_url)
    assert kind(m) is None and m.completion_tokens == 2 and m.text == "Hello", m.errors
    assert m.sse_ignored_lines == count


# -- 3. close-delimited bodies and connection: close -----------------------------------


@dataclass
class Reply:
    """One response: the head (status line and headers), the body writes, and whether
    the server closes the connection after it (the body's end when close-delimited)."""

    head: str
    writes: list[bytes]
    close: bool
    chunked: bool = False


@dataclass
class KeepAliveServer:
    """Serves several requests per connection, as a reply says; counts connections."""

    reply: Callable[[int], Reply]
    port: int = 0
    connections: int = 0
    requests: list[RecordedRequest] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def handle(self, stream: SocketStream) -> None:
        self.connections += 1
        async with stream:
            buf = bytearray()
            try:
                while await skip_request(stream, buf):
                    self.requests.append(RecordedRequest("POST", "/", {}, b""))
                    reply = self.reply(len(self.requests))
                    await stream.send(reply.head.encode() + b"\r\n\r\n")
                    for data in reply.writes:
                        framed = b"%x\r\n%s\r\n" % (len(data), data) if reply.chunked else data
                        await stream.send(framed)
                    if reply.chunked:
                        await stream.send(b"0\r\n\r\n")
                    if reply.close:
                        return
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return


@asynccontextmanager
async def keepalive_server(reply: Callable[[int], Reply]) -> AsyncIterator[KeepAliveServer]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = KeepAliveServer(reply, port=listener.extra(SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


SSE_HEAD = "content-type: text/event-stream\r\ncache-control: no-cache"
CLOSE_DELIMITED = {
    "http/1.0": "HTTP/1.0 200 OK\r\n" + SSE_HEAD,
    "http/1.1 close": "HTTP/1.1 200 OK\r\n" + SSE_HEAD + "\r\nconnection: close",
    "http/1.0 keep-alive asked, no length": "HTTP/1.0 200 OK\r\n"
    + SSE_HEAD
    + "\r\nconnection: keep-alive",
}


async def _twice(server: KeepAliveServer) -> list[StreamMeasurement]:
    gate = LiveGate()
    async with gate.client(limits=pool_limits(1)) as client:
        route = EngineRoute(base_url=server.base_url, model="m")
        timeouts = Timeouts(total_s=10)
        return [
            await measure_streamed(REQ, route=route, gate=gate, client=client, timeouts=timeouts)
            for _ in range(2)
        ]


@pytest.mark.anyio
@pytest.mark.parametrize("head", list(CLOSE_DELIMITED))
async def test_a_close_delimited_stream_ending_in_done_is_complete_and_not_reused(
    head: str,
) -> None:
    frames = [f.encode() for f in [*GOOD, DONE]]
    async with keepalive_server(lambda _: Reply(CLOSE_DELIMITED[head], frames, True)) as server:
        ms = await _twice(server)
    for m in ms:
        assert kind(m) is None, m.errors
        assert (m.text, m.completion_tokens, m.done, m.stale_connection_retries) == (
            "Hello",
            2,
            True,
            0,
        )
    assert server.connections == 2


@pytest.mark.anyio
@pytest.mark.parametrize("head", list(CLOSE_DELIMITED))
@pytest.mark.parametrize(
    ("frames", "text", "want"),
    [
        ([chunk("Hel"), chunk("lo")], "Hello", "truncated"),  # no finish, no [DONE]
        ([chunk("Hel"), 'data: {"choices": [{"index": 0, "delta": {"conte'], "Hel", "truncated"),
        ([chunk("Hel"), "data: [DO"], "Hel", "truncated"),
        ([*GOOD], "Hello", None),  # finish reason and usage came: complete (as sse/12's rule)
    ],
)
async def test_a_close_delimited_stream_cut_before_done(
    head: str, frames: list[str], text: str, want: str | None
) -> None:
    writes = [f.encode() for f in frames]
    async with keepalive_server(lambda _: Reply(CLOSE_DELIMITED[head], writes, True)) as server:
        ms = await _twice(server)
    for m in ms:
        assert (kind(m), m.text, m.done) == (want, text, False), m.errors
        assert m.stale_connection_retries == 0
    assert server.connections == 2


@pytest.mark.anyio
@pytest.mark.parametrize(("close", "connections"), [(True, 2), (False, 1)])
async def test_connection_close_on_a_chunked_stream_is_honoured(
    close: bool, connections: int
) -> None:
    """``connection: close`` on a chunked body: a new connection for the next request
    (no stale-connection retry); without it the connection is reused (the control)."""
    head = "HTTP/1.1 200 OK\r\n" + SSE_HEAD + "\r\ntransfer-encoding: chunked"
    if close:
        head += "\r\nconnection: close"
    frames = [f.encode() for f in [*GOOD, DONE]]
    async with keepalive_server(lambda _: Reply(head, frames, close, chunked=True)) as server:
        ms = await _twice(server)
    for m in ms:
        assert kind(m) is None and m.text == "Hello" and m.stale_connection_retries == 0
    assert server.connections == connections


@pytest.mark.anyio
async def test_a_server_talking_on_after_done_loses_its_connection_not_the_pool() -> None:
    """After [DONE] the body is drained up to 64 KiB; past that the connection is
    closed (not returned half-read), so a pool of one still serves the next request."""
    head = "HTTP/1.1 200 OK\r\n" + SSE_HEAD + "\r\ntransfer-encoding: chunked"
    frames = [f.encode() for f in [*GOOD, DONE]] + [b"data: junk\n\n" * 1024] * 12

    async with keepalive_server(lambda _: Reply(head, frames, False, chunked=True)) as server:
        ms = await _twice(server)
    for m in ms:
        assert kind(m) is None and m.text == "Hello", m.errors
        assert m.sse_ignored_lines > 0
    assert server.connections == 2


# -- 4. SSE fields: id, retry, event types, comments, BOM --------------------------------


SSE_FIELDS = [
    # (frames, text, ignored lines)
    ([f"id: {i}\n" + f for i, f in enumerate(GOOD)], "Hello", 0),
    (["retry: 3000\n" + GOOD[0], *GOOD[1:]], "Hello", 0),
    (["id: 7\nretry: 10\nevent: message\n" + GOOD[0], *GOOD[1:]], "Hello", 0),
    (["retry: soon\n" + GOOD[0], *GOOD[1:]], "Hello", 1),  # not digits: ignored
    (["id: a\0b\n" + GOOD[0], *GOOD[1:]], "Hello", 1),  # NUL in id: ignored
    (["event:\n" + GOOD[0], *GOOD[1:]], "Hello", 0),  # empty type = message
    (["event: ping\n" + chunk("X"), *GOOD], "Hello", 2),  # another type: not the answer
    (["event: Message\n" + chunk("X"), *GOOD], "Hello", 2),  # types are case-sensitive
    (["event: usage\ndata: {}\ndata: {}\n\n", *GOOD], "Hello", 3),
    ([": open\n", GOOD[0].replace("data: ", ": c\ndata: "), *GOOD[1:]], "Hello", 0),
    (["\ufeff" + GOOD[0], *GOOD[1:]], "Hello", 0),  # BOM at the start
    ([GOOD[0], "\ufeff" + GOOD[1], GOOD[2]], "Hel", 1),  # BOM later: part of a field name
]


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize(("frames", "text", "ignored"), SSE_FIELDS)
def test_sse_fields_follow_the_whatwg_rules(
    frames: list[str], text: str, ignored: int, framing: str
) -> None:
    m = fold_all([*frames, DONE], framing)
    assert (m.text, m.sse_ignored_lines) == (text, ignored), m.errors
    assert m.completion_tokens == 2


@pytest.mark.anyio
@pytest.mark.parametrize(("frames", "text", "ignored"), [SSE_FIELDS[i] for i in (2, 6, 10)])
async def test_sse_fields_over_a_socket(frames: list[str], text: str, ignored: int) -> None:
    async with replay_server(Script.sse([*frames, DONE])) as server:
        m = await _measure(server.base_url)
    assert (kind(m), m.text, m.sse_ignored_lines) == (None, text, ignored), m.errors
