"""Intervals too wide to decide are flagged on their line with what would narrow them."""

from __future__ import annotations

from deepseekbench import Scorecard, SpeedupMetric, SpeedupVerdict
from deepseekbench._analysis._interval_width import interval_too_wide
from deepseekbench._report._scorecard import line_key
from tests.test_foundation import make_row


def _verdict(low: float, high: float, rounds: int | None) -> SpeedupVerdict:
    base = SpeedupVerdict(metric=SpeedupMetric.tpot_ms, printed=True, speedup=1.5)
    if rounds:
        return base.with_paired_rounds(1.5, low, high, rounds)
    return base.with_interval(low, high)


def test_one_degree_of_freedom_is_flagged_however_narrow() -> None:
    why = interval_too_wide(_verdict(1.40, 1.60, 2))
    assert why is not None and "1 degree of freedom" in why and "repeats" in why


def test_an_interval_spanning_more_than_a_factor_of_two_is_flagged() -> None:
    why = interval_too_wide(_verdict(0.00001, 382.16, 3))
    assert why is not None and "spans a factor of" in why and "more rounds" in why
    boot = interval_too_wide(_verdict(0.6, 1.5, None))
    assert boot is not None and "requests_per_cell" in boot


def test_a_narrow_interval_and_no_interval_say_nothing() -> None:
    assert interval_too_wide(_verdict(1.40, 1.60, 3)) is None
    assert interval_too_wide(_verdict(1.0 + 1e-9, 2.0, 5)) is None
    assert interval_too_wide(None) is None
    bare = SpeedupVerdict(metric=SpeedupMetric.tpot_ms, printed=True, speedup=1.5)
    assert interval_too_wide(bare) is None


def test_the_scorecard_flags_a_two_round_interval_on_its_line() -> None:
    base, cand = make_row(), make_row(speculative="mtp", tpot_ms=5.0)
    rounds = {line_key(base): {0: 10.0, 1: 10.0}, line_key(cand): {0: 5.0, 1: 4.0}}
    text = Scorecard.from_rows([base, cand], rounds=rounds).to_text()
    assert "too wide to decide (spans a factor of" in text and "1 degree of freedom" in text
    three = {line_key(base): {0: 10.0, 1: 10.0, 2: 10.0}, line_key(cand): {0: 5.0, 1: 5.1, 2: 4.9}}
    assert "too wide" not in Scorecard.from_rows([base, cand], rounds=three).to_text()


def test_a_line_the_sequence_decided_is_not_flagged_for_its_two_rounds_alone() -> None:
    assert interval_too_wide(_verdict(1.40, 1.60, 2), decided=True) is None
    wide = interval_too_wide(_verdict(0.5, 3.0, 2), decided=True)
    assert wide is not None and "spans a factor of" in wide


def test_an_interval_off_one_is_too_wide_to_size_never_to_decide() -> None:
    # the direction is decided (the verdict stands); only the size is not
    above = interval_too_wide(_verdict(1.40, 2.82, 3))
    assert above is not None and "too wide to say how large" in above
    assert "decide" not in above
    across = interval_too_wide(_verdict(0.53, 1.35, 3))
    assert across is not None and "too wide to decide" in across
