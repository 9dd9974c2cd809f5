"""The speedup decomposition: speedup = acceptance length ÷ step-cost ratio, the break-even
acceptance, which factor moved between loads, and the witness against independent costs."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from deepseekbench import (
    Scorecard,
    SpeedupDecomposition,
    StepCosts,
    break_even_acceptance_rate,
    compare_speedup,
    decompose_speedup,
    expected_acceptance_length,
    which_factor_moved,
    witness_step_costs,
)
from deepseekbench._analysis._decompose import rate_words
from tests._helpers import make_row

MTP = {"speculative": "mtp", "route_label": "mtp", "spec_tokens": 3}


def _pair(
    off_tpot: float, mtp_tpot: float, length: float, c: int = 1
) -> tuple[SpeedupDecomposition, float]:
    off = make_row(tpot_ms=off_tpot, concurrency=c)
    mtp = make_row(**MTP, tpot_ms=mtp_tpot, acceptance_length=length, concurrency=c)
    d = decompose_speedup(off, mtp)
    assert d is not None
    return d, off_tpot / mtp_tpot


def test_the_issue_example_splits_into_acceptance_and_step_cost() -> None:
    # "c=1: 2.02 = 3.00 ÷ 1.48; c=8: 0.80 = 3.00 ÷ 3.74"
    low, s1 = _pair(off_tpot=10.0, mtp_tpot=10.0 * 1.48 / 3.0, length=3.0)
    high, s8 = _pair(off_tpot=20.0, mtp_tpot=20.0 * 3.74 / 3.0, length=3.0, c=8)
    assert low.speedup == pytest.approx(s1) and high.speedup == pytest.approx(s8)
    assert low.step_cost_ratio == pytest.approx(1.48)
    assert high.step_cost_ratio == pytest.approx(3.74)
    # the verify step in ms: the candidate's TPOT × L; off's decode step: its TPOT
    assert high.verify_step_ms == pytest.approx(20.0 * 3.74)
    assert high.decode_step_ms == 20.0
    assert high.break_even_length == pytest.approx(3.74)
    assert not high.pays and low.pays
    assert which_factor_moved(low, high) == "step_cost"
    text = high.target_text()
    assert "a depth-3 head must reach acceptance length 3.74" in text
    assert "this one reaches 3.00" in text
    # the break-even per-position rate beside the route's own i.i.d.-equivalent one
    own = break_even_acceptance_rate(3.0, 3)
    assert own is not None and expected_acceptance_length(own, 3) == pytest.approx(3.0)
    assert high.own_rate == pytest.approx(own)
    need = break_even_acceptance_rate(3.74, 3)
    assert need is not None and need > own
    assert f"break-even {need:.2f} vs own {own:.2f} per position at depth 3" in text


def test_a_break_even_below_one_or_unreachable_is_worded_never_rate_zero() -> None:
    # a verify step cheaper than off's decode step, its whole interval below 1: any
    # drafter pays
    point, _ = _pair(off_tpot=10.0, mtp_tpot=10.0 * 0.9 / 2.0, length=2.0)
    cheap = point.model_copy(update={"step_cost_ratio_ci": (0.85, 0.95)})
    assert cheap.break_even_length == pytest.approx(0.9)
    text = cheap.target_text()
    assert "any depth-3 head pays here" in text and "0.90 (0.85–0.95), below 1" in text
    assert "0.00" not in text
    # without an interval, no firm conclusion is drawn from the point alone
    assert "below 1" not in point.target_text() and "cheaper" not in point.target_text()
    assert "a point estimate without an interval" in point.target_text()
    words = rate_words(0.9, 2.0, 3, below_one_shown=True)
    assert words.startswith("break-even below 1 (any drafter pays); own 0.")
    # the table's column follows the interval as the sentence does: a point estimate
    # below 1, or an interval that includes 1, is not called "any drafter pays"
    assert cheap.rate_text().startswith("break-even below 1 (any drafter pays)")
    spans = point.model_copy(update={"step_cost_ratio_ci": (0.73, 1.37)})
    for unproven in (point, spans):
        assert unproven.rate_text().startswith("break-even not shown below 1")
        assert "pays" not in unproven.rate_text()
    assert rate_words(0.9, 2.0, 3).startswith("break-even not shown below 1")
    assert "0.00" not in words
    assert rate_words(4.5, 2.0, 3).startswith("break-even unreachable at depth 3 (at most 4)")
    assert rate_words(2.0, 2.0, None) == "depth unknown"
    # a break-even just above 1 implies a rate that rounds to zero: said in words
    barely = rate_words(1.001, 2.0, 3)
    assert barely.startswith("break-even below 0.01 vs own 0.") and "0.00" not in barely


def test_a_refused_or_non_tpot_verdict_is_not_decomposed() -> None:
    off = make_row()
    differs = make_row(**MTP, tpot_ms=5.0, acceptance_length=2.0, quality_parity="differs")
    assert decompose_speedup(off, differs) is None  # L and r would give the figure back
    mtp = make_row(**MTP, tpot_ms=5.0, acceptance_length=2.0)
    by_e2e = compare_speedup(off, mtp, metric="e2e_ms")
    assert decompose_speedup(off, mtp, verdict=by_e2e) is None
    no_acceptance = make_row(**MTP, tpot_ms=5.0)
    assert decompose_speedup(off, no_acceptance) is None


@given(
    rate=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    depth=st.integers(min_value=1, max_value=16),
)
def test_the_break_even_rate_inverts_the_expected_acceptance_length(
    rate: float, depth: int
) -> None:
    length = expected_acceptance_length(rate, depth)
    assert 1.0 <= length <= depth + 1 + 1e-9
    back = break_even_acceptance_rate(length, depth)
    assert back is not None
    assert expected_acceptance_length(back, depth) == pytest.approx(length, abs=1e-6)


def test_break_even_edges() -> None:
    assert break_even_acceptance_rate(0.9, 3) == 0.0  # a verify step cheaper than decode
    assert break_even_acceptance_rate(4.5, 3) is None  # unreachable at depth 3
    assert break_even_acceptance_rate(4.0, 3) == pytest.approx(1.0, abs=1e-6)
    assert expected_acceptance_length(0.5, 1) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        expected_acceptance_length(1.5, 3)
    with pytest.raises(ValueError):
        break_even_acceptance_rate(2.0, 0)


@given(
    off=st.floats(min_value=1.0, max_value=100.0),
    speed=st.floats(min_value=0.2, max_value=5.0),
    length=st.floats(min_value=1.0, max_value=8.0),
)
def test_the_parts_multiply_back_to_the_credited_figure(
    off: float, speed: float, length: float
) -> None:
    if abs(speed - 1.0) < 1e-6:
        return
    d, s = _pair(off, off / speed, length)
    assert d.acceptance_length / d.step_cost_ratio == pytest.approx(d.speedup, rel=1e-9)
    assert d.speedup == pytest.approx(s, rel=1e-9)
    assert d.verify_step_ms == pytest.approx((off / speed) * length, rel=1e-9)


def test_intervals_come_from_the_acceptance_samples_and_the_verdict() -> None:
    off = make_row(tpot_ms=10.0)
    mtp = make_row(**MTP, tpot_ms=5.0, acceptance_length=2.5)
    verdict = compare_speedup(
        off, mtp, samples=([10.0, 10.2, 9.8, 10.1, 9.9], [5.0, 5.1, 4.9, 5.05, 4.95])
    )
    d = decompose_speedup(off, mtp, verdict=verdict, acceptance_samples=[2.4, 2.6, 2.5, 2.45])
    assert d is not None
    assert d.speedup_ci is not None and d.acceptance_length_ci is not None
    assert d.step_cost_ratio_ci is not None and d.verify_step_ms_ci is not None
    lo, hi = d.step_cost_ratio_ci
    assert lo < d.step_cost_ratio < hi
    # wider than either part alone: the two log half-widths add in quadrature
    width = math.log(hi / lo)
    assert width >= math.log(d.speedup_ci[1] / d.speedup_ci[0]) - 1e-12
    assert width >= math.log(d.acceptance_length_ci[1] / d.acceptance_length_ci[0]) - 1e-12


def test_a_lower_acceptance_is_named_acceptance_not_cost() -> None:
    good, _ = _pair(10.0, 10.0 * 1.5 / 3.0, 3.0)
    weak, _ = _pair(10.0, 10.0 * 1.5 / 2.0, 2.0)
    assert which_factor_moved(good, weak) == "acceptance"


def test_the_witness_names_an_unexplained_per_step_overhead() -> None:
    # the model says a verify step costs 1.5 decode steps; measured, it costs 1.5 × 10 + 6 ms
    d, _ = _pair(10.0, (15.0 + 6.0) / 3.0, 3.0)
    d = d.model_copy(update={"speedup_ci": (d.speedup * 0.99, d.speedup * 1.01)})
    w = witness_step_costs(d, StepCosts(verify_step_ms=15.0, decode_step_ms=10.0, source="model"))
    assert w.agrees is False
    assert w.unexplained_ms == pytest.approx(6.0)
    assert w.predicted_speedup == pytest.approx(2.0)
    assert "unexplained per-step overhead 6.0 ms" in w.text()
    same = witness_step_costs(d, StepCosts(verify_step_ms=21.0, decode_step_ms=10.0, source="m"))
    assert same.agrees and "the parts add up" in same.text()


def test_a_witness_of_two_bare_figures_is_not_judged() -> None:
    """The false alarm on the demo's own rows: ``decompose_speedup(off, mtp)`` from rows
    alone has no interval on either side, and a 1 % difference was named an unexplained
    per-step overhead. With nothing to tell noise from an overhead, nothing is named."""
    d, _ = _pair(10.0, (15.0 + 0.2) / 3.0, 3.0)
    assert d.speedup_ci is None and d.acceptance_length_ci is None
    w = witness_step_costs(d, StepCosts(verify_step_ms=15.0, decode_step_ms=10.0, source="m"))
    assert w.agrees is None and w.detectable_ms is None
    assert "unexplained" not in w.text() and "not judged" in w.text()
    assert "0.2 ms above the prediction" in w.text()
    assert "could have detected no overhead" in str(w)


def test_the_scorecard_prints_which_factor_moved_between_loads() -> None:
    rows = []
    for c, off_tpot, ratio in ((1, 10.0, 1.48), (8, 20.0, 3.74)):
        rows.append(make_row(tpot_ms=off_tpot, concurrency=c))
        rows.append(
            make_row(**MTP, tpot_ms=off_tpot * ratio / 3.0, acceptance_length=3.0, concurrency=c)
        )
    text = Scorecard.from_rows(rows).to_text()
    assert "Where the speedup comes from" in text
    assert "acceptance unchanged 3.00; the verify step grew 1.48× → 3.74× of off's step" in text
    assert "c=8: a depth-3 head must reach acceptance length 3.74" in text


@example(speedup=4.38, length=3.27)
@given(
    speedup=st.floats(min_value=1.0, max_value=6.0),
    length=st.floats(min_value=1.0, max_value=5.0),
)
def test_the_break_even_length_prints_as_the_step_cost_ratio(speedup: float, length: float) -> None:
    """The break-even acceptance length is the step-cost ratio: the target sentence prints
    it as the table does (``ratio_text``), below 1 too (speedup 4.38, length 3.27: the
    table's 0.747, never 0.75 beside it)."""
    from deepseekbench import SpeedupDecomposition

    ratio = length / speedup
    d = SpeedupDecomposition(
        speedup=speedup,
        acceptance_length=length,
        step_cost_ratio=ratio,
        decode_step_ms=10.0,
        verify_step_ms=10.0 * ratio,
        depth=3,
        break_even_length=ratio,
    )
    assert f"acceptance length {d.ratio_text}" in d.target_text()
    assert f"this one reaches {length:.2f}" in d.target_text()


@pytest.mark.parametrize(
    ("ratio", "ci"), [(0.996, (0.729, 1.361)), (0.927, (0.762, 1.118)), (1.107, (0.918, 1.336))]
)
def test_no_firm_step_cost_conclusion_when_its_interval_includes_one(
    ratio: float, ci: tuple[float, float]
) -> None:
    """A step-cost ratio whose 95 % interval includes 1 (the demo's mtp-k2 at c=1: 0.996,
    0.729–1.361) never reads "below 1" or "cheaper than off's decode step", and never
    gives a break-even rate for a length below 1."""
    length = 2.45
    d = SpeedupDecomposition(
        speedup=length / ratio,
        speedup_ci=(2.0, 3.0),
        acceptance_length=length,
        step_cost_ratio=ratio,
        step_cost_ratio_ci=ci,
        decode_step_ms=11.93,
        verify_step_ms=11.93 * ratio,
        depth=2,
        break_even_length=ratio,
    )
    text = d.target_text()
    assert "below 1" not in text and "cheaper" not in text and "any depth-2" not in text
    assert f"acceptance length {d.ratio_text} (its 95% interval " in text
    assert "includes 1: the verify step is not shown to cost more or less" in text
    assert ("per position" in text) == (ratio > 1.0)
