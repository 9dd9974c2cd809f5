"""measure_streamed against the embedded engine, end to end over loopback sockets.

The two were built apart; here they must agree: per-request acceptance in every
dialect equals the engine's own counters and its Prometheus delta, timings match
the engine's server-side send times, and every injected fault becomes a recorded
measurement (never an exception). Runs on asyncio and trio.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from deepseekbench import (
    FAULT_HEADER,
    AcceptanceRecord,
    AcceptanceScope,
    ChatRequest,
    CostModel,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    EngineCounters,
    EngineRoute,
    EngineTask,
    ErrorKind,
    FaultConfig,
    FaultKind,
    LiveGate,
    ReasoningMode,
    Speculative,
    StreamMeasurement,
    Timeouts,
    measure_streamed,
    metrics_delta,
    reference_tasks,
    scrape_metrics,
)
from deepseekbench._engine import FAST_COSTS
from deepseekbench._measure._selfcheck import sched_sample
from tests._helpers import core_wait_ms

pytestmark = pytest.mark.anyio

MODEL = "deepseekbench-ref"
TASKS = reference_tasks(12, seed=7)
TOKEN_KINDS = frozenset({"content", "reasoning"})
LOOPBACK_TRAIL_MS = 50.0
"""How far a client stamp may trail the engine's send on loopback (ms), on top of the
loop thread's wait for a core in that request (:func:`core_wait_ms`)."""


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@dataclass
class Served:
    engine: EmbeddedEngine
    gate: LiveGate
    client: httpx.AsyncClient

    def route(self, dialect: Dialect, speculative: Speculative, **kw: Any) -> EngineRoute:
        kw.setdefault("model", MODEL)
        return EngineRoute(
            base_url=self.engine.base_url, dialect=dialect, speculative=speculative, **kw
        )

    async def measure(
        self, route: EngineRoute, request: ChatRequest, timeouts: Timeouts | None = None
    ) -> StreamMeasurement:
        return await measure_streamed(
            request, route=route, gate=self.gate, client=self.client, timeouts=timeouts
        )

    async def measure_all(
        self, route: EngineRoute, tasks: Sequence[EngineTask]
    ) -> list[StreamMeasurement]:
        """All ``tasks`` concurrently on one shared client, results in task order."""
        out: list[StreamMeasurement | None] = [None] * len(tasks)

        async def one(i: int) -> None:
            out[i] = await self.measure(route, ask(tasks[i].prompt))

        async with anyio.create_task_group() as tg:
            for i in range(len(tasks)):
                tg.start_soon(one, i)
        return [m for m in out if m is not None]


@asynccontextmanager
async def serving(**config: Any) -> AsyncIterator[Served]:
    config.setdefault("cost", FAST_COSTS)
    gate = LiveGate()
    async with EmbeddedEngine(EngineConfig(**config)) as engine, gate.client() as client:
        yield Served(engine, gate, client)


def ask(prompt: str, **kw: Any) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": prompt},), temperature=0, **kw)


def counter_delta(before: EngineCounters, after: EngineCounters) -> dict[str, int]:
    names = ("generated_tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens")
    return {n: getattr(after, n) - getattr(before, n) for n in names}


async def server_delta(served: Served, route: EngineRoute, run: Any) -> AcceptanceRecord | None:
    before = await scrape_metrics(route, gate=served.gate, client=served.client)
    await run()
    after = await scrape_metrics(route, gate=served.gate, client=served.client)
    assert before.error is None and after.error is None
    return metrics_delta(before, after)


# -- 1. per-request acceptance in every dialect ----------------------------------------


