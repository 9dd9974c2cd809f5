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

**Results file.** Every record is one JSON line with a ``"record"`` kind,
written and flushed as it arrives: ``run_start`` (the plan), ``measurement``
(one measured request, the full :class:`~deepseekbench.StreamMeasurement`),
``parity_output`` (one parity request's output), ``server_metrics`` (a
server-wide acceptance delta), then ``parity``, ``row`` and ``run_end``.
Records carry the plan's hash. A crash or Ctrl-C loses nothing already
written; a rerun with the same plan and file skips every measured request
(errored ones included) and every parity output that completed (errored parity
outputs are retried; the latest record of a key wins). Rows are a pure function
of the records, so :func:`load_results` rebuilds exactly what the run returned.
"""

from __future__ import annotations

import datetime as _dt
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import httpx
import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from deepseekbench._acceptance import AcceptanceRecord
from deepseekbench._axes import AcceptanceScope, QualityParity, ReasoningMode, Speculative
from deepseekbench._client_health import client_saturated, max_pool_wait_ms
from deepseekbench._errors import DeepseekBenchError, PlanError
from deepseekbench._gate import LiveGate
from deepseekbench._measure import StreamMeasurement, Timeouts, measure_streamed
from deepseekbench._parity import (
    DeterminismControl,
    ExactAcceptance,
    ParityOutput,
    ParityResult,
    baseline_parity,
    row_parity,
)
from deepseekbench._plan import BenchmarkPlan, CellPlan, RoutePlan
from deepseekbench._request import ChatRequest
from deepseekbench._route import EngineRoute
from deepseekbench._row import Dispersion, Row
from deepseekbench._selfcheck import SelfCheck
from deepseekbench._stats import median, percentiles
from deepseekbench._tasks import Task, TaskParityResult, task_parity
from deepseekbench._transport import pool_limits

__all__ = [
    "DryRunResult",
    "ProgressEvent",
    "ProgressFn",
    "ResultsFormatError",
    "ResultsRun",
    "RouteParity",
    "RunResult",
    "dry_run",
    "list_runs",
    "load_results",
    "run_plan",
]


class ResultsFormatError(DeepseekBenchError):
    """A results JSONL file cannot be read back (carries the 1-based ``line_number``)."""

    def __init__(self, message: str, *, line_number: int = 0) -> None:
        super().__init__(message)
        self.line_number = line_number


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


class RouteParity(BaseModel):
    """Parity of one route for one reasoning mode.

    ``exact`` / ``tasks`` are set on speculative routes; ``control`` on ``off``.
    ``parity`` and ``reason`` are what the route's rows carry.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    route: str
    speculative: Speculative
    reasoning_mode: ReasoningMode
    parity: QualityParity
    reason: str
    exact: ParityResult | None = None
    tasks: TaskParityResult | None = None
    control: DeterminismControl | None = None

    @property
    def first_divergence(self) -> str | None:
        """The first divergence described in one line, or ``None``."""
        if self.exact is not None and self.exact.first_divergence is not None:
            return self.exact.first_divergence.describe("off", self.route)
        if self.control is not None and self.control.divergences:
            return "off vs off: " + self.control.divergences[0].describe("run 1", "run 2")
        return None

    @property
    def task_flips(self) -> tuple[str, ...]:
        """Every pass → fail task flip described in one line."""
        if self.tasks is None:
            return ()
        return tuple(f.describe("off", self.route) for f in self.tasks.flips)


@dataclass(frozen=True, slots=True)
class MeasuredRequest:
    """One measured (not warm-up) request: route label, cell id, index in the cell."""

    route: str
    cell: str
    index: int
    measurement: StreamMeasurement


