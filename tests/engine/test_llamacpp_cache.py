"""The cache window on a real llama-server: prefix-cache hit rate and the queue from ``/metrics``.

Run with ``python -m pytest -m engine tests/engine/test_llamacpp_cache.py`` (needs a built
``llama-server`` and the ``gguf`` package, as ``.ci/engine.sh`` provides). The server is
the session's ``off`` route (``conftest.engine_routes``: one ``--parallel 1`` server of
the generated target model, shared with the other engine tests; its slot's cache is
filled here before the window opens): the same prompt twice reuses the slot's cached
prompt, so the window's ``llamacpp:prompt_tokens_cached`` delta must equal the
requests' own ``timings.cache_n``, and concurrent requests wait for the one slot
(``llamacpp:requests_deferred``).
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from deepseekbench import Dialect, EngineRoute, LiveGate, RunningLlamaServer, scrape_metrics
from deepseekbench._measure._cache_metrics import cache_window, while_sampling

pytestmark = pytest.mark.engine

PROMPT = "Tell me about the river and the stone, the long road and the green tree. " * 3


async def _chat(client: httpx.AsyncClient, base_url: str) -> dict[str, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    response = await client.post(f"{base_url}/chat/completions", json=body, timeout=120.0)
    response.raise_for_status()
    timings = response.json()["timings"]
    assert isinstance(timings, dict)
    return timings


def test_llamacpp_cache_window_matches_the_requests_cache_n(
    engine_routes: dict[str, RunningLlamaServer],
) -> None:
    server = engine_routes["off"]

    async def main() -> tuple[Any, list[dict[str, Any]]]:
        gate = LiveGate()
        async with gate.client(timeout=120.0) as client:
            route = EngineRoute(base_url=server.base_url, model="m", dialect=Dialect.llamacpp)
            await _chat(client, server.base_url)  # fills the slot's cache
            before = await scrape_metrics(route, gate=gate, client=client)
            timings: list[dict[str, Any]] = []

            async def body() -> None:
                timings.append(await _chat(client, server.base_url))
                async with anyio.create_task_group() as tg:  # 3 requests, 1 slot: 2 wait
                    for _ in range(3):
                        tg.start_soon(lambda: _one(client, server.base_url, timings))

            during = await while_sampling(
                body, route, gate=gate, client=client, opening=before, interval_s=0.02
            )
            after = await scrape_metrics(route, gate=gate, client=client)
            return cache_window(before, after, during), timings

    window, timings = anyio.run(main)
    assert window is not None and window.engine is Dialect.llamacpp
    cached = sum(int(t.get("cache_n", 0)) for t in timings)
    processed = sum(int(t["prompt_n"]) for t in timings)
    assert cached > 0, timings
    assert window.prefix_cache_hits == cached
    assert window.prefix_cache_queries == cached + processed
    assert window.prefix_cache_hit_rate == pytest.approx(cached / (cached + processed))
    assert window.queue_depth_peak is not None and window.queue_depth_peak >= 0
    assert window.scrapes >= 2


async def _one(client: httpx.AsyncClient, base_url: str, out: list[dict[str, Any]]) -> None:
    out.append(await _chat(client, base_url))
