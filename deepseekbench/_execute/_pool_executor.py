"""The executor stage on several client workers: :class:`PoolExecutor` has the
:class:`~deepseekbench._execute._executor.Executor`'s ``run_block`` and sends each block
from a :class:`~deepseekbench._execute._workers.WorkerPool` (processes on this host) or a
:class:`~deepseekbench._execute._ray_executor.RayPool` (Ray actors).

Per block: the warm-ups go first (one pool run of warm-ups only), then the
``/metrics`` scrape (from the parent, as in one process), then the block's
requests from one shared start, then the closing scrape. Every finished request
reaches ``on_sent`` as a :class:`~deepseekbench._execute._executor.Sent`, exactly as the
one-process executor gives it; each block's :class:`PoolReport` (window edges,
deaths, clock offsets) goes to ``on_report``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

import httpx

from deepseekbench._execute._executor import CacheFn, Executor, Sent, SentFn, _item_offsets
from deepseekbench._execute._workers import PoolReport, PoolResult, ResultFn, WorkerPool
from deepseekbench._execute._workshare import LoadWork, PoolItem
from deepseekbench._measure._cache_metrics import cache_window, while_sampling
from deepseekbench._measure._measure import Timeouts
from deepseekbench._measure._server_metrics import metrics_delta, scrape_metrics, scrape_settled
from deepseekbench._measure._tokens import TokenCounter
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, WorkItem
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._acceptance import AcceptanceRecord

__all__ = ["BlockExecutor", "PoolExecutor", "ReportFn", "WorkerSizer", "executor_for"]

ReportFn = Callable[[Block, PoolReport], None]
"""Called with each block's :class:`PoolReport` (after its requests)."""


class BlockExecutor(Protocol):
    """What the runner needs of an executor: one block at a time."""

    async def run_block(
        self, block: Block, items: tuple[WorkItem, ...], on_sent: SentFn
    ) -> AcceptanceRecord | None: ...


class _Pool(Protocol):
    async def run(
        self, work: LoadWork, on_result: ResultFn, workers: int | None = None
    ) -> PoolReport: ...


class WorkerSizer(Protocol):
    """``workers = "auto"``: sees each block's warm-ups, then says how many workers
    send its measured requests (:class:`~deepseekbench._runner._auto_workers.AutoWorkers`)."""

    def observe(self, block: Block, measurement: StreamMeasurement) -> None: ...

    def choose(self, block: Block) -> tuple[int, str] | None: ...


@dataclass(slots=True)
class PoolExecutor:
    """Sends blocks from a worker pool; scrapes ``/metrics`` from the parent.

    Attributes:
        pool: a started :class:`WorkerPool` or :class:`RayPool`.
        routes: the engine route of every route label.
        gate: the parent's gate (the ``/metrics`` scrapes pass it).
        client: the parent's client (for the scrapes).
        on_report: called with each block's :class:`PoolReport`.
        on_cache: called with each scraped block's cache window.
        sizer: ``workers = "auto"``: the workers each block's measured requests are
            split over (its choice and basis go on the block's :class:`PoolReport`);
            ``None``: every worker.
    """

    pool: _Pool
    routes: Mapping[str, EngineRoute]
    gate: LiveGate
    client: httpx.AsyncClient
    on_report: ReportFn | None = None
    on_cache: CacheFn | None = None
    sizer: WorkerSizer | None = None

    async def run_block(
        self, block: Block, items: tuple[WorkItem, ...], on_sent: SentFn
    ) -> AcceptanceRecord | None:
        """Send ``block``'s warm-ups, then ``items`` from the pool's workers.

        Returns:
            the server-wide acceptance delta over the measured items when the
            block asks for a ``/metrics`` window, else ``None``.

        Raises:
            LiveGateError: a worker's gate or the run's budget refused a request.
            WorkerError: a worker failed (not a death: deaths are recorded).
        """
        route = self.routes[block.route]
        if block.warmup:
            warm = tuple(PoolItem(-1, block.route, r) for r in block.warmup)
            on_warm = _warm(block, on_sent, self.sizer)
            await self.pool.run(LoadWork((), block.concurrency, warmup=warm), on_warm)
        if not items:
            return None
        before = None
        if block.scrape:
            before = await scrape_metrics(route, gate=self.gate, client=self.client)
        reports: list[PoolReport] = []
        chosen = self.sizer.choose(block) if self.sizer is not None else None

        async def send() -> None:
            work = _load_work(block, items)
            n = None if chosen is None else chosen[0]
            report = await self.pool.run(work, _measured(block, items, on_sent), n)
            if chosen is not None:
                report = dataclasses.replace(report, basis=chosen[1])
            reports.append(report)

        # the cache window: KV and queue gauges sampled while the block runs (their peaks)
        during = await while_sampling(
            send, route, gate=self.gate, client=self.client, opening=before
        )
        if self.on_report is not None:
            self.on_report(block, reports[0])
        if before is None:
            return None
        after = await scrape_settled(route, gate=self.gate, client=self.client)
        window = cache_window(before, after, during)
        if window is not None and self.on_cache is not None:
            self.on_cache(block, window)
        return metrics_delta(before, after)


