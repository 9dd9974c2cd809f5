"""Parity within the verify pass's own noise: τ measured, opportunities, and the verdict.

Pure functions over classified divergences (:class:`~deepseekbench._types._margin.
DivergenceMargin`) and ``off``'s profiles of its own outputs (:class:`~deepseekbench.
_types._noise.OffProfile`). The noise model (docs/rows-and-gate.md, "Parity within noise"):

- A correct speculative engine returns the target's argmax, computed in the verify
  shape (k+1 query tokens) instead of one-token decode; the two round differently
  (vLLM RFC #54506), so its output may flip only at a position where ``off``'s top-1
  minus top-2 margin is below that rounding shift. How often it does depends on how
  many such positions (**near-tie opportunities**) its outputs meet, not on whether
  ``off`` repeats itself: a deterministic ``off`` never flips against itself, so
  ``off``'s self-flip rate is not the null (that rate test turned correct engines
  ``differs`` as the sample grew).
- **τ** (nats, :func:`measure_tau`): the plan's ``parity.tau_nats``; else the
  :data:`TAU_QUANTILE` quantile of the engine's measured jitter (``off``'s decode
  margins against the same tokens scored in one forward pass, and ``off``'s flips among
  concurrent requests), given at least :data:`TAU_MIN_SAMPLE` nonzero shifts; else
  :data:`~deepseekbench._types._margin.DEFAULT_TAU_NATS`.
- **Verdict** (:func:`within_noise_verdict`): ``differs`` on any decisive divergence
  (margin above τ, or a token outside ``off``'s top-k, unless ``off``'s own one-pass
  score ranks that token first: the verify shape shown directly), on a near-tie
  divergence at an output whose profile holds no opportunity at or before the fork, or
  on more diverged outputs than outputs with an opportunity; otherwise ``verified``
  only when the sample could have caught a lossy route: the one-sided Clopper-Pearson
  upper bound (C. J. Clopper and E. S. Pearson, Biometrika 26, 1934; ``scipy.stats.beta``)
  at the plan's α on the decisive-divergence rate per compared output, with none
  observed, is at most ``parity.lossy_rate`` (:data:`DEFAULT_LOSSY_RATE`); else
  ``unknown`` with how many more comparisons would decide.
  Under ``[stopping] mode = "sequential"`` the verdict is read after every round, so
  the bound is the anytime-valid beta-binomial mixture bound instead
  (:func:`~deepseekbench._analysis._anytime_rate.anytime_rate_bound`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._axes import QualityParity
from deepseekbench._types._margin import (
    DEFAULT_TAU_NATS,
    DivergenceKind,
    DivergenceMargin,
    TauSource,
)
from deepseekbench._types._noise import OffProfile

__all__ = [
    "DEFAULT_LOSSY_RATE",
    "PROFILED_FEWER",
    "SEQUENTIAL_BOUND_NAME",
    "TAU_MIN_SAMPLE",
    "TAU_QUANTILE",
    "DivergenceCounts",
    "NoiseFloor",
    "NoiseVerdict",
    "ProfileKey",
    "TauEstimate",
    "comparisons_needed",
    "count_divergences",
    "lossy_rate_bound",
    "measure_tau",
    "within_noise_verdict",
]

TAU_QUANTILE: Final[float] = 0.999
"""The quantile of the measured jitter taken as τ (numpy's ``lower`` method: the order
statistic at ⌊0.999 (n − 1)⌋, never the largest sample, so one outlier never sets τ).

