"""A window's closing /metrics scrape waits for the engine's counters to settle.

vLLM records a step's statistics after it handed the step's outputs to the
requests, so a scrape taken the moment the last stream ends can miss the last
step. ``scrape_settled`` scrapes again until two scrapes agree. The server here
answers each GET /metrics with the next body of a script.
"""

from __future__ import annotations

import anyio
import pytest
from anyio.abc import SocketStream

from deepseekbench import EngineRoute, LiveGate, MetricsSnapshot, metrics_delta, scrape_metrics
from deepseekbench._measure._server_metrics import scrape_settled

pytestmark = pytest.mark.anyio


def _body(steps: int, drafted: int, accepted: int) -> bytes:
    return (
        f"# TYPE vllm:spec_decode_num_drafts counter\n"
        f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {steps}\n'
        f"# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {drafted}\n'
        f"# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}\n'
    ).encode()


NO_COUNTERS = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"


class Scripted:
    """Answers the n-th GET with ``bodies[min(n, last)]`` (one request per connection)."""

    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies = bodies
        self.served = 0

    async def handle(self, stream: SocketStream) -> None:
        async with stream:
            buf = b""
            while b"\r\n\r\n" not in buf:
                try:
                    buf += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
            body = self.bodies[min(self.served, len(self.bodies) - 1)]
            self.served += 1
            await stream.send(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )


async def _settled(
    bodies: list[bytes], gate: LiveGate | None = None
) -> tuple[Scripted, MetricsSnapshot]:
    server = Scripted(bodies)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    route = EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model="m")
    gate = gate or LiveGate()
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        snap = await scrape_settled(route, gate=gate, interval_s=0.001)
        tg.cancel_scope.cancel()
    return server, snap


async def test_a_scrape_that_missed_the_last_step_is_followed_until_the_counters_agree() -> None:
    # the first closing scrape lacks the last verify step (3 drafted, 2 accepted)
    server, snap = await _settled([_body(9, 27, 20), _body(10, 30, 22), _body(10, 30, 22)])
    assert server.served == 3
    before = await _parse(_body(0, 0, 0))
    record = metrics_delta(before, snap)
    assert record is not None
    assert (record.verify_steps, record.draft_tokens, record.accepted_tokens) == (10, 30, 22)


async def test_counters_that_keep_moving_stop_after_max_scrapes_with_the_last() -> None:
    server, snap = await _settled([_body(n, 3 * n, 2 * n) for n in range(1, 10)])
    assert server.served == 4  # the default max_scrapes
    assert snap.values["vllm:spec_decode_num_drafts"] == 4


async def test_settled_counters_cost_one_confirming_scrape() -> None:
    server, snap = await _settled([_body(5, 15, 9)])
    assert server.served == 2 and snap.values["vllm:spec_decode_num_drafts"] == 5


async def test_a_scrape_without_counters_is_not_repeated() -> None:
    server, snap = await _settled([NO_COUNTERS])
    assert server.served == 1 and snap.error is None


async def test_a_spent_request_budget_ends_the_confirmation_with_the_last_good_scrape() -> None:
    server, snap = await _settled([_body(1, 3, 2), _body(2, 6, 4)], gate=LiveGate(max_requests=1))
    assert server.served == 1 and snap.values["vllm:spec_decode_num_drafts"] == 1


async def test_max_scrapes_below_one_is_refused() -> None:
    route = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(ValueError):
        await scrape_settled(route, gate=LiveGate(), max_scrapes=0)


async def _parse(body: bytes) -> MetricsSnapshot:
    server = Scripted([body])
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    route = EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model="m")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        snap = await scrape_metrics(route, gate=LiveGate())
        tg.cancel_scope.cancel()
    return snap
