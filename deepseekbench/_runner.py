"""``run_plan``: measure a :class:`~deepseekbench.BenchmarkPlan`, speed and parity in one run.

The run is a pipeline whose data flows one way::

    plan ─▶ schedule ─▶ executor ─▶ results store ─▶ analysis ─▶ scorecard
            (_schedule)  (_executor)  (_results)       (_analysis)  (_scorecard)

This module only wires the stages: it prepares the workload
(:mod:`deepseekbench._execute._prepare`: each cell's items, counted with the plan's
tokenizer and checked against the cell's bucket before any measured request),
builds the schedule
(:func:`~deepseekbench._plan._schedule.build_schedule`: parity set per route, then per
cell and load point ``rounds`` rounds of every route's block with the route
order alternating, then the determinism control), drops what an earlier run of
the same plan already recorded, hands each block to the executor, appends every
finished request to the results file as it arrives, and builds the rows from
the records at the end.

**Steps.** :func:`run_plan` runs six named steps (and issue 21's ``.forensics``
between execute and finish: ``off``'s logprobs at every divergence), each one short function:
``_preflight`` (read the plan's files, build the routes, ask the gate),
``_open_store`` (lock the results file, index what it holds), then
``_Steps.prepare`` (probe, served depth, issue 21's engine deterministic mode, count
the workload), ``.outputs`` and
``.calibrate`` (issue 23: output-length draws and the calibration pass on
``off``, recorded and resumable; :mod:`deepseekbench._execute._calibrate`),
``.schedule``,
``.execute`` (every finished request recorded as it arrives) and ``.finish``
(the :class:`RunResult`, built once and frozen, then its records). Every
record goes through :class:`~deepseekbench._store._results.ResultsStore`,
which writes it and indexes it in one call.

**Results file.** Records are appended and flushed as they arrive
(:mod:`deepseekbench._store._results`); a crash or Ctrl-C loses nothing already
written. A rerun with the same plan and file skips every measured request that
succeeded and every parity output that completed; errored measurements are
measured again unless ``retry_errors=False`` (CLI ``--no-retry-errors``), and
errored parity outputs are always retried (the latest record of a key wins).
Rows are a pure function of the records (:mod:`deepseekbench._analysis._analysis`), so
:func:`load_results` rebuilds exactly what the run returned.

**Capacity search** (issue 24). With ``[search]``, step 5 goes on after the
schedule: :class:`~deepseekbench._execute._search.SearchLoop` measures every
route at one level after another, each level announced by ``search_probe``
records before it is measured and judged by them after; the levels are a pure
function of the records, so a resumed run completes an announced level and
carries on. The rows then include every level measured.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._analysis._analysis import (
    MeasuredRequest,
    RouteParity,
    RunMeta,
    RunResult,
    build_result,
    load_results,
    load_results_and_runs,
    row_identity,
)
from deepseekbench._analysis._capacity import route_probes
from deepseekbench._analysis._follow_ups import follow_ups
from deepseekbench._dialects import dialect_for
from deepseekbench._dialects._base import EngineDialect
from deepseekbench._errors import LiveGateError, PlanError, ServerError
from deepseekbench._execute._calibrate import (
    calibrated_items,
    calibration_blocks,
    draw_outputs,
    needs_calibration,
    pin,
)
from deepseekbench._execute._executor import Executor, Sent
from deepseekbench._execute._forensics import explain_divergences
from deepseekbench._execute._pool_executor import BlockExecutor, executor_for
from deepseekbench._execute._preflight import check_spec_config, engine_determinism
from deepseekbench._execute._prepare import (
    PreparedWorkload,
    make_counter,
    prepare_workload,
)
from deepseekbench._execute._search import SearchLoop
from deepseekbench._execute._workers import PoolReport
from deepseekbench._launch._plan_launch import (
    PORT_PLACEHOLDER,
    Launched,
    LaunchTarget,
    check_exposure,
    launch_argv,
    launch_secrets,
    launched_routes,
    shown_argv,
)
from deepseekbench._measure._measure import Timeouts
from deepseekbench._measure._redact import redact_measurement
from deepseekbench._measure._tokens import TokenCounter
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._probe import PROBE_TIMEOUT_S, probe_routes
from deepseekbench._net._route import EngineRoute
from deepseekbench._net._route_plan import engine_route
from deepseekbench._net._transport import pool_limits
from deepseekbench._plan._coverage import WorkloadCoverage, items_used
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import (
    Block,
    Phase,
    WorkItem,
    build_schedule,
    conversation_pid,
    parity_prompts,
)
from deepseekbench._plan._search import Probe, passed
from deepseekbench._plan._sources import PlanSources
from deepseekbench._plan._workload import WorkloadItem, check_bucket_bytes
from deepseekbench._records._follow_up import FollowUp
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._store._records import (
    CalibrationRecord,
    DivergenceMarginRecord,
    EngineDeterminismRecord,
    MeasurementRecord,
    ParityEntry,
    ParityOutputRecord,
    ParityRecord,
    RowRecord,
    RunEndRecord,
    RunStartRecord,
    SearchProbeRecord,
    ServerCacheRecord,
    ServerMetricsRecord,
    WorkersRecord,
    WorkloadEntry,
    WorkloadRecord,
    parity_entries,
)
from deepseekbench._store._results import (
    ResultsFormatError,
    ResultsRun,
    ResultsState,
    ResultsStore,
    ResultsWriteError,
    list_runs,
)
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import QualityParity
from deepseekbench._types._cache import CacheWindow
from deepseekbench._types._determinism import EngineDeterminism
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._margin import DivergenceMargin
from deepseekbench._types._parity import ParityOutput
from deepseekbench._types._row import Row
from deepseekbench._types._secrets import redact, secret_values
from deepseekbench._version import __version__

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
    "grid_text",
    "list_runs",
    "load_results",
    "load_results_and_runs",
    "run_plan",
]


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Progress of a run: requests ``done`` of ``total`` (warm-ups and parity included),
    ``errors`` among them, ``elapsed_s`` seconds since the start, and the current ``phase``.

    ``kept``: measured requests taken from the results file (0 on a fresh run);
    ``remaining``: measured requests the run had left to make when it started
    (warm-ups and parity not counted); both fixed for the run once known. On a
    resumed run the first event has phase ``"resume"``, so a caller can say both."""

    phase: str
    done: int
    total: int
    errors: int
    elapsed_s: float
    kept: int = 0
    remaining: int = 0

    @property
    def rate_per_s(self) -> float:
        """Requests finished per second so far (requests/s)."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0


ProgressFn = Callable[[ProgressEvent], None]
"""Called after every finished request (and at each phase change); must not block."""


class DryRunResult(BaseModel):
    """What :func:`dry_run` found: the rows a run would write (no measurement, parity
    ``unknown``; one per route, cell and load point), per route label the gate's
    refusal message (``None`` = admitted), the requests it would send, and the grid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan_hash: str
    rows: tuple[Row, ...]
    refusals: dict[str, str | None]
    n_requests: int
    grid: str = ""
    ray_address: str | None = Field(
        default=None,
        description="executor 'ray': the cluster address resolved as Ray would ('auto' "
        "follows RAY_ADDRESS or the leftover cluster file), or 'local' for a local "
        "instance on 127.0.0.1; None for the process executor",
    )
    ray_refusal: str | None = Field(
        default=None, description="why the gate (or the resolution) refuses that address"
    )
    # issue 23 (length23): nothing dropped silently
    warnings: tuple[str, ...] = Field(
        default=(),
        description="what the run would not measure, e.g. '8 items, 4 will be sent: raise "
        "requests_per_cell to 24' (a WorkloadCoverageWarning at run time), and each "
        "speculative route whose dialect reads no speculative counter (its verdict would "
        "be refused: speculative_counters_missing)",
    )

    launch_commands: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="per launched route, the argv it would run (the port as '{port}', "
        "known secrets as '***'; a vLLM server's parent-watch wrapper shown as the "
        "'python -m' module it runs); a launch runs a program: a plan with one is a script",
    )
    launch_env: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="per launched route, the names of the variables its launch sets "
        "('HF_TOKEN=$MY_TOKEN' for one taken from this process's environment); never values",
    )

    @property
    def refused(self) -> bool:
        """True when the gate would refuse any route or the Ray cluster address."""
        return self.ray_refusal is not None or any(v is not None for v in self.refusals.values())


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class _Progress:
    def __init__(self, fn: ProgressFn | None, total: int) -> None:
        self.fn = fn
        self.total = total
        self.done = 0
        self.errors = 0
        self.phase = "start"
        self.t0 = time.monotonic()
        self.kept = 0
        self.remaining = 0

    def emit(self) -> None:
        if self.fn is not None:
            self.fn(
                ProgressEvent(
                    phase=self.phase,
                    done=self.done,
                    total=self.total,
                    errors=self.errors,
                    elapsed_s=time.monotonic() - self.t0,
                    kept=self.kept,
                    remaining=self.remaining,
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
        if err is not None:  # name the route: a plan's routes often share a host
            name = f"route {route.label!r}: " if route.label else ""
            raise LiveGateError(f"{name}{err}", host=err.host, missing=err.missing)


# ------------------------------------------------------------ resume filter --


def _turns(item: WorkItem) -> int:
    return len(item.workload.turns) if item.workload is not None else 1


def _recorded(state: ResultsState, block: Block, item: WorkItem) -> list[StreamMeasurement]:
    """The turns of ``item`` an earlier run recorded, in order, up to the first gap
    (measured requests; a parity conversation's complete outputs as measurements)."""
    out: list[StreamMeasurement] = []
    for t in range(_turns(item)):
        if block.phase is Phase.measure:
            assert block.load is not None
            m = state.measurements.get((block.route, block.cell, block.load.key, item.index, t))
        else:
            o = state.outputs.get(
                (block.route, block.reasoning_mode.value, block.parity_pass, _parity_pid(item, t))
            )
            m = StreamMeasurement(text=o.text) if o is not None and o.complete else None
        if m is None:
            break
        out.append(m)
    return out


def _parity_pid(item: WorkItem, turn: int) -> str:
    """The parity prompt id of ``turn`` of a parity item (its own id when single-turn)."""
    if item.workload is not None and len(item.workload.turns) > 1:
        return conversation_pid(item.workload.id, turn)
    return item.prompt_id


def _remaining(state: ResultsState, block: Block, item: WorkItem) -> WorkItem | None:
    """``item`` with the turns already recorded attached (``done``), or ``None`` when
    nothing is left to send (every turn recorded, or an errored turn ended it)."""
    done = _recorded(state, block, item)
    if len(done) == _turns(item) or any(m.error is not None for m in done):
        return None
    return dataclasses.replace(item, done=tuple(done)) if done else item


def pending(
    blocks: Iterable[Block], state: ResultsState
) -> list[tuple[Block, tuple[WorkItem, ...]]]:
    """The blocks with requests still to make, each with those requests.

    A route's warm-ups move to its first block with work at each cell and load
    point, so a resumed run still warms the route up before measuring it.
    """
    out: list[tuple[Block, tuple[WorkItem, ...]]] = []
    warmups: dict[tuple[str, str, str], tuple[Any, ...]] = {}
    for block in blocks:
        todo = tuple(r for it in block.items if (r := _remaining(state, block, it)) is not None)
        wkey = (block.route, block.cell, block.load.key if block.load else "")
        if block.warmup:
            warmups[wkey] = block.warmup
        if not todo:
            continue
        warm = warmups.pop(wkey, ())
        out.append((dataclasses.replace(block, warmup=warm), todo))
    return out


# ------------------------------------------------------------- the store side --


class _Recorder:
    """Turns each finished request into its typed record and appends it to the store
    (which writes and indexes it: the runner never touches the index)."""

    def __init__(
        self, store: ResultsStore, plan_hash: str, run_id: str, speculative: Mapping[str, str]
    ) -> None:
        self.store = store
        self.base: dict[str, Any] = {"plan_hash": plan_hash, "run_id": run_id}
        self.speculative = speculative  # route label -> speculative value

    def sent(self, block: Block, sent: Sent) -> None:
        if sent.item is None:  # a warm-up: measured, not recorded
            return
        if block.phase is Phase.measure:
            self._measurement(block, sent)
        elif block.phase is Phase.calibrate:
            self._calibration(block, sent)
        else:
            self._parity_output(block, sent)

    def _calibration(self, block: Block, sent: Sent) -> None:
        """issue 23: one calibration output on ``off`` (natural length, resumable)."""
        assert sent.item is not None and sent.item.workload is not None
        w = sent.item.workload
        self.store.append(
            CalibrationRecord(
                **self.base,
                route=block.route,
                cell=block.cell,
                item=w.id,
                turn=sent.turn,
                max_tokens=w.output_target(sent.turn) or sent.item.request.max_tokens or 1,
                measurement=sent.measurement,
            )
        )

    def _measurement(self, block: Block, sent: Sent) -> None:
        assert block.load is not None and sent.item is not None
        w = sent.item.workload
        self.store.append(
            MeasurementRecord(
                **self.base,
                route=block.route,
                speculative=self.speculative[block.route],
                cell=block.cell,
                load=block.load.key,
                round=block.round,
                index=sent.item.index,
                turn=sent.turn,
                item=w.id if w is not None else None,
                category=w.category if w is not None else None,
                queue_ms=sent.queue_ms,
                measurement=sent.measurement,
            )
        )

    def _parity_output(self, block: Block, sent: Sent) -> None:
        assert sent.item is not None
        pid = _parity_pid(sent.item, sent.turn)
        self.store.append(
            ParityOutputRecord(
                **self.base,
                route=block.route,
                reasoning_mode=block.reasoning_mode.value,
                parity_pass=block.parity_pass,
                prompt_id=pid,
                output=ParityOutput.from_measurement(pid, sent.measurement),
            )
        )

    def start(
        self,
        plan: BenchmarkPlan,
        started_at: str,
        resumed: int,
        sources: PlanSources,
        prepared: PreparedWorkload,
        parity_set: tuple[ParityEntry, ...],
        launched: Mapping[str, LaunchRecord] | None = None,
    ) -> None:
        """The ``run_start`` record (the plan and its parity set: what the analysis
        needs) and the ``workload`` manifest (tokenizer; per cell each item's id,
        category, turn count and counted prompt tokens)."""
        cap = sources.capability
        self.store.append(
            RunStartRecord(
                **self.base,
                started_at=started_at,
                resumed=resumed,
                plan=plan.model_dump(mode="json"),
                model_capability=cap.model_dump(mode="json") if cap else None,
                parity_set=parity_set,
                library_version=_library_version(),
                launched=dict(launched) if launched else None,
            )
        )
        cells = {
            cid: tuple(
                WorkloadEntry(
                    id=i.id, category=i.category, turns=len(i.turns), prompt_tokens=i.prompt_tokens
                )
                for i in items
            )
            for cid, items in prepared.cells.items()
        }
        self.store.append(WorkloadRecord(**self.base, tokenizer=prepared.tokenizer, cells=cells))

    def window(self, block: Block, delta: AcceptanceRecord) -> None:
        assert block.load is not None
        self.store.append(
            ServerMetricsRecord(
                **self.base,
                route=block.route,
                cell=block.cell,
                load=block.load.key,
                round=block.round,
                acceptance=delta,
            )
        )

    def cache(self, block: Block, window: CacheWindow) -> None:
        """issue 23: one ``server_cache`` record per scraped block."""
        assert block.load is not None
        self.store.append(
            ServerCacheRecord(
                **self.base,
                route=block.route,
                cell=block.cell,
                load=block.load.key,
                round=block.round,
                cache=window,
            )
        )

    def workers(self, block: Block, report: PoolReport) -> None:
        """One ``workers`` record per block sent by several workers: the window
        edges (CLOCK_MONOTONIC ns; Ray: mapped from wall-clock time), the
        workers that died, and each Ray actor's clock offset estimate (ns)."""
        self.store.append(
            WorkersRecord(
                **self.base,
                route=block.route,
                phase=block.phase.value,
                cell=block.cell,
                load=block.load.key if block.load is not None else None,
                round=block.round,
                workers=report.workers,
                window_start_ns=report.start_ns,
                window_end_ns=report.end_ns,
                deaths=tuple(dataclasses.asdict(d) for d in report.deaths),
                clock_offsets_ns=tuple(report.clock_offsets_ns),
            )
        )

    def determinism(self, modes: Mapping[str, EngineDeterminism]) -> None:
        """Issue 21: each route's engine deterministic mode, as read before measuring."""
        for route, mode in modes.items():
            self.store.append(EngineDeterminismRecord(**self.base, route=route, determinism=mode))

    def margin(self, f: FollowUp, margin: DivergenceMargin) -> None:
        """Issue 21: one divergence explained by ``off``'s logprobs."""
        self.store.append(
            DivergenceMarginRecord(
                **self.base,
                route=f.candidate,
                source=f.source,
                reasoning_mode=f.reasoning_mode,
                cell=f.cell,
                load=f.load,
                prompt_id=f.prompt_id,
                margin=margin,
            )
        )

    def finish(self, result: RunResult, finished_at: str) -> None:
        for rpar in result.parity.values():
            self.store.append(
                ParityRecord(
                    **self.base,
                    route=rpar.route,
                    reasoning_mode=rpar.reasoning_mode.value,
                    parity=rpar.model_dump(mode="json"),
                )
            )
        for row in result.rows:
            self.store.append(RowRecord(**self.base, row=row))
        self.store.append(
            RunEndRecord(
                **self.base,
                finished_at=finished_at,
                n_requests=len(result.measurements),
                n_errors=result.n_errors,
            )
        )


def _in_flight(plan: BenchmarkPlan) -> int:
    """The most requests the run keeps in flight: the largest concurrency of the load
    sweep (an open loop's in-flight cap) or the parity set's, whichever is larger."""
    top = max(max(lp.concurrency for lp in plan.load_points), plan.parity.concurrency)
    search = plan.effective_search
    if search is not None and plan.arrival.mode != "rate":  # issue 24: search levels
        top = max(top, int(search.max_level))
    return top


def _check_conversations(plan: BenchmarkPlan, prepared: PreparedWorkload) -> None:
    """Refuse multi-turn items on a worker pool (its workers send single requests).

    Raises:
        PlanError: a conversation with several turns and ``workers > 1`` or a
            non-process executor.
    """
    if plan.workers == 1 and plan.executor == "process":
        return
    multi = sorted({i.id for items in prepared.cells.values() for i in items if len(i.turns) > 1})
    if multi:
        raise PlanError(
            f"multi-turn conversations ({', '.join(multi[:5])}"
            f"{', ...' if len(multi) > 5 else ''}) need workers = 1 and executor = "
            f"'process': a worker pool sends single requests"
        )


def _to_send(items: Iterable[WorkItem]) -> int:
    """Requests the items will send: every turn not yet recorded."""
    return sum(_turns(it) - len(it.done) for it in items)


def _resumed(state: ResultsState) -> int:
    calibrated = sum(1 for m in state.calibration.values() if m.error is None)  # issue 23
    return (
        len(state.measurements) + sum(1 for o in state.outputs.values() if o.complete) + calibrated
    )


# ------------------------------------------------------------- the run's steps --


@dataclass(frozen=True, slots=True)
class _Checked:
    """What preflight read and checked before anything is opened or sent."""

    sources: PlanSources
    parity_set: tuple[ParityEntry, ...]
    routes: dict[str, EngineRoute]
    path: Path | None
    plan_hash: str
    secrets: tuple[str, ...]
    """Every key a server may echo (any route's, the gate's): none lands in the file."""
    launched: dict[str, LaunchRecord] = dataclasses.field(default_factory=dict)  # issue 24


def _preflight(
    plan: BenchmarkPlan,
    gate: LiveGate,
    client: httpx.AsyncClient | None,
    results_path: str | Path | None,
) -> _Checked:
    """Step 1: read the plan's files, build the routes, ask the gate for every route.

    Raises:
        PlanError, pydantic.ValidationError, LiveGateError: see :func:`run_plan`.
    """
    sources = plan.validate_sources()
    parity_set = parity_entries(plan, sources.tasks)
    routes = {r.label: engine_route(r, plan.model) for r in plan.routes}
    _check_gate(routes.values(), gate)
    if client is not None:
        gate.check_client(client)
    keys = (gate.api_key, *(r.api_key for r in routes.values()))
    return _Checked(
        sources=sources,
        parity_set=parity_set,
        routes=routes,
        path=Path(results_path) if results_path is not None else plan.results_path(),
        plan_hash=plan.plan_hash(),
        secrets=secret_values(*keys),
    )


@dataclass(frozen=True, slots=True)
class _Previous:
    """What the results file held of this plan when the run opened it."""

    retried: int  # errored measurements dropped, to be measured again
    resumed: int  # measured requests, complete parity and calibration outputs kept
    kept: int  # measured requests kept
    started_at: str | None  # the plan's first run_start in the file


def _open_store(
    plan: BenchmarkPlan, path: Path | None, retry_errors: bool
) -> tuple[ResultsStore, _Previous]:
    """Step 2: lock the results file (a second run is refused before reading), then
    index what an earlier run of the same plan recorded.

    Raises:
        ResultsInUseError, ResultsFormatError, OSError: see :func:`run_plan`.
    """
    store = ResultsStore.open(path, plan)
    retried = store.drop_errored() if retry_errors else 0
    state = store.state
    kept = len(state.measurements)
    return store, _Previous(retried, _resumed(state), kept, store.started_at)


class _Steps:
    """Steps 3 to 6 of one run (prepare, schedule, execute, finish), over the store
    opened in step 2; each step records through the store, never around it."""

    def __init__(
        self,
        plan: BenchmarkPlan,
        gate: LiveGate,
        http: httpx.AsyncClient,
        run: _Checked,
        store: ResultsStore,
        previous: _Previous,
        prog: _Progress,
    ) -> None:
        self.plan, self.gate, self.http, self.run = plan, gate, http, run
        self.store, self.previous, self.prog = store, previous, prog
        self.started_at = previous.started_at  # the plan's first start; set when recorded
        self.blocks: list[Block] = []
        self.determinism: dict[str, EngineDeterminism] = {}  # issue 21: read in prepare
        speculative = {r.label: r.speculative.value for r in plan.routes}
        self.recorder = _Recorder(store, run.plan_hash, uuid.uuid4().hex[:12], speculative)

    async def prepare(self) -> tuple[TokenCounter | None, PreparedWorkload]:
        """Step 3: probe the routes, check served depths, read each engine's
        deterministic mode (issue 21), count each cell's items.

        Raises:
            RouteUnreachableError, PlanError, WorkloadLengthError, TokenizeError.
        """
        plan, routes = self.plan, self.run.routes
        if plan.probe_routes:  # a dead route stops the run before anything is measured
            probe_timeout = min(plan.timeout_s, PROBE_TIMEOUT_S)
            await probe_routes(routes, gate=self.gate, client=self.http, timeout_s=probe_timeout)
        await check_spec_config(plan.routes, routes, gate=self.gate, client=self.http)
        self.determinism = await engine_determinism(  # issue 21
            plan.routes, routes, gate=self.gate, client=self.http
        )
        counter = make_counter(
            plan, off_route=routes[plan.off_route.label], gate=self.gate, client=self.http
        )
        prepared = await prepare_workload(plan, counter=counter, items=self.run.sources.items)
        _check_conversations(plan, prepared)
        return counter, prepared

    async def outputs(
        self, prepared: PreparedWorkload, counter: TokenCounter | None
    ) -> tuple[PreparedWorkload, list[Block]]:
        """Step 3b (issue 23): draw each item's output cap; the calibration blocks
        still to send on ``off`` (none for ``natural`` or when the file has them all)."""
        prepared = await draw_outputs(self.plan, prepared, counter)
        return prepared, calibration_blocks(self.plan, prepared, self.store.state.calibration)

    async def calibrate(
        self, prepared: PreparedWorkload, blocks: list[Block], counter: TokenCounter | None
    ) -> PreparedWorkload:
        """Step 3c (issue 23): the calibration pass (each output recorded as it
        arrives, resumable); ``pinned`` items then carry their natural lengths.

        Raises:
            CalibrationError: an item got no natural length (records kept).
        """
        if not needs_calibration(self.plan):
            return prepared
        if blocks:
            self.prog.set_phase("calibrate")
            timeouts = Timeouts(total_s=self.plan.timeout_s)
            executor = Executor(self.run.routes, self.gate, self.http, timeouts, counter)
            for block in blocks:
                await executor.run_block(block, block.items, self._on_sent)
        natural = calibrated_items(self.plan, prepared, self.store.state.calibration)
        return pin(self.plan, prepared, natural)

    def schedule(
        self, prepared: PreparedWorkload, calibration: int = 0
    ) -> list[tuple[Block, tuple[WorkItem, ...]]]:
        """Step 4: the schedule, less what the file already holds; sizes the progress
        (``calibration``: requests of the calibration pass still to send)."""
        parity = parity_prompts(self.plan, self.run.sources.tasks)
        schedule = build_schedule(self.plan, self.run.sources.prompts, parity, items=prepared.cells)
        self.blocks = list(schedule)  # issue 21: what each request was, for the forensics step
        work = pending(schedule, self.store.state)
        done = self.prog.done + calibration  # issue 23: the calibration pass
        self.prog.total = done + sum(_to_send(items) + len(b.warmup) for b, items in work)
        self.prog.remaining = sum(_to_send(items) for b, items in work if b.phase is Phase.measure)
        self.prog.kept = self.previous.kept
        return work

    def record_start(self, prepared: PreparedWorkload) -> None:
        """The ``run_start`` and ``workload`` records, then the first progress event."""
        now = _now()
        self.started_at = self.started_at or now
        self.recorder.start(
            self.plan, now, self.previous.resumed, self.run.sources, prepared, self.run.parity_set,
            dict(self.run.launched),
        )  # fmt: skip
        self.recorder.determinism(self.determinism)  # issue 21
        if self.previous.resumed:
            self.prog.set_phase("resume")  # the first event says what was kept and what is left
        else:
            self.prog.emit()

    def _on_sent(self, block: Block, sent: Sent) -> None:
        clean = redact_measurement(sent.measurement, self.run.secrets)
        if clean is not sent.measurement:
            sent = dataclasses.replace(sent, measurement=clean)
        self.recorder.sent(block, sent)
        self.prog.step(sent.measurement.error is not None)

    async def execute(
        self,
        work: list[tuple[Block, tuple[WorkItem, ...]]],
        counter: TokenCounter | None,
        prepared: PreparedWorkload | None = None,
    ) -> None:
        """Step 5: send every block; each finished request is recorded as it arrives.
        With ``[search]`` (issue 24), then the search's levels, one after another."""
        async with executor_for(
            self.plan, self.run.routes, self.gate, self.http, self.recorder.workers,
            counter=counter, on_cache=self.recorder.cache,
        ) as executor:  # fmt: skip
            for block, items in work:
                await self._send(executor, block, items)
            if self.plan.search is not None and prepared is not None:
                await _Search(self, executor, prepared).loop().run()
        self.prog.set_phase("done")

    async def _send(
        self, executor: BlockExecutor, block: Block, items: tuple[WorkItem, ...]
    ) -> None:
        self.prog.set_phase(block.title)
        delta = await executor.run_block(block, items, self._on_sent)
        off = {r.label for r in self.plan.routes if r.speculative.value == "off"}
        if delta is not None and block.route not in off:  # off scrapes for its cache
            self.recorder.window(block, delta)

    async def forensics(self) -> None:
        """Step 5b (issue 21): for every divergence, one follow-up request to ``off``
        only, with logprobs (:mod:`deepseekbench._execute._forensics`); each margin is
        recorded as it arrives. Nothing is sent when nothing diverged."""
        todo = follow_ups(self.plan, self.store.state, self.blocks)
        if not todo:
            return
        self.prog.set_phase("forensics")
        off = self.run.routes[self.plan.off_route.label]
        explained = await explain_divergences(
            todo, off=off, gate=self.gate, client=self.http, timeout_s=self.plan.timeout_s
        )
        for f, m in explained:
            self.recorder.margin(f, m)

    def finish(self) -> RunResult:
        """Step 6: the result, built once from the store's records, then its
        ``parity``, ``row`` and ``run_end`` records."""
        finished_at = _now()
        result = build_result(
            self.plan,
            self.store.state,
            results_path=self.run.path,
            resumed=self.previous.resumed,
            complete=True,
            parity_set=self.run.parity_set,
            meta=RunMeta.of(
                self.plan,
                self.run.plan_hash,
                started_at=self.started_at,
                finished_at=finished_at,
                library_version=_library_version(),
                integrity=self.store.integrity,
            ),
            retried=self.previous.retried,
            kept_measurements=self.prog.kept,
            remaining_measurements=self.prog.remaining,
            launched=self.run.launched,
            integrity=self.store.integrity,
        )
        self.recorder.finish(result, finished_at)
        return result


# issue 24: capacity under SLO -- the runner's side of the [search] loop
class _Search:
    """What :class:`~deepseekbench._execute._search.SearchLoop` needs from a run:
    probes rebuilt from the store, a level's blocks sent, probe records written."""

    def __init__(self, steps: _Steps, executor: BlockExecutor, prepared: PreparedWorkload) -> None:
        self.steps, self.executor, self.prepared = steps, executor, prepared

    def loop(self) -> SearchLoop:
        announced = tuple(self.steps.store.state.search_loads.values())
        return SearchLoop(self.steps.plan, self.observe, self.measure, self.record, announced)

    def observe(self) -> dict[str, list[Probe]]:
        s = self.steps
        result = build_result(
            s.plan, s.store.state, results_path=None, resumed=0, complete=False,
            parity_set=s.run.parity_set,
        )  # fmt: skip
        return route_probes(result.rows)

    async def measure(self, load: LoadPoint) -> None:
        s = self.steps
        arrival = s.plan.arrival.model_copy(
            update={"concurrency": load.concurrency}
            if load.rate_per_s is None
            else {"rate_per_s": load.rate_per_s}
        )
        at_level = s.plan.model_copy(update={"arrival": arrival})
        blocks = build_schedule(at_level, s.run.sources.prompts, [], items=self.prepared.cells)
        work = pending([b for b in blocks if b.phase is Phase.measure], s.store.state)
        s.prog.total += sum(_to_send(items) + len(b.warmup) for b, items in work)
        for block, items in work:
            await s._send(self.executor, block, items)

    def record(self, load: LoadPoint, probes: Mapping[str, Sequence[Probe]]) -> None:
        s = self.steps
        search = s.plan.effective_search
        assert search is not None
        for route in s.plan.routes:
            ps = sorted(probes.get(route.label, ()), key=lambda p: p.level)
            probe = next((p for p in ps if p.level == load.level), None)
            s.store.append(
                SearchProbeRecord(
                    **s.recorder.base,
                    route=route.label,
                    load=load.key,
                    arrival=load.arrival.value,
                    concurrency=load.concurrency,
                    rate_per_s=load.rate_per_s,
                    level=load.level,
                    slo_attainment=probe.attainment if probe else None,
                    n_requests=probe.n if probe else 0,
                    request_throughput_per_s=probe.throughput if probe else None,
                    passed=probe is not None and passed(probe, ps, search),
                )
            )


def _library_version() -> str:
    return __version__


async def run_plan(
    plan: BenchmarkPlan,
    *,
    gate: LiveGate,
    results_path: str | Path | None = None,
    progress: ProgressFn | None = None,
    client: httpx.AsyncClient | None = None,
    retry_errors: bool = True,
) -> RunResult:
    """Run ``plan``: parity set, then every route at every cell and load point in
    alternating rounds, then rows.

    Args:
        plan: the :class:`~deepseekbench.BenchmarkPlan`.
        gate: the :class:`~deepseekbench.LiveGate` every request passes; it is
            asked for every route before the first request, so a refused route
            stops the run before anything is sent.
        results_path: JSONL file to append to (default ``plan.results``; ``None``
            for neither keeps everything in memory only). An existing file with
            records of the same plan is resumed. The file is locked for the run:
            a second run on it is refused.
        progress: called after each finished request with a :class:`ProgressEvent`.
        client: a shared ``httpx.AsyncClient`` from ``gate.client()`` (one is made
            and closed here otherwise).
        retry_errors: on resume, measure again every request whose earlier
            measurement ended in an error (default); ``False`` keeps them
            (``RunResult.retried`` counts the ones retried).

    Returns:
        :class:`RunResult`: one row per route, cell and load point (and, with
        ``[search]``, per level the search measured; issue 24) (medians in ms,
        throughput in tokens/s and requests/s), every per-request measurement,
        and parity per route.

    Raises:
        RouteUnreachableError: with ``plan.probe_routes`` (the default), a route
            did not answer its probe, answered with an HTTP error, or does not
            serve its model (``deepseekbench._net._probe``; a ``PlanError``, raised
            before any measured request, nothing recorded).
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
        LiveGateError: the gate refuses a route, or ``client`` has a transport
            (default or mount) the gate does not wrap (before any request).
        ResultsFormatError: the results file exists but cannot be read back, or
            is not a regular file.
        ResultsInUseError: another run holds the results file (before any request).
        ResultsWriteError: a record could not be written (e.g. a full disk); the
            run stops, every record written before is kept.
        OSError: the results file or its folder cannot be created.
        ServerError: a launched route's engine (``[routes.launch]``) could not be
            started or did not serve its model in time (before any request); every
            engine launched is stopped however the run ends. A launch that would
            listen beyond loopback with the gate closed is a ``LiveGateError``, an
            unset ``launch.env_from`` variable a ``PlanError`` (nothing started).
    """
    checked = _preflight(plan, gate, client, results_path)
    async with launched_routes(launch_targets(plan), gate=gate) as launched:  # issue 24
        run = _with_launched(checked, launched, gate)
        return await _run(plan, gate, client, run, retry_errors, progress)


def _with_launched(run: _Checked, launched: Mapping[str, Launched], gate: LiveGate) -> _Checked:
    """``run`` with each launched route's real URL and its launch record; the gate is
    asked again for the launched URLs (loopback only).

    Raises:
        LiveGateError: the gate refuses a launched route's URL.
    """
    if not launched:
        return run
    routes = dict(run.routes)
    for label, server in launched.items():
        routes[label] = routes[label].model_copy(update={"base_url": server.base_url})
    _check_gate([routes[label] for label in launched], gate)
    records = {label: server.record for label, server in launched.items()}
    return dataclasses.replace(run, routes=routes, launched=records)


def launch_targets(plan: BenchmarkPlan) -> list[LaunchTarget]:
    """One :class:`~deepseekbench._launch._plan_launch.LaunchTarget` per route of
    ``plan`` with a ``launch`` table, in plan order."""
    return [
        LaunchTarget(r.label, r.launch, r.speculative.value, r.dialect.value, r.model or plan.model)
        for r in plan.routes
        if r.launch is not None
    ]


async def _run(
    plan: BenchmarkPlan,
    gate: LiveGate,
    client: httpx.AsyncClient | None,
    run: _Checked,
    retry_errors: bool,
    progress: ProgressFn | None,
) -> RunResult:
    """Steps 2 to 6 of :func:`run_plan`, on the routes preflight (and any launch) gave."""
    store, previous = _open_store(plan, run.path, retry_errors)
    own_client = client is None
    http = (
        client
        if client is not None
        else gate.client(
            timeout=httpx.Timeout(plan.timeout_s), limits=pool_limits(_in_flight(plan))
        )
    )
    steps = _Steps(plan, gate, http, run, store, previous, _Progress(progress, 0))
    try:
        counter, prepared = await steps.prepare()
        prepared, calibration = await steps.outputs(prepared, counter)  # issue 23
        steps.schedule(prepared, sum(_to_send(b.items) for b in calibration))  # sizes progress
        steps.record_start(prepared)
        prepared = await steps.calibrate(prepared, calibration, counter)
        work = steps.schedule(prepared)  # with the pinned lengths
        await steps.execute(work, counter, prepared)
        await steps.forensics()  # issue 21
        return steps.finish()
    except BaseExceptionGroup as group:
        # a failed write inside a task group: say so plainly, not as a group
        if store.error is not None and group.subgroup(ResultsWriteError) is not None:
            raise store.error from None
        raise
    finally:
        store.close()
        if own_client:
            with anyio.CancelScope(shield=True):
                await http.aclose()


def grid_text(plan: BenchmarkPlan) -> str:
    """The measurement grid in one line, e.g. ``3 routes × 1 cell × 3 load points
    (concurrency 1, 8, 32) × 3 rounds``."""
    loads = plan.load_points
    closed = loads[0].rate_per_s is None
    levels = ", ".join(f"{lp.level:g}" for lp in loads)
    what = f"concurrency {levels}" if closed else f"{levels} req/s, {loads[0].arrival.value}"

    def n(k: int, word: str) -> str:
        return f"{k} {word}{'' if k == 1 else 's'}"

    text = (
        f"{n(len(plan.routes), 'route')} × {n(len(plan.cells), 'cell')} × "
        f"{n(len(loads), 'load point')} ({what}) × {n(plan.rounds, 'round')}"
    )
    if plan.search is not None:  # issue 24: levels chosen as the run goes
        s = plan.search
        text += f", then [search] up to {n(s.max_probes, 'level')} ≤ {s.max_level:g}"
    return text


def dry_run(plan: BenchmarkPlan, *, gate: LiveGate) -> DryRunResult:
    """Validate ``plan`` and list the rows a run would write, without any connection.

    Every row (one per route, cell and load point) has no measurement
    (``n_requests`` 0) and parity ``unknown``; ``refusals`` says, per route,
    what the gate would refuse (from :meth:`LiveGate.refusal`, which consumes
    nothing and opens nothing); ``n_requests`` counts every request of the
    schedule (parity, warm-ups, measured); ``grid`` is :func:`grid_text`. Each
    launched route's argv and the names (never the values) of the variables its
    launch sets are in ``launch_commands`` / ``launch_env``; a launch that would
    listen beyond loopback with the gate closed is a refusal, one that cannot
    start (no engine program, an unset ``env_from`` variable) a warning.

    Raises:
        PlanError: as :meth:`~deepseekbench.BenchmarkPlan.validate_sources` (task,
            prompt or model-source file invalid, ``mtp`` on a model without MTP
            layers, no parity set), or a task id collides with a parity prompt id;
            :class:`~deepseekbench.RayAddressError` (a ``PlanError``): executor
            ``ray`` with ``ray_address = "auto"`` resolving to an address outside
            the grammar the gate judges.
    """
    sources = plan.validate_sources()
    items = None
    if sources.items is not None:
        for cell in plan.cells:
            check_bucket_bytes(cell.cell_id, cell.context_bucket, sources.items)
        items = {cell.cell_id: sources.items for cell in plan.cells}
    schedule = build_schedule(
        plan, sources.prompts, parity_prompts(plan, sources.tasks), items=items
    )
    refusals: dict[str, str | None] = {}
    for r in plan.routes:
        # A route with api_key_env will send its own Authorization header.
        err = gate.refusal(
            f"{r.base_url}/chat/completions", has_auth_header=r.api_key_env is not None
        )
        refusals[r.label] = str(err) if err is not None else None
    commands, launch_env, launch_warnings = _dry_launches(plan, gate, refusals)
    rows = tuple(
        Row(
            **row_identity(plan, cell, r, load),
            quality_parity=QualityParity.unknown,
            parity_detail="dry run: nothing measured"
            + (f"; gate would refuse: {refusals[r.label]}" if refusals[r.label] else ""),
        )
        for cell in plan.cells
        for load in plan.load_points
        for r in plan.routes
    )
    n = sum(_to_send(b.items) + len(b.warmup) for b in schedule)
    if plan.workload.output_length != "natural":  # issue 23: the calibration pass
        n += _calibration_requests(plan, items, sources.coverage)
    ray_address, ray_refusal = _dry_ray_address(plan, gate)
    cov = sources.coverage
    return DryRunResult(
        plan_hash=plan.plan_hash(),
        rows=rows,
        refusals=refusals,
        n_requests=n,
        grid=grid_text(plan),
        ray_address=ray_address,
        ray_refusal=ray_refusal,
        warnings=(
            *((cov.message(),) if cov is not None and not cov.complete else ()),
            *launch_warnings,
            *_counterless_routes(plan),
        ),
        launch_commands=commands,
        launch_env=launch_env,
    )


def reads_speculation(dialect: EngineDialect) -> bool:
    """Whether ``dialect`` reads any speculative counter: acceptance in stream chunks
    (its own ``read_acceptance``) or ``/metrics`` counter families."""
    return type(dialect).read_acceptance is not EngineDialect.read_acceptance or bool(
        dialect.counter_sets
    )


def _counterless_routes(plan: BenchmarkPlan) -> tuple[str, ...]:
    """One line per speculative route whose dialect reads no speculative counter at all
    (no acceptance in chunks, no ``/metrics`` families: ``openai``, ``deepseek``): its
    speed verdict will be refused (``speculative_counters_missing``)."""
    return tuple(
        f"route {r.label!r} (speculative={r.speculative.value}) speaks dialect "
        f"{r.dialect.value!r}, which reads no speculative counter (usage, per-request "
        "fields or /metrics): its speed verdict will be refused "
        "(speculative_counters_missing); use the engine's own dialect"
        for r in plan.speculative_routes
        if not reads_speculation(dialect_for(r.dialect))
    )


def _dry_launches(
    plan: BenchmarkPlan, gate: LiveGate, refusals: dict[str, str | None]
) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]], tuple[str, ...]]:
    """Per launched route, the argv and the names of the variables its launch would set;
    a launch that would listen beyond loopback with the gate closed goes into
    ``refusals``; one that could not start (no engine program, an unset ``env_from``
    variable) gives a warning. Nothing is started."""
    targets = launch_targets(plan)
    secrets = launch_secrets(targets, gate)
    commands: dict[str, tuple[str, ...]] = {}
    names: dict[str, tuple[str, ...]] = {}
    warned: list[str] = []
    for t in targets:
        names[t.name] = (*t.launch.env, *(f"{k}=${v}" for k, v in t.launch.env_from.items()))
        try:
            argv = launch_argv(t, PORT_PLACEHOLDER)
            commands[t.name] = tuple(redact(a, secrets) for a in shown_argv(argv))
            check_exposure(t, gate)
        except LiveGateError as exc:
            refusals[t.name] = str(exc)
        except (PlanError, ServerError) as exc:
            warned.append(f"route {t.name}: cannot launch: {redact(str(exc), secrets)}")
    return commands, names, tuple(warned)