High, because a correct flip happens where the margin is below the shift at that
position, so flips concentrate where the shift is largest: a lower quantile calls those
flips decisive. Not the maximum, because the very largest shifts are not the verify
shape: on vLLM's CPU build (32 prompts × 256 tokens, 8,666 nonzero shifts, 2026-12-02)
the quantiles were 0.0024 (median), 0.0084 (0.9), 0.027 (0.99), 0.082 (0.999) nats, and
every shift above 0.2 nats (up to 1.98) sat at an output's first tokens, where one-pass
scoring prefills prompt and output together while decode, and speculative decoding
alike, take the first token from the prompt's own prefill. The 0.99 quantile (0.027)
would have called real MTP near-tie flips of up to 0.037 nats decisive; 0.999 covers
them. Below 1,001 samples it is the second-largest."""
TAU_MIN_SAMPLE: Final[int] = 20
"""Fewest nonzero jitter samples τ is measured from; fewer keep the default τ."""
DEFAULT_LOSSY_RATE: Final[float] = 0.125
"""Default ``parity.lossy_rate``: the decisive-divergence rate per compared output (a
fraction) a ``verified`` within-noise row must exclude at the plan's α. At α = 0.05,
zero decisive divergences in n comparisons bound the rate by 1 − 0.05^(1/n): 23
comparisons are the fewest under 1 in 8, so the smallest useful run (the 16 smoke
parity prompts and 8 measured requests: 24, bound 0.117) can verify, while the parity
set alone (16, bound 0.171) cannot; a lossy route that changes one output in 8 is
caught with 95 % confidence."""

ProfileKey = tuple[str, str]
"""``(source, prompt id)`` of a compared ``off`` output: ``("parity", "p3")`` or
``("traffic", "request-5")``."""


class NoiseFloor(BaseModel):
    """``off`` against itself: ``n_diverged`` of ``n_compared`` comparisons differed,
    at ``flip_margins_nats`` (the margins, nats, of the self-flips that have one).
    Descriptive only: no verdict tests a route's rate against it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_compared: int = Field(default=0, ge=0)
    n_diverged: int = Field(default=0, ge=0)
    flip_margins_nats: tuple[float, ...] = ()

    @property
    def rate(self) -> float | None:
        """Self-divergence rate (diverged / compared); ``None`` with nothing compared."""
        return self.n_diverged / self.n_compared if self.n_compared else None

    def describe(self) -> str:
        """E.g. ``off diverges from itself in 2 of 64``."""
        return f"off diverges from itself in {self.n_diverged} of {self.n_compared}"


@dataclass(frozen=True, slots=True)
class DivergenceCounts:
    """Divergences of one route by kind."""

    near_tie: int = 0
    decisive: int = 0
    unexplained: int = 0

    @property
    def total(self) -> int:
        """All divergences counted."""
        return self.near_tie + self.decisive + self.unexplained


def count_divergences(margins: Iterable[DivergenceMargin]) -> DivergenceCounts:
    """Count ``margins`` by :class:`~deepseekbench._types._margin.DivergenceKind`."""
    ms = list(margins)
    return DivergenceCounts(
        near_tie=sum(m.kind is DivergenceKind.near_tie for m in ms),
        decisive=sum(m.kind is DivergenceKind.decisive for m in ms),
        unexplained=sum(m.kind is DivergenceKind.unexplained for m in ms),
    )


class TauEstimate(BaseModel):
    """τ (nats) with its source, and for a measured τ the quantile and sample size.

    Attributes:
        tau_nats: the near-tie bound τ (nats, >= 0).
        source: ``plan`` (``parity.tau_nats``), ``measured_jitter`` or ``default``.
        quantile: for a measured τ, the quantile of the jitter taken (:data:`TAU_QUANTILE`).
        sample: nonzero jitter samples it was measured from (count).
        note: why a default τ was kept (too few samples, no one-pass scoring), else ``""``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tau_nats: float = Field(default=DEFAULT_TAU_NATS, ge=0, description="nats")
    source: TauSource = TauSource.default
    quantile: float | None = None
    sample: int = Field(default=0, ge=0)
    note: str = ""

    def describe(self) -> str:
        """E.g. ``τ 0.04 from measured_jitter (q0.999 of 31)``."""
        how = f" (q{self.quantile:g} of {self.sample})" if self.quantile is not None else ""
        if self.note:
            how = f" ({self.note})"
        return f"τ {self.tau_nats:.3g} from {self.source.value}{how}"


def measure_tau(
    profiles: Iterable[OffProfile],
    plan_tau_nats: float | None,
    concurrent_nats: Iterable[float] = (),
) -> TauEstimate:
    """τ (nats) from the plan, else from the measured jitter, else the default.

    ``profiles`` give the decode-vs-one-pass margin shifts (nats: ``off``'s decode margins
    against the same tokens scored in one forward pass); ``concurrent_nats`` the margins
    (nats) at which ``off``'s measured, batched output left its alone run. Only positive
    values count (τ bounds the jitter where the verify shape differs). With at least
    :data:`TAU_MIN_SAMPLE` of them τ is their :data:`TAU_QUANTILE` quantile by numpy's
    ``lower`` order statistic (never the largest sample); with fewer, the default
    (:data:`~deepseekbench._types._margin.DEFAULT_TAU_NATS`) with a note saying why.
    Definitions and the measurement behind the quantile: docs/rows-and-gate.md, "Parity
    within noise".

    Raises:
        pydantic.ValidationError: ``plan_tau_nats`` negative or NaN.
    """
    if plan_tau_nats is not None:
        return TauEstimate(tau_nats=plan_tau_nats, source=TauSource.plan)
    profiles = list(profiles)
    sample = [s for p in profiles for s in p.shifts_nats if s > 0]
    sample += [m for m in concurrent_nats if m > 0]
    if len(sample) < TAU_MIN_SAMPLE:
        cannot = next((p.one_pass_note for p in profiles if p.one_pass_note), "")
        note = f"{len(sample)} nonzero jitter samples, fewer than {TAU_MIN_SAMPLE}"
        if cannot and not any(p.shifts_nats for p in profiles):
            note = f"no one-pass scoring: {cannot}"
        return TauEstimate(sample=len(sample), note=note)
    import numpy as np

    q = float(np.quantile(np.asarray(sample, dtype=float), TAU_QUANTILE, method="lower"))
    return TauEstimate(
        tau_nats=q, source=TauSource.measured_jitter, quantile=TAU_QUANTILE, sample=len(sample)
    )


def lossy_rate_bound(n_compared: int, n_decisive: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound at level ``alpha`` on the decisive-divergence
    rate per compared output (a fraction), from ``n_decisive`` of ``n_compared``; 1.0 with
    nothing compared. Computed as the Beta(k+1, n−k) quantile 1 − α (``beta_quantile``, as
    ``scipy.stats.beta.ppf``;
    C. J. Clopper and E. S. Pearson, Biometrika 26, 1934).

    Raises:
        ValueError: counts not integers or inconsistent, or ``alpha`` outside (0, 1).
    """
    if not isinstance(n_compared, int) or not isinstance(n_decisive, int):
        raise ValueError("counts must be integers")
    if not 0 <= n_decisive <= n_compared or not 0 < alpha < 1:
        raise ValueError("need 0 <= n_decisive <= n_compared and alpha in (0, 1)")
    if n_decisive == n_compared:
        return 1.0
    from deepseekbench._analysis._quantiles import beta_quantile

    return beta_quantile(1 - alpha, n_decisive + 1, n_compared - n_decisive)


