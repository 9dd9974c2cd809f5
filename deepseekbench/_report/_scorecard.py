"""The scorecard: one line per cell, load point and route, a speedup only where it was earned.

Each speculative row is paired with the ``off`` row of the same cell and load
(every key axis but ``speculative`` equal) and judged by
:func:`~deepseekbench.compare_speedup`. The speedup column shows a number only
when that verdict is printed; otherwise it shows the refusal reasons. With 2 or
more paired rounds a printed figure is the geometric mean of the rounds' ratios
with a Student-t interval on their logs (:func:`paired_speedup_ci`); otherwise,
with per-request samples, it carries a 95 % bootstrap interval
(``scipy.stats.bootstrap``, percentile method, each route's requests resampled
independently; Efron & Tibshirani 1993, *An Introduction to the Bootstrap*).
Refused lines list their first divergence and every task flip; routes measured
at several loads get a crossover note (:meth:`Scorecard.crossovers`).

Renderings: :meth:`Scorecard.to_text` (terminal), :meth:`~Scorecard.to_markdown`,
:meth:`~Scorecard.to_json`, :meth:`~Scorecard.to_csv`, ``_repr_html_`` (Jupyter)
and :meth:`~Scorecard.to_pandas` (needs the ``pandas`` extra).
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ConfigDict

from deepseekbench._analysis._analysis import RunMeta, RunResult, load_results
from deepseekbench._analysis._best_config import BestConfig
from deepseekbench._analysis._capacity import CapacityReport, capacity_report
from deepseekbench._analysis._speedup import (
    RefusalReason,
    SpeedupMetric,
    SpeedupVerdict,
    bootstrap_speedup_ci,
    compare_speedup,
    evidence_field,
    paired_speedup_ci,
    tampered_verdict,
)
from deepseekbench._errors import MissingExtraError
from deepseekbench._report._client_diagnosis import client_flag, run_diagnoses
from deepseekbench._report._grid import grid_choices, grid_json, grid_text
from deepseekbench._report._past_eos import past_eos_notes
from deepseekbench._report._server_side import server_side_notes
from deepseekbench._types._axes import KEY_AXES, AcceptanceScope, QualityParity, Speculative
from deepseekbench._types._clock import Clock
from deepseekbench._types._identity import RouteIdentity
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._row import Dispersion, Percentiles, Row, SliceStats

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CategoryLine",
    "MissingExtraError",
    "ParityDetail",
    "Scorecard",
    "ScorecardLine",
    "bootstrap_speedup_ci",
    "cell_id",
    "html_table",
    "line_key",
    "load_point",
    "paired_speedup_ci",
]


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


def _server_wide_marked(ln: ScorecardLine) -> bool:
    """Whether the line's acceptance cells carry the ``*`` marker (a server-wide
    acceptance figure is shown): the footnote is printed exactly when some line does."""
    return ln.acceptance_scope is AcceptanceScope.server_wide and (
        ln.accepted_token_ratio is not None or ln.acceptance_length is not None
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


class ScorecardLine(BaseModel):
    """One scorecard line: a row, its parity and acceptance, and its speedup verdict.

    ``verdict`` is ``None`` on ``off`` lines and where the cell has no ``off`` row
    at the same load (``baseline`` is then ``None``). ``load``: the load point
    (``c=16``, ``8/s``; ``—`` unknown). Times in ms, throughput in tokens/s,
    goodput in requests/s. ``dispersion``: the row's p50/p90/p99 of TTFT, TPOT,
    ITL and E2E (ms; ms/token for TPOT), numpy's default linear interpolation as
    vLLM's ``benchmark_serving`` (``np.percentile``). ``server_ttft_ms`` /
    ``server_queue_ms``: medians of the engine's own TTFT and queueing time (ms;
    vLLM's per-request metrics), ``None`` where the engine does not report them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cell: str
    route: str
    speculative: Speculative
    baseline: str | None
    load: str = "—"
    load_level: float | None = None
    load_phrase: str = ""
    quality_parity: QualityParity
    parity_detail: str | None
    accepted_token_ratio: float | None
    acceptance_length: float | None
    acceptance_scope: AcceptanceScope | None
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    output_toks_per_s: float | None
    n_requests: int
    n_errors: int
    verdict: SpeedupVerdict | None
    first_divergence: str | None = None
    task_flips: tuple[str, ...] = ()
    acceptance_by_position: tuple[float, ...] | None = None
    spec_tokens: int | None = None
    sse_ignored_lines: int = 0
    output_throughput_toks_per_s: float | None = None
    goodput_req_per_s: float | None = None
    slo_attainment: float | None = None
    schedule_lagged: bool = False
    client_saturated: bool = False
    output_short: bool = False
    n_output_short: int = 0
    categories: tuple[CategoryLine, ...] = ()
    turns: tuple[SliceStats, ...] = ()
    dispersion: Dispersion = Dispersion()
    server_ttft_ms: float | None = None
    server_queue_ms: float | None = None
    # issue 22: client clock health (the run's one-line diagnosis reads these)
    client_starved: bool = False
    n_client_starved: int = 0
    client_stall_ms: float | None = None
    client_cpu_share: float | None = None
    client_core_wait_share: float | None = None
    client_cores: int | None = None
    client_load_1m: float | None = None
    server_tpot_ms: float | None = None  # issue 22: the engine's own TPOT, beside the client's

    @property
    def client_flag(self) -> str:
        """``saturated``, ``starved``, ``lagged`` or ``""``: why this line's client
        clock is suspect (:func:`~deepseekbench._report._client_diagnosis.client_flag`)."""
        return client_flag(self)

    # issue 23: the server's side (Row fields of the same names)
    prefix_cache_hit_rate: float | None = None
    kv_cache_usage_peak: float | None = None
    queue_depth_peak: float | None = None
    # issue 24: route identity (see deepseekbench._analysis._route_identity)
    route_identity: RouteIdentity | None = None
    route_identity_detail: str | None = None
    # issue 21: divergences explained by off's margins
    parity_basis: str = "bit_exact"
    first_divergence_margin_nats: float | None = None
    divergence_note: str | None = None
    tokens_past_eos: float | None = None  # issue 23: share past off's natural EOS

    @property
    def credited(self) -> bool:
        """True when a speedup figure is shown on this line."""
        return self.verdict is not None and self.verdict.printed

    @property
    def speedup_text(self) -> str:
        """The speedup column: the figure (and interval) only when printed, else why not."""
        if self.speculative is Speculative.off:
            return "baseline"
        if self.verdict is None:
            return "refused: no off baseline in this cell"
        return str(self.verdict)


