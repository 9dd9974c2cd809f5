"""Student's t and beta quantiles without scipy, for what reading a results file needs.

``scipy.stats`` costs about 1 CPU-s to import, and reading a results file needs only
two quantiles from it: ``t.ppf(0.975, n - 1)`` (the paired-rounds speedup interval)
and ``beta.ppf(1 - alpha, k + 1, n - k)`` (the Clopper-Pearson bound on a lossy rate).
The beta quantile inverts the regularized incomplete beta function ``I_x(a, b)``;
the t quantile inverts the t distribution's
survival function, written with the regularized incomplete beta function
(Abramowitz & Stegun 26.7.1 and 26.5.27: ``P(T > t) = I_x(df/2, 1/2) / 2`` with
``x = df / (df + t^2)``), evaluated by its continued fraction (A&S 26.5.8, Lentz's
method as in Press et al., Numerical Recipes, 3rd ed., section 6.4), and inverted by
Newton's method kept inside a bisection bracket; for ``df >= 1e5`` the
Cornish-Fisher expansion from the normal quantile (A&S 26.7.5). A test compares it with
``scipy.stats.t.ppf`` and ``scipy.stats.beta.ppf`` to 1e-6 (relative, or absolute
below 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

__all__ = ["beta_quantile", "t_quantile"]

_EPS = 1e-15
_TINY = 1e-300
_LARGE_DF = 1e5
"""From here on the Cornish-Fisher expansion (A&S 26.7.5) is exact to double precision,
and the incomplete beta's ``lgamma`` differences start to lose digits."""


def _cornish_fisher(p: float, df: float) -> float:
    """The t quantile from the normal one, four terms in ``1 / df`` (A&S 26.7.5)."""
    z = NormalDist().inv_cdf(p)
    z2 = z * z
    g1 = z * (z2 + 1) / 4
    g2 = z * ((5 * z2 + 16) * z2 + 3) / 96
    g3 = z * (((3 * z2 + 19) * z2 + 17) * z2 - 15) / 384
    g4 = z * ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) / 92160
    return z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)`` for ``0 <= x <= 1``, ``a, b > 0``, given
    ``y = 1 - x`` computed apart (exact near either end, where ``1 - x`` rounds)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_x = math.log(x) if x < 0.5 else math.log1p(-y)
    log_y = math.log(y) if y < 0.5 else math.log1p(-x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * log_x + b * log_y
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, y) / b


def _solve_increasing(
    f: Callable[[float], float], slope: Callable[[float], float], lo: float, hi: float
) -> float:
    """The root of increasing ``f`` in ``[lo, hi]`` (``f(lo) <= 0 <= f(hi)``): Newton steps
    kept inside the bracket, every third step a bisection, to about 1e-14 relative."""
    x = (lo + hi) / 2.0
    for i in range(400):
        fx = f(x)
        if fx < 0:
            lo = x
        else:
            hi = x
        d = slope(x)
        nxt = x - fx / d if d > 0 else hi
        if i % 3 == 2 or not lo < nxt < hi:  # every third step halves the bracket
            nxt = (lo + hi) / 2.0
        if abs(nxt - x) <= 1e-14 * max(_TINY, abs(nxt)) or hi - lo <= 1e-15 * abs(hi):
            return nxt
        x = nxt
    return x


def beta_quantile(p: float, a: float, b: float) -> float:
    """The ``p`` quantile of the Beta(``a``, ``b``) distribution (a fraction in [0, 1]):
    ``beta_quantile(0.95, 1, 10)`` is ``1 - 0.05 ** (1 / 10)``, as
    ``scipy.stats.beta.ppf(0.95, 1, 10)``.

    Source: the inverse of the regularized incomplete beta function (Abramowitz &
    Stegun 26.5.8), by bracketed Newton steps to about 1e-14 relative.

    Raises:
        ValueError: ``p`` not in (0, 1), or ``a`` or ``b`` not a finite number > 0.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not all(math.isfinite(v) and v > 0 for v in (a, b)):
        raise ValueError(f"a and b must be finite numbers > 0, got {a}, {b}")
    log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)

    def pdf(x: float) -> float:
        if not 0.0 < x < 1.0:
            return 0.0
        return math.exp((a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - log_beta)

    return _solve_increasing(lambda x: _betainc(a, b, x, 1.0 - x) - p, pdf, 0.0, 1.0)


def _t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for ``t >= 0``: ``I_x(df/2, 1/2) / 2`` with ``x = df / (df + t^2)``."""
    tt = t * t
    return 0.5 * _betainc(df / 2.0, 0.5, df / (df + tt), tt / (df + tt))


def _t_pdf(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (dimensionless):
    ``t_quantile(0.975, 4)`` is 2.776..., as ``scipy.stats.t.ppf(0.975, 4)``.

    Source: the t survival function through the regularized incomplete beta function
    (Abramowitz & Stegun 26.7.1, 26.5.8), inverted by bracketed Newton steps to about
    1e-12 relative; from ``df`` = 1e5 on, the Cornish-Fisher expansion (A&S 26.7.5).

    Raises:
        ValueError: ``p`` not in (0, 1) or ``df`` not a finite number > 0.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not (math.isfinite(df) and df > 0):
        raise ValueError(f"df must be a finite number > 0, got {df}")
    if p == 0.5:
        return 0.0
    if df >= _LARGE_DF:
        return _cornish_fisher(p, df)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    q = 1.0 - p  # the upper tail to reach: sf(t) = q, sf decreasing in t
    lo, hi = 0.0, 1.0
    while _t_sf(hi, df) > q:
        lo, hi = hi, hi * 2.0
    return _solve_increasing(lambda t: q - _t_sf(t, df), lambda t: _t_pdf(t, df), lo, hi)
