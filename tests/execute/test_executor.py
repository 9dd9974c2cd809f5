"""The executor stage alone: one block sent to an embedded engine, no store, no rows."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from deepseekbench import (
    Arrival,
    ChatRequest,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    LiveGate,
    LoadPoint,
    Speculative,
    Timeouts,
)
from deepseekbench._engine._costs import FAST_COSTS
from deepseekbench._execute._executor import Executor, Sent
from deepseekbench._plan._schedule import Block, Phase, WorkItem


def _request(text: str) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), max_tokens=8)


def _block(**over: Any) -> Block:
    items = tuple(WorkItem(_request(f"Count from {i} to 9."), i) for i in range(4))
    data: dict[str, Any] = {
        "phase": Phase.measure,
        "route": "mtp",
        "items": items,
        "concurrency": 2,
        "reasoning_mode": items[0].request.reasoning_mode,
        "cell": "1k/256/non_think",
        "load": LoadPoint(Arrival.closed, 2),
        "warmup": (_request("warm"),),
        "scrape": True,
    }
    data.update(over)
    return Block(**data)


def _run(block: Block, items: tuple[WorkItem, ...]) -> tuple[list[Sent], Any]:
    sent: list[Sent] = []

    async def main() -> Any:
        cfg = EngineConfig(speculative=Speculative.mtp, cost=FAST_COSTS, dialect=Dialect.openai)
        async with EmbeddedEngine(cfg) as engine:
            gate = LiveGate()
            route = EngineRoute(
                base_url=engine.base_url,
                model="deepseekbench-ref",
                speculative=Speculative.mtp,
                dialect=Dialect.openai,  # no per-request counts: the /metrics window is the source
                label="mtp",
            )
            async with gate.client() as client:
                ex = Executor({"mtp": route}, gate, client, Timeouts(total_s=30))
                return await ex.run_block(block, items, lambda b, s: sent.append(s))

    return sent, anyio.run(main)


def test_a_closed_block_sends_its_warmups_then_its_items_and_returns_the_metrics_window() -> None:
    block = _block()
    sent, window = _run(block, block.items)
    assert [s.item.index if s.item else None for s in sent][:1] == [None]  # warm-up first
    assert sorted(s.item.index for s in sent if s.item) == [0, 1, 2, 3]
    assert all(s.queue_ms is None and s.measurement.error is None for s in sent)
    # the server-wide acceptance delta covers the 4 measured requests, not the warm-up
    assert window is not None and window.draft_tokens is not None and window.draft_tokens > 0


def test_an_open_block_records_each_requests_schedule_lag() -> None:
    block = _block(offsets_s=(0.0, 0.0, 0.0, 0.0), concurrency=1, warmup=(), scrape=False)
    sent, window = _run(block, block.items[1:])  # item 0 already done (resume)
    assert window is None
    assert sorted(s.item.index for s in sent if s.item) == [1, 2, 3]
    lags = sorted(s.queue_ms for s in sent if s.queue_ms is not None)
    assert len(lags) == 3 and lags[0] >= 0 and lags[-1] > lags[0]  # one slot: they queue


def test_the_schedule_lag_counts_the_clients_own_preparation_of_a_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """queue_ms runs to the send's start, not to the free slot: time the
    client spends building a request (here 60 ms, before its clock starts at the body
    write) is its lateness, and was recorded nowhere when the lag stopped at the slot."""
    from deepseekbench._measure import _measure

    coerce = _measure.coerce_request  # type: ignore[attr-defined]  # its own import

    def slow(request: Any) -> Any:
        time.sleep(0.06)  # s; blocks the loop, as a busy machine's client does
        return coerce(request)

    monkeypatch.setattr(_measure, "coerce_request", slow)
    block = _block(offsets_s=(0.0, 0.2, 0.4, 0.6), concurrency=4, warmup=(), scrape=False)
    sent, _ = _run(block, block.items)
    lags = [s.queue_ms for s in sent if s.item is not None]
    # at least the 60 ms of preparation; no upper bound: a busy machine makes a client later
    # still, and that lateness is recorded in queue_ms too (it must not fail the test)
    assert len(lags) == 4 and all(x is not None and x >= 60 for x in lags), lags
    # and the measurement's clock still starts at the body write, after it
    assert all(
        s.measurement.start_perf_ns is not None and s.measurement.ttft_ms is not None for s in sent
    )


def test_measured_requests_carry_the_clients_event_loop_lag_and_others_do_not() -> None:
    """The executor's SelfCheck runs around a measure block's requests only."""
    block = _block()
    sent, _ = _run(block, block.items)
    measured = [s.measurement for s in sent if s.item is not None]
    warm = [s.measurement for s in sent if s.item is None]
    assert len(measured) == 4 and all(m.client_lag_ms is not None for m in measured)
    assert warm and all(m.client_lag_ms is None for m in warm)
    parity = _block(phase=Phase.parity, parity_pass=1, cell="", load=None, warmup=(), scrape=False)
    sent, _ = _run(parity, parity.items)
    assert len(sent) == 4 and all(s.measurement.client_lag_ms is None for s in sent)