@dataclass(slots=True)
class RunResult:
    """What a run measured.

    Attributes:
        plan: the plan run. plan_hash: its digest.
        rows: one :class:`Row` per route and cell (plan order).
        measurements: every measured request, in completion order.
        parity: :class:`RouteParity` per ``(route label, reasoning mode)``.
        results_path: the JSONL file, when one was written.
        resumed: measured requests and parity outputs taken from an earlier run's file.
        complete: False when the run stopped before every request was made.
    """

    plan: BenchmarkPlan
    plan_hash: str
    rows: tuple[Row, ...]
    measurements: tuple[MeasuredRequest, ...]
    parity: dict[tuple[str, ReasoningMode], RouteParity]
    results_path: Path | None = None
    resumed: int = 0
    complete: bool = True
    row_cells: tuple[tuple[str, str], ...] = field(default=())

    @property
    def n_errors(self) -> int:
        """Measured requests that ended in an error."""
        return sum(m.measurement.error is not None for m in self.measurements)

    def samples(self, route: str, cell: str, metric: str = "tpot_ms") -> list[float]:
        """Per-request values of ``metric`` (e.g. ``tpot_ms``, ms) for a route and cell,
        successful requests only.

        Raises:
            AttributeError: ``metric`` names no :class:`~deepseekbench.StreamMeasurement`
                field (only noticed when a matching successful request exists).
        """
        out: list[float] = []
        for m in self.measurements:
            if m.route == route and m.cell == cell and m.measurement.error is None:
                v = getattr(m.measurement, metric)
                if v is not None:
                    out.append(float(v))
        return out

    def scorecard(self) -> Any:
        """The :class:`~deepseekbench.Scorecard` of this run (with bootstrap intervals)."""
        from deepseekbench._scorecard import Scorecard

        return Scorecard.from_run(self)


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


def _parity_ids(plan: BenchmarkPlan, tasks: Sequence[Task]) -> list[tuple[str, str, Task | None]]:
    """``(prompt_id, prompt, task)`` for every parity request, prompts first."""
    out: list[tuple[str, str, Task | None]] = [
        (f"prompt-{i + 1}", text, None) for i, text in enumerate(plan.parity.prompts)
    ]
    ids = {pid for pid, _, _ in out}
    for t in tasks:
        if t.id in ids:
            raise PlanError(f"task id {t.id!r} collides with a parity prompt id")
        out.append((t.id, t.prompt, t))
    return out


def _reasoning_modes(plan: BenchmarkPlan) -> list[ReasoningMode]:
    seen: list[ReasoningMode] = []
    for c in plan.cells:
        if c.reasoning_mode not in seen:
            seen.append(c.reasoning_mode)
    return seen


def _parity_request(
    plan: BenchmarkPlan, prompt: str, task: Task | None, mode: ReasoningMode
) -> ChatRequest:
    temperature = plan.parity.task_temperature if task is not None else 0.0
    max_tokens = (task.max_tokens if task is not None else None) or plan.parity.max_tokens
    return ChatRequest(
        messages=({"role": "user", "content": prompt},),
        max_tokens=max_tokens,
        temperature=temperature,
        seed=plan.parity.seed,
        reasoning_mode=mode,
    )


def _measure_request(plan: BenchmarkPlan, cell: CellPlan, prompt: str) -> ChatRequest:
    return ChatRequest(
        messages=({"role": "user", "content": prompt},),
        max_tokens=cell.request_max_tokens,
        temperature=plan.temperature,
        seed=plan.seed,
        reasoning_mode=cell.reasoning_mode,
    )


class _Writer:
    """Appends JSON records, one a line, flushed after each."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fh: IO[bytes] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = path.open("a+b")
            # drop a torn final line (a crash mid-write): it was never a record
            self._fh.seek(0, 2)
            size = self._fh.tell()
            if size:
                self._fh.seek(max(0, size - 65536))
                tail = self._fh.read()
                if not tail.endswith(b"\n"):
                    cut = tail.rfind(b"\n")
                    keep = size - len(tail) + cut + 1 if cut >= 0 else (0 if size <= 65536 else -1)
                    if keep >= 0:
                        self._fh.truncate(keep)
            self._fh.seek(0, 2)

    def write(self, record: Mapping[str, Any]) -> None:
        if self._fh is not None:
            self._fh.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a results file; a torn last line (crash mid-write) is ignored.

    Raises:
        ResultsFormatError: a line other than the last is not a JSON object.
    """
    records: list[dict[str, Any]] = []
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultsFormatError(f"cannot read results file {path}: {exc}") from exc
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if number == len(lines):  # torn final line: the crash came mid-write
                continue
            raise ResultsFormatError(
                f"{path}: line {number} is not JSON", line_number=number
            ) from exc
        if not isinstance(obj, dict) or "record" not in obj:
            raise ResultsFormatError(
                f"{path}: line {number} is not a results record", line_number=number
            )
        records.append(obj)
    return records


