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
_T975: tuple[float, ...] = (
    12.706204736174694,
    4.302652729749462,
    3.1824463052837078,
    2.7764451051977934,
    2.5705818356363146,
    2.4469118511449786,
    2.364624251592784,
    2.306004135204166,
    2.262157162798205,
    2.228138851986274,
    2.200985160091639,
    2.1788128296672284,
    2.1603686564627913,
    2.144786687917804,
    2.131449545559776,
    2.1199052992212546,
    2.1098155778333156,
    2.1009220402410382,
    2.0930240544083087,
    2.085963447265864,
    2.0796138447276795,
    2.0738730679040254,
    2.0686576104190486,
    2.0638985616280245,
    2.0595385527532972,
    2.0555294386428735,
    2.0518305164802846,
    2.0484071417952454,
    2.045229642132703,
    2.0422724563012378,
    2.039513446396408,
    2.0369333434601016,
    2.0345152974493383,
    2.0322445093177186,
    2.030107928250343,
    2.0280940009804502,
    2.0261924630291093,
    2.0243941639119694,
    2.022690920036761,
    2.021075390306273,
    2.019540970441376,
    2.0180817028184443,
    2.016692199227824,
    2.0153675744437636,
    2.014103388880846,
    2.012895598919429,
    2.0117405137297655,
    2.010634757624232,
    2.0095752371292392,
    2.008559112100761,
    2.007583770315836,
    2.006646805061688,
    2.0057459953178687,
    2.0048792881880564,
    2.0040447832891455,
    2.003240718847872,
    2.002465459291007,
    2.0017174841452356,
    2.000995378088267,
    2.0002978220142604,
    1.999623584994939,
    1.9989715170333788,
    1.998340542520741,
    1.997729654317693,
    1.9971379083920038,
    1.9965644189523117,
    1.996008354025296,
    1.9954689314298435,
    1.9949454151072374,
    1.994437111771186,
    1.9939433678456255,
    1.9934635666618719,
    1.992997125889855,
    1.992543495180932,
    1.9921021540022417,
    1.9916726096446642,
    1.9912543953883846,
    1.9908470688116906,
    1.9904502102301285,
    1.990063421254446,
    1.9896863234569029,
    1.989318557136572,
    1.9889597801751624,
    1.9886096669757083,
    1.9882679074772216,
    1.98793420623902,
    1.9876082815890708,
    1.9872898648311692,
    1.986978699506281,
    1.9866745407037683,
    1.9863771544186177,
    1.98608631695113,
    1.9858018143458227,
    1.985523441866604,
    1.9852510035054978,
    1.984984311522457,
    1.9847231860139845,
    1.9844674545084815,
    1.9842169515864174,
    1.9839715185235518,
)
"""``scipy.stats.t.ppf(0.975, df)`` for ``df`` = 1..100, the doubles scipy 1.x returns
(a test checks each against scipy): the paired-rounds interval's constant for every
round count it meets in practice, bit for bit as before scipy left the import path, so
no recorded interval moves in its last digit. Other ``p`` or ``df`` are computed."""

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
    1e-12 relative; from ``df`` = 1e5 on, the Cornish-Fisher expansion (A&S 26.7.5);
    ``t_quantile(0.975, df)`` for integer ``df`` 1..100 from a table of scipy's values.

    Raises:
        ValueError: ``p`` not in (0, 1) or ``df`` not a finite number > 0.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not (math.isfinite(df) and df > 0):
        raise ValueError(f"df must be a finite number > 0, got {df}")
    if p == 0.5:
        return 0.0
    if p == 0.975 and df == int(df) and 1 <= df <= len(_T975):
        return _T975[int(df) - 1]
    return _computed_t(p, df)


def _computed_t(p: float, df: float) -> float:
    """:func:`t_quantile` without the table (``0 < p < 1``, ``df > 0``)."""
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -_computed_t(1.0 - p, df)
    if df >= _LARGE_DF:
        return _cornish_fisher(p, df)
    q = 1.0 - p  # the upper tail to reach: sf(t) = q, sf decreasing in t
    lo, hi = 0.0, 1.0
    while _t_sf(hi, df) > q:
        lo, hi = hi, hi * 2.0
    return _solve_increasing(lambda t: q - _t_sf(t, df), lambda t: _t_pdf(t, df), lo, hi)
