"""A closed loop's ramp: its streams' first sends spread over ``arrival.ramp_ms``.

Only lower bounds on time are asserted (a stream never starts before its turn): a busy
machine can make a start later, never earlier, so no outcome depends on its speed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from deepseekbench import BenchmarkPlan, EngineRoute, LiveGate, Timeouts, load_results, run_plan
from deepseekbench._execute._executor import Executor, Sent
from deepseekbench._execute._ramp import ramp_limiter, stream_starts_s
from deepseekbench._execute._workshare import LoadWork, PoolItem, split_work
from deepseekbench._types._request import ChatRequest
from tests._helpers import COSTS, off_and_mtp, plan_of
from tests._replay import Script, replay_server
from tests.execute.test_executor import _block

DONE = [
    'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}\n\n',
    "data: [DONE]\n\n",
]

ROUTES = [
    {"label": "off", "base_url": "http://127.0.0.1:1/v1", "speculative": "off"},
    {"label": "mtp", "base_url": "http://127.0.0.1:2/v1", "speculative": "mtp"},
]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_stream_starts_are_even_and_the_workers_together_start_as_one_client() -> None:
    assert stream_starts_s(4, 400.0) == (0.0, 0.1, 0.2, 0.3)
    assert stream_starts_s(3, 0.0) == (0.0, 0.0, 0.0)  # all at once
    one = stream_starts_s(10, 1000.0)
    union = sorted(s for w in range(3) for s in stream_starts_s(10, 1000.0, worker=w, active=3))
    assert union == sorted(one)
    with pytest.raises(ValueError):
        stream_starts_s(4, -1.0)


def test_split_work_hands_each_worker_the_starts_of_its_own_streams() -> None:
    req = ChatRequest(messages=({"role": "user", "content": "hi"},))
    items = tuple(PoolItem(k, "mtp", req) for k in range(12))
    shares = split_work(LoadWork(items, 6, ramp_ms=600.0), 4)
    # stream s belongs to worker s % active: worker 0 holds streams 0 and 4
    assert [s.stream_starts_s for s in shares][:2] == [
        pytest.approx((0.0, 0.4)),
        pytest.approx((0.1, 0.5)),
    ]
    assert all(s.stream_starts_s == () for s in split_work(LoadWork(items, 6), 4))
    with pytest.raises(ValueError):
        LoadWork(items, 6, ramp_ms=-1.0)


@pytest.mark.anyio
async def test_the_ramped_limiter_lets_stream_k_in_no_sooner_than_its_start() -> None:
    concurrency, ramp_ms = 4, 240.0
    limiter = anyio.CapacityLimiter(concurrency)
    starts = stream_starts_s(concurrency, ramp_ms)
    got: list[int] = []
    t0 = time.perf_counter_ns()

    async def stream() -> None:
        async with limiter:
            got.append(time.perf_counter_ns() - t0)
            await anyio.sleep(1.0)  # longer than the ramp: no slot frees before it ends

    async with anyio.create_task_group() as ramp:
        limiter.total_tokens = 1
        ramp.start_soon(ramp_limiter, limiter, starts, t0)
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(stream)
    assert len(got) == concurrency and limiter.total_tokens == concurrency
    for k, at in enumerate(sorted(got)):
        assert at >= k * ramp_ms / concurrency * 1e6  # ns; never before its turn


@pytest.mark.anyio
async def test_a_closed_block_with_a_ramp_starts_its_streams_in_turn() -> None:
    """Four streams, a 600 ms ramp, responses of 800 ms or more (longer than the ramp, so
    no stream frees its slot before the last one started): each stream's first request
    is one item, sent no sooner than its turn."""
    block = _block(warmup=(), scrape=False, concurrency=4, ramp_ms=600.0)
    sent: list[Sent] = []
    script = Script.sse(DONE, delay_ms=400)  # two writes: 800 ms or more per response
    async with replay_server(script) as server:
        gate = LiveGate()
        route = EngineRoute(base_url=server.base_url, model="m", label="mtp")
        async with gate.client() as client:
            ex = Executor({"mtp": route}, gate, client, Timeouts(total_s=30))
            t0 = time.perf_counter_ns()
            await ex.run_block(block, block.items, lambda b, x: sent.append(x))
    firsts = sorted(x.measurement.start_perf_ns or 0 for x in sent if x.item is not None)
    assert len(firsts) == 4 and all(x.measurement.error is None for x in sent)
    for k, at in enumerate(firsts):
        assert at - t0 >= k * 150e6  # ns; never before its turn


def _plan(**arrival: Any) -> BenchmarkPlan:
    return BenchmarkPlan.model_validate({"model": "m", "routes": ROUTES, "arrival": arrival})


def test_the_ramp_is_a_closed_loop_key_hashed_only_when_set() -> None:
    plain = _plan(concurrency=8)
    assert plain.arrival.ramp_ms == 0.0  # default: all at once
    assert _plan(concurrency=8, ramp_ms=0).plan_hash() == plain.plan_hash()
    assert _plan(concurrency=8, ramp_ms=500).plan_hash() != plain.plan_hash()
    for bad in ({"ramp_ms": -1}, {"mode": "rate", "rate_per_s": 2, "ramp_ms": 100}):
        with pytest.raises(ValueError):
            _plan(**bad)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_row_records_its_ramp(tmp_path: Path, workers: int) -> None:
    """In one process and across two client workers, every row says over how long its
    closed loop's first starts were spread."""
    ramp_ms = 300.0
    plan_data: dict[str, Any] = {
        "requests_per_cell": 4,
        "warmup_per_cell": 0,
        "workers": workers,
        "arrival": {"concurrency": 2, "ramp_ms": ramp_ms},
        "parity": {"max_tokens": 16},
    }

    async def main() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            routes = [("off", "off", off.base_url), ("mtp", "mtp", mtp.base_url)]
            plan = plan_of(routes, plan_data, {})
            return await run_plan(plan, gate=LiveGate(), results_path=tmp_path / "r.jsonl")

    result = anyio.run(main)
    assert [r.ramp_ms for r in result.rows] == [ramp_ms, ramp_ms]
    again = load_results(tmp_path / "r.jsonl")  # read back from the file: the same
    assert [r.ramp_ms for r in again.rows] == [ramp_ms, ramp_ms]
