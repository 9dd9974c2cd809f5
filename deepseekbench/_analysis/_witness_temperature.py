"""The effective temperature of a route's sampled tokens: a diagnosis, never a verdict.

When the distribution witness refuses a route, *what kind* of departure it is matters:
a temperature applied twice leaves the tokens fitting ``T²`` (0.64 at a requested
0.8), argmax acceptance drives the fit towards 0, a draft that ignores the temperature
pulls it towards 1 (a mixture of the tempered and untempered laws), and a correct
sampler fits the temperature asked. This module fits that one number.

**The model.** At each tested position (inside ``off``'s top-k set, after the witness's
selection rule) the witness knows ``off``'s tempered log-weights relative to the top-1,
``h_c = (l_c - l_1) / T`` (nats; ``-inf`` for a category the truncation or the
end-of-sequence conditioning removes) and the sampled category ``x``. The one-parameter
family ``q_γ(c) ∝ exp(γ·h_c)`` on the top-k set is the requested law at ``γ = 1`` and the
law at temperature ``T/γ`` otherwise (truncation held at the requested temperature's
set). The log-likelihood ``ℓ(γ) = Σ_t [γ·h_{x_t} - log Σ_c exp(γ·h_c)]`` is concave in
``γ`` (an exponential family in its natural parameter: ``ℓ'' = -Σ_t Var_γ(h) ≤ 0``), so
the maximum-likelihood ``γ̂`` solves the score equation ``Σ_t (h_{x_t} - E_γ h) = 0`` by
bisection, and the interval is the profile-likelihood set ``{γ : 2(ℓ(γ̂) - ℓ(γ)) ≤
χ²₁(level)}`` (Wilks 1938, Ann. Math. Stat. 9(1)), found by bisection on each side.
The score at ``γ = 1`` is the witness's log-score statistic (:func:`log_score_test`),
so the fit names the direction that test measured. The positions are a predictable
selection of the conditionally independent draws (``_witness`` module docstring), so
the conditional likelihood is the product above.

The effective temperature is ``T̂ = T / γ̂`` (its interval from the ``γ`` interval,
reversed); with outputs sampled at several temperatures only the ratio ``1/γ̂`` is
stated. Numpy and stdlib only (the chi-square quantile is the squared normal quantile).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

FIT_LEVEL = 0.95
"""The profile-likelihood interval's coverage."""

_GAMMA_BOUNDS = (1e-2, 1e2)
"""The search range of ``γ`` (temperature ratios 0.01 to 100); an estimate at an end is
stated as beyond it."""

_STEPS = 80  # bisection halvings over log(γ): far below float resolution of the range


class EffectiveTemperature(BaseModel):
    """The temperature the route's tested tokens fit best under ``off``'s law (frozen).

    Attributes:
        ratio: ``1/γ̂``, the fitted temperature over the requested one (1 for a correct
            sampler; 0.8 for a temperature applied twice at T=0.8).
        ratio_low / ratio_high: the profile-likelihood interval of the ratio at
            ``level``.
        requested: the requested temperature when every tested output asked the same
            one, else ``None`` (then only the ratio is stated).
        tokens: the tested tokens the fit used (tokens).
        level: the interval's coverage.
        at_bound: the estimate reached the search range's end (``ratio`` 0.01 or 100).

    Raises:
        pydantic.ValidationError: a value out of range.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ratio: float = Field(gt=0)
    ratio_low: float = Field(gt=0)
    ratio_high: float = Field(gt=0)
    requested: float | None = Field(default=None, gt=0)
    tokens: int = Field(ge=1)
    level: float = Field(default=FIT_LEVEL, gt=0, lt=1)
    at_bound: bool = False

    @property
    def temperature(self) -> float | None:
        """The fitted temperature ``T̂`` (``requested · ratio``), ``None`` when the outputs
        asked different temperatures."""
        return None if self.requested is None else self.requested * self.ratio

    def words(self) -> str:
        """One clause for the verdict text, e.g. "tokens fit T≈0.64 [0.61, 0.67] where
        the request asked 0.80 (effective-temperature diagnosis, 1,634 tokens)"."""
        edge = " (at the search bound)" if self.at_bound else ""
        tail = f"(effective-temperature diagnosis, {self.tokens:,} tokens{edge})"
        if self.requested is None:
            return (
                f"tokens fit {self.ratio:.2f}x the requested temperatures "
                f"[{self.ratio_low:.2f}, {self.ratio_high:.2f}] {tail}"
            )
        t = self.requested
        return (
            f"tokens fit T≈{t * self.ratio:.2f} [{t * self.ratio_low:.2f}, "
            f"{t * self.ratio_high:.2f}] where the request asked {t:.2f} {tail}"
        )


def _pad(gaps: Sequence[np.ndarray]) -> np.ndarray:
    """The positions' log-weights as one ``(n, k)`` array, ``-inf`` padded."""
    k = max(len(g) for g in gaps)
    out = np.full((len(gaps), k), -np.inf)
    for i, g in enumerate(gaps):
        out[i, : len(g)] = g
    return out


