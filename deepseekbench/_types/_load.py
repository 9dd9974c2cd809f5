"""One offered load of a sweep: the value a row's load axes hold.

Holds :class:`LoadPoint` (arrival kind, concurrency, open-loop rate), read by the
plan that lists the sweep, the executors that send it, the store that keys records
by it, and the report that labels rows with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepseekbench._types._axes import Arrival

__all__ = ["LoadPoint"]


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One offered load of a sweep: what a row's load axes hold.

    Attributes:
        arrival: ``closed`` (a closed loop), ``poisson`` or ``gamma`` (an open loop).
        concurrency: closed-loop streams, or the open loop's in-flight cap (requests).
        rate_per_s: the open loop's offered rate (requests/s); ``None`` when closed.
    """

    arrival: Arrival
    concurrency: int
    rate_per_s: float | None = None

    @property
    def key(self) -> str:
        """A stable text key for results records, e.g. ``closed:c=16``, ``poisson:r=8:c=64``."""
        if self.rate_per_s is None:
            return f"{self.arrival.value}:c={self.concurrency}"
        return f"{self.arrival.value}:r={self.rate_per_s:g}:c={self.concurrency}"

    @property
    def label(self) -> str:
        """What a scorecard shows, e.g. ``c=16`` or ``8/s``."""
        return f"c={self.concurrency}" if self.rate_per_s is None else f"{self.rate_per_s:g}/s"

    @property
    def phrase(self) -> str:
        """In words, e.g. ``concurrency 16`` or ``8 req/s``."""
        if self.rate_per_s is None:
            return f"concurrency {self.concurrency}"
        return f"{self.rate_per_s:g} req/s"

    @property
    def level(self) -> float:
        """The sweep's ordering value: concurrency (closed) or rate (open), ascending load."""
        return float(self.concurrency if self.rate_per_s is None else self.rate_per_s)
