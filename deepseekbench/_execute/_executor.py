"""The executor: sends a schedule's blocks at the right moments and measures them.

The only async stage of a run. It knows nothing of results files or rows: each
finished request is handed to a callback as a :class:`Sent` (the measurement
and, in an open loop, its schedule lag), and a block's ``/metrics`` window comes
back from :meth:`Executor.run_block`.

Sending: a closed loop keeps ``concurrency`` requests in flight (a capacity
limiter), its streams' first sends spread over ``block.ramp_ms`` when the plan asks
(:mod:`~deepseekbench._execute._ramp`; all at once by default); an open loop
starts request ``j`` at ``block start + offsets_s[j]`` and waits for a free slot
when ``concurrency`` are already in flight. The wait from the scheduled send to
the send's start (the request's preparation included;
:mod:`~deepseekbench._execute._lag`) is the request's ``queue_ms`` (the schedule
lag: an overloaded client, not a slow server).

Conversations: an item whose workload has several turns sends them in order
in its slot (it keeps the slot, as one user would), each later turn with the
route's own earlier answers in the history; each turn is its own :class:`Sent`
(``turn``), and an errored turn ends the conversation.

Budgets: a request the run's budget (``max_requests``, ``max_output_tokens`` on
the gate) refuses does not cancel the block's requests in flight: they finish and
are handed on, the refused request and every later one of the block are handed on
unsent (error kind ``budget_refused``; :mod:`~deepseekbench._execute._budget`, the
same as in a client worker), and the refusal raises once they are done.

Self-check: a measure block's requests are sent inside a
:class:`~deepseekbench._measure._selfcheck.SelfCheck` (an event-loop lag ticker), so each
measured request's ``client_lag_ms`` holds the largest lag of the client's own
event loop during it; the analysis flags a row ``client_saturated`` from these
(docs/measurement.md, "Fidelity"). Warm-ups, parity and control requests are
sent without one (their ``client_lag_ms`` is ``None``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from deepseekbench._errors import LiveGateError
from deepseekbench._execute._budget import BudgetStop
from deepseekbench._execute._lag import schedule_lag_ms
from deepseekbench._execute._prepare import converse
from deepseekbench._execute._ramp import ramp_limiter, stream_starts_s
from deepseekbench._measure._cache_metrics import cache_window, while_sampling
from deepseekbench._measure._measure import Timeouts, measure_streamed
from deepseekbench._measure._selfcheck import SelfCheck
from deepseekbench._measure._server_metrics import metrics_delta, scrape_metrics, scrape_settled
from deepseekbench._measure._tokens import TokenCounter, recount_output
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._plan._schedule import Block, Phase, WorkItem
from deepseekbench._records._measurement import StreamMeasurement, is_unsent
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._cache import CacheWindow
from deepseekbench._types._request import ChatRequest

__all__ = ["CacheFn", "Executor", "Sent", "SentFn"]


@dataclass(frozen=True, slots=True)
class Sent:
    """One finished request of a block.

    Attributes:
        item: the work item, or ``None`` for a warm-up request.
        measurement: what was measured.
        queue_ms: open loop: the send's start (the client asks the pool for a
            connection) − scheduled send (ms, ≥ 0;
            :func:`~deepseekbench._execute._lag.schedule_lag_ms`); ``None`` closed (and
            for a conversation's later turns).
        turn: the conversation turn (0-based; 0 for a single-turn item).
    """

    item: WorkItem | None
    measurement: StreamMeasurement
    queue_ms: float | None = None
    turn: int = 0


SentFn = Callable[[Block, Sent], None]
"""Called for every finished request (warm-ups included); must not block."""

CacheFn = Callable[[Block, CacheWindow], None]
"""Called with a block's cache window (prefix cache, KV and queue peaks)."""


@dataclass(slots=True)
class Executor:
    """Sends blocks to their routes through ``gate`` on one shared ``client``.

    Attributes:
        routes: the engine route of every route label.
        gate: the :class:`~deepseekbench.LiveGate` every request passes.
        client: the shared ``httpx.AsyncClient`` (from ``gate.client()``).
        timeouts: per-request deadlines.
        counter: the plan's tokenizer: output tokens of a response without usage
            are counted with it (:func:`~deepseekbench._measure._tokens.recount_output`).
        on_cache: called with each scraped block's
            :class:`~deepseekbench.CacheWindow`, when one is known.
    """

    routes: Mapping[str, EngineRoute]
    gate: LiveGate
    client: httpx.AsyncClient
    timeouts: Timeouts
    counter: TokenCounter | None = None
    on_cache: CacheFn | None = None

    async def _one(
        self, route: EngineRoute, request: ChatRequest, budget: BudgetStop
    ) -> StreamMeasurement:
        """Measure one request; once the run's budget refused one of the block (this
        one included), the record of an unsent request instead (``budget_refused``)."""
        if budget.stopped:
            return budget.unsent(route)
        try:
            m = await measure_streamed(
                request, route=route, gate=self.gate, client=self.client, timeouts=self.timeouts
            )
        except LiveGateError as exc:
            budget.hold(exc)  # raises a refusal that is not a spent budget
            return budget.unsent(route)
        if self.counter is not None and m.tokens_estimated and m.error is None:
            try:
                m = await recount_output(m, self.counter)
            except LiveGateError as exc:  # the count's request refused: keep the estimate
                budget.hold(exc)
        return m

    async def _item(
        self,
        block: Block,
        route: EngineRoute,
        item: WorkItem,
        due_ns: int | None,
        on_sent: SentFn,
        budget: BudgetStop,
    ) -> None:
        """Send one item: a single request, or every remaining turn of its conversation
        (each turn with this route's own earlier answers; :func:`converse`). ``due_ns``:
        its scheduled send (``time.perf_counter_ns()``), ``None`` in a closed loop."""
        acquired_ns = time.perf_counter_ns()

        def lag(m: StreamMeasurement) -> float | None:
            if due_ns is None or is_unsent(m):
                return None
            return schedule_lag_ms(m, due_ns, acquired_ns)

        conv = item.workload
        if conv is None or (len(conv.turns) == 1 and not item.done):
            m = await self._one(route, item.request, budget)
            on_sent(block, Sent(item, m, lag(m)))
            return

        async def turn(request: ChatRequest) -> StreamMeasurement:
            m = await self._one(route, request, budget)
            k = len(request.messages) // 2  # user/assistant pairs before this turn
            on_sent(block, Sent(item, m, lag(m) if k == 0 else None, turn=k))
            return m

        def request_for(messages: tuple[dict[str, Any], ...]) -> ChatRequest:
            update: dict[str, Any] = {"messages": messages}
            target = conv.output_target(len(messages) // 2)  # per-turn output target
            if target is not None:
                update["max_tokens"] = target
            return item.request.model_copy(update=update)

        await converse(conv, request_for, turn, done=item.done)

    async def run_block(
        self, block: Block, items: tuple[WorkItem, ...], on_sent: SentFn
    ) -> AcceptanceRecord | None:
        """Send ``block``'s warm-ups, then ``items`` (the block's items still to do).

        Returns:
            the server-wide acceptance delta over the measured items when the
            block asks for a ``/metrics`` window and the server has counters,
            else ``None``.

        Raises:
            LiveGateError: the gate refuses a request; a spent budget once the
                requests it admitted finished and were handed to ``on_sent`` (the
                refused ones too, unsent: error kind ``budget_refused``).
        """
        route = self.routes[block.route]
        limiter = anyio.CapacityLimiter(block.concurrency)
        await self._warm(block, route, limiter, on_sent)
        if not items:
            return None
        before = None
        if block.scrape:
            before = await scrape_metrics(route, gate=self.gate, client=self.client)

        async def send() -> None:
            if block.phase is Phase.measure:
                async with SelfCheck():  # per-request client_lag_ms (client_saturated rows)
                    await self._send(block, route, items, limiter, on_sent)
            else:
                await self._send(block, route, items, limiter, on_sent)

        # the cache window: KV and queue gauges sampled while the block runs (their peaks)
        during = await while_sampling(
            send, route, gate=self.gate, client=self.client, opening=before
        )
        if before is None:
            return None
        after = await scrape_settled(route, gate=self.gate, client=self.client)
        window = cache_window(before, after, during)
        if window is not None and self.on_cache is not None:
            self.on_cache(block, window)
        return metrics_delta(before, after)

    async def _warm(
        self, block: Block, route: EngineRoute, limiter: anyio.CapacityLimiter, on_sent: SentFn
    ) -> None:
        budget = BudgetStop()

        async def warm(request: ChatRequest) -> None:
            async with limiter:
                m = await self._one(route, request, budget)
            on_sent(block, Sent(None, m))

        async with anyio.create_task_group() as tg:
            for request in block.warmup:
                tg.start_soon(warm, request)
        budget.raise_held()

    async def _send(
        self,
        block: Block,
        route: EngineRoute,
        items: tuple[WorkItem, ...],
        limiter: anyio.CapacityLimiter,
        on_sent: SentFn,
    ) -> None:
        """Send ``items`` (their warm-ups sent); a budget refusal raises once the
        requests admitted before it finished (the rest handed on as unsent)."""
        offsets = _item_offsets(block, items)
        budget = BudgetStop()

        async def send(item: WorkItem, due_ns: int | None) -> None:
            async with limiter:
                await self._item(block, route, item, due_ns, on_sent, budget)

        async with anyio.create_task_group() as ramp:
            t0_ns = time.perf_counter_ns()  # the measurements' clock: lags compare to it
            if block.offsets_s is None and block.ramp_ms > 0:  # closed loop, spread starts
                starts = stream_starts_s(block.concurrency, block.ramp_ms)
                limiter.total_tokens = 1  # stream 0; the others join at their starts
                ramp.start_soon(ramp_limiter, limiter, starts, t0_ns)
            async with anyio.create_task_group() as tg:
                for item, offset in zip(items, offsets, strict=True):
                    due_ns = None
                    if offset is not None:
                        due_ns = t0_ns + round(offset * 1e9)
                        delay_ns = due_ns - time.perf_counter_ns()
                        if delay_ns > 0 and not budget.stopped:  # a refused block sends no more
                            await anyio.sleep(delay_ns / 1e9)
                    tg.start_soon(send, item, due_ns)
            ramp.cancel_scope.cancel()  # every item done: a ramp still going has no one to let in
        limiter.total_tokens = block.concurrency
        budget.raise_held()


def _item_offsets(block: Block, items: tuple[WorkItem, ...]) -> list[float | None]:
    """Each pending item's send offset (s), re-based so the first pending one goes at 0."""
    if block.offsets_s is None:
        return [None] * len(items)
    position = {it.index: j for j, it in enumerate(block.items)}
    raw = [block.offsets_s[position[it.index]] for it in items]
    first = raw[0] if raw else 0.0
    return [x - first for x in raw]
