"""The measuring client's pool: reused connections, no hidden queue, pool wait kept apart.

A loopback server built on the engine's own HTTP layer (``serve_connection``)
counts accepted connections and requests in flight; asyncio (aiohttp transport)
and trio (httpcore transport) both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx
import orjson
import pytest
from anyio.abc import ByteStream, SocketAttribute

from deepseekbench import (
    EngineRoute,
    LiveGate,
    StreamMeasurement,
    Timeouts,
    measure_streamed,
    pool_limits,
)
from deepseekbench._engine._http import HttpRequest, Responder, serve_connection
from deepseekbench._net._transport import POOL_CLOCK, BenchTransport, PoolClock

pytestmark = pytest.mark.anyio

REQ = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _frame(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


FRAMES = [
    _frame({"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}),
    _frame({"choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": "stop"}]}),
    _frame({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}),
    b"data: [DONE]\n\n",
]


@dataclass
class Counting:
    """What the server saw: connections accepted, requests in flight (now and at most)."""

    port: int = 0
    connections: int = 0
    in_flight: int = 0
    peak: int = 0
    hold_until: int = 0  # a request waits (up to hold_s) until this many are in flight
    hold_s: float = 0.0
    first_hold_s: float = 0.0  # the very first request waits this long before answering
    served: int = 0
    all_in: anyio.Event = field(default_factory=anyio.Event)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def on_connection(self, stream: ByteStream) -> None:
        self.connections += 1
        await serve_connection(stream, self.handle)

    async def handle(self, request: HttpRequest, responder: Responder) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.served += 1
        try:
            if self.served == 1 and self.first_hold_s:
                await anyio.sleep(self.first_hold_s)
            if self.in_flight >= self.hold_until:
                self.all_in.set()
            with anyio.move_on_after(self.hold_s):
                await self.all_in.wait()
            await responder.start(200, [("content-type", "text/event-stream")])
            for frame in FRAMES:
                await responder.write(frame)
            await responder.end()
        finally:
            self.in_flight -= 1


@asynccontextmanager
async def counting_server(**kw: float | int) -> AsyncIterator[Counting]:
    server = Counting(**kw)  # type: ignore[arg-type]
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server.port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.on_connection)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


async def _measure(
    server: Counting, gate: LiveGate, client: httpx.AsyncClient
) -> StreamMeasurement:
    route = EngineRoute(base_url=server.base_url, model="m")
    return await measure_streamed(
        REQ, route=route, gate=gate, client=client, timeouts=Timeouts(total_s=60)
    )


async def test_sequential_requests_use_one_connection() -> None:
    gate = LiveGate()
    async with counting_server() as server, gate.client() as client:
        for _ in range(6):
            m = await _measure(server, gate, client)
            assert m.error is None and m.text == "ab" and m.done
    assert server.served == 6
    assert server.connections == 1


async def test_256_concurrent_requests_reach_the_server_in_flight() -> None:
    gate = LiveGate()
    results: list[StreamMeasurement] = []
    async with (
        counting_server(hold_until=256, hold_s=20.0) as server,
        gate.client(limits=pool_limits(256)) as client,
    ):

        async def one() -> None:
            results.append(await _measure(server, gate, client))

        async with anyio.create_task_group() as tg:
            for _ in range(256):
                tg.start_soon(one)
    assert server.peak == 256
    assert len(results) == 256 and all(m.error is None for m in results)


async def test_default_client_has_no_connection_limit() -> None:
    gate = LiveGate()
    async with (
        counting_server(hold_until=120, hold_s=20.0) as server,
        gate.client() as client,
        anyio.create_task_group() as tg,
    ):
        for _ in range(120):
            tg.start_soon(_measure, server, gate, client)
    assert server.peak == 120  # httpx's default pool would cap this at 100


async def test_a_wait_for_a_pooled_connection_is_kept_out_of_ttft() -> None:
    gate = LiveGate()
    results: list[StreamMeasurement] = []
    async with (
        counting_server(first_hold_s=0.5) as server,
        gate.client(limits=pool_limits(1)) as client,
    ):

        async def one() -> None:
            results.append(await _measure(server, gate, client))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            await anyio.sleep(0.05)
            tg.start_soon(one)
    first, second = results
    assert first.ttft_ms is not None and first.ttft_ms >= 400  # the server's own delay
    assert second.pool_wait_ms is not None and second.pool_wait_ms >= 300  # queued behind it
    assert second.ttft_ms is not None and second.ttft_ms < second.pool_wait_ms
    assert server.connections == 1


async def test_a_queued_request_is_stamped_when_handed_its_connection_and_when_written(
    anyio_backend: str,
) -> None:
    """Through the transport alone: both requests get the hand-over and the write
    stamped (in that order); the second waits for the one connection, so its hand-over
    comes after the first one's answer. On asyncio the stamps come from aiohttp's
    connector and request classes, with no ``TraceConfig`` on the session (its
    per-event cost is what they replace), and the queued request says it queued."""
    gate = LiveGate()
    clocks: list[PoolClock] = []
    async with (
        counting_server(first_hold_s=0.3) as server,
        gate.client(limits=pool_limits(1)) as client,
    ):

        async def one() -> None:
            clock = PoolClock()
            clocks.append(clock)
            request = client.build_request(
                "POST", f"{server.base_url}/chat/completions", content=orjson.dumps(REQ)
            )
            request.extensions[POOL_CLOCK] = clock
            response = await client.send(request, stream=True)
            await response.aread()
            await response.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            await anyio.sleep(0.05)
            tg.start_soon(one)
        if anyio_backend == "asyncio":
            session = client._transport.inner._inner._inner.client  # type: ignore[attr-defined]
            assert session.trace_configs == []
    first, second = clocks
    for clock in clocks:
        assert clock.acquired_ns is not None and clock.written_ns is not None
        assert clock.acquired_ns <= clock.written_ns
    assert second.acquired_ns is not None and first.acquired_ns is not None
    assert second.acquired_ns - first.acquired_ns >= 0.25e9  # after the first one's answer
    if anyio_backend == "asyncio":
        assert (first.queued, second.queued) == (False, True)


def test_limits_are_honoured_or_refused_never_dropped() -> None:
    gate = LiveGate()
    with pytest.raises(ValueError, match="max_keepalive_connections"):
        gate.client(limits=httpx.Limits(max_connections=100, max_keepalive_connections=20))
    with pytest.raises(TypeError, match="limits"):
        gate.client(transport=httpx.AsyncHTTPTransport(), limits=pool_limits(4))
    client = gate.client(limits=pool_limits(7))
    inner = client._transport_for_url(httpx.URL("http://127.0.0.1/")).inner  # type: ignore[attr-defined]
    assert isinstance(inner, BenchTransport) and inner.limits.max_connections == 7
    with pytest.raises(ValueError, match=">= 1"):
        pool_limits(0)


class _Stop(Exception):
    pass


class _PoolSpy(LiveGate):
    """Records the pool limits run_plan asks for, then stops the run (nothing is sent)."""

    limits: httpx.Limits | None = None

    def client(self, **kwargs: object) -> httpx.AsyncClient:
        limits = kwargs.get("limits")
        assert isinstance(limits, httpx.Limits)
        self.limits = limits
        raise _Stop


@pytest.mark.parametrize(
    ("arrival", "parity_c", "pool"),
    [
        ({"concurrency": [1, 16, 4]}, 8, 16),  # the sweep's largest level
        ({"concurrency": [2, 4]}, 8, 8),  # the parity set's, when larger
        ({"mode": "rate", "rate_per_s": [2.0, 8.0], "concurrency": 32}, 1, 32),  # open-loop cap
    ],
)
async def test_the_runner_sizes_its_pool_from_the_sweep_and_the_parity_set(
    arrival: dict[str, object], parity_c: int, pool: int
) -> None:
    from deepseekbench import BenchmarkPlan, run_plan

    plan = BenchmarkPlan.model_validate(
        {
            "model": "m",
            "routes": [
                {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
                {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
            ],
            "arrival": arrival,
            "parity": {"tasks": "none", "prompts": ["a"], "concurrency": parity_c},
        }
    )
    gate = _PoolSpy()
    with pytest.raises(_Stop):
        await run_plan(plan, gate=gate, results_path=None)
    assert gate.limits is not None
    assert gate.limits.max_connections == pool == gate.limits.max_keepalive_connections
