"""Analysis of a run's records (pure): parity, one row per route, cell and load point.

Functions of the records a run wrote (:class:`~deepseekbench._store._results.ResultsState`)
and its plan, so :func:`load_results` rebuilds exactly what
:func:`~deepseekbench.run_plan` returned.

Parity of a row joins two checks. The **parity set** (per route and reasoning
mode): exact acceptance and task parity against ``off``
(:mod:`deepseekbench._types._parity`, :mod:`deepseekbench._plan._tasks`). The **measured
traffic** (per cell and load point, at temperature 0): each measured request's
output against the ``off`` route's output of the same request index (same
prompt, cell, load point and round); the ``off`` route's own rounds, which
repeat the same prompts, are its determinism control. A divergence under load
makes the row ``differs`` even when the parity set passed
(:mod:`deepseekbench._analysis._traffic`). Above temperature 0 rows rely on the parity
set's task parity, and say so.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from deepseekbench._analysis._breakdown import slice_stats, workload_fields
from deepseekbench._analysis._clock_witness import server_clock_fields
from deepseekbench._analysis._determinism_rows import determinism_fields
from deepseekbench._analysis._noise_rows import (
    RowDivergences,
    judge_off,
    judge_speculative,
    noise_floor,
)
from deepseekbench._analysis._output_length import short_of_natural, tokens_past_eos
from deepseekbench._analysis._route_identity import judge_route_identity, route_evidence
from deepseekbench._analysis._rowstats import (
    WINDOW_METRICS,
    RowRequests,
    acceptance,
    combine_windows,
)
from deepseekbench._analysis._spec_fields import cell_spec_fields
from deepseekbench._analysis._stats import percentiles
from deepseekbench._analysis._traffic import Indexed, traffic_control, traffic_parity
from deepseekbench._errors import PlanError
from deepseekbench._measure._client_clock import client_clock_fields
from deepseekbench._measure._client_health import client_saturated, max_pool_wait_ms
from deepseekbench._measure._measure import StreamMeasurement, is_unsent
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._routes import CellPlan, RoutePlan
from deepseekbench._plan._schedule import reasoning_modes
from deepseekbench._plan._tasks import TaskParityResult, task_parity
from deepseekbench._store._chain import ResultsIntegrity, ResultsIntegrityWarning
from deepseekbench._store._records import ParityEntry, parity_entries
from deepseekbench._store._results import (
    MeasureInfo,
    ResultsFormatError,
    ResultsRun,
    ResultsState,
    read_stored_run,
)
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import QualityParity, ReasoningMode, Speculative
from deepseekbench._types._cache import combine_cache_windows
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._parity import (
    DeterminismControl,
    ExactAcceptance,
    ParityOutput,
    ParityResult,
    baseline_parity,
    row_parity,
)
from deepseekbench._types._row import Dispersion, Row

__all__ = [
    "ErrorSummary",
    "MeasuredRequest",
    "RouteParity",
    "RunMeta",
    "RunResult",
    "build_result",
    "load_results",
    "load_results_and_runs",
    "row_identity",
]

RowKey = tuple[str, str, str]
"""``(route label, cell id, load key)`` of a row."""


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
    """One measured (not warm-up) request.

    Attributes:
        route: route label. cell: cell id. index: its index in the (route, cell,
            load point). measurement: what was measured.
        load: the load point's key (``None`` in files written before load sweeps).
        round: the round it ran in (0-based).
        queue_ms: open loop: actual send − scheduled send (ms); ``None`` closed loop.
        run_id: the run (process) that measured it.
        turn: the conversation turn (0-based; 0 for single-turn items).
        item, category: the workload item's id and dataset category, when known.
    """

    route: str
    cell: str
    index: int
    measurement: StreamMeasurement
    load: str | None = None
    round: int = 0
    queue_ms: float | None = None
    run_id: str = ""
    turn: int = 0
    item: str | None = None
    category: str | None = None


class RunMeta(BaseModel):
    """What a report says about the run it shows: the model, the plan's hash, when
    the run started (ISO 8601, UTC; ``None`` when unknown) and finished (``None``:
    unfinished or unknown), the deepseekbench version that wrote it (``None`` in
    older files) and, per route label, the engine it measured (the plan's
    ``engine_route`` and the route's ``dialect``; engine versions are not known
    to the run and are not claimed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    plan_hash: str
    started_at: str | None = None
    finished_at: str | None = None
    library_version: str | None = None
    engines: dict[str, str] = {}
    results_integrity: str | None = None
    """What reading the results file found, in one line (``None``: a verified
    file, or no file): "TAMPERED results file ..." or "unverified file (no digest
    chain)" (:meth:`~deepseekbench._store._chain.ResultsIntegrity.describe`)."""

    @classmethod
    def of(
        cls,
        plan: BenchmarkPlan,
        plan_hash: str,
        *,
        started_at: str | None,
        finished_at: str | None = None,
        library_version: str | None = None,
        integrity: ResultsIntegrity | None = None,
    ) -> RunMeta:
        """The metadata of a run of ``plan`` (engines from its routes; ``integrity``:
        what reading its results file found)."""
        engines = {r.label: f"{plan.engine_route} ({r.dialect.value})" for r in plan.routes}
        return cls(
            model=plan.model,
            plan_hash=plan_hash,
            started_at=started_at,
            finished_at=finished_at,
            library_version=library_version,
            engines=engines,
            results_integrity=integrity.describe() if integrity is not None else None,
        )

    def describe(self) -> str:
        """One line: ``model M, plan H, started S, deepseekbench V; engines: ...``."""
        engines = ", ".join(f"{k}={v}" for k, v in self.engines.items())
        return (
            f"model {self.model}, plan {self.plan_hash}, started {self.started_at or '?'}"
            f"{', finished ' + self.finished_at if self.finished_at else ''}, deepseekbench "
            f"{self.library_version or '?'}; engines: {engines}"
        )


@dataclass(frozen=True, slots=True)
class ErrorSummary:
    """Measured requests of one route that ended in one error kind: how many, and
    the first one's message (see :meth:`RunResult.error_summary`)."""

    route: str
    kind: str
    count: int
    first_message: str


_REQUEST_COLUMNS = (
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "output_toks_per_s",
    "completion_tokens",
    "tokens_estimated",
    "draft_tokens",
    "accepted_tokens",
    "accepted_token_ratio",
    "acceptance_length",
    "finish_reason",
)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run measured (built once by :func:`build_result`, then never changed).

    Attributes:
        plan: the plan run. plan_hash: its digest.
        rows: one :class:`Row` per route, cell and load point (plan order: cells,
            then load points, then routes).
        measurements: every measured request, in completion order.
        parity: :class:`RouteParity` (the parity set) per ``(route label, reasoning mode)``.
        results_path: the JSONL file, when one was written.
        resumed: measured requests, parity outputs and calibration outputs (issue 23)
            taken from an earlier run's file.
        complete: False when the run stopped before every request was made.
        retried: errored measurements of an earlier run measured again on resume.
        kept_measurements: measured requests (turns) kept from the results file when
            the run started (0 for a fresh run).
        remaining_measurements: measured requests (turns) the run still had to make
            when it started, after the kept ones (warm-ups and parity not counted).
        row_keys: ``(route label, cell id, load key)`` of each row, in row order.
        traffic: exact comparison of each speculative row's measured outputs with
            ``off``'s, by row key (temperature 0 only).
        meta: the run's metadata (model, plan hash, dates, engines) that exports carry.
        integrity: what reading the results file found (its digest chain, duplicated
            measurement records, records of no run); ``None`` without a file.
    """

    plan: BenchmarkPlan
    plan_hash: str
    rows: tuple[Row, ...]
    measurements: tuple[MeasuredRequest, ...]
    parity: dict[tuple[str, ReasoningMode], RouteParity]
    results_path: Path | None = None
    resumed: int = 0
    complete: bool = True
    row_keys: tuple[RowKey, ...] = field(default=())
    traffic: dict[RowKey, ParityResult] = field(default_factory=dict)
    retried: int = 0
    kept_measurements: int = 0
    remaining_measurements: int = 0
    meta: RunMeta | None = None
    integrity: ResultsIntegrity | None = None

    @property
    def results_tampered(self) -> bool:
        """True when the results file was edited after it was written: no speedup
        is credited from this result (``results_tampered``)."""
        return self.integrity is not None and self.integrity.tampered

    @property
    def n_errors(self) -> int:
        """Measured requests that ended in an error."""
        return sum(m.measurement.error is not None for m in self.measurements)

    def __repr__(self) -> str:
        routes = ", ".join(r.label for r in self.plan.routes)
        return (
            f"RunResult(plan_hash={self.plan_hash!r}, routes=[{routes}], "
            f"rows={len(self.rows)}, measurements={len(self.measurements)}, "
            f"errors={self.n_errors}, complete={self.complete}, "
            f"results_path={str(self.results_path) if self.results_path else None!r})"
        )

    def _matching(self, route: str, cell: str, load: str | None) -> list[MeasuredRequest]:
        single = len(self.plan.load_points) == 1
        return [
            m
            for m in self.measurements
            if m.route == route
            and m.cell == cell
            and (load is None or m.load == load or (single and m.load is None))
        ]

    def samples(
        self, route: str, cell: str, metric: str = "tpot_ms", load: str | None = None
    ) -> list[float]:
        """Per-request values of ``metric`` (e.g. ``tpot_ms``, ms) for a route and cell
        (and load point key; ``None`` = every load point), successful requests only.

        Raises:
            KeyError: ``route`` or ``cell`` is not in the plan (the message lists
                the known route labels and cell ids).
            AttributeError: ``metric`` names no :class:`~deepseekbench.StreamMeasurement`
                field.
        """
        labels = [r.label for r in self.plan.routes]
        cells = [c.cell_id for c in self.plan.cells]
        if route not in labels:
            raise KeyError(f"no route {route!r} in this run; known route labels: {labels}")
        if cell not in cells:
            raise KeyError(f"no cell {cell!r} in this run; known cells: {cells}")
        if metric not in StreamMeasurement.model_fields:
            raise AttributeError(f"{metric!r} is not a StreamMeasurement field")
        out: list[float] = []
        for m in self._matching(route, cell, load):
            if m.measurement.error is None:
                v = getattr(m.measurement, metric)
                if v is not None:
                    out.append(float(v))
        return out

    def error_summary(self) -> list[ErrorSummary]:
        """Why measured requests failed: one entry per route and error kind, in
        plan route order then first occurrence, with the count and the first message."""
        found: dict[tuple[str, str], ErrorSummary] = {}
        for mr in self.measurements:
            e = mr.measurement.error
            if e is None:
                continue
            key = (mr.route, e.kind.value)
            old = found.get(key)
            found[key] = ErrorSummary(
                route=mr.route,
                kind=e.kind.value,
                count=1 if old is None else old.count + 1,
                first_message=e.message if old is None else old.first_message,
            )
        order = {r.label: i for i, r in enumerate(self.plan.routes)}
        return sorted(found.values(), key=lambda s: order.get(s.route, len(order)))

    def request_records(self) -> list[dict[str, Any]]:
        """One flat dict per measured request (the columns of :meth:`requests_to_pandas`).

        Keys: ``route``, ``cell``, ``load`` (load point key), ``index``,
        ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` (ms), ``output_toks_per_s`` (tokens/s),
        ``completion_tokens``,
        ``tokens_estimated``, ``draft_tokens``, ``accepted_tokens`` (tokens),
        ``accepted_token_ratio``, ``acceptance_length`` (tokens per verify step),
        ``finish_reason``, ``error_kind`` and ``error_message`` (``None`` when
        the request succeeded); in completion order.
        """
        out: list[dict[str, Any]] = []
        for mr in self.measurements:
            m = mr.measurement
            rec: dict[str, Any] = {
                "route": mr.route, "cell": mr.cell, "load": mr.load, "index": mr.index
            }  # fmt: skip
            rec.update({name: getattr(m, name) for name in _REQUEST_COLUMNS})
            rec["error_kind"] = m.error.kind.value if m.error is not None else None
            rec["error_message"] = m.error.message if m.error is not None else None
            out.append(rec)
        return out

    def requests_to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` with one row per measured request (:meth:`request_records`).

        Raises:
            MissingExtraError: pandas is not installed (``pip install 'deepseekbench[pandas]'``).
        """
        from deepseekbench._errors import MissingExtraError

        try:
            import pandas as pd
        except ImportError as exc:
            raise MissingExtraError(
                "RunResult.requests_to_pandas() needs pandas: pip install 'deepseekbench[pandas]'"
            ) from exc
        columns = [
            "route", "cell", "load", "index", *_REQUEST_COLUMNS, "error_kind", "error_message"
        ]  # fmt: skip
        return pd.DataFrame.from_records(self.request_records(), columns=columns)

    def row_requests(self, route: str, cell: str, load: str | None = None) -> RowRequests:
        """The measured requests of one row, for its window figures (see :mod:`_rowstats`);
        requests never sent (``budget_refused``) are not among them."""
        return RowRequests(
            tuple(
                (m.measurement, MeasureInfo(m.round, m.queue_ms, m.run_id))
                for m in self._matching(route, cell, load)
                if not is_unsent(m.measurement)
            ),
            self.plan.slo.limits,
        )

    def speedup_evidence(
        self, row: Row, metric: str = "tpot_ms"
    ) -> tuple[list[float] | None, dict[int, float]]:
        """What a speedup's interval is made from for ``row`` (one of :attr:`rows`):
        its per-request values of ``metric`` (:meth:`samples`; ``None`` for a window
        metric, which has none) and its value per round (:meth:`round_values`).
        :func:`~deepseekbench.compare_speedup` (``result=``) and the scorecard read
        both here.

        Raises:
            ValueError: ``row`` is not one of this result's rows.
            AttributeError: ``metric`` names no metric (as :meth:`round_values`).
        """
        index = next((i for i, r in enumerate(self.rows) if r is row), None)
        if index is None:
            index = next((i for i, r in enumerate(self.rows) if r == row), None)
        if index is None:
            raise ValueError(
                "the row is not one of this run's rows (matched by identity, then "
                "equality: a copy with any field changed is another row); judge it "
                "without result=, or pass its samples/rounds"
            )
        route, cell, load = self.row_keys[index]
        samples = None if metric in WINDOW_METRICS else self.samples(route, cell, metric, load)
        return samples, self.round_values(route, cell, metric, load)

    def round_values(
        self, route: str, cell: str, metric: str = "tpot_ms", load: str | None = None
    ) -> dict[int, float]:
        """``metric`` per round of one row: the median of a per-request field (ms), or a
        window figure (``output_throughput_toks_per_s`` tokens/s,
        ``request_throughput_per_s`` / ``goodput_req_per_s`` requests/s).

        Raises:
            AttributeError: ``metric`` names neither.
        """
        return self.row_requests(route, cell, load).round_values(metric)


def _build_parity(
    plan: BenchmarkPlan, state: ResultsState, parity_set: Sequence[ParityEntry]
) -> dict[tuple[str, ReasoningMode], RouteParity]:
    ids = [(e.prompt_id, e.text, e.task) for e in parity_set]
    tasks = tuple(e.task for e in parity_set if e.task is not None)
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


def row_identity(
    plan: BenchmarkPlan, cell: CellPlan, route: RoutePlan, load: LoadPoint
) -> dict[str, Any]:
    """The key axes (and route label) of the row for ``route`` in ``cell`` at ``load``."""
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
        "concurrency": load.concurrency,
        "request_rate_per_s": load.rate_per_s,
        "arrival": load.arrival,
    }


def _row_records(
    plan: BenchmarkPlan, state: ResultsState, route: str, cell: str, load: LoadPoint
) -> Indexed:
    """The row's measured requests by (index, turn) (``None`` load keys match a
    one-point plan); a request the run's budget refused was never sent
    (:func:`~deepseekbench._measure._measure.is_unsent`): no row counts it."""
    keys = {load.key} | ({None} if len(plan.load_points) == 1 else set())
    return {
        (i, t): (m, state.info[(label, cid, lk, i, t)])
        for (label, cid, lk, i, t), m in state.measurements.items()
        if label == route
        and cid == cell
        and lk in keys
        and i < plan.requests_per_cell
        and not is_unsent(m)
    }


def _join_parity(
    plan: BenchmarkPlan, rp: RouteParity | None, traffic: ParityResult | None
) -> tuple[QualityParity, str]:
    """A row's parity: the parity set's, overruled by a divergence of the measured traffic."""
    parity = rp.parity if rp is not None else QualityParity.unknown
    reason = rp.reason if rp is not None else "parity not run"
    if traffic is None:
        return parity, (
            f"{reason}; measured traffic sampled at temperature {plan.temperature:g}: "
            "the row relies on task parity"
        )
    note = "measured traffic: " + traffic.reason.replace("prompts", "requests")
    if traffic.parity is QualityParity.differs:
        return QualityParity.differs, f"{note}; parity set: {reason}"
    if traffic.control is not None and traffic.control.deterministic is False:
        return QualityParity.unknown, f"{note}; parity set: {reason}"
    return parity, f"{reason}; {note}"


def _off_parity(
    plan: BenchmarkPlan, rp: RouteParity | None, off: Indexed
) -> tuple[QualityParity, str]:
    """The ``off`` row's parity: the parity set's, unless ``off`` differed from itself
    between rounds at this load (then ``unknown``)."""
    parity = rp.parity if rp is not None else QualityParity.unknown
    reason = rp.reason if rp is not None else "parity not run"
    if plan.temperature > 0:
        return parity, reason
    control = traffic_control(plan, off)
    if control.deterministic is False:
        d = control.divergences[0].describe("round 1", "a later round")
        return QualityParity.unknown, (
            f"baseline nondeterministic under load: off differed from itself between "
            f"rounds on {len(control.divergences)} of {control.n_prompts} prompts ({d}); "
            f"parity set: {reason}"
        )
    if control.deterministic:
        reason += f"; measured traffic: deterministic across rounds on {control.n_prompts}"
    return parity, reason


def _figures(rows: RowRequests, max_lag_ms: float) -> dict[str, Any]:
    ok = rows.ok
    itl: list[float] = [x for m in ok for x in m.itl_ms]
    lag = rows.queue_p90_ms()
    return {
        "ttft_ms": rows.value("ttft_ms"),
        "tpot_ms": rows.value("tpot_ms"),
        "e2e_ms": rows.value("e2e_ms"),
        "output_toks_per_s": rows.value("output_toks_per_s"),
        "tokens_estimated": any(m.tokens_estimated for m in ok),
        "n_requests": len(rows.requests),
        "n_errors": len(rows.requests) - len(ok),
        "dispersion": Dispersion(
            ttft_ms=percentiles(m.ttft_ms for m in ok),
            tpot_ms=percentiles(m.tpot_ms for m in ok),
            e2e_ms=percentiles(m.e2e_ms for m in ok),
            itl_ms=percentiles(itl),
            output_toks_per_s=percentiles(m.output_toks_per_s for m in ok),
        ),
        "output_throughput_toks_per_s": rows.output_throughput(),
        "request_throughput_per_s": rows.request_throughput(),
        "goodput_req_per_s": rows.goodput(),
        "slo_attainment": rows.slo_attainment(),
        "rounds": len(rows.rounds()) or None,
        "schedule_lagged": lag is not None and lag > max_lag_ms,
    }


def _client_fields(rows: RowRequests, threshold_ms: float) -> dict[str, Any]:
    """The row's client health (docs/measurement.md, "Fidelity"): ``client_saturated``
    when any measured request saw the client's event loop lag past ``threshold_ms`` (ms),
    and the longest pool wait of its measured requests (ms)."""
    measured = [m for m, _ in rows.requests]
    return {
        "client_saturated": client_saturated(measured, threshold_ms),
        "client_pool_wait_ms": max_pool_wait_ms(measured),
        **client_clock_fields(measured, threshold_ms),  # issue 22
        **server_clock_fields(measured),  # issue 22: the engine's own clock, beside it
    }


def _server_window(
    state: ResultsState, route: str, cell: str, load: LoadPoint
) -> AcceptanceRecord | None:
    """The row's ``/metrics`` windows (one per round) as one record."""
    windows = [
        rec
        for (label, cid, lk, _), rec in sorted(state.server.items(), key=lambda kv: kv[0][3])
        if label == route and cid == cell and lk in (load.key, None)
    ]
    return combine_windows(windows)


