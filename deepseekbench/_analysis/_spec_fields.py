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
* ``acceptance_length_p10`` / ``_p50`` / ``_p90``: percentiles of the per-request
  acceptance lengths (numpy's linear interpolation); ``accepted_per_step``: verify
  steps by accepted draft tokens ``j = 0 .. depth``, pooled over requests (request
  ``i`` gives ``steps_i · (a_j − a_{j+1})`` with ``a_0 = 1``, ``a_{depth+1} = 0``, from
  its per-position acceptance, as AIPerf's acceptance histogram), ``None`` unless
  every request reports per-step figures; ``acceptance_split``: ``"unknown"`` —
  no engine read today reports acceptance separately for reasoning and answer tokens
  (DeepSeek V4's thinking modes), and a split is never estimated.
* ``server_ttft_ms`` / ``server_queue_ms``: medians of the engine's own timings.
* ``sse_ignored_lines``: ignored SSE lines summed over every measured request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from deepseekbench._analysis._stats import median
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._acceptance import AcceptanceRecord

__all__ = ["acceptance_spread", "accepted_histogram", "cell_by_position", "cell_spec_fields"]


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


def accepted_histogram(ok: Sequence[StreamMeasurement]) -> tuple[int, ...] | None:
    """Verify steps by accepted draft tokens ``0 .. depth`` pooled over ``ok`` (module
    docstring); ``None`` unless every request with acceptance has per-step figures."""
    reported = [m.acceptance for m in ok if m.acceptance is not None and m.acceptance.known]
    if not reported:
        return None
    hist: list[int] | None = None
    for acc in reported:
        by_pos, steps = acc.acceptance_by_position, acc.verify_steps
        if by_pos is None or steps is None:
            return None
        if hist is None:
            hist = [0] * (len(by_pos) + 1)
        if len(by_pos) + 1 != len(hist):
            return None
        reach = (1.0, *by_pos, 0.0)
        for j in range(len(hist)):
            hist[j] += round(steps * (reach[j] - reach[j + 1]))
    return tuple(hist) if hist is not None else None


def acceptance_spread(ok: Sequence[StreamMeasurement]) -> dict[str, Any]:
    """``acceptance_length_p10/_p50/_p90``, ``accepted_per_step`` and
    ``acceptance_split`` of a speculative cell (module docstring); empty without any
    per-request acceptance length."""
    lengths = [m.acceptance_length for m in ok if m.acceptance_length is not None]
    if not lengths:
        return {}
    p10, p50, p90 = (float(v) for v in np.percentile(lengths, [10, 50, 90]))
    return {
        "acceptance_length_p10": p10,
        "acceptance_length_p50": p50,
        "acceptance_length_p90": p90,
        "accepted_per_step": accepted_histogram(ok),
        "acceptance_split": "unknown",
    }


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
        step), ``acceptance_source``, the per-request acceptance spread
        (:func:`acceptance_spread`), ``server_ttft_ms`` / ``server_queue_ms`` (ms)
        and ``sse_ignored_lines`` (lines).
    """
    ok = [m for m in measured if m.error is None]
    fields: dict[str, Any] = {
        "server_ttft_ms": median(m.server_ttft_ms for m in ok),
        "server_queue_ms": median(m.server_queue_ms for m in ok),
        "sse_ignored_lines": sum(m.sse_ignored_lines for m in measured),
    }
    if speculative:
        fields |= acceptance_spread(ok)
        fields["acceptance_by_position"] = cell_by_position(ok, server)
        fields["spec_tokens"] = _one([m.spec_tokens for m in ok]) or declared_spec_tokens
        fields["acceptance_source"] = _source(ok, server)
    return fields
