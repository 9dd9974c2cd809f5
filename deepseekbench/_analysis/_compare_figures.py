"""The figures two runs are compared on: one table entry per figure, and its interval.

A figure is one :class:`Figure` entry: its name, how to read it from a line's
measured requests (per-request columns and the statistic over them) or from its
measurement windows (one value per round), which direction is worse, and the
refusals that keep it from being compared (the same as within a run). Adding a
figure is adding one entry to :data:`FIGURES` (and a test).

**Interval.** Per-request figures: a percentile bootstrap of the change between
the runs — ``B / A`` (``scale="ratio"``) or ``B − A`` (``scale="difference"``, for
fractions that may be 0) — at the family's per-comparison level (Bonferroni:
``alpha / m``). Where the requests name their prompts (workload item ids) the
prompt is the unit, as in the scorecard's speedup interval
(:mod:`deepseekbench._analysis._prompt_bootstrap`): one draw of the prompts both
runs measured, shared by every line (the speedup's ``off`` line too), then requests
within each prompt — paired on the prompt, so the change is judged on the same
prompts, and the choice of prompts is covered. Otherwise each run's requests are
resampled independently. Window figures (goodput, prefix-cache hit rate):
a Welch t interval on the rounds' values (log scale for a ratio), at the same
level; with fewer than 2 rounds a side there is no interval and the figure is not
judged. Without prompts, requests of a run with several rounds of equal size are
resampled in two stages (rounds, then requests within them), so a drift between rounds widens the
interval; otherwise requests are resampled as independent. Percentile bootstrap:
Efron & Tibshirani 1993, ch. 13; two-stage: Davison & Hinkley 1997, §3.8; Welch 1947.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from deepseekbench._analysis._prompt_bootstrap import prompt_indices
from deepseekbench._analysis._speedup import MIN_REQUESTS_FOR_SPEEDUP
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._axes import QualityParity, Speculative
from deepseekbench._types._row import Row

__all__ = [
    "FIGURES",
    "P99_MIN_REQUESTS",
    "Figure",
    "Group",
    "SideLine",
    "bootstrap_change",
    "figures_for",
    "point_value",
    "rounds_change",
]

Scale = Literal["ratio", "difference"]
Array = Any  # numpy arrays: (..., n, k) in, (...) out

_Columns = Callable[[StreamMeasurement], "tuple[float, ...] | None"]
_Statistic = Callable[[Array], Array]


@dataclass(frozen=True, slots=True)
class SideLine:
    """One line (route, cell, load) of one run, as the comparison reads it.

    Attributes:
        row: the line's row (figures, flags, parity).
        requests: its successful measured requests (warm-ups excluded).
        request_rounds: the round each request ran in (empty: unknown).
        request_prompts: the prompt (workload item id) of each request (empty, or a
            ``None`` in it: unknown).
        rounds: per window figure name, its value per round (e.g.
            ``goodput_req_per_s`` requests/s, ``prefix_cache_hit_rate`` 0..1).
        tampered: the run's results file was edited after it was written.
    """

    row: Row
    requests: tuple[StreamMeasurement, ...] = ()
    rounds: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    tampered: bool = False
    request_rounds: tuple[int, ...] = ()
    request_prompts: tuple[str | None, ...] = ()


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure of the comparison table.

    Attributes:
        name: its key in outputs (``tpot_p99_ms``). label: in words (``TPOT p99``).
        unit: ``ms``, ``ms/token``, ``tokens``, ``0..1``, ``×``, ``requests/s``.
        higher_is_better: the direction of "better" (a regression is the other way).
        scale: ``ratio`` (change = B / A) or ``difference`` (change = B − A).
        columns: per-request values (a request giving ``None`` is not counted);
            ``None`` for a window figure.
        statistic: of an array ``(..., n, k)`` of those columns, ``(...)``.
        window: the window figure's name in :attr:`SideLine.rounds` (``None``:
            per-request figure).
        row_value: the figure as the row prints it (``None``: not measured).
        baseline: the figure divides the ``off`` line's statistic by its own (the
            speedup); both lines' requests are resampled.
        refusals: why a row's figure is not comparable (beyond the common ones).
        applies: whether the figure exists on a row at all (e.g. acceptance on a
            speculative route only).
        min_requests: the fewest requests a run's line needs for an interval (a p99 of
            fewer than 100 is near the sample's maximum, which no resample exceeds: its
            bootstrap interval is too narrow).
    """

    name: str
    label: str
    unit: str
    higher_is_better: bool
    scale: Scale
    statistic: _Statistic
    row_value: Callable[[Row], float | None]
    columns: _Columns | None = None
    window: str | None = None
    baseline: bool = False
    refusals: Callable[[Row], tuple[str, ...]] = lambda row: ()
    applies: Callable[[Row], bool] = lambda row: True
    min_requests: int = 2


