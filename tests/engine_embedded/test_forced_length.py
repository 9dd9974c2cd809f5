"""Forced length (``ignore_eos`` / ``min_tokens``): an end-of-sequence token is ordinary.

Real engines under ``ignore_eos`` treat the end-of-sequence token as any other token:
the drafter drafts past it, the verify accepts it, and the step ends with its bonus
token. The embedded engine does the same (it emits the token as a line break), so a
forced-length verify step emits exactly ``1 + accepted`` tokens and the acceptance
length ``1 + accepted / verify steps`` is the tokens a verify step emits. Without
forced length an accepted end-of-sequence draft still ends the step (and the
sequence) without a bonus token.
"""

from __future__ import annotations

import random

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepseekbench import CostModel, EngineTask, Speculative, all_reference_tasks, smoke_tasks
from deepseekbench._engine._metrics import EngineMetrics
from deepseekbench._engine._model import EOS_CH, Dist, context_of, reference_lm
from deepseekbench._engine._scheduler import Emission, Scheduler
from deepseekbench._engine._speculative import (
    EOS_SUBSTITUTE,
    Decoder,
    LanguageModel,
    StepOutcome,
)

TASKS = all_reference_tasks()
DRAFTED = [Speculative.mtp, Speculative.eagle3, Speculative.draft, Speculative.dspark]
LENGTH = 120  # tokens: past every reference answer's end-of-sequence


class _AlwaysEos:
    """A model whose target and draft both always choose end-of-sequence."""

    def target(self, ctx: str) -> Dist:
        return {EOS_CH: 1.0}

    def target_argmax(self, ctx: str) -> str:
        return EOS_CH

    def draft(self, order: int, ctx: str) -> Dist:
        return {EOS_CH: 1.0}

    def draft_argmax(self, order: int, ctx: str) -> str:
        return EOS_CH


class _CountingLM:
    """The reference model, counting the end-of-sequence tokens its draft heads propose."""

    def __init__(self) -> None:
        self._lm = reference_lm()
        self.eos_drafts = 0

    def target(self, ctx: str) -> Dist:
        return self._lm.target(ctx)

    def target_argmax(self, ctx: str) -> str:
        return self._lm.target_argmax(ctx)

    def draft(self, order: int, ctx: str) -> Dist:
        return self._lm.draft(order, ctx)

    def draft_argmax(self, order: int, ctx: str) -> str:
        d = self._lm.draft_argmax(order, ctx)
        self.eos_drafts += d == EOS_CH
        return d


def _forced(
    lm: LanguageModel, method: Speculative, k: int, prompt: str
) -> tuple[str, list[StepOutcome]]:
    """Greedy decoding of ``LENGTH`` tokens with every end-of-sequence ordinary."""
    decoder = Decoder(lm, method, k, temperature=0.0, rng=random.Random(0))
    ctx, text, steps = context_of(prompt), "", []
    while len(text) < LENGTH:
        left = LENGTH - len(text)
        out = decoder.step(ctx + text, left, ordinary_eos=left)
        steps.append(out)
        text += "".join(out.tokens)
    return text, steps


def test_an_always_eos_model_drafts_past_eos_and_emits_its_bonus_under_forced_length() -> None:
    decoder = Decoder(_AlwaysEos(), Speculative.mtp, 3, temperature=0.0, rng=random.Random(0))
    forced = decoder.step("q\n", 10, ordinary_eos=10)
    assert forced == StepOutcome((EOS_SUBSTITUTE,) * 4, 3, 3)  # 3 accepted + the bonus
    # the last ordinary position is the bonus's: past it an end-of-sequence ends the step
    assert decoder.step("q\n", 10, ordinary_eos=2) == StepOutcome(("\n", "\n", EOS_CH), 3, 3)
    # not forced: drafting stops at the end-of-sequence, which ends the step unbonused
    assert decoder.step("q\n", 10) == StepOutcome((EOS_CH,), 1, 1)
    assert Decoder(_AlwaysEos(), Speculative.off, 0, temperature=0.0, rng=random.Random(0)).step(
        "q\n", 10, ordinary_eos=1
    ) == StepOutcome((EOS_SUBSTITUTE,), 0, 0)


