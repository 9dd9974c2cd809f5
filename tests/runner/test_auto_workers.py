"""``workers = "auto"``: each load point is sized from every route's warm-up client CPU
share (a fake pool reports the shares: nothing here depends on the machine's speed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import BenchmarkPlan, ChatRequest, LiveGate, StreamMeasurement
from deepseekbench._analysis._workers_estimate import workers_from_share
from deepseekbench._execute._executor import Sent
from deepseekbench._execute._pool_executor import PoolExecutor
from deepseekbench._execute._workers import PoolReport, PoolResult, ResultFn
from deepseekbench._execute._workshare import LoadWork
from deepseekbench._net._route import EngineRoute
from deepseekbench._plan._schedule import Block, Phase, WorkItem
from deepseekbench._runner._auto_workers import AutoWorkers, warm_ups_first
from deepseekbench._store._records import WorkersRecord
from deepseekbench._store._results import ResultsState
from deepseekbench._types._axes import Arrival, ReasoningMode
from deepseekbench._types._load import LoadPoint


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


REQ = ChatRequest(messages=({"role": "user", "content": "hi"},), max_tokens=8)
ITEMS = tuple(WorkItem(REQ, i) for i in range(4))


def _block(route: str, load: LoadPoint, warmup: int = 2, round_: int = 0) -> Block:
    return Block(
        phase=Phase.measure,
        route=route,
        items=ITEMS,
        concurrency=load.concurrency,
        reasoning_mode=ReasoningMode.non_think,
        cell="c",
        load=load,
        round=round_,
        warmup=(REQ,) * warmup,
    )


C8 = LoadPoint(Arrival.closed, 8)
C2 = LoadPoint(Arrival.closed, 2)
C1 = LoadPoint(Arrival.closed, 1)


@dataclass
class FakePool:
    """Answers each warm-up with its route's client CPU share; notes every run."""

    shares: dict[str, float]
    runs: list[tuple[str, str, int | None]] = field(default_factory=list)

    async def run(self, work: LoadWork, on_result: ResultFn, workers: int | None = None) -> Any:
        if work.warmup:
            route = work.warmup[0].route
            self.runs.append(("warm", route, workers))
            for _ in work.warmup:
                m = StreamMeasurement(text="x", client_cpu_share=self.shares[route])
                on_result(PoolResult(None, m, None, 0))
        else:
            self.runs.append(("run", work.items[0].route, workers))
        return PoolReport(workers or 4, 0, 1)


async def _send(shares: dict[str, float], blocks: list[Block], auto: bool) -> FakePool:
    pool = FakePool(shares)
    routes = {r: EngineRoute(base_url="http://127.0.0.1:9/v1", model="m") for r in shares}
    reports: list[PoolReport] = []
    sizer = AutoWorkers(cores=4) if auto else None
    ex = PoolExecutor(pool, routes, LiveGate(), None, lambda b, r: reports.append(r), None, sizer)  # type: ignore[arg-type]
    sent: list[Sent] = []
    work = [(b, b.items) for b in blocks]
    for block, items in warm_ups_first(work) if auto else work:
        await ex.run_block(block, items, lambda b, s: sent.append(s))
    return pool


def test_a_warm_up_share_makes_auto_choose_n() -> None:
    """4 cores; 2 warm-ups at c=2 run on 2 workers at 60 % CPU: 1.2 cores of work /
    50 % per worker -> 3 workers."""
    sizer = AutoWorkers(cores=4)
    block = _block("off", C2)
    for _ in block.warmup:
        sizer.observe(block, StreamMeasurement(client_cpu_share=0.6))
    n, basis = sizer.choose(block) or (0, "")
    assert n == 3
    assert basis.startswith("auto: 3 of 4 cores, warm-up client CPU share 0.60")
    assert sizer.choose(_block("mtp", C2, round_=1)) == (n, basis)  # kept for the load point


