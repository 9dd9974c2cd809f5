"""``compare_speedup``: the only place a speedup figure is made.

A speedup is printed only when every condition holds (see
:func:`compare_speedup`); otherwise the verdict carries the reasons and no
figure. A refused verdict's ``str``, ``repr`` and JSON contain no number at
all (only names such as ``e2e_ms``), so no speedup can leak through a rendering.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepseekbench._axes import KEY_AXES, LOAD_AXES, QualityParity, Speculative, _ClosedEnum
from deepseekbench._row import Row

MIN_REQUESTS_FOR_SPEEDUP = 5
"""Fewest measured requests (``Row.n_requests``) each row needs before a speedup
is printed: a median of fewer is too noisy to credit."""


class SpeedupMetric(_ClosedEnum):
    """What a speedup is computed from; every figure reads "times faster" (> 1: the
    candidate is faster).

    Lower is better (speedup = baseline / candidate): ``tpot_ms`` (decode speed,
    the default), ``ttft_ms``, ``e2e_ms``. Higher is better (speedup = candidate /
    baseline): ``output_toks_per_s`` (per-request median),
    ``output_throughput_toks_per_s`` (tokens/s over the measurement window),
    ``goodput_req_per_s`` (requests/s meeting every SLO limit).
    """

    tpot_ms = "tpot_ms"
    ttft_ms = "ttft_ms"
    e2e_ms = "e2e_ms"
    output_toks_per_s = "output_toks_per_s"
    output_throughput_toks_per_s = "output_throughput_toks_per_s"
    goodput_req_per_s = "goodput_req_per_s"

    @property
    def higher_is_better(self) -> bool:
        """True for throughput metrics (speedup = candidate / baseline)."""
        return self in _HIGHER_IS_BETTER


_HIGHER_IS_BETTER = frozenset(
    {
        SpeedupMetric.output_toks_per_s,
        SpeedupMetric.output_throughput_toks_per_s,
        SpeedupMetric.goodput_req_per_s,
    }
)


def speedup_of(baseline: float, candidate: float, metric: SpeedupMetric) -> float:
    """Times faster: ``candidate / baseline`` for a higher-is-better metric, else
    ``baseline / candidate`` (dimensionless)."""
    return candidate / baseline if metric.higher_is_better else baseline / candidate


class RefusalReason(_ClosedEnum):
    """Why a speedup was not printed; a verdict lists every reason that applies."""

    baseline_parity_not_verified = "baseline_parity_not_verified"
    candidate_parity_not_verified = "candidate_parity_not_verified"
    baseline_not_off = "baseline_not_off"
    candidate_is_off = "candidate_is_off"
    key_axis_mismatch = "key_axis_mismatch"
    load_mismatch = "load_mismatch"
    baseline_incomplete = "baseline_incomplete"
    candidate_incomplete = "candidate_incomplete"
    baseline_too_few_requests = "baseline_too_few_requests"
    candidate_too_few_requests = "candidate_too_few_requests"
    baseline_metric_missing = "baseline_metric_missing"
    candidate_metric_missing = "candidate_metric_missing"
    baseline_metric_not_positive = "baseline_metric_not_positive"
    candidate_metric_not_positive = "candidate_metric_not_positive"
    speedup_not_finite = "speedup_not_finite"
    tokens_estimated = "tokens_estimated"


class SpeedupVerdict(BaseModel):
    """The outcome of :func:`compare_speedup`.

    Invariant (checked on construction): ``printed`` ⇔ ``speedup is not None`` ⇔
    ``reasons == ()``; a confidence interval exists only on a printed verdict.

    Truthiness means "credited": ``bool(verdict)`` is ``verdict.printed``, so
    ``if compare_speedup(a, b):`` takes the branch only for an earned speedup
    (a refused verdict is falsy).

    Attributes:
        metric: the metric compared.
        printed: True only when a speedup was earned.
        speedup: times faster (dimensionless, > 0), or ``None`` when refused.
        reasons: every :class:`RefusalReason` that applies (empty when printed).
        mismatched_axes: key axes other than ``speculative`` that differ.
        ci_low, ci_high: optional 95 % interval of the speedup, attached by the
            scorecard: from paired rounds when the run had 2 or more (then
            ``rounds`` is set and ``speedup`` is their geometric mean), else a
            per-request bootstrap.
        rounds: the paired rounds behind ``speedup`` and the interval, or ``None``.

    Raises:
        pydantic.ValidationError: the invariant above fails, ``speedup``/``ci_*``
            not > 0 or not finite, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    metric: SpeedupMetric
    printed: bool
    speedup: float | None = Field(default=None, gt=0, description="times faster, dimensionless")
    reasons: tuple[RefusalReason, ...] = ()
    mismatched_axes: tuple[str, ...] = ()
    ci_low: float | None = Field(default=None, gt=0, description="bootstrap 95% CI low")
    ci_high: float | None = Field(default=None, gt=0, description="bootstrap 95% CI high")
    rounds: int | None = Field(
        default=None,
        ge=2,
        description="paired rounds the figure and interval come from (None: row medians, "
        "per-request bootstrap interval)",
    )

    @model_validator(mode="after")
    def _check_invariant(self) -> SpeedupVerdict:
        if self.printed != (self.speedup is not None) or self.printed == bool(self.reasons):
            raise ValueError("printed must hold exactly when a speedup exists and no reason does")
        if not self.printed and (self.ci_low is not None or self.ci_high is not None):
            raise ValueError("a refused verdict carries no interval")
        return self

    @property
    def within_noise(self) -> bool:
        """True when a credited speedup's 95 % interval includes 1 (no clear gain).

        The speedup is still credited (parity holds); the mark says the measured
        difference is not distinguishable from no change at this sample size.
        """
        return (
            self.ci_low is not None and self.ci_high is not None
            and self.ci_low <= 1.0 <= self.ci_high
        )

    def __bool__(self) -> bool:
        """True only for a credited (printed) speedup; a refused verdict is falsy."""
        return self.printed

    @property
    def slower(self) -> bool:
        """True when a credited figure is below 1: the candidate is slower, and says so."""
        return self.speedup is not None and self.speedup < 1.0

    def with_paired_rounds(
        self, speedup: float, low: float, high: float, rounds: int
    ) -> SpeedupVerdict:
        """A copy whose figure and 95 % interval come from ``rounds`` paired round
        ratios (see :func:`~deepseekbench.paired_speedup_ci`); a refused verdict is
        returned unchanged."""
        if not self.printed:
            return self
        return self.model_copy(
            update={"speedup": speedup, "ci_low": low, "ci_high": high, "rounds": rounds}
        )

    def with_interval(self, low: float, high: float) -> SpeedupVerdict:
        """A copy carrying a 95 % interval; a refused verdict is returned unchanged."""
        if not self.printed:
            return self
        return self.model_copy(update={"ci_low": low, "ci_high": high})

    def __str__(self) -> str:
        if self.printed and self.speedup is not None:
            ci = ""
            if self.ci_low is not None and self.ci_high is not None:
                ci = f" (95% CI {self.ci_low:.2f}–{self.ci_high:.2f})"
                if self.within_noise:
                    ci += " within noise"
            slower = " — slower" if self.slower else ""
            return f"{self.speedup:.2f}× by {self.metric.value}{slower}{ci}"
        text = "refused: " + ", ".join(r.value for r in self.reasons)
        if self.mismatched_axes:
            text += " [" + ", ".join(self.mismatched_axes) + "]"
        return text


