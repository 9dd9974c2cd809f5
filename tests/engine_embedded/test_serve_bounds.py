"""The embedded engine stays on loopback unless told otherwise, and its
``/v1/timelines`` record is bounded (completions kept, chunks in all)."""

from __future__ import annotations

import io

import anyio
import httpx
import pytest

from deepseekbench import EmbeddedEngine, EngineConfig
from deepseekbench._cli._exits import EXIT_USAGE
from deepseekbench._cli._main import main
from deepseekbench._engine import FAST_COSTS, _server, serve
from deepseekbench._engine._embedded import is_loopback_host


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "10.0.0.1", "example.com"])
def test_serve_host_beyond_loopback_needs_the_flag(host: str) -> None:
    assert not is_loopback_host(host)
    err = io.StringIO()
    code = main(["serve", "--host", host, "--port", "0"], stdout=io.StringIO(), stderr=err)
    assert code == EXIT_USAGE
    assert "--allow-non-loopback" in err.getvalue() and err.getvalue().count("\n") == 1
    with pytest.raises(ValueError, match="not a loopback address"):
        anyio.run(lambda: serve(EngineConfig(cost=FAST_COSTS), host, 0))


async def _complete(client: httpx.AsyncClient, n: int, max_tokens: int = 4) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    for i in range(n):
        r = await client.post(
            "/v1/chat/completions",
            json={**body, "max_tokens": max_tokens, "ignore_eos": True},
            headers={"x-request-id": f"r{i}"},
        )
        assert r.status_code == 200


@pytest.mark.anyio
async def test_timelines_keep_the_newest_completions_and_count_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_server, "MAX_TIMELINES", 3)
    async with EmbeddedEngine(EngineConfig(cost=FAST_COSTS, record_send_times=True)) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root, timeout=30) as client:
            await _complete(client, 5)
            answer = (await client.get("/v1/timelines")).json()
        assert len(engine.send_times) == 3
    assert [t["request_id"] for t in answer["data"]] == ["r2", "r3", "r4"]
    assert answer["dropped"] == 2


@pytest.mark.anyio
async def test_timelines_hold_a_bounded_number_of_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_server, "MAX_TIMELINE_CHUNKS", 20)
    async with EmbeddedEngine(EngineConfig(cost=FAST_COSTS, record_send_times=True)) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root, timeout=30) as client:
            await _complete(client, 4, max_tokens=6)  # several chunks each: past 20 in all
            await _complete(client, 1, max_tokens=200)  # alone past the budget
            answer = (await client.get("/v1/timelines")).json()
    kept = sum(len(t["chunks"]) for t in answer["data"])
    assert kept <= 20
    assert answer["dropped"] >= 1
    (last,) = [t for t in answer["data"] if t["request_id"] == "r0" and t["chunks_dropped"]]
    assert len(last["chunks"]) == 20
