"""One way to print an interval, so that none reads as more certain than it is.

An interval whose two ends are equal (identical values: every round or request gave
the same figure) is not printed as ``x–x``: it is marked "zero width", since a spread
of zero from a few values says nothing of the spread a rerun would show. An interval
made from fewer than :data:`FEW_ROUNDS` paired rounds is marked with its round count
(a Student-t interval on 2 rounds has one degree of freedom).
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = ["FEW_ROUNDS", "interval_text"]

FEW_ROUNDS: Final = 3
"""Paired rounds below which an interval is marked as made from too few (the plan's
``FewRoundsWarning`` threshold, ``deepseekbench._plan._stopping``)."""


_SPEC = re.compile(r"^(\+?)\.(\d+)([fg])$")
_MAX_DIGITS = 6


def _distinct(low: float, high: float, spec: str) -> tuple[str, str]:
    """Both ends formatted with ``spec``, with more digits (up to 6) when they differ
    but print alike: a narrow interval is not shown as a zero-width one."""
    lo, hi = format(low, spec), format(high, spec)
    m = _SPEC.match(spec)
    digits = int(m.group(2)) if m else _MAX_DIGITS
    while lo == hi and low != high and m and digits < _MAX_DIGITS:
        digits += 1
        finer = f"{m.group(1)}.{digits}{m.group(3)}"
        lo, hi = format(low, finer), format(high, finer)
    if lo == hi:  # equal to 6 digits: zero width, shown at the caller's precision
        lo = hi = format(low, spec)
    return lo, hi


def _outward(low: float, high: float, spec: str) -> tuple[float, float]:
    """``low`` rounded down and ``high`` up at the precision ``spec`` prints them with
    (decimals for ``f``, significant digits for ``g``), so the printed interval holds
    every value it holds, its point estimate included."""
    m = _SPEC.match(spec)
    if m is None:
        return low, high

    def decimals(v: float) -> int:
        digits = int(m.group(2))
        if m.group(3) == "f" or v == 0 or not math.isfinite(v):
            return digits
        return max(digits, 1) - 1 - math.floor(math.log10(abs(v)))

    def shift(v: float, up: bool) -> float:
        if not math.isfinite(v):
            return v
        scale = 10.0 ** decimals(v)
        scaled = round(v * scale, 6)  # no float noise (0.0271 × 1e4 = 270.99999…)
        return (math.ceil(scaled) if up else math.floor(scaled)) / scale

    return shift(low, False), shift(high, True)


def interval_text(
    low: float,
    high: float,
    *,
    spec: str = ".2f",
    rounds: int | None = None,
    sep: str = "–",
    outward: bool = False,
) -> str:
    """``low–high`` formatted with ``spec`` (units as the caller's figure; more digits
    when two different ends would print alike), marked when it cannot be read as it
    prints: ``"1.42, zero width (identical values)"`` when both ends are equal, and
    ``", from 2 rounds only"`` appended when ``rounds`` is below :data:`FEW_ROUNDS`.
    ``outward``: the low end rounded down and the high end up (never in), so a point
    inside the interval also prints inside it. Raises nothing."""
    if outward and low != high:
        low, high = _outward(low, high, spec)
    lo, hi = _distinct(low, high, spec)
    text = f"{lo}, zero width (identical values)" if lo == hi else f"{lo}{sep}{hi}"
    if rounds is not None and rounds < FEW_ROUNDS:
        text += f", from {rounds} rounds only"
    return text
