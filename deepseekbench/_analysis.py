"""Analysis of a run's records: parity per route, one row per route and cell.

Pure functions of the records a run wrote (:class:`~deepseekbench._results.ResultsState`)
and its plan, so :func:`load_results` rebuilds exactly what
:func:`~deepseekbench.run_plan` returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from deepseekbench._acceptance import AcceptanceRecord
from deepseekbench._axes import AcceptanceScope, QualityParity, ReasoningMode, Speculative
from deepseekbench._breakdown import slice_stats, workload_fields
from deepseekbench._client_health import client_saturated, max_pool_wait_ms
from deepseekbench._errors import PlanError
from deepseekbench._measure import StreamMeasurement
from deepseekbench._parity import (
    DeterminismControl,
    ExactAcceptance,
    ParityOutput,
    ParityResult,
    baseline_parity,
    row_parity,
)
from deepseekbench._plan import BenchmarkPlan, CellPlan, RoutePlan
from deepseekbench._prepare import conversation_pid, parity_conversations
from deepseekbench._results import (
    ResultsFormatError,
    ResultsRun,
    ResultsState,
    read_stored_run,
)
from deepseekbench._row import Dispersion, Row
from deepseekbench._spec_fields import cell_spec_fields
from deepseekbench._stats import median, percentiles
from deepseekbench._tasks import Task, TaskParityResult, task_parity

__all__ = [
    "MeasuredRequest",
    "RouteParity",
    "RunResult",
    "build_result",
    "load_results",
    "load_results_and_runs",
    "parity_ids",
    "reasoning_modes",
    "row_identity",
]


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
    """One measured (not warm-up) request: route label, cell id, index in the cell,
    conversation turn (0-based; 0 for single-turn items), and the workload item's
    id and category when known."""

    route: str
    cell: str
    index: int
    measurement: StreamMeasurement
    turn: int = 0
    item: str | None = None
    category: str | None = None


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


def parity_ids(plan: BenchmarkPlan, tasks: Sequence[Task]) -> list[tuple[str, str, Task | None]]:
    """``(prompt_id, prompt, task)`` for every parity request, prompts first."""
    out: list[tuple[str, str, Task | None]] = [
        (f"prompt-{i + 1}", text, None) for i, text in enumerate(plan.parity.prompts)
    ]
    ids = {pid for pid, _, _ in out}
    for t in tasks:
        if t.id in ids:
            raise PlanError(f"task id {t.id!r} collides with a parity prompt id")
        out.append((t.id, t.prompt, t))
    for item in parity_conversations(plan):
        for k, turn in enumerate(item.turns):
            out.append((conversation_pid(item.id, k), turn, None))
    return out


def reasoning_modes(plan: BenchmarkPlan) -> list[ReasoningMode]:
    seen: list[ReasoningMode] = []
    for c in plan.cells:
        if c.reasoning_mode not in seen:
            seen.append(c.reasoning_mode)
    return seen


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
    plan: BenchmarkPlan, state: ResultsState, tasks: Sequence[Task]
) -> dict[tuple[str, ReasoningMode], RouteParity]:
    ids = parity_ids(plan, tasks)
    det_ids = [pid for pid, _, t in ids if t is None or plan.parity.task_temperature == 0]
    checker = ExactAcceptance()
    off = plan.off_route
    out: dict[tuple[str, ReasoningMode], RouteParity] = {}
    for mode in reasoning_modes(plan):

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


def row_identity(plan: BenchmarkPlan, cell: CellPlan, route: RoutePlan) -> dict[str, Any]:
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
    state: ResultsState,
    parity: Mapping[tuple[str, ReasoningMode], RouteParity],
) -> Row:
    keys = [
        k
        for k in state.measurements
        if k[0] == route.label and k[1] == cell.cell_id and k[2] < plan.requests_per_cell
    ]
    measured = [state.measurements[k] for k in keys]
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
        **row_identity(plan, cell, route),
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
        **cell_spec_fields(
            measured,
            state.server.get((route.label, cell.cell_id)),
            speculative=route.speculative is not Speculative.off,
            declared_spec_tokens=route.spec_tokens,
        ),
        **_workload_breakdown(state, keys, cell.request_max_tokens),
    )


def _workload_breakdown(
    state: ResultsState, keys: Sequence[tuple[str, str, int, int]], max_tokens: int
) -> dict[str, Any]:
    """Short-output flag, length percentiles and per-category / per-turn slices."""
    measured = [state.measurements[k] for k in keys]
    out = workload_fields([m for m in measured if m.error is None], max_tokens)
    by_cat: dict[str, list[StreamMeasurement]] = {}
    by_turn: dict[int, list[StreamMeasurement]] = {}
    for k, m in zip(keys, measured, strict=True):
        category = state.items.get(k, (None, None))[1]
        if category is not None:
            by_cat.setdefault(category, []).append(m)
        by_turn.setdefault(k[3], []).append(m)
    out["categories"] = tuple(
        slice_stats(name, ms, max_tokens=max_tokens) for name, ms in sorted(by_cat.items())
    )
    if len(by_turn) > 1:
        out["turns"] = tuple(
            slice_stats(f"turn {t + 1}", ms, max_tokens=max_tokens)
            for t, ms in sorted(by_turn.items())
        )
    return out


def build_result(
    plan: BenchmarkPlan,
    state: ResultsState,
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
        MeasuredRequest(
            route=k[0],
            cell=k[1],
            index=k[2],
            measurement=state.measurements[k],
            turn=k[3],
            item=state.items.get(k, (None, None))[0],
            category=state.items.get(k, (None, None))[1],
        )
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


def load_results(path: str | Path, *, plan_hash: str | None = None) -> RunResult:
    """Rebuild a :class:`RunResult` from a results file: the last plan run in it, or
    the run whose plan hash starts with ``plan_hash`` (see :func:`~deepseekbench.list_runs`).

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
    """:func:`load_results` and :func:`~deepseekbench.list_runs` from one read of the file.

    Raises:
        ResultsFormatError: as :func:`load_results`.
    """
    p = Path(path)
    stored = read_stored_run(p, plan_hash=plan_hash)
    try:
        result = build_result(
            stored.plan,
            stored.state,
            results_path=p,
            resumed=0,
            complete=stored.complete,
            tasks=stored.plan.tasks(),
        )
    except PlanError as exc:
        raise ResultsFormatError(f"{p}: {exc}") from exc
    return result, stored.runs