def _cache_fields(state: ResultsState, route: str, cell: str, load: LoadPoint) -> dict[str, Any]:
    """issue 23: the row's prefix-cache hit rate and KV/queue peaks over its windows."""
    windows = [
        rec
        for (label, cid, lk, _), rec in sorted(state.cache.items(), key=lambda kv: kv[0][3])
        if label == route and cid == cell and lk in (load.key, None)
    ]
    window = combine_cache_windows(windows)
    if window is None:
        return {}
    return {
        "prefix_cache_hit_rate": window.prefix_cache_hit_rate,
        "kv_cache_usage_peak": window.kv_cache_usage_peak,
        "queue_depth_peak": window.queue_depth_peak,
    }


def _trace_fields(plan: BenchmarkPlan) -> dict[str, Any]:
    """issue 23: which trace was replayed, at which speed-up."""
    trace = plan.workload.trace
    if trace is None:
        return {}
    return {"trace": trace.path, "trace_speedup": trace.speedup}


def _acceptance_fields(
    route: RoutePlan, server: AcceptanceRecord | None, ok: list[StreamMeasurement]
) -> dict[str, Any]:
    if route.speculative is Speculative.off:
        return {}
    ratio, length, scope, drafted, accepted = acceptance(ok, server)
    return {
        "accepted_token_ratio": ratio,
        "acceptance_length": length,
        "acceptance_scope": scope,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
    }


