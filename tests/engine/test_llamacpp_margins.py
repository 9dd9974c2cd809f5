"""Real margins from llama-server's logprobs, through ``run_plan``.

A small plan over ``off``, the lossless ``draft`` route and the mis-tuned draft route
(``--spec-synth-len``: drafts accepted without verification; tests/engine/conftest.py),
judged under ``parity.exact = "within_noise"``. The forensics step asks ``off`` (only)
for ``logprobs``/``top_logprobs`` at each divergence; llama-server answers in OpenAI's
shape plus ``id``/``bytes`` (docs/engines.md, llama.cpp). The mis-tuned route's
divergences must each get a real margin (never ``None``), at least one ``decisive``,
and the row must be refused under ``within_noise`` too; the lossless route has nothing
to explain and stays verified.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    LiveGate,
    QualityParity,
    RunningLlamaServer,
    RunResult,
    Scorecard,
    run_plan,
)
from deepseekbench._execute._forensics import TOP_LOGPROBS
from tests.engine.plans import TimingsRecorder, llamacpp_plan

pytestmark = pytest.mark.engine

ROUTES = (("off", "off", "off"), ("draft", "draft", "draft"), ("mis", "mistuned", "draft"))
PARITY_PROMPTS = (
    "List three colors: red, blue and gold.",
    "Name a bird, a fish and a horse.",
    "What did the people find under the bridge?",
    "Tell me about the river and the stone.",
)


def build_plan(routes: dict[str, RunningLlamaServer]) -> BenchmarkPlan:
    return llamacpp_plan(
        routes,
        ROUTES,
        max_tokens=16,
        requests_per_cell=1,
        warmup_per_cell=0,
        workload_prompts=["Write a story about a green tree in the garden."],
        parity_prompts=PARITY_PROMPTS,
        parity_max_tokens=32,
        repeats=1,
        exact="within_noise",
    )


def test_llamacpp_logprobs_give_real_margins_and_the_mistuned_draft_is_decisive(
    engine_routes: dict[str, RunningLlamaServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = build_plan(engine_routes)
    results = tmp_path / "results.jsonl"
    recorder = TimingsRecorder()
    gate = LiveGate()

    async def main() -> RunResult:
        async with gate.client(transport=recorder, timeout=httpx.Timeout(120.0)) as client:
            return await run_plan(plan, gate=gate, results_path=results, client=client)

    result = anyio.run(main)
    text = Scorecard.from_run(result).to_text()
    records = [orjson.loads(line) for line in results.read_bytes().splitlines() if line.strip()]
    margins = [r for r in records if r["record"] == "divergence_margin"]
    with capsys.disabled():
        print(f"\n[llama.cpp margins]\n{text}", flush=True)
        for r in margins:
            m = r["margin"]
            print(
                f"[llama.cpp margins] {r['route']} {r['source']} {m['prompt_id']} token "
                f"{m['token_index']}: off {m['off_token']!r} vs {m['candidate_token']!r} "
                f"margin {m['margin_nats']} nats, rank {m['candidate_rank']} ({m['kind']})",
                flush=True,
            )

    # logprobs asked of off only, never of a speculative route
    port = {label: engine_routes[name].port for label, name, _ in ROUTES}
    sent = [(p, b) for p, bodies in recorder.bodies.items() for b in bodies]
    asked = [(p, b) for p, b in sent if "logprobs" in b or "top_logprobs" in b]
    assert asked and {p for p, _ in asked} == {port["off"]}
    # one follow-up per divergence, and one per profiled off output (within_noise's
    # near-tie opportunities; llama.cpp cannot score in one pass, so no other request)
    profiles = [r for r in records if r["record"] == "off_profile"]
    assert len(asked) == len(margins) + len(profiles)
    assert all("no prompt logprobs" in r["profile"]["one_pass_note"] for r in profiles), profiles
    assert all(b["stream"] is False and b["top_logprobs"] == TOP_LOGPROBS for _, b in asked)

    rows = {r.route_label: r for r in result.rows}
    bad = result.parity[("mis", plan.cells[0].reasoning_mode)]
    assert bad.exact is not None and bad.exact.n_diverged >= 1
    mis = [r["margin"] for r in margins if r["route"] == "mis" and r["source"] == "parity"]
    assert len(mis) == bad.exact.n_diverged
    for m in mis:  # a real margin from llama-server's top_logprobs, never None
        assert m["margin_nats"] is not None and m["margin_nats"] >= 0, m
        assert m["top_k"] == TOP_LOGPROBS and m["kind"] != "unexplained", m
    assert any(m["kind"] == "decisive" for m in mis), mis
    assert rows["mis"].parity_basis == "within_noise"
    assert rows["mis"].divergences_decisive is not None and rows["mis"].divergences_decisive >= 1
    assert rows["mis"].quality_parity is QualityParity.differs
    assert "decisive divergence at" in text and "off's top-1 margin" in text
    # the lossless draft route matches off: nothing to explain; but 5 compared outputs
    # cannot bound a lossy route's decisive rate by parity.lossy_rate, so the verdict says
    # how many more would decide instead of verifying by absence of evidence
    assert not [r for r in margins if r["route"] == "draft"]
    assert rows["draft"].quality_parity is QualityParity.unknown
    assert "more prompts/requests would decide" in (rows["draft"].parity_detail or "")