def _calibration_requests(
    plan: BenchmarkPlan,
    items: Mapping[str, Sequence[WorkloadItem]] | None,
    coverage: WorkloadCoverage | None,
) -> int:
    """Requests of the calibration pass: per cell, every turn of each item sent
    (measured or warmed up) once."""

    def used(n: int) -> int:
        return items_used(
            n,
            requests_per_cell=plan.requests_per_cell,
            rounds=plan.rounds,
            warmup=plan.warmup_per_cell,
        )

    if items is None:  # synthetic: single-turn items, generated at run time
        return len(plan.cells) * used(coverage.n_items if coverage is not None else 1)
    return sum(
        len(i.turns)
        for c in plan.cells
        for i in list(items[c.cell_id])[: used(len(items[c.cell_id]))]
    )


def _dry_ray_address(plan: BenchmarkPlan, gate: LiveGate) -> tuple[str | None, str | None]:
    """The Ray cluster address a run would use (resolved) and the gate's refusal."""
    if plan.executor != "ray":
        return None, None
    from deepseekbench._errors import RayUnavailableError
    from deepseekbench._execute._ray_executor import ray_address_refusal

    try:
        resolved, err = ray_address_refusal(plan.ray_address, gate)
    except RayUnavailableError as exc:
        return plan.ray_address, str(exc)
    return resolved or "local", str(err) if err is not None else None
