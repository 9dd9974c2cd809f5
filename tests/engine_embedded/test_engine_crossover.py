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
from collections.abc import Sequence

import anyio
import pytest

from deepseekbench import (
    ChatRequest,
    CostModel,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    EngineTask,
    LiveGate,
    Speculative,
    StreamMeasurement,
    measure_streamed,
    reference_tasks,
)

pytestmark = pytest.mark.anyio

TASKS = reference_tasks(32, seed=11)
LOW, HIGH = 1, 32


def _scaled(factor: float) -> CostModel:
    """Every modelled cost of the default times ``factor``: the same roofline shape, with
    the machine's own overhead per step (the engine's and the client's CPU time, which a
    busy machine stretches) smaller beside it."""
    d = CostModel()
    return d.model_copy(
        update={
            name: factor * getattr(d, name)
            for name in (
                "target_step_ms",
                "verify_token_ms",
                "draft_step_ms",
                "compute_ms_per_token",
                "prefill_ms_per_token",
            )
        }
    )


SLOW = _scaled(2)  # shared 2-core machine (3 test workers): overhead small beside a step
SLOWER = _scaled(4)
"""For the throughput comparison under load: ``off`` takes four times as many steps as
mtp at k = 3, so an overhead per step (measured: enough to flip 2 × default costs with
two CPU-burning processes beside the test) counts against ``off`` four times over."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _measure(
    config: EngineConfig, tasks: Sequence[EngineTask], concurrency: int
) -> list[StreamMeasurement]:
    """``tasks`` through a closed loop of ``concurrency`` streams on a fresh engine."""
    gate = LiveGate()
    done: list[StreamMeasurement] = []
    limiter = anyio.Semaphore(concurrency)
    async with EmbeddedEngine(config) as engine, gate.client() as client:
        route = EngineRoute(
            base_url=engine.base_url,
            model="deepseekbench-ref",
            dialect=Dialect.vllm,
            speculative=config.speculative,
        )

        async def one(prompt: str) -> None:
            request = ChatRequest(messages=({"role": "user", "content": prompt},), temperature=0)
            async with limiter:
                m = await measure_streamed(request, route=route, gate=gate, client=client)
            assert m.error is None and m.tpot_ms is not None
            done.append(m)

        async with anyio.create_task_group() as tg:
            for task in tasks:
                tg.start_soon(one, task.prompt)
    assert len(done) == len(tasks)
    return done


async def _median_tpot_ms(speculative: Speculative, concurrency: int) -> float:
    """Median TPOT (ms/token) of ``TASKS`` (the first 4 at concurrency 1) on a fresh engine."""
    tasks = TASKS if concurrency > 1 else TASKS[:4]
    done = await _measure(EngineConfig(speculative=speculative, cost=SLOW), tasks, concurrency)
    return statistics.median(m.tpot_ms for m in done if m.tpot_ms is not None)


def _window_throughput(done: Sequence[StreamMeasurement]) -> float:
    """Output tokens / (first send → last token), tokens/s."""
    starts = [m.start_perf_ns / 1e9 for m in done if m.start_perf_ns is not None]
    ends = [
        m.start_perf_ns / 1e9 + m.e2e_ms / 1000.0
        for m in done
        if m.start_perf_ns is not None and m.e2e_ms is not None
    ]
    return sum(m.completion_tokens or 0 for m in done) / (max(ends) - min(starts))


async def test_mtp_tpot_gain_shrinks_with_concurrency() -> None:
    ratio = {}
    for c in (LOW, HIGH):
        ratio[c] = await _median_tpot_ms(Speculative.mtp, c) / await _median_tpot_ms(
            Speculative.off, c
        )
    assert ratio[LOW] < 0.85, ratio  # mtp pays alone (modelled ≈ 0.63)
    # ... much less at 32 (modelled ≈ 1.13): measured 1.6-1.7× the ratio at 1, against
    # 0.9-1.1× with compute_ms_per_token = 0 (never compute-bound) on the loaded dev machine
    assert ratio[HIGH] > 1.3 * ratio[LOW], ratio


async def test_deep_drafts_lose_output_throughput_under_load() -> None:
    """mtp with k = 3 scores four positions a sequence: alone (memory-bound) it streams about
    2× off's tokens/s; in three waves of 16 streams (compute-bound) its verify pass costs more
    than its accepted tokens bring (modelled ≈ 0.7× off's; measured ≈ 0.8× on the loaded
    dev machine at the default costs, 1.09× beside two CPU burners: hence :data:`SLOWER`)."""
    tasks = reference_tasks(48, seed=11)
    off_config = EngineConfig(cost=SLOWER)
    deep_config = EngineConfig(speculative=Speculative.mtp, draft_depth=3, cost=SLOWER)
    alone = [await _measure(c, tasks[:4], 1) for c in (off_config, deep_config)]
    assert _window_throughput(alone[1]) > 1.3 * _window_throughput(alone[0])  # pays alone
    off = await _measure(off_config, tasks, 16)
    deep = await _measure(deep_config, tasks, 16)
    # greedy: the same outputs, only the speed differs
    assert sorted(m.text for m in deep) == sorted(m.text for m in off)
    assert _window_throughput(deep) < _window_throughput(off)


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
