"""A run's result rebuilt from its records (pure): :class:`RunResult` and its loaders.

Functions of the records a run wrote (:class:`~deepseekbench._store._results.ResultsState`)
and its plan, so :func:`load_results` rebuilds exactly what
:func:`~deepseekbench.run_plan` returned. Holds :class:`RunResult`,
:class:`MeasuredRequest`, :class:`RunMeta`, :class:`ErrorSummary`,
:func:`build_result` and the loaders; the parity set's verdicts are judged in
:mod:`deepseekbench._analysis._route_parity` and each row is built in
:mod:`deepseekbench._analysis._rows`.

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

import types
import typing
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median as median_of
from typing import Any

from pydantic import BaseModel, ConfigDict

from deepseekbench._analysis._route_parity import RouteParity, build_parity
from deepseekbench._analysis._rows import RowInput, build_row, row_identity, with_identity
from deepseekbench._analysis._rowstats import WINDOW_METRICS, RowRequests
from deepseekbench._analysis._witness_rows import route_witnesses
from deepseekbench._errors import PlanError, UnknownMetricError
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._records._measurement import StreamMeasurement, is_unsent
from deepseekbench._store._chain import ResultsIntegrity, ResultsIntegrityWarning
from deepseekbench._store._records import ParityEntry, parity_entries
from deepseekbench._store._results import (
    MeasureInfo,
    ResultsFormatError,
    ResultsRun,
    ResultsState,
    read_stored_run,
)
from deepseekbench._types._axes import ReasoningMode
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._parity import ParityResult
from deepseekbench._types._row import Row

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


def request_metric_names() -> tuple[str, ...]:
    """The numeric per-request fields of :class:`~deepseekbench.StreamMeasurement`
    (``ttft_ms``, ``tpot_ms``, ... in ms, tokens or tokens/s): the names
    :meth:`RunResult.samples` reads."""
    out = []
    for name, f in StreamMeasurement.model_fields.items():
        union = isinstance(f.annotation, types.UnionType) or (
            typing.get_origin(f.annotation) is typing.Union
        )
        args = typing.get_args(f.annotation) if union else (f.annotation,)
        if any(a in (int, float) for a in args):
            out.append(name)
    return tuple(out)


def check_request_metric(metric: str, *, window: bool = False) -> None:
    """Raise :class:`~deepseekbench.UnknownMetricError` naming the valid names unless
    ``metric`` is a numeric per-request field (or, with ``window``, a window figure).

    Raises:
        UnknownMetricError: as above (also a ``KeyError``, ``ValueError`` and
            ``AttributeError``).
    """
    names = request_metric_names()
    if metric in names or (window and metric in WINDOW_METRICS):
        return
    known = (*sorted(WINDOW_METRICS), *names) if window else names
    raise UnknownMetricError(metric, known, what="per-request figure")


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
        resumed: measured requests, parity outputs and calibration outputs
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
        run_notes: notes the run's caller recorded about it (``run_note`` records,
            e.g. a demo scenario's explanation), in order; the scorecard prints them
            with its notes (``Scorecard.run_notes``); ``()`` in files without any.
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
    run_notes: tuple[str, ...] = ()

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

    def check_keys(self, route: str, cell: str, load: str | None = None) -> str | None:
        """Refuse a route label, cell id or load point key this run does not hold (every
        accessor taking them calls this first; ``load=None`` means every load point).
        ``load`` is a key (``"closed:c=1"``) or the short form the scorecard prints
        (``"c=1"``) where exactly one key reads so.

        Returns:
            The load point key (``None`` for every load point).

        Raises:
            UnknownKeyError: (also a ``KeyError``) naming the keys that exist, or naming
                the type passed where a key string belongs (e.g. a ``Row``).
        """
        from deepseekbench._errors import UnknownKeyError

        labels = tuple(r.label for r in self.plan.routes)
        cells = tuple(c.cell_id for c in self.plan.cells)
        loads = tuple(dict.fromkeys([lp.key for lp in self.plan.load_points]
                                    + [k[2] for k in self.row_keys]))  # fmt: skip
        if route not in labels:
            raise UnknownKeyError("route", route, labels)
        if cell not in cells:
            raise UnknownKeyError("cell", cell, cells)
        if load is None or load in loads:
            return load
        short = [k for k in loads if isinstance(load, str) and k.split(":", 1)[-1] == load]
        if len(short) == 1:
            return short[0]
        raise UnknownKeyError("load", load, loads)

    def _matching(self, route: str, cell: str, load: str | None) -> list[MeasuredRequest]:
        load = self.check_keys(route, cell, load)
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
            UnknownKeyError: ``route``, ``cell`` or ``load`` is not in this run (also a
                ``KeyError``; the message lists the keys that exist).
            UnknownMetricError: ``metric`` names no numeric
                :class:`~deepseekbench.StreamMeasurement` field (also an
                ``AttributeError``; the message lists them).
        """
        self.check_keys(route, cell, load)
        check_request_metric(metric)
        out: list[float] = []
        for m in self._matching(route, cell, load):
            if m.measurement.error is None:
                v = getattr(m.measurement, metric)
                if v is not None:
                    out.append(float(v))
        return out

    def sample_prompts(
        self, route: str, cell: str, metric: str = "tpot_ms", load: str | None = None
    ) -> list[str | None]:
        """The prompt (workload item id; ``None`` where a request does not name it, as
        in older results files) of each value :meth:`samples` returns for the same
        arguments, in the same order: what a bootstrap over prompts groups them by.

        Raises:
            UnknownKeyError: as :meth:`samples`.
            UnknownMetricError: as :meth:`samples`.
        """
        self.check_keys(route, cell, load)
        check_request_metric(metric)
        return [
            m.item
            for m in self._matching(route, cell, load)
            if m.measurement.error is None and getattr(m.measurement, metric) is not None
        ]

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
        requests never sent (``budget_refused``) are not among them.

        Raises:
            UnknownKeyError: ``route``, ``cell`` or ``load`` is not in this run.
        """
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
            UnknownMetricError: ``metric`` names no metric (as :meth:`round_values`).
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

    def prompt_evidence(
        self, row: Row, metric: str = "tpot_ms"
    ) -> dict[str, dict[int, float]] | None:
        """``row``'s ``metric`` (ms, or tokens/s) per prompt (the workload item id) and
        round: the median of the prompt's successful requests in that round (a
        multi-turn item's turns count as its requests). What the speedup's paired
        cluster bootstrap over prompts resamples
        (``deepseekbench._analysis._prompt_bootstrap``). ``None`` for a window metric, or
        when a successful request does not name its prompt (older results files).

        Raises:
            ValueError: ``row`` is not one of this result's rows (as :meth:`speedup_evidence`).
            UnknownMetricError: ``metric`` names no metric (as :meth:`round_values`).
        """
        self.speedup_evidence(row, metric)  # the same checks
        if metric in WINDOW_METRICS:
            return None
        index = next(i for i, r in enumerate(self.rows) if r is row or r == row)
        route, cell, load = self.row_keys[index]
        cells: dict[str, dict[int, list[float]]] = {}
        for m in self._matching(route, cell, load):
            if m.measurement.error is not None:
                continue
            if m.item is None:
                return None
            v = getattr(m.measurement, metric)
            if v is not None:
                cells.setdefault(m.item, {}).setdefault(m.round, []).append(float(v))
        return {p: {r: median_of(vs) for r, vs in by.items()} for p, by in cells.items()}

    def round_values(
        self, route: str, cell: str, metric: str = "tpot_ms", load: str | None = None
    ) -> dict[int, float]:
        """``metric`` per round of one row: the median of a per-request field (ms), or a
        window figure (``output_throughput_toks_per_s`` tokens/s,
        ``request_throughput_per_s`` / ``goodput_req_per_s`` requests/s).

        Raises:
            UnknownKeyError: ``route``, ``cell`` or ``load`` is not in this run.
            UnknownMetricError: ``metric`` names neither (also an ``AttributeError``;
                the message lists the valid names).
        """
        self.check_keys(route, cell, load)
        if metric not in WINDOW_METRICS:
            check_request_metric(metric, window=True)
        return self.row_requests(route, cell, load).round_values(metric)


def run_loads(plan: BenchmarkPlan, state: ResultsState) -> tuple[LoadPoint, ...]:
    """The plan's load points and the ``[search]`` levels its records probed that the
    plan does not list, ascending by level (concurrency, or rate in requests/s): every
    table of loads reads in load order, a probed c=3 between c=1 and c=5 (a stable
    sort: equal levels keep plan order)."""
    keys = {lp.key for lp in plan.load_points}
    extra = [lp for k, lp in state.search_loads.items() if k not in keys]
    return tuple(sorted((*plan.load_points, *extra), key=lambda lp: lp.level))


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
    inp = RowInput(
        plan,
        state,
        build_parity(plan, state, parity_set),
        launched or {},
        route_witnesses(plan, state),
    )
    rows: list[Row] = []
    keys: list[RowKey] = []
    traffic: dict[RowKey, ParityResult] = {}
    for cell in plan.cells:
        for load in run_loads(plan, state):
            point: list[Row] = []
            for route in plan.routes:
                row, tr = build_row(inp, route, cell, load)
                key = (route.label, cell.cell_id, load.key)
                point.append(row)
                keys.append(key)
                if tr is not None:
                    traffic[key] = tr
            rows.extend(with_identity(inp, cell, load, point))
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
        run_notes=tuple(state.notes),
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
            cell or load the plan does not have), ``plan_hash`` matches no run
            or several, or the file is two results files joined (``cat a b``).
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.

    Warns:
        ResultsIntegrityWarning: the file was edited after it was written (the
            lines named); the result still loads, no speedup credited.
        UnfinishedRunWarning: the run has no ``run_end`` (``complete`` False; a torn
            last line was dropped); the message says how to resume it.
    """
    return load_results_and_runs(path, plan_hash=plan_hash)[0]


def load_results_and_runs(
    path: str | Path, *, plan_hash: str | None = None
) -> tuple[RunResult, tuple[ResultsRun, ...]]:
    """:func:`load_results` and :func:`~deepseekbench.list_runs` from one read of the file.

    Raises:
        ResultsFormatError: as :func:`load_results`.
    """
    stored = read_stored_run(path, plan_hash=plan_hash)
    p = Path(path)
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
