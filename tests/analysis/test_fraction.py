"""parse_fraction: the one parser of every threshold and margin (a fraction or a percent)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import FractionFormatError
from deepseekbench._types._fraction import parse_fraction


@given(st.floats(min_value=0, max_value=0.999, allow_nan=False))
def test_a_percent_string_and_its_fraction_parse_alike(x: float) -> None:
    assert parse_fraction(x, name="m") == x
    assert parse_fraction(repr(x), name="m") == x
    assert parse_fraction(f"{x * 100!r}%", name="m") == pytest.approx(x, rel=1e-12, abs=1e-15)


@given(st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: not 0 <= v < 1))
def test_out_of_range_is_refused_with_the_forms_named(x: float) -> None:
    with pytest.raises(FractionFormatError, match=r"m must be a fraction \(0.05\)"):
        parse_fraction(x, name="m")
    with pytest.raises(FractionFormatError):
        parse_fraction(f"{x * 100!r}%", name="m")


def test_every_public_share_takes_a_percent_string() -> None:
    from deepseekbench import ParityPlan, compare_speedup, task_parity
    from tests._helpers import make_row

    assert ParityPlan(tolerance="2%").tolerance == pytest.approx(0.02)  # type: ignore[arg-type]
    assert ParityPlan(tolerance=0.02).tolerance == 0.02
    with pytest.raises(ValueError, match=r"parity\.tolerance"):
        ParityPlan(tolerance="two percent")  # type: ignore[arg-type]
    assert task_parity([], {}, {}, mode="lenient", tolerance="5%").tolerance == 0.05
    with pytest.raises(FractionFormatError, match="tolerance"):
        task_parity([], {}, {}, tolerance="5")
    base, cand = make_row(), make_row(speculative="mtp", route_label="mtp", tpot_ms=5.0)
    assert compare_speedup(base, cand, clock_tolerance="25%") == compare_speedup(base, cand)
    with pytest.raises(FractionFormatError, match="clock_tolerance"):
        compare_speedup(base, cand, clock_tolerance="a quarter")
