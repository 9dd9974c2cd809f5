"""No credit without significance, also without any interval: a figure judged from the
rows alone (no per-request, per-round or per-prompt values) is a point estimate.

It is still shown (the rows qualified), but its verdict says its significance was not
judged and it is falsy: ``if compare_speedup(a, b):`` never takes the branch for it.
The property runs against the real comparator and against the behaviour before
(a point estimate truthy, as if credited), which it must catch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepseekbench import Row, Scorecard, SpeedupMetric, SpeedupVerdict, compare_speedup
from tests.strategies import creditable_pairs
from tests.test_foundation import make_row
from tests.test_properties import BROKEN_SETTINGS, PROPERTY_SETTINGS

Comparator = Callable[..., SpeedupVerdict]


def test_a_figure_without_an_interval_says_it_is_a_point_estimate() -> None:
    base, cand = make_row(), make_row(speculative="mtp", tpot_ms=10.0)
    verdict = compare_speedup(base, cand)
    assert verdict.printed and verdict.speedup == pytest.approx(2.0)
    assert verdict.point_estimate and not verdict
    assert str(verdict) == "2.00× by tpot_ms (point estimate, significance not judged)"
    card = Scorecard.from_rows([base, cand])
    assert card.lines[1].speedup_text == str(verdict)
    assert "\npoint estimate: a figure without per-request values has no interval" in card.to_text()


def test_a_figure_with_an_interval_is_credited_and_no_point_estimate() -> None:
    base, cand = make_row(), make_row(speculative="mtp", tpot_ms=10.0)
    verdict = compare_speedup(
        base, cand, rounds=({0: 20.0, 1: 20.2, 2: 19.8}, {0: 10.0, 1: 10.1, 2: 9.9})
    )
    assert verdict and not verdict.point_estimate and verdict.rounds == 3


class _TruthyPointEstimate(SpeedupVerdict):
    """The verdict before: truthy whenever a figure is printed."""

    def __bool__(self) -> bool:
        return self.printed


def credits_a_point_estimate(base: Row, cand: Row, **kw: Any) -> SpeedupVerdict:
    verdict = compare_speedup(base, cand, **kw)
    return _TruthyPointEstimate.model_construct(**verdict.__dict__)


def check_no_credit_without_an_interval(
    compare: Comparator, cfg: settings = PROPERTY_SETTINGS
) -> None:
    @cfg
    @given(pair=creditable_pairs(), metric=st.sampled_from(SpeedupMetric))
    def prop(pair: tuple[Row, Row], metric: SpeedupMetric) -> None:
        verdict = compare(*pair, metric=metric)
        if verdict:
            assert verdict.ci_low is not None and verdict.ci_high is not None
            assert not verdict.ci_low <= 1.0 <= verdict.ci_high
        if verdict.printed and verdict.ci_low is None:
            assert verdict.point_estimate and "significance not judged" in str(verdict)

    prop()


def test_no_credit_without_an_interval() -> None:
    check_no_credit_without_an_interval(compare_speedup)


def test_the_property_catches_a_comparator_that_credits_a_point_estimate() -> None:
    with pytest.raises(AssertionError):
        check_no_credit_without_an_interval(credits_a_point_estimate, BROKEN_SETTINGS)
