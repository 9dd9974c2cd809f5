"""The embedded engine's step loop paces back-to-back steps on a deadline chain.

On a fake clock (no timing of the machine): the loop's own per-step work between
steps (here a fixed overshoot added to every sleep, standing for handing out tokens,
writing SSE chunks and the timer's lateness) is absorbed into the modelled cost, so
``n`` back-to-back steps end ``n × cost`` after the first began (plus the last
step's overshoot) instead of ``n × (cost + overshoot)``; and an overshoot longer than
a whole step restarts the chain: no step is run short to catch up.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest

from deepseekbench._engine import _scheduler
from deepseekbench._engine._costs import CostModel
from deepseekbench._engine._metrics import EngineMetrics
from deepseekbench._engine._speculative import Decoder, StepOutcome

pytestmark = pytest.mark.anyio

STEP_MS = 10.0
COSTS = CostModel(
    prefill_ms_per_token=0.0,
    target_step_ms=STEP_MS,
    verify_token_ms=0.0,
    draft_step_ms=0.0,
    batch_exponent=0.0,
    compute_ms_per_token=0.0,
)


class _OneToken:
    """A decoder that emits one plain token a step."""

    def step(self, ctx: str, budget: int, ordinary_eos: int = 0) -> StepOutcome:
        return StepOutcome(("a",), 0, 0)


async def _run(monkeypatch: pytest.MonkeyPatch, steps: int, overshoot_s: float) -> list[float]:
    """Run one sequence of ``steps`` tokens on a fake clock; returns each sleep asked (s)
    and, last, the fake time from the first step's start to the last emission."""
    clock = SimpleNamespace(now=100.0)
    asked: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        asked.append(seconds)
        clock.now += seconds + overshoot_s
        await anyio.lowlevel.checkpoint()

    monkeypatch.setattr(_scheduler, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    monkeypatch.setattr(anyio, "sleep", fake_sleep)
    sched = _scheduler.Scheduler(COSTS, EngineMetrics("m", 1), model_draft=False)
    start = clock.now
    _, receive = sched.submit(
        "", cast(Decoder, _OneToken()), prompt_tokens=1, reasoning="", max_tokens=steps
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(sched.run)
        n = 0
        async for _ in receive:
            n += 1
        tg.cancel_scope.cancel()
    assert n == steps
    return [*asked, clock.now - start]


async def test_back_to_back_steps_absorb_the_loops_own_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    *asked, elapsed = await _run(monkeypatch, steps=20, overshoot_s=0.003)
    # 20 steps of 10 ms end 200 ms after the first began, plus only the last overshoot
    assert elapsed == pytest.approx(20 * STEP_MS / 1000 + 0.003, abs=1e-9)
    assert asked[0] == pytest.approx(0.010) and asked[1] == pytest.approx(0.007)


async def test_a_stall_longer_than_a_step_restarts_the_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    *asked, elapsed = await _run(monkeypatch, steps=5, overshoot_s=0.025)
    assert asked == pytest.approx([0.010] * 5)  # never run short to catch up
    assert elapsed == pytest.approx(5 * (0.010 + 0.025), abs=1e-9)


async def test_a_sequence_submitted_during_a_step_is_admitted_when_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait for the running step is the sequence's queue time (vLLM's
    ``queue_time_ms``): it is admitted at the start of the next step, and its emissions
    say when (``admitted_s``), on a fake clock. The second sequence is submitted from
    inside step 2's own sleep, so it arrives while that step runs whatever order the
    backend runs its tasks in (trio varies it)."""
    clock = SimpleNamespace(now=100.0)
    one = cast(Decoder, _OneToken())
    sleeps: list[float] = []
    box: dict[str, Any] = {}

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(clock.now)
        if len(sleeps) == 2:  # step 2 is running (it began at the end of step 1)
            box["submitted"] = clock.now
            box["second"] = sched.submit("", one, prompt_tokens=1, reasoning="", max_tokens=1)
        await anyio.lowlevel.checkpoint()  # others run while the step runs
        clock.now += seconds

    monkeypatch.setattr(_scheduler, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    monkeypatch.setattr(anyio, "sleep", fake_sleep)
    sched = _scheduler.Scheduler(COSTS, EngineMetrics("m", 1), model_draft=False)
    _, first = sched.submit("", one, prompt_tokens=1, reasoning="", max_tokens=4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sched.run)
        a = await first.receive()  # the end of step 1 (t = 100.010)
        while "second" not in box:
            await anyio.lowlevel.checkpoint()
        b = await box["second"][1].receive()
        tg.cancel_scope.cancel()
    submitted = box["submitted"]
    assert a.admitted_s == pytest.approx(100.0)
    assert submitted == pytest.approx(100.010)
    assert b.admitted_s == pytest.approx(100.020)  # when step 2 ended: 10 ms queued