P99_MIN_REQUESTS = 100
"""Requests a line needs in each run before its p99 is judged (1 in 100 lies above it)."""


def _col(name: str) -> _Columns:
    def read(m: StreamMeasurement) -> tuple[float, ...] | None:
        v = getattr(m, name)
        return (float(v),) if v is not None and math.isfinite(v) else None

    return read


def _median(a: Array) -> Array:
    return np.median(a[..., 0], axis=-1)


def _p99(a: Array) -> Array:
    return np.percentile(a[..., 0], 99, axis=-1)


def _ratio_of_sums(a: Array) -> Array:
    num, den = a[..., 0].sum(axis=-1), a[..., 1].sum(axis=-1)
    return np.divide(num, den, out=np.full_like(num, np.nan, dtype=float), where=den > 0)


def _length(a: Array) -> Array:
    return 1.0 + _ratio_of_sums(a)


def _acceptance_counts(m: StreamMeasurement) -> tuple[float, ...] | None:
    if m.accepted_tokens is None or m.draft_tokens is None:
        return None
    return (float(m.accepted_tokens), float(m.draft_tokens))


def _accepted_per_step(m: StreamMeasurement) -> tuple[float, ...] | None:
    steps = m.acceptance.verify_steps if m.acceptance is not None else None
    if m.accepted_tokens is None or not steps:
        return None
    return (float(m.accepted_tokens), float(steps))


def _position(k: int) -> _Columns:
    def read(m: StreamMeasurement) -> tuple[float, ...] | None:
        by = m.acceptance_by_position
        steps = m.acceptance.verify_steps if m.acceptance is not None else None
        if by is None or len(by) <= k or not steps:
            return None
        return (by[k] * steps, float(steps))  # accepted at k, verify steps

    return read


def _speculative(row: Row) -> bool:
    return row.speculative is not Speculative.off


def _tpot_refusals(row: Row) -> tuple[str, ...]:
    out = ("client_starved",) if row.client_starved else ()
    return out + (("tokens_estimated",) if row.tokens_estimated else ())


def _pct(name: str, p: str) -> Callable[[Row], float | None]:
    def read(row: Row) -> float | None:
        ps = getattr(row.dispersion, name)
        return None if ps is None else float(getattr(ps, p))

    return read


def _attr(name: str) -> Callable[[Row], float | None]:
    def read(row: Row) -> float | None:
        v = getattr(row, name)
        return None if v is None else float(v)

    return read


def _by_position(k: int) -> Figure:
    def row_value(row: Row) -> float | None:
        by = row.acceptance_by_position
        return float(by[k]) if by is not None and len(by) > k else None

    return Figure(
        name=f"acceptance_pos_{k + 1}",
        label=f"acceptance at position {k + 1}",
        unit="0..1",
        higher_is_better=True,
        scale="difference",
        columns=_position(k),
        statistic=_ratio_of_sums,
        row_value=row_value,
        applies=lambda row: row_value(row) is not None,
    )


def _percentile_pair(
    metric: str,
    label: str,
    unit: str,
    refusals: Callable[[Row], tuple[str, ...]] = lambda row: (),
) -> tuple[Figure, Figure]:
    """The p50 and p99 figures of a per-request latency ``metric`` (``ttft``, ``tpot``;
    field ``<metric>_ms``, in ``unit``): lower is better, compared as a ratio; the
    p99 needs :data:`P99_MIN_REQUESTS` requests a run."""
    field_name = f"{metric}_ms"
    return (
        Figure(
            name=f"{metric}_p50_ms",
            label=f"{label} p50",
            unit=unit,
            higher_is_better=False,
            scale="ratio",
            columns=_col(field_name),
            statistic=_median,
            row_value=_pct(field_name, "p50"),
            refusals=refusals,
        ),
        Figure(
            name=f"{metric}_p99_ms",
            label=f"{label} p99",
            unit=unit,
            higher_is_better=False,
            scale="ratio",
            columns=_col(field_name),
            statistic=_p99,
            row_value=_pct(field_name, "p99"),
            refusals=refusals,
            min_requests=P99_MIN_REQUESTS,
        ),
    )


