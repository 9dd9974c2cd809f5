"""One parser for every threshold and margin the public API takes: a fraction or a percent.

Accepted forms: a real number read as a fraction (``0.05`` = 5 %), or a string holding
a fraction (``"0.05"``) or a percent (``"5%"``, ``"5 %"``, ``"2.5%"``). Anything else (a
bool, NaN, an infinity, a value outside the allowed range, a string of neither form)
raises :class:`~deepseekbench.FractionFormatError` naming the argument and the forms.
"""

from __future__ import annotations

import math
import re
from typing import Final

from deepseekbench._errors import FractionFormatError

__all__ = ["FORMS", "Fraction", "parse_fraction"]

Fraction = float | int | str
"""What a threshold or margin argument accepts (see :func:`parse_fraction`)."""

FORMS: Final = 'a fraction (0.05) or a percent string ("5%")'
"""The accepted forms, in words (every error message names them)."""

_PERCENT = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*%\s*$")


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise FractionFormatError(f"{name} must be {FORMS}, got {value!r}")
    if isinstance(value, str):
        m = _PERCENT.match(value)
        try:
            out = float(m.group(1)) / 100.0 if m else float(value)
        except ValueError:
            raise FractionFormatError(f"{name} must be {FORMS}, got {value!r}") from None
    else:
        out = float(value)
    if not math.isfinite(out):
        raise FractionFormatError(f"{name} must be {FORMS}, got {value!r}")
    return out


def parse_fraction(
    value: object, *, name: str = "value", upper: float = 1.0, upper_open: bool = True
) -> float:
    """``value`` as a fraction in ``[0, upper)`` (``[0, upper]`` when ``upper_open`` is
    False): ``0.05``, ``"0.05"`` and ``"5%"`` all give ``0.05`` (dimensionless).

    Raises:
        FractionFormatError: ``value`` is in neither accepted form, not finite, or out
            of range; the message names ``name``, the value and the accepted forms.
    """
    out = _number(value, name)
    above = out >= upper if upper_open else out > upper
    if out < 0 or above:
        bracket = ")" if upper_open else "]"
        raise FractionFormatError(
            f"{name} must be {FORMS} in [0, {upper:g}{bracket}, got {value!r}"
        )
    return out
