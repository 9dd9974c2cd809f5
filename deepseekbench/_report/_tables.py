"""The scorecard's tables as text cells: main, per category, per turn and latency percentiles.

Holds the column heads and the functions that turn scorecard lines into rows of
text cells (``—`` where a figure is unknown); every format lays out these same
cells, so a figure reads the same in each.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepseekbench._analysis._lines import ScorecardLine
from deepseekbench._analysis._speedup import RefusalReason
from deepseekbench._types._axes import AcceptanceScope, Speculative
from deepseekbench._types._clock import Clock
from deepseekbench._types._row import PER_REQUEST_FIGURES, Percentiles

__all__ = [
    "CATEGORY_COLUMNS",
    "CATEGORY_TITLE",
    "LATENCY_TITLE",
    "TURN_COLUMNS",
    "TURN_TITLE",
    "category_cells",
    "fmt",
    "latency_cells",
    "latency_columns",
    "main_cells",
    "main_columns",
    "server_wide_marked",
    "turn_cells",
]


def fmt(value: float | None, digits: int = 1) -> str:
    """``value`` to ``digits`` decimals, ``—`` when unknown."""
    if value is None:
        return "—"
    return f"{value:.{digits}f}"


def server_wide_marked(ln: ScorecardLine) -> bool:
    """Whether the line's acceptance cells carry the ``*`` marker (a server-wide
    acceptance figure is shown): the footnote is printed exactly when some line does."""
    r = ln.row
    return r.acceptance_scope is AcceptanceScope.server_wide and (
        r.accepted_token_ratio is not None or r.acceptance_length is not None
    )


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
_CLIENT_COLUMN = "client"  # the client-clock flag, shown when a line has one


def _with_client_flag(lines: Sequence[ScorecardLine]) -> bool:
    """The ``client`` column shows only when some line is flagged."""
    return any(ln.client_flag for ln in lines)


def _with_goodput(lines: Sequence[ScorecardLine]) -> bool:
    return any(ln.row.goodput_req_per_s is not None for ln in lines)


def main_columns(lines: Sequence[ScorecardLine], clock: Clock) -> tuple[str, ...]:
    """The main table's heads (``goodput/s`` and ``client`` only where some line has them)."""
    cols = _COLUMNS
    if clock is Clock.server:  # the TPOT the verdicts used: the engine's own
        cols = tuple(_SERVER_CLOCK_TPOT if c == "TPOT ms" else c for c in cols)
    if _with_goodput(lines):
        cols = (*_COLUMNS[:-2], _GOODPUT_COLUMN, *_COLUMNS[-2:])
    if _with_client_flag(lines):
        cols = (*cols[:-1], _CLIENT_COLUMN, cols[-1])
    return cols


def main_cells(lines: Sequence[ScorecardLine], clock: Clock) -> list[list[str]]:
    """The main table's rows, one per line."""
    goodput, flagged = _with_goodput(lines), _with_client_flag(lines)
    return [_main_row(ln, clock, goodput, flagged) for ln in lines]


def _main_row(ln: ScorecardLine, clock: Clock, goodput: bool, flagged: bool) -> list[str]:
    r = ln.row
    scope = "*" if server_wide_marked(ln) else ""
    ratio = f"{r.accepted_token_ratio:.2f}{scope}" if r.accepted_token_ratio is not None else "—"
    length = f"{r.acceptance_length:.2f}{scope}" if r.acceptance_length is not None else "—"
    cells = [
        ln.cell,
        ln.load + ("!" if r.schedule_lagged else ""),
        ln.route,
        r.speculative.value,
        r.quality_parity.value,
        ratio,
        length,
        fmt(r.server_tpot_ms if clock is Clock.server else r.tpot_ms, 2),
        fmt(r.ttft_ms, 1),
        fmt(r.output_toks_per_s, 1),
        fmt(r.output_throughput_toks_per_s, 1),
        f"{r.n_requests} ({r.n_errors})",
        ln.speedup_text,
    ]
    if goodput:
        slo = f" ({r.slo_attainment:.0%})" if r.slo_attainment is not None else ""
        cells.insert(-2, fmt(r.goodput_req_per_s, 2) + slo)
    if flagged:
        cells.insert(-1, ln.client_flag or "—")
    return cells


