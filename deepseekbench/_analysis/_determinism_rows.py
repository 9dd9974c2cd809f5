"""A row's engine deterministic mode, from the results file (pure).

Reads the ``engine_determinism`` records (:class:`~deepseekbench._types._determinism.
EngineDeterminism` per route, written before measuring) into the row fields
``engine_deterministic`` / ``engine_deterministic_source``, and appends
``engine deterministic mode: on/off/unknown`` to the row's parity note
(``divergence_note``) when the row has one; when ``off``'s engine says otherwise
than the row's, both are named (bit-exact parity needs both sides deterministic).
A results file written before the record reads as unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepseekbench._types._determinism import DeterminismSource, EngineDeterminism

__all__ = ["determinism_fields", "determinism_note"]


def determinism_note(modes: Mapping[str, EngineDeterminism], route: str, off: str) -> str:
    """``engine deterministic mode: on (server: ...)``, with ``; off: ...`` added when
    ``off``'s mode differs from ``route``'s (unknown for a route never recorded)."""
    mine = modes.get(route, EngineDeterminism())
    note = f"engine deterministic mode: {mine.describe()}"
    base = modes.get(off, EngineDeterminism())
    if route != off and base.deterministic != mine.deterministic:
        note += f"; {off}: {base.describe()}"
    return note


def determinism_fields(
    modes: Mapping[str, EngineDeterminism], route: str, off: str, fields: Mapping[str, Any]
) -> dict[str, Any]:
    """``fields`` (a row's margin fields) with the route's deterministic mode, and
    :func:`determinism_note` appended to ``divergence_note`` when there is one."""
    mine = modes.get(route, EngineDeterminism())
    out = dict(fields)
    out["engine_deterministic"] = mine.deterministic
    known = mine.source is not DeterminismSource.unknown
    out["engine_deterministic_source"] = mine.source.value if known else None
    if out.get("divergence_note"):
        out["divergence_note"] = f"{out['divergence_note']}; {determinism_note(modes, route, off)}"
    return out
