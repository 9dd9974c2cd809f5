"""An anytime-valid upper confidence bound on a Bernoulli rate (the decisive-divergence
rate per compared output) that may be read after every comparison.

The fixed-horizon Clopper-Pearson bound (:func:`~deepseekbench._analysis._divergence.
lossy_rate_bound`) covers the rate with probability 1 − α at one sample size fixed in
advance; read after every round and acted on the first time it falls below
``parity.lossy_rate``, it declares a lossy route ``verified`` more often than α.

The bound here is the upper end of the beta-binomial mixture confidence sequence
(H. Robbins, "Statistical methods related to the law of the iterated logarithm", Ann.
Math. Statist. 41, 1970; S. R. Howard, A. Ramdas, J. McAuliffe and J. Sekhon,
"Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49,
2021, the conjugate-mixture construction). For a rate ``p`` the mixture likelihood
ratio, with a uniform Beta(1, 1) mixing distribution over the alternative,

    M_n(p) = B(k + 1, n − k + 1) / (p^k (1 − p)^(n − k))
           = 1 / ((n + 1) · C(n, k) p^k (1 − p)^(n − k))

is a nonnegative martingale with mean 1 under the true ``p``, so by Ville's inequality
P(∃ n: M_n(p) ≥ 1/α) ≤ α: the set {p: M_n(p) < 1/α} covers the true rate at every
``n`` simultaneously with probability at least 1 − α. Its upper end solves
``C(n, k) p^k (1 − p)^(n − k) = α / (n + 1)`` for ``p ≥ k / n``. At the same counts it
is never below the Clopper-Pearson bound (at that bound ``P(X ≤ k) = α``, and the
binomial CDF at ``k`` is at most ``(n + 1)`` times its pmf at ``k`` when ``p ≥ k/n``):
the extra width is the price of peeking.
"""

from __future__ import annotations

import math

__all__ = ["anytime_comparisons_needed", "anytime_rate_bound"]

_ITERATIONS = 200  # bisection steps: the interval halves each step, far below 1e-15


def _log_pmf(n: int, k: int, p: float) -> float:
    """log C(n, k) p^k (1 − p)^(n − k), for 0 < p < 1."""
    log_choose = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    return log_choose + k * math.log(p) + (n - k) * math.log1p(-p)


def anytime_rate_bound(n_compared: int, n_decisive: int, alpha: float) -> float:
    """Anytime-valid upper bound at level ``alpha`` on a Bernoulli rate (a fraction;
    here the decisive-divergence rate per compared output) from ``n_decisive`` events in
    ``n_compared`` trials: the upper end of the beta-binomial (uniform-mixture)
    confidence sequence of Robbins 1970 (module docstring), valid at any data-dependent
    stopping time. 1.0 with nothing compared or every trial an event. Closed form for
    ``n_decisive == 0``: 1 − (α / (n + 1))^(1/n); otherwise bisection on the log pmf.

    Raises:
        ValueError: counts not integers or inconsistent, or ``alpha`` outside (0, 1).
    """
    if not isinstance(n_compared, int) or not isinstance(n_decisive, int):
        raise ValueError("counts must be integers")
    if not 0 <= n_decisive <= n_compared or not 0 < alpha < 1:
        raise ValueError("need 0 <= n_decisive <= n_compared and alpha in (0, 1)")
    n, k = n_compared, n_decisive
    if k == n:
        return 1.0
    target = math.log(alpha) - math.log(n + 1)
    if k == 0:
        return -math.expm1(target / n)
    lo, hi = k / n, 1.0  # the log pmf falls from its maximum at k/n to -inf at 1
    for _ in range(_ITERATIONS):
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if _log_pmf(n, k, mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


def anytime_comparisons_needed(lossy_rate: float, alpha: float) -> int:
    """Fewest compared outputs whose zero decisive divergences put
    :func:`anytime_rate_bound` at or below ``lossy_rate`` at ``alpha`` (the anytime
    counterpart of :func:`~deepseekbench._analysis._divergence.comparisons_needed`).

    Raises:
        ValueError: ``lossy_rate`` or ``alpha`` outside (0, 1).
    """
    if not 0 < lossy_rate < 1 or not 0 < alpha < 1:
        raise ValueError("lossy_rate and alpha must be in (0, 1)")
    lo, hi = 1, 2
    while anytime_rate_bound(hi, 0, alpha) > lossy_rate:  # bound decreases in n
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if anytime_rate_bound(mid, 0, alpha) <= lossy_rate:
            hi = mid
        else:
            lo = mid + 1
    return hi
