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
