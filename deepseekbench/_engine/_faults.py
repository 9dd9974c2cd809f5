"""Fault injection for reliability tests of clients (all faults off by default).

Faults come from two places: the engine-wide :class:`FaultConfig` (each enabled
fault applies to a request with probability ``probability``, drawn from a
generator seeded by the engine seed), and, when ``allow_request_header`` is
true, a per-request header ``x-deepseekbench-fault: name[,name…]`` naming
:class:`FaultKind` values, so one server can exercise several faults.

A step-cost fault lives with the costs it distorts: ``CostModel.verify_delay_ms``
(:mod:`deepseekbench._engine._costs`) adds a fixed delay to every verify step, which
the speedup decomposition's witness must name (:func:`~deepseekbench.witness_step_costs`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

FAULT_HEADER: Final[str] = "x-deepseekbench-fault"
"""Request header naming faults for that request (comma-separated FaultKind values)."""


class FaultKind(StrEnum):
    """Names of the injectable faults (header values)."""

    keepalive = "keepalive"
    split_writes = "split_writes"
    split_utf8 = "split_utf8"
    error_event = "error_event"
    drop = "drop"
    no_usage = "no_usage"
    http_429 = "http_429"
    http_503 = "http_503"
    stall = "stall"


class FaultConfig(BaseModel):
    """Engine-wide fault switches; every fault is off by default.

    ``keepalive_comments``: ``: keep-alive`` SSE comments before the first event
    and between events. ``split_writes``: each event written in two pieces
    ``split_pause_ms`` (ms) apart. ``split_utf8``: events holding a multi-byte
    character are split inside its UTF-8 encoding. ``error_mid_stream``: after
    ``after_chunks`` content chunks an SSE ``{"error": …}`` event, then EOF with
    no ``[DONE]``. ``drop_connection``: after ``after_chunks`` content chunks the
    TCP connection is closed mid-body. ``missing_usage``: no usage chunk even when
    requested. ``http_status``: refuse with 429 or 503 and a JSON error before
    streaming. ``stall``: pause ``stall_ms`` (ms) after ``after_chunks`` content
    chunks. ``probability``: chance (0..1) that each enabled fault applies to a
    request.

    Raises:
        pydantic.ValidationError: an unknown field, a negative ``stall_ms``,
            ``split_pause_ms`` or ``after_chunks``, ``probability`` outside [0, 1],
            or an ``http_status`` other than 429/503.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    keepalive_comments: bool = False
    split_writes: bool = False
    split_utf8: bool = False
    error_mid_stream: bool = False
    drop_connection: bool = False
    missing_usage: bool = False
    http_status: Literal[429, 503] | None = None
    stall: bool = False
    stall_ms: float = Field(default=1000.0, ge=0, description="Stall length (ms).")
    split_pause_ms: float = Field(default=2.0, ge=0, description="Pause between split pieces (ms).")
    after_chunks: int = Field(
        default=2, ge=0, description="Content chunks sent before a mid-stream fault (chunks)."
    )
    probability: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Chance each enabled fault applies to a request (0..1).",
    )
    allow_request_header: bool = Field(
        default=True, description=f"Honour the per-request {FAULT_HEADER!r} header."
    )

    def enabled(self) -> frozenset[FaultKind]:
        """The fault kinds switched on engine-wide."""
        on: set[FaultKind] = set()
        flags = {
            FaultKind.keepalive: self.keepalive_comments,
            FaultKind.split_writes: self.split_writes,
            FaultKind.split_utf8: self.split_utf8,
            FaultKind.error_event: self.error_mid_stream,
            FaultKind.drop: self.drop_connection,
            FaultKind.no_usage: self.missing_usage,
            FaultKind.http_429: self.http_status == 429,
            FaultKind.http_503: self.http_status == 503,
            FaultKind.stall: self.stall,
        }
        on.update(kind for kind, flag in flags.items() if flag)
        return frozenset(on)


@dataclass(frozen=True, slots=True)
class ActiveFaults:
    """The faults one request gets, plus the parameters they use."""

    kinds: frozenset[FaultKind]
    config: FaultConfig

    def __contains__(self, kind: object) -> bool:
        return kind in self.kinds


def parse_fault_header(value: str) -> frozenset[FaultKind]:
    """Fault kinds named in a header value; raises ``ValueError`` on an unknown name."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    out: set[FaultKind] = set()
    for name in names:
        try:
            out.add(FaultKind(name))
        except ValueError:
            allowed = ", ".join(k.value for k in FaultKind)
            raise ValueError(f"unknown fault {name!r}; allowed: {allowed}") from None
    return frozenset(out)


def faults_for_request(config: FaultConfig, header: str | None, rng: random.Random) -> ActiveFaults:
    """Resolve the faults of one request; raises ``ValueError`` for a bad header."""
    kinds = {k for k in sorted(config.enabled()) if rng.random() < config.probability}
    if header is not None and config.allow_request_header:
        kinds |= parse_fault_header(header)
    return ActiveFaults(frozenset(kinds), config)