@pytest.mark.parametrize(
    ("dialect", "speculative"),
    [
        (Dialect.vllm, Speculative.mtp),
        (Dialect.sglang, Speculative.mtp),
        (Dialect.llamacpp, Speculative.mtp),
        (Dialect.sglang, Speculative.dspark),
    ],
)
async def test_per_request_acceptance_matches_engine_counters_and_metrics(
    dialect: Dialect, speculative: Speculative
) -> None:
    async with serving(speculative=speculative, dialect=dialect) as served:
        route = served.route(dialect, speculative)
        before = served.engine.counters
        results: list[StreamMeasurement] = []

        async def run() -> None:
            results.extend(await served.measure_all(route, TASKS))

        server = await server_delta(served, route, run)
        counted = counter_delta(before, served.engine.counters)

    assert len(results) == len(TASKS)
    steps_known = dialect is not Dialect.llamacpp
    for task, m in zip(TASKS, results, strict=True):
        assert m.error is None, m.error
        assert m.text == task.answer
        assert m.completion_tokens == len(task.answer)  # one token per character
        acc = m.acceptance
        assert acc is not None and acc.scope is AcceptanceScope.per_request
        assert acc.engine is dialect
        assert m.draft_tokens is not None and m.draft_tokens > 0
        assert m.accepted_tokens is not None and 0 <= m.accepted_tokens <= m.draft_tokens
        assert m.accepted_token_ratio is not None
        # a short task may have every draft accepted; the run as a whole may not
        assert 0.0 <= m.accepted_token_ratio <= 1.0
        assert m.accepted_token_ratio == pytest.approx(m.accepted_tokens / m.draft_tokens)
        if steps_known:
            assert acc.verify_steps is not None and acc.verify_steps > 0
            assert m.acceptance_length is not None and m.acceptance_length >= 1.0
            assert m.acceptance_length == pytest.approx(1 + m.accepted_tokens / acc.verify_steps)
        else:
            assert acc.verify_steps is None and m.acceptance_length is None
    # the ratio is a property of the task, not a constant written into responses
    assert len({m.accepted_token_ratio for m in results}) > 1

    drafted = sum(m.draft_tokens or 0 for m in results)
    accepted = sum(m.accepted_tokens or 0 for m in results)
    assert drafted == counted["num_draft_tokens"]
    assert accepted == counted["num_accepted_tokens"]
    assert sum(m.completion_tokens or 0 for m in results) == counted["generated_tokens"]
    assert server is not None and server.scope is AcceptanceScope.server_wide
    assert (server.draft_tokens, server.accepted_tokens) == (drafted, accepted)
    assert server.verify_steps == counted["num_drafts"]
    assert server.accepted_token_ratio is not None and 0.0 < server.accepted_token_ratio < 1.0
    assert server.accepted_token_ratio == pytest.approx(accepted / drafted)
    if steps_known:
        steps = sum(m.acceptance.verify_steps or 0 for m in results if m.acceptance)
        assert steps == counted["num_drafts"]
        # depth k: each verify step drafts k tokens unless the output cap cuts it
        k = served.engine.config.effective_draft_depth
        assert drafted <= k * steps


# -- 2. an engine that reports nothing per request ---------------------------------------


async def test_openai_dialect_gets_server_wide_acceptance_only() -> None:
    async with serving(speculative=Speculative.mtp, dialect=Dialect.openai) as served:
        route = served.route(Dialect.openai, Speculative.mtp)
        before = served.engine.counters
        results: list[StreamMeasurement] = []

        async def run() -> None:
            results.extend(await served.measure_all(route, TASKS[:6]))

        server = await server_delta(served, route, run)
        counted = counter_delta(before, served.engine.counters)

    for task, m in zip(TASKS, results, strict=False):
        assert m.error is None and m.text == task.answer
        assert m.acceptance is None
        assert m.draft_tokens is None and m.accepted_tokens is None
        assert m.accepted_token_ratio is None and m.acceptance_length is None
    assert server is not None and server.scope is AcceptanceScope.server_wide
    assert server.draft_tokens == counted["num_draft_tokens"] > 0
    assert server.accepted_tokens == counted["num_accepted_tokens"]
    assert server.verify_steps == counted["num_drafts"]
    assert server.accepted_token_ratio is not None and 0.0 < server.accepted_token_ratio < 1.0
    assert server.acceptance_length is not None and server.acceptance_length > 1.0


# -- 3. off: unknown acceptance, identical text ---------------------------------------------


@pytest.mark.parametrize("dialect", [Dialect.vllm, Dialect.sglang, Dialect.llamacpp])
async def test_off_reports_no_acceptance_and_matches_mtp_text(dialect: Dialect) -> None:
    async with (
        serving(speculative=Speculative.off, dialect=dialect) as off,
        serving(speculative=Speculative.mtp, dialect=dialect) as mtp,
    ):
        off_route = off.route(dialect, Speculative.off)
        plain: list[StreamMeasurement] = []

        async def run() -> None:
            plain.extend(await off.measure_all(off_route, TASKS))

        server = await server_delta(off, off_route, run)
        spec = await mtp.measure_all(mtp.route(dialect, Speculative.mtp), TASKS)

    for task, a, b in zip(TASKS, plain, spec, strict=True):
        assert a.error is None and b.error is None
        assert a.text == b.text == task.answer
        assert a.completion_tokens == b.completion_tokens
        assert a.acceptance is None
        assert a.draft_tokens is None and a.accepted_tokens is None
        assert a.accepted_token_ratio is None and a.acceptance_length is None
        assert b.accepted_token_ratio is not None  # the same adapter does read mtp
    # the server-wide counters moved by zero: a known 0 drafted, an unknown ratio
    assert server is not None
    assert server.draft_tokens == 0 and server.accepted_token_ratio is None
    assert server.acceptance_length is None


