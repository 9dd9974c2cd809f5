"""``compare_speedup``: the only place a speedup figure is made.

A speedup is printed only when every condition holds (see
:func:`compare_speedup`); otherwise the verdict carries the reasons and no
figure. A refused verdict's ``str``, ``repr`` and JSON contain no number at
all (only names such as ``e2e_ms``), so no speedup can leak through a rendering —
except the 95 % interval of an *inconclusive* verdict (reason
``no_significant_difference``: the rows qualified, but the interval includes 1),
which reads "no significant difference (0.94–1.07) by tpot_ms" and credits nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepseekbench._analysis._clock_witness import (
    SERVER_SAMPLES,
    clock_disagrees,
    server_value,
    witness_faults,
)
from deepseekbench._analysis._speedup_arguments import check_speedup_arguments
from deepseekbench._types._axes import (
    KEY_AXES,
    LOAD_AXES,
    Arrival,
    QualityParity,
    Speculative,
    _ClosedEnum,
)
from deepseekbench._types._clock import CLOCK_TOLERANCE, Clock
from deepseekbench._types._fraction import parse_fraction
from deepseekbench._types._identity import RouteIdentity
from deepseekbench._types._interval import interval_text
from deepseekbench._types._row import Row

PromptValues = Mapping[str, Mapping[int, float]]
"""Per prompt (workload item id), its value per round (ms or tokens/s)."""
PromptPair = tuple[PromptValues | None, PromptValues | None]
"""``(baseline, candidate)`` :data:`PromptValues`."""

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

    @classmethod
    def _missing_(cls, value: object) -> Any:
        """An unknown name raises :class:`~deepseekbench.UnknownMetricError` (also a
        ``ValueError``) naming the valid ones."""
        from deepseekbench._errors import UnknownMetricError

        known = tuple(m.value for m in cls)
        raise UnknownMetricError(value, known, what="speedup metric")


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
    load_unknown = "load_unknown"
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
    # no credit without significance
    client_starved = "client_starved"
    """A row's client was starved for a core (``Row.client_starved``): its TPOT holds
    client delay, so no TPOT speedup; parity and acceptance still stand."""
    clock_disagreement = "clock_disagreement"
    """The client-clock speedup differs from the engine's own (server-clock) speedup of
    the same rows by more than the tolerance: the client's figure is withheld."""
    server_clock_missing = "server_clock_missing"
    """``clock="server"`` was asked, but a row has no engine-reported figure for the
    metric (only ``tpot_ms`` and ``ttft_ms`` have one)."""
    server_clock_not_positive = "server_clock_not_positive"
    """``clock="server"``: an engine figure of a row's requests is zero (or negative, or
    not finite): no clock (:class:`~deepseekbench._types._clock.ServerClockFault`)."""
    server_clock_contradicts_client = "server_clock_contradicts_client"
    """``clock="server"``: the engine's decode time is shorter than the client's own
    first-to-last-token window of the same request beyond 25 % + 50 ms (+ the client's
    own stall), or its TTFT longer than the client's: the engine's figure is refused as
    a witness (``deepseekbench._analysis._clock_witness``)."""
    server_clock_count_mismatch = "server_clock_count_mismatch"
    """``clock="server"``: the engine's own token count (output rate × generation time)
    is not the request's usage count (beyond 1 token + 2 %)."""
    no_significant_difference = "no_significant_difference"
    """The speedup's 95 % interval includes 1: the run cannot tell the routes apart.
    The verdict keeps the interval (its only numbers) and no figure."""
    # a row whose route contradicts its label (see _route_identity)
    route_identity_refused = "route_identity_refused"
    speculative_counters_missing = "speculative_counters_missing"
    """The speculative row's server exported no speculative counters at all — no drafted
    or accepted counts, acceptance rate, length or per-position acceptance in usage,
    per-request fields or ``/metrics`` — so nothing shows it speculated (an ``off``
    server behind a speculative label decodes the same way): no speed verdict. Judged
    on rows of a run (``route_identity`` set)."""
    results_tampered = "results_tampered"
    """The rows come from a results file edited after it was written (its digest chain
    is broken, a measurement record is duplicated, or records name a plan with no
    ``run_start``; see :class:`~deepseekbench.ResultsIntegrityWarning`)."""