def test_warm_ups_lighter_than_the_load_do_not_size_it() -> None:
    """2 warm-ups at c=8 measure a lighter client than the load's: every worker (one per
    core), never fewer, and the reason says how to size it."""
    sizer = AutoWorkers(cores=4)
    block = _block("off", C8)
    for _ in block.warmup:
        sizer.observe(block, StreamMeasurement(client_cpu_share=0.05))
    n, basis = sizer.choose(block) or (0, "")
    assert n == 4
    assert "too light to size from (2 warm-up(s) below concurrency 8" in basis
    n1, basis1 = sizer.choose(_block("off", C1)) or (0, "")  # no warm-up seen there
    assert (n1, basis1) == (4, "auto: 4 of 4 cores, no warm-up client CPU share (one per core)")


@given(
    share=st.floats(0, 1),
    warmups=st.integers(0, 12),
    concurrency=st.integers(1, 64),
    cores=st.integers(1, 16),
)
def test_auto_follows_the_estimate_within_the_cores(
    share: float, warmups: int, concurrency: int, cores: int
) -> None:
    sizer = AutoWorkers(cores=cores)
    load = LoadPoint(Arrival.closed, concurrency)
    block = _block("off", load, warmup=warmups)
    for _ in range(warmups):
        sizer.observe(block, StreamMeasurement(client_cpu_share=share))
    n, _ = sizer.choose(block) or (0, "")
    assert 1 <= n <= cores
    if warmups >= concurrency:
        sent_on = min(cores, concurrency, warmups)
        assert n == workers_from_share(share, sent_on, cores).workers
    else:
        assert n == cores  # no warm-up, or lighter than the load: one per core


@pytest.mark.anyio
async def test_every_route_at_a_load_gets_the_same_n_from_all_warm_ups() -> None:
    """``off``'s warm-up alone (20 %) would give 1 worker; ``mtp``'s (60 %) gives 3:
    both routes' warm-ups go before ``off``'s first measured block, so both get 3."""
    blocks = [_block("off", C2), _block("mtp", C2)]
    blocks += [_block("mtp", C2, 0, 1), _block("off", C2, 0, 1)]
    pool = await _send({"off": 0.2, "mtp": 0.6}, blocks, auto=True)
    kinds = [k for k, _, _ in pool.runs]
    assert kinds == ["warm", "warm", "run", "run", "run", "run"]
    assert {w for k, _, w in pool.runs if k == "run"} == {3}


@pytest.mark.anyio
async def test_an_explicit_number_is_untouched() -> None:
    blocks = [_block("off", C8), _block("mtp", C8)]
    pool = await _send({"off": 0.2, "mtp": 0.6}, blocks, auto=False)
    assert [k for k, _, _ in pool.runs] == ["warm", "run", "warm", "run"]  # schedule order
    assert {w for _, _, w in pool.runs} == {None}  # every worker of the pool
    routes = [
        {"label": "off", "base_url": "http://127.0.0.1:1/v1", "speculative": "off"},
        {"label": "mtp", "base_url": "http://127.0.0.1:2/v1", "speculative": "mtp"},
    ]
    plan = BenchmarkPlan.model_validate({"model": "m", "routes": routes, "workers": 3})
    assert (plan.workers, plan.pool_workers) == (3, 3)
    auto = BenchmarkPlan.model_validate({"model": "m", "routes": routes, "workers": "auto"})
    assert auto.workers == "auto" and auto.pool_workers >= 1


def test_the_row_records_the_choice() -> None:
    """The ``workers`` records of a load point reach its row (the most over rounds)."""
    from deepseekbench._analysis._rows import _workers_fields

    state = ResultsState()
    base: dict[str, Any] = {"plan_hash": "h", "run_id": "r", "phase": "measure", "cell": "c"}
    edges: dict[str, Any] = {"window_start_ns": 0, "window_end_ns": 1}
    for rnd, n in ((0, 1), (1, 2)):  # e.g. a worker missing from round 0
        state.add(
            WorkersRecord(
                **base, **edges, route="off", load=C8.key, round=rnd, workers=n, basis="auto: 2"
            )
        )
    fields = _workers_fields(state, "off", "c", C8)
    assert fields == {"client_workers": 2, "client_workers_basis": "auto: 2"}
    assert _workers_fields(state, "mtp", "c", C8) == {}