@dataclass(frozen=True, slots=True)
class _RowInput:
    plan: BenchmarkPlan
    state: ResultsState
    parity: dict[tuple[str, ReasoningMode], RouteParity]
    launched: Mapping[str, LaunchRecord] = field(default_factory=dict)  # issue 24


def _build_row(
    inp: _RowInput, route: RoutePlan, cell: CellPlan, load: LoadPoint
) -> tuple[Row, ParityResult | None]:
    plan = inp.plan
    mine = _row_records(plan, inp.state, route.label, cell.cell_id, load)
    off = _row_records(plan, inp.state, plan.off_route.label, cell.cell_id, load)
    rows = RowRequests(tuple(mine[k] for k in sorted(mine)), plan.slo.limits)
    rp = inp.parity.get((route.label, cell.reasoning_mode))
    traffic: ParityResult | None = None
    if route.speculative is Speculative.off:
        parity, reason = _off_parity(plan, rp, off)
    else:
        traffic = traffic_parity(plan, off, mine) if plan.temperature == 0 else None
        parity, reason = _join_parity(plan, rp, traffic)
    parity, reason, noise = _within_noise(inp, route, cell, load, (parity, reason), traffic, off)
    noise = determinism_fields(inp.state.determinism, route.label, plan.off_route.label, noise)
    server = _server_window(inp.state, route.label, cell.cell_id, load)
    row = Row(
        **row_identity(plan, cell, route, load),
        **_figures(rows, plan.arrival.max_lag_ms),
        **_client_fields(rows, plan.client_lag_threshold_ms),
        **_acceptance_fields(route, server, rows.ok),
        quality_parity=parity,
        parity_detail=reason,
        **cell_spec_fields(
            [m for m, _ in rows.requests],
            server,
            speculative=route.speculative is not Speculative.off,
            declared_spec_tokens=route.spec_tokens,
        ),
        **_output_length_fields(  # issue 23
            plan, inp.state, cell.cell_id, mine, _workload_breakdown(mine, cell.request_max_tokens)
        ),
        **_cache_fields(inp.state, route.label, cell.cell_id, load),  # issue 23
        **_trace_fields(plan),
        **noise,
    )
    return row, traffic


