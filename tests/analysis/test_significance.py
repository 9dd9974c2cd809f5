"""The significance rule: no credit without significance.

A speedup or slowdown whose 95 % interval includes 1 is reported as "no significant
difference (lo–hi)" and is not credited; ``compare_speedup`` and the scorecard agree.
The property runs against the real comparator AND one that credits an interval
spanning 1 (the behaviour before the significance rule), which it must catch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from deepseekbench import (
    QualityParity,
    RefusalReason,
    Row,
    Scorecard,
    SpeedupMetric,
    SpeedupVerdict,
    compare_speedup,
)
from deepseekbench._report._scorecard import line_key
from deepseekbench._types._interval import interval_text
from tests.strategies import creditable_pairs
from tests.test_foundation import make_row
from tests.test_properties import BROKEN_SETTINGS, PROPERTY_SETTINGS

Comparator = Callable[..., SpeedupVerdict]
Rounds = tuple[dict[int, float], dict[int, float]]

# per-round values (ms or tokens/s): three rounds a side, spread enough that the
# paired interval sometimes includes 1 and sometimes does not
round_values = st.lists(st.floats(min_value=1.0, max_value=100.0), min_size=3, max_size=3)


def _rounds(b: list[float], c: list[float]) -> Rounds:
    return dict(enumerate(b)), dict(enumerate(c))


def _assert_significance(verdict: SpeedupVerdict) -> None:
    lo, hi = verdict.ci_low, verdict.ci_high
    if lo is not None and hi is not None and lo <= 1.0 <= hi:
        assert not verdict and verdict.speedup is None
        assert verdict.reasons == (RefusalReason.no_significant_difference,)
        text = interval_text(lo, hi, rounds=verdict.rounds)
        assert str(verdict).startswith(f"no significant difference ({text})")
    if verdict:
        assert lo is None or not (lo <= 1.0 <= hi)  # type: ignore[operator]


def check_significance(compare: Comparator, cfg: settings = PROPERTY_SETTINGS) -> None:
    @cfg
    @given(
        pair=creditable_pairs(),
        b=round_values,
        c=round_values,
        metric=st.sampled_from(SpeedupMetric),
    )
    # a gain whose interval spans 1, and a loss whose interval spans 1
    @example(pair=None, b=[10.0, 10.0, 10.0], c=[5.0, 12.0, 9.0], metric=SpeedupMetric.tpot_ms)
    @example(pair=None, b=[10.0, 10.0, 10.0], c=[15.0, 8.0, 11.0], metric=SpeedupMetric.tpot_ms)
    def prop(
        pair: tuple[Row, Row] | None, b: list[float], c: list[float], metric: SpeedupMetric
    ) -> None:
        base, cand = pair or (make_row(), make_row(speculative="mtp", tpot_ms=10.0))
        verdict = compare(base, cand, metric=metric, rounds=_rounds(b, c))
        _assert_significance(verdict)

    prop()


def credits_a_ci_spanning_one(base: Row, cand: Row, **kw: Any) -> SpeedupVerdict:
    """The comparator before the significance rule: an interval holding 1 is credited."""
    verdict = compare_speedup(base, cand, **kw)
    if not verdict.inconclusive:
        return verdict
    plain = compare_speedup(base, cand, metric=kw["metric"])
    return SpeedupVerdict.model_construct(
        **{**verdict.__dict__, "printed": True, "reasons": (), "speedup": plain.speedup}
    )


def test_no_credit_for_an_interval_that_includes_one() -> None:
    check_significance(compare_speedup)


def test_the_property_catches_a_comparator_that_credits_a_ci_spanning_one() -> None:
    with pytest.raises(AssertionError):
        check_significance(credits_a_ci_spanning_one, BROKEN_SETTINGS)


@pytest.mark.parametrize(
    ("cand_rounds", "printed", "credited"),
    [
        ([5.0, 12.0, 9.0], False, False),  # a "gain" whose interval spans 1
        ([15.0, 8.0, 11.0], False, False),  # a "loss" whose interval spans 1
        ([5.0, 5.1, 4.9], True, True),  # a clear 2x gain
        ([20.0, 20.5, 19.5], True, False),  # a clear 2x loss: printed as slower, not credited
    ],
)
def test_compare_speedup_and_the_scorecard_agree(
    cand_rounds: list[float], printed: bool, credited: bool
) -> None:
    base, cand = make_row(), make_row(speculative="mtp", tpot_ms=10.0)
    rounds = _rounds([10.0, 10.0, 10.0], cand_rounds)
    verdict = compare_speedup(base, cand, rounds=rounds)
    card = Scorecard.from_rows(
        [base, cand], rounds={line_key(base): rounds[0], line_key(cand): rounds[1]}
    )
    line = card.lines[1]
    assert line.verdict == verdict and bool(verdict) is credited and verdict.printed is printed
    assert (line.credited, line.printed) == (credited, printed)
    assert (line in card.credited, line in card.slower) == (credited, printed and not credited)
    assert line.speedup_text == str(verdict)
    rec = card.to_records()[1]
    if printed:
        assert rec["speedup"] is not None and "95% CI" in line.speedup_text
    else:
        assert rec["speedup"] is None and rec["ci95_low"] <= 1.0 <= rec["ci95_high"]
        assert "no_significant_difference" in rec["refusal_reasons"]
        assert line.speedup_text.startswith("no significant difference (")
        assert f"{verdict.ci_low:.2f}–{verdict.ci_high:.2f}" in card.to_text()


def test_a_credited_verdict_cannot_hold_an_interval_spanning_one() -> None:
    with pytest.raises(ValidationError):
        SpeedupVerdict(
            metric=SpeedupMetric.tpot_ms, printed=True, speedup=1.2, ci_low=0.9, ci_high=1.5
        )
    with pytest.raises(ValidationError):  # inconclusive needs an interval that spans 1
        SpeedupVerdict(
            metric=SpeedupMetric.tpot_ms,
            printed=False,
            reasons=(RefusalReason.no_significant_difference,),
            ci_low=1.1,
            ci_high=1.5,
        )


Credit = Callable[[SpeedupVerdict], bool]
parities = st.sampled_from(list(QualityParity))


def check_no_credit_for_a_slowdown(credit: Credit, cfg: settings = PROPERTY_SETTINGS) -> None:
    """No truthy verdict has a speedup <= 1, an interval reaching 1 or below, or parity
    short of verified on either row; ``credit`` is how "credited" is read."""

    @cfg
    @given(
        pair=creditable_pairs(),
        b=round_values,
        c=round_values,
        metric=st.sampled_from(SpeedupMetric),
        parity=st.tuples(parities, parities),
    )
    # a clear 2x loss: significant, verified, printed as slower — never credited
    @example(
        pair=None,
        b=[10.0, 10.0, 10.0],
        c=[20.0, 20.5, 19.5],
        metric=SpeedupMetric.tpot_ms,
        parity=(QualityParity.verified, QualityParity.verified),
    )
    def prop(
        pair: tuple[Row, Row] | None,
        b: list[float],
        c: list[float],
        metric: SpeedupMetric,
        parity: tuple[QualityParity, QualityParity],
    ) -> None:
        base, cand = pair or (make_row(), make_row(speculative="mtp", tpot_ms=10.0))
        base = base.model_copy(update={"quality_parity": parity[0]})
        cand = cand.model_copy(update={"quality_parity": parity[1]})
        verdict = compare_speedup(base, cand, metric=metric, rounds=_rounds(b, c))
        if credit(verdict):
            assert verdict.speedup is not None and verdict.speedup > 1.0
            assert verdict.ci_low is not None and verdict.ci_low > 1.0
            assert parity == (QualityParity.verified, QualityParity.verified)

    prop()


def test_no_truthy_verdict_is_a_slowdown_or_lacks_parity() -> None:
    check_no_credit_for_a_slowdown(bool)


def test_the_property_catches_a_slowdown_read_as_credited() -> None:
    """The rule before "printed is not credited": any printed figure with an interval."""
    with pytest.raises(AssertionError):
        old_rule: Credit = lambda v: v.printed and not v.point_estimate  # noqa: E731
        check_no_credit_for_a_slowdown(old_rule, BROKEN_SETTINGS)
