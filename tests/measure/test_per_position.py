"""Per-position acceptance end to end on the embedded engine (with vLLM's per-request metrics).

The engine's per-request ``per_step_*`` lists (read by ``measure_streamed``), its
Prometheus ``vllm:spec_decode_num_accepted_tokens_per_pos`` window (read by
``metrics_delta``) and its own counters were built apart; they must agree.
"""

from __future__ import annotations

import pytest

from deepseekbench import (
    ChatRequest,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    LiveGate,
    Speculative,
    measure_streamed,
    metrics_delta,
    reference_tasks,
    scrape_metrics,
)
from deepseekbench._analysis._spec_fields import cell_by_position
from deepseekbench._engine import FAST_COSTS

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_per_request_lists_match_the_per_position_counters() -> None:
    tasks = reference_tasks(10, seed=11)
    gate = LiveGate()
    config = EngineConfig(speculative=Speculative.dspark, dialect=Dialect.vllm, cost=FAST_COSTS)
    async with EmbeddedEngine(config) as engine, gate.client() as client:
        route = EngineRoute(
            base_url=engine.base_url, model="deepseekbench-ref", dialect=Dialect.vllm
        )
        depth = engine.config.effective_draft_depth
        counters_before = engine.counters.accepted_per_position
        before = await scrape_metrics(route, gate=gate, client=client)
        results = [
            await measure_streamed(
                ChatRequest(messages=({"role": "user", "content": t.prompt},), temperature=0),
                route=route,
                gate=gate,
                client=client,
            )
            for t in tasks
        ]
        after = await scrape_metrics(route, gate=gate, client=client)
        counters_after = engine.counters.accepted_per_position
    steps = 0
    per_pos = [0] * depth
    for m in results:
        assert m.error is None and m.acceptance is not None and m.spec_tokens == depth
        by_pos = m.acceptance_by_position
        assert by_pos is not None and len(by_pos) == depth
        n = m.acceptance.verify_steps or 0
        steps += n
        for k, frac in enumerate(by_pos):
            per_pos[k] += round(frac * n)
        assert sum(by_pos) == pytest.approx((m.acceptance_length or 1) - 1)
    engine_counts = [a - b for a, b in zip(counters_after, counters_before, strict=True)]
    assert per_pos == engine_counts and sum(per_pos) > 0
    window = metrics_delta(before, after)
    assert window is not None and window.verify_steps == steps
    assert window.acceptance_by_position == pytest.approx(tuple(c / steps for c in per_pos))
    assert cell_by_position(results, None) == pytest.approx(window.acceptance_by_position)
    # the figures differ by position: not one constant written into every slot
    assert len(set(per_pos)) > 1
