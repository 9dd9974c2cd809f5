"""What runs inside one client worker (a process or a Ray actor): its gate, its client,
and the sending of its :class:`~deepseekbench._execute._workshare.WorkerShare`.

Each worker has its own event loop, its own :class:`~deepseekbench.LiveGate`
built from the same :class:`GateRules` as the parent's gate (same key, same
``spend``; a non-loopback host is refused on the same terms), and its own
client from that gate. Budgets (``max_requests``, ``max_output_tokens``) are
the run's, not the worker's: when the parent's gate has one, the worker asks
the parent's ledger (an :data:`AskFn`) before every request, before its clock
starts. A refusal stops the worker's share without dropping what it admitted: the
requests already in flight finish and are posted, the refused one and every one
after it are posted unsent with error kind ``budget_refused``, and then the
refusal raises :class:`~deepseekbench.LiveGateError` as it would in one process.

Times: every measurement's own times are on this worker's monotonic clock
(``time.perf_counter_ns``, CLOCK_MONOTONIC on Linux); the shared start of a
load point and the send/finish stamps reported with each request are
``time.monotonic_ns()`` (CLOCK_MONOTONIC, one clock for every process of a
host). A Ray actor converts a wall-clock start to its own monotonic clock
before calling :meth:`WorkerCore.run`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import anyio
import httpx
from pydantic import SecretStr

from deepseekbench._errors import LiveGateError
from deepseekbench._execute._budget import BudgetStop
from deepseekbench._execute._lag import schedule_lag_ms
from deepseekbench._execute._ramp import ramp_limiter
from deepseekbench._execute._workshare import PoolItem, WorkerShare
from deepseekbench._measure._measure import Timeouts, measure_streamed
from deepseekbench._measure._selfcheck import SelfCheck
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._measurement import StreamMeasurement

__all__ = ["AskFn", "Finished", "GateRules", "PostFn", "WorkerCore", "WorkerSetup"]


@dataclass(frozen=True, slots=True)
class GateRules:
    """The parent gate's rules a worker's own gate is built from.

    Attributes:
        api_key: the gate's key (never shown in ``repr``; travels pickled over a
            pipe or as a Ray argument, never in argv or the environment).
        spend: whether non-loopback requests may be sent.
        budgeted: whether the parent's gate has a budget, so that every request
            must be granted by the parent's ledger first.
    """

    api_key: SecretStr | None = field(default=None, repr=False)
    spend: bool = False
    budgeted: bool = False

    @classmethod
    def of(cls, gate: LiveGate) -> GateRules:
        """The rules of ``gate`` (its key, ``spend``, whether it has a budget)."""
        budgeted = gate.max_requests is not None or gate.max_output_tokens is not None
        return cls(api_key=gate.api_key, spend=gate.spend, budgeted=budgeted)

    def gate(self) -> LiveGate:
        """A worker's gate: the same key and ``spend``, no budget of its own."""
        return LiveGate(api_key=self.api_key, spend=self.spend)


@dataclass(frozen=True, slots=True)
class WorkerSetup:
    """Everything a worker needs once, at start.

    Attributes:
        worker: its number (0-based).
        routes: the engine route of every route label (route keys travel inside,
            as ``SecretStr``).
        rules: :class:`GateRules` of the parent's gate.
        timeouts: per-request deadlines.
    """

    worker: int
    routes: Mapping[str, EngineRoute]
    rules: GateRules
    timeouts: Timeouts


@dataclass(frozen=True, slots=True)
class Finished:
    """One finished request of a worker.

    Attributes:
        key: the item's key (``-1`` for a warm-up request).
        measurement: what was measured.
        queue_ms: open loop: the send's start (the client asks the pool for a
            connection) − scheduled send (ms, ≥ 0, the ledger's answer included;
            :func:`~deepseekbench._execute._lag.schedule_lag_ms`); ``None`` for a
            closed loop or a warm-up.
        sent_ns: send time, ``time.monotonic_ns()`` of the worker (ns).
        end_ns: finish time, ``time.monotonic_ns()`` of the worker (ns).
    """

    key: int
    measurement: StreamMeasurement
    queue_ms: float | None
    sent_ns: int
    end_ns: int


AskFn = Callable[[EngineRoute], Awaitable[None]]
"""Asks the parent's ledger to admit one request to a route; raises
:class:`~deepseekbench.LiveGateError` when the run's budget is spent."""

PostFn = Callable[[Finished], None]
"""Hands one finished request to the parent; must not block for long."""


async def sleep_until(deadline_ns: int) -> None:
    """Sleep until ``time.monotonic_ns()`` reaches ``deadline_ns`` (ns)."""
    delay = deadline_ns - time.monotonic_ns()
    if delay > 0:
        await anyio.sleep(delay / 1e9)


