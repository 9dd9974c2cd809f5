"""Intervals too wide to mean anything, flagged on their line with what would narrow them.

A speedup interval read at face value can hide that it says nothing: with 2 paired
rounds the Student-t interval has one degree of freedom (its 95 % half-width is 12.7
times the rounds' spread: intervals such as 0.00–382.16), and any interval whose high
end is more than twice its low end cannot tell a 1.4× gain from a 1.4× loss. Each such
line gets a note naming the width and what would narrow it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from deepseekbench._analysis._lines import ScorecardLine
from deepseekbench._analysis._speedup import SpeedupVerdict

__all__ = ["MAX_INTERVAL_RATIO", "interval_too_wide", "wide_interval_notes"]

MAX_INTERVAL_RATIO = 2.0
"""An interval whose high / low exceeds this (a factor of 2) is flagged as too wide."""


def interval_too_wide(verdict: SpeedupVerdict | None, *, decided: bool = False) -> str | None:
    """Why ``verdict``'s 95 % interval is too wide to mean much, with what would narrow
    it, or ``None`` (no interval, or a narrow one). Dimensionless figures.

    Too wide: paired rounds with one degree of freedom (``rounds == 2``), or
    ``ci_high / ci_low > MAX_INTERVAL_RATIO``. ``decided``: a sequential run's
    anytime-valid sequence decided the line (it always holds the t interval), so one
    degree of freedom alone is no flag there.
    """
    if verdict is None or verdict.ci_low is None or verdict.ci_high is None:
        return None
    lo, hi = verdict.ci_low, verdict.ci_high
    ratio = hi / lo
    one_dof = verdict.rounds == 2
    if ratio <= MAX_INTERVAL_RATIO and (decided or not one_dof):
        return None
    why = [f"spans a factor of {ratio:.1f}"] if ratio > MAX_INTERVAL_RATIO else []
    if one_dof:
        why.append("1 degree of freedom (2 rounds)")
        fix = "run 3 or more rounds (repeats), or [stopping] mode = sequential"
    elif verdict.prompts is not None:
        fix = "more prompts narrow it (they differ in speedup; repeats of the same ones do not)"
    elif verdict.rounds is not None:
        fix = "more rounds (repeats) narrow it; the rounds disagree, so look for drift"
    else:
        fix = "more measured requests (requests_per_cell) or rounds (repeats >= 3) narrow it"
    # an interval off 1 has decided the direction (the verdict stands); it is too wide
    # to say how large the change is
    what = "too wide to say how large" if lo > 1 or hi < 1 else "too wide to decide"
    return f"95% interval {lo:.2f}–{hi:.2f} {what} ({', '.join(why)}): {fix}"


def wide_interval_notes(lines: Iterable[ScorecardLine], decided: Collection[str] = ()) -> list[str]:
    """One note per line whose interval is too wide (:func:`interval_too_wide`),
    ``route @ cell (load): ...``; ``decided``: the ``route @ cell (load)`` labels a
    sequential run's sequence decided."""
    out: list[str] = []
    for ln in lines:
        label = f"{ln.route} @ {ln.cell} ({ln.load})"
        why = interval_too_wide(ln.verdict, decided=label in decided)
        if why is not None:
            out.append(f"{label}: {why}")
    return out
