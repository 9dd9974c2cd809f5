"""Judging rows into scorecard lines: each speculative row against its cell and load's ``off`` row.

Holds the frozen line records (:class:`ScorecardLine`, which holds its
:class:`~deepseekbench.Row` and adds only what judging decides: the verdict, the
baseline, the parity detail and the per-category verdicts), the keys that pair
rows and their evidence (:func:`cell_id`, :func:`load_point`, :func:`line_key`)
and :func:`judge_rows`, which pairs and judges a run's rows
(:func:`~deepseekbench.compare_speedup`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._analysis._client_flag import client_flag
from deepseekbench._analysis._decompose import SpeedupDecomposition, decompose_speedup
from deepseekbench._analysis._engine_decompose import (
    EngineClockDiagnosis,
    diagnose_on_engine_clock,
)
from deepseekbench._analysis._speedup import (
    RefusalReason,
    SpeedupMetric,
    SpeedupVerdict,
    compare_speedup,
    tampered_verdict,
)
from deepseekbench._types._axes import KEY_AXES, AcceptanceScope, QualityParity, Speculative
from deepseekbench._types._clock import Clock
from deepseekbench._types._identity import RouteIdentity
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._parity import BASELINE_NONDETERMINISTIC
from deepseekbench._types._row import Dispersion, Row, SliceStats

__all__ = [
    "UNFINISHED_MARK",
    "CategoryLine",
    "ParityDetail",
    "ScorecardLine",
    "cell_id",
    "judge_rows",
    "line_key",
    "load_point",
    "load_words",
    "unfinished_reasons",
]

_T = TypeVar("_T")


def cell_id(row: Row) -> str:
    """``<context>/<output>/<reasoning>`` of a row, e.g. ``1k/256/non_think``."""
    return f"{row.context_bucket.value}/{row.output_target.value}/{row.reasoning_mode.value}"


def load_point(row: Row) -> LoadPoint | None:
    """The row's load point, or ``None`` when its load is unknown (a schema-1 row)."""
    if row.arrival is None or row.concurrency is None:
        return None
    return LoadPoint(row.arrival, row.concurrency, row.request_rate_per_s)


def load_words(row: Row) -> tuple[str, str]:
    """A row's load as the scorecard shows it: ``(label, phrase)``, e.g.
    ``("c=16", "concurrency 16")``, ``("—", "")`` when unknown. A trace replay says so:
    its requests go out at the trace's own arrival times (÷ ``trace_speedup``) and its
    concurrency only caps the requests in flight, e.g. ``("trace×2 c≤4", "trace replay
    ×2, at most 4 in flight")`` (docs/plan.md, trace replay)."""
    lp = load_point(row)
    if lp is None:
        return "—", ""
    if row.trace is None:
        return lp.label, lp.phrase
    pace = f"×{row.trace_speedup:g}" if row.trace_speedup not in (None, 1.0) else ""
    return (
        f"trace{pace} c≤{lp.concurrency}",
        f"trace replay{' ' + pace if pace else ''}, at most {lp.concurrency} in flight",
    )


def line_key(row: Row) -> str:
    """The key of a row's samples and details:
    ``<route label or speculative>@<cell id>[@<load key>]``."""
    lp = load_point(row)
    tail = f"@{lp.key}" if lp is not None else ""
    return f"{row.route_label or row.speculative.value}@{cell_id(row)}{tail}"


class ParityDetail(BaseModel):
    """What a refused line shows: the first divergence and every task flip (one line each)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    first_divergence: str | None = None
    task_flips: tuple[str, ...] = ()


class CategoryLine(BaseModel):
    """One dataset category of a scorecard line: acceptance, TPOT and the speedup.

    ``verdict`` is the category's :func:`~deepseekbench.compare_speedup` verdict
    against the same category of the cell's ``off`` row (``None`` on ``off``
    lines or without a baseline). TPOT in ms per output token.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    n_requests: int
    accepted_token_ratio: float | None
    acceptance_length: float | None
    tpot_ms: float | None
    verdict: SpeedupVerdict | None = None


