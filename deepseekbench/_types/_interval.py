"""One way to print an interval, so that none reads as more certain than it is.

An interval whose two ends print alike (identical values: every round or request gave
the same figure) is not printed as ``x–x``: it is marked "zero width", since a spread
of zero from a few values says nothing of the spread a rerun would show. An interval
made from fewer than :data:`FEW_ROUNDS` paired rounds is marked with its round count
(a Student-t interval on 2 rounds has one degree of freedom).
"""

from __future__ import annotations

from typing import Final

__all__ = ["FEW_ROUNDS", "interval_text"]

FEW_ROUNDS: Final = 3
"""Paired rounds below which an interval is marked as made from too few (the plan's
``FewRoundsWarning`` threshold, ``deepseekbench._plan._stopping``)."""


def interval_text(
    low: float, high: float, *, spec: str = ".2f", rounds: int | None = None, sep: str = "–"
) -> str:
    """``low–high`` formatted with ``spec`` (units as the caller's figure), marked when
    it cannot be read as it prints: ``"1.42, zero width (identical values)"`` when both
    ends print alike, and ``", from 2 rounds only"`` appended when ``rounds`` is below
    :data:`FEW_ROUNDS`. Raises nothing."""
    lo, hi = format(low, spec), format(high, spec)
    text = f"{lo}, zero width (identical values)" if lo == hi else f"{lo}{sep}{hi}"
    if rounds is not None and rounds < FEW_ROUNDS:
        text += f", from {rounds} rounds only"
    return text
