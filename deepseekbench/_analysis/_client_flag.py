"""The client flag of a row: why its client clock is suspect (starved, saturated, waited, lagged).

Holds :func:`client_flag`, the thresholds it applies and the :class:`ClientHealth`
fields it reads (a row, or a scorecard line reading through to its row). The
causes and their remedies: :mod:`deepseekbench._report._client_diagnosis`.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SATURATED_CPU_SHARE", "STARVED_WAIT_SHARE", "ClientHealth", "client_flag"]

SATURATED_CPU_SHARE = 0.8
"""Event-loop thread CPU time per wall second (0..1) at or above which a flagged
client is ``saturated``."""

STARVED_WAIT_SHARE = 0.1
"""Share of wall time waiting for a core (0..1) at or above which a lagging client
that did not read in bursts is flagged ``waited``."""


class ClientHealth(Protocol):
    """What the diagnosis reads from a scorecard line (or a row)."""

    @property
    def client_saturated(self) -> bool: ...
    @property
    def client_starved(self) -> bool: ...
    @property
    def client_cpu_share(self) -> float | None: ...
    @property
    def client_core_wait_share(self) -> float | None: ...
    @property
    def client_stall_ms(self) -> float | None: ...
    @property
    def client_cores(self) -> int | None: ...
    @property
    def client_load_1m(self) -> float | None: ...


def client_flag(ln: ClientHealth) -> str:
    """``"starved"``, ``"saturated"``, ``"waited"``, ``"lagged"`` or ``""`` (healthy)
    for one line; ``"starved"`` exactly when the line's TPOT speedup is refused
    ``client_starved``."""
    if ln.client_starved:
        return "starved"
    if not ln.client_saturated:
        return ""
    if ln.client_cpu_share is not None and ln.client_cpu_share >= SATURATED_CPU_SHARE:
        return "saturated"
    wait = ln.client_core_wait_share
    if wait is not None and wait >= STARVED_WAIT_SHARE:
        return "waited"
    return "lagged"