@dataclass(slots=True)
class _State:
    """Records of one plan, indexed for resume and row building."""

    measurements: dict[tuple[str, str, int], StreamMeasurement] = field(default_factory=dict)
    order: list[tuple[str, str, int]] = field(default_factory=list)
    outputs: dict[tuple[str, str, int, str], ParityOutput] = field(default_factory=dict)
    server: dict[tuple[str, str], AcceptanceRecord] = field(default_factory=dict)

    def add(self, rec: Mapping[str, Any]) -> None:
        kind = rec.get("record")
        if kind == "measurement":
            key = (str(rec["route"]), str(rec["cell"]), int(rec["index"]))
            if key not in self.measurements:
                self.order.append(key)
            self.measurements[key] = StreamMeasurement.model_validate(rec["measurement"])
        elif kind == "parity_output":
            pkey = (
                str(rec["route"]),
                str(rec["reasoning_mode"]),
                int(rec["pass"]),
                str(rec["prompt_id"]),
            )
            self.outputs[pkey] = ParityOutput.model_validate(rec["output"])
        elif kind == "server_metrics":
            self.server[(str(rec["route"]), str(rec["cell"]))] = AcceptanceRecord.model_validate(
                rec["acceptance"]
            )


def _state_from(records: Iterable[Mapping[str, Any]], plan_hash: str, path: Path) -> _State:
    state = _State()
    for number, rec in enumerate(records, start=1):
        if rec.get("plan_hash") != plan_hash:
            continue
        try:
            state.add(rec)
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise ResultsFormatError(
                f"{path}: record {number} ({rec.get('record')!r}) is malformed: {exc}",
                line_number=0,
            ) from exc
    return state


# --------------------------------------------------------------- building --


def _sum_known(values: Iterable[int | None]) -> int | None:
    vals = list(values)
    if not vals or any(v is None for v in vals):
        return None
    return sum(v for v in vals if v is not None)


def _window_steps(server: AcceptanceRecord | None, drafted: int, accepted: int) -> int | None:
    """The server-wide verify steps when that record covers exactly these sums, else None."""
    if server is None or not server.verify_steps:
        return None
    if server.draft_tokens != drafted or server.accepted_tokens != accepted:
        return None
    return server.verify_steps


def _acceptance(
    ok: Sequence[StreamMeasurement], server: AcceptanceRecord | None
) -> tuple[float | None, float | None, AcceptanceScope | None, int | None, int | None]:
    """``(ratio, length, scope, drafted, accepted)`` for a route's cell."""
    with_counts = [m for m in ok if m.draft_tokens is not None and m.accepted_tokens is not None]
    if with_counts:
        drafted = sum(m.draft_tokens or 0 for m in with_counts)
        accepted = sum(m.accepted_tokens or 0 for m in with_counts)
        ratio = accepted / drafted if drafted > 0 and accepted <= drafted else None
        steps = _sum_known(
            m.acceptance.verify_steps if m.acceptance is not None else None for m in with_counts
        )
        length: float | None
        if steps is not None and steps > 0:
            length = 1.0 + accepted / steps
        else:
            length = median(m.acceptance_length for m in with_counts)
        window_steps = _window_steps(server, drafted, accepted)
        if length is None and window_steps is not None:
            # llama.cpp reports no per-request verify steps; its counters do. When the
            # counter delta over the measurement window holds exactly the per-request
            # drafted/accepted sums, its step count belongs to those same requests.
            length = 1.0 + accepted / window_steps
        return ratio, length, AcceptanceScope.per_request, drafted, accepted
    lengths = [m.acceptance_length for m in ok if m.acceptance_length is not None]
    ratios = [m.accepted_token_ratio for m in ok if m.accepted_token_ratio is not None]
    if lengths or ratios:
        return median(ratios), median(lengths), AcceptanceScope.per_request, None, None
    if server is not None and server.known:
        return (
            server.accepted_token_ratio,
            server.acceptance_length,
            AcceptanceScope.server_wide,
            server.draft_tokens,
            server.accepted_tokens,
        )
    return None, None, None, None, None


