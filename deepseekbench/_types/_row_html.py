"""An HTML table of rows: what Jupyter shows for a :class:`~deepseekbench.Row`."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deepseekbench._types._row import Row

__all__ = ["rows_html"]

_HTML_COLUMNS: tuple[str, ...] = (
    "model_id",
    "engine_route",
    "route_label",
    "context_bucket",
    "output_target",
    "reasoning_mode",
    "speculative",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "output_toks_per_s",
    "accepted_token_ratio",
    "acceptance_length",
    "quality_parity",
    "n_requests",
    "n_errors",
)


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"
    return html.escape(str(value))


def rows_html(rows: Iterable[Row]) -> str:
    """An HTML table of rows (what Jupyter shows for a ``Row``)."""
    head = "".join(f"<th>{c}</th>" for c in _HTML_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(getattr(r, c))}</td>" for c in _HTML_COLUMNS) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