def _loglik(gamma: float, h: np.ndarray, hx: np.ndarray) -> tuple[float, float]:
    """``(ℓ(γ), ℓ'(γ))`` over the positions (nats)."""
    z = gamma * h
    top = z.max(axis=1, keepdims=True)
    w = np.exp(z - top)
    s = w.sum(axis=1)
    finite = np.where(np.isfinite(h), h, 0.0)
    mean = (w * finite).sum(axis=1) / s
    ll = float((gamma * hx - top[:, 0] - np.log(s)).sum())
    return ll, float((hx - mean).sum())


def _bisect_log(lo: float, hi: float, above: bool, f: Callable[[float], bool]) -> float:
    """Bisection on ``log γ`` for the change of ``f``: ``f`` is ``above`` at ``lo``'s
    side and not at ``hi``'s."""
    a, b = math.log(lo), math.log(hi)
    for _ in range(_STEPS):
        mid = (a + b) / 2
        if bool(f(math.exp(mid))) == above:
            a = mid
        else:
            b = mid
    return math.exp((a + b) / 2)


def fit_effective_temperature(
    gaps: Sequence[np.ndarray],
    chosen: Sequence[int],
    requested: float | None,
    *,
    level: float = FIT_LEVEL,
) -> EffectiveTemperature | None:
    """The maximum-likelihood temperature ratio of the sampled categories (module docstring).

    Args:
        gaps: per tested position, ``off``'s tempered log-weights relative to the top-1
            over the top-k set (nats; ``-inf`` for a removed category), shape ``(k_t,)``.
        chosen: per position, the sampled category's index into its ``gaps``.
        requested: the requested temperature when all outputs asked one, else ``None``.
        level: the interval's coverage, in (0, 1).

    Returns:
        :class:`EffectiveTemperature`, or ``None`` when no position carries information
        (every position has one category or equal weights).

    Raises:
        ValueError: ``gaps`` and ``chosen`` differ in length, a chosen index is out of
            range or names a removed category, or ``level`` is outside (0, 1).
    """
    if len(gaps) != len(chosen):
        raise ValueError("gaps and chosen must have one entry per position")
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    if not gaps:
        return None
    h = _pad(gaps)
    idx = np.asarray(chosen, dtype=int)
    if np.any(idx < 0) or np.any(idx >= np.array([len(g) for g in gaps])):
        raise ValueError("a chosen index is outside its position's categories")
    hx = h[np.arange(len(idx)), idx]
    if not np.all(np.isfinite(hx)):
        raise ValueError("a chosen category has weight 0")
    spread = np.nanmax(np.where(np.isfinite(h), h, np.nan), axis=1) - np.nanmin(
        np.where(np.isfinite(h), h, np.nan), axis=1
    )
    informative = spread > 0
    if not informative.any():
        return None
    h, hx = h[informative], hx[informative]
    return _fit(h, hx, requested, level)


def _fit(
    h: np.ndarray, hx: np.ndarray, requested: float | None, level: float
) -> EffectiveTemperature:
    """The bisections: ``γ̂`` on the score, then each end of the likelihood interval."""
    lo, hi = _GAMMA_BOUNDS
    gamma = _bisect_log(lo, hi, True, lambda g: _loglik(g, h, hx)[1] > 0)
    at_bound = gamma <= lo * 1.0001 or gamma >= hi / 1.0001
    best = _loglik(gamma, h, hx)[0]
    cut = NormalDist().inv_cdf((1 + level) / 2) ** 2 / 2

    def inside(g: float) -> bool:
        return best - _loglik(g, h, hx)[0] <= cut

    g_low = lo if inside(lo) else _bisect_log(lo, gamma, False, inside)
    g_high = hi if inside(hi) else _bisect_log(gamma, hi, True, inside)
    return EffectiveTemperature(
        ratio=1 / gamma,
        ratio_low=1 / g_high,
        ratio_high=1 / g_low,
        requested=requested,
        tokens=len(hx),
        level=level,
        at_bound=at_bound,
    )


def log_score_test(deviation: float, variance: float) -> tuple[float, float]:
    """(z, two-sided p-value) of the witness's log-score test: ``deviation`` is the
    sampled tokens' summed raw log-probabilities (relative to the top-1, nats) minus
    their null mean under the conditional law on the top-k set, ``variance`` the summed
    null variances (nats²); ``z = deviation / sqrt(variance)``, ``(0, 1)`` when the
    variance is 0.

    Each term ``g_t(x_t) - E_t g_t`` is a martingale difference with predictable
    variance, so ``z`` is asymptotically N(0, 1) under a correct sampler (martingale
    CLT, McLeish 1974, Ann. Probab. 2(4)). ``g_t`` is the log-likelihood's derivative
    in ``1/T`` up to a constant, so this is the score test for a change of temperature
    (Rao 1948), the score of :func:`fit_effective_temperature`'s likelihood at the
    requested temperature: locally the most powerful against a sampler too hot (a
    draft that ignores the temperature) or too cold (argmax acceptance). Raises nothing.
    """
    if variance <= 0:
        return 0.0, 1.0
    from scipy import stats  # lazily: about 1 CPU-s to import, not on the rows' path

    z = deviation / math.sqrt(variance)
    return z, float(min(1.0, 2 * stats.norm.sf(abs(z))))