def _within_noise(
    inp: _RowInput,
    route: RoutePlan,
    cell: CellPlan,
    load: LoadPoint,
    parity: tuple[QualityParity, str],
    traffic: ParityResult | None,
    off: Indexed,
) -> tuple[QualityParity, str, dict[str, Any]]:
    """Issue 21: the row's divergences explained by ``off``'s margins, against ``off``'s
    noise floor at this load; the verdict under ``parity.exact``
    (:mod:`deepseekbench._analysis._noise_rows`)."""
    plan, mode = inp.plan, cell.reasoning_mode
    off_rp = inp.parity.get((plan.off_route.label, mode))
    control = off_rp.control if off_rp is not None else None
    rounds = traffic_control(plan, off) if plan.temperature == 0 else None
    floor = noise_floor(plan, inp.state, mode.value, control, rounds)
    if route.speculative is Speculative.off:
        return judge_off(plan, inp.state, mode.value, parity, control, floor)
    rp = inp.parity.get((route.label, mode))
    where = RowDivergences(route.label, mode.value, cell.cell_id, load.key)
    tasks = rp.tasks.parity if rp is not None and rp.tasks is not None else None
    exact = rp.exact if rp is not None else None
    return judge_speculative(plan, inp.state, where, parity, exact, traffic, tasks, floor)