def _pair_key(row: Row) -> tuple[Any, ...]:
    return tuple(getattr(row, a) for a in KEY_AXES if a != "speculative")


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}"


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


_CATEGORY_COLUMNS: tuple[str, ...] = (
    "cell",
    "load",
    "route",
    "category",
    "n",
    "accept",
    "acc.len",
    "TPOT ms",
    "speedup",
)


def _category_cells(ln: ScorecardLine) -> list[list[str]]:
    """Category table rows of a line; none when the line has a single category
    (the main table already gives those figures)."""
    out: list[list[str]] = []
    if len(ln.categories) < 2:
        return out
    for c in ln.categories:
        if ln.speculative is Speculative.off:
            speedup = "baseline"
        elif c.verdict is None:
            speedup = "refused: no off baseline for this category"
        else:
            speedup = str(c.verdict)
        out.append(
            [
                ln.cell,
                ln.load,
                ln.route,
                c.name,
                str(c.n_requests),
                _fmt(c.accepted_token_ratio, 2),
                _fmt(c.acceptance_length, 2),
                _fmt(c.tpot_ms, 2),
                speedup,
            ]
        )
    return out


_TURN_COLUMNS: tuple[str, ...] = (
    "cell",
    "load",
    "route",
    "turn",
    "n",
    "TTFT ms",
    "TPOT ms",
    "acc.len",
)


def _turn_cells(ln: ScorecardLine) -> list[list[str]]:
    return [
        [
            ln.cell,
            ln.load,
            ln.route,
            t.name,
            str(t.n_requests),
            _fmt(t.ttft_ms, 1),
            _fmt(t.tpot_ms, 2),
            _fmt(t.acceptance_length, 2),
        ]
        for t in ln.turns
    ]


_LATENCY_METRICS: tuple[tuple[str, str, int], ...] = (
    ("ttft_ms", "TTFT ms", 1),
    ("tpot_ms", "TPOT ms", 2),
    ("itl_ms", "ITL ms", 2),
    ("e2e_ms", "E2E ms", 1),
)
"""``(Dispersion field, column head, decimals)`` of the latency table."""
_SERVER_COLUMNS: tuple[str, ...] = ("server TTFT ms", "server queue ms")
_SERVER_TPOT_COLUMN = "server TPOT ms"  # issue 22: the engine's clock, where it judges
_LATENCY_TITLE = (
    "Latency percentiles (p50 / p90 / p99 per request; ITL over all chunks; "
    "numpy linear interpolation, as vLLM's bench)"
)


def _pct_text(p: Percentiles | None, digits: int) -> str:
    if p is None or (p.p50 is None and p.p90 is None and p.p99 is None):
        return "—"
    return " / ".join(_fmt(v, digits) for v in (p.p50, p.p90, p.p99))


def _with_server(lines: Sequence[ScorecardLine]) -> bool:
    return any(ln.server_ttft_ms is not None or ln.server_queue_ms is not None for ln in lines)


def _with_server_tpot(lines: Sequence[ScorecardLine]) -> bool:
    """Issue 22: the engine's TPOT shows beside the client's in the text, markdown and
    HTML latency table where it matters: a verdict judged on the server clock or
    withheld for a clock disagreement (CSV, JSON and pandas always carry it)."""
    return any(
        ln.server_tpot_ms is not None
        and ln.verdict is not None
        and (
            ln.verdict.clock is Clock.server
            or RefusalReason.clock_disagreement in ln.verdict.reasons
        )
        for ln in lines
    )


def _latency_columns(lines: Sequence[ScorecardLine]) -> tuple[str, ...]:
    heads = [f"{head} p50/p90/p99" for _, head, _ in _LATENCY_METRICS]
    if _with_server(lines):  # the engine's own TTFT and queueing, beside the client's TTFT
        heads[1:1] = _SERVER_COLUMNS
    if _with_server_tpot(lines):
        heads.insert(heads.index("TPOT ms p50/p90/p99"), _SERVER_TPOT_COLUMN)
    return ("cell", "load", "route", *heads)


def _latency_cells(lines: Sequence[ScorecardLine]) -> list[list[str]]:
    """The latency table's rows; none when no line has a percentile or a server time."""
    known = (
        _pct_text(getattr(ln.dispersion, f), 1) != "—"
        for ln in lines
        for f, _, _ in _LATENCY_METRICS
    )
    if not _with_server(lines) and not any(known):
        return []
    out: list[list[str]] = []
    for ln in lines:
        cells = [_pct_text(getattr(ln.dispersion, f), d) for f, _, d in _LATENCY_METRICS]
        if _with_server(lines):
            cells[1:1] = [_fmt(ln.server_ttft_ms, 1), _fmt(ln.server_queue_ms, 1)]
        if _with_server_tpot(lines):
            cells.insert(len(cells) - 3, _fmt(ln.server_tpot_ms, 2))
        out.append([ln.cell, ln.load, ln.route, *cells])
    return out


def _fixed_width(table: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    out = []
    for i, r in enumerate(table):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


_COLUMNS: tuple[str, ...] = (
    "cell",
    "load",
    "route",
    "spec",
    "parity",
    "accept",
    "acc.len",
    "TPOT ms",
    "TTFT ms",
    "tok/s",
    "thru tok/s",
    "n (err)",
    "speedup",
)
_SERVER_CLOCK_TPOT = "TPOT ms (server)"
"""The main TPOT column's head when the plan judges on the server clock (``clock =
"server"``): its figures are then the engine's own TPOT (``server_tpot_ms``)."""
_GOODPUT_COLUMN = "goodput/s"
_CLIENT_COLUMN = "client"  # issue 22: the client-clock flag, shown when a line has one


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
    ) -> None:
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
        )


