"""Small statistics helpers over per-request samples (numpy does the arithmetic)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from deepseekbench._types._row import Percentiles


def finite(values: Iterable[float | None]) -> list[float]:
    """The finite, non-``None`` values, in order."""
    return [float(v) for v in values if v is not None and np.isfinite(v)]


def median(values: Iterable[float | None]) -> float | None:
    """Median of the finite values (``None`` when there are none); same unit as the input."""
    xs = finite(values)
    return float(np.median(xs)) if xs else None


def percentiles(values: Iterable[float | None]) -> Percentiles | None:
    """p50/p90/p99 of the finite values with numpy's default linear interpolation.

    Returns ``None`` when there are no values. Same unit as the input.
    """
    xs = finite(values)
    if not xs:
        return None
    p50, p90, p99 = (float(v) for v in np.percentile(xs, [50, 90, 99]))
    return Percentiles(p50=p50, p90=p90, p99=p99)
