"""The distribution witness end to end on embedded engines at temperature 0.7.

``off``, an exact speculative route (MTP, depth 3) and MTP routes with the embedded
engine's sampler faults (argmax acceptance, a draft that ignores the temperature, wide
relaxed acceptance: top-20 within 5 nats; and relaxed acceptance at the engine's default
top-3 within 1 nat) are measured on 120 arithmetic and reversal prompts the reference
model has not seen (its n-gram backoff is uncertain there, so the sampled tokens carry
information), with the plan's default witness keys: every sampled output is scored by
``off`` alone, and the rows judge the witness. The default relaxed acceptance moves
about 0.002 of mass per token here (its draft nearly matches the target), beyond any
test at this sample (docs/rows-and-gate.md); its row differs by the temperature-0 parity
set. Run on asyncio and trio.
"""

from __future__ import annotations

import contextlib
import random
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
    Speculative,
    run_plan,
)
from tests._helpers import COSTS, plan_of, read_records

PROMPTS = 120
FAULTS: dict[str, dict[str, Any]] = {
    "mtp-argmax": {"argmax_acceptance": True},
    "mtp-colddraft": {"draft_ignores_temperature": True},
    "mtp-relaxedwide": {"relaxed_acceptance": True, "relaxed_topk": 20, "relaxed_delta": 5.0},
    "mtp-relaxed": {"relaxed_acceptance": True},
}
WITNESSED = ("mtp-argmax", "mtp-colddraft", "mtp-relaxedwide")
"""The faults the witness itself refuses at this sample."""


def _prompts() -> list[str]:
    rng = random.Random(5)
    out: list[str] = []
    for i in range(PROMPTS):
        if i % 2:
            out.append(f"What is {rng.randint(100, 999)} + {rng.randint(100, 999)}?")
        else:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))
            out.append(f"Reverse the word {word}.")
    return out


PLAN: dict[str, Any] = {
    "requests_per_cell": PROMPTS,
    "warmup_per_cell": 0,
    "repeats": 1,
    "temperature": 0.7,
    "seed": 1,
    "arrival": {"mode": "concurrency", "concurrency": 8},
    "parity": {"concurrency": 8, "max_tokens": 64},
    "workload": {"output_length": "natural", "prompts": _prompts()},
}


class Recording(httpx.AsyncBaseTransport):
    """Keeps every chat and completions request's URL and JSON body, then sends it on."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/completions"):
            self.sent.append((str(request.url), orjson.loads(await request.aread())))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _run(path: Path, rec: Recording, again: Recording) -> tuple[RunResult, RunResult]:
    """The run, then the same plan resumed from its results file (``again`` records it)."""
    off = EngineConfig(cost=COSTS)
    mtp = off.model_copy(update={"speculative": Speculative.mtp, "draft_depth": 3})
    configs = {"off": off, "mtp": mtp} | {
        label: mtp.model_copy(update=fault) for label, fault in FAULTS.items()
    }
    async with contextlib.AsyncExitStack() as stack:
        urls = {
            label: (await stack.enter_async_context(EmbeddedEngine(c))).base_url
            for label, c in configs.items()
        }
        plan = plan_of(
            [(label, label.split("-")[0], url, Dialect.vllm) for label, url in urls.items()],
            PLAN,
            {},
        )
        out: list[RunResult] = []
        for transport in (rec, again):
            gate = LiveGate()
            async with gate.client(transport=transport) as client:
                out.append(await run_plan(plan, gate=gate, results_path=path, client=client))
        return out[0], out[1]


Witnessed = tuple[RunResult, Recording, Path, RunResult, Recording]


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def witnessed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Witnessed:
    path = tmp_path_factory.mktemp(f"witness-{request.param}") / "r.jsonl"
    rec, again = Recording(), Recording()

    async def main() -> tuple[RunResult, RunResult]:
        return await _run(path, rec, again)

    first, resumed = anyio.run(main, backend=str(request.param))
    return first, rec, path, resumed, again


def test_the_exact_route_is_verified_and_each_fault_refused(
    witnessed: Witnessed,
) -> None:
    result = witnessed[0]
    rows = {r.route_label: r for r in result.rows}
    min_tokens = result.plan.parity.witness_min_tokens
    for label in ("off", "mtp"):
        row = rows[label]
        assert row.parity_basis == "distribution", row.witness_note
        assert row.witness_tokens_tested is not None and row.witness_tokens_tested >= min_tokens
        assert row.witness_tokens_excluded is not None and row.witness_tokens_excluded > 0
        assert "near-certain excluded" in (row.witness_note or "")
        assert row.quality_parity is QualityParity.verified, row.parity_detail
        assert row.witness_detectable_distance is not None and row.witness_power == 0.9
    for label in WITNESSED:  # refused by the witness itself, at alpha
        bad = rows[label]
        assert bad.quality_parity is QualityParity.differs, bad.parity_detail
        assert bad.witness_p_value is not None and bad.witness_p_value < 0.05, bad.witness_note
        assert "distribution witness rejects" in (bad.parity_detail or "")
    assert (rows["mtp-argmax"].witness_p_value or 1.0) < 1e-6
    assert rows["mtp-relaxed"].quality_parity is QualityParity.differs  # the T = 0 parity set


def test_scoring_goes_to_off_only_and_its_cost_is_stated(
    witnessed: Witnessed,
) -> None:
    result, rec, path = witnessed[:3]
    off_url = next(r.base_url for r in result.plan.routes if r.label == "off")
    scoring = [(u, b) for u, b in rec.sent if "prompt_logprobs" in b]
    assert scoring and all(u.startswith(off_url) for u, _ in scoring)
    # the sampled token ids were streamed, so off scores them: a token-id prompt on
    # /v1/completions after a chat request for the prompt's own ids
    assert all(u.endswith("/v1/completions") and b["max_tokens"] == 1 for u, b in scoring)
    assert all(isinstance(b["prompt"], list) for _, b in scoring)
    asked_ids = [b for u, b in rec.sent if u.endswith("/chat/completions") and b["max_tokens"] == 1]
    assert len(asked_ids) == len(scoring) and all(b["return_token_ids"] for b in asked_ids)
    sampled = [b for _, b in rec.sent if b["stream"] and b["temperature"] > 0]
    assert sampled and all(b["return_token_ids"] for b in sampled)  # sampled: ids asked
    greedy = [b for _, b in rec.sent if b["stream"] and b["temperature"] == 0]
    assert greedy and not any("return_token_ids" in b for b in greedy)
    scores = [r for r in read_records(path) if r["record"] == "witness_score"]
    assert len(scores) == len(scoring) == len(result.rows) * PROMPTS  # one per sampled output
    assert all(r["scored"]["scored_by"] == "token_ids" for r in scores)
    notes = [r.witness_note or "" for r in result.rows]
    assert all("outputs scored on the sampled token ids" in n for n in notes), notes
    for row in result.rows:
        assert row.witness_requests == PROMPTS
        assert row.witness_scored_tokens is not None and row.witness_scored_tokens > 0
    seeds = {b["seed"] for u, b in rec.sent if u.startswith(off_url) and "prompt_logprobs" not in b}
    assert len(seeds) >= PROMPTS  # one seed per prompt: independent draws


def test_a_resumed_run_does_not_score_again(witnessed: Witnessed) -> None:
    first, _, _, resumed, again = witnessed
    assert not [b for _, b in again.sent if "prompt_logprobs" in b]
    assert [r.quality_parity for r in resumed.rows] == [r.quality_parity for r in first.rows]
    assert [r.witness_p_value for r in resumed.rows] == [r.witness_p_value for r in first.rows]