class _FromRow(Generic[_T]):
    """A line attribute read through to the :class:`Row` field of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _FromRow[_T]: ...
    @overload
    def __get__(self, obj: ScorecardLine, objtype: type | None = None) -> _T: ...
    def __get__(self, obj: ScorecardLine | None, objtype: type | None = None) -> Any:
        return self if obj is None else getattr(obj.row, self.name)


class ScorecardLine(BaseModel):
    """One scorecard line: a row, and what judging it against its ``off`` row decided.

    ``row``: the row itself; the row's fields read through by name too
    (``line.tpot_ms`` is ``line.row.tpot_ms``: times in ms, throughput in
    tokens/s, goodput in requests/s; ``dispersion``: p50/p90/p99 of TTFT, TPOT,
    ITL and E2E, numpy's default linear interpolation as vLLM's
    ``benchmark_serving``). ``verdict`` is ``None`` on ``off`` lines and where
    the cell has no ``off`` row at the same load (``baseline`` is then
    ``None``). ``first_divergence`` (with ``off``'s margin there, when known)
    and ``task_flips``: the run's parity detail for this line. ``categories``:
    the row's dataset categories, each judged against ``off``'s.
    ``decomposition``: a credited TPOT speedup as acceptance length ÷ step-cost
    ratio with the break-even acceptance (:func:`~deepseekbench.decompose_speedup`),
    ``None`` on every other line. ``engine_diagnosis``: a TPOT line refused for a
    client-clock reason, decomposed on the engine's clock as a diagnosis only
    (:func:`~deepseekbench._analysis._engine_decompose.diagnose_on_engine_clock`;
    never a credited speedup), ``None`` on every other line. ``baseline_rounds``: the
    rounds the ``off`` row ran (``Row.rounds``); when fewer than this row's (a sequential
    run stopped ``off`` early), :attr:`speedup_text` says so on the line, as only the
    rounds both ran are paired. ``unfinished_reasons``: in a run that did not finish (no
    ``run_end`` record), the verdict's refusal reasons a finished run may not have had
    (:func:`unfinished_reasons`); :attr:`speedup_text` marks each with
    :data:`UNFINISHED_MARK`. Empty for a finished run.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", ignored_types=(_FromRow,))

    row: Row
    baseline: str | None
    verdict: SpeedupVerdict | None
    first_divergence: str | None = None
    task_flips: tuple[str, ...] = ()
    categories: tuple[CategoryLine, ...] = ()
    decomposition: SpeedupDecomposition | None = None
    engine_diagnosis: EngineClockDiagnosis | None = None
    baseline_rounds: int | None = Field(
        default=None, ge=1, description="measurement rounds the off row ran (None: unknown)"
    )
    unfinished_reasons: tuple[RefusalReason, ...] = Field(
        default=(),
        description="refusal reasons that may be an unfinished run's doing (marked ‡)",
    )

    # the row's own fields, read through
    speculative = _FromRow[Speculative]()
    quality_parity = _FromRow[QualityParity]()
    parity_detail = _FromRow[str | None]()
    accepted_token_ratio = _FromRow[float | None]()
    acceptance_length = _FromRow[float | None]()
    acceptance_scope = _FromRow[AcceptanceScope | None]()
    ttft_ms = _FromRow[float | None]()
    tpot_ms = _FromRow[float | None]()
    e2e_ms = _FromRow[float | None]()
    output_toks_per_s = _FromRow[float | None]()
    n_requests = _FromRow[int]()
    n_errors = _FromRow[int]()
    acceptance_by_position = _FromRow[tuple[float, ...] | None]()
    spec_tokens = _FromRow[int | None]()
    sse_ignored_lines = _FromRow[int]()
    output_throughput_toks_per_s = _FromRow[float | None]()
    goodput_req_per_s = _FromRow[float | None]()
    slo_attainment = _FromRow[float | None]()
    schedule_lagged = _FromRow[bool]()
    client_saturated = _FromRow[bool]()
    output_short = _FromRow[bool]()
    n_output_short = _FromRow[int]()
    turns = _FromRow[tuple[SliceStats, ...]]()
    dispersion = _FromRow[Dispersion]()
    server_ttft_ms = _FromRow[float | None]()
    server_queue_ms = _FromRow[float | None]()
    client_starved = _FromRow[bool]()
    n_client_starved = _FromRow[int]()
    client_stall_ms = _FromRow[float | None]()
    client_cpu_share = _FromRow[float | None]()
    client_core_wait_share = _FromRow[float | None]()
    client_cores = _FromRow[int | None]()
    client_load_1m = _FromRow[float | None]()
    server_tpot_ms = _FromRow[float | None]()
    prefix_cache_hit_rate = _FromRow[float | None]()
    kv_cache_usage_peak = _FromRow[float | None]()
    queue_depth_peak = _FromRow[float | None]()
    route_identity = _FromRow[RouteIdentity | None]()
    route_identity_detail = _FromRow[str | None]()
    parity_basis = _FromRow[str]()
    first_divergence_margin_nats = _FromRow[float | None]()
    divergence_note = _FromRow[str | None]()
    tokens_past_eos = _FromRow[float | None]()
    acceptance_length_p10 = _FromRow[float | None]()
    acceptance_length_p50 = _FromRow[float | None]()
    acceptance_length_p90 = _FromRow[float | None]()
    accepted_per_step = _FromRow[tuple[int, ...] | None]()
    acceptance_split = _FromRow[str | None]()

    @property
    def cell(self) -> str:
        """The row's cell id (:func:`cell_id`)."""
        return cell_id(self.row)

    @property
    def route(self) -> str:
        """The row's route label, or its ``speculative`` value when unlabelled."""
        return self.row.route_label or self.row.speculative.value

    @property
    def load(self) -> str:
        """The load point's label (``c=16``, ``8/s``; ``—`` unknown)."""
        return load_words(self.row)[0]

    @property
    def load_phrase(self) -> str:
        """The load point in words (``concurrency 16``; empty when unknown)."""
        return load_words(self.row)[1]

    @property
    def load_level(self) -> float | None:
        """The load point's level (streams or requests/s), ``None`` when unknown."""
        lp = load_point(self.row)
        return lp.level if lp is not None else None

    @property
    def client_flag(self) -> str:
        """``saturated``, ``starved``, ``waited``, ``lagged`` or ``""``: why this line's
        client clock is suspect (:func:`~deepseekbench._analysis._client_flag.client_flag`)."""
        return client_flag(self.row)

    @property
    def credited(self) -> bool:
        """True only when this line earned a speedup (its verdict is
        :attr:`~deepseekbench.SpeedupVerdict.credited`: > 1, interval above 1, parity
        verified on both rows); a printed slowdown is not credited (see :attr:`printed`)."""
        return self.verdict is not None and self.verdict.credited

    @property
    def printed(self) -> bool:
        """True when a figure is shown on this line: a credited speedup or a verified,
        significant slowdown (:attr:`~deepseekbench.SpeedupVerdict.slower`)."""
        return self.verdict is not None and self.verdict.printed

    @property
    def speedup_text(self) -> str:
        """The speedup column: the figure (and interval) only when printed, else why not."""
        if self.row.speculative is Speculative.off:
            return "baseline"
        if self.verdict is None:
            return "refused: no off baseline in this cell"
        if self.unfinished_reasons:  # a refused verdict: its reasons, some marked
            v, marked = self.verdict, set(self.unfinished_reasons)
            axes = f" [{', '.join(v.mismatched_axes)}]" if v.mismatched_axes else ""
            return (
                "refused: "
                + ", ".join(r.value + (UNFINISHED_MARK if r in marked else "") for r in v.reasons)
                + axes
            )
        return str(self.verdict) + self._fewer_baseline_rounds()

    def _fewer_baseline_rounds(self) -> str:
        """`` [off ran 1 of 3 rounds]`` when the baseline ran fewer rounds than this row and
        the verdict shows an interval (a refused verdict's text carries no number)."""
        mine, base, v = self.row.rounds, self.baseline_rounds, self.verdict
        if v is None or not (v.printed or v.inconclusive):
            return ""
        if mine is None or base is None or base >= mine:
            return ""
        return f" [off ran {base} of {mine} rounds]"


