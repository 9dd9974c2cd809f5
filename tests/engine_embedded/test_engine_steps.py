"""The embedded engine's engine-step counter, exported as vLLM exports it
(``vllm:iteration_tokens_total``: tokens scheduled per engine step), read back through a
``/metrics`` window as a row reads it, under asyncio and trio."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from deepseekbench import EngineConfig, MetricsSnapshot, Speculative, parse_metrics, reference_tasks
from deepseekbench._engine import FAST_COSTS, EmbeddedEngine
from deepseekbench._measure._cache_metrics import cache_window

pytestmark = pytest.mark.anyio


def _body(prompt: str) -> dict[str, Any]:
    return {
        "model": "deepseekbench-ref",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "stream": True,
    }


async def _scrape(client: httpx.AsyncClient) -> MetricsSnapshot:
    return parse_metrics((await client.get("/metrics")).text)


def _histogram(snap: MetricsSnapshot, suffix: str) -> float:
    return sum(snap.series[f"vllm:iteration_tokens_total_{suffix}"].values())


@pytest.mark.parametrize("speculative", [Speculative.off, Speculative.mtp])
async def test_one_sequence_at_a_time_runs_one_sequence_per_step(speculative: Speculative) -> None:
    prompts = [t.prompt for t in reference_tasks(4, seed=3)]
    depth = 3 if speculative is Speculative.mtp else None
    config = EngineConfig(
        cost=FAST_COSTS, speculative=speculative, draft_depth=depth, eos_counted=True
    )
    async with EmbeddedEngine(config) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root, timeout=30) as client:
            before, c0 = await _scrape(client), engine.counters
            for p in prompts:  # sequential: every step runs exactly this one sequence
                r = await client.post("/v1/chat/completions", json=_body(p))
                assert r.status_code == 200
            after, c1 = await _scrape(client), engine.counters
    steps = c1.engine_steps - c0.engine_steps
    assert steps > len(prompts)
    # the exposition is the engine's own count, vLLM's histogram: count = steps, and sum =
    # the prompts' tokens (their prefills ended in the window) + the tokens generated
    assert _histogram(after, "count") - _histogram(before, "count") == steps
    tokens = _histogram(after, "sum") - _histogram(before, "sum")
    assert tokens == c1.scheduled_tokens - c0.scheduled_tokens
    assert tokens == (c1.prompt_tokens - c0.prompt_tokens) + (
        c1.generated_tokens - c0.generated_tokens
    )
    w = cache_window(before, after)
    assert w is not None and w.engine_steps == steps
    assert w.steps_source is not None and "vllm:iteration_tokens_total" in w.steps_source
    assert w.engine_batch_mean is not None
    if speculative is Speculative.off:  # one token a step: exactly one sequence per step
        assert w.engine_batch_mean == pytest.approx(1.0)
    else:  # a verify step ending on an accepted end-of-sequence emits no bonus token
        assert 0.9 <= w.engine_batch_mean <= 1.0


async def test_concurrent_sequences_share_steps() -> None:
    prompts = [t.prompt for t in reference_tasks(4, seed=4)]
    async with EmbeddedEngine(EngineConfig(cost=FAST_COSTS)) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root, timeout=30) as client:
            before = await _scrape(client)

            async def send(prompt: str) -> None:
                r = await client.post("/v1/chat/completions", json=_body(prompt))
                assert r.status_code == 200

            async with anyio.create_task_group() as tg:
                for p in prompts:
                    tg.start_soon(send, p)
            after = await _scrape(client)
            total = engine.counters.generated_tokens
    w = cache_window(before, after)
    assert w is not None and w.engine_steps is not None and w.engine_batch_mean is not None
    # never more sequences per step than were sent; every sequence-step decoded one token
    # (an end-of-sequence token, which this engine does not count, at most once a request)
    assert 0 < w.engine_batch_mean <= len(prompts)
    assert w.engine_batch_mean * w.engine_steps <= total + len(prompts)