def comparisons_needed(lossy_rate: float, alpha: float) -> int:
    """Fewest compared outputs whose zero decisive divergences bound the rate by
    ``lossy_rate`` at ``alpha``: ⌈ln α / ln(1 − rate)⌉ (the Clopper-Pearson bound for
    zero events, 1 − α^(1/n)).

    Raises:
        ValueError: ``lossy_rate`` or ``alpha`` outside (0, 1).
    """
    if not 0 < lossy_rate < 1 or not 0 < alpha < 1:
        raise ValueError("lossy_rate and alpha must be in (0, 1)")
    n = math.ceil(math.log(alpha) / math.log1p(-lossy_rate))
    while n > 1 and lossy_rate_bound(n - 1, 0, alpha) <= lossy_rate:
        n -= 1
    while lossy_rate_bound(n, 0, alpha) > lossy_rate:
        n += 1
    return n


class NoiseVerdict(BaseModel):
    """The within-noise verdict of one route: ``parity`` and one-sentence ``reason``,
    the counts by kind, τ (nats) and its source, the near-tie opportunities met,
    and the verdict's power (``power_bound``: the upper bound on the decisive rate per
    compared output it establishes; ``comparisons_needed`` to reach ``lossy_rate``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parity: QualityParity
    reason: str
    near_tie: int = 0
    decisive: int = 0
    unexplained: int = 0
    shown_one_pass: int = 0
    opportunities: int | None = None
    outputs_with_opportunity: int | None = None
    outputs_profiled: int = 0
    power_bound: float | None = None
    lossy_rate: float = DEFAULT_LOSSY_RATE
    comparisons_needed: int | None = None
    tau_nats: float = DEFAULT_TAU_NATS
    tau_source: TauSource = TauSource.default
    tau_quantile: float | None = None
    tau_sample: int = 0
    p_value: float | None = None


def _is_end(token: str) -> bool:
    """An end-of-sequence token as served: empty (hidden) or a special ``<...>`` token."""
    return token == "" or (token.startswith("<") and token.endswith(">") and " " not in token)


def _shown_directly(m: DivergenceMargin, prof: OffProfile | None) -> bool:
    """``off``'s one-pass score ranks the candidate's token first at the fork, or ranks
    end-of-sequence first there (an output decoded past EOS, ``ignore_eos``, then shows
    what followed the hidden end token instead of it)."""
    if prof is None or m.candidate_token is None or m.token_index is None:
        return False
    top1 = prof.one_pass_top1(m.token_index)
    return top1 is not None and (top1 == m.candidate_token or _is_end(top1))


def _explained(
    margins: Sequence[DivergenceMargin], profiles: Mapping[ProfileKey, OffProfile]
) -> tuple[list[DivergenceMargin], int]:
    """Margins with decisive ones the one-pass score shows directly made near-ties."""
    out, shown = [], 0
    for m in margins:
        if _shown_directly(m, profiles.get((m.source, m.prompt_id))):
            shown += 1
            if m.kind is DivergenceKind.decisive:
                m = m.model_copy(update={"kind": DivergenceKind.near_tie})
        out.append(m)
    return out, shown


def _opportunity_check(
    margins: Sequence[DivergenceMargin], profiles: Mapping[ProfileKey, OffProfile], tau: float
) -> tuple[str | None, int, int]:
    """(a reason the near-ties are not noise, or ``None``; opportunities; outputs with one)."""
    forks = {(m.source, m.prompt_id): m for m in margins if m.kind is DivergenceKind.near_tie}
    total = with_one = 0
    for key, prof in profiles.items():
        if not prof.measured:
            continue
        m = forks.get(key)
        n = prof.opportunities(tau, before=m.token_index if m is not None else None)
        if m is not None and _shown_directly(m, prof):
            n = max(n, 1)  # the verify shape flips there: an opportunity, shown directly
        total += n
        with_one += n > 0
        if m is not None and n == 0:
            return (
                f"{m.prompt_id}: a divergence at token {m.token_index} where off's output "
                f"holds no near-tie opportunity (margin ≤ τ) at or before it",
                total,
                with_one,
            )
    profiled = sum(1 for k in forks if k in profiles and profiles[k].measured)
    if profiled > with_one:
        return (
            f"{profiled} diverged outputs but only {with_one} of off's profiled outputs hold "
            "a near-tie opportunity",
            total,
            with_one,
        )
    return None, total, with_one


def _power_reason(
    n_compared: int, alpha: float, lossy_rate: float, sequential: bool = False
) -> tuple[float, int, str]:
    if sequential:  # read after every round: the anytime-valid bound, never Clopper-Pearson
        from deepseekbench._analysis._anytime_rate import (
            anytime_comparisons_needed,
            anytime_rate_bound,
        )

        bound = anytime_rate_bound(n_compared, 0, alpha)
        need = anytime_comparisons_needed(lossy_rate, alpha)
    else:
        bound = lossy_rate_bound(n_compared, 0, alpha)
        need = comparisons_needed(lossy_rate, alpha)
    text = (
        f"power: 0 decisive in {n_compared} compared outputs bounds a lossy route's "
        f"decisive rate by {bound:.3g} per output at α {alpha:g}"
    )
    if sequential:
        text += f" ({SEQUENTIAL_BOUND_NAME})"
    return bound, need, text


SEQUENTIAL_BOUND_NAME: Final[str] = (
    "anytime-valid beta-binomial mixture bound, Robbins 1970, valid read after every round"
)
"""How a ``[stopping] mode = "sequential"`` verdict names its power bound on its reason
(:func:`~deepseekbench._analysis._anytime_rate.anytime_rate_bound`); a ``fixed``-mode
reason names none (the one-sided Clopper-Pearson bound)."""

PROFILED_FEWER = (
    "at most parity.profile_outputs per parity set and per cell and load point, "
    "the outputs a route diverged from first"
)
"""Why a verdict may profile fewer ``off`` outputs than it compared: the profiles are
bounded per group (:func:`~deepseekbench._analysis._follow_ups.profile_follow_ups`)."""


def within_noise_verdict(
    margins: Sequence[DivergenceMargin],
    n_compared: int,
    profiles: Mapping[ProfileKey, OffProfile],
    *,
    alpha: float,
    tasks_parity: QualityParity | None = None,
    tau: TauEstimate | None = None,
    n_missing: int = 0,
    lossy_rate: float = DEFAULT_LOSSY_RATE,
    require_power: bool = True,
    sequential: bool = False,
) -> NoiseVerdict:
    """Judge a route whose divergences are ``margins`` (one per diverged output, already
    classified against ``tau``; each output's first fork) out of ``n_compared`` compared
    outputs, against ``off``'s ``profiles`` of the compared outputs (keyed
    :data:`ProfileKey`). Rules: the module docstring. ``differs`` is decided whatever the
    sample size; ``verified`` needs no decisive or unexplained divergence, every near-tie
    at an opportunity, task parity (when given) ``verified``, no missing output, and the
    power bound at most ``lossy_rate``; otherwise ``unknown``, saying what would decide.
    ``sequential`` (``[stopping] mode = "sequential"``, the verdict read after every
    round): the power bound is the anytime-valid one (:func:`~deepseekbench._analysis.
    _anytime_rate.anytime_rate_bound`, named on the reason as
    :data:`SEQUENTIAL_BOUND_NAME`) instead of the fixed-horizon Clopper-Pearson bound.

    Raises:
        ValueError: ``alpha`` or ``lossy_rate`` outside (0, 1), or ``n_compared`` < 0.
    """
    if not 0 < alpha < 1 or not 0 < lossy_rate < 1 or n_compared < 0:
        raise ValueError("alpha and lossy_rate must be in (0, 1), n_compared >= 0")
    t = tau if tau is not None else TauEstimate()
    ms, shown = _explained(margins, profiles)
    c = count_divergences(ms)
    why, opp, with_one = _opportunity_check(ms, profiles, t.tau_nats)
    profiled = sum(p.measured for p in profiles.values())
    fields: dict[str, Any] = {
        "near_tie": c.near_tie,
        "decisive": c.decisive,
        "unexplained": c.unexplained,
        "shown_one_pass": shown,
        "opportunities": opp if profiled else None,
        "outputs_with_opportunity": with_one if profiled else None,
        "outputs_profiled": profiled,
        "lossy_rate": lossy_rate,
        "tau_nats": t.tau_nats,
        "tau_source": t.source,
        "tau_quantile": t.quantile,
        "tau_sample": t.sample,
    }
    bound, need, power = _power_reason(n_compared, alpha, lossy_rate, sequential)
    fields.update(power_bound=bound, comparisons_needed=need)
    unprofiled = sum(
        1
        for m in ms
        if m.kind is DivergenceKind.near_tie and (m.source, m.prompt_id) not in profiles
    )
    return _decide(
        ms,
        n_compared,
        (why, opp, profiled, unprofiled),
        t,
        tasks_parity,
        n_missing,
        (power, require_power),
        fields,
    )


def _decide(
    ms: list[DivergenceMargin],
    n_compared: int,
    opp: tuple[str | None, int, int, int],
    t: TauEstimate,
    tasks_parity: QualityParity | None,
    n_missing: int,
    powered: tuple[str, bool],
    fields: dict[str, Any],
) -> NoiseVerdict:
    c = count_divergences(ms)
    why, n_opp, profiled, unprofiled = opp
    power, require_power = powered

    def verdict(parity: QualityParity, reason: str) -> NoiseVerdict:
        return NoiseVerdict(parity=parity, reason=reason, **fields)

    if c.decisive:
        first = next(m for m in ms if m.kind is DivergenceKind.decisive)
        return verdict(QualityParity.differs, f"decisive divergence at {first.describe()}")
    if why is not None:
        return verdict(QualityParity.differs, f"near-ties beyond the opportunities: {why}")
    if tasks_parity is QualityParity.differs:
        return verdict(QualityParity.differs, "task parity differs")
    if c.unexplained:
        return verdict(QualityParity.unknown, f"{c.unexplained} divergences without a margin")
    if n_missing or n_compared == 0:
        return verdict(
            QualityParity.unknown,
            f"{n_missing} outputs missing" if n_missing else "nothing compared",
        )
    if tasks_parity is not None and tasks_parity is not QualityParity.verified:
        return verdict(QualityParity.unknown, "task parity unknown")
    if unprofiled:
        return verdict(
            QualityParity.unknown,
            f"{unprofiled} near-tie divergences at off outputs that were not profiled "
            "(no near-tie opportunities measured; parity.profile_outputs)",
        )
    opp_text = (
        f"{n_opp} near-tie opportunities in {profiled} profiled off outputs"
        if profiled
        else "no off output profiled"
    )
    if 0 < profiled < n_compared:  # say why fewer outputs were profiled than compared
        opp_text += f" of {n_compared} compared ({PROFILED_FEWER})"
    head = (
        f"{c.near_tie} of {n_compared} outputs diverge, all near-ties (largest margin "
        f"{max(m.margin_nats or 0.0 for m in ms):.3g} nats, {t.describe()}; "
        f"{fields['shown_one_pass']} shown by one-pass scoring)"
        if ms
        else f"no divergence in {n_compared} ({t.describe()})"
    )
    if require_power and fields["power_bound"] > fields["lossy_rate"]:
        more = max(1, fields["comparisons_needed"] - n_compared)
        return verdict(
            QualityParity.unknown,
            f"{head}; {opp_text}; {power}, above parity.lossy_rate {fields['lossy_rate']:g}: "
            f"{more} more prompts/requests would decide",
        )
    return verdict(QualityParity.verified, f"{head}; {opp_text}; {power}")