FIGURES: tuple[Figure, ...] = (
    Figure(
        name="speedup",
        label="speedup",
        unit="×",
        higher_is_better=True,
        scale="ratio",
        columns=_col("tpot_ms"),
        statistic=_median,
        row_value=lambda row: None,  # filled from the off line (see point_value)
        baseline=True,
        refusals=_tpot_refusals,
        applies=_speculative,
    ),
    Figure(
        name="acceptance_rate",
        label="acceptance rate",
        unit="0..1",
        higher_is_better=True,
        scale="difference",
        columns=_acceptance_counts,
        statistic=_ratio_of_sums,
        row_value=_attr("accepted_token_ratio"),
        applies=_speculative,
    ),
    Figure(
        name="acceptance_length",
        label="acceptance length",
        unit="tokens",
        higher_is_better=True,
        scale="ratio",
        columns=_accepted_per_step,
        statistic=_length,
        row_value=_attr("acceptance_length"),
        applies=_speculative,
    ),
    *_percentile_pair("ttft", "TTFT", "ms"),
    *_percentile_pair("tpot", "TPOT", "ms/token", _tpot_refusals),
    Figure(
        name="goodput_req_per_s",
        label="goodput",
        unit="requests/s",
        higher_is_better=True,
        scale="ratio",
        window="goodput_req_per_s",
        statistic=_median,
        row_value=_attr("goodput_req_per_s"),
        applies=lambda row: row.goodput_req_per_s is not None,
    ),
    Figure(
        name="prefix_cache_hit_rate",
        label="prefix-cache hit rate",
        unit="0..1",
        higher_is_better=True,
        scale="difference",
        window="prefix_cache_hit_rate",
        statistic=_median,
        row_value=_attr("prefix_cache_hit_rate"),
        applies=lambda row: row.prefix_cache_hit_rate is not None,
    ),
)
"""Every figure compared today, in report order; acceptance by position is added per
position a line's rows carry (:func:`figures_for`). Parity is compared as a verdict,
not a figure (``deepseekbench._analysis._compare_runs``)."""


def figures_for(a: Row, b: Row) -> tuple[Figure, ...]:
    """The figures of a line measured in both runs: :data:`FIGURES`, then acceptance at
    each draft position either row carries."""
    depth = max(len(a.acceptance_by_position or ()), len(b.acceptance_by_position or ()))
    return (*FIGURES, *(_by_position(k) for k in range(depth)))


def common_refusals(fig: Figure, row: Row, tampered: bool) -> tuple[str, ...]:
    """Why ``row``'s figure is never compared as sound: the within-run refusals (an edited
    results file, unverified parity, too few requests, a refused route identity) and the
    figure's own (a starved client's TPOT, estimated token counts)."""
    reasons: list[str] = []
    if tampered:
        reasons.append("results_tampered")
    if row.quality_parity is not QualityParity.verified:
        reasons.append(f"parity_{row.quality_parity.value}")
    if row.n_requests < MIN_REQUESTS_FOR_SPEEDUP:
        reasons.append("too_few_requests")
    if row.route_identity is not None and row.route_identity.value == "refused":
        reasons.append("route_identity_refused")
    return (*reasons, *fig.refusals(row))


@dataclass(frozen=True, slots=True)
class Group:
    """One line's per-request columns of a figure: ``values`` ``(n, k)`` and, per request,
    the round it ran in (``rounds``, ``(n,)``; all 0 when unknown) and its prompt
    (``prompts``; empty when unknown)."""

    values: Array
    rounds: Array
    prompts: tuple[str | None, ...] = ()

    def __len__(self) -> int:
        return len(self.values)


def request_matrix(fig: Figure, line: SideLine) -> Group:
    """The figure's per-request columns of ``line`` (``n`` may be 0) and their rounds."""
    assert fig.columns is not None
    known = len(line.request_rounds) == len(line.requests)
    named = len(line.request_prompts) == len(line.requests)
    rows: list[tuple[float, ...]] = []
    rounds: list[int] = []
    prompts: list[str | None] = []
    for i, m in enumerate(line.requests):
        c = fig.columns(m)
        if c is not None:
            rows.append(c)
            rounds.append(line.request_rounds[i] if known else 0)
            prompts.append(line.request_prompts[i] if named else None)
    if not rows:
        return Group(np.zeros((0, 1)), np.zeros(0, dtype=int))
    return Group(
        np.asarray(rows, dtype=float),
        np.asarray(rounds, dtype=int),
        tuple(prompts) if named else (),
    )


def point_value(fig: Figure, groups: Sequence[Group]) -> float | None:
    """The figure's value over the whole groups (own line last; the speedup divides the
    ``off`` line's statistic by its own); ``None`` when not finite."""
    stats = [float(fig.statistic(g.values[None, ...])[0]) for g in groups]
    if fig.baseline and not stats[1] > 0:
        return None
    value = stats[0] / stats[1] if fig.baseline else stats[-1]
    return value if math.isfinite(value) else None


def _indices(g: Group, rng: Any, n: int) -> Array:
    """``n`` resamples of ``g``'s request indices, ``(n, len(g))``: two-stage when the
    requests fall in 2 or more rounds of equal size (rounds drawn with replacement, then
    requests within each drawn round; Davison & Hinkley 1997, §3.8), else one stage."""
    uniq, counts = np.unique(g.rounds, return_counts=True)
    if len(uniq) < 2 or counts.min() != counts.max():
        return rng.integers(0, len(g), size=(n, len(g)), dtype=np.int32)
    k, m = len(uniq), int(counts[0])
    order = np.argsort(g.rounds, kind="stable").reshape(k, m)
    pick_round = rng.integers(0, k, size=(n, k, 1), dtype=np.int32)
    pick_request = rng.integers(0, m, size=(n, k, m), dtype=np.int32)
    return order[pick_round, pick_request].reshape(n, k * m)


