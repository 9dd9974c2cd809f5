"""A malformed response head is a recorded measurement, never a crash of the run.

aiohttp (the asyncio transport) raises its parser's ``ClientResponseError`` for a
bad status line, an over-long header, ``content-length: abc``, ...; httpx-aiohttp
passes it through unmapped, so it escaped ``measure_streamed`` and
``scrape_metrics`` (and a resumed run crashed again on the same row). Each kind is
written by a loopback raw-socket server on 127.0.0.1, under asyncio and trio.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import anyio
import pytest
from anyio.abc import SocketStream

from deepseekbench import EngineRoute, LiveGate, Timeouts, measure_streamed, scrape_metrics
from tests._replay import answering

pytestmark = pytest.mark.anyio

REQ = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
SSE = b'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\n'
OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
CL = b"content-length: " + str(len(SSE)).encode() + b"\r\n\r\n"

MALFORMED: dict[str, list[bytes]] = {
    "over_long_header": [OK + b"x-long: " + b"a" * 70_000 + b"\r\n" + CL + SSE],
    "over_long_status_line": [b"HTTP/1.1 200 " + b"O" * 70_000 + b"\r\n" + CL + SSE],
    "bad_status_code": [b"HTTP/1.1 abc OK\r\n" + CL + SSE],
    "not_http": [b"HELLO THERE\r\n" + CL + SSE],
    "content_length_abc": [OK + b"content-length: abc\r\n\r\n" + SSE],
    "content_length_negative": [OK + b"content-length: -1\r\n\r\n" + SSE],
    "conflicting_content_lengths": [OK + b"content-length: 5\r\n" + CL + SSE],
    "header_without_colon": [OK + b"no-colon-here\r\n" + CL + SSE],
    "space_in_header_name": [OK + b"bad name: x\r\n" + CL + SSE],
    "nul_in_header_value": [OK + b"x-a: a\x00b\r\n" + CL + SSE],
    "invalid_chunk_size": [
        OK + b"transfer-encoding: chunked\r\n\r\nzz\r\n" + SSE + b"\r\n0\r\n\r\n"
    ],
    "invalid_chunk_size_after_the_head": [
        OK + b"transfer-encoding: chunked\r\n\r\n",
        b"zz\r\n" + SSE + b"\r\n0\r\n\r\n",
    ],
    "chunked_with_content_length": [OK + b"transfer-encoding: chunked\r\n" + CL + b"zz\r\n"],
}


LENIENT_ON_TRIO = frozenset({"over_long_header", "over_long_status_line"})
"""Heads h11 (trio's parser) accepts whole: the stream is then measured normally."""

TIMEOUTS = Timeouts(first_token_s=3, total_s=6)
"""aiohttp never ends the body after a bad chunk that arrives after the head (it
drops its read timeout): only the measurement's own deadline ends it."""


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _serving(writes: list[bytes]) -> AbstractAsyncContextManager[EngineRoute]:
    """Answer every request on a loopback port with ``writes`` (0.05 s apart), then close."""

    async def answer(stream: SocketStream) -> None:
        for i, data in enumerate(writes):
            if i:
                await anyio.sleep(0.05)
            await stream.send(data)

    return answering(answer)


@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_a_malformed_response_is_a_measurement_with_an_error_kind(
    kind: str, anyio_backend: str
) -> None:
    async with _serving(MALFORMED[kind]) as route:
        with anyio.fail_after(20):
            m = await measure_streamed(REQ, route=route, gate=LiveGate(), timeouts=TIMEOUTS)
    if anyio_backend == "trio" and kind in LENIENT_ON_TRIO:
        assert m.text == "ok" and not m.errors
        return
    assert m.errors, kind
    assert m.errors[0].kind is not None
    assert all(len(e.message) < 1000 for e in m.errors)  # one line, not 70 kB of header


@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_a_malformed_metrics_response_is_a_recorded_failed_scrape(kind: str) -> None:
    async with _serving(MALFORMED[kind]) as route:
        with anyio.fail_after(20):
            snapshot = await scrape_metrics(route, gate=LiveGate())
    assert snapshot.error is not None, kind
    assert not snapshot.values