def _output_length_fields(
    plan: BenchmarkPlan, state: ResultsState, cell: str, mine: Indexed, fields: dict[str, Any]
) -> dict[str, Any]:
    """issue 23: ``fields`` (:func:`_workload_breakdown`) with the run's
    ``output_length`` and the row's ``tokens_past_eos``; a pinned row judges
    "short" against each prompt's pinned (natural) length, not the cell's cap."""
    natural = {(item, t): m for (c, item, t), m in state.calibration.items() if c == cell}
    measured = [(info.item, turn, m) for (_, turn), (m, info) in sorted(mine.items())]
    out = dict(fields)
    out["output_length"] = plan.workload.output_length
    out["tokens_past_eos"] = tokens_past_eos(measured, natural)
    if plan.workload.output_length != "pinned" or not natural:
        return out
    n_short = short_of_natural(measured, natural)
    out |= {"output_short": n_short > 0, "n_output_short": n_short}
    category = [info.category for _, (_, info) in sorted(mine.items())]

    def slice_short(name: str) -> bool:
        picked = [
            x
            for x, cat in zip(measured, category, strict=True)
            if cat == name or f"turn {x[1] + 1}" == name
        ]
        return short_of_natural(picked, natural) > 0

    for key in ("categories", "turns"):
        out[key] = tuple(
            s.model_copy(update={"output_short": slice_short(s.name)}) for s in out.get(key, ())
        )
    return out