UNFINISHED_MARK = "‡"
"""Marks a refusal reason that may be an unfinished run's doing (:func:`unfinished_reasons`);
the scorecard's footnote says so."""

_SHORT_OF_PLAN = frozenset(
    {
        RefusalReason.baseline_incomplete,
        RefusalReason.candidate_incomplete,
        RefusalReason.baseline_too_few_requests,
        RefusalReason.candidate_too_few_requests,
        RefusalReason.baseline_metric_missing,
        RefusalReason.candidate_metric_missing,
        RefusalReason.speculative_counters_missing,
    }
)
"""Refusal reasons for a row measured short of its plan: a run stopped before its last
load points or rounds leaves them (no figure, too few requests, no counters yet)."""


def _parity_unchecked(row: Row) -> bool:
    """The row's parity is still unknown, not for a finding (a mismatch is ``differs``;
    ``off`` differing from itself, :data:`~deepseekbench.BASELINE_NONDETERMINISTIC`, is
    measured): a check the run never made, e.g. off's determinism control, which the
    schedule runs after every measurement (``deepseekbench._plan._schedule``)."""
    return row.quality_parity is QualityParity.unknown and (
        BASELINE_NONDETERMINISTIC not in (row.parity_detail or "")
    )


def unfinished_reasons(
    baseline: Row, candidate: Row, verdict: SpeedupVerdict
) -> tuple[RefusalReason, ...]:
    """The refusal reasons of ``verdict`` (``candidate`` judged against ``baseline``) that
    a run which did not finish may owe to stopping early, not to a fault found: parity
    still unknown on that side (:func:`_parity_unchecked`), or a row short of its plan
    (incomplete, too few requests, metric or speculative counters missing). In verdict
    order; empty for a printed or inconclusive verdict. Only a run without its
    ``run_end`` record asks (:func:`judge_rows`' ``run_unfinished``); "may": a finished
    run can refuse for the same reasons."""
    R = RefusalReason
    unchecked = {
        R.baseline_parity_not_verified: _parity_unchecked(baseline),
        R.candidate_parity_not_verified: _parity_unchecked(candidate),
    }
    return tuple(r for r in verdict.reasons if r in _SHORT_OF_PLAN or unchecked.get(r, False))


