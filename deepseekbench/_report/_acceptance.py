"""The scorecard's "acceptance per request" section: how acceptance spreads over a
speculative row's requests and its verify steps.

Per speculative line with per-request acceptance: the request count, the p10 / p50 /
p90 of the per-request acceptance length (``Row.acceptance_length_p10`` ...), the pooled
share of verify steps by accepted draft tokens ``0 .. depth`` (``Row.accepted_per_step``,
AIPerf's acceptance histogram) and the reasoning/answer split (``unknown`` where the
engine reports per-request counts only as a total: never estimated). Holds
:data:`ACCEPTANCE_TITLE`, :data:`ACCEPTANCE_COLUMNS` and :func:`acceptance_cells`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from deepseekbench._analysis._lines import ScorecardLine

__all__ = ["ACCEPTANCE_COLUMNS", "ACCEPTANCE_TITLE", "acceptance_cells"]

ACCEPTANCE_TITLE: Final = (
    "Acceptance per request (acceptance length p10 / p50 / p90 over requests; verify steps "
    "by accepted draft tokens 0..depth, pooled; reasoning/answer split where measured)"
)
"""The section's heading."""

ACCEPTANCE_COLUMNS: Final = (
    "cell", "load", "route", "n", "acc.len p10/p50/p90", "steps by accepted 0..k",
    "reasoning/answer",
)  # fmt: skip
"""The section's table heads."""


def _histogram(counts: tuple[int, ...] | None) -> str:
    """Shares of the steps, e.g. ``0.21 0.10 0.13 0.56`` (``—`` when not reported)."""
    total = sum(counts) if counts else 0
    if not counts or total == 0:
        return "—"
    return " ".join(f"{c / total:.2f}" for c in counts) + f" of {total} steps"


SAME_AT_EVERY_LOAD: Final = "same at every load"
"""The load cell of a route's one row when its acceptance is identical at every load."""


def _cells(ln: ScorecardLine) -> list[str] | None:
    r = ln.row
    if r.acceptance_length_p50 is None:
        return None
    spread = " / ".join(
        f"{v:.2f}" if v is not None else "—"
        for v in (r.acceptance_length_p10, r.acceptance_length_p50, r.acceptance_length_p90)
    )
    return [
        ln.cell,
        ln.load,
        ln.route,
        str(r.n_requests),
        spread,
        _histogram(r.accepted_per_step),
        r.acceptance_split or "—",
    ]


def acceptance_cells(lines: Sequence[ScorecardLine]) -> list[list[str]]:
    """One table row per speculative line with per-request acceptance lengths; a route
    measured at 2 or more loads whose figures print identically at every one gets one
    row, its load cell :data:`SAME_AT_EVERY_LOAD` (at the place of its first load)."""
    rows = [(ln, c) for ln in lines if (c := _cells(ln)) is not None]
    groups: dict[tuple[str, str], list[list[str]]] = {}
    for ln, c in rows:
        groups.setdefault((ln.cell, ln.route), []).append(c)
    out: list[list[str]] = []
    done: set[tuple[str, str]] = set()
    for ln, c in rows:
        key = (ln.cell, ln.route)
        same = groups[key]
        if len(same) > 1 and all(g[3:] == same[0][3:] for g in same):
            if key not in done:
                done.add(key)
                out.append([c[0], SAME_AT_EVERY_LOAD, *c[2:]])
            continue
        out.append(c)
    return out
