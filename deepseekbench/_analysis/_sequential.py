"""Anytime-valid sequential verdicts for the paired speedup over interleaved rounds.

A fixed-horizon interval (:func:`~deepseekbench.paired_speedup_ci`, Student t) is
valid only when read once, at the horizon fixed in advance: stopping at the first
look whose interval excludes 1 inflates false credit (with 20 looks, to several
times the nominal 5 %). A *confidence sequence* is an interval at every round
that covers the true speedup at **all** rounds at once with probability
``1 − alpha``, so it may be looked at after every round and a comparison stopped
as soon as it is decided.

**Observation.** Round ``r`` of a (cell, load point) runs every route's block of
the same prompts (the interleaved, ABBA-style schedule of
``deepseekbench._plan._schedule``); its observation is the log of the round's
speedup, ``x_r = log speedup_of(baseline_r, candidate_r, metric)`` (the same
per-round ratio :func:`~deepseekbench.paired_speedup_ci` reads; > 0: the candidate
is faster). The speedup is ``exp(mu)``, ``mu`` the mean of ``x_r``.

**Assumptions.** The ``x_r`` are independent and Gaussian with unknown mean and
unknown variance (the round's figure is a median of several requests, close to
Gaussian on the log scale; the pairing inside a round cancels a slow drift of the
machine, so the rounds are close to independent). Nothing about the variance is
assumed or estimated in advance: the construction is scale-invariant.

**Construction** (Lai 1976, "On confidence sequences", Ann. Statist. 4(2); the
scale-invariant mixture martingale of Wang & Ramdas 2023, "Anytime-valid t-tests and
confidence sequences for Gaussian means with unknown variance", Sequential
Analysis; the framework of Howard, Ramdas, McAuliffe & Sekhon 2021, "Time-uniform,
nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2)). For a
candidate mean ``m``, with ``S = Σ (x_i − m)`` and ``V = Σ (x_i − m)²`` over ``n``
rounds, and ``tau`` the prior scale of the standardized effect ``(mu − m)/sigma``
(:data:`DEFAULT_PRIOR_SCALE`, ``c = 1/tau``)::

    E_n(m) = sqrt(c² / (c² + n)) · (1 − S² / ((c² + n) · V)) ** (−n/2)

is a nonnegative martingale with ``E_1 = 1`` under ``mu = m`` whatever ``sigma``
(a Gaussian mixture over ``(mu − m)/sigma`` and the right Haar measure ``dσ/σ``
over the scale), so by Ville's inequality ``P(∃ n: E_n(mu) ≥ 1/alpha) ≤ alpha``.
The confidence sequence is ``{m : E_n(m) < 1/alpha}``, in closed form
``x̄ ± s₀ · sqrt(B / (n − B))`` with ``s₀²`` the mean squared deviation and
``B = (c² + n) · (1 − K^(−2/n))``, ``K = sqrt((c² + n)/c²)/alpha`` (the whole
line while ``B ≥ n``: with 2 rounds only a very tight pair decides).

**Stopping** (:func:`sequential_verdict`): after each round a comparison is
*credited* when the sequence excludes a speedup of 1, declared *no meaningful
difference* when it lies inside ``[1/(1 + delta), 1 + delta]``, stopped at the
*cap*, else continued. No verdict is taken before ``min_rounds`` rounds, nor before
the parity set and the minimum measured traffic ran (``parity_ready``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from deepseekbench._analysis._speedup import SpeedupMetric, speedup_of
from deepseekbench._types._axes import _ClosedEnum

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_PRIOR_SCALE",
    "LineStop",
    "RoundEvidence",
    "SpeedupSequence",
    "StopReason",
    "line_stop",
    "log_ratio_e_value",
    "round_log_ratios",
    "rounds_to_decision",
    "sequential_verdict",
    "speedup_confidence_sequence",
]

DEFAULT_ALPHA = 0.05
"""Error rate of the confidence sequence over all rounds together (5 %)."""

DEFAULT_PRIOR_SCALE = 20.0
"""``tau``: the spread of the mixture over the standardized effect ``mu/sigma``
(dimensionless). Any value keeps the sequence valid; a wide one (a speedup many
times the round-to-round noise, as a 2× decode speedup is) lets a tight pair of
rounds decide, at the price of a slightly wider sequence after many rounds."""


class StopReason(_ClosedEnum):
    """Why a sequential comparison stopped.

    ``credited``: the sequence excludes a speedup of 1; ``no_meaningful_difference``:
    it lies inside ``±delta`` of 1; ``cap``: the cap of rounds ran undecided.
    """

    credited = "credited"
    no_meaningful_difference = "no_meaningful_difference"
    cap = "cap"


@dataclass(frozen=True, slots=True)
class SpeedupSequence:
    """The confidence sequence of a paired speedup after ``rounds`` rounds.

    Attributes:
        rounds: paired rounds read (>= 2).
        speedup: the geometric mean of the rounds' ratios (times faster, > 0).
        low, high: the sequence's bounds at this round (times faster; ``0`` and
            ``inf`` while it is the whole line).
        alpha: its error rate over all rounds together.
    """

    rounds: int
    speedup: float
    low: float
    high: float
    alpha: float

    @property
    def contains_one(self) -> bool:
        """True while a speedup of 1 (no difference) is inside the sequence."""
        return self.low <= 1.0 <= self.high

    def within(self, delta: float) -> bool:
        """True when the sequence lies inside ``[1/(1 + delta), 1 + delta]``
        (``delta`` a fraction, e.g. 0.03 for 3 %)."""
        return 1.0 / (1.0 + delta) <= self.low and self.high <= 1.0 + delta


def round_log_ratios(
    baseline: Mapping[int, float],
    candidate: Mapping[int, float],
    *,
    metric: SpeedupMetric | str = SpeedupMetric.tpot_ms,
) -> list[float]:
    """The per-round observations: ``log speedup_of(baseline_r, candidate_r, metric)``
    for every round common to both with positive, finite figures, in round order.

    ``baseline``/``candidate``: the metric per round number (ms, tokens/s or
    requests/s), as :func:`~deepseekbench.paired_speedup_ci` reads them. Returns
    dimensionless log ratios (> 0: the candidate is faster).

    Raises:
        ValueError: ``metric`` is not a :class:`SpeedupMetric` value.
    """
    m = SpeedupMetric(metric)
    out: list[float] = []
    for r in sorted(set(baseline) & set(candidate)):
        b, c = baseline[r], candidate[r]
        if b > 0 and c > 0 and math.isfinite(b) and math.isfinite(c):
            ratio = speedup_of(b, c, m)
            if math.isfinite(ratio) and ratio > 0:
                out.append(math.log(ratio))
    return out


def _c2(prior_scale: float) -> float:
    """``c² = 1/tau²`` of the module docstring."""
    if not (math.isfinite(prior_scale) and prior_scale > 0):
        raise ValueError("prior_scale must be > 0 and finite")
    return 1.0 / (prior_scale * prior_scale)


def log_ratio_e_value(
    log_ratios: Iterable[float],
    *,
    null: float = 0.0,
    prior_scale: float = DEFAULT_PRIOR_SCALE,
) -> float:
    """The e-process ``E_n(null)`` of the module docstring after ``len(log_ratios)``
    rounds (dimensionless, >= 0; 1 with fewer than 2 rounds or no spread about ``null``).

    ``log_ratios``: per-round log speedups (:func:`round_log_ratios`); ``null``: the
    hypothesised mean log speedup (0: no difference). Under the assumptions of the
    module docstring ``P(∃ n: E_n ≥ 1/alpha) ≤ alpha`` (Ville's inequality; Lai 1976,
    Wang & Ramdas 2023).

    Raises:
        ValueError: ``prior_scale`` not > 0 and finite, or a value not finite.
    """
    c2 = _c2(prior_scale)
    xs = np.asarray(list(log_ratios), dtype=float) - null
    if not np.all(np.isfinite(xs)):
        raise ValueError("log ratios must be finite")
    n = len(xs)
    s, v = float(np.sum(xs)), float(np.sum(xs * xs))
    if n < 2 or v <= 0.0:
        return 1.0
    share = min(s * s / ((c2 + n) * v), 1.0)
    log_e = 0.5 * math.log(c2 / (c2 + n)) - 0.5 * n * math.log1p(-share)
    return math.exp(min(log_e, 700.0))


def speedup_confidence_sequence(
    log_ratios: Iterable[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    prior_scale: float = DEFAULT_PRIOR_SCALE,
) -> SpeedupSequence | None:
    """The anytime-valid confidence sequence of the speedup after the given rounds.

    ``log_ratios``: the per-round log speedups so far (:func:`round_log_ratios`).
    Returns a :class:`SpeedupSequence` (times faster), or ``None`` with fewer than 2
    rounds. Exactly ``{exp(m) : E_n(m) < 1/alpha}`` of :func:`log_ratio_e_value`, in
    the closed form of the module docstring (Lai 1976; Wang & Ramdas 2023).

    Raises:
        ValueError: ``alpha`` not in (0, 1), ``prior_scale`` not > 0 and finite, or a
            value not finite.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must be in (0, 1)")
    c2 = _c2(prior_scale)
    xs = np.asarray(list(log_ratios), dtype=float)
    if not np.all(np.isfinite(xs)):
        raise ValueError("log ratios must be finite")
    n = len(xs)
    if n < 2:
        return None
    mean = float(np.mean(xs))
    s0 = float(np.sqrt(np.mean((xs - mean) ** 2)))
    log_k = math.log(1.0 / alpha) + 0.5 * math.log((c2 + n) / c2)
    bound = (c2 + n) * -math.expm1(-2.0 * log_k / n)
    speedup = math.exp(mean)
    if bound >= n:
        return SpeedupSequence(n, speedup, 0.0, math.inf, alpha)
    half = s0 * math.sqrt(bound / (n - bound))
    low, high = math.exp(mean - half), math.exp(min(mean + half, 700.0))
    return SpeedupSequence(n, speedup, low, high, alpha)