CATEGORY_TITLE = "Per category (acceptance and speedup per dataset category)"
CATEGORY_COLUMNS: tuple[str, ...] = (
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


def category_cells(lines: Sequence[ScorecardLine]) -> list[list[str]]:
    """Category table rows of every line; none for a line with a single category
    (the main table already gives those figures)."""
    out: list[list[str]] = []
    for ln in lines:
        if len(ln.categories) < 2:
            continue
        for c in ln.categories:
            if ln.row.speculative is Speculative.off:
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
                    fmt(c.accepted_token_ratio, 2),
                    fmt(c.acceptance_length, 2),
                    fmt(c.tpot_ms, 2),
                    speedup,
                ]
            )
    return out


TURN_TITLE = "Per turn (multi-turn conversations)"
TURN_COLUMNS: tuple[str, ...] = (
    "cell",
    "load",
    "route",
    "turn",
    "n",
    "TTFT ms",
    "TPOT ms",
    "acc.len",
)


def turn_cells(lines: Sequence[ScorecardLine]) -> list[list[str]]:
    """Per-turn table rows of every line (multi-turn conversations only)."""
    return [
        [
            ln.cell,
            ln.load,
            ln.route,
            t.name,
            str(t.n_requests),
            fmt(t.ttft_ms, 1),
            fmt(t.tpot_ms, 2),
            fmt(t.acceptance_length, 2),
        ]
        for ln in lines
        for t in ln.row.turns
    ]


_LATENCY_METRICS: tuple[tuple[str, str, int], ...] = tuple(
    (f.name, f.head, f.decimals) for f in PER_REQUEST_FIGURES if f.head is not None
)
"""``(Dispersion field, column head, decimals)`` of the latency table, in the order of
:data:`~deepseekbench._types._row.PER_REQUEST_FIGURES` (the one list of figures)."""
_TPOT_AT = [name for name, _, _ in _LATENCY_METRICS].index("tpot_ms")
_SERVER_COLUMNS: tuple[str, ...] = ("server TTFT ms", "server queue ms")
_SERVER_TPOT_COLUMN = "server TPOT ms"  # the engine's clock, where it judges
LATENCY_TITLE = (
    "Latency percentiles (p50 / p90 / p99 per request; ITL over all chunks; "
    "numpy linear interpolation, as vLLM's bench)"
)


def _pct_text(p: Percentiles | None, digits: int) -> str:
    if p is None or (p.p50 is None and p.p90 is None and p.p99 is None):
        return "—"
    return " / ".join(fmt(v, digits) for v in (p.p50, p.p90, p.p99))


def _with_server(lines: Sequence[ScorecardLine]) -> bool:
    return any(
        ln.row.server_ttft_ms is not None or ln.row.server_queue_ms is not None for ln in lines
    )


def _with_server_tpot(lines: Sequence[ScorecardLine]) -> bool:
    """The engine's TPOT shows beside the client's in the text, markdown and HTML
    latency table where it matters: a verdict judged on the server clock or withheld
    for a clock disagreement (CSV, JSON and pandas always carry it)."""
    return any(
        ln.row.server_tpot_ms is not None
        and ln.verdict is not None
        and (
            ln.verdict.clock is Clock.server
            or RefusalReason.clock_disagreement in ln.verdict.reasons
        )
        for ln in lines
    )


def latency_columns(lines: Sequence[ScorecardLine]) -> tuple[str, ...]:
    """The latency table's heads (the engine's own times only where some line has them)."""
    heads = [f"{head} p50/p90/p99" for _, head, _ in _LATENCY_METRICS]
    if _with_server(lines):  # the engine's own TTFT and queueing, beside the client's TTFT
        heads[1:1] = _SERVER_COLUMNS
    if _with_server_tpot(lines):
        heads.insert(heads.index("TPOT ms p50/p90/p99"), _SERVER_TPOT_COLUMN)
    return ("cell", "load", "route", *heads)


def latency_cells(lines: Sequence[ScorecardLine]) -> list[list[str]]:
    """The latency table's rows; none when no line has a percentile or a server time."""
    known = (
        _pct_text(getattr(ln.row.dispersion, f), 1) != "—"
        for ln in lines
        for f, _, _ in _LATENCY_METRICS
    )
    if not _with_server(lines) and not any(known):
        return []
    out: list[list[str]] = []
    for ln in lines:
        r = ln.row
        cells = [_pct_text(getattr(r.dispersion, f), d) for f, _, d in _LATENCY_METRICS]
        if _with_server_tpot(lines):  # just before the client's TPOT
            cells.insert(_TPOT_AT, fmt(r.server_tpot_ms, 2))
        if _with_server(lines):  # just after the client's TTFT
            cells[1:1] = [fmt(r.server_ttft_ms, 1), fmt(r.server_queue_ms, 1)]
        out.append([ln.cell, ln.load, ln.route, *cells])
    return out
