"""``run_plan``: measure a :class:`~deepseekbench.BenchmarkPlan`, speed and parity in one run.

Order of work (routes one after another, so a server's ``/metrics`` delta
covers only its own requests):

1. for each route, ``off`` first: the parity set (parity prompts and tasks,
   deterministic: temperature 0, the plan's fixed seed) once per reasoning mode
   in the plan's cells; then, per cell, the warm-up requests (not recorded) and
   the measured requests, with a ``/metrics`` scrape before and after on
   speculative routes (the server-wide acceptance fallback);
2. the determinism control: the ``off`` route's parity set a second time;
3. parity per route (:mod:`deepseekbench._parity`, :mod:`deepseekbench._tasks`)
   and one :class:`~deepseekbench.Row` per route and cell.

**Results file.** Records are appended and flushed as they arrive
(:mod:`deepseekbench._results`); a crash or Ctrl-C loses nothing already
written. A rerun with the same plan and file skips every measured request
(errored ones included) and every parity output that completed (errored parity
outputs are retried; the latest record of a key wins). Rows are a pure function
of the records (:mod:`deepseekbench._analysis`), so :func:`load_results`
rebuilds exactly what the run returned.
"""

from __future__ import annotations

import datetime as _dt
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from pydantic import BaseModel, ConfigDict

from deepseekbench._analysis import (
    MeasuredRequest,
    RouteParity,
    RunResult,
    build_result,
    load_results,
    load_results_and_runs,
    parity_ids,
    reasoning_modes,
    row_identity,
)
from deepseekbench._axes import QualityParity, ReasoningMode, Speculative
from deepseekbench._gate import LiveGate
from deepseekbench._measure import StreamMeasurement, Timeouts, measure_streamed
from deepseekbench._parity import ParityOutput
from deepseekbench._plan import BenchmarkPlan, CellPlan, RoutePlan
from deepseekbench._prepare import (
    conversation_pid,
    converse,
    make_counter,
    parity_conversations,
    prepare_workload,
)
from deepseekbench._request import ChatRequest
from deepseekbench._results import (
    ResultsFormatError,
    ResultsRun,
    ResultsState,
    ResultsWriter,
    list_runs,
    read_records,
    state_from,
)
from deepseekbench._route import EngineRoute
from deepseekbench._row import Row
from deepseekbench._selfcheck import SelfCheck
from deepseekbench._spec_config import check_spec_config
from deepseekbench._tasks import Task
from deepseekbench._tokens import recount_output
from deepseekbench._transport import pool_limits
from deepseekbench._workload import WorkloadItem, check_bucket_bytes

__all__ = [
    "DryRunResult",
    "MeasuredRequest",
    "ProgressEvent",
    "ProgressFn",
    "ResultsFormatError",
    "ResultsRun",
    "RouteParity",
    "RunResult",
    "dry_run",
    "list_runs",
    "load_results",
    "load_results_and_runs",
    "run_plan",
]


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Progress of a run: requests ``done`` of ``total`` (warm-ups and parity included),
    ``errors`` among them, ``elapsed_s`` seconds since the start, and the current ``phase``."""

    phase: str
    done: int
    total: int
    errors: int
    elapsed_s: float

    @property
    def rate_per_s(self) -> float:
        """Requests finished per second so far (requests/s)."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0


ProgressFn = Callable[[ProgressEvent], None]
"""Called after every finished request (and at each phase change); must not block."""


