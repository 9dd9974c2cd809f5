"""Issue 21 end to end: run_plan's forensics step asks ``off`` (only) for logprobs at every
divergence, records the margins, and the rows judge them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench._engine import EmbeddedEngine, EngineConfig
from deepseekbench._net._gate import LiveGate
from deepseekbench._runner import RunResult, load_results, run_plan
from deepseekbench._types._axes import Dialect, Speculative
from tests._helpers import COSTS, plan_of, read_records

PLAN: dict[str, Any] = {
    "requests_per_cell": 8,
    "warmup_per_cell": 0,
    "arrival": {"mode": "concurrency", "concurrency": 4},
    "parity": {"concurrency": 8, "max_tokens": 64},
}


class Recording(httpx.AsyncBaseTransport):
    """Keeps every request's URL and JSON body, then sends it on."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            self.sent.append((str(request.url), orjson.loads(await request.aread())))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def engines() -> AsyncIterator[tuple[EmbeddedEngine, EmbeddedEngine, EmbeddedEngine]]:
    off = EngineConfig(cost=COSTS, numerics=True)
    mtp = off.model_copy(update={"speculative": Speculative.mtp, "draft_depth": 3})
    bad = EngineConfig(cost=COSTS, speculative=Speculative.mtp, draft_depth=3, mistuned_draft=True)
    async with EmbeddedEngine(off) as e0, EmbeddedEngine(mtp) as e1, EmbeddedEngine(bad) as e2:
        yield e0, e1, e2


def run(tmp_path: Path, **over: Any) -> tuple[RunResult, Recording, dict[str, str]]:
    rec = Recording()

    async def main() -> tuple[RunResult, dict[str, str]]:
        async with engines() as (off, mtp, bad):
            plan = plan_of(
                [
                    ("off", "off", off.base_url, Dialect.vllm),
                    ("mtp", "mtp", mtp.base_url, Dialect.vllm),
                    ("mtp-mistuned", "mtp", bad.base_url, Dialect.vllm),
                ],
                PLAN,
                over,
            )
            gate = LiveGate()
            async with gate.client(transport=rec) as client:
                result = await run_plan(
                    plan, gate=gate, results_path=tmp_path / "r.jsonl", client=client
                )
            urls = {"off": off.base_url, "mtp": mtp.base_url, "mtp-mistuned": bad.base_url}
            return result, urls

    result, urls = anyio.run(main)
    return result, rec, urls


@pytest.fixture(scope="module")
def bit_exact(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Recording, Path]:
    path = tmp_path_factory.mktemp("forensics")
    result, rec, _urls = run(path)
    return result, rec, path


def test_speculative_routes_never_carry_a_logprobs_request(
    bit_exact: tuple[RunResult, Recording, Path],
) -> None:
    result, rec, _path = bit_exact
    by_route = {r.label: r.base_url for r in result.plan.routes}
    follow = [(u, b) for u, b in rec.sent if "logprobs" in b or "top_logprobs" in b]
    assert follow, "no follow-up was sent"
    for url, body in rec.sent:
        if not url.startswith(by_route["off"]):
            assert "logprobs" not in body and "top_logprobs" not in body, url
    for url, body in follow:
        assert url.startswith(by_route["off"]) and body["stream"] is False
        assert body["temperature"] == 0 and body["top_logprobs"] >= 2


def test_margins_are_recorded_and_classified(
    bit_exact: tuple[RunResult, Recording, Path],
) -> None:
    result, _, path = bit_exact
    recs = [r for r in read_records(path / "r.jsonl") if r["record"] == "divergence_margin"]
    kinds: dict[str, set[str]] = {}
    for r in recs:
        kinds.setdefault(r["route"], set()).add(r["margin"]["kind"])
    assert kinds.get("mtp") == {"near_tie"}, kinds
    assert "decisive" in kinds.get("mtp-mistuned", set()), kinds
    for r in recs:
        if r["route"] == "mtp":
            assert 0 < r["margin"]["margin_nats"] <= 0.03
    again = load_results(path / "r.jsonl")  # the file reads back with the new records
    assert [r.route_label for r in again.rows] == [r.route_label for r in result.rows]
