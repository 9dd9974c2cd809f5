"""Progress of a run: the events a caller is sent, and the counter that sends them.

Holds :class:`ProgressEvent`, :data:`ProgressFn` (the caller's callback) and
:class:`Progress` (the run's counts and phase, one event per change).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Progress", "ProgressEvent", "ProgressFn"]


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Progress of a run: requests ``done`` of ``total`` (warm-ups and parity included),
    ``errors`` among them, ``elapsed_s`` seconds since the start, and the current ``phase``.

    ``kept``: measured requests taken from the results file (0 on a fresh run);
    ``remaining``: measured requests the run had left to make when it started
    (warm-ups and parity not counted); both fixed for the run once known. On a
    resumed run the first event has phase ``"resume"``, so a caller can say both."""

    phase: str
    done: int
    total: int
    errors: int
    elapsed_s: float
    kept: int = 0
    remaining: int = 0

    @property
    def rate_per_s(self) -> float:
        """Requests finished per second so far (requests/s)."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0


ProgressFn = Callable[[ProgressEvent], None]
"""Called after every finished request (and at each phase change); must not block."""


class Progress:
    """The run's counts (``done`` of ``total``, ``errors``, ``kept``, ``remaining``)
    and phase; every change is sent to ``fn`` as a :class:`ProgressEvent`."""

    def __init__(self, fn: ProgressFn | None, total: int) -> None:
        self.fn = fn
        self.total = total
        self.done = 0
        self.errors = 0
        self.phase = "start"
        self.t0 = time.monotonic()
        self.kept = 0
        self.remaining = 0

    def emit(self) -> None:
        """Send the current counts and phase (nothing without a callback)."""
        if self.fn is not None:
            self.fn(
                ProgressEvent(
                    phase=self.phase,
                    done=self.done,
                    total=self.total,
                    errors=self.errors,
                    elapsed_s=time.monotonic() - self.t0,
                    kept=self.kept,
                    remaining=self.remaining,
                )
            )

    def step(self, error: bool) -> None:
        """One request finished (``error``: it ended in an error)."""
        self.done += 1
        self.errors += error
        self.emit()

    def set_phase(self, phase: str) -> None:
        """The run entered ``phase``."""
        self.phase = phase
        self.emit()