def _workload_breakdown(mine: Indexed, max_tokens: int) -> dict[str, Any]:
    """Short-output flag, length percentiles and per-category / per-turn slices."""
    keys = sorted(mine)
    measured = [mine[k][0] for k in keys]
    out = workload_fields([m for m in measured if m.error is None], max_tokens)
    by_cat: dict[str, list[StreamMeasurement]] = {}
    by_turn: dict[int, list[StreamMeasurement]] = {}
    for (_, turn), (m, info) in ((k, mine[k]) for k in keys):
        if info.category is not None:
            by_cat.setdefault(info.category, []).append(m)
        by_turn.setdefault(turn, []).append(m)
    out["categories"] = tuple(
        slice_stats(name, ms, max_tokens=max_tokens) for name, ms in sorted(by_cat.items())
    )
    if len(by_turn) > 1:
        out["turns"] = tuple(
            slice_stats(f"turn {t + 1}", ms, max_tokens=max_tokens)
            for t, ms in sorted(by_turn.items())
        )
    return out


def _with_identity(
    inp: _RowInput, cell: CellPlan, load: LoadPoint, rows: Sequence[Row]
) -> list[Row]:
    """``rows`` (one per plan route, in plan order) with their route identity set
    (:mod:`deepseekbench._analysis._route_identity`)."""
    plan = inp.plan
    evidence = [
        route_evidence(
            r.label,
            r.speculative,
            r.dialect,
            [m for m, _ in _row_records(plan, inp.state, r.label, cell.cell_id, load).values()],
            _server_window(inp.state, r.label, cell.cell_id, load),
            r.spec_tokens,
        )
        for r in plan.routes
    ]
    verdicts = judge_route_identity(evidence)
    return [
        row.model_copy(
            update={
                "route_identity": verdicts[route.label].status,
                "route_identity_detail": verdicts[route.label].detail,
                **_launch_fields(inp.launched.get(route.label)),
            }
        )
        for route, row in zip(plan.routes, rows, strict=True)
    ]