def _with_margin(first: str | None, r: Row) -> str | None:
    """Issue 21: the first divergence with ``off``'s margin there (nats), when known."""
    if first is None or r.divergences_near_tie is None:
        return first
    m = r.first_divergence_margin_nats
    return first + (f" [off's margin {m:.3f} nats]" if m is not None else " [no margin]")


def _divergence_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """Issue 21: one line per route and cell (and load points) explaining its divergences."""
    groups: dict[tuple[str, str, str], list[ScorecardLine]] = {}
    for ln in lines:
        if ln.divergence_note and ln.speculative is not Speculative.off:
            groups.setdefault((ln.route, ln.cell, ln.divergence_note), []).append(ln)
    return [
        f"{route} @ {cell}{_loads_of(lns)}: {note}" for (route, cell, note), lns in groups.items()
    ]


def _loads_of(lines: Sequence[ScorecardLine]) -> str:
    """`` (c=1, c=3, c=5)``: the lines' load points in ascending load (a ``[search]``
    level is measured after the sweep's), or nothing for a run without load points."""
    loads = [ln.load for ln in sorted(lines, key=lambda x: x.load_level or 0.0)]
    return f" ({', '.join(loads)})" if loads != ["—"] else ""


def _line(
    r: Row, base: Row | None, verdict: SpeedupVerdict | None, d: ParityDetail | None
) -> ScorecardLine:
    lp = load_point(r)
    return ScorecardLine(
        cell=cell_id(r),
        route=r.route_label or r.speculative.value,
        speculative=r.speculative,
        baseline=(base.route_label or base.speculative.value) if base else None,
        load=load_words(r)[0],
        load_level=lp.level if lp is not None else None,
        load_phrase=load_words(r)[1],
        quality_parity=r.quality_parity,
        parity_detail=r.parity_detail,
        accepted_token_ratio=r.accepted_token_ratio,
        acceptance_length=r.acceptance_length,
        acceptance_scope=r.acceptance_scope,
        ttft_ms=r.ttft_ms,
        tpot_ms=r.tpot_ms,
        e2e_ms=r.e2e_ms,
        output_toks_per_s=r.output_toks_per_s,
        n_requests=r.n_requests,
        n_errors=r.n_errors,
        verdict=verdict,
        first_divergence=_with_margin(d.first_divergence if d else None, r),
        task_flips=d.task_flips if d else (),
        parity_basis=r.parity_basis,
        first_divergence_margin_nats=r.first_divergence_margin_nats,
        divergence_note=r.divergence_note,
        output_throughput_toks_per_s=r.output_throughput_toks_per_s,
        goodput_req_per_s=r.goodput_req_per_s,
        slo_attainment=r.slo_attainment,
        schedule_lagged=r.schedule_lagged,
        client_saturated=r.client_saturated,
        acceptance_by_position=r.acceptance_by_position,
        spec_tokens=r.spec_tokens,
        sse_ignored_lines=r.sse_ignored_lines,
        output_short=r.output_short,
        n_output_short=r.n_output_short,
        categories=_category_lines(
            base,
            r,
            verdict.metric if verdict else SpeedupMetric.tpot_ms,
            verdict is not None and RefusalReason.results_tampered in verdict.reasons,
        ),
        turns=r.turns,
        dispersion=r.dispersion,
        server_ttft_ms=r.server_ttft_ms,
        server_queue_ms=r.server_queue_ms,
        client_starved=r.client_starved,
        n_client_starved=r.n_client_starved,
        client_stall_ms=r.client_stall_ms,
        client_cpu_share=r.client_cpu_share,
        client_core_wait_share=r.client_core_wait_share,
        client_cores=r.client_cores,
        client_load_1m=r.client_load_1m,
        server_tpot_ms=r.server_tpot_ms,
        prefix_cache_hit_rate=r.prefix_cache_hit_rate,  # issue 23
        kv_cache_usage_peak=r.kv_cache_usage_peak,
        queue_depth_peak=r.queue_depth_peak,
        route_identity=r.route_identity,
        route_identity_detail=r.route_identity_detail,
        tokens_past_eos=r.tokens_past_eos,  # issue 23
    )


def _x(v: float) -> str:
    """A speedup figure, e.g. ``1.60×``."""
    return f"{v:.2f}×"


def crossover_text(route: str, cell: str, points: Sequence[tuple[str, float]]) -> str:
    """One sentence on where ``route`` stops paying in ``cell``.

    ``points``: ``(load phrase, credited speedup)`` in ascending load, e.g.
    ``[("concurrency 1", 1.6), ("concurrency 16", 1.2), ("concurrency 64", 0.91)]``
    gives "mtp @ 1k/256/non_think: pays up to concurrency 16 (1.60× → 1.20×); at
    concurrency 64 it is 0.91×". Only credited loads are points, so the sentence
    speaks of credited loads (:meth:`Scorecard.crossovers` names the others).
    """
    head = f"{route} @ {cell}: "
    paying = 0
    while paying < len(points) and points[paying][1] > 1.0:
        paying += 1
    if len(points) == 1:
        load, v = points[0]
        return head + ("pays" if paying else "does not pay") + f" at {load} ({_x(v)})"
    if paying == len(points):
        first, last = points[0], points[-1]
        return (
            head
            + f"pays at every credited load ({_x(first[1])} at {first[0]} → "
            + (f"{_x(last[1])} at {last[0]})")
        )
    if paying == 0:
        listing = ", ".join(f"{_x(v)} at {p}" for p, v in points)
        return head + f"does not pay at any credited load ({listing})"
    text = (
        head + f"pays up to {points[paying - 1][0]} ({_x(points[0][1])} → "
        f"{_x(points[paying - 1][1])}); at {points[paying][0]} it is {_x(points[paying][1])}"
    )
    rest = [f"{_x(v)} at {p}" for p, v in points[paying + 1 :]]
    return text + (f" (then {', '.join(rest)})" if rest else "")