def sequential_verdict(
    sequence: SpeedupSequence | None,
    *,
    delta: float,
    min_rounds: int,
    cap: int,
    parity_ready: bool = True,
) -> StopReason | None:
    """The stopping rule after a round: why the comparison stops, or ``None`` to go on.

    ``sequence``: after the rounds run so far (``None``: fewer than 2). ``delta``: the
    "no meaningful difference" band (a fraction, e.g. 0.03). ``min_rounds``/``cap``:
    the fewest and most rounds (counts). ``parity_ready``: the parity set and the
    minimum measured traffic have run (no verdict before).

    Credits (``credited``) only when the sequence excludes 1; ``no_meaningful_difference``
    when it lies inside ``[1/(1 + delta), 1 + delta]`` (and so contains 1); ``cap``
    once ``cap`` rounds ran undecided.

    Raises:
        ValueError: ``delta`` not in [0, 1), ``min_rounds < 2`` or ``cap < min_rounds``.
    """
    if not 0.0 <= delta < 1.0:
        raise ValueError("delta must be in [0, 1)")
    if min_rounds < 2 or cap < min_rounds:
        raise ValueError("need 2 <= min_rounds <= cap")
    rounds = 0 if sequence is None else sequence.rounds
    if sequence is not None and parity_ready and rounds >= min_rounds:
        if not sequence.contains_one:
            return StopReason.credited
        if sequence.within(delta):
            return StopReason.no_meaningful_difference
    return StopReason.cap if rounds >= cap else None


