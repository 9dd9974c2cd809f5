"""The embedded engine's crossover: MTP pays at low load and costs at high load.

The cost model (docs/engine.md) is a roofline: small batches are memory-bound, so
verifying MTP's draft token is nearly free; past the knee every scored position
costs compute, and a rejected draft token is paid for all the same. Measured
here end to end with ``measure_streamed`` over loopback; the margins are wide
(modelled TPOT ratio mtp/off ≈ 0.63 at concurrency 1, ≈ 1.13 at 32) so a busy
machine, which slows every step alike, cannot flip the comparison.
"""

from __future__ import annotations

import statistics

import anyio
import pytest

from deepseekbench._axes import Dialect, Speculative
from deepseekbench._engine import CostModel, EmbeddedEngine, EngineConfig, reference_tasks
from deepseekbench._gate import LiveGate
from deepseekbench._measure import measure_streamed
from deepseekbench._request import ChatRequest
from deepseekbench._route import EngineRoute

pytestmark = pytest.mark.anyio

TASKS = reference_tasks(32, seed=11)
LOW, HIGH = 1, 32


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _median_tpot_ms(speculative: Speculative, concurrency: int) -> float:
    """Median TPOT (ms/token) of ``TASKS`` (the first 4 at concurrency 1) on a fresh engine."""
    tasks = TASKS if concurrency > 1 else TASKS[:4]
    gate = LiveGate()
    tpots: list[float] = []
    limiter = anyio.Semaphore(concurrency)
    async with (
        EmbeddedEngine(EngineConfig(speculative=speculative)) as engine,
        gate.client() as client,
    ):
        route = EngineRoute(
            base_url=engine.base_url,
            model="deepseekbench-ref",
            dialect=Dialect.vllm,
            speculative=speculative,
        )

        async def one(prompt: str) -> None:
            request = ChatRequest(messages=({"role": "user", "content": prompt},), temperature=0)
            async with limiter:
                m = await measure_streamed(request, route=route, gate=gate, client=client)
            assert m.error is None and m.tpot_ms is not None
            tpots.append(m.tpot_ms)

        async with anyio.create_task_group() as tg:
            for task in tasks:
                tg.start_soon(one, task.prompt)
    assert len(tpots) == len(tasks)
    return statistics.median(tpots)


async def test_mtp_tpot_gain_shrinks_with_concurrency_and_turns_into_a_loss() -> None:
    ratio = {}
    for c in (LOW, HIGH):
        ratio[c] = await _median_tpot_ms(Speculative.mtp, c) / await _median_tpot_ms(
            Speculative.off, c
        )
    assert ratio[LOW] < 0.85, ratio  # mtp pays alone (modelled ≈ 0.63)
    assert ratio[HIGH] > 1.25 * ratio[LOW], ratio  # ... much less at 32 (modelled ≈ 1.13)


def test_cost_model_roofline_knee() -> None:
    """Memory-bound below the knee (drafts nearly free), compute-bound past it."""
    cost = CostModel()
    # one sequence: verifying one draft token costs 5% of a step
    assert cost.target_ms(1, 1) == pytest.approx(cost.target_step_ms + cost.verify_token_ms)
    # 32 sequences: every scored position costs compute_ms_per_token
    assert cost.target_ms(32, 0) == pytest.approx(32 * cost.compute_ms_per_token)
    assert cost.target_ms(32, 1) == pytest.approx(64 * cost.compute_ms_per_token)
    # steady-state output tokens per ms at acceptance length 1.8 (mtp's, docs/engine.md)
    def gain(batch: int) -> float:
        off = batch / cost.step_ms(batch, 0, 0, model_draft=False)
        return (batch * 1.8 / cost.step_ms(batch, 1, 0, model_draft=True)) / off

    assert gain(1) > 1.5 and gain(4) > 1.5  # memory-bound: the full gain
    assert 1.0 < gain(8) < gain(4)  # mtp's pass is past its knee: the gain shrinks
    assert gain(32) < 0.9  # both compute-bound: throughput gain negative at high load
    assert CostModel(compute_ms_per_token=0).target_ms(64, 4) < 64 * cost.target_step_ms