def _build_parity(
    plan: BenchmarkPlan, state: _State, tasks: Sequence[Task]
) -> dict[tuple[str, ReasoningMode], RouteParity]:
    ids = _parity_ids(plan, tasks)
    det_ids = [pid for pid, _, t in ids if t is None or plan.parity.task_temperature == 0]
    checker = ExactAcceptance()
    off = plan.off_route
    out: dict[tuple[str, ReasoningMode], RouteParity] = {}
    for mode in _reasoning_modes(plan):

        def outputs(label: str, run: int, mode: ReasoningMode = mode) -> dict[str, ParityOutput]:
            return {
                pid: o
                for pid, _, _ in ids
                if (o := state.outputs.get((label, mode.value, run, pid))) is not None
            }

        base = outputs(off.label, 1)
        control: DeterminismControl | None = None
        if plan.parity.determinism_control:
            control = checker.control(base, outputs(off.label, 2), det_ids)
        p, reason = baseline_parity(base, control, det_ids)
        out[(off.label, mode)] = RouteParity(
            route=off.label,
            speculative=off.speculative,
            reasoning_mode=mode,
            parity=p,
            reason=reason,
            control=control,
        )
        for route in plan.speculative_routes:
            cand = outputs(route.label, 1)
            exact = checker.compare(base, cand, control=control, prompt_ids=det_ids)
            tp: TaskParityResult | None = None
            if tasks:
                tp = task_parity(
                    tasks,
                    base,
                    cand,
                    mode=plan.parity.task_mode,
                    tolerance=plan.parity.tolerance,
                    alpha=plan.parity.alpha,
                )
            p, reason = row_parity(exact, tp)
            out[(route.label, mode)] = RouteParity(
                route=route.label,
                speculative=route.speculative,
                reasoning_mode=mode,
                parity=p,
                reason=reason,
                exact=exact,
                tasks=tp,
            )
    return out


def _row_identity(plan: BenchmarkPlan, cell: CellPlan, route: RoutePlan) -> dict[str, Any]:
    """The key axes (and route label) of the row for ``route`` in ``cell``."""
    return {
        "model_id": plan.model,
        "provider_route": plan.provider_route,
        "engine_route": plan.engine_route,
        "hosting": plan.hosting,
        "context_bucket": cell.context_bucket,
        "output_target": cell.output_target,
        "reasoning_mode": cell.reasoning_mode,
        "stream": True,
        "speculative": route.speculative,
        "route_label": route.label,
    }


