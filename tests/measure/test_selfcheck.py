"""The client's self-check: event-loop lag per request, the row flag and the scorecard note."""

from __future__ import annotations

import time

import anyio
import pytest

from deepseekbench import (
    DEFAULT_LAG_THRESHOLD_MS,
    BenchmarkPlan,
    EngineRoute,
    LiveGate,
    Scorecard,
    SelfCheck,
    StreamMeasurement,
    measure_streamed,
)
from deepseekbench._measure._selfcheck import current_selfcheck, sched_sample
from deepseekbench._records._client_health import client_saturated, max_pool_wait_ms
from tests._helpers import core_wait_ms, make_row
from tests._replay import Script, replay_server

DONE = [
    'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}\n\n',
    "data: [DONE]\n\n",
]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_a_blocked_loop_shows_as_lag_in_the_request_it_delayed() -> None:
    gate = LiveGate()
    async with replay_server(Script.sse(DONE, delay_ms=80)) as server, SelfCheck() as check:
        assert current_selfcheck() is check
        route = EngineRoute(base_url=server.base_url, model="m")

        async def block_the_loop() -> None:
            await anyio.sleep(0.03)
            time.sleep(0.06)  # noqa: ASYNC251 - a saturated client: the loop cannot run

        async with anyio.create_task_group() as tg:
            tg.start_soon(block_the_loop)
            m = await measure_streamed(
                {"messages": [{"role": "user", "content": "hi"}]}, route=route, gate=gate
            )
        before = sched_sample()
        await anyio.sleep(0.03)
        after = sched_sample()
        quiet = check.summary(after.wall_ns - 20_000_000, after.wall_ns)
    assert current_selfcheck() is None
    assert m.error is None
    assert m.client_lag_ms is not None and m.client_lag_ms >= 40
    assert client_saturated([m], DEFAULT_LAG_THRESHOLD_MS)
    whole = check.summary()
    assert whole.ticks > 3 and whole.max_lag_ms >= 40 and whole.cpu_share > 0
    # the lag belongs to its window only: after the block, a tick is late by the loop
    # thread's wait for a core at most (a busy machine's), never by the block
    assert quiet.max_lag_ms < 40 + core_wait_ms(before, after)


@pytest.mark.anyio
async def test_a_request_shorter_than_the_ticker_period_still_gets_a_lag() -> None:
    """No tick due inside the window: the lag is how far the window's end passed the
    next tick's due time — 0 on time, the overdue part when the loop is late."""
    async with SelfCheck(interval_s=10.0) as check:  # no tick will wake during the test
        now = time.perf_counter_ns()
        assert check.max_lag_ms(now, now + 1_000_000) == 0.0
        late = now + 10_500_000_000  # 0.5 s past the first tick's due time
        lag = check.max_lag_ms(late - 1_000_000, late)
        assert lag is not None and 400.0 <= lag <= 600.0
    assert SelfCheck().max_lag_ms(0, 1) is None  # never started: unknown


@pytest.mark.anyio
async def test_without_a_selfcheck_no_lag_is_claimed() -> None:
    async with replay_server(Script.sse(DONE)) as server:
        route = EngineRoute(base_url=server.base_url, model="m")
        m = await measure_streamed(
            {"messages": [{"role": "user", "content": "hi"}]}, route=route, gate=LiveGate()
        )
    assert m.client_lag_ms is None and m.error is None


def test_row_health_figures() -> None:
    calm = StreamMeasurement(client_lag_ms=2.0, pool_wait_ms=0.1)
    late = StreamMeasurement(client_lag_ms=25.0, pool_wait_ms=30.0)
    unknown = StreamMeasurement()
    assert not client_saturated([calm, unknown], 10.0)
    assert client_saturated([calm, late], 10.0)
    assert not client_saturated([late], 30.0)
    assert max_pool_wait_ms([calm, late, unknown]) == 30.0
    assert max_pool_wait_ms([unknown]) is None


def test_the_scorecard_names_a_saturated_row() -> None:
    card = Scorecard.from_rows(
        [make_row(), make_row(speculative="mtp", route_label="mtp", client_saturated=True)]
    )
    text = card.to_text()  # one diagnosis line per run, a flag per line
    assert "client lagged" in text and card.lines[1].client_flag == "lagged"
    assert card.to_dict()["lines"][1]["client_saturated"] is True
    assert "client lagged" not in Scorecard.from_rows([make_row()]).to_text()


def test_the_threshold_is_a_plan_key_outside_the_hash() -> None:
    routes = [
        {"label": "off", "base_url": "http://127.0.0.1:1/v1", "speculative": "off"},
        {"label": "mtp", "base_url": "http://127.0.0.1:2/v1", "speculative": "mtp"},
    ]
    plan = BenchmarkPlan.model_validate({"model": "m", "routes": routes})
    assert plan.client_lag_threshold_ms == DEFAULT_LAG_THRESHOLD_MS
    strict = plan.model_copy(update={"client_lag_threshold_ms": 2.0})
    assert strict.plan_hash() == plan.plan_hash()
    with pytest.raises(ValueError):
        BenchmarkPlan.model_validate({"model": "m", "routes": routes, "client_lag_threshold_ms": 0})


def test_selfcheck_refuses_a_bad_interval() -> None:
    with pytest.raises(ValueError):
        SelfCheck(interval_s=0)
