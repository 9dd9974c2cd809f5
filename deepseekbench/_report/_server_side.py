"""Scorecard flags for the server's side of a route.

A speculative route can buy its TPOT with the rest of the server: vLLM's MTP
turns prefix-cache hits to 0 on hybrid models (vllm-project/vllm #54360), and
a route that holds the batch longer builds a queue. Each speculative line is
compared with its ``off`` line at the same cell and load; a sharp difference is
a note such as ``! mtp @ short/non_think (c=4): prefix-cache hits 0.81 → 0.00``.

"Sharp": the hit rates (0..1) differ by at least :data:`HIT_RATE_DELTA`; the
queue-depth peaks (requests) differ by at least :data:`QUEUE_DELTA` requests
and by at least half the larger peak.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from deepseekbench._types._axes import Speculative

__all__ = ["HIT_RATE_DELTA", "QUEUE_DELTA", "server_side_notes"]

HIT_RATE_DELTA = 0.2
"""Smallest hit-rate difference (absolute, 0..1) flagged."""

QUEUE_DELTA = 2.0
"""Smallest queue-depth peak difference (requests) flagged."""


class _Line(Protocol):
    """The scorecard-line fields read here."""

    @property
    def route(self) -> str: ...
    @property
    def cell(self) -> str: ...
    @property
    def load(self) -> str: ...
    @property
    def baseline(self) -> str | None: ...
    @property
    def speculative(self) -> Speculative: ...
    @property
    def prefix_cache_hit_rate(self) -> float | None: ...
    @property
    def queue_depth_peak(self) -> float | None: ...


def _where(ln: _Line) -> str:
    return f"{ln.route} @ {ln.cell}" + (f" ({ln.load})" if ln.load != "—" else "")


def _queue_sharp(off: float, mine: float) -> bool:
    return abs(mine - off) >= max(QUEUE_DELTA, 0.5 * max(off, mine))


def server_side_notes(lines: Iterable[_Line]) -> list[str]:
    """One ``!`` note per speculative line whose prefix-cache hit rate or queue-depth
    peak differs sharply from its ``off`` line's at the same cell and load (module
    docstring); lines without a baseline or without the figures give none."""
    lines = list(lines)
    index = {(ln.route, ln.cell, ln.load): ln for ln in lines}
    notes: list[str] = []
    for ln in lines:
        if ln.speculative is Speculative.off or ln.baseline is None:
            continue
        off = index.get((ln.baseline, ln.cell, ln.load))
        if off is None:
            continue
        o, m = off.prefix_cache_hit_rate, ln.prefix_cache_hit_rate
        if o is not None and m is not None and abs(m - o) >= HIT_RATE_DELTA:
            notes.append(
                f"! {_where(ln)}: prefix-cache hits {o:.2f} → {m:.2f} ({off.route} → {ln.route} "
                "at the same load; speculation may be disabling the prefix cache)"
            )
        oq, mq = off.queue_depth_peak, ln.queue_depth_peak
        if oq is not None and mq is not None and _queue_sharp(oq, mq):
            notes.append(
                f"! {_where(ln)}: queue depth peak {oq:g} → {mq:g} requests "
                f"({off.route} → {ln.route} at the same load)"
            )
    return notes
