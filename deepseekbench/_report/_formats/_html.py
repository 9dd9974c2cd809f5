"""The HTML format: an HTML fragment of every section (Jupyter) and a self-contained page.

Holds :func:`fragment`, :func:`page`, :func:`render` (the page, plots
included) and :func:`html_table`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from deepseekbench._report._sections import Section, report_sections

if TYPE_CHECKING:
    from deepseekbench._report._scorecard import Scorecard

__all__ = ["OMITS", "fragment", "html_table", "page", "render"]

OMITS: Final[frozenset[str]] = frozenset()
"""The HTML format carries every section."""


def html_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An HTML ``<table>`` of ``columns`` and ``rows`` of text cells, every text escaped."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _list(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(x.strip())}</li>" for x in items) + "</ul>"


def _section(s: Section) -> str:
    if s.kind == "title":
        return f"<h2>{html.escape(s.heading)}</h2>"
    if s.kind == "run":
        return "".join(f"<p>{html.escape(x)}</p>" for x in s.items)
    if s.kind in ("integrity", "unfinished"):
        return "".join(f"<p><strong>{html.escape(x)}</strong></p>" for x in s.items)
    if s.kind == "table":
        return html_table(s.columns, s.rows)
    if s.kind in ("categories", "turns", "latency", "acceptance"):
        return f"<h3>{html.escape(s.heading)}</h3>" + html_table(s.columns, s.rows)
    if s.kind == "decomposition":
        head = f"<h3>{html.escape(s.heading)}</h3>"
        return head + html_table(s.columns, s.rows) + _list(s.items)
    if s.kind in ("best_config", "capacity"):
        return f"<h3>{html.escape(s.heading)}</h3>" + _list(s.items)
    return _list(s.items)  # the notes


def fragment(card: Scorecard) -> str:
    """Every section as an HTML fragment (a notebook's ``_repr_html_``)."""
    return "".join(_section(s) for s in report_sections(card))


def page(card: Scorecard, *, plots: bool = True) -> str:
    """One self-contained HTML page: the sections, then the plots as inline PNG.

    Nothing is fetched from elsewhere (no scripts, styles or images by URL).
    Without matplotlib the page says how to get the plots
    (``pip install 'deepseekbench[plot]'``) instead of failing.
    """
    from deepseekbench._report._plot import html_page

    return html_page(fragment(card), card.plot if plots else None)


def render(card: Scorecard) -> str:
    """:func:`page` with the plots."""
    return page(card)
