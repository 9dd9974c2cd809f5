"""Parity within the engine's own noise: noise floor, τ, and the verdict.

Pure functions over classified divergences (:class:`~deepseekbench._types._margin.
DivergenceMargin`). Definitions:

- **Noise floor**: ``off`` against itself (the determinism control and ``off``'s
  rounds at the same load point): how many of its comparisons diverged, and the
  margins (nats) at which it flipped (:class:`NoiseFloor`).
- **τ** (nats): the plan's ``parity.tau_nats`` when set; else the largest margin at
  which ``off`` flipped against itself, when it did; else
  :data:`~deepseekbench._types._margin.DEFAULT_TAU_NATS` (justified there from the
  bfloat16 unit roundoff). :func:`calibrate_tau` returns it with its
  :class:`~deepseekbench._types._margin.TauSource`.
- **Within-noise verdict** (:func:`within_noise_verdict`): ``verified`` only when no
  divergence is ``decisive`` or ``unexplained``, the candidate's divergence rate is
  not significantly above ``off``'s self-divergence rate, and task parity holds. The
  rate test is the one-sided Fisher exact test on the 2×2 table (candidate diverged /
  not, ``off`` self-diverged / not), alternative "greater" (R. A. Fisher, *The Design
  of Experiments*, 1935; computed by ``scipy.stats.fisher_exact``, hypergeometric
  upper tail), at the plan's ``parity.alpha``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._axes import QualityParity
from deepseekbench._types._margin import (
    DEFAULT_TAU_NATS,
    DivergenceKind,
    DivergenceMargin,
    TauSource,
)

__all__ = [
    "DivergenceCounts",
    "NoiseFloor",
    "NoiseVerdict",
    "calibrate_tau",
    "count_divergences",
    "rate_above_floor_p",
    "within_noise_verdict",
]


class NoiseFloor(BaseModel):
    """``off`` against itself: ``n_diverged`` of ``n_compared`` comparisons differed,
    at ``flip_margins_nats`` (the margins, nats, of the self-flips that have one)."""

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


def calibrate_tau(floor: NoiseFloor, plan_tau_nats: float | None) -> tuple[float, TauSource]:
    """τ (nats) and its source: the plan's value, else ``off``'s largest self-flip
    margin, else :data:`~deepseekbench._types._margin.DEFAULT_TAU_NATS`."""
    if plan_tau_nats is not None:
        return plan_tau_nats, TauSource.plan
    if floor.flip_margins_nats:
        return max(floor.flip_margins_nats), TauSource.off_self_flips
    return DEFAULT_TAU_NATS, TauSource.default


def rate_above_floor_p(n_diverged: int, n_compared: int, floor: NoiseFloor) -> float:
    """One-sided Fisher exact p-value that the candidate's divergence rate
    (``n_diverged`` / ``n_compared``) is above ``off``'s self-divergence rate.

    Returns 1.0 when either side compared nothing (no evidence of a higher rate).

    Raises:
        ValueError: counts negative or diverged above compared.
    """
    if not 0 <= n_diverged <= n_compared or not 0 <= floor.n_diverged <= floor.n_compared:
        raise ValueError("counts must satisfy 0 <= diverged <= compared")
    if n_compared == 0 or floor.n_compared == 0:
        return 1.0
    from scipy.stats import fisher_exact

    table = [
        [n_diverged, n_compared - n_diverged],
        [floor.n_diverged, floor.n_compared - floor.n_diverged],
    ]
    _, p = fisher_exact(table, alternative="greater")
    return float(p)


class NoiseVerdict(BaseModel):
    """The within-noise verdict of one route: ``parity`` and one-sentence ``reason``,
    the counts by kind, the rate test's p-value, τ (nats) and its source."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parity: QualityParity
    reason: str
    near_tie: int = 0
    decisive: int = 0
    unexplained: int = 0
    p_value: float | None = None
    tau_nats: float = DEFAULT_TAU_NATS
    tau_source: TauSource = TauSource.default


def within_noise_verdict(
    margins: Sequence[DivergenceMargin],
    n_compared: int,
    floor: NoiseFloor,
    *,
    alpha: float,
    tasks_parity: QualityParity | None = None,
    tau: tuple[float, TauSource] = (DEFAULT_TAU_NATS, TauSource.default),
    n_missing: int = 0,
) -> NoiseVerdict:
    """Judge a route whose divergences are ``margins`` (one per diverged comparison,
    already classified against ``tau``) out of ``n_compared`` comparisons.

    ``verified`` iff: no ``decisive`` and no ``unexplained`` divergence, the one-sided
    Fisher p-value (:func:`rate_above_floor_p`) is at least ``alpha``, no output is
    missing, and ``tasks_parity`` (when given) is ``verified``. ``differs`` when a
    divergence is decisive, the rate is significantly above the floor, or task
    parity differs; ``unknown`` otherwise (unexplained divergences, missing outputs,
    nothing compared, task parity unknown).

    Raises:
        ValueError: ``alpha`` outside (0, 1), or inconsistent counts.
    """
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    c = count_divergences(margins)
    p = rate_above_floor_p(len(margins), n_compared, floor)
    fields: dict[str, Any] = {
        "near_tie": c.near_tie,
        "decisive": c.decisive,
        "unexplained": c.unexplained,
        "p_value": p,
        "tau_nats": tau[0],
        "tau_source": tau[1],
    }
    rate = (
        f"{len(margins)} of {n_compared} diverge vs {floor.describe()} (one-sided Fisher p={p:.3g})"
    )
    if c.decisive:
        first = next(m for m in margins if m.kind is DivergenceKind.decisive)
        reason = f"decisive divergence at {first.describe()}"
        return NoiseVerdict(parity=QualityParity.differs, reason=reason, **fields)
    if p < alpha:
        reason = f"divergence rate above off's noise floor: {rate} < alpha {alpha:g}"
        return NoiseVerdict(parity=QualityParity.differs, reason=reason, **fields)
    if tasks_parity is QualityParity.differs:
        return NoiseVerdict(parity=QualityParity.differs, reason="task parity differs", **fields)
    if c.unexplained:
        reason = f"{c.unexplained} divergences without a margin (no logprobs); {rate}"
        return NoiseVerdict(parity=QualityParity.unknown, reason=reason, **fields)
    if n_missing or n_compared == 0:
        reason = f"{n_missing} outputs missing" if n_missing else "nothing compared"
        return NoiseVerdict(parity=QualityParity.unknown, reason=reason, **fields)
    if tasks_parity is not None and tasks_parity is not QualityParity.verified:
        return NoiseVerdict(parity=QualityParity.unknown, reason="task parity unknown", **fields)
    if margins:
        largest = max(m.margin_nats or 0.0 for m in margins)
        reason = (
            f"{len(margins)} divergences, all near-ties (largest margin {largest:.3g} nats "
            f"≤ τ {tau[0]:.3g} from {tau[1].value}); {rate}"
        )
    else:
        reason = f"no divergence in {n_compared}"
    return NoiseVerdict(parity=QualityParity.verified, reason=reason, **fields)
