"""The text format: a fixed-width terminal report, every section in order.

Holds :func:`render` and :func:`fixed_width` (a table padded to its widest
cell per column, heads underlined).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from deepseekbench._report._sections import Section, report_sections

if TYPE_CHECKING:
    from deepseekbench._report._scorecard import Scorecard

__all__ = ["OMITS", "fixed_width", "render"]

OMITS: Final[frozenset[str]] = frozenset()
"""The text format carries every section."""


def fixed_width(table: Sequence[Sequence[str]]) -> list[str]:
    """``table`` (heads first) as padded lines, a dashed line under the heads."""
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    out = []
    for i, r in enumerate(table):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def _section(s: Section) -> list[str]:
    if s.kind == "title":
        return [s.heading]
    if s.kind in ("run", "integrity", "unfinished"):
        return list(s.items)
    if s.kind == "table":
        return fixed_width([s.columns, *s.rows])
    if s.kind in ("categories", "turns", "latency", "acceptance"):
        return ["", s.heading, *fixed_width([s.columns, *s.rows])]
    if s.kind == "decomposition":
        return ["", s.heading, *fixed_width([s.columns, *s.rows]), *s.items]
    if s.kind in ("best_config", "capacity"):
        return ["", s.heading, *s.items]
    return ["", *s.items]  # the notes


def render(card: Scorecard) -> str:
    """A fixed-width terminal table plus notes on every refused line."""
    return "\n".join(x for s in report_sections(card) for x in _section(s)) + "\n"