@settings(max_examples=25, deadline=None)
@given(
    task=st.sampled_from(TASKS),
    method=st.sampled_from(DRAFTED),
    k=st.integers(min_value=1, max_value=5),
)
def test_forced_length_verify_steps_emit_one_plus_accepted_and_match_plain_decoding(
    task: EngineTask, method: Speculative, k: int
) -> None:
    text, steps = _forced(reference_lm(), method, k, task.prompt)
    plain, _ = _forced(reference_lm(), Speculative.off, 0, task.prompt)
    assert text == plain  # greedy speculation stays exact past the end-of-sequence
    assert EOS_CH not in text
    last = len(steps) - 1  # the last step may be cut by the length budget
    for i, s in enumerate(steps):
        assert len(s.tokens) == 1 + s.accepted or (i == last and len(s.tokens) == s.accepted)


def test_the_benchmarks_route_drafts_end_of_sequence_and_still_emits_one_plus_accepted() -> None:
    """mtp at depth 3 (the speedup witness's route) over the smoke prompts: its draft
    proposes end-of-sequence several times a request, and every verify step still emits
    ``1 + accepted`` tokens, so the acceptance length is the tokens per verify step."""
    lm = _CountingLM()
    tokens = accepted = steps_n = 0
    for task in smoke_tasks()[:8]:
        _, steps = _forced(lm, Speculative.mtp, 3, task.prompt)
        steps = steps[:-1]  # the last step may be cut by the length budget
        assert all(len(s.tokens) == 1 + s.accepted for s in steps)
        tokens += sum(len(s.tokens) for s in steps)
        accepted += sum(s.accepted for s in steps)
        steps_n += len(steps)
    assert lm.eos_drafts >= 8  # the case is exercised, not vacuous
    assert tokens / steps_n == pytest.approx(1 + accepted / steps_n, abs=1e-12)


async def _served(min_tokens: int, max_tokens: int) -> list[Emission]:
    """One always-end-of-sequence mtp sequence through the engine's step loop."""
    costs = CostModel(prefill_ms_per_token=0.0, target_step_ms=0.001, verify_token_ms=0.0,
                      draft_step_ms=0.0, batch_exponent=0.0, compute_ms_per_token=0.0)  # fmt: skip
    sched = Scheduler(costs, EngineMetrics("m", 1), model_draft=False)
    decoder = Decoder(_AlwaysEos(), Speculative.mtp, 3, temperature=0.0, rng=random.Random(0))
    _, receive = sched.submit(
        "q\n", decoder, prompt_tokens=2, reasoning="", max_tokens=max_tokens,
        min_tokens=min_tokens,
    )  # fmt: skip
    async with anyio.create_task_group() as tg:
        tg.start_soon(sched.run)
        got = [e async for e in receive]
        tg.cancel_scope.cancel()
    return got


@pytest.mark.anyio
async def test_the_step_loop_passes_forced_length_to_the_verify_step() -> None:
    forced = await _served(min_tokens=13, max_tokens=13)
    # the prefill's token, then verify steps of 1 + 3 accepted tokens each
    assert [(e.tokens, e.accepted) for e in forced] == [(1, 0), (4, 3), (4, 3), (4, 3)]
    assert forced[-1].finish_reason == "length" and "".join(e.content for e in forced) == "\n" * 13
    # min_tokens 3: the first verify step's third position ends the sequence
    short = await _served(min_tokens=3, max_tokens=13)
    assert [(e.tokens, e.accepted, e.finish_reason) for e in short] == [
        (1, 0, None),
        (2, 3, "stop"),
    ]