class DryRunResult(BaseModel):
    """What :func:`dry_run` found: the rows a run would write (no measurement, parity
    ``unknown``) and, per route label, the gate's refusal message (``None`` = admitted)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan_hash: str
    rows: tuple[Row, ...]
    refusals: dict[str, str | None]
    n_requests: int

    @property
    def refused(self) -> bool:
        """True when the gate would refuse any route."""
        return any(v is not None for v in self.refusals.values())


# ------------------------------------------------------------------ helpers --


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _parity_request(
    plan: BenchmarkPlan,
    prompt: str,
    task: Task | None,
    mode: ReasoningMode,
    history: tuple[dict[str, Any], ...] = (),
) -> ChatRequest:
    temperature = plan.parity.task_temperature if task is not None else 0.0
    max_tokens = (task.max_tokens if task is not None else None) or plan.parity.max_tokens
    return ChatRequest(
        messages=(*history, {"role": "user", "content": prompt}),
        max_tokens=max_tokens,
        temperature=temperature,
        seed=plan.parity.seed,
        reasoning_mode=mode,
    )


def _measure_request(
    plan: BenchmarkPlan, cell: CellPlan, messages: tuple[dict[str, Any], ...]
) -> ChatRequest:
    return ChatRequest(
        messages=messages,
        max_tokens=cell.request_max_tokens,
        temperature=plan.temperature,
        seed=plan.seed,
        reasoning_mode=cell.reasoning_mode,
        reach_max_tokens=plan.reach_max_tokens,
    )


def _first_turn(item: WorkloadItem) -> tuple[dict[str, Any], ...]:
    return ({"role": "user", "content": item.turns[0]},)


# ---------------------------------------------------------------- running --


class _Progress:
    def __init__(self, fn: ProgressFn | None, total: int) -> None:
        self.fn = fn
        self.total = total
        self.done = 0
        self.errors = 0
        self.phase = "start"
        self.t0 = time.monotonic()

    def emit(self) -> None:
        if self.fn is not None:
            self.fn(
                ProgressEvent(
                    phase=self.phase,
                    done=self.done,
                    total=self.total,
                    errors=self.errors,
                    elapsed_s=time.monotonic() - self.t0,
                )
            )

    def step(self, error: bool) -> None:
        self.done += 1
        self.errors += error
        self.emit()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.emit()


def _check_gate(routes: Iterable[EngineRoute], gate: LiveGate) -> None:
    for route in routes:
        err = gate.refusal(route.chat_url, has_auth_header=route.has_api_key)
        if err is not None:
            raise err


async def run_plan(
    plan: BenchmarkPlan,
    *,
    gate: LiveGate,
    results_path: str | Path | None = None,
    progress: ProgressFn | None = None,
    client: httpx.AsyncClient | None = None,
) -> RunResult:
    """Run ``plan``: parity set and measured requests on every route, then rows.

    Args:
        plan: the :class:`~deepseekbench.BenchmarkPlan`.
        gate: the :class:`~deepseekbench.LiveGate` every request passes; it is
            asked for every route before the first request, so a refused route
            stops the run before anything is sent.
        results_path: JSONL file to append to (default ``plan.results``; ``None``
            for neither keeps everything in memory only). An existing file with
            records of the same plan is resumed.
        progress: called after each finished request with a :class:`ProgressEvent`.
        client: a shared ``httpx.AsyncClient`` from ``gate.client()`` (one is made
            and closed here otherwise).

    Returns:
        :class:`RunResult`: rows (medians in ms, tokens/s), every per-request
        measurement, and parity per route.

    Raises:
        PlanError: as :meth:`~deepseekbench.BenchmarkPlan.validate_sources` (task,
            prompt or model-source file invalid, ``mtp`` on a model without MTP
            layers, no parity set), a task id that collides with a parity prompt
            id, or an API-key variable is unset (all before any request); a
            route's declared ``spec_tokens`` differs from the depth its server
            says it serves (llama.cpp ``/props``, SGLang ``/get_server_info``;
            before any measured request).
        pydantic.ValidationError: a route's ``request_extras`` sets ``model``,
            ``messages`` or ``stream`` (from
            :meth:`~deepseekbench.RoutePlan.engine_route`, before any request).
        WorkloadLengthError: a cell's prompts fall outside its context bucket's
            token range (a ``PlanError``; counted before any measured request,
            every such prompt named).
        TokenizeError: the plan's tokenizer could not count (endpoint failure,
            unreadable ``tokenizer.json``), before any measured request.
        LiveGateError: the gate refuses a route (before any request).
        ResultsFormatError: the results file exists but cannot be read back.
        OSError: the results file or its folder cannot be created or written.
    """
    sources = plan.validate_sources()
    capability, tasks = sources.capability, sources.tasks
    pids = parity_ids(plan, tasks)
    conversations = {i.id: i for i in parity_conversations(plan)}
    routes: dict[str, EngineRoute] = {r.label: r.engine_route(plan.model) for r in plan.routes}
    _check_gate(routes.values(), gate)
    own_client = client is None
    pool = pool_limits(max(plan.arrival.concurrency, plan.parity.concurrency))
    timeout = httpx.Timeout(plan.timeout_s)
    http = client if client is not None else gate.client(timeout=timeout, limits=pool)
    try:
        counter = make_counter(plan, off_route=routes[plan.off_route.label], gate=gate, client=http)
        prepared = await prepare_workload(plan, counter=counter, items=sources.items)
    except BaseException:
        if own_client:
            with anyio.CancelScope(shield=True):
                await http.aclose()
        raise
    path = Path(results_path) if results_path is not None else plan.results_path()
    plan_hash = plan.plan_hash()
    state = ResultsState()
    if path is not None and path.exists():
        state = state_from(read_records(path), plan_hash, path)
    resumed = len(state.measurements) + sum(1 for o in state.outputs.values() if o.complete)
    modes = reasoning_modes(plan)
    passes = {plan.off_route.label: 2 if plan.parity.determinism_control else 1}

    def parity_todo(
        label: str, mode: ReasoningMode, run: int
    ) -> list[tuple[str, str, Task | None]]:
        return [
            (pid, text, t)
            for pid, text, t in pids
            if not (
                (o := state.outputs.get((label, mode.value, run, pid))) is not None and o.complete
            )
        ]

    def turns_done(label: str, cell: CellPlan, i: int) -> list[StreamMeasurement]:
        """The conversation's recorded turns, in order, up to the first gap."""
        done: list[StreamMeasurement] = []
        for t in range(len(prepared.item(cell.cell_id, i).turns)):
            m = state.measurements.get((label, cell.cell_id, i, t))
            if m is None:
                break
            done.append(m)
        return done

    def turns_left(label: str, cell: CellPlan, i: int) -> int:
        done = turns_done(label, cell, i)
        if any(m.error is not None for m in done):
            return 0  # an errored turn ended the conversation
        return len(prepared.item(cell.cell_id, i).turns) - len(done)

    def measure_todo(label: str, cell: CellPlan) -> list[int]:
        return [i for i in range(plan.requests_per_cell) if turns_left(label, cell, i) > 0]

    total = 0
    for r in plan.routes:
        for mode in modes:
            for run in range(1, passes.get(r.label, 1) + 1):
                total += len(parity_todo(r.label, mode, run))
        for cell in plan.cells:
            todo = measure_todo(r.label, cell)
            total += sum(turns_left(r.label, cell, i) for i in todo)
            total += plan.warmup_per_cell if todo else 0
    prog = _Progress(progress, total)
    writer = ResultsWriter(path)
    run_id = uuid.uuid4().hex[:12]
    timeouts = Timeouts(total_s=plan.timeout_s)
    base = {"plan_hash": plan_hash}
    check = SelfCheck()  # the client's own event-loop lag, per request (client_saturated)
    try:
        await check_spec_config(plan.routes, routes, gate=gate, client=http)
        writer.write(
            {
                "record": "run_start",
                **base,
                "run_id": run_id,
                "started_at": _now(),
                "resumed": resumed,
                "plan": plan.model_dump(mode="json"),
                "model_capability": capability.model_dump(mode="json") if capability else None,
            }
        )

        writer.write(
            {
                "record": "workload",
                **base,
                "run_id": run_id,
                "tokenizer": prepared.tokenizer,
                "cells": {
                    cid: [
                        {
                            "id": i.id,
                            "category": i.category,
                            "turns": len(i.turns),
                            "prompt_tokens": i.prompt_tokens,
                        }
                        for i in items
                    ]
                    for cid, items in prepared.cells.items()
                },
            }
        )

        async def one(route: EngineRoute, req: ChatRequest) -> StreamMeasurement:
            m = await measure_streamed(req, route=route, gate=gate, client=http, timeouts=timeouts)
            if prepared.counter is not None and m.tokens_estimated and m.error is None:
                m = await recount_output(m, prepared.counter)
            return m

        async def parity_pass(label: str, mode: ReasoningMode, run: int) -> None:
            todo = parity_todo(label, mode, run)
            if not todo:
                return
            prog.set_phase(f"parity {label} {mode.value} run {run}")
            limiter = anyio.CapacityLimiter(plan.parity.concurrency)

            async def do(
                pid: str, text: str, task: Task | None, history: tuple[dict[str, Any], ...] = ()
            ) -> ParityOutput:
                async with limiter:
                    m = await one(routes[label], _parity_request(plan, text, task, mode, history))
                out = ParityOutput.from_measurement(pid, m)
                state.outputs[(label, mode.value, run, pid)] = out
                writer.write(
                    {
                        "record": "parity_output",
                        **base,
                        "route": label,
                        "reasoning_mode": mode.value,
                        "pass": run,
                        "prompt_id": pid,
                        "output": out.model_dump(mode="json"),
                    }
                )
                prog.step(out.error is not None)
                return out

            async def do_conversation(item: WorkloadItem) -> None:
                # each turn carries this route's own earlier answers
                history: tuple[dict[str, Any], ...] = ()
                for k, turn in enumerate(item.turns):
                    pid = conversation_pid(item.id, k)
                    out = state.outputs.get((label, mode.value, run, pid))
                    if out is None or not out.complete:
                        out = await do(pid, turn, None, history)
                    if out.error is not None:
                        return
                    history = (
                        *history,
                        {"role": "user", "content": turn},
                        {"role": "assistant", "content": out.text},
                    )

            waiting = {pid for pid, _, _ in todo}
            async with anyio.create_task_group() as tg:
                for pid, text, t in todo:
                    if not pid.startswith("conv:"):
                        tg.start_soon(do, pid, text, t)
                for item in conversations.values():
                    if any(conversation_pid(item.id, k) in waiting for k in range(len(item.turns))):
                        tg.start_soon(do_conversation, item)

        async def cell_phase(rp: RoutePlan, cell: CellPlan, salt: int) -> None:
            todo = measure_todo(rp.label, cell)
            if not todo:
                return
            route = routes[rp.label]
            prog.set_phase(f"measure {rp.label} {cell.cell_id}")
            limiter = anyio.CapacityLimiter(plan.arrival.concurrency)

            async def warm(i: int) -> None:
                first = _first_turn(prepared.item(cell.cell_id, i))
                async with limiter:
                    m = await one(route, _measure_request(plan, cell, first))
                prog.step(m.error is not None)

            async with anyio.create_task_group() as tg:
                for i in range(plan.warmup_per_cell):
                    tg.start_soon(warm, i)
            before = None
            scrape = rp.speculative is not Speculative.off and plan.hosting.value != "managed_api"
            if scrape:
                from deepseekbench._server_metrics import scrape_metrics

                before = await scrape_metrics(route, gate=gate, client=http)

            async def measure(i: int) -> None:
                item = prepared.item(cell.cell_id, i)
                done = turns_done(rp.label, cell, i)

                async def send(req: ChatRequest) -> StreamMeasurement:
                    async with limiter:
                        m = await one(route, req)
                    turn = len(req.messages) // 2  # user/assistant pairs before this turn
                    key = (rp.label, cell.cell_id, i, turn)
                    state.measurements[key] = m
                    state.order.append(key)
                    state.items[key] = (item.id, item.category)
                    writer.write(
                        {
                            "record": "measurement",
                            **base,
                            "route": rp.label,
                            "speculative": rp.speculative.value,
                            "cell": cell.cell_id,
                            "index": i,
                            "turn": turn,
                            "item": item.id,
                            "category": item.category,
                            "measurement": m.model_dump(mode="json"),
                        }
                    )
                    prog.step(m.error is not None)
                    return m

                await converse(
                    item, lambda msgs: _measure_request(plan, cell, msgs), send, done=done
                )

            offsets = plan.arrival.offsets_s(len(todo), salt=salt)
            async with anyio.create_task_group() as tg:
                t0 = anyio.current_time()
                for j, i in enumerate(todo):
                    if offsets is not None:
                        delay = t0 + offsets[j] - anyio.current_time()
                        if delay > 0:
                            await anyio.sleep(delay)
                    tg.start_soon(measure, i)
            if scrape and before is not None:
                from deepseekbench._server_metrics import metrics_delta, scrape_metrics

                after = await scrape_metrics(route, gate=gate, client=http)
                delta = metrics_delta(before, after)
                if delta is not None:
                    state.server[(rp.label, cell.cell_id)] = delta
                    writer.write(
                        {
                            "record": "server_metrics",
                            **base,
                            "route": rp.label,
                            "cell": cell.cell_id,
                            "acceptance": delta.model_dump(mode="json"),
                        }
                    )

        prog.emit()
        await check.start()
        run_order = (plan.off_route, *plan.speculative_routes)
        for r_index, rp in enumerate(run_order):
            for mode in modes:
                await parity_pass(rp.label, mode, 1)
            for c_index, cell in enumerate(plan.cells):
                await cell_phase(rp, cell, salt=r_index * 1000 + c_index)
        if plan.parity.determinism_control:
            for mode in modes:
                await parity_pass(plan.off_route.label, mode, 2)
        prog.set_phase("done")
        result = build_result(
            plan, state, results_path=path, resumed=resumed, complete=True, tasks=tasks
        )
        for rpar in result.parity.values():
            writer.write(
                {
                    "record": "parity",
                    **base,
                    "run_id": run_id,
                    "route": rpar.route,
                    "reasoning_mode": rpar.reasoning_mode.value,
                    "parity": rpar.model_dump(mode="json"),
                }
            )
        for row in result.rows:
            writer.write(
                {"record": "row", **base, "run_id": run_id, "row": row.model_dump(mode="json")}
            )
        writer.write(
            {
                "record": "run_end",
                **base,
                "run_id": run_id,
                "finished_at": _now(),
                "n_requests": len(result.measurements),
                "n_errors": result.n_errors,
            }
        )
        return result
    finally:
        writer.close()
        if own_client:
            with anyio.CancelScope(shield=True):
                await http.aclose()
        await check.aclose()  # not inside a shield: its task group was opened outside one


