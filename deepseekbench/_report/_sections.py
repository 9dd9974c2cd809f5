"""The report model: a scorecard as an ordered list of sections, the one thing every format walks.

Holds :class:`Section`, :data:`SECTION_KINDS` (every kind, in report order) and
:func:`report_sections`, which builds a scorecard's sections: the title, the
run line, the integrity warning, the unfinished run's warning, the main table,
where each credited speedup comes from (acceptance length ÷ step-cost ratio),
acceptance per request, the per-category and per-turn tables, the best
configuration per load, the latency percentiles, capacity under SLO and the
notes. A section with nothing to show is left out, except the title, the run
line and the main table, which every report has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from deepseekbench._analysis._interval_width import wide_interval_notes
from deepseekbench._report._acceptance import (
    ACCEPTANCE_COLUMNS,
    ACCEPTANCE_TITLE,
    acceptance_cells,
)
from deepseekbench._report._decomposition import (
    DECOMPOSITION_COLUMNS,
    DECOMPOSITION_TITLE,
    decomposition_cells,
    decomposition_items,
)
from deepseekbench._report._grid import grid_text
from deepseekbench._report._notes import scorecard_notes, unfinished_header, where
from deepseekbench._report._tables import (
    CATEGORY_COLUMNS,
    CATEGORY_TITLE,
    LATENCY_TITLE,
    TURN_COLUMNS,
    TURN_TITLE,
    category_cells,
    latency_cells,
    latency_columns,
    main_cells,
    main_columns,
    turn_cells,
)
from deepseekbench._types._clock import Clock

if TYPE_CHECKING:
    from deepseekbench._report._scorecard import Scorecard

__all__ = ["SECTION_KINDS", "Section", "report_sections"]

SECTION_KINDS: Final = (
    "title",
    "run",
    "integrity",
    "unfinished",
    "table",
    "decomposition",
    "acceptance",
    "categories",
    "turns",
    "best_config",
    "latency",
    "capacity",
    "notes",
)
"""Every section kind, in the order a report shows them."""


@dataclass(frozen=True)
class Section:
    """One section of a report.

    ``kind``: one of :data:`SECTION_KINDS`. ``heading``: its title line (empty
    for the run line, the main table and the notes). ``columns`` and ``rows``:
    a table's heads and text cells. ``items``: its prose lines, as the text
    format prints them (a nested line keeps its leading spaces).
    """

    kind: str
    heading: str = ""
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    items: tuple[str, ...] = ()


def _table(kind: str, heading: str, columns: tuple[str, ...], rows: list[list[str]]) -> Section:
    return Section(kind, heading, columns, tuple(tuple(r) for r in rows))


def _head_and_items(kind: str, lines: list[str]) -> list[Section]:
    if not lines:
        return []
    return [Section(kind, lines[0], items=tuple(lines[1:]))]


def report_sections(card: Scorecard) -> list[Section]:
    """``card``'s sections in report order (:data:`SECTION_KINDS`)."""
    lines, meta = card.lines, card.meta
    on = " on the server clock" if card.clock is Clock.server else ""
    title = (
        f"Scorecard (speedup by {card.metric.value}{on}; credited only with parity "
        "verified on both sides)"
    )
    note = meta.results_integrity if meta is not None else None
    out = [
        Section("title", title),
        Section("run", items=(f"Run: {meta.describe()}",) if meta is not None else ()),
        *([Section("integrity", items=(f"Results file: {note}",))] if note else []),
        *([Section("unfinished", items=(unfinished_header(lines),))] if card.unfinished else []),
        _table("table", "", main_columns(lines, card.clock), main_cells(lines, card.clock)),
    ]
    parts, why = decomposition_cells(lines), decomposition_items(lines)
    if parts or why:
        out.append(
            Section(
                "decomposition",
                DECOMPOSITION_TITLE,
                DECOMPOSITION_COLUMNS,
                tuple(tuple(r) for r in parts),
                tuple(why),
            )
        )
    spread = acceptance_cells(lines)
    if spread:
        out.append(_table("acceptance", ACCEPTANCE_TITLE, ACCEPTANCE_COLUMNS, spread))
    cats, turns, latency = category_cells(lines), turn_cells(lines), latency_cells(lines)
    if cats:
        out.append(_table("categories", CATEGORY_TITLE, CATEGORY_COLUMNS, cats))
    if turns:
        out.append(_table("turns", TURN_TITLE, TURN_COLUMNS, turns))
    out += _head_and_items("best_config", grid_text(card.best_configs(), card.metric))
    if latency:
        out.append(_table("latency", LATENCY_TITLE, latency_columns(lines), latency))
    if card.capacity is not None:
        out += _head_and_items("capacity", card.capacity.lines())
    stop = card.stopping  # [stopping] sequential: rounds taken, time saved
    notes = scorecard_notes(lines, card.client_workers)
    notes += wide_interval_notes(lines, stop.decided_labels if stop is not None else ())
    if stop is not None:
        unsure = {where(ln) for ln in lines if ln.verdict is not None and ln.verdict.inconclusive}
        notes += stop.notes(inconclusive=unsure)
    notes += card.run_notes
    if notes:
        out.append(Section("notes", items=tuple(notes)))
    return out
