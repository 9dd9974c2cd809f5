"""A pooled keep-alive connection the server closed before answering is retried once.

llama-server (cpp-httplib) and other engines close idle keep-alive connections
after a few seconds; a client that reuses such a connection just as the server
closes it gets "Server disconnected without sending a response". Nothing was
answered, so the measurement re-sends once on a new connection (recorded in
``stale_connection_retries``) instead of recording a spurious ``connect`` error.
The server here answers the first request of each connection and closes the
connection, unanswered, on the second: deterministic stale reuse.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import orjson
import pytest
from anyio.abc import SocketStream

from deepseekbench import (
    EngineRoute,
    ErrorKind,
    LiveGate,
    measure_streamed,
    metrics_delta,
    scrape_metrics,
)
from deepseekbench._net._bounded import BoundedReadError, BoundedResponse, read_bounded
from tests._replay import skip_request

pytestmark = pytest.mark.anyio

REQ = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
BODY = (
    b"data: "
    + orjson.dumps({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]})
    + b"\n\ndata: "
    + orjson.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    + b"\n\ndata: [DONE]\n\n"
)
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"content-length: " + str(len(BODY)).encode() + b"\r\n\r\n"
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def _serving(handle: Callable[[SocketStream], Awaitable[None]]) -> AsyncIterator[EngineRoute]:
    """Serve connections with ``handle`` on a loopback port; yields a route to it."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model="m")
        tg.cancel_scope.cancel()


class OneAnswerPerConnection:
    """Answers each connection's first request; closes on its second, unanswered."""

    def __init__(self, answer: bytes = HEAD + BODY) -> None:
        self.answer = answer
        self.connections = 0
        self.answered = 0

    async def handle(self, stream: SocketStream) -> None:
        self.connections += 1
        buf = bytearray()
        async with stream:
            if not await skip_request(stream, buf):
                return
            await stream.send(self.answer)
            self.answered += 1
            await skip_request(stream, buf)  # the reused connection's request: dropped


async def test_a_stale_pooled_connection_is_retried_once_on_a_new_one() -> None:
    server = OneAnswerPerConnection()
    gate = LiveGate()
    async with _serving(server.handle) as route, gate.client() as client:
        first = await measure_streamed(REQ, route=route, gate=gate, client=client)
        second = await measure_streamed(REQ, route=route, gate=gate, client=client)
    assert first.error is None and first.stale_connection_retries == 0
    assert second.error is None, second.errors
    assert second.text == "ok" and second.stale_connection_retries == 1
    assert server.connections == 2 and server.answered == 2


class NeverAnswers(OneAnswerPerConnection):
    """Closes every connection unanswered: a retry must not loop."""

    async def handle(self, stream: SocketStream) -> None:
        self.connections += 1
        async with stream:
            await skip_request(stream, bytearray())


async def test_a_server_that_never_answers_is_a_connect_error_after_one_retry() -> None:
    server = NeverAnswers()
    async with _serving(server.handle) as route:
        m = await measure_streamed(REQ, route=route, gate=LiveGate())
    assert m.error is not None and m.error.kind is ErrorKind.connect
    assert m.stale_connection_retries == 1 and server.connections == 2


METRICS = (
    b"# TYPE llamacpp:spec_decode_num_drafts_total counter\n"
    b"llamacpp:spec_decode_num_drafts_total 4\n"
    b"# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\n"
    b"llamacpp:spec_decode_num_draft_tokens_total 12\n"
    b"# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\n"
    b"llamacpp:spec_decode_num_accepted_tokens_total 9\n"
)
METRICS_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n"
    b"content-length: " + str(len(METRICS)).encode() + b"\r\n\r\n" + METRICS
)


async def test_a_metrics_scrape_on_a_stale_pooled_connection_is_sent_again() -> None:
    """The closing scrape of a block reuses the opening scrape's connection, which the
    server closed while idle: without a re-send the block's /metrics window was lost
    (seen against llama-server in CI)."""
    server = OneAnswerPerConnection(METRICS_ANSWER)
    gate = LiveGate()
    async with _serving(server.handle) as route, gate.client() as client:
        before = await scrape_metrics(route, gate=gate, client=client)
        after = await scrape_metrics(route, gate=gate, client=client)
    assert before.error is None and after.error is None, after.error
    assert server.connections == 2 and server.answered == 2
    record = metrics_delta(before, after)
    assert record is not None and record.draft_tokens == 0  # same counters: an empty window


JSON_BODY = b'{"ok": true}'
JSON_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    b"content-length: " + str(len(JSON_BODY)).encode() + b"\r\n\r\n" + JSON_BODY
)


async def test_a_bounded_read_on_a_stale_pooled_connection_is_sent_again() -> None:
    """A follow-up (``off``'s logprobs at a divergence) reused a connection llama-server
    had closed while idle: without a re-send the divergence was recorded ``unexplained``
    ("Server disconnected without sending a response", seen in the llama.cpp CI step)."""
    server = OneAnswerPerConnection(JSON_ANSWER)
    gate = LiveGate()
    async with _serving(server.handle) as route, gate.client() as client:
        url = route.chat_url
        first = await read_bounded(client, "POST", url, deadline_s=5, content=b"{}")
        second = await read_bounded(client, "POST", url, deadline_s=5, content=b"{}")
    assert isinstance(first, BoundedResponse) and isinstance(second, BoundedResponse), second
    assert second.json() == {"ok": True}
    assert server.connections == 2 and server.answered == 2


async def test_a_bounded_read_the_server_never_answers_fails_after_one_retry() -> None:
    server = NeverAnswers()
    gate = LiveGate()
    async with _serving(server.handle) as route, gate.client() as client:
        r = await read_bounded(client, "POST", route.chat_url, deadline_s=5, content=b"{}")
    assert isinstance(r, BoundedReadError) and r.reason == "transport"
    assert server.connections == 2


async def test_a_bounded_read_told_not_to_retry_records_the_first_failure() -> None:
    server = OneAnswerPerConnection(JSON_ANSWER)
    gate = LiveGate()
    async with _serving(server.handle) as route, gate.client() as client:
        url = route.chat_url
        await read_bounded(client, "POST", url, deadline_s=5, content=b"{}")
        r = await read_bounded(
            client, "POST", url, deadline_s=5, content=b"{}", retry_unanswered=False
        )
    assert isinstance(r, BoundedReadError) and r.reason == "transport"
    assert server.connections == 1
