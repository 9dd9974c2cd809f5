"""``/metrics`` scrapes have an overall deadline, a size cap and off-loop parsing.

A 1 byte/s endpoint once held a run past 150 s with ``timeout_s = 10`` (httpx's
timeout is per read), an endless one grew to ~3 GB, and a 30 MB exposition
blocked the event loop for 16 s. Loopback raw-socket servers on 127.0.0.1, under
asyncio and trio.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable

import anyio
import pytest
from anyio.abc import SocketStream

from deepseekbench import LiveGate, MetricsSnapshot, scrape_metrics
from deepseekbench._measure import _server_metrics
from tests._replay import answering

pytestmark = pytest.mark.anyio

EXPOSITION = b"".join(
    b'vllm:spec_decode_num_drafts_total{model_name="m",x="%d"} 1.0\n' % i for i in range(200)
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


_serving = answering


async def _trickle(stream: SocketStream) -> None:
    await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n")
    for _ in range(100_000):
        await anyio.sleep(0.1)  # each read well inside the per-read timeout
        await stream.send(b"#")


async def _endless(stream: SocketStream) -> None:
    await stream.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    line = b"# " + b"x" * 65_000 + b"\n"
    while True:
        await stream.send(b"%x\r\n%s\r\n" % (len(line), line))


async def _declared_huge(stream: SocketStream) -> None:
    await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n# x\n")
    await anyio.sleep(30)


async def _exposition(stream: SocketStream) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(EXPOSITION)
    await stream.send(head + EXPOSITION)


async def test_a_trickling_endpoint_is_cut_at_the_overall_deadline() -> None:
    async with _serving(_trickle) as route:
        # the trickle would last hours: only the scrape's own overall deadline, named in its
        # error, ends it before the guard (a per-read timeout never fires on a trickle)
        with anyio.fail_after(15):
            snapshot = await scrape_metrics(route, gate=LiveGate(), timeout_s=1.0)
    assert snapshot.error is not None and "timeout_s=1.0" in snapshot.error


@pytest.mark.parametrize("answer", [_endless, _declared_huge])
async def test_a_body_over_the_cap_is_a_recorded_failure(
    answer: Callable[[SocketStream], Awaitable[None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_server_metrics, "_METRICS_MAX_BYTES", 1_000_000)
    async with _serving(answer) as route:
        with anyio.fail_after(15):
            snapshot = await scrape_metrics(route, gate=LiveGate(), timeout_s=30.0)
    assert snapshot.error == "metrics body over 1000000 bytes: not read further"


@pytest.mark.parametrize("on_loop_limit", [1000, None], ids=["large-off-loop", "small-on-loop"])
async def test_where_the_body_is_parsed(
    monkeypatch: pytest.MonkeyPatch, on_loop_limit: int | None
) -> None:
    """A body over ``_PARSE_ON_LOOP_BYTES`` is parsed in a worker thread; a small one
    on the event loop's own thread."""
    if on_loop_limit is not None:
        monkeypatch.setattr(_server_metrics, "_PARSE_ON_LOOP_BYTES", on_loop_limit)
    threads: list[int] = []
    parse = _server_metrics.parse_metrics

    def spy(text: str, *, model_name: str | None = None) -> MetricsSnapshot:
        threads.append(threading.get_ident())
        return parse(text, model_name=model_name)

    monkeypatch.setattr(_server_metrics, "parse_metrics", spy)
    async with _serving(_exposition) as route:
        snapshot = await scrape_metrics(route, gate=LiveGate())
    assert snapshot.error is None
    assert snapshot.values["vllm:spec_decode_num_drafts"] == 200.0
    off_loop = threads and threads[0] != threading.get_ident()
    assert len(threads) == 1 and off_loop == (on_loop_limit is not None)