class WorkerCore:
    """One worker's gate and client, and the sending of its shares.

    Use as an async context manager (the client is closed on exit).

    Args:
        setup: the :class:`WorkerSetup`.
        post: called with every finished request (warm-ups included).
        ask: the parent ledger's admission (called before every request when
            ``setup.rules.budgeted``).
    """

    def __init__(self, setup: WorkerSetup, post: PostFn, ask: AskFn | None = None) -> None:
        self.setup = setup
        self.post = post
        self.ask = ask if setup.rules.budgeted else None
        self.gate = setup.rules.gate()
        total = setup.timeouts.total_s
        self.client = self.gate.client(timeout=httpx.Timeout(total))
        self._budget = BudgetStop()

    async def __aenter__(self) -> WorkerCore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:  # the exception propagates
        with anyio.CancelScope(shield=True):
            await self.client.aclose()

    async def _measure(self, item: PoolItem) -> StreamMeasurement:
        route = self.setup.routes[item.route]
        return await measure_streamed(
            item.request,
            route=route,
            gate=self.gate,
            client=self.client,
            timeouts=self.setup.timeouts,
        )

    async def _admitted(self, item: PoolItem, key: int) -> bool:
        """Ask the run's budget for ``item``; when it refuses (now, or earlier in this
        share), post ``item`` unsent with error kind ``budget_refused`` under ``key``
        and return False. The requests in flight are not cancelled
        (:class:`~deepseekbench._execute._budget.BudgetStop`)."""
        route = self.setup.routes[item.route]
        if self.ask is not None and not self._budget.stopped:
            try:
                await self.ask(route)
            except LiveGateError as exc:
                self._budget.hold(exc)
        if not self._budget.stopped:
            return True
        now = time.monotonic_ns()
        self.post(Finished(key, self._budget.unsent(route), None, now, now))
        return False

    async def warm(self, share: WorkerShare) -> None:
        """Send the share's warm-up requests on its streams; each is posted with key -1.

        Raises:
            LiveGateError: the gate or the run's budget refuses a request (a budget
                refusal once the requests in flight finished; the refused ones are
                posted with error kind ``budget_refused``).
        """
        limiter = anyio.CapacityLimiter(share.concurrency)

        async def one(item: PoolItem) -> None:
            async with limiter:
                if not await self._admitted(item, -1):
                    return
                sent = time.monotonic_ns()
                m = await self._measure(item)
            self.post(Finished(-1, m, None, sent, time.monotonic_ns()))

        async with SelfCheck(), anyio.create_task_group() as tg:
            for item in share.warmup:
                tg.start_soon(one, item)
        self._budget.raise_held()

    async def run(self, share: WorkerShare, start_ns: int) -> None:
        """Send the share's items from ``start_ns`` (``time.monotonic_ns()``, ns) on.

        Closed loop: ``share.concurrency`` streams from the start, or each from its
        ``share.stream_starts_s`` (a ramp). Open loop:
        item ``j`` at ``start_ns + offsets_s[j]``, waiting for a free slot when
        ``share.concurrency`` are in flight (that wait is its ``queue_ms``).
        A :class:`~deepseekbench._measure._selfcheck.SelfCheck` watches this worker's own
        event loop meanwhile, so each measurement's ``client_lag_ms`` (and a row's
        ``client_saturated``) is this worker's.

        Raises:
            LiveGateError: the gate or the run's budget refuses a request (a budget
                refusal once the requests in flight finished; the refused one and
                every later one are posted with error kind ``budget_refused``).
        """
        limiter = anyio.CapacityLimiter(share.concurrency)

        async def one(item: PoolItem, due_ns: int | None) -> None:
            async with limiter:
                if not await self._admitted(item, item.key):
                    return
                sent = time.monotonic_ns()
                m = await self._measure(item)
                # from the send's start (perf_counter_ns: the same
                # CLOCK_MONOTONIC as monotonic_ns on Linux), the ledger's answer and the
                # request's preparation included (_lag)
                lag = None if due_ns is None else schedule_lag_ms(m, due_ns, sent)
            self.post(Finished(item.key, m, lag, sent, time.monotonic_ns()))

        starts = share.stream_starts_s
        await sleep_until(start_ns + (round(starts[0] * 1e9) if starts else 0))
        async with SelfCheck(), anyio.create_task_group() as ramp:
            if starts:  # closed loop with a ramp: its streams join at their starts
                limiter.total_tokens = 1
                ramp.start_soon(ramp_limiter, limiter, starts, start_ns, time.monotonic_ns)
            async with anyio.create_task_group() as tg:
                for j, item in enumerate(share.items):
                    due = None
                    if share.offsets_s is not None:
                        due = start_ns + round(share.offsets_s[j] * 1e9)
                        if not self._budget.stopped:  # a refused share sends nothing more
                            await sleep_until(due)
                    tg.start_soon(one, item, due)
            ramp.cancel_scope.cancel()
        self._budget.raise_held()