def _build_row(
    plan: BenchmarkPlan,
    route: RoutePlan,
    cell: CellPlan,
    state: _State,
    parity: Mapping[tuple[str, ReasoningMode], RouteParity],
) -> Row:
    measured = [
        m
        for (label, cid, i), m in state.measurements.items()
        if label == route.label and cid == cell.cell_id and i < plan.requests_per_cell
    ]
    ok = [m for m in measured if m.error is None]
    rp = parity.get((route.label, cell.reasoning_mode))
    ratio = length = None
    scope: AcceptanceScope | None = None
    drafted = accepted = None
    if route.speculative is not Speculative.off:
        ratio, length, scope, drafted, accepted = _acceptance(
            ok, state.server.get((route.label, cell.cell_id))
        )
    itl: list[float] = [x for m in ok for x in m.itl_ms]
    return Row(
        **_row_identity(plan, cell, route),
        ttft_ms=median(m.ttft_ms for m in ok),
        tpot_ms=median(m.tpot_ms for m in ok),
        e2e_ms=median(m.e2e_ms for m in ok),
        output_toks_per_s=median(m.output_toks_per_s for m in ok),
        accepted_token_ratio=ratio,
        acceptance_length=length,
        acceptance_scope=scope,
        draft_tokens=drafted,
        accepted_tokens=accepted,
        tokens_estimated=any(m.tokens_estimated for m in ok),
        quality_parity=rp.parity if rp is not None else QualityParity.unknown,
        parity_detail=rp.reason if rp is not None else "parity not run",
        n_requests=len(measured),
        n_errors=len(measured) - len(ok),
        client_saturated=client_saturated(measured, plan.client_lag_threshold_ms),
        client_pool_wait_ms=max_pool_wait_ms(measured),
        dispersion=Dispersion(
            ttft_ms=percentiles(m.ttft_ms for m in ok),
            tpot_ms=percentiles(m.tpot_ms for m in ok),
            e2e_ms=percentiles(m.e2e_ms for m in ok),
            itl_ms=percentiles(itl),
            output_toks_per_s=percentiles(m.output_toks_per_s for m in ok),
        ),
    )


