"""WorkerPool: a load point sent from several processes against the embedded engine on
127.0.0.1 (the engine runs in the test's event loop; workers connect over loopback)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from deepseekbench import (
    ChatRequest,
    CostModel,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    ErrorKind,
    LiveGate,
    LiveGateError,
    LoadWork,
    PoolItem,
    PoolReport,
    PoolResult,
    Timeouts,
    WorkerPool,
)
from deepseekbench._engine import FAST_COSTS

pytestmark = pytest.mark.anyio
PROMPTS = ("Count from 3 to 9.", "12 + 30 =", "Reverse brata.", "7 × 8 =")
SECRET = "sk-do-not-leak-7f3a9c"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def ask(prompt: str, max_tokens: int = 24) -> ChatRequest:
    return ChatRequest(
        messages=({"role": "user", "content": prompt},), max_tokens=max_tokens, temperature=0
    )


def work(n: int, concurrency: int, **kw: Any) -> LoadWork:
    max_tokens = kw.pop("max_tokens", 24)
    items = tuple(PoolItem(i, "off", ask(PROMPTS[i % 4], max_tokens)) for i in range(n))
    return LoadWork(items, concurrency, **kw)


def proc_files(pid: int) -> bytes:
    """A process's argv and environment, as the kernel shows them to anyone."""
    return b"".join(Path(f"/proc/{pid}/{part}").read_bytes() for part in ("cmdline", "environ"))


@asynccontextmanager
async def engine_route(cost: CostModel = FAST_COSTS, **kw: Any) -> AsyncIterator[EngineRoute]:
    async with EmbeddedEngine(EngineConfig(cost=cost)) as engine:
        yield EngineRoute(base_url=engine.base_url, model="deepseekbench-ref", label="off", **kw)


async def run_pool(
    route: EngineRoute,
    workers: int,
    load: LoadWork,
    gate: LiveGate | None = None,
) -> tuple[list[PoolResult], PoolReport, WorkerPool]:
    results: list[PoolResult] = []
    pool = WorkerPool(
        workers, routes={"off": route}, gate=gate or LiveGate(), timeouts=Timeouts(total_s=60)
    )
    async with pool:
        report = await pool.run(load, results.append)
    return results, report, pool


async def test_two_workers_give_the_same_answers_as_one_and_keep_the_key_hidden() -> None:
    warm = (PoolItem(-1, "off", ask("1 + 1 =")),) * 2
    offsets = tuple(0.02 * j for j in range(8))
    gate = LiveGate(api_key=SECRET)
    async with engine_route(api_key=SECRET) as route:
        one, rep1, _ = await run_pool(route, 1, work(12, 4))
        pool = WorkerPool(2, routes={"off": route}, gate=gate, timeouts=Timeouts(total_s=60))
        two: list[PoolResult] = []
        opened: list[PoolResult] = []
        async with pool:
            rep2 = await pool.run(work(12, 4, warmup=warm), two.append)
            rep_open = await pool.run(work(8, 8, offsets_s=offsets), opened.append)
            for pid in pool.pids.values():
                assert pid is not None
                assert SECRET.encode() not in proc_files(pid)
            assert SECRET not in repr(pool)
    # closed loop: same answers, each request once, split by streams
    for results in (one, two, opened):
        assert all(r.measurement.error is None for r in results)
        for r in results:
            assert SECRET not in r.measurement.model_dump_json() and SECRET not in repr(r)
    assert sorted(r.item.key for r in two if r.item) == list(range(12))
    # each worker watches its own event loop: lag is measured in the worker
    assert any(r.measurement.client_lag_ms is not None for r in two + opened)
    assert Counter(r.worker for r in two if r.item is not None) == {0: 6, 1: 6}
    assert sum(1 for r in two if r.item is None) == 2  # warm-ups, one per worker
    text = {r.item.key: r.measurement.text for r in one if r.item}
    assert {r.item.key: r.measurement.text for r in two if r.item} == text
    assert rep1.workers == 1 and rep2.workers == 2
    for rep, results in ((rep1, one), (rep2, two)):
        sent = [r.sent_ns for r in results if r.item is not None and r.sent_ns is not None]
        ends = [r.end_ns for r in results if r.item is not None and r.end_ns is not None]
        assert min(sent) >= rep.start_ns  # nobody sent before the shared start
        assert max(ends) == rep.end_ns
    # open loop: both processes keep one schedule on CLOCK_MONOTONIC
    assert len(opened) == 8
    for r in opened:
        assert r.item is not None and r.sent_ns is not None and r.queue_ms is not None
        assert r.sent_ns >= rep_open.start_ns + round(offsets[r.item.key] * 1e9)
        assert r.worker == r.item.key % 2


