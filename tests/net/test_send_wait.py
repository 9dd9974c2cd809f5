"""Fidelity at 256 streams: the client's own wait to write a request is not server time.

aiohttp on Python < 3.12 writes a request body in a task of its own, run only after
every callback already ready; at 256 streams started together that put the building
of the other requests inside each one's TTFT. The clock now starts when the body is
written (``start_perf_ns``), and the wait from the connection hand-over to the write
is ``send_wait_ms``.
"""

from __future__ import annotations

import time

import anyio
import pytest

from deepseekbench import Dialect, EngineRoute, LiveGate, StreamMeasurement, measure_streamed
from deepseekbench._measure._accumulator import StreamAccumulator
from deepseekbench._net._transport import PoolClock
from tests._replay import Script, replay_server

DONE = [
    'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}\n\n',
    "data: [DONE]\n\n",
]
BLOCK_S = 0.5


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_loop_blocked_between_handover_and_write_is_kept_out_of_ttft() -> None:
    """The request gets its (new) connection, then another task holds the loop for
    500 ms before the body is written: TTFT counts from the write, the 500 ms is
    ``send_wait_ms``. asyncio only: the gap is aiohttp's write task (httpcore, on
    trio, writes in the request's own task; where a trio scheduler puts the other
    task is not fixed)."""
    out: list[StreamMeasurement] = []
    async with replay_server(Script.sse(DONE, delay_ms=5)) as server:
        route = EngineRoute(base_url=server.base_url, model="m")
        gate = LiveGate()
        async with gate.client() as client:

            async def request() -> None:
                body = {"messages": [{"role": "user", "content": "hi"}]}
                out.append(await measure_streamed(body, route=route, gate=gate, client=client))

            async def hog() -> None:
                time.sleep(BLOCK_S)  # noqa: ASYNC251 - the other requests being built

            async with anyio.create_task_group() as tg:
                tg.start_soon(request)
                tg.start_soon(hog)
    (m,) = out
    assert m.error is None, m.error
    assert m.send_wait_ms is not None and m.send_wait_ms >= BLOCK_S * 1000 * 0.9
    # the server answers in 5 ms: TTFT stays below the block it is kept apart from,
    # a margin of about 0.5 s that a busy machine's delays do not cross
    assert m.ttft_ms is not None and m.ttft_ms < m.send_wait_ms


def test_the_clock_starts_at_the_write_and_keeps_both_waits() -> None:
    from deepseekbench._measure._measure import _start_at_handover

    acc = StreamAccumulator(Dialect.auto, 1_000)
    clock = PoolClock()
    clock.acquired_ns, clock.written_ns = 4_000, 9_000
    _start_at_handover(acc, clock)
    assert (acc.start_ns, acc.pool_wait_ns, acc.send_wait_ns) == (9_000, 3_000, 5_000)


def test_no_write_stamp_keeps_the_handover() -> None:
    from deepseekbench._measure._measure import _start_at_handover

    acc = StreamAccumulator(Dialect.auto, 1_000)
    clock = PoolClock()
    clock.mark_written()  # before the hand-over: ignored
    assert clock.written_ns is None
    clock.acquired_ns = 4_000
    _start_at_handover(acc, clock)
    assert (acc.start_ns, acc.pool_wait_ns, acc.send_wait_ns) == (4_000, 3_000, None)