def _load_work(block: Block, items: tuple[WorkItem, ...]) -> LoadWork:
    offsets = _item_offsets(block, items)
    return LoadWork(
        tuple(PoolItem(it.index, block.route, it.request) for it in items),
        block.concurrency,
        None if block.offsets_s is None else tuple(o or 0.0 for o in offsets),
        ramp_ms=block.ramp_ms,
    )


def _warm(block: Block, on_sent: SentFn, sizer: WorkerSizer | None) -> ResultFn:
    def on_result(r: PoolResult) -> None:
        if sizer is not None:
            sizer.observe(block, r.measurement)
        on_sent(block, Sent(None, r.measurement))

    return on_result


def _measured(block: Block, items: tuple[WorkItem, ...], on_sent: SentFn) -> ResultFn:
    by_index = {it.index: it for it in items}

    def on_result(r: PoolResult) -> None:
        item = by_index[r.item.key] if r.item is not None else None
        on_sent(block, Sent(item, r.measurement, r.queue_ms))

    return on_result


@asynccontextmanager
async def executor_for(
    plan: BenchmarkPlan,
    routes: Mapping[str, EngineRoute],
    gate: LiveGate,
    client: httpx.AsyncClient,
    on_report: ReportFn | None = None,
    counter: TokenCounter | None = None,
    on_cache: CacheFn | None = None,
    sizer: WorkerSizer | None = None,
) -> AsyncIterator[BlockExecutor]:
    """The executor ``plan`` asks for: this process (``workers = 1``, ``executor =
    "process"``), worker processes, or Ray actors; pools are stopped on exit.

    ``counter`` (the plan's tokenizer) counts outputs that came without usage in
    this process's executor; worker pools keep the chunk estimate (the row is
    marked ``tokens_estimated`` either way). ``on_cache`` gets every scraped
    block's cache window. ``sizer``: ``workers = "auto"``'s per-block choice
    (the pool starts :attr:`~deepseekbench.BenchmarkPlan.pool_workers`).

    Raises:
        WorkerError: a worker process did not start.
        RayUnavailableError: ``executor = "ray"`` without the ``ray`` package.
        LiveGateError: a non-loopback ``ray_address`` without key and spend.
    """
    timeouts = Timeouts(total_s=plan.timeout_s)
    if plan.workers == 1 and plan.executor == "process":
        yield Executor(routes, gate, client, timeouts, counter, on_cache)
        return
    if plan.executor == "ray":
        from deepseekbench._execute._ray_executor import RayPool

        ray_pool = RayPool(
            plan.pool_workers,
            routes=routes,
            gate=gate,
            timeouts=timeouts,
            address=plan.ray_address,
        )
        async with ray_pool:
            yield PoolExecutor(ray_pool, routes, gate, client, on_report, on_cache, sizer)
        return
    size = plan.pool_workers
    async with WorkerPool(size, routes=routes, gate=gate, timeouts=timeouts) as pool:
        yield PoolExecutor(pool, routes, gate, client, on_report, on_cache, sizer)
