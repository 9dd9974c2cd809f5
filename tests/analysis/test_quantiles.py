"""Student's t and beta quantiles without scipy agree with ``scipy.stats`` to 1e-6."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from scipy.stats import beta as scipy_beta
from scipy.stats import t as scipy_t

from deepseekbench._analysis._quantiles import _computed_t, beta_quantile, t_quantile

_DF = st.one_of(st.integers(1, 60), st.floats(1.0, 1e12))
_P = st.one_of(st.floats(1e-9, 1 - 1e-9), st.sampled_from([0.5, 0.9, 0.95, 0.975, 0.99, 0.025]))


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= 1e-6 * max(1.0, abs(theirs))


@given(p=_P, df=_DF)
@example(p=0.975, df=1)  # Cauchy: 12.706
@example(p=0.975, df=4)
@example(p=0.5000001, df=1e6)  # near the median: 1 - x rounds, y must be exact
@example(p=0.999999999, df=2)
@example(p=0.975, df=99_999.0)  # either side of the Cornish-Fisher switch
@example(p=0.975, df=100_000.0)
def test_the_t_quantile_is_scipys(p: float, df: float) -> None:
    assert _close(t_quantile(p, df), float(scipy_t.ppf(p, df)))


@pytest.mark.parametrize("df", range(1, 101))
def test_every_small_sample_interval_uses_scipys_constant(df: int) -> None:
    """The paired-rounds interval's own constant, for every round count it meets: scipy's
    double itself (a recorded interval keeps its last digit), and the computation agrees."""
    assert t_quantile(0.975, df) == float(scipy_t.ppf(0.975, df))
    assert abs(_computed_t(0.975, df) - t_quantile(0.975, df)) <= 1e-12 * t_quantile(0.975, df)


@given(p=_P, df=_DF)
@example(p=0.975, df=4)
def test_the_computed_t_quantile_is_scipys(p: float, df: float) -> None:
    assert _close(_computed_t(p, df), float(scipy_t.ppf(p, df)))


@pytest.mark.parametrize(("p", "df"), [(0.0, 3), (1.0, 3), (0.5, 0), (0.5, float("nan"))])
def test_bad_arguments_are_refused(p: float, df: float) -> None:
    with pytest.raises(ValueError):
        t_quantile(p, df)


@given(
    n=st.integers(1, 5_000),
    k=st.integers(0, 5_000),
    alpha=st.one_of(st.sampled_from([0.05, 0.01, 0.1]), st.floats(1e-6, 0.5)),
)
@example(n=10, k=0, alpha=0.05)  # zero events: 1 - alpha ** (1 / n)
@example(n=3491, k=35, alpha=0.4463203331701108)
def test_the_clopper_pearson_beta_quantile_is_scipys(n: int, k: int, alpha: float) -> None:
    k = k % n  # 0 <= k < n: the bound's Beta(k + 1, n - k)
    ours, theirs = (
        beta_quantile(1 - alpha, k + 1, n - k),
        float(scipy_beta.ppf(1 - alpha, k + 1, n - k)),
    )
    assert _close(ours, theirs) and abs(ours - theirs) <= 1e-9 * theirs


@given(p=st.floats(1e-6, 1 - 1e-6), a=st.floats(0.1, 1e3), b=st.floats(0.1, 1e3))
def test_the_beta_quantile_is_scipys_for_any_shape(p: float, a: float, b: float) -> None:
    assert _close(beta_quantile(p, a, b), float(scipy_beta.ppf(p, a, b)))


@pytest.mark.parametrize(("p", "a", "b"), [(0.0, 1, 1), (1.0, 1, 1), (0.5, 0, 1), (0.5, 1, -1)])
def test_bad_beta_arguments_are_refused(p: float, a: float, b: float) -> None:
    with pytest.raises(ValueError):
        beta_quantile(p, a, b)