# -- 4. timing against the engine's send times ------------------------------------------


async def test_timing_matches_server_send_times_and_tokens_per_chunk() -> None:
    cost = CostModel(prefill_ms_per_token=0.02, target_step_ms=2.0, verify_token_ms=0.2)
    async with serving(
        speculative=Speculative.mtp, dialect=Dialect.vllm, cost=cost, record_send_times=True
    ) as served:
        route = served.route(Dialect.vllm, Speculative.mtp, continuous_usage=True)
        requests = [ask(t.prompt) for t in TASKS[:5]]
        requests.append(ask(TASKS[5].prompt, reasoning_mode=ReasoningMode.think_high))
        multi_token_chunks = 0
        for req in requests:
            before = served.engine.counters
            known = set(served.engine.send_times)
            before_m = sched_sample()
            m = await served.measure(route, req)
            waited_ms = core_wait_ms(before_m, sched_sample())
            generated = counter_delta(before, served.engine.counters)["generated_tokens"]
            (cid,) = set(served.engine.send_times) - known
            sends = [s for s in served.engine.send_times[cid] if s.kind in TOKEN_KINDS]

            assert m.error is None and m.start_perf_ns is not None
            assert m.ttft_ms is not None and m.e2e_ms is not None
            assert len(m.chunk_arrival_ms) == len(sends)
            start_s = m.start_perf_ns / 1e9
            offsets_ms = [
                (start_s + arrival / 1000.0 - s.t_s) * 1000.0
                for arrival, s in zip(m.chunk_arrival_ms, sends, strict=True)
            ]
            # a client stamp can never precede the server's send; on loopback it trails by
            # little more than the loop thread's wait for a core (the engine shares the loop)
            assert all(0.0 <= o < LOOPBACK_TRAIL_MS + waited_ms for o in offsets_ms), (
                offsets_ms,
                waited_ms,
            )
            assert m.chunk_arrival_ms[0] == m.ttft_ms and m.chunk_arrival_ms[-1] == m.e2e_ms
            assert m.completion_tokens == generated == sum(s.tokens for s in sends)
            assert not m.tokens_estimated
            assert m.tpot_ms == pytest.approx((m.e2e_ms - m.ttft_ms) / (generated - 1))
            assert m.output_toks_per_s == pytest.approx(generated / (m.e2e_ms / 1000.0))
            # continuous usage reveals the tokens of each chunk: exactly what the engine sent
            assert m.tokens_per_chunk == [s.tokens for s in sends]
            assert sum(m.tokens_per_chunk) == m.completion_tokens
            assert m.itl_per_token_ms is not None
            assert len(m.itl_per_token_ms) == m.completion_tokens - m.tokens_per_chunk[0]
            assert sum(m.itl_per_token_ms) == pytest.approx(m.e2e_ms - m.ttft_ms)
            multi_token_chunks += sum(1 for k in m.tokens_per_chunk if k > 1)
            if req.reasoning_mode is ReasoningMode.think_high:
                assert m.reasoning_text and m.reasoning_tokens == len(m.reasoning_text)
                assert m.text == TASKS[5].answer
    assert multi_token_chunks > len(requests)  # MTP brings several tokens per chunk


# -- 5. every injected fault is a measurement, never an exception -------------------------

LONG = next(t for t in TASKS if t.category == "counting" and len(t.answer) > 20)
UTF8 = next(t for t in TASKS if t.category == "reversal" and "→" in t.answer)


