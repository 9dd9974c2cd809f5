"""The Markdown format: GitHub-flavoured tables, headings and bullet lists, every section in order.

Holds :func:`render`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from deepseekbench._report._sections import Section, report_sections

if TYPE_CHECKING:
    from deepseekbench._report._scorecard import Scorecard

__all__ = ["OMITS", "render"]

OMITS: Final[frozenset[str]] = frozenset()
"""The Markdown format carries every section."""


def _esc(s: str) -> str:
    """A cell or line as literal text: ``*`` is a footnote marker, never emphasis or a bullet."""
    return s.replace("|", "\\|").replace("*", "\\*").replace("\n", " ")


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return out + ["| " + " | ".join(_esc(c) for c in row) + " |" for row in rows]


def _bullets(items: Sequence[str]) -> list[str]:
    return [f"- {_esc(x.strip())}" for x in items]


def _section(s: Section) -> list[str]:
    if s.kind == "title":
        return [f"## {_esc(s.heading)}", ""]
    if s.kind == "run":
        return [x for item in s.items for x in (_esc(item), "")]
    if s.kind in ("integrity", "unfinished"):
        return [x for item in s.items for x in (f"**{_esc(item)}**", "")]
    if s.kind == "table":
        return _table(s.columns, s.rows)
    if s.kind in ("categories", "turns"):  # the column heads name these tables
        return ["", *_table(s.columns, s.rows)]
    if s.kind in ("latency", "acceptance"):
        return ["", f"{s.heading}:", "", *_table(s.columns, s.rows)]
    if s.kind == "decomposition":
        return ["", f"{_esc(s.heading)}:", "", *_table(s.columns, s.rows), "", *_bullets(s.items)]
    if s.kind in ("best_config", "capacity"):
        return ["", f"{_esc(s.heading)}:", "", *_bullets(s.items)]
    return ["", *_bullets(s.items)]  # the notes


def render(card: Scorecard) -> str:
    """A GitHub-flavoured Markdown report: the tables plus bullet lists of the rest."""
    return "\n".join(x for s in report_sections(card) for x in _section(s)) + "\n"