def _pair_key(row: Row) -> tuple[Any, ...]:
    return tuple(getattr(row, a) for a in KEY_AXES if a != "speculative")


def _category_lines(
    base: Row | None, row: Row, metric: SpeedupMetric, tampered: bool = False
) -> tuple[CategoryLine, ...]:
    """Per-category lines of ``row``; verdicts against ``base``'s categories (all
    refused with ``results_tampered`` when ``tampered``)."""
    if not row.categories:
        return ()
    from deepseekbench._analysis._breakdown import category_speedups

    verdicts = category_speedups(base, row, metric=metric) if base is not None else {}
    if tampered:  # an edited results file credits no category either
        verdicts = {name: tampered_verdict(metric, Clock.client) for name in verdicts}
    return tuple(
        CategoryLine(
            name=c.name,
            n_requests=c.n_requests,
            accepted_token_ratio=c.accepted_token_ratio,
            acceptance_length=c.acceptance_length,
            tpot_ms=c.tpot_ms,
            verdict=verdicts.get(c.name),
        )
        for c in row.categories
    )


class _Judge:
    """:func:`compare_speedup` with each line's samples and rounds (the interval)."""

    def __init__(
        self,
        metric: SpeedupMetric,
        samples: Mapping[str, Sequence[float]] | None,
        rounds: Mapping[str, Mapping[int, float]] | None,
        n_resamples: int,
        seed: int,
        clock: Clock = Clock.client,
        tampered: bool = False,
        acceptance: Mapping[str, Sequence[float]] | None = None,
        prompts: Mapping[str, Mapping[str, Mapping[int, float]]] | None = None,
        acceptance_prompts: Mapping[str, Sequence[str | None]] | None = None,
    ) -> None:
        self.prompts = prompts or {}
        self.acceptance_prompts = acceptance_prompts or {}
        self.acceptance = acceptance or {}
        self.clock = clock
        self.tampered = tampered  # rows of an edited results file: nothing credited
        self.metric = metric
        self.samples = samples or {}
        self.rounds = rounds or {}
        self.n_resamples = n_resamples
        self.seed = seed

    def verdict(self, base: Row, row: Row) -> SpeedupVerdict:
        if self.tampered:
            return tampered_verdict(self.metric, self.clock)
        bk, ck = line_key(base), line_key(row)
        return compare_speedup(
            base,
            row,
            metric=self.metric,
            samples=(self.samples.get(bk), self.samples.get(ck)),
            rounds=(self.rounds.get(bk, {}), self.rounds.get(ck, {})),
            n_resamples=self.n_resamples,
            seed=self.seed,
            clock=self.clock,
            prompt_samples=(self.prompts.get(bk), self.prompts.get(ck)),
        )

    def line(self, r: Row, base: Row | None, d: ParityDetail | None) -> ScorecardLine:
        """``r``'s line, judged against ``base`` (its cell's ``off`` row) when there is one."""
        verdict = self.verdict(base, r) if base is not None else None
        tampered = verdict is not None and RefusalReason.results_tampered in verdict.reasons
        parts = diagnosis = None
        if base is not None and verdict is not None:
            diagnosis = diagnose_on_engine_clock(base, r, verdict)
            parts = decompose_speedup(
                base,
                r,
                verdict=verdict,
                acceptance_samples=self.acceptance.get(line_key(r)),
                acceptance_prompts=self.acceptance_prompts.get(line_key(r)),
                n_resamples=self.n_resamples,
                seed=self.seed,
            )
        return ScorecardLine(
            row=r,
            baseline=(base.route_label or base.speculative.value) if base else None,
            verdict=verdict,
            first_divergence=_with_margin(d.first_divergence if d else None, r),
            task_flips=d.task_flips if d else (),
            categories=_category_lines(
                base, r, verdict.metric if verdict is not None else SpeedupMetric.tpot_ms, tampered
            ),
            decomposition=parts,
            engine_diagnosis=diagnosis,
            baseline_rounds=base.rounds if base is not None else None,
        )


