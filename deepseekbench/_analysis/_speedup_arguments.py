"""Argument types of :func:`~deepseekbench.compare_speedup`, checked at its entry.

A label (``"off"``), ``None`` or a dict where a :class:`~deepseekbench.Row` belongs
would otherwise surface as an ``AttributeError`` deep inside the verdict; this says
which argument was wrong and what it accepts.
"""

from __future__ import annotations

from deepseekbench._types._row import Row

__all__ = ["check_speedup_arguments"]


def check_speedup_arguments(baseline: object, candidate: object, result: object) -> None:
    """Refuse a ``baseline`` or ``candidate`` that is not a :class:`~deepseekbench.Row`,
    and a ``result`` (when given) without ``speedup_evidence`` (a
    :class:`~deepseekbench.RunResult` has it).

    Raises:
        TypeError: the first such argument, named, with what it accepts and what it got.
    """
    for name, value in (("baseline", baseline), ("candidate", candidate)):
        if not isinstance(value, Row):
            raise TypeError(
                f"compare_speedup: {name} must be a Row (e.g. load_results(path).rows[i]), "
                f"not {_kind(value)}"
            )
    if result is not None and not callable(getattr(result, "speedup_evidence", None)):
        raise TypeError(
            "compare_speedup: result must be the RunResult the rows came from "
            f"(load_results or run_plan), or None, not {_kind(result)}"
        )


def _kind(value: object) -> str:
    """What was passed: ``None``, ``str 'off'`` (a scalar's type and repr), else its type."""
    if value is None:
        return "None"
    if isinstance(value, str | int | float):
        return f"{type(value).__name__} {repr(value)[:40]}"
    return type(value).__name__