def _refused(results: list[PoolResult]) -> list[PoolResult]:
    return [r for r in results if r.measurement.error is not None]


async def test_budget_holds_for_the_run_not_per_worker() -> None:
    gate = LiveGate(max_requests=5)
    results: list[PoolResult] = []
    async with engine_route() as route:
        with pytest.raises(LiveGateError, match="request budget"):
            async with WorkerPool(2, routes={"off": route}, gate=gate) as pool:
                await pool.run(work(12, 2), results.append)
    sent = [r for r in results if r.measurement.error is None]
    assert len(sent) == 5 and gate.requests_admitted == 5
    assert gate.output_tokens_charged == sum(r.measurement.completion_tokens or 0 for r in sent)
    assert {r.worker for r in sent} == {0, 1}
    kinds = {r.measurement.error.kind for r in _refused(results) if r.measurement.error}
    assert kinds <= {ErrorKind.budget_refused}


async def test_a_budget_refusal_keeps_the_requests_already_admitted() -> None:
    """One worker, four streams, a budget of three: the fourth request is refused while
    the first three are in flight. They finish and are recorded (the old worker cancelled
    them: the server saw them, the gate admitted 3, 0 results); the refused ones are
    recorded unsent with error kind ``budget_refused``, and the run still stops."""
    slow = CostModel(target_step_ms=5.0, verify_token_ms=0.0, draft_step_ms=0.0)
    gate = LiveGate(max_requests=3)
    results: list[PoolResult] = []
    async with EmbeddedEngine(EngineConfig(cost=slow)) as engine:
        route = EngineRoute(base_url=engine.base_url, model="deepseekbench-ref", label="off")
        with pytest.raises(LiveGateError, match="request budget"):
            async with WorkerPool(1, routes={"off": route}, gate=gate) as pool:
                await pool.run(work(6, 4), results.append)
        served = engine.counters.requests
    sent = [r for r in results if r.measurement.error is None]
    assert gate.requests_admitted == 3 and served == 3
    assert len(sent) == 3 and all(r.measurement.text for r in sent)
    refused = _refused(results)
    assert sorted(r.item.key for r in results if r.item is not None) == list(range(6))
    assert len(refused) == 3
    for r in refused:
        assert r.measurement.error is not None
        assert r.measurement.error.kind is ErrorKind.budget_refused
        assert "request budget" in r.measurement.error.message
        assert r.measurement.route_label == "off" and r.measurement.completion_tokens is None


async def test_a_dead_worker_loses_nothing_it_sent_is_reported_and_replaced() -> None:
    slow = CostModel(target_step_ms=15.0, verify_token_ms=0.0, draft_step_ms=0.0)
    killed: list[int] = []

    def kill_worker_1(pool: WorkerPool, r: PoolResult) -> None:
        if not killed and r.worker == 1:
            pid = pool.pids[1]
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    results: list[PoolResult] = []
    after: list[PoolResult] = []
    async with engine_route(cost=slow) as route:
        pool = WorkerPool(2, routes={"off": route}, gate=LiveGate())
        async with pool:

            def on_result(r: PoolResult) -> None:
                results.append(r)
                kill_worker_1(pool, r)

            report = await pool.run(work(12, 4, max_tokens=40), on_result)
            await pool.run(work(4, 2, max_tokens=8), after.append)
            assert pool.pids[1] not in (None, killed[0])
    assert sorted(r.item.key for r in results if r.item) == list(range(12))  # each once
    died = [r for r in results if r.measurement.error is not None]
    assert died and all(r.worker == 1 for r in died)
    kinds = {r.measurement.error.kind for r in died if r.measurement.error}
    assert kinds == {ErrorKind.worker_died}
    assert [(d.worker, d.pid, d.exitcode) for d in report.deaths] == [(1, killed[0], -9)]
    assert report.deaths[0].unfinished == len(died)
    assert f"pid {killed[0]}" in str(died[0].measurement.error)
    ok_1 = [r for r in results if r.worker == 1 and r.measurement.error is None]
    assert len(ok_1) >= 1  # what it had sent before dying is kept
    assert len(after) == 4 and all(r.measurement.error is None for r in after)