def _resampled(
    fig: Figure, groups: Sequence[Group], rng: Any, n: int, picks: Sequence[Array] | None = None
) -> Array:
    """The figure over ``n`` resamples of ``groups``: ``picks`` (one index array per
    group, drawn over prompts) when given, else each group's own :func:`_indices`."""
    stats = []
    for i, g in enumerate(groups):
        idx = picks[i] if picks is not None else _indices(g, rng, n)
        stats.append(np.asarray(fig.statistic(g.values[idx]), dtype=float))
    if fig.baseline:
        return np.divide(stats[0], stats[1], out=np.full(n, np.nan), where=stats[1] > 0)
    return stats[-1]


def resamples_for(level: float) -> int:
    """Bootstrap resamples for a two-sided interval at ``level`` (e.g. 0.001): enough
    that each tail holds 10 or more resamples (at least 2000, at most 100 000)."""
    return int(min(100_000, max(2000, math.ceil(20 / level))))


def bootstrap_change(
    fig: Figure,
    a: Sequence[Group],
    b: Sequence[Group],
    *,
    level: float,
    seed: int,
) -> tuple[float, float] | None:
    """The ``(1 − level)`` percentile-bootstrap interval of the change ``B / A`` or
    ``B − A`` (per ``fig.scale``); ``a`` and ``b``: each run's groups of per-request
    columns (the ``off`` line's first for the speedup). When every group names the
    prompt of each request and they share
    :data:`~deepseekbench._analysis._prompt_bootstrap.MIN_PROMPTS` or more, the prompt
    is the unit: one draw of the shared prompts for all groups of both runs (paired on
    the prompt), then requests within each (:func:`prompt_indices`), as the
    scorecard's speedup interval; otherwise each group is resampled on its own,
    two-stage over its rounds where it has several (see :func:`_indices`). The
    interval is widened to hold the change of the point values
    (:func:`point_value`) if its percentiles miss it.

    Returns ``None`` with fewer than 2 requests in a group, or a degenerate
    resample (a ratio of a non-positive value).
    """
    if any(len(g) < 2 for g in (*a, *b)):
        return None
    n = resamples_for(level)
    rng = np.random.default_rng(seed)
    picks = prompt_indices([g.prompts for g in (*a, *b)], rng, n)
    if picks is not None:
        sa = _resampled(fig, a, rng, n, picks[: len(a)])
        sb = _resampled(fig, b, rng, n, picks[len(a) :])
    else:
        sa, sb = _resampled(fig, a, rng, n), _resampled(fig, b, rng, n)
    if fig.scale == "ratio":
        if not (np.all(sa > 0) and np.all(np.isfinite(sb))):
            return None
        change = sb / sa
    else:
        change = sb - sa
    if not np.all(np.isfinite(change)):
        return None
    low, high = (float(v) for v in np.percentile(change, [50 * level, 100 - 50 * level]))
    pa, pb = point_value(fig, a), point_value(fig, b)
    if pa is not None and pb is not None and (fig.scale != "ratio" or pa > 0):
        point = pb / pa if fig.scale == "ratio" else pb - pa
        low, high = min(low, point), max(high, point)
    return low, high


def rounds_change(
    fig: Figure, a: Mapping[int, float], b: Mapping[int, float], *, level: float
) -> tuple[float, float] | None:
    """The ``(1 − level)`` Welch t interval of the change between the runs' per-round
    values (``B / A`` on the log scale for a ratio, ``B − A`` otherwise); ``None``
    with fewer than 2 rounds a side or a non-positive value on the ratio scale. Rounds
    without any spread on either side give the interval of zero width at the change
    itself (every round measured the same value)."""
    from scipy.stats import t

    xa = np.asarray([v for v in a.values() if math.isfinite(v)], dtype=float)
    xb = np.asarray([v for v in b.values() if math.isfinite(v)], dtype=float)
    if len(xa) < 2 or len(xb) < 2:
        return None
    if fig.scale == "ratio":
        if not (np.all(xa > 0) and np.all(xb > 0)):
            return None
        xa, xb = np.log(xa), np.log(xb)
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    se = math.sqrt(va + vb)
    d = float(xb.mean() - xa.mean())
    half = 0.0
    if se > 0:
        df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
        half = float(t.ppf(1 - level / 2, df)) * se
    if fig.scale == "ratio":
        return math.exp(d - half), math.exp(d + half)
    return d - half, d + half