def _with_margin(first: str | None, r: Row) -> str | None:
    """The first divergence with ``off``'s margin there (nats), when known."""
    if first is None or r.divergences_near_tie is None:
        return first
    m = r.first_divergence_margin_nats
    return first + (f" [off's margin {m:.3f} nats]" if m is not None else " [no margin]")


def load_order(rows: Sequence[Row]) -> list[Row]:
    """``rows`` with each cell's load points ascending by level (a rate in requests/s,
    else the concurrency in streams), cells and routes in their first order (a stable
    sort; a row without a load, an older row, first in its cell)."""
    cells: dict[str, int] = {}
    for r in rows:
        cells.setdefault(cell_id(r), len(cells))

    def level(r: Row) -> float:
        if r.request_rate_per_s is not None:
            return r.request_rate_per_s
        return float(r.concurrency) if r.concurrency is not None else -math.inf

    return sorted(rows, key=lambda r: (cells[cell_id(r)], level(r)))


def judge_rows(
    rows: Sequence[Row],
    *,
    metric: SpeedupMetric,
    samples: Mapping[str, Sequence[float]] | None = None,
    details: Mapping[str, ParityDetail] | None = None,
    rounds: Mapping[str, Mapping[int, float]] | None = None,
    n_resamples: int = 2000,
    seed: int = 0,
    clock: Clock = Clock.client,
    results_tampered: bool = False,
    acceptance: Mapping[str, Sequence[float]] | None = None,
    prompts: Mapping[str, Mapping[str, Mapping[int, float]]] | None = None,
    acceptance_prompts: Mapping[str, Sequence[str | None]] | None = None,
    run_unfinished: bool = False,
) -> list[ScorecardLine]:
    """One line per row, in row order but for the loads of a cell, which read ascending
    (concurrency, or rate in requests/s: :func:`load_order`): each speculative row judged
    against the first ``off`` row of its cell and load (every key axis but
    ``speculative`` equal).
    ``samples``, ``details``, ``rounds``, ``prompts`` (values per prompt and round:
    the speedup's interval over prompts) and ``acceptance`` (per-request acceptance
    lengths, tokens per verify step: the decomposition's interval, with
    ``acceptance_prompts`` the prompt of each, for a bootstrap over prompts) are keyed by
    :func:`line_key`; ``results_tampered`` refuses every speedup (``results_tampered``);
    ``run_unfinished`` (the rows are of a run without its ``run_end`` record) sets each
    refused line's :attr:`ScorecardLine.unfinished_reasons`: no verdict changes."""
    offs: dict[tuple[Any, ...], Row] = {}
    for r in rows:
        if r.speculative is Speculative.off:
            offs.setdefault(_pair_key(r), r)
    judge = _Judge(
        metric,
        samples,
        rounds,
        n_resamples,
        seed,
        clock,
        results_tampered,
        acceptance,
        prompts,
        acceptance_prompts,
    )
    lines: list[ScorecardLine] = []
    for r in load_order(rows):
        base = None if r.speculative is Speculative.off else offs.get(_pair_key(r))
        d = details.get(line_key(r)) if details is not None else None
        line = judge.line(r, base, d)
        if run_unfinished and base is not None and line.verdict is not None:
            marked = unfinished_reasons(base, r, line.verdict)
            line = line.model_copy(update={"unfinished_reasons": marked})
        lines.append(line)
    return lines
