"""The scorecard's "where the speedup comes from" section: each credited TPOT speedup as
acceptance length ÷ step-cost ratio, the break-even acceptance per load, and which factor
moved between a route's loads (:mod:`deepseekbench._analysis._decompose`).

Holds :data:`DECOMPOSITION_TITLE`, :data:`DECOMPOSITION_COLUMNS`,
:func:`decomposition_cells` and :func:`decomposition_items`. A line refused for a
client-clock reason whose engine reported per-request decode timings gets a diagnosis
sentence instead, labelled "on the engine's clock; no speedup credited"
(:mod:`deepseekbench._analysis._engine_decompose`): never a table row, never a figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from deepseekbench._analysis._decompose import SpeedupDecomposition, moved_text
from deepseekbench._analysis._lines import ScorecardLine
from deepseekbench._types._interval import interval_text

__all__ = [
    "DECOMPOSITION_COLUMNS",
    "DECOMPOSITION_TITLE",
    "decomposition_cells",
    "decomposition_items",
]

DECOMPOSITION_TITLE: Final = (
    "Where the speedup comes from (speedup = acceptance length ÷ step-cost ratio, the "
    "verify step over off's decode step at the same load; break-even acceptance length = "
    "step-cost ratio, its per-position rate a from (1 - a^(k+1)) / (1 - a) beside the "
    "route's own from its acceptance length, Leviathan et al. 2023; 95% CI)"
)
"""The section's heading: the identity and the break-even formula with its source."""

DECOMPOSITION_COLUMNS: Final = (
    "cell", "load", "route", "speedup", "acc.len", "step-cost ratio", "verify step ms",
    "off step ms", "per-position rate (break-even vs own)",
)  # fmt: skip
"""The section's table heads. The break-even acceptance length is the step-cost ratio
itself, so it has no column of its own; the last column sets the break-even
per-position rate beside the route's own i.i.d.-equivalent rate
(:meth:`SpeedupDecomposition.rate_text`)."""


def _ci(value: float, ci: tuple[float, float] | None, digits: int = 2) -> str:
    text = f"{value:.{digits}f}"
    return text + (f" ({interval_text(*ci, spec=f'.{digits}f')})" if ci is not None else "")


def _ratio_cell(d: SpeedupDecomposition) -> str:
    """The step-cost ratio as the table prints it: the printed acceptance length ÷ the
    printed speedup (:func:`printed_ratio`), its interval to as many decimals."""
    text = d.ratio_text
    ci = d.step_cost_ratio_ci
    spec = f".{d.ratio_decimals}f"
    return text + (f" ({interval_text(*ci, spec=spec)})" if ci is not None else "")


def decomposition_cells(lines: Sequence[ScorecardLine]) -> list[list[str]]:
    """One table row per decomposed line (empty when no line credits a TPOT speedup)."""
    out: list[list[str]] = []
    for ln in lines:
        d = ln.decomposition
        if d is None:
            continue
        out.append(
            [
                ln.cell,
                ln.load,
                ln.route,
                f"{d.speedup:.2f}×",
                _ci(d.acceptance_length, d.acceptance_length_ci),
                _ratio_cell(d),
                _ci(d.verify_step_ms, d.verify_step_ms_ci, 1),
                f"{d.decode_step_ms:.2f}",  # off's TPOT, as the main table prints it
                d.rate_text(),
            ]
        )
    return out


def decomposition_items(lines: Sequence[ScorecardLine]) -> list[str]:
    """The section's sentences: per route and cell decomposed at 2 or more loads,
    which factor moved from the lowest load to the highest; then, per line, the
    target a draft head must reach to pay at that load; then each client-clock-refused
    line's diagnosis on the engine's clock (no speedup credited)."""
    groups: dict[tuple[str, str], list[ScorecardLine]] = {}
    for ln in lines:
        if ln.decomposition is not None:
            groups.setdefault((ln.route, ln.cell), []).append(ln)
    out: list[str] = []
    for (route, cell), group in groups.items():
        ranked = sorted(group, key=lambda x: x.load_level or 0.0)
        if len(ranked) < 2 or ranked[0].load_level is None:
            continue
        lo, hi = ranked[0], ranked[-1]
        a, b = lo.decomposition, hi.decomposition
        assert a is not None and b is not None  # grouped on it
        out.append(
            f"{route} @ {cell} from {lo.load} to {hi.load} ({a.speedup:.2f}× → "
            f"{b.speedup:.2f}×): {moved_text(a, b)}"
        )
    for ln in lines:
        d = ln.decomposition
        if d is not None:
            out.append(f"{ln.route} @ {ln.cell} {ln.load}: {d.target_text()}")
    for ln in lines:
        e = ln.engine_diagnosis
        if e is not None:
            out.append(f"{ln.route} @ {ln.cell} {ln.load}: {e.text()}")
    return out
