"""Token-true workloads on rows: tokens_estimated refusal (property), EOS controls per dialect,
the embedded engine reaching max_tokens, short outputs and per-category slices."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepseekbench import (
    ChatRequest,
    ContextBucket,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    Hosting,
    OutputTarget,
    QualityParity,
    ReasoningMode,
    RefusalReason,
    Row,
    SliceStats,
    Speculative,
    SpeedupMetric,
    SpeedupVerdict,
    StreamMeasurement,
    category_speedups,
    compare_speedup,
    eos_controls,
)
from deepseekbench._analysis._breakdown import category_row, is_short, slice_stats, workload_fields
from deepseekbench._engine import FAST_COSTS
from tests.strategies import creditable_pairs
from tests.test_properties import BROKEN_SETTINGS, PROPERTY_SETTINGS, Comparator

FEWER = settings(PROPERTY_SETTINGS, max_examples=60)

# --- compare_speedup refuses estimated token counts ---------------------------------


def check_estimated_property(compare: Comparator, cfg: settings = FEWER) -> None:
    @cfg
    @given(
        pair=creditable_pairs(),
        which=st.sampled_from(["baseline", "candidate", "both"]),
        metric=st.sampled_from(SpeedupMetric),
    )
    def prop(pair: tuple[Row, Row], which: str, metric: SpeedupMetric) -> None:
        base, cand = pair
        if which in ("baseline", "both"):
            base = base.model_copy(update={"tokens_estimated": True})
        if which in ("candidate", "both"):
            cand = cand.model_copy(update={"tokens_estimated": True})
        verdict = compare(base, cand, metric=metric)
        assert not verdict.printed and verdict.speedup is None
        assert verdict.reasons == (RefusalReason.tokens_estimated,)

    prop()


def broken_ignores_estimates(base: Row, cand: Row, **kw: Any) -> SpeedupVerdict:
    exact = {"tokens_estimated": False}
    return compare_speedup(base.model_copy(update=exact), cand.model_copy(update=exact), **kw)


def test_estimated_counts_on_either_side_are_refused() -> None:
    check_estimated_property(compare_speedup)


def test_estimated_property_catches_a_comparator_that_ignores_it() -> None:
    with pytest.raises(AssertionError):
        check_estimated_property(broken_ignores_estimates, BROKEN_SETTINGS)


# --- EOS controls per dialect ------------------------------------------------------


def test_eos_controls_per_dialect() -> None:
    assert eos_controls(Dialect.vllm, 256) == {"ignore_eos": True, "min_tokens": 256}
    assert eos_controls(Dialect.sglang, 256) == {"ignore_eos": True, "min_tokens": 256}
    assert eos_controls(Dialect.auto, 256) == {"ignore_eos": True, "min_tokens": 256}
    assert eos_controls(Dialect.llamacpp, 256) == {"ignore_eos": True}
    assert eos_controls(Dialect.vllm, None) == {"ignore_eos": True}
    assert eos_controls(Dialect.openai, 256) == {}
    assert eos_controls(Dialect.deepseek, 256) == {}


def test_only_requests_that_ask_reach_max_tokens() -> None:
    route = EngineRoute(base_url="http://127.0.0.1:1/v1", model="m", dialect=Dialect.vllm)
    msgs = ({"role": "user", "content": "q"},)
    natural = route.build_body(ChatRequest(messages=msgs, max_tokens=64))
    assert "ignore_eos" not in natural and "min_tokens" not in natural
    forced = route.build_body(ChatRequest(messages=msgs, max_tokens=64, reach_max_tokens=True))
    assert forced["ignore_eos"] is True and forced["min_tokens"] == 64
    assert "reach_max_tokens" not in forced


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _completion_tokens(client: httpx.AsyncClient, root: str, **extra: Any) -> int:
    body = {
        "model": "deepseekbench-ref",
        "messages": [{"role": "user", "content": "What is 3 × 4?"}],
        "temperature": 0,
        "max_tokens": 120,
        **extra,
    }
    r = await client.post(f"{root}/v1/chat/completions", content=orjson.dumps(body))
    data = r.json()
    return int(data["usage"]["completion_tokens"])


@pytest.mark.anyio
@pytest.mark.parametrize("spec", [Speculative.off, Speculative.mtp, Speculative.ngram])
async def test_embedded_engine_honours_ignore_eos_and_min_tokens(spec: Speculative) -> None:
    async with EmbeddedEngine(EngineConfig(cost=FAST_COSTS, speculative=spec)) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(timeout=30) as client:
            natural = await _completion_tokens(client, root)
            assert natural < 120  # "3 × 4 = 12" then EOS
            assert await _completion_tokens(client, root, ignore_eos=True) == 120
            at_least = await _completion_tokens(client, root, min_tokens=40)
            assert 40 <= at_least <= 120


# --- short outputs and slices --------------------------------------------------------


def meas(**kw: Any) -> StreamMeasurement:
    base: dict[str, Any] = {
        "completion_tokens": 100,
        "tokens_estimated": False,
        "ttft_ms": 10.0,
        "e2e_ms": 109.0,
        "tpot_ms": 1.0,
        "output_toks_per_s": 100 / 0.109,
        "prompt_tokens": 20,
    }
    base.update(kw)
    return StreamMeasurement(**base)


def test_short_outputs_are_counted() -> None:
    assert not is_short(meas(), 100)
    assert is_short(meas(completion_tokens=99), 100)
    assert is_short(meas(completion_tokens=None), 100)  # unknown length: not shown to reach
    f = workload_fields([meas(), meas(completion_tokens=10)], 100)
    assert f["output_short"] and f["n_output_short"] == 1
    assert f["output_tokens"].p50 == pytest.approx(55.0)
    assert f["prompt_tokens"].p50 == 20.0
    assert not workload_fields([meas()], 100)["output_short"]


def test_slice_stats_sum_per_request_acceptance() -> None:
    from deepseekbench import AcceptanceRecord

    def acc(d: int, a: int, steps: int) -> AcceptanceRecord:
        return AcceptanceRecord.from_counts(
            engine=Dialect.vllm, source="t", draft_tokens=d, accepted_tokens=a, verify_steps=steps
        )

    ms = [
        meas(draft_tokens=10, accepted_tokens=5, acceptance=acc(10, 5, 10), tpot_ms=1.0),
        meas(draft_tokens=30, accepted_tokens=27, acceptance=acc(30, 27, 30), tpot_ms=3.0),
        meas(error={"kind": "timeout", "message": "x"}),
    ]
    s = slice_stats("qa", ms, max_tokens=100)
    assert s.n_requests == 3 and s.n_errors == 1
    assert s.accepted_token_ratio == pytest.approx(32 / 40)
    assert s.acceptance_length == pytest.approx(1 + 32 / 40)
    assert s.tpot_ms == pytest.approx(2.0)
    assert not s.output_short and not s.tokens_estimated
    none = slice_stats("x", [meas()], max_tokens=100)
    assert none.accepted_token_ratio is None and none.draft_tokens is None


def _row(spec: Speculative, cats: tuple[SliceStats, ...]) -> Row:
    return Row(
        model_id="m",
        provider_route="local",
        engine_route="embedded",
        hosting=Hosting.embedded,
        context_bucket=ContextBucket.k1,
        output_target=OutputTarget.t256,
        reasoning_mode=ReasoningMode.non_think,
        stream=True,
        speculative=spec,
        ttft_ms=1.0,
        tpot_ms=2.0,
        e2e_ms=3.0,
        output_toks_per_s=4.0,
        n_requests=10,
        quality_parity=QualityParity.verified,
        categories=cats,
        concurrency=1,
        arrival="closed",
    )


def test_category_speedups_go_through_compare_speedup() -> None:
    def sl(name: str, tpot: float, n: int = 5, **kw: Any) -> SliceStats:
        return SliceStats(
            name=name, n_requests=n, ttft_ms=1, tpot_ms=tpot, e2e_ms=3, output_toks_per_s=4, **kw
        )

    base = _row(Speculative.off, (sl("qa", 4.0), sl("rag", 4.0), sl("code", 4.0)))
    cand = _row(
        Speculative.mtp,
        (sl("qa", 2.0), sl("rag", 4.0, n=2), sl("code", 1.0, tokens_estimated=True)),
    )
    verdicts = category_speedups(base, cand)
    assert list(verdicts) == ["code", "qa", "rag"]
    assert verdicts["qa"].printed and verdicts["qa"].speedup == pytest.approx(2.0)
    assert RefusalReason.candidate_too_few_requests in verdicts["rag"].reasons
    assert verdicts["code"].reasons == (RefusalReason.tokens_estimated,)
    narrowed = category_row(cand, "qa")
    assert narrowed is not None and narrowed.tpot_ms == 2.0 and narrowed.categories == ()
    assert category_row(cand, "absent") is None


def test_scorecard_shows_the_category_table_and_short_outputs() -> None:
    from deepseekbench import Scorecard

    def sl(name: str, tpot: float, acc: float | None = None) -> SliceStats:
        return SliceStats(
            name=name,
            n_requests=5,
            ttft_ms=1,
            tpot_ms=tpot,
            e2e_ms=3,
            output_toks_per_s=4,
            accepted_token_ratio=acc,
            acceptance_length=None if acc is None else 1 + acc,
        )

    base = _row(Speculative.off, (sl("qa", 4.0), sl("rag", 4.0)))
    cand = _row(Speculative.mtp, (sl("qa", 2.0, 0.8), sl("rag", 3.2, 0.4))).model_copy(
        update={"output_short": True, "n_output_short": 3}
    )
    card = Scorecard.from_rows([base, cand])
    text = card.to_text()
    assert "Per category" in text
    qa = next(ln for ln in text.splitlines() if " qa " in f" {ln} " and "mtp" in ln)
    assert "0.80" in qa and "1.80" in qa and "2.00× by tpot_ms" in qa
    rag = next(ln for ln in text.splitlines() if " rag " in f" {ln} " and "mtp" in ln)
    assert "1.25× by tpot_ms" in rag
    assert "3 of 10 outputs fell short of max_tokens" in text
    md = card.to_markdown()
    assert "| cell | load | route | category | n | accept |" in md
    line = card.lines[1]
    assert [c.name for c in line.categories] == ["qa", "rag"]
    assert line.categories[0].verdict is not None and line.categories[0].verdict.printed
    # no categories: no second table
    plain = Scorecard.from_rows([_row(Speculative.off, ()), _row(Speculative.mtp, ())])
    assert "Per category" not in plain.to_text()
