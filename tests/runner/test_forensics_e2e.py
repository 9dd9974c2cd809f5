"""The margin follow-up end to end: run_plan's forensics step asks ``off`` (only) for
logprobs at every divergence, records the margins, and the rows judge them."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench import (
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    LiveGate,
    QualityParity,
    RunResult,
    Scorecard,
    Speculative,
    load_results,
    run_plan,
)
from tests._helpers import COSTS, plan_of, read_records

PLAN: dict[str, Any] = {
    "requests_per_cell": 8,
    "warmup_per_cell": 0,
    "arrival": {"mode": "concurrency", "concurrency": 4},
    "parity": {"concurrency": 8, "max_tokens": 64},
    # the numerics mode's near-ties live past 128 characters: decode to the cap, as the
    # `demo --numerics` does (a pinned run stops at each prompt's short natural end)
    "workload": {"output_length": "forced"},
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


def test_bit_exact_rows_say_differs_and_what_would_make_them_verifiable(
    bit_exact: tuple[RunResult, Recording, Path],
) -> None:
    rows = {r.route_label: r for r in bit_exact[0].rows}
    mtp, bad, off = rows["mtp"], rows["mtp-mistuned"], rows["off"]
    assert mtp.parity_basis == "bit_exact" and mtp.quality_parity is QualityParity.differs
    assert mtp.divergences_near_tie and not mtp.divergences_decisive
    assert not mtp.divergences_unexplained
    assert mtp.divergence_note is not None and "within_noise" in mtp.divergence_note
    assert mtp.first_divergence_margin_nats is not None
    assert 0 < mtp.first_divergence_margin_nats <= 0.03
    assert mtp.tau_source == "default" and mtp.noise_floor == 0
    assert bad.divergences_decisive and bad.quality_parity is QualityParity.differs
    assert bad.divergence_note is not None and "decisive" in bad.divergence_note
    assert off.quality_parity is QualityParity.verified


def test_within_noise_verifies_the_near_ties_and_refuses_the_mistuned_route(
    tmp_path: Path,
) -> None:
    result, _, _ = run(tmp_path, parity={**PLAN["parity"], "exact": "within_noise"})
    rows = {r.route_label: r for r in result.rows}
    mtp, bad = rows["mtp"], rows["mtp-mistuned"]
    assert mtp.parity_basis == "within_noise"
    assert mtp.quality_parity is QualityParity.verified, mtp.parity_detail
    assert mtp.divergences_near_tie and "all near-ties" in (mtp.divergence_note or "")
    assert bad.quality_parity is QualityParity.differs
    assert "decisive" in (bad.parity_detail or "")
    assert rows["off"].quality_parity is QualityParity.verified
    # the same records under the other rule: the plan key changes no measured request
    assert (
        result.plan_hash
        == result.plan.model_copy(
            update={"parity": result.plan.parity.model_copy(update={"exact": "bit_exact"})}
        ).plan_hash()
    )


def test_the_scorecard_shows_the_margin_in_every_format(
    bit_exact: tuple[RunResult, Recording, Path],
) -> None:
    card = Scorecard.from_run(bit_exact[0])
    mtp = next(ln for ln in card.lines if ln.route == "mtp")
    assert mtp.first_divergence is not None and "off's margin 0.0" in mtp.first_divergence
    for fmt in ("text", "markdown", "json", "csv", "html"):
        out = html.unescape(card.render(fmt)) if fmt == "html" else card.render(fmt)
        assert "off's margin" in out, fmt
        assert "within_noise" in out, fmt  # what would make the mtp row verifiable
    text = card.to_text()
    assert "all near-ties" in text and "decisive divergence at" in text
    assert not mtp.credited