async def test_each_engine_fault_is_recorded_not_raised() -> None:
    faults = FaultConfig(after_chunks=2, stall_ms=1500.0, split_pause_ms=1.0)
    async with serving(speculative=Speculative.mtp, dialect=Dialect.vllm, faults=faults) as served:

        async def faulted(
            kind: FaultKind, task: EngineTask, timeouts: Timeouts | None = None
        ) -> StreamMeasurement:
            route = served.route(Dialect.vllm, Speculative.mtp, headers={FAULT_HEADER: kind.value})
            return await served.measure(route, ask(task.prompt), timeouts)

        for kind in (FaultKind.keepalive, FaultKind.split_writes, FaultKind.split_utf8):
            task = UTF8
            m = await faulted(kind, task)
            assert m.error is None and m.errors == [], (kind, m.errors)
            assert m.text == task.answer, kind  # exact, multi-byte characters included
            assert m.completion_tokens == len(task.answer) and m.done
            assert m.draft_tokens is not None and m.accepted_token_ratio is not None

        def partial(m: StreamMeasurement) -> None:
            assert m.text and LONG.answer.startswith(m.text) and m.text != LONG.answer
            assert m.ttft_ms is not None and not m.done

        m = await faulted(FaultKind.error_event, LONG)
        assert m.error is not None and m.error.kind is ErrorKind.server_error_event
        assert "injected" in m.error.message and m.status_code == 200
        partial(m)

        m = await faulted(FaultKind.drop, LONG)
        assert m.error is not None and m.error.kind is ErrorKind.truncated
        partial(m)

        m = await faulted(FaultKind.no_usage, LONG)
        assert m.error is None and m.text == LONG.answer
        assert m.completion_tokens is None and m.tokens_estimated
        assert m.usage is None
        n_est = m.estimated_completion_tokens
        assert n_est is not None and 0 < n_est <= len(LONG.answer)
        assert m.draft_tokens is not None  # vLLM puts its stats on the finish chunk then

        for kind, status in ((FaultKind.http_429, 429), (FaultKind.http_503, 503)):
            m = await faulted(kind, LONG)
            assert m.error is not None and m.error.kind is ErrorKind.http_status
            assert m.http_status == status and m.status_code == status
            assert str(status) in m.error.message and m.text == "" and m.ttft_ms is None

        with anyio.fail_after(5):  # the measurement's own deadline must end it
            m = await faulted(FaultKind.stall, LONG, Timeouts(total_s=0.4))
        assert m.error is not None and m.error.kind is ErrorKind.timeout
        assert "total_s" in m.error.message
        partial(m)

        # the engine keeps serving, and no fault left a sequence behind
        m = await served.measure(served.route(Dialect.vllm, Speculative.mtp), ask(LONG.prompt))
        assert m.error is None and m.text == LONG.answer
        for _ in range(500):  # aborted sequences end at the engine's next step
            counters = served.engine.counters
            if counters.finished == counters.requests:
                break
            await anyio.sleep(0.01)
        assert counters.finished == counters.requests


async def test_first_token_deadline_on_a_slow_prefill() -> None:
    slow = CostModel(prefill_ms_per_token=40.0, target_step_ms=0.2)  # ~1 s prefill
    async with serving(speculative=Speculative.mtp, cost=slow) as served:
        route = served.route(Dialect.vllm, Speculative.mtp)
        with anyio.fail_after(5):
            m = await served.measure(route, ask(LONG.prompt), Timeouts(first_token_s=0.15))
    assert m.error is not None and m.error.kind is ErrorKind.timeout
    assert "first_token_s" in m.error.message
    assert m.text == "" and m.ttft_ms is None and m.status_code == 200


async def test_engine_wide_fault_config_applies_without_header() -> None:
    faults = FaultConfig(keepalive_comments=True, split_utf8=True, missing_usage=True)
    async with serving(speculative=Speculative.mtp, dialect=Dialect.llamacpp, faults=faults) as s:
        m = await s.measure(s.route(Dialect.llamacpp, Speculative.mtp), ask(UTF8.prompt))
    assert m.error is None and m.text == UTF8.answer
    assert m.completion_tokens is None and m.tokens_estimated
    assert m.draft_tokens is not None and m.acceptance_length is None  # timings on finish chunk


# -- 6. bad requests -----------------------------------------------------------------------


async def test_bad_requests_are_measurements_with_the_status() -> None:
    async with serving(max_context_tokens=128) as served:
        m = await served.measure(
            served.route(Dialect.vllm, Speculative.off, model="no-such-model"), ask("hi")
        )
        assert m.error is not None and m.error.kind is ErrorKind.http_status
        assert m.http_status == 404 and "no-such-model" in m.error.message

        route = served.route(Dialect.vllm, Speculative.off)
        m = await served.measure(route, ask("What is " + "1 + " * 60 + "1?"))
        assert m.error is not None and m.error.kind is ErrorKind.http_status
        assert m.http_status == 400 and "context" in m.error.message
        assert m.text == "" and m.completion_tokens is None

        # still serving
        m = await served.measure(route, ask(UTF8.prompt))
        assert m.error is None and m.text == UTF8.answer
        assert not math.isnan(m.ttft_ms or math.nan)
