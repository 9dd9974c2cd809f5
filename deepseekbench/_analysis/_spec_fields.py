"""Row fields on speculation detail and stream health, from one cell's measurements.

* ``acceptance_by_position``: per draft position k = 1 .. depth, the fraction of
  the cell's verify steps whose k-th draft token was accepted. Per-request
  figures (vLLM ``per_step_*`` lists or histogram) are weighted by each
  request's verify steps; where requests carry none, the server-wide Prometheus
  window is used when it covers exactly these requests (its drafted and accepted
  sums equal theirs) or when the row's acceptance is server-wide anyway.
  Definition: ``docs/measurement.md``.
* ``spec_tokens``: the depth the engine reported per request (vLLM
  ``num_spec_tokens``), else the depth declared on the route.
* ``acceptance_source``: where the acceptance figures were read.
* ``server_ttft_ms`` / ``server_queue_ms``: medians of the engine's own timings.
* ``sse_ignored_lines``: ignored SSE lines summed over every measured request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepseekbench._analysis._stats import median
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._acceptance import AcceptanceRecord

__all__ = ["cell_by_position", "cell_spec_fields"]


def _per_request_positions(ok: Sequence[StreamMeasurement]) -> tuple[float, ...] | None:
    """Step-weighted per-position acceptance over requests that all report it."""
    reported = [m for m in ok if m.acceptance is not None and m.draft_tokens is not None]
    if not reported:
        return None
    counts: list[float] | None = None
    steps_total = 0
    for m in reported:
        acc = m.acceptance
        assert acc is not None
        steps = acc.verify_steps
        by_pos = acc.acceptance_by_position
        if by_pos is None or not steps:
            if steps == 0:
                continue  # nothing drafted in this request
            return None
        if counts is None:
            counts = [0.0] * len(by_pos)
        if len(by_pos) != len(counts):
            return None
        for k, frac in enumerate(by_pos):
            counts[k] += round(frac * steps)
        steps_total += steps
    if counts is None or steps_total == 0:
        return None
    return tuple(c / steps_total for c in counts)


def cell_by_position(
    ok: Sequence[StreamMeasurement], server: AcceptanceRecord | None
) -> tuple[float, ...] | None:
    """Per-position acceptance for a cell (module docstring), or ``None``."""
    found = _per_request_positions(ok)
    if found is not None:
        return found
    if server is None or server.acceptance_by_position is None:
        return None
    with_counts = [m for m in ok if m.draft_tokens is not None and m.accepted_tokens is not None]
    if not with_counts:
        return server.acceptance_by_position  # the row's acceptance is server-wide too
    drafted = sum(m.draft_tokens or 0 for m in with_counts)
    accepted = sum(m.accepted_tokens or 0 for m in with_counts)
    if (server.draft_tokens, server.accepted_tokens) == (drafted, accepted):
        return server.acceptance_by_position
    return None


def _one(values: Sequence[Any]) -> Any:
    """The single distinct non-None value, else ``None``."""
    distinct = {v for v in values if v is not None}
    return distinct.pop() if len(distinct) == 1 else None


def _source(ok: Sequence[StreamMeasurement], server: AcceptanceRecord | None) -> str | None:
    sources = sorted({m.acceptance_source for m in ok if m.acceptance_source is not None})
    if sources:
        return "+".join(sources)
    if server is not None and server.known:
        return server.source
    return None


def cell_spec_fields(
    measured: Sequence[StreamMeasurement],
    server: AcceptanceRecord | None,
    *,
    speculative: bool,
    declared_spec_tokens: int | None = None,
) -> dict[str, Any]:
    """The :class:`~deepseekbench.Row` fields this module defines, for one route's cell.

    Args:
        measured: every measured request of the cell (errored ones included;
            only error-free ones feed acceptance and timings).
        server: the cell's server-wide Prometheus record, if any.
        speculative: False for the baseline route: no acceptance fields then.
        declared_spec_tokens: the depth declared on the route, if any.

    Returns:
        ``acceptance_by_position`` (tuple of ratios), ``spec_tokens`` (tokens per
        step), ``acceptance_source``, ``server_ttft_ms`` / ``server_queue_ms`` (ms)
        and ``sse_ignored_lines`` (lines).
    """
    ok = [m for m in measured if m.error is None]
    fields: dict[str, Any] = {
        "server_ttft_ms": median(m.server_ttft_ms for m in ok),
        "server_queue_ms": median(m.server_queue_ms for m in ok),
        "sse_ignored_lines": sum(m.sse_ignored_lines for m in measured),
    }
    if speculative:
        fields["acceptance_by_position"] = cell_by_position(ok, server)
        fields["spec_tokens"] = _one([m.spec_tokens for m in ok]) or declared_spec_tokens
        fields["acceptance_source"] = _source(ok, server)
    return fields
