"""A printed interval holds the point it holds: ends rounded outward (compare's
intervals), checked against the rounding-to-nearest that let a ratio at the interval's
edge print outside it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from deepseekbench._types._interval import interval_text
from tests.test_properties import BROKEN_SETTINGS, PROPERTY_SETTINGS

Printer = Callable[[float, float, str], str]
values = st.floats(min_value=-50.0, max_value=50.0, allow_nan=False).filter(
    lambda v: v == 0 or abs(v) > 1e-6
)


def _ends(text: str) -> tuple[float, float]:
    lo, hi = text.split(", ")[0].split("–") if "–" in text else (text.split(",")[0],) * 2
    return float(lo), float(hi)


def check_point_prints_inside(printer: Printer, cfg: object = PROPERTY_SETTINGS) -> None:
    @cfg  # type: ignore[operator]
    @given(a=values, b=values, c=values, spec=st.sampled_from([".3g", "+.3g", ".2f"]))
    @example(a=0.98751, b=0.98745, c=1.0, spec=".3g")  # compare's acceptance length
    def prop(a: float, b: float, c: float, spec: str) -> None:
        low, point, high = sorted((a, b, c))
        lo, hi = _ends(printer(low, high, spec))
        printed = float(format(point, spec))
        assert lo <= printed <= hi

    prop()


def test_an_outward_interval_holds_its_printed_point() -> None:
    check_point_prints_inside(lambda lo, hi, spec: interval_text(lo, hi, spec=spec, outward=True))


def _inward(low: float, high: float, spec: str) -> str:
    """Ends rounded inward (the low end up, the high end down): the broken printer."""
    lo, hi = _ends(interval_text(low, high, spec=spec, outward=True))
    step = max(abs(float(format(low, spec)) - lo), abs(hi - float(format(high, spec))))
    return f"{format(lo + step, spec)}–{format(hi - step, spec)}"


def test_the_property_catches_an_inward_rounding() -> None:
    with pytest.raises(AssertionError):
        check_point_prints_inside(_inward, BROKEN_SETTINGS)


def test_compare_prints_a_ratio_at_the_interval_edge_inside_it() -> None:
    """Compare's example: B/A 0.98751 at the interval's low end 0.98745 printed 0.988
    to nearest; outward it is 0.987, holding the ratio the row values print."""
    assert interval_text(0.98751, 1.0, spec=".3g") == "0.988–1"
    assert interval_text(0.98751, 1.0, spec=".3g", outward=True) == "0.987–1"