def rounds_to_decision(
    log_ratios: Iterable[float],
    *,
    delta: float,
    min_rounds: int,
    cap: int,
    alpha: float = DEFAULT_ALPHA,
    prior_scale: float = DEFAULT_PRIOR_SCALE,
) -> tuple[int, StopReason, SpeedupSequence | None]:
    """Replay a stream of per-round log speedups through :func:`sequential_verdict`.

    Returns ``(rounds, reason, sequence)``: the round (count) at which it stopped, why,
    and the sequence then (``cap`` with the rounds read when the stream ends first).

    Raises:
        ValueError: as :func:`sequential_verdict` and :func:`speedup_confidence_sequence`.
    """
    seen: list[float] = []
    sequence: SpeedupSequence | None = None
    for x in log_ratios:
        seen.append(float(x))
        sequence = speedup_confidence_sequence(seen, alpha=alpha, prior_scale=prior_scale)
        reason = sequential_verdict(sequence, delta=delta, min_rounds=min_rounds, cap=cap)
        if reason is not None:
            return len(seen), reason, sequence
    return len(seen), StopReason.cap, sequence


@dataclass(frozen=True, slots=True)
class LineStop:
    """How a sequential comparison of one route at one cell and load point ended.

    Attributes:
        rounds: rounds the route ran there (a count).
        scheduled: rounds the plan scheduled there (its ``cap``).
        reason: why it stopped (``None``: still undecided, the run was cut short).
        sequence: the confidence sequence when it stopped (``None``: fewer than 2
            paired rounds, or the ``off`` route's own line).
    """

    rounds: int
    scheduled: int
    reason: StopReason | None
    sequence: SpeedupSequence | None = None

    @property
    def decided(self) -> bool:
        """True when a verdict stopped it (credited or no meaningful difference), so it
        runs no more rounds; a comparison at its ``cap`` ran them all."""
        return self.reason in (StopReason.credited, StopReason.no_meaningful_difference)

    @property
    def text(self) -> str:
        """``rounds 2 of 6, stopped: credited (sequence 1.61–1.75)`` and the like."""
        head = f"rounds {self.rounds} of {self.scheduled}"
        if self.reason is None:
            return f"{head}, undecided (the run stopped before its cap)"
        words = self.reason.value.replace("_", " ")
        seq = self.sequence
        if seq is None or not math.isfinite(seq.high):
            return f"{head}, stopped: {words}"
        return f"{head}, stopped: {words} (sequence {seq.low:.2f}–{seq.high:.2f})"