def _launch_fields(record: LaunchRecord | None) -> dict[str, Any]:
    """The row fields of a launched route (none for a route the user started)."""
    if record is None:
        return {}
    return {
        "engine_command": record.command,
        "engine_version": record.version,
        "spec_config": orjson.dumps(record.spec_config, option=orjson.OPT_SORT_KEYS).decode(),
    }


def run_loads(plan: BenchmarkPlan, state: ResultsState) -> tuple[LoadPoint, ...]:
    """The plan's load points, then (issue 24) the ``[search]`` levels its records
    probed that the plan does not list, ascending by level."""
    keys = {lp.key for lp in plan.load_points}
    extra = sorted(
        (lp for k, lp in state.search_loads.items() if k not in keys), key=lambda lp: lp.level
    )
    return (*plan.load_points, *extra)


def build_result(
    plan: BenchmarkPlan,
    state: ResultsState,
    *,
    results_path: Path | None,
    resumed: int,
    complete: bool,
    parity_set: Sequence[ParityEntry],
    meta: RunMeta | None = None,
    retried: int = 0,
    kept_measurements: int = 0,
    remaining_measurements: int = 0,
    launched: Mapping[str, LaunchRecord] | None = None,
    integrity: ResultsIntegrity | None = None,
) -> RunResult:
    """The :class:`RunResult` of ``plan``'s records and the run's recorded parity set
    (pure: same records, same result; no file is read). ``meta``, ``integrity`` and
    the counts are carried as given (see :class:`RunResult`); ``launched``: what was
    launched per route label (``[routes.launch]``), copied onto that route's rows."""
    inp = _RowInput(plan, state, _build_parity(plan, state, parity_set), launched or {})
    rows: list[Row] = []
    keys: list[RowKey] = []
    traffic: dict[RowKey, ParityResult] = {}
    for cell in plan.cells:
        for load in run_loads(plan, state):
            point: list[Row] = []
            for route in plan.routes:
                row, tr = _build_row(inp, route, cell, load)
                key = (route.label, cell.cell_id, load.key)
                point.append(row)
                keys.append(key)
                if tr is not None:
                    traffic[key] = tr
            rows.extend(_with_identity(inp, cell, load, point))  # issue 24
    measurements = tuple(
        MeasuredRequest(
            route=k[0],
            cell=k[1],
            index=k[3],
            measurement=state.measurements[k],
            load=k[2],
            round=state.info[k].round,
            queue_ms=state.info[k].queue_ms,
            run_id=state.info[k].run_id,
            turn=k[4],
            item=state.info[k].item,
            category=state.info[k].category,
        )
        for k in state.order
    )
    return RunResult(
        plan=plan,
        plan_hash=plan.plan_hash(),
        rows=tuple(rows),
        measurements=measurements,
        parity=inp.parity,
        results_path=results_path,
        resumed=resumed,
        complete=complete,
        row_keys=tuple(keys),
        traffic=traffic,
        retried=retried,
        kept_measurements=kept_measurements,
        remaining_measurements=remaining_measurements,
        meta=meta,
        integrity=integrity,
    )