def dry_run(plan: BenchmarkPlan, *, gate: LiveGate) -> DryRunResult:
    """Validate ``plan`` and list the rows a run would write, without any connection.

    Every row has no measurement (``n_requests`` 0) and parity ``unknown``;
    ``refusals`` says, per route, what the gate would refuse (from
    :meth:`LiveGate.refusal`, which consumes nothing and opens nothing).

    Raises:
        PlanError: as :meth:`~deepseekbench.BenchmarkPlan.validate_sources` (task,
            prompt or model-source file invalid, ``mtp`` on a model without MTP
            layers, no parity set), or a task id collides with a parity prompt id.
        WorkloadLengthError: a cell's prompts are certainly below its bucket (the
            byte bound; token counts need the run's tokenizer), each prompt named.
    """
    sources = plan.validate_sources()
    tasks = sources.tasks
    for cell in plan.cells:
        if sources.items is not None:
            check_bucket_bytes(cell.cell_id, cell.context_bucket, sources.items)
    refusals: dict[str, str | None] = {}
    for r in plan.routes:
        # A route with api_key_env will send its own Authorization header.
        err = gate.refusal(
            f"{r.base_url}/chat/completions", has_auth_header=r.api_key_env is not None
        )
        refusals[r.label] = str(err) if err is not None else None
    rows = tuple(
        Row(
            **row_identity(plan, cell, r),
            quality_parity=QualityParity.unknown,
            parity_detail="dry run: nothing measured"
            + (f"; gate would refuse: {refusals[r.label]}" if refusals[r.label] else ""),
        )
        for r in plan.routes
        for cell in plan.cells
    )
    n_parity = len(parity_ids(plan, tasks)) * len(reasoning_modes(plan))
    n = len(plan.routes) * len(plan.cells) * (
        plan.requests_per_cell + plan.warmup_per_cell
    ) + n_parity * (len(plan.routes) + (1 if plan.parity.determinism_control else 0))
    return DryRunResult(plan_hash=plan.plan_hash(), rows=rows, refusals=refusals, n_requests=n)