@dataclass(frozen=True, slots=True)
class RoundEvidence:
    """One side of a comparison, per round: the figure and the successful requests.

    Attributes:
        values: the metric per round number (ms, tokens/s or requests/s).
        ok: successful measured requests per round number (counts).
    """

    values: Mapping[int, float]
    ok: Mapping[int, int]


def line_stop(
    off: RoundEvidence,
    candidate: RoundEvidence,
    *,
    metric: SpeedupMetric | str,
    delta: float,
    min_rounds: int,
    min_requests: int,
    cap: int,
    alpha: float = DEFAULT_ALPHA,
    parity_ready: bool = True,
) -> LineStop:
    """Replay one comparison round by round: the first round at which
    :func:`sequential_verdict` stops it, or ``None`` while undecided.

    A prefix counts the rounds common to both sides, in round order; no verdict
    before each side has ``min_requests`` successful measured requests in it, nor
    while ``parity_ready`` is false. A pure function of the records, so a resumed run
    rebuilds the same decision.

    Raises:
        ValueError: as :func:`sequential_verdict`; ``metric`` unknown.
    """
    ran = len(set(candidate.ok) | set(candidate.values))
    xs: list[float] = []
    n_off = n_cand = 0
    sequence: SpeedupSequence | None = None
    for r in sorted(set(off.values) & set(candidate.values)):
        pair = round_log_ratios({r: off.values[r]}, {r: candidate.values[r]}, metric=metric)
        if not pair:
            continue
        xs += pair
        n_off, n_cand = n_off + off.ok.get(r, 0), n_cand + candidate.ok.get(r, 0)
        sequence = speedup_confidence_sequence(xs, alpha=alpha)
        ready = parity_ready and min(n_off, n_cand) >= min_requests
        reason = sequential_verdict(
            sequence, delta=delta, min_rounds=min_rounds, cap=cap, parity_ready=ready
        )
        if reason is not None and reason is not StopReason.cap:
            return LineStop(max(ran, len(xs)), cap, reason, sequence)
    reason = StopReason.cap if ran >= cap else None
    return LineStop(ran, cap, reason, sequence)
