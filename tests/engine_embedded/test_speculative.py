"""The draft/verify loop, in process: exactness, acceptance, the mis-tuned fault."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepseekbench import (
    CostModel,
    Dialect,
    EngineConfig,
    EngineTask,
    FaultConfig,
    FaultKind,
    Speculative,
    all_reference_tasks,
)
from deepseekbench._engine._faults import faults_for_request, parse_fault_header
from deepseekbench._engine._model import EOS_CH, context_of, reference_lm
from deepseekbench._engine._speculative import DEFAULT_DEPTH, Decoder, StepOutcome

SPECULATIVE = [s for s in Speculative if s is not Speculative.off]
TASKS = all_reference_tasks()


def decode(
    task: EngineTask,
    method: Speculative,
    k: int,
    *,
    mistuned: bool = False,
    temperature: float = 0.0,
    seed: int = 0,
) -> tuple[str, list[StepOutcome]]:
    decoder = Decoder(
        reference_lm(),
        method,
        k,
        temperature=temperature,
        rng=random.Random(seed),
        mistuned=mistuned,
    )
    ctx = context_of(task.prompt)
    text = ""
    steps: list[StepOutcome] = []
    while len(text) < 300:
        out = decoder.step(ctx + text, 300 - len(text))
        steps.append(out)
        text += "".join(out.tokens)
        if text.endswith(EOS_CH):
            return text[:-1], steps
    return text, steps


@settings(max_examples=60, deadline=None)
@given(
    task=st.sampled_from(TASKS),
    method=st.sampled_from(SPECULATIVE),
    k=st.integers(min_value=1, max_value=6),
)
def test_greedy_speculation_is_exact(task: EngineTask, method: Speculative, k: int) -> None:
    text, steps = decode(task, method, k)
    assert text == task.answer
    for s in steps:
        assert 0 <= s.accepted <= s.drafted <= k
        assert len(s.tokens) in (s.accepted, s.accepted + 1)


def test_every_task_is_exact_under_dspark() -> None:
    """(mtp on every task: ``_acceptance`` below; over HTTP on a spread in test_server.py.)"""
    k = DEFAULT_DEPTH[Speculative.dspark]
    assert [t.prompt for t in TASKS if decode(t, Speculative.dspark, k)[0] != t.answer] == []


@cache
def _acceptance(
    method: Speculative, *, mistuned: bool = False, stride: int = 1
) -> tuple[dict[str, float], int]:
    """Acceptance rate per category and the number of drifted outputs."""
    drafted: defaultdict[str, int] = defaultdict(int)
    accepted: defaultdict[str, int] = defaultdict(int)
    drifted = 0
    for task in TASKS[::stride]:
        text, steps = decode(task, method, DEFAULT_DEPTH[method], mistuned=mistuned)
        drifted += text != task.answer
        drafted[task.category] += sum(s.drafted for s in steps)
        accepted[task.category] += sum(s.accepted for s in steps)
    return {c: accepted[c] / drafted[c] for c in drafted}, drifted


def test_acceptance_varies_by_task_and_stays_away_from_0_and_1() -> None:
    for method in SPECULATIVE:
        by_cat, drifted = _acceptance(method, stride=1 if method is Speculative.mtp else 5)
        assert drifted == 0
        assert all(0.1 < r < 0.97 for r in by_cat.values()), (method, by_cat)
        assert max(by_cat.values()) - min(by_cat.values()) > 0.1, (method, by_cat)


def test_mistuned_draft_accepts_more_and_drifts_a_share_of_prompts() -> None:
    correct, _ = _acceptance(Speculative.mtp)
    lossy, drifted = _acceptance(Speculative.mtp, mistuned=True)
    share = drifted / len(TASKS)
    assert 0.1 < share < 0.5, share
    assert sum(lossy.values()) > sum(correct.values())


def test_speculative_sampling_keeps_the_target_distribution() -> None:
    """First token after a context where draft and target disagree, 4,000 draws each."""
    task = next(t for t in TASKS if t.category == "arithmetic")
    ctx = context_of(task.prompt) + task.answer[:-2]
    n = 4000

    def first_tokens(method: Speculative, k: int) -> Counter[str]:
        rng = random.Random(11)
        dec = Decoder(reference_lm(), method, k, temperature=1.0, rng=rng)
        return Counter(dec.step(ctx, k + 1).tokens[0] for _ in range(n))

    plain, spec = first_tokens(Speculative.off, 0), first_tokens(Speculative.mtp, 1)
    tv = 0.5 * sum(abs(plain[c] - spec[c]) / n for c in set(plain) | set(spec))
    assert tv < 0.05, (plain.most_common(4), spec.most_common(4))
    lossy = Decoder(
        reference_lm(), Speculative.mtp, 1, temperature=1.0, rng=random.Random(11), mistuned=True
    )
    bad = Counter(lossy.step(ctx, 2).tokens[0] for _ in range(n))
    assert 0.5 * sum(abs(plain[c] - bad[c]) / n for c in set(plain) | set(bad)) > tv


def test_sampling_is_reproducible_with_a_seed() -> None:
    task = TASKS[5]
    a = decode(task, Speculative.mtp, 1, temperature=0.9, seed=7)[0]
    assert a == decode(task, Speculative.mtp, 1, temperature=0.9, seed=7)[0]
    outs = {decode(task, Speculative.mtp, 1, temperature=0.9, seed=s)[0] for s in range(8)}
    assert len(outs) > 1


def test_decoder_rejects_negative_settings_and_respects_budget() -> None:
    with pytest.raises(ValueError):
        Decoder(reference_lm(), Speculative.mtp, -1, temperature=0.0, rng=random.Random())
    with pytest.raises(ValueError):
        Decoder(reference_lm(), Speculative.mtp, 1, temperature=-1.0, rng=random.Random())
    dec = Decoder(reference_lm(), Speculative.dspark, 4, temperature=0.0, rng=random.Random())
    out = dec.step(context_of(TASKS[0].prompt), 1)
    assert out.drafted == 0 and len(out.tokens) == 1


def test_cost_model_is_sublinear_in_batch_and_verify_costs_about_one_step() -> None:
    cost = CostModel()
    one = cost.step_ms(1, 0, 0, model_draft=False)
    assert one == pytest.approx(cost.target_step_ms)
    assert cost.step_ms(1, 1, 0, model_draft=True) < 1.2 * one
    b64 = cost.step_ms(64, 0, 0, model_draft=False)
    assert one < b64 < 64 * one
    assert cost.step_ms(1, 0, 100, model_draft=False) == pytest.approx(
        one + 100 * cost.prefill_ms_per_token
    )
    with pytest.raises(ValueError):
        CostModel(batch_exponent=1.0)
    with pytest.raises(ValueError):
        CostModel(target_step_ms=-1)


def test_engine_config_validation_and_default_depths() -> None:
    assert EngineConfig(speculative=Speculative.mtp).effective_draft_depth == 1
    assert EngineConfig(speculative=Speculative.dspark).effective_draft_depth > 1
    assert EngineConfig().effective_draft_depth == 0
    assert EngineConfig(speculative=Speculative.mtp, draft_depth=3).effective_draft_depth == 3
    with pytest.raises(ValueError, match="meaningless"):
        EngineConfig(draft_depth=2)
    with pytest.raises(ValueError, match="cannot serve dialect"):
        EngineConfig(dialect=Dialect.auto)
    with pytest.raises(ValueError):
        EngineConfig.model_validate({"speculative": "medusa"})
    with pytest.raises(ValueError):
        EngineConfig.model_validate({"bogus": 1})


def test_fault_resolution() -> None:
    assert parse_fault_header(" drop, stall ") == {FaultKind.drop, FaultKind.stall}
    with pytest.raises(ValueError, match="allowed"):
        parse_fault_header("explode")
    cfg = FaultConfig(drop_connection=True, probability=0.5)
    rng = random.Random(1)
    hits = sum(FaultKind.drop in faults_for_request(cfg, None, rng) for _ in range(400))
    assert 120 < hits < 280
    assert faults_for_request(FaultConfig(), None, rng).kinds == frozenset()
    closed = FaultConfig(allow_request_header=False)
    assert faults_for_request(closed, "drop", rng).kinds == frozenset()
    assert FaultConfig(http_status=503).enabled() == {FaultKind.http_503}