def _build_result(
    plan: BenchmarkPlan,
    state: _State,
    *,
    results_path: Path | None,
    resumed: int,
    complete: bool,
    tasks: Sequence[Task],
) -> RunResult:
    parity = _build_parity(plan, state, tasks)
    rows: list[Row] = []
    cells: list[tuple[str, str]] = []
    for route in plan.routes:
        for cell in plan.cells:
            rows.append(_build_row(plan, route, cell, state, parity))
            cells.append((route.label, cell.cell_id))
    measurements = tuple(
        MeasuredRequest(route=k[0], cell=k[1], index=k[2], measurement=state.measurements[k])
        for k in state.order
    )
    return RunResult(
        plan=plan,
        plan_hash=plan.plan_hash(),
        rows=tuple(rows),
        measurements=measurements,
        parity=parity,
        results_path=results_path,
        resumed=resumed,
        complete=complete,
        row_cells=tuple(cells),
    )


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
            id, or an API-key variable is unset (all before any request).
        pydantic.ValidationError: a route's ``request_extras`` sets ``model``,
            ``messages`` or ``stream`` (from
            :meth:`~deepseekbench.RoutePlan.engine_route`, before any request).
        LiveGateError: the gate refuses a route (before any request).
        ResultsFormatError: the results file exists but cannot be read back.
        OSError: the results file or its folder cannot be created or written.
    """
    sources = plan.validate_sources()
    capability, tasks, prompts = sources.capability, sources.tasks, sources.prompts
    pids = _parity_ids(plan, tasks)
    routes: dict[str, EngineRoute] = {r.label: r.engine_route(plan.model) for r in plan.routes}
    _check_gate(routes.values(), gate)
    path = Path(results_path) if results_path is not None else plan.results_path()
    plan_hash = plan.plan_hash()
    state = _State()
    if path is not None and path.exists():
        state = _state_from(_read_records(path), plan_hash, path)
    resumed = len(state.measurements) + sum(1 for o in state.outputs.values() if o.complete)
    modes = _reasoning_modes(plan)
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

    def measure_todo(label: str, cell: CellPlan) -> list[int]:
        return [
            i
            for i in range(plan.requests_per_cell)
            if (label, cell.cell_id, i) not in state.measurements
        ]

    total = 0
    for r in plan.routes:
        for mode in modes:
            for run in range(1, passes.get(r.label, 1) + 1):
                total += len(parity_todo(r.label, mode, run))
        for cell in plan.cells:
            todo = measure_todo(r.label, cell)
            total += len(todo) + (plan.warmup_per_cell if todo else 0)
    prog = _Progress(progress, total)
    writer = _Writer(path)
    run_id = uuid.uuid4().hex[:12]
    timeouts = Timeouts(total_s=plan.timeout_s)
    base = {"plan_hash": plan_hash}
    own_client = client is None
    pool = pool_limits(max(plan.arrival.concurrency, plan.parity.concurrency))
    timeout = httpx.Timeout(plan.timeout_s)
    http = client if client is not None else gate.client(timeout=timeout, limits=pool)
    check = SelfCheck()  # the client's own event-loop lag, per request (client_saturated)
    try:
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

        async def one(route: EngineRoute, req: ChatRequest) -> StreamMeasurement:
            return await measure_streamed(
                req, route=route, gate=gate, client=http, timeouts=timeouts
            )

        async def parity_pass(label: str, mode: ReasoningMode, run: int) -> None:
            todo = parity_todo(label, mode, run)
            if not todo:
                return
            prog.set_phase(f"parity {label} {mode.value} run {run}")
            limiter = anyio.CapacityLimiter(plan.parity.concurrency)

            async def do(pid: str, text: str, task: Task | None) -> None:
                async with limiter:
                    m = await one(routes[label], _parity_request(plan, text, task, mode))
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

            async with anyio.create_task_group() as tg:
                for pid, text, t in todo:
                    tg.start_soon(do, pid, text, t)

        async def cell_phase(rp: RoutePlan, cell: CellPlan, salt: int) -> None:
            todo = measure_todo(rp.label, cell)
            if not todo:
                return
            route = routes[rp.label]
            prog.set_phase(f"measure {rp.label} {cell.cell_id}")
            limiter = anyio.CapacityLimiter(plan.arrival.concurrency)

            async def warm(i: int) -> None:
                async with limiter:
                    m = await one(route, _measure_request(plan, cell, prompts[i % len(prompts)]))
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
                async with limiter:
                    m = await one(route, _measure_request(plan, cell, prompts[i % len(prompts)]))
                key = (rp.label, cell.cell_id, i)
                state.measurements[key] = m
                state.order.append(key)
                writer.write(
                    {
                        "record": "measurement",
                        **base,
                        "route": rp.label,
                        "speculative": rp.speculative.value,
                        "cell": cell.cell_id,
                        "index": i,
                        "measurement": m.model_dump(mode="json"),
                    }
                )
                prog.step(m.error is not None)

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
        result = _build_result(
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


@dataclass(frozen=True, slots=True)
class ResultsRun:
    """One plan run in a results file (all its ``run_start`` records share ``plan_hash``).

    ``started_at``: the first ``run_start``'s time (ISO 8601, UTC); ``resumes``:
    how many later ``run_start`` records resumed it.
    """

    plan_hash: str
    started_at: str
    resumes: int


def _runs(starts: Sequence[Mapping[str, Any]]) -> tuple[ResultsRun, ...]:
    first: dict[str, Mapping[str, Any]] = {}
    count: dict[str, int] = {}
    order: list[str] = []
    for rec in starts:
        h = str(rec.get("plan_hash", ""))
        first.setdefault(h, rec)
        count[h] = count.get(h, 0) + 1
        if h in order:
            order.remove(h)
        order.append(h)
    return tuple(
        ResultsRun(
            plan_hash=h, started_at=str(first[h].get("started_at", "?")), resumes=count[h] - 1
        )
        for h in order
    )


def list_runs(path: str | Path) -> tuple[ResultsRun, ...]:
    """The plan runs in a results file, ordered by their latest ``run_start``.

    The last one is what :func:`load_results` reads by default. A file holds
    several runs when it was reused with a different plan (a rerun resumes only
    an identical plan: same :meth:`~deepseekbench.BenchmarkPlan.plan_hash`).

    Raises:
        ResultsFormatError: the file is unreadable or a record is malformed.
    """
    return _runs([r for r in _read_records(Path(path)) if r.get("record") == "run_start"])


def load_results(path: str | Path, *, plan_hash: str | None = None) -> RunResult:
    """Rebuild a :class:`RunResult` from a results file: the last plan run in it, or
    the run whose plan hash starts with ``plan_hash`` (see :func:`list_runs`).

    Rows are rebuilt from the per-request records exactly as :func:`run_plan`
    built them, so a report equals the run's own; an unfinished run gives rows
    of what was measured (``complete`` False).

    Raises:
        ResultsFormatError: the file is unreadable, has no ``run_start`` record,
            a record is malformed, or ``plan_hash`` matches no run or several.
    """
    return load_results_and_runs(path, plan_hash=plan_hash)[0]


def load_results_and_runs(
    path: str | Path, *, plan_hash: str | None = None
) -> tuple[RunResult, tuple[ResultsRun, ...]]:
    """:func:`load_results` and :func:`list_runs` from one read of the file.

    Raises:
        ResultsFormatError: as :func:`load_results`.
    """
    p = Path(path)
    records = _read_records(p)
    starts = [r for r in records if r.get("record") == "run_start"]
    if not starts:
        raise ResultsFormatError(f"{p}: no run_start record (not a deepseekbench results file?)")
    runs = _runs(starts)
    if plan_hash is not None:
        hashes = [r.plan_hash for r in runs if r.plan_hash.startswith(plan_hash)]
        if len(hashes) != 1:
            problem = "matches no run" if not hashes else "is ambiguous"
            listing = ", ".join(f"{r.plan_hash} (started {r.started_at})" for r in runs)
            raise ResultsFormatError(f"{p}: plan hash {plan_hash!r} {problem}; runs: {listing}")
        starts = [r for r in starts if r.get("plan_hash") == hashes[0]]
    try:
        plan = BenchmarkPlan.model_validate(starts[-1]["plan"])
    except (KeyError, ValidationError) as exc:
        raise ResultsFormatError(f"{p}: the run_start record has no valid plan: {exc}") from exc
    plan_hash = plan.plan_hash()
    state = _state_from(records, plan_hash, p)
    complete = any(
        r.get("record") == "run_end" and r.get("plan_hash") == plan_hash for r in records
    )
    try:
        result = _build_result(
            plan, state, results_path=p, resumed=0, complete=complete, tasks=plan.tasks()
        )
    except PlanError as exc:
        raise ResultsFormatError(f"{p}: {exc}") from exc
    return result, runs


def dry_run(plan: BenchmarkPlan, *, gate: LiveGate) -> DryRunResult:
    """Validate ``plan`` and list the rows a run would write, without any connection.

    Every row has no measurement (``n_requests`` 0) and parity ``unknown``;
    ``refusals`` says, per route, what the gate would refuse (from
    :meth:`LiveGate.refusal`, which consumes nothing and opens nothing).

    Raises:
        PlanError: as :meth:`~deepseekbench.BenchmarkPlan.validate_sources` (task,
            prompt or model-source file invalid, ``mtp`` on a model without MTP
            layers, no parity set), or a task id collides with a parity prompt id.
    """
    tasks = plan.validate_sources().tasks
    refusals: dict[str, str | None] = {}
    for r in plan.routes:
        # A route with api_key_env will send its own Authorization header.
        err = gate.refusal(
            f"{r.base_url}/chat/completions", has_auth_header=r.api_key_env is not None
        )
        refusals[r.label] = str(err) if err is not None else None
    rows = tuple(
        Row(
            **_row_identity(plan, cell, r),
            quality_parity=QualityParity.unknown,
            parity_detail="dry run: nothing measured"
            + (f"; gate would refuse: {refusals[r.label]}" if refusals[r.label] else ""),
        )
        for r in plan.routes
        for cell in plan.cells
    )
    n_parity = len(_parity_ids(plan, tasks)) * len(_reasoning_modes(plan))
    n = len(plan.routes) * len(plan.cells) * (
        plan.requests_per_cell + plan.warmup_per_cell
    ) + n_parity * (len(plan.routes) + (1 if plan.parity.determinism_control else 0))
    return DryRunResult(plan_hash=plan.plan_hash(), rows=rows, refusals=refusals, n_requests=n)