def load_results(path: str | Path, *, plan_hash: str | None = None) -> RunResult:
    """Rebuild a :class:`RunResult` from a results file: the last plan run in it, or
    the run whose plan hash starts with ``plan_hash`` (see :func:`~deepseekbench.list_runs`).

    Rows are rebuilt from the per-request records exactly as
    :func:`~deepseekbench.run_plan` built them, so a report equals the run's own;
    an unfinished run gives rows of what was measured (``complete`` False). Only
    the file is read: the parity set (prompts, graders, expected answers) is the
    one its ``run_start`` record holds, so editing or deleting the plan's task or
    dataset files changes nothing. Files written before the parity set was
    recorded read the plan's files again.

    The file's integrity is checked (its digest chain, duplicated measurement
    records, records of a plan with no ``run_start``): ``result.integrity`` holds
    what was found, ``result.meta.results_integrity`` says it in the reports, and
    an edited file credits no speedup (``results_tampered``). A record's ``round``
    outside the plan's rounds is an error.

    Raises:
        ResultsFormatError: the file is unreadable, has no ``run_start`` record,
            a record is malformed (a field out of range: an index, round, route,
            cell or load the plan does not have), or ``plan_hash`` matches no run
            or several.

    Warns:
        ResultsIntegrityWarning: the file was edited after it was written (the
            lines named); the result still loads, no speedup credited.
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
    parity_set = stored.parity_set
    if parity_set is None:  # written before results stood alone
        try:
            parity_set = parity_entries(stored.plan, stored.plan.tasks())
        except PlanError as exc:
            raise ResultsFormatError(f"{p}: {exc}") from exc
    run = next(r for r in stored.runs if r.plan_hash == stored.start.plan_hash)
    meta = RunMeta.of(
        stored.plan,
        stored.start.plan_hash,
        started_at=run.started_at if run.started_at != "?" else None,
        finished_at=stored.finished_at,
        library_version=stored.start.library_version,
        integrity=stored.integrity,
    )
    if stored.integrity.tampered:
        warnings.warn(f"{p}: {stored.integrity.describe()}", ResultsIntegrityWarning, stacklevel=3)
    result = build_result(
        stored.plan,
        stored.state,
        results_path=p,
        resumed=0,
        complete=stored.complete,
        parity_set=parity_set,
        meta=meta,
        launched=stored.start.launched,
        integrity=stored.integrity,
    )
    return result, stored.runs