class SpeedupVerdict(BaseModel):
    """The outcome of :func:`compare_speedup`.

    Invariant (checked on construction): ``printed`` ⇔ ``speedup is not None`` ⇔
    ``reasons == ()``; a confidence interval exists only on a printed verdict whose
    interval excludes 1, or on an *inconclusive* verdict (its one reason
    :attr:`RefusalReason.no_significant_difference`, its interval including 1).

    **No credit without significance**: a speedup (or slowdown) whose
    95 % interval includes 1 is not credited; it reads "no significant difference
    (0.94–1.07)" and carries the interval but no figure. :meth:`with_interval` and
    :meth:`with_paired_rounds` make that verdict, so :func:`compare_speedup` and the
    scorecard (which calls it) agree.

    **Printed is not credited.** ``printed`` says a figure is shown: parity is
    verified on both rows and, when an interval was attached, it excludes 1 — on
    either side, so a verified, significant *slowdown* is printed too ("0.75× by
    tpot_ms — slower", :attr:`slower`). Truthiness means "credited" (:attr:`credited`):
    ``bool(verdict)`` is True only for an earned speedup — printed, ``speedup > 1``
    and an interval whose low end is above 1 — so ``if compare_speedup(a, b):`` never
    takes the branch for a slowdown. A refused verdict, an :attr:`inconclusive` one, a
    slowdown and a :attr:`point_estimate` (a figure printed without any interval: its
    significance was not judged) are all falsy.

    Attributes:
        metric: the metric compared.
        printed: True when a figure is shown (a speedup or a slowdown; see above).
        speedup: times faster (dimensionless, > 0; below 1 = slower), or ``None``
            when refused.
        reasons: every :class:`RefusalReason` that applies (empty when printed).
        mismatched_axes: key axes other than ``speculative`` that differ.
        ci_low, ci_high: optional 95 % interval of the speedup, attached by the
            scorecard. What it covers, by what it was made from: ``rounds`` set —
            paired rounds (repeat noise and drift; ``speedup`` is their geometric
            mean); ``prompts`` set — a paired cluster bootstrap over the prompts both
            rows measured (the choice of prompts;
            :mod:`deepseekbench._analysis._prompt_bootstrap`); both set — the two
            combined; neither — a per-request bootstrap (requests as independent).
        rounds: the paired rounds behind ``speedup`` and the interval, or ``None``.
        prompts: the prompts the interval resampled, or ``None``.

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
    prompts: int | None = Field(
        default=None,
        ge=2,
        description="prompts the interval resampled (a paired cluster bootstrap over "
        "prompts; None: rounds or requests were the unit)",
    )
    clock: Clock = Field(
        default=Clock.client,
        description="the clock judged on: client (arrival times) or server (the "
        "engine's own per-request timings; excludes network and client)",
    )

    @model_validator(mode="after")
    def _check_invariant(self) -> SpeedupVerdict:
        if self.printed != (self.speedup is not None) or self.printed == bool(self.reasons):
            raise ValueError("printed must hold exactly when a speedup exists and no reason does")
        has_ci = self.ci_low is not None or self.ci_high is not None
        if self.inconclusive:
            if not self.within_noise:
                raise ValueError("an inconclusive verdict carries an interval that includes 1")
        elif not self.printed and has_ci:
            raise ValueError("a refused verdict carries no interval")
        elif self.printed and self.within_noise:
            raise ValueError("a credited verdict's interval excludes 1")
        return self

    @property
    def inconclusive(self) -> bool:
        """True when the only reason is :attr:`RefusalReason.no_significant_difference`:
        the rows qualified for a figure, but its 95 % interval includes 1."""
        return self.reasons == (RefusalReason.no_significant_difference,)

    @property
    def within_noise(self) -> bool:
        """True when the verdict's 95 % interval includes 1 (no clear difference).

        Since the significance rule only an :attr:`inconclusive` verdict can be within noise: such
        a difference is not distinguishable from no change at this sample size and
        is not credited.
        """
        return (
            self.ci_low is not None
            and self.ci_high is not None
            and self.ci_low <= 1.0 <= self.ci_high
        )

    @property
    def point_estimate(self) -> bool:
        """True when a figure is printed without an interval (no per-request, per-round
        or per-prompt values were given): a point estimate whose significance was not
        judged, so not credited as a speedup claim (the verdict is falsy)."""
        return self.printed and (self.ci_low is None or self.ci_high is None)

    @property
    def credited(self) -> bool:
        """True only for an earned speedup: a printed figure above 1 whose 95 % interval
        lies wholly above 1 (parity verified on both rows, as every printed verdict
        has). A slowdown, a refused or :attr:`inconclusive` verdict and a
        :attr:`point_estimate` are not credited. ``bool(verdict)`` is this."""
        return (
            self.printed
            and not self.point_estimate
            and self.speedup is not None
            and self.speedup > 1.0
            and self.ci_low is not None
            and self.ci_low > 1.0
        )

    def __bool__(self) -> bool:
        """:attr:`credited`: True only for an earned speedup (> 1, its interval above 1,
        parity verified on both rows). A printed slowdown is falsy."""
        return self.credited

    @property
    def slower(self) -> bool:
        """True when a printed figure is below 1: the candidate is slower, and the
        verdict says so ("— slower"); such a verdict is printed but not credited."""
        return self.printed and self.speedup is not None and self.speedup < 1.0

    def with_paired_rounds(
        self, speedup: float, low: float, high: float, rounds: int, *, prompts: int | None = None
    ) -> SpeedupVerdict:
        """A copy whose figure and 95 % interval come from ``rounds`` paired round
        ratios (see :func:`~deepseekbench.paired_speedup_ci`), the interval also covering
        the choice of ``prompts`` prompts when given; a refused verdict is returned
        unchanged."""
        if not self.printed:
            return self
        if low <= 1.0 <= high:
            return self._no_significant_difference(low, high, rounds, prompts)
        update = {"speedup": speedup, "ci_low": low, "ci_high": high, "rounds": rounds}
        return self.model_copy(update={**update, "prompts": prompts})

    def with_prompt_interval(self, low: float, high: float, prompts: int) -> SpeedupVerdict:
        """A copy carrying a 95 % interval over ``prompts`` prompts of one round (see
        :func:`~deepseekbench._analysis._prompt_bootstrap.prompt_ratio_ci`); the figure
        stays the ratio of the rows' values. A refused verdict is returned unchanged;
        an interval that includes 1 makes an :attr:`inconclusive` one."""
        if not self.printed:
            return self
        if low <= 1.0 <= high:
            return self._no_significant_difference(low, high, None, prompts)
        return self.model_copy(update={"ci_low": low, "ci_high": high, "prompts": prompts})

    def with_interval(self, low: float, high: float) -> SpeedupVerdict:
        """A copy carrying a 95 % interval; a refused verdict is returned unchanged.

        An interval that includes 1 turns a printed verdict into an
        :attr:`inconclusive` one (no figure, reason ``no_significant_difference``)."""
        if not self.printed:
            return self
        if low <= 1.0 <= high:
            return self._no_significant_difference(low, high, None)
        return self.model_copy(update={"ci_low": low, "ci_high": high})

    @property
    def _on_clock(self) -> str:
        return " (server clock)" if self.clock is Clock.server else ""

    def _no_significant_difference(
        self, low: float, high: float, rounds: int | None, prompts: int | None = None
    ) -> SpeedupVerdict:
        return SpeedupVerdict(
            metric=self.metric,
            clock=self.clock,
            printed=False,
            reasons=(RefusalReason.no_significant_difference,),
            ci_low=low,
            ci_high=high,
            rounds=rounds,
            prompts=prompts,
        )

    def _interval_text(self) -> str:
        if self.ci_low is None or self.ci_high is None:
            return ""
        text = interval_text(self.ci_low, self.ci_high, rounds=self.rounds)
        return text + (f" over {self.prompts} prompts" if self.prompts is not None else "")

    def __str__(self) -> str:
        if self.printed and self.speedup is not None:
            ci = ""
            if self.ci_low is not None and self.ci_high is not None:
                ci = f" (95% CI {self._interval_text()})"
            elif self.point_estimate:
                ci = " (point estimate, significance not judged)"
            slower = " — slower" if self.slower else ""
            return f"{self.speedup:.2f}× by {self.metric.value}{self._on_clock}{slower}{ci}"
        if self.inconclusive and self.ci_low is not None and self.ci_high is not None:
            return (
                "no significant difference "
                f"({self._interval_text()}) "
                f"by {self.metric.value}{self._on_clock}"
            )
        text = "refused: " + ", ".join(r.value for r in self.reasons)
        if self.mismatched_axes:
            text += " [" + ", ".join(self.mismatched_axes) + "]"
        return text


def bootstrap_speedup_ci(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    metric: SpeedupMetric | str = SpeedupMetric.tpot_ms,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """95 % percentile-bootstrap interval of the speedup's ratio of medians.

    ``baseline``/``candidate``: per-request values of ``metric`` (ms, or tokens/s
    for ``output_toks_per_s``). Returns ``(low, high)`` (dimensionless), or
    ``None`` with fewer than 2 samples a side or a degenerate interval. Uses
    ``scipy.stats.bootstrap`` with a seeded generator, so it is reproducible.

    Raises:
        ValueError: ``metric`` is not a :class:`SpeedupMetric` value (checked only
            once both sides have at least 2 usable samples).
    """
    import numpy as np
    from scipy.stats import bootstrap

    b = np.asarray([x for x in baseline if math.isfinite(x) and x > 0], dtype=float)
    c = np.asarray([x for x in candidate if math.isfinite(x) and x > 0], dtype=float)
    if len(b) < 2 or len(c) < 2:
        return None
    invert = SpeedupMetric(metric).higher_is_better

    def ratio(x: Any, y: Any, axis: int = -1) -> Any:
        mx, my = np.median(x, axis=axis), np.median(y, axis=axis)
        return my / mx if invert else mx / my

    kwargs: dict[str, Any] = {
        "vectorized": True,
        "paired": False,
        "n_resamples": n_resamples,
        "confidence_level": 0.95,
        "method": "percentile",
    }
    try:  # scipy >= 1.15 takes ``rng``; older releases ``random_state``
        res = bootstrap((b, c), ratio, rng=np.random.default_rng(seed), **kwargs)
    except TypeError:
        res = bootstrap((b, c), ratio, random_state=np.random.default_rng(seed), **kwargs)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        return None
    return low, high


def paired_speedup_ci(
    baseline: Mapping[int, float],
    candidate: Mapping[int, float],
    *,
    metric: SpeedupMetric | str = SpeedupMetric.tpot_ms,
) -> tuple[float, float, float, int] | None:
    """The speedup and its 95 % interval from paired rounds.

    ``baseline``/``candidate``: the metric per round (ms, tokens/s or requests/s),
    by round number. Each round common to both gives a ratio (times faster,
    :func:`~deepseekbench._analysis._speedup.speedup_of`); the speedup is their geometric
    mean and the interval a Student-t interval on the mean of the log ratios
    with ``n − 1`` degrees of freedom (``t_quantile``, as ``scipy.stats.t.ppf``),
    exponentiated. Suited
    to few rounds, where a bootstrap has too few values to resample (Student
    1908; geometric mean of ratios: Fleming & Wallace 1986; paired repetitions:
    Kalibera & Jones 2013 — see ``docs/measurement.md``).

    Returns:
        ``(speedup, low, high, rounds)``, or ``None`` with fewer than 2 usable rounds.

    Raises:
        ValueError: ``metric`` is not a :class:`SpeedupMetric` value.
    """
    import numpy as np

    from deepseekbench._analysis._quantiles import t_quantile

    m = SpeedupMetric(metric)
    ratios = [
        speedup_of(baseline[r], candidate[r], m)
        for r in sorted(set(baseline) & set(candidate))
        if baseline[r] > 0 and candidate[r] > 0
    ]
    logs = np.log(np.asarray([x for x in ratios if math.isfinite(x) and x > 0], dtype=float))
    n = len(logs)
    if n < 2:
        return None
    mean = float(np.mean(logs))
    half = t_quantile(0.975, n - 1) * float(np.std(logs, ddof=1)) / math.sqrt(n)
    values = (math.exp(mean), math.exp(mean - half), math.exp(mean + half))
    if not all(math.isfinite(v) and v > 0 for v in values):
        return None
    return (*values, n)


class SpeedupEvidence(Protocol):
    """What :func:`compare_speedup` reads a row's interval from: a
    :class:`~deepseekbench.RunResult` (or any object with this method).

    Raises:
        TypeError: instantiated directly (a ``typing.Protocol``).
    """

    def speedup_evidence(
        self, row: Row, metric: str = "tpot_ms"
    ) -> tuple[Sequence[float] | None, Mapping[int, float]]:
        """``row``'s per-request values of ``metric`` (``None`` for a window metric)
        and its value per measurement round."""
        ...


def _with_interval(
    verdict: SpeedupVerdict,
    samples: tuple[Sequence[float] | None, Sequence[float] | None],
    rounds: tuple[Mapping[int, float], Mapping[int, float]],
    n_resamples: int,
    seed: int,
    prompts: PromptPair = (None, None),
) -> SpeedupVerdict:
    """``verdict`` with its 95 % interval, covering every source of variation its
    evidence shows: paired rounds (repeat noise and drift, Student t) and the choice of
    prompts (a paired cluster bootstrap over them), combined where both exist; else a
    bootstrap of the per-request samples; unchanged when refused or when none gives one."""
    if not verdict.printed or verdict.speedup is None:
        return verdict
    from deepseekbench._analysis._prompt_bootstrap import (  # numpy, lazily
        combine_log_intervals,
        prompt_ratio_ci,
    )

    paired = paired_speedup_ci(*rounds, metric=verdict.metric)
    figure = paired[0] if paired is not None else verdict.speedup
    by_prompt = None
    if prompts[0] and prompts[1]:
        by_prompt = prompt_ratio_ci(
            prompts[0],
            prompts[1],
            invert=verdict.metric.higher_is_better,
            point=figure,
            n_resamples=n_resamples,
            seed=seed,
        )
    if paired is not None:
        low, high, n_prompts = paired[1], paired[2], None
        if by_prompt is not None:
            low, high = combine_log_intervals(figure, (low, high), by_prompt[:2])
            n_prompts = by_prompt[2]
        return verdict.with_paired_rounds(figure, low, high, paired[3], prompts=n_prompts)
    if by_prompt is not None:
        return verdict.with_prompt_interval(*by_prompt)
    b, c = samples
    if b and c:
        ci = bootstrap_speedup_ci(b, c, metric=verdict.metric, n_resamples=n_resamples, seed=seed)
        if ci is not None:
            return verdict.with_interval(*ci)
    return verdict


def _metric_value(row: Row, metric: SpeedupMetric) -> float | None:
    value: Any = getattr(row, metric.value)
    return None if value is None else float(value)


def compare_speedup(
    baseline: Row,
    candidate: Row,
    *,
    metric: SpeedupMetric | str = SpeedupMetric.tpot_ms,
    min_requests: int = MIN_REQUESTS_FOR_SPEEDUP,
    result: SpeedupEvidence | None = None,
    samples: tuple[Sequence[float] | None, Sequence[float] | None] | None = None,
    rounds: tuple[Mapping[int, float], Mapping[int, float]] | None = None,
    n_resamples: int = 2000,
    seed: int = 0,
    clock: Clock | str = Clock.client,
    clock_tolerance: float | str = CLOCK_TOLERANCE,
    prompt_samples: PromptPair | None = None,
) -> SpeedupVerdict:
    """Credit ``candidate`` with a speedup over ``baseline`` only when it is earned.

    A speedup is printed only when all hold: both rows have
    ``quality_parity == verified``; ``baseline.speculative == off`` and
    ``candidate.speculative != off``; every other key axis is equal (a different
    load — ``concurrency``, ``request_rate_per_s``, ``arrival`` — is refused with
    ``load_mismatch``, other axes with ``key_axis_mismatch``); both rows say
    their load (``load_unknown`` otherwise, see :func:`load_unknown`: two rows
    with the load unset are equal on every axis yet may have been measured
    under different loads); both rows
    are complete (:data:`~deepseekbench.REQUIRED_FIELDS`) with
    ``n_requests >= min_requests``; neither row's token counts were estimated
    (``tokens_estimated``: without the engine's usage, TPOT and throughput rest
    on a count the engine did not give); neither row's route identity was refused
    (``route_identity_refused``: e.g. an ``off`` route that drafts, see
    ``deepseekbench._analysis._route_identity``); the candidate's server exported some
    speculative counter (``speculative_counters_missing``, see
    :func:`no_speculative_counters`); the metric is present and positive
    on both; for ``tpot_ms``, neither row is ``client_starved`` (``client_starved``: its
    client read token chunks in bursts while waiting for a core, so its TPOT is client
    delay).

    **Interval.** Given the run the rows came from (``result``, e.g. from
    :func:`~deepseekbench.load_results`), or its values per prompt and round
    (``prompt_samples``), per round (``rounds``) or per request (``samples``), a
    printed verdict carries the same figure and 95 % interval the scorecard prints
    for these rows (the scorecard calls this function). The interval covers every
    source of variation the evidence shows:

    * with 2 or more paired rounds the figure is the geometric mean of the rounds'
      ratios (:func:`paired_speedup_ci`, ``rounds`` set on the verdict) and its
      Student-t interval on their logs covers repeat noise and a drift between
      rounds, the prompts held fixed;
    * where the requests name their prompts (workload item ids) and
      :data:`~deepseekbench._analysis._prompt_bootstrap.MIN_PROMPTS` or more are
      shared, a paired cluster bootstrap over the prompts of the same figure (the same
      prompts drawn for both rows, the rounds kept:
      :func:`~deepseekbench._analysis._prompt_bootstrap.prompt_ratio_ci`, ``prompts``
      set) covers the choice of prompts: the question "how much faster on this kind
      of workload";
    * both: the two combined on the log scale, root sum of squares of each side's
      distance from the figure
      (:func:`~deepseekbench._analysis._prompt_bootstrap.combine_log_intervals`); the
      prompts alone (one round): the bootstrap's interval around the ratio of the
      rows' medians;
    * neither: a percentile bootstrap of the ratio of medians over the per-request
      samples (:func:`bootstrap_speedup_ci`, requests as independent).

    Every interval holds the figure printed beside it. The bootstraps draw
    ``n_resamples`` resamples from a generator seeded with ``seed``. An interval that
    includes 1 credits nothing: the verdict is refused with
    ``no_significant_difference`` and keeps the interval (reads "no significant
    difference (0.94–1.07) by tpot_ms"), for a gain and a loss alike.

    **Without any of them** there is no interval: the figure (the ratio of the rows'
    medians) is a point estimate whose significance was not judged. The verdict
    keeps it (``printed``, ``speedup``) and says so — :attr:`SpeedupVerdict.point_estimate`
    is True, its text ends "point estimate, significance not judged" and it is
    falsy (``bool(verdict)`` is False): no credit without significance.

    Args:
        baseline: the ``speculative=off`` row.
        candidate: the speculative row.
        metric: :class:`SpeedupMetric` (or its value); default decode speed (TPOT).
        min_requests: the minimum ``n_requests`` per row
            (default :data:`MIN_REQUESTS_FOR_SPEEDUP`).
        result: the :class:`~deepseekbench.RunResult` holding both rows; their
            samples and rounds are read from it. A result read from an edited
            results file (``result.results_tampered``) refuses every speedup
            (``results_tampered``).
        samples: ``(baseline, candidate)`` per-request values of ``metric`` (ms, or
            tokens/s), instead of ``result``.
        rounds: ``(baseline, candidate)`` value of ``metric`` per round number,
            instead of ``result``.
        prompt_samples: ``(baseline, candidate)`` value of ``metric`` per prompt
            (workload item id) and round, instead of ``result``.
        n_resamples, seed: of the bootstrap.
        clock: ``"client"`` (default: the client's arrival times) or ``"server"``
            (the engine's own per-request figures, ``Row.server_tpot_ms`` /
            ``server_ttft_ms``; they exclude network and client; refused with
            ``server_clock_missing`` where a row has none, and with the fault's name
            where the engine's figures contradict the client's own clock:
            ``server_clock_not_positive``, ``server_clock_contradicts_client``,
            ``server_clock_count_mismatch``, see
            ``deepseekbench._analysis._clock_witness``). The verdict says which.
        clock_tolerance: on the client clock, when both rows carry the engine's own
            figure too, a client speedup further than this ratio (default
            :data:`~deepseekbench._types._clock.CLOCK_TOLERANCE`, 25 %) from the
            server-clock speedup is withheld (``clock_disagreement``): the ratio of
            the row medians, and the figure printed (the paired rounds' geometric
            mean) alike. A fraction (``0.25``) or a percent string (``"25%"``).

    Returns:
        A :class:`SpeedupVerdict`; ``speedup`` is dimensionless ("times faster");
        ``ci_low``/``ci_high`` the 95 % interval when one could be made.

    Raises:
        ValueError: ``metric`` is not a :class:`SpeedupMetric` value,
            ``min_requests < 1``, ``result`` given together with ``samples``,
            ``rounds`` or ``prompt_samples``, or a row that is not one of ``result``'s rows.
        FractionFormatError: ``clock_tolerance`` in neither form (a ValueError).
        TypeError: ``baseline`` or ``candidate`` is not a :class:`~deepseekbench.Row`, or
            ``result`` is neither ``None`` nor a :class:`~deepseekbench.RunResult`.
    """
    check_speedup_arguments(baseline, candidate, result)
    metric = SpeedupMetric(metric)
    clock = Clock(clock)
    if min_requests < 1:
        raise ValueError("min_requests must be >= 1")
    clock_tolerance = parse_fraction(clock_tolerance, name="clock_tolerance", upper=math.inf)
    if not clock_tolerance > 0:
        raise ValueError("clock_tolerance must be > 0")
    if result is not None:
        if samples is not None or rounds is not None or prompt_samples is not None:
            raise ValueError("pass result, or samples/rounds/prompt_samples, not both")
        name = evidence_field(metric, clock)
        bs, br = result.speedup_evidence(baseline, name)
        cs, cr = result.speedup_evidence(candidate, name)
        samples, rounds = (bs, cs), (br, cr)
        by_prompt = getattr(result, "prompt_evidence", None)  # a RunResult has it
        if by_prompt is not None:
            prompt_samples = (by_prompt(baseline, name), by_prompt(candidate, name))
        if getattr(result, "results_tampered", False):  # a RunResult of an edited file
            return tampered_verdict(metric, clock)
    verdict = _judge(baseline, candidate, metric, min_requests, clock, clock_tolerance)
    verdict = _with_interval(
        verdict,
        samples or (None, None),
        rounds or ({}, {}),
        n_resamples,
        seed,
        prompt_samples or (None, None),
    )
    return _witnessed(verdict, baseline, candidate, clock_tolerance)


def _witnessed(
    verdict: SpeedupVerdict, baseline: Row, candidate: Row, tolerance: float
) -> SpeedupVerdict:
    """The figure finally printed is held against the engine's clock too.

    With paired rounds the printed figure is the rounds' geometric mean, not the ratio
    of the row medians :func:`_judge` checked; a client-clock figure further than
    ``tolerance`` from the server-clock ratio is withheld (``clock_disagreement``)."""
    if not (verdict.printed and verdict.clock is Clock.client and verdict.speedup is not None):
        return verdict
    if not clock_disagrees(baseline, candidate, verdict.metric.value, verdict.speedup, tolerance):
        return verdict
    return SpeedupVerdict(
        metric=verdict.metric,
        clock=verdict.clock,
        printed=False,
        reasons=(RefusalReason.clock_disagreement,),
    )


def tampered_verdict(metric: SpeedupMetric, clock: Clock) -> SpeedupVerdict:
    """The verdict of any two rows of an edited results file: refused with
    :attr:`RefusalReason.results_tampered` alone, whatever the rows say."""
    return SpeedupVerdict(
        metric=metric, clock=clock, printed=False, reasons=(RefusalReason.results_tampered,)
    )


def evidence_field(metric: SpeedupMetric | str, clock: Clock | str) -> str:
    """The per-request field a verdict's interval is made from: ``metric`` itself on
    the client clock, the engine's own figure on the server clock (e.g.
    ``server_mean_itl_ms`` for ``tpot_ms``; ``metric`` when it has none)."""
    m = SpeedupMetric(metric)
    if Clock(clock) is Clock.server:
        return SERVER_SAMPLES.get(m.value, m.value)
    return m.value


def no_speculative_counters(row: Row) -> bool:
    """True when ``row`` comes from a run (its ``route_identity`` was judged) and its
    server exported no speculative counter anywhere: ``draft_tokens``,
    ``accepted_tokens``, ``accepted_token_ratio``, ``acceptance_length`` and
    ``acceptance_by_position`` all ``None`` (per-request usage and fields first, the
    ``/metrics`` window as fallback; a reported 0 is a counter). A hand-made row
    (``route_identity`` ``None``) is not judged."""
    if row.route_identity is None:
        return False
    return all(
        v is None
        for v in (
            row.draft_tokens,
            row.accepted_tokens,
            row.accepted_token_ratio,
            row.acceptance_length,
            row.acceptance_by_position,
        )
    )


def load_unknown(row: Row) -> bool:
    """True when ``row`` does not say the load it was measured under.

    Unknown: no ``arrival`` (a schema-1 row, or a hand-made row that left the
    load unset), a closed loop without ``concurrency``, or an open loop
    (``poisson``/``gamma``) without ``request_rate_per_s``. Such a row still
    reads (old results files load); it only cannot be credited a speedup.
    """
    if row.arrival is None:
        return True
    if row.arrival is Arrival.closed:
        return row.concurrency is None
    return row.request_rate_per_s is None


def _pairing_reasons(baseline: Row, candidate: Row) -> tuple[list[RefusalReason], tuple[str, ...]]:
    """Why the two rows are not a pair to compare (parity, methods, key and load
    axes, completeness, estimated tokens), and the key axes they differ on."""
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
    if load_unknown(baseline) or load_unknown(candidate):
        # Two rows of unknown load are "equal" on every load axis, yet nothing says
        # they were measured under the same load: no figure (the seed rule).
        reasons.append(R.load_unknown)
    if not baseline.is_complete:
        reasons.append(R.baseline_incomplete)
    if not candidate.is_complete:
        reasons.append(R.candidate_incomplete)
    if baseline.tokens_estimated or candidate.tokens_estimated:
        reasons.append(R.tokens_estimated)
    return reasons, mismatched


def _evidence_reasons(
    baseline: Row, candidate: Row, metric: SpeedupMetric, min_requests: int, clock: Clock
) -> list[RefusalReason]:
    """Why the rows' evidence does not carry a figure (a starved client's TPOT, a
    refused route identity, missing speculative counters, too few requests)."""
    reasons: list[RefusalReason] = []
    R = RefusalReason
    if (
        clock is Clock.client
        and metric is SpeedupMetric.tpot_ms
        and (baseline.client_starved or candidate.client_starved)
    ):
        reasons.append(R.client_starved)  # bunched chunks make TPOT meaningless
    if RouteIdentity.refused in (baseline.route_identity, candidate.route_identity):
        reasons.append(R.route_identity_refused)
    if candidate.speculative is not Speculative.off and no_speculative_counters(candidate):
        reasons.append(R.speculative_counters_missing)
    if baseline.n_requests < min_requests:
        reasons.append(R.baseline_too_few_requests)
    if candidate.n_requests < min_requests:
        reasons.append(R.candidate_too_few_requests)
    return reasons


def _clock_values(
    baseline: Row, candidate: Row, metric: SpeedupMetric, clock: Clock
) -> tuple[float | None, float | None, list[RefusalReason]]:
    """The two rows' values of ``metric`` on ``clock``, and why they cannot be divided
    (missing or not positive; on the server clock, the engine's figures' faults)."""
    reasons: list[RefusalReason] = []
    R = RefusalReason
    if clock is Clock.server:  # the engine's own figures
        b, c = server_value(baseline, metric.value), server_value(candidate, metric.value)
        if b is None or c is None:
            reasons.append(R.server_clock_missing)
        for row in (baseline, candidate):  # the engine's figures are witnesses, checked
            reasons += [R(f.value) for f in witness_faults(row, metric.value)]
    else:
        b = _metric_value(baseline, metric)
        c = _metric_value(candidate, metric)
    for value, missing, not_positive in (
        (b, R.baseline_metric_missing, R.baseline_metric_not_positive),
        (c, R.candidate_metric_missing, R.candidate_metric_not_positive),
    ):
        if value is None:
            if clock is Clock.client:  # the server clock names it server_clock_missing
                reasons.append(missing)
        elif not value > 0:
            reasons.append(not_positive)
    return b, c, reasons


def _judge(
    baseline: Row,
    candidate: Row,
    metric: SpeedupMetric,
    min_requests: int,
    clock: Clock = Clock.client,
    tolerance: float = CLOCK_TOLERANCE,
) -> SpeedupVerdict:
    """The verdict from the rows alone (figure: ratio of the rows' values)."""
    reasons, mismatched = _pairing_reasons(baseline, candidate)
    reasons += _evidence_reasons(baseline, candidate, metric, min_requests, clock)
    b, c, value_reasons = _clock_values(baseline, candidate, metric, clock)
    reasons += value_reasons
    speedup = speedup_of(b, c, metric) if b and c and b > 0 and c > 0 else None
    if (
        clock is Clock.client
        and speedup is not None
        and math.isfinite(speedup)
        and clock_disagrees(baseline, candidate, metric.value, speedup, tolerance)
    ):
        reasons.append(RefusalReason.clock_disagreement)  # the engine's clock contradicts it
    if reasons or speedup is None:
        return SpeedupVerdict(
            metric=metric,
            clock=clock,
            printed=False,
            reasons=tuple(dict.fromkeys(reasons)),
            mismatched_axes=mismatched,
        )
    if not (math.isfinite(speedup) and speedup > 0):
        return SpeedupVerdict(
            metric=metric, clock=clock, printed=False, reasons=(RefusalReason.speedup_not_finite,)
        )
    return SpeedupVerdict(metric=metric, clock=clock, printed=True, speedup=speedup)


CompareSpeedup = compare_speedup
"""The design card's CamelCase name for :func:`compare_speedup`."""