def _positions_text(by_pos: tuple[float, ...] | None) -> str | None:
    return " ".join(f"{f:.2f}" for f in by_pos) if by_pos is not None else None


def _detail_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """Per-position acceptance and ignored SSE lines, one note per line that has them
    (the client's health: one note per client flag, :func:`run_diagnoses`)."""
    notes: list[str] = []
    for ln in lines:
        where = f"{ln.route} @ {ln.cell}" + (f" ({ln.load})" if ln.load != "—" else "")
        if ln.acceptance_by_position is not None:
            depth = f", depth {ln.spec_tokens}" if ln.spec_tokens is not None else ""
            notes.append(
                f"{where}: acceptance by draft position 1.."
                f"{len(ln.acceptance_by_position)}{depth}: "
                f"{_positions_text(ln.acceptance_by_position)}"
            )
        if ln.sse_ignored_lines:
            notes.append(
                f"{where}: {ln.sse_ignored_lines} SSE line(s) ignored "
                "(unknown or padded field names): streamed text may be incomplete"
            )
    return notes


def _identity_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """One note per distinct refused or flagged route identity (the loads listed)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for ln in lines:
        if ln.route_identity in (RouteIdentity.refused, RouteIdentity.flagged):
            status = ln.route_identity.value if ln.route_identity else ""
            key = (status, ln.route_identity_detail or "no detail")
            groups.setdefault(key, []).append(ln.load)
    out = []
    for (status, detail), loads in groups.items():
        where = f" ({', '.join(dict.fromkeys(loads))})" if loads != ["—"] else ""
        out.append(f"route identity {status}{where}: {detail}")
    return out


def _pct_fields(name: str, p: Percentiles | None, which: Sequence[str]) -> dict[str, Any]:
    """``{"<name>_p90_ms": ..., ...}`` of ``p`` (``None`` where unknown)."""
    return {f"{name}_{q}_ms": getattr(p, q) if p is not None else None for q in which}


def html_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An HTML ``<table>`` of ``columns`` and ``rows`` of text cells, every text escaped."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Scorecard:
    """Scorecard lines in row order, with renderings.

    Build with :meth:`from_rows`, :meth:`from_run` or :meth:`from_results`.
    ``rows``: the rows behind the lines, in line order (empty when built from
    lines alone; :meth:`plot` needs them). ``meta``: the run's metadata (model,
    plan hash, dates, deepseekbench version, engines) when built from a run;
    every rendering carries it.
    """

    def __init__(
        self,
        lines: Sequence[ScorecardLine],
        *,
        metric: SpeedupMetric,
        client_workers: int | None = None,
        rows: Sequence[Row] = (),
        meta: RunMeta | None = None,
    ) -> None:
        self.lines: tuple[ScorecardLine, ...] = tuple(lines)
        self.meta = meta
        self.metric = metric
        self.client_workers = client_workers  # the run's plan key workers, when known
        self.rows: tuple[Row, ...] = tuple(rows)
        # issue 24: depth grids (route label -> grid label) and the metric per round
        self.grids: dict[str, str] = {}
        self.round_values: Mapping[str, Mapping[int, float]] = {}
        # the clock the verdicts were judged on: the main TPOT column shows its figure
        self.clock: Clock = Clock.client
        # issue 24: capacity under SLO, set by from_run when the plan has [search]
        self.capacity: CapacityReport | None = None

    # ------------------------------------------------------------ building
    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Row],
        *,
        samples: Mapping[str, Sequence[float]] | None = None,
        details: Mapping[str, ParityDetail] | None = None,
        metric: SpeedupMetric | str = SpeedupMetric.tpot_ms,
        n_resamples: int = 2000,
        seed: int = 0,
        rounds: Mapping[str, Mapping[int, float]] | None = None,
        clock: Clock | str = Clock.client,
        results_tampered: bool = False,
    ) -> Scorecard:
        """Judge every speculative row against the ``off`` row of its cell and load.

        Args:
            rows: rows of any cells, load points and routes.
            samples: per-request values of ``metric`` keyed by :func:`line_key`;
                where both sides have them, a printed speedup gets a 95 % bootstrap
                interval.
            details: first divergence and task flips keyed by :func:`line_key`.
            metric: the speedup metric (default TPOT).
            rounds: ``metric`` per round keyed by :func:`line_key`; where both sides
                share 2 or more rounds, a printed speedup's figure and interval come
                from the paired rounds (:func:`paired_speedup_ci`) instead.
            clock: ``"client"`` or ``"server"`` (issue 22; see
                :func:`~deepseekbench.compare_speedup`); ``samples``/``rounds`` are then
                of the clock's own field (:func:`evidence_field`).
            results_tampered: the rows come from an edited results file: every
                speedup is refused (``results_tampered``).

        Raises:
            ValueError: ``metric`` is unknown.
        """
        m = SpeedupMetric(metric)
        offs: dict[tuple[Any, ...], Row] = {}
        for r in rows:
            if r.speculative is Speculative.off:
                offs.setdefault(_pair_key(r), r)
        judge = _Judge(m, samples, rounds, n_resamples, seed, Clock(clock), results_tampered)
        lines: list[ScorecardLine] = []
        for r in rows:
            base = None if r.speculative is Speculative.off else offs.get(_pair_key(r))
            verdict = judge.verdict(base, r) if base is not None else None
            d = details.get(line_key(r)) if details is not None else None
            lines.append(_line(r, base, verdict, d))
        card = cls(lines, metric=m, rows=rows)
        card.round_values = rounds or {}
        card.clock = Clock(clock)
        return card

    @classmethod
    def from_run(
        cls, result: RunResult, *, metric: SpeedupMetric | str = SpeedupMetric.tpot_ms
    ) -> Scorecard:
        """The scorecard of a :class:`~deepseekbench.RunResult` (samples, rounds and
        details included).

        Raises:
            ValueError: ``metric`` is not a :class:`SpeedupMetric` value.
        """
        m = SpeedupMetric(metric)
        samples: dict[str, list[float]] = {}
        rounds: dict[str, dict[int, float]] = {}
        details: dict[str, ParityDetail] = {}
        clock = result.plan.clock  # issue 22: the plan's clock judges
        for row, (route, cell, load) in zip(result.rows, result.row_keys, strict=True):
            key = line_key(row)
            row_samples, rounds[key] = result.speedup_evidence(row, evidence_field(m, clock))
            if row_samples is not None:
                samples[key] = list(row_samples)
            rp = result.parity.get((route, row.reasoning_mode))
            traffic = result.traffic.get((route, cell, load))
            # the parity set's divergence first (it names the prompt); the measured
            # traffic's when the parity set passed
            first = rp.first_divergence if rp is not None else None
            if first is None and traffic is not None and traffic.first_divergence is not None:
                first = "measured traffic, " + traffic.first_divergence.describe("off", route)
            details[key] = ParityDetail(
                first_divergence=first, task_flips=rp.task_flips if rp is not None else ()
            )
        card = cls.from_rows(
            result.rows,
            samples=samples,
            details=details,
            metric=m,
            rounds=rounds,
            clock=clock,
            results_tampered=result.results_tampered,
        )
        card.client_workers = result.plan.workers
        card.meta = result.meta
        card.grids = {r.label: r.grid_of for r in result.plan.routes if r.grid_of is not None}
        card.capacity = capacity_report(result, metric=m)  # issue 24
        return card

    @classmethod
    def from_results(
        cls, path: str | Path, *, metric: SpeedupMetric | str = SpeedupMetric.tpot_ms
    ) -> Scorecard:
        """Rebuild the scorecard from a results JSONL file written by ``run_plan``.

        Raises:
            ResultsFormatError: the file cannot be read back.
            ValueError: ``metric`` is not a :class:`SpeedupMetric` value.
        """
        return cls.from_run(load_results(path), metric=metric)

    # ------------------------------------------------------------ queries
    @property
    def credited(self) -> tuple[ScorecardLine, ...]:
        """Lines showing a speedup figure."""
        return tuple(ln for ln in self.lines if ln.credited)

    @property
    def refused(self) -> tuple[ScorecardLine, ...]:
        """Speculative lines with no speedup figure."""
        return tuple(
            ln for ln in self.lines if ln.speculative is not Speculative.off and not ln.credited
        )

    # ------------------------------------------------------------ cells
    def _cells(self, ln: ScorecardLine) -> list[str]:
        scope = "*" if _server_wide_marked(ln) else ""
        ratio = (
            f"{ln.accepted_token_ratio:.2f}{scope}" if ln.accepted_token_ratio is not None else "—"
        )
        length = f"{ln.acceptance_length:.2f}{scope}" if ln.acceptance_length is not None else "—"
        cells = [
            ln.cell,
            ln.load + ("!" if ln.schedule_lagged else ""),
            ln.route,
            ln.speculative.value,
            ln.quality_parity.value,
            ratio,
            length,
            _fmt(ln.server_tpot_ms if self.clock is Clock.server else ln.tpot_ms, 2),
            _fmt(ln.ttft_ms, 1),
            _fmt(ln.output_toks_per_s, 1),
            _fmt(ln.output_throughput_toks_per_s, 1),
            f"{ln.n_requests} ({ln.n_errors})",
            ln.speedup_text,
        ]
        if self._with_goodput:
            slo = f" ({ln.slo_attainment:.0%})" if ln.slo_attainment is not None else ""
            cells.insert(-2, _fmt(ln.goodput_req_per_s, 2) + slo)
        if self._with_client_flag:
            cells.insert(-1, ln.client_flag or "—")
        return cells

    @property
    def _with_client_flag(self) -> bool:
        """Issue 22: the ``client`` column shows only when some line is flagged."""
        return any(ln.client_flag for ln in self.lines)

    @property
    def _with_goodput(self) -> bool:
        return any(ln.goodput_req_per_s is not None for ln in self.lines)

    @property
    def _columns(self) -> tuple[str, ...]:
        cols = _COLUMNS
        if self.clock is Clock.server:  # the TPOT the verdicts used: the engine's own
            cols = tuple(_SERVER_CLOCK_TPOT if c == "TPOT ms" else c for c in cols)
        if self._with_goodput:
            cols = (*_COLUMNS[:-2], _GOODPUT_COLUMN, *_COLUMNS[-2:])
        if self._with_client_flag:
            cols = (*cols[:-1], _CLIENT_COLUMN, cols[-1])
        return cols

    def crossovers(self) -> tuple[str, ...]:
        """Per route and cell measured at 2 or more load points: where it stops paying
        (:func:`crossover_text` over its credited speedups, ascending load), plus the
        loads where no speedup was credited."""
        groups: dict[tuple[str, str], list[ScorecardLine]] = {}
        for ln in self.lines:
            if ln.speculative is not Speculative.off and ln.load_level is not None:
                groups.setdefault((ln.route, ln.cell), []).append(ln)
        out: list[str] = []
        for (route, cell), lns in groups.items():
            if len(lns) < 2:
                continue
            lns.sort(key=lambda x: x.load_level or 0.0)
            points = [
                (x.load_phrase, x.verdict.speedup)
                for x in lns
                if x.verdict is not None and x.verdict.speedup is not None
            ]
            refused = [x.load_phrase for x in lns if not x.credited]
            text = crossover_text(route, cell, points) if points else f"{route} @ {cell}: "
            if refused:
                text += ("; " if points else "") + "no speedup credited at " + ", ".join(refused)
            out.append(text)
        return tuple(out)

    def best_configs(self) -> list[BestConfig]:
        """The best configuration per depth grid, cell and load point (issue 24):
        the highest conservative score (median of the paired-round speedups minus
        their MAD; the idea of vLLM's ``tune_speculative_k.py``) among credited
        configurations, by this scorecard's metric, never by acceptance rate
        (:mod:`deepseekbench._analysis._best_config`). Empty when the run had no
        grid (a launched route with a list of depths, draft models or methods)."""
        if not self.grids or not self.rows:
            return []
        return grid_choices(
            self.lines, self.rows, self.grids, self.round_values, self.metric, line_key
        )

    def best_config_json(self) -> str:
        """:meth:`best_configs` as JSON a deployment can read:
        ``{"metric", "score_rule", "choices": [{"grid", "cell", "load", "best",
        "score", "speedup", "spec_config", "acceptance_length",
        "acceptance_by_position", "candidates"}, ...]}``."""
        return grid_json(self.best_configs(), self.metric)

    def _notes(self) -> list[str]:
        notes: list[str] = [f"crossover: {c}" for c in self.crossovers()]
        # One note per route, cell and explanation; the load points it holds at are listed.
        groups: dict[tuple[Any, ...], list[ScorecardLine]] = {}
        for ln in self.lines:
            if ln.credited or (
                ln.speculative is Speculative.off and ln.quality_parity is QualityParity.verified
            ):
                continue
            key = (ln.route, ln.cell, ln.speculative is Speculative.off, ln.quality_parity,
                   ln.parity_detail, ln.first_divergence, ln.task_flips)  # fmt: skip
            groups.setdefault(key, []).append(ln)
        for (route, cell, is_off, parity, detail, first, flips), lns in groups.items():
            where = f"{route} @ {cell}{_loads_of(lns)}"
            if is_off:
                notes.append(f"{where}: baseline parity {parity.value} — {detail or 'no detail'}")
                continue
            notes.append(
                f"{where}: no speedup credited; parity {parity.value} — {detail or 'no detail'}"
            )
            if first:
                notes.append(f"  first divergence: {first}")
            if flips:
                notes.append(f"  task flips ({len(flips)}):")
                notes.extend(f"    {f}" for f in flips)
        notes.extend(_detail_notes(self.lines))
        notes.extend(run_diagnoses(self.lines, self.client_workers))  # one per client flag
        notes.extend(server_side_notes(self.lines))  # issue 23
        notes.extend(_identity_notes(self.lines))  # issue 24
        notes.extend(_divergence_notes(self.lines))  # issue 21
        notes.extend(  # issue 23
            past_eos_notes(
                (
                    f"{ln.route} @ {ln.cell}" + (f" ({ln.load})" if ln.load != "—" else ""),
                    ln.tokens_past_eos,
                )
                for ln in self.lines
                if ln.speculative is not Speculative.off
            )
        )
        for ln in self.lines:
            if ln.output_short:
                where = f"{ln.route} @ {ln.cell}" + (f" ({ln.load})" if ln.load != "—" else "")
                notes.append(
                    f"{where}: {ln.n_output_short} of {ln.n_requests} outputs "
                    "fell short of max_tokens: decode is under-measured at this output target"
                )
        if any(_server_wide_marked(ln) for ln in self.lines):  # the footnote of a shown "*"
            notes.append("* acceptance is a server-wide /metrics delta, not per request")
        if any(ln.schedule_lagged for ln in self.lines):
            notes.append(
                "! the open-loop schedule lagged (p90 queue_ms above arrival.max_lag_ms): "
                "the client, not the server, may have limited the load"
            )
        if any(ln.verdict is not None and ln.verdict.rounds for ln in self.lines):
            notes.append(
                "speedups with rounds: geometric mean of the paired round ratios, 95% CI a "
                "Student-t interval on their logs"
            )
        return notes

    # ------------------------------------------------------------ renderings
    def _integrity_lines(self) -> list[str]:
        """``Results file: ...`` when the results file is not verified (edited, or
        written before digest chains; ``RunMeta.results_integrity``), else nothing."""
        note = self.meta.results_integrity if self.meta is not None else None
        return [f"Results file: {note}"] if note else []

    def to_text(self) -> str:
        """A fixed-width terminal table plus notes on every refused line."""
        table = [list(self._columns)] + [self._cells(ln) for ln in self.lines]
        widths = [max(len(r[i]) for r in table) for i in range(len(self._columns))]
        on = " on the server clock" if self.clock is Clock.server else ""
        out = [
            f"Scorecard (speedup by {self.metric.value}{on}; credited only with parity "
            "verified on both sides)"
        ]
        if self.meta is not None:
            out.append(f"Run: {self.meta.describe()}")
        out += self._integrity_lines()
        for i, r in enumerate(table):
            out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
            if i == 0:
                out.append("  ".join("-" * w for w in widths))
        cats = [row for ln in self.lines for row in _category_cells(ln)]
        if cats:
            out.append("")
            out.append("Per category (acceptance and speedup per dataset category)")
            out.extend(_fixed_width([list(_CATEGORY_COLUMNS), *cats]))
        turns = [row for ln in self.lines for row in _turn_cells(ln)]
        if turns:
            out.append("")
            out.append("Per turn (multi-turn conversations)")
            out.extend(_fixed_width([list(_TURN_COLUMNS), *turns]))
        best = grid_text(self.best_configs(), self.metric)  # issue 24
        if best:
            out.append("")
            out.extend(best)
        latency = _latency_cells(self.lines)
        if latency:
            out.append("")
            out.append(_LATENCY_TITLE)
            out.extend(_fixed_width([list(_latency_columns(self.lines)), *latency]))
        if self.capacity is not None:  # issue 24
            out += ["", *self.capacity.lines()]
        notes = self._notes()
        if notes:
            out.append("")
            out.extend(notes)
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return (
            f"Scorecard(lines={len(self.lines)}, credited={len(self.credited)}, "
            f"refused={len(self.refused)}, metric={self.metric.value!r})"
        )

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table plus a bullet list of notes."""

        def esc(s: str) -> str:  # "*" literal: a footnote marker, never emphasis or a bullet
            return s.replace("|", "\\|").replace("*", "\\*").replace("\n", " ")

        out = [f"Run: {esc(self.meta.describe())}", ""] if self.meta is not None else []
        out += [item for x in self._integrity_lines() for item in (f"**{esc(x)}**", "")]
        out += ["| " + " | ".join(self._columns) + " |", "|" + "---|" * len(self._columns)]
        out += ["| " + " | ".join(esc(c) for c in self._cells(ln)) + " |" for ln in self.lines]
        cats = [row for ln in self.lines for row in _category_cells(ln)]
        if cats:
            out += ["", "| " + " | ".join(_CATEGORY_COLUMNS) + " |"]
            out.append("|" + "---|" * len(_CATEGORY_COLUMNS))
            out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in cats]
        turns = [row for ln in self.lines for row in _turn_cells(ln)]
        if turns:
            out += ["", "| " + " | ".join(_TURN_COLUMNS) + " |"]
            out.append("|" + "---|" * len(_TURN_COLUMNS))
            out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in turns]
        latency = _latency_cells(self.lines)
        if latency:
            columns = _latency_columns(self.lines)
            out += ["", f"{_LATENCY_TITLE}:", "", "| " + " | ".join(columns) + " |"]
            out.append("|" + "---|" * len(columns))
            out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in latency]
        if self.capacity is not None:  # issue 24
            head, *items = self.capacity.lines()
            out += ["", f"{esc(head)}:", "", *(f"- {esc(x.strip())}" for x in items)]
        notes = self._notes()
        if notes:
            out.append("")
            out += [f"- {esc(n.strip())}" for n in notes]
        return "\n".join(out) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """``{"metric", "run", "lines": [...]}``; ``run`` is the run's metadata
        (:class:`~deepseekbench.RunMeta` fields, ``null`` when unknown); each line's
        ``speedup`` is ``null`` unless credited; ``best_configs`` (only when the run
        had a depth grid): :meth:`best_configs`. A run with ``[search]`` adds
        ``capacity`` (:meth:`~deepseekbench._analysis._capacity.CapacityReport.to_dict`)."""
        lines = []
        for ln in self.lines:
            d = ln.model_dump(mode="json")
            d["speedup"] = ln.verdict.speedup if ln.verdict is not None else None
            d["speedup_text"] = ln.speedup_text
            d["client_flag"] = ln.client_flag  # issue 22
            lines.append(d)
        meta = self.meta.model_dump(mode="json") if self.meta is not None else None
        out: dict[str, Any] = {"metric": self.metric.value, "run": meta, "lines": lines}
        best = self.best_configs()  # issue 24: only when the run had a depth grid
        if best:
            out["best_configs"] = [c.model_dump(mode="json") for c in best]
        if self.capacity is not None:  # issue 24
            out["capacity"] = self.capacity.to_dict()
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON text."""
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2).decode()

    _CSV_FIELDS: tuple[str, ...] = (
        "cell",
        "load",
        "route",
        "speculative",
        "baseline",
        "quality_parity",
        "accepted_token_ratio",
        "acceptance_length",
        "acceptance_scope",
        "ttft_ms",
        "ttft_p90_ms",
        "ttft_p99_ms",
        "server_ttft_ms",
        "server_queue_ms",
        "tpot_ms",
        "tpot_p90_ms",
        "tpot_p99_ms",
        "itl_p50_ms",
        "itl_p90_ms",
        "itl_p99_ms",
        "e2e_ms",
        "e2e_p90_ms",
        "e2e_p99_ms",
        "output_toks_per_s",
        "output_throughput_toks_per_s",
        "goodput_req_per_s",
        "slo_attainment",
        "schedule_lagged",
        "n_requests",
        "n_errors",
        "speedup",
        "ci95_low",
        "ci95_high",
        "rounds",
        "refusal_reasons",
        "parity_detail",
        "first_divergence",
        "task_flips",
        "acceptance_by_position",
        "spec_tokens",
        "sse_ignored_lines",
        "model",
        "plan_hash",
        "run_started_at",
        "engine",
        "results_integrity",
        # issue 22: client clock health
        "client_flag",
        "n_client_starved",
        "client_stall_ms",
        "client_cpu_share",
        "client_core_wait_share",
        "server_tpot_ms",
        # issue 21
        "parity_basis",
        "first_divergence_margin_nats",
        "divergence_note",
    )

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per line (the CSV and DataFrame columns; the run's metadata in
        ``model``, ``plan_hash``, ``run_started_at`` and ``engine``, empty when unknown)."""
        recs = []
        meta = self.meta
        for ln in self.lines:
            v = ln.verdict
            recs.append(
                {
                    "cell": ln.cell,
                    "load": ln.load,
                    "route": ln.route,
                    "speculative": ln.speculative.value,
                    "baseline": ln.baseline,
                    "quality_parity": ln.quality_parity.value,
                    "accepted_token_ratio": ln.accepted_token_ratio,
                    "acceptance_length": ln.acceptance_length,
                    "acceptance_scope": ln.acceptance_scope.value if ln.acceptance_scope else None,
                    "ttft_ms": ln.ttft_ms,
                    **_pct_fields("ttft", ln.dispersion.ttft_ms, ("p90", "p99")),
                    "server_ttft_ms": ln.server_ttft_ms,
                    "server_queue_ms": ln.server_queue_ms,
                    "tpot_ms": ln.tpot_ms,
                    **_pct_fields("tpot", ln.dispersion.tpot_ms, ("p90", "p99")),
                    **_pct_fields("itl", ln.dispersion.itl_ms, ("p50", "p90", "p99")),
                    "e2e_ms": ln.e2e_ms,
                    **_pct_fields("e2e", ln.dispersion.e2e_ms, ("p90", "p99")),
                    "output_toks_per_s": ln.output_toks_per_s,
                    "output_throughput_toks_per_s": ln.output_throughput_toks_per_s,
                    "goodput_req_per_s": ln.goodput_req_per_s,
                    "slo_attainment": ln.slo_attainment,
                    "schedule_lagged": ln.schedule_lagged,
                    "n_requests": ln.n_requests,
                    "n_errors": ln.n_errors,
                    "speedup": v.speedup if v is not None else None,
                    "ci95_low": v.ci_low if v is not None else None,
                    "ci95_high": v.ci_high if v is not None else None,
                    "rounds": v.rounds if v is not None else None,
                    "refusal_reasons": (
                        " ".join(r.value for r in v.reasons)
                        if v is not None
                        else ("no_off_baseline" if ln.speculative is not Speculative.off else "")
                    ),
                    "parity_detail": ln.parity_detail,
                    "first_divergence": ln.first_divergence,
                    "task_flips": " | ".join(ln.task_flips),
                    "acceptance_by_position": _positions_text(ln.acceptance_by_position),
                    "spec_tokens": ln.spec_tokens,
                    "sse_ignored_lines": ln.sse_ignored_lines,
                    "model": meta.model if meta else None,
                    "plan_hash": meta.plan_hash if meta else None,
                    "run_started_at": meta.started_at if meta else None,
                    "engine": meta.engines.get(ln.route) if meta else None,
                    "results_integrity": meta.results_integrity if meta else None,
                    "client_flag": ln.client_flag,
                    "n_client_starved": ln.n_client_starved,
                    "client_stall_ms": ln.client_stall_ms,
                    "client_cpu_share": ln.client_cpu_share,
                    "client_core_wait_share": ln.client_core_wait_share,
                    "server_tpot_ms": ln.server_tpot_ms,
                    "parity_basis": ln.parity_basis,  # issue 21
                    "first_divergence_margin_nats": ln.first_divergence_margin_nats,
                    "divergence_note": ln.divergence_note,
                }
            )
        return recs

    def to_csv(self) -> str:
        """CSV with a header row; ``speedup`` is empty unless credited."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self._CSV_FIELDS, lineterminator="\n")
        w.writeheader()
        for rec in self.to_records():
            w.writerow({k: "" if v is None else v for k, v in rec.items()})
        return buf.getvalue()

    def _repr_html_(self) -> str:
        """The main table, the per-category and per-turn tables (when the rows have
        them, as in :meth:`to_text`) and the notes, as an HTML fragment."""
        out = html_table(self._columns, [self._cells(ln) for ln in self.lines])
        cats = [row for ln in self.lines for row in _category_cells(ln)]
        if cats:
            out += "<h3>Per category (acceptance and speedup per dataset category)</h3>"
            out += html_table(_CATEGORY_COLUMNS, cats)
        turns = [row for ln in self.lines for row in _turn_cells(ln)]
        if turns:
            out += "<h3>Per turn (multi-turn conversations)</h3>"
            out += html_table(_TURN_COLUMNS, turns)
        latency = _latency_cells(self.lines)
        if latency:
            out += f"<h3>{html.escape(_LATENCY_TITLE)}</h3>"
            out += html_table(_latency_columns(self.lines), latency)
        if self.capacity is not None:  # issue 24
            head, *items = self.capacity.lines()
            out += f"<h3>{html.escape(head)}</h3><ul>"
            out += "".join(f"<li>{html.escape(x.strip())}</li>" for x in items) + "</ul>"
        notes = "".join(f"<li>{html.escape(n.strip())}</li>" for n in self._notes())
        run = f"<p>Run: {html.escape(self.meta.describe())}</p>" if self.meta else ""
        run += "".join(f"<p><strong>{html.escape(x)}</strong></p>" for x in self._integrity_lines())
        return run + out + (f"<ul>{notes}</ul>" if notes else "")

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` of :meth:`to_records`.

        Raises:
            MissingExtraError: pandas is not installed (``pip install 'deepseekbench[pandas]'``).
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise MissingExtraError(
                "Scorecard.to_pandas() needs pandas: pip install 'deepseekbench[pandas]'"
            ) from exc
        return pd.DataFrame.from_records(self.to_records(), columns=list(self._CSV_FIELDS))

    def plot(self, path: str | Path | None = None) -> Figure:
        """Speedup vs load per route (95 % CI bars) and TPOT vs output throughput per route.

        Returns the matplotlib ``Figure`` (a notebook displays it); with ``path``
        it is also written there (format from the suffix: ``.png``, ``.svg``,
        ``.pdf``). See ``docs/scorecard.md``.

        Raises:
            MissingExtraError: matplotlib is not installed (``pip install 'deepseekbench[plot]'``).
            ValueError: the scorecard has no rows (built from lines alone), or
                ``path`` has a suffix matplotlib cannot write.
            OSError: ``path`` cannot be written.
        """
        from deepseekbench._report._plot import plot_lines, save_figure

        if len(self.rows) != len(self.lines):
            raise ValueError("plotting needs the rows: build the scorecard with from_rows/from_run")
        fig = plot_lines(self.lines, self.rows, metric=self.metric.value, capacity=self.capacity)
        if path is not None:
            save_figure(fig, path)
        return fig

    def to_html(self, *, plots: bool = True) -> str:
        """One self-contained HTML page: the table, the notes and the plots as inline PNG.

        Nothing is fetched from elsewhere (no scripts, styles or images by URL).
        Without matplotlib the page says how to get the plots
        (``pip install 'deepseekbench[plot]'``) instead of failing.
        """
        from deepseekbench._report._plot import html_page

        return html_page(self._repr_html_(), self.plot if plots else None)

    def render(self, fmt: str = "text") -> str:
        """Render as ``text``, ``markdown``, ``json``, ``csv`` or ``html`` (a whole page).

        Raises:
            ValueError: unknown format.
        """
        renderers = {
            "text": self.to_text,
            "markdown": self.to_markdown,
            "json": self.to_json,
            "csv": self.to_csv,
            "html": self.to_html,
        }
        if fmt not in renderers:
            raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(renderers)}")
        return renderers[fmt]()
