"""The anytime-valid upper bound on the decisive-divergence rate (sequential parity).

Checked: the bound is never below the fixed-horizon Clopper-Pearson bound at the same
counts (the price of peeking); under continuous monitoring at a true rate equal to
``parity.lossy_rate`` it declares the rate below ``lossy_rate`` in at most α of 1,000
streams while the Clopper-Pearson bound peeked at every look exceeds α; the within-noise
verdict uses it (and names it) only when asked to, and ``fixed`` keeps its text.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import anytime_rate_bound, lossy_rate_bound, within_noise_verdict
from deepseekbench._analysis._anytime_rate import anytime_comparisons_needed
from deepseekbench._analysis._divergence import SEQUENTIAL_BOUND_NAME, comparisons_needed
from deepseekbench._types._axes import QualityParity

LOSSY = 0.125
ALPHA = 0.05


@given(
    n=st.integers(min_value=1, max_value=5000),
    frac=st.floats(min_value=0.0, max_value=1.0),
    alpha=st.floats(min_value=0.001, max_value=0.5),
)
def test_anytime_bound_never_below_clopper_pearson(n: int, frac: float, alpha: float) -> None:
    k = min(n, int(frac * n))
    seq, fixed = anytime_rate_bound(n, k, alpha), lossy_rate_bound(n, k, alpha)
    assert seq >= fixed - 1e-9, (n, k, alpha, seq, fixed)
    assert k / n <= seq <= 1.0


@given(n=st.integers(min_value=1, max_value=3000), alpha=st.floats(0.001, 0.5))
def test_anytime_bound_is_the_mixture_boundary(n: int, alpha: float) -> None:
    """At k = 0 the bound solves (1 − p)^n = α / (n + 1); more data never widens it."""
    b = anytime_rate_bound(n, 0, alpha)
    assert (1 - b) ** n == pytest.approx(alpha / (n + 1), rel=1e-9)
    assert anytime_rate_bound(n + 1, 0, alpha) <= b


def test_bad_counts_raise() -> None:
    for args in ((3, 4, 0.05), (3, -1, 0.05), (3, 1, 0.0), (3, 1, 1.0)):
        with pytest.raises(ValueError):
            anytime_rate_bound(*args)
    with pytest.raises(ValueError):
        anytime_comparisons_needed(0.0, 0.05)
    assert anytime_rate_bound(0, 0, 0.05) == 1.0
    assert anytime_rate_bound(7, 7, 0.05) == 1.0


def _largest_k(bound: object, n: int) -> int:
    """Largest event count whose bound at ``n`` is at most ``LOSSY`` (−1 when none);
    the bound rises with k, so the first k above it ends the search."""
    assert callable(bound)
    k = -1
    while k + 1 <= n and bound(n, k + 1, ALPHA) <= LOSSY:
        k += 1
    return k


def _false_verified_rate(bound: object, events: np.ndarray) -> float:
    """Fraction of streams whose bound, read after every comparison, ever falls to
    ``LOSSY`` or below although the true rate is ``LOSSY`` (a false ``verified``)."""
    cap = events.shape[1]
    limit = np.array([_largest_k(bound, n) for n in range(1, cap + 1)])
    counts = np.cumsum(events, axis=1)
    return float(np.mean(np.any(counts <= limit, axis=1)))


def test_continuous_monitoring_false_verified_rate() -> None:
    """1,000 streams at a true decisive rate equal to ``lossy_rate``, the bound checked
    after each of 400 comparisons: the anytime bound's false-verified rate is at most α,
    the Clopper-Pearson bound's, peeked at each look, exceeds it."""
    rng = np.random.default_rng(20261203)
    events = (rng.random((1000, 400)) < LOSSY).astype(np.int64)
    seq = _false_verified_rate(anytime_rate_bound, events)
    fixed = _false_verified_rate(lossy_rate_bound, events)
    print(f"false verified, 1,000 streams: anytime {seq:.3f}, Clopper-Pearson peeked {fixed:.3f}")
    assert seq <= ALPHA
    assert fixed > ALPHA


def test_first_decisive_rule_keeps_clopper_pearson_valid_at_zero_events() -> None:
    """With ``differs`` on the first decisive divergence, ``verified`` is read only at
    k = 0, where the fixed bound falls monotonically: the false-verified event is the
    first ``comparisons_needed`` outputs all clean, probability (1 − rate)^n ≤ α."""
    n = comparisons_needed(LOSSY, ALPHA)
    assert (1 - LOSSY) ** n <= ALPHA
    assert anytime_comparisons_needed(LOSSY, ALPHA) > n  # the anytime bound costs more
    m = anytime_comparisons_needed(LOSSY, ALPHA)
    assert anytime_rate_bound(m, 0, ALPHA) <= LOSSY < anytime_rate_bound(m - 1, 0, ALPHA)


def test_verdict_uses_and_names_the_anytime_bound_only_when_sequential() -> None:
    n_fixed = comparisons_needed(LOSSY, ALPHA)
    n_seq = anytime_comparisons_needed(LOSSY, ALPHA)
    fixed = within_noise_verdict([], n_fixed, {}, alpha=ALPHA, lossy_rate=LOSSY)
    assert fixed.parity is QualityParity.verified
    assert SEQUENTIAL_BOUND_NAME not in fixed.reason
    assert fixed.power_bound == pytest.approx(lossy_rate_bound(n_fixed, 0, ALPHA))
    early = within_noise_verdict([], n_fixed, {}, alpha=ALPHA, lossy_rate=LOSSY, sequential=True)
    assert early.parity is QualityParity.unknown
    assert SEQUENTIAL_BOUND_NAME in early.reason
    assert early.comparisons_needed == n_seq
    assert f"{n_seq - n_fixed} more" in early.reason
    done = within_noise_verdict([], n_seq, {}, alpha=ALPHA, lossy_rate=LOSSY, sequential=True)
    assert done.parity is QualityParity.verified
    assert done.power_bound == pytest.approx(anytime_rate_bound(n_seq, 0, ALPHA))
    assert SEQUENTIAL_BOUND_NAME in done.reason