def _metric_value(row: Row, metric: SpeedupMetric) -> float | None:
    value: Any = getattr(row, metric.value)
    return None if value is None else float(value)


def compare_speedup(
    baseline: Row,
    candidate: Row,
    *,
    metric: SpeedupMetric | str = SpeedupMetric.tpot_ms,
    min_requests: int = MIN_REQUESTS_FOR_SPEEDUP,
) -> SpeedupVerdict:
    """Credit ``candidate`` with a speedup over ``baseline`` only when it is earned.

    A speedup is printed only when all hold: both rows have
    ``quality_parity == verified``; ``baseline.speculative == off`` and
    ``candidate.speculative != off``; every other key axis is equal (a different
    load — ``concurrency``, ``request_rate_per_s``, ``arrival`` — is refused with
    ``load_mismatch``, other axes with ``key_axis_mismatch``); both rows
    are complete (:data:`~deepseekbench.REQUIRED_FIELDS`) with
    ``n_requests >= min_requests``; neither row's token counts were estimated
    (``tokens_estimated``: without the engine's usage, TPOT and throughput rest
    on a count the engine did not give); the metric is present and positive on both.

    Args:
        baseline: the ``speculative=off`` row.
        candidate: the speculative row.
        metric: :class:`SpeedupMetric` (or its value); default decode speed (TPOT).
        min_requests: the minimum ``n_requests`` per row
            (default :data:`MIN_REQUESTS_FOR_SPEEDUP`).

    Returns:
        A :class:`SpeedupVerdict`; ``speedup`` is dimensionless ("times faster").

    Raises:
        ValueError: ``metric`` is not a :class:`SpeedupMetric` value, or
            ``min_requests < 1``.
    """
    metric = SpeedupMetric(metric)
    if min_requests < 1:
        raise ValueError("min_requests must be >= 1")
    reasons: list[RefusalReason] = []
    R = RefusalReason
    if baseline.quality_parity is not QualityParity.verified:
        reasons.append(R.baseline_parity_not_verified)
    if candidate.quality_parity is not QualityParity.verified:
        reasons.append(R.candidate_parity_not_verified)
    if baseline.speculative is not Speculative.off:
        reasons.append(R.baseline_not_off)
    if candidate.speculative is Speculative.off:
        reasons.append(R.candidate_is_off)
    mismatched = tuple(
        axis
        for axis in KEY_AXES
        if axis != "speculative" and getattr(baseline, axis) != getattr(candidate, axis)
    )
    if any(axis not in LOAD_AXES for axis in mismatched):
        reasons.append(R.key_axis_mismatch)
    if any(axis in LOAD_AXES for axis in mismatched):
        # A schema-1 row (load unknown, None) never pairs with a row of known load.
        reasons.append(R.load_mismatch)
    if not baseline.is_complete:
        reasons.append(R.baseline_incomplete)
    if not candidate.is_complete:
        reasons.append(R.candidate_incomplete)
    if baseline.tokens_estimated or candidate.tokens_estimated:
        reasons.append(R.tokens_estimated)
    if baseline.n_requests < min_requests:
        reasons.append(R.baseline_too_few_requests)
    if candidate.n_requests < min_requests:
        reasons.append(R.candidate_too_few_requests)
    b = _metric_value(baseline, metric)
    c = _metric_value(candidate, metric)
    for value, missing, not_positive in (
        (b, R.baseline_metric_missing, R.baseline_metric_not_positive),
        (c, R.candidate_metric_missing, R.candidate_metric_not_positive),
    ):
        if value is None:
            reasons.append(missing)
        elif not value > 0:
            reasons.append(not_positive)
    if reasons or b is None or c is None:
        return SpeedupVerdict(
            metric=metric, printed=False, reasons=tuple(reasons), mismatched_axes=mismatched
        )
    speedup = speedup_of(b, c, metric)
    if not (math.isfinite(speedup) and speedup > 0):
        return SpeedupVerdict(metric=metric, printed=False, reasons=(R.speedup_not_finite,))
    return SpeedupVerdict(metric=metric, printed=True, speedup=speedup)


CompareSpeedup = compare_speedup
"""The design card's CamelCase name for :func:`compare_speedup`."""
