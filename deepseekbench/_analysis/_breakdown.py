"""Per-slice figures of a row: output length against the target, categories, turns.

* :func:`output_tokens_of` / :func:`is_short`: a request's output length and
  whether it fell short of its ``max_tokens``.
* :func:`workload_fields`: the row fields the workload breakdown adds (short-output flag,
  output and prompt length percentiles).
* :func:`slice_stats`: medians and summed acceptance of one slice of requests
  (a dataset category, a conversation turn) as :class:`~deepseekbench.SliceStats`.
* :func:`category_row` and :func:`category_speedups`: a row narrowed to one
  category, so the per-category speedup is made by
  :func:`~deepseekbench.compare_speedup` like every other speedup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deepseekbench._analysis._rowstats import acceptance
from deepseekbench._analysis._speedup import SpeedupMetric, SpeedupVerdict, compare_speedup
from deepseekbench._analysis._stats import median, percentiles
from deepseekbench._records._figures import output_tokens
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._row import Row, SliceStats

__all__ = [
    "category_row",
    "category_speedups",
    "is_short",
    "output_tokens_of",
    "slice_stats",
    "workload_fields",
]


output_tokens_of = output_tokens
"""Output tokens of one request (tokens), ``None`` when unknown: :func:`output_tokens`."""


def is_short(m: StreamMeasurement, max_tokens: int) -> bool:
    """True when the request's output is unknown or below ``max_tokens`` (tokens)."""
    n = output_tokens_of(m)
    return n is None or n < max_tokens


def workload_fields(ok: Sequence[StreamMeasurement], max_tokens: int) -> dict[str, Any]:
    """Row fields from the successful requests ``ok`` of a cell sent with ``max_tokens``.

    Returns ``output_short``, ``n_output_short``, ``output_tokens`` and
    ``prompt_tokens`` (percentiles, tokens) for :class:`~deepseekbench.Row`.
    """
    n_short = sum(is_short(m, max_tokens) for m in ok)
    return {
        "output_short": n_short > 0,
        "n_output_short": n_short,
        "output_tokens": percentiles(
            float(n) if (n := output_tokens_of(m)) is not None else None for m in ok
        ),
        "prompt_tokens": percentiles(
            float(m.prompt_tokens) if m.prompt_tokens is not None else None for m in ok
        ),
    }


def slice_stats(name: str, measured: Sequence[StreamMeasurement], *, max_tokens: int) -> SliceStats:
    """Figures of one slice of a row's measured requests (errors counted, not used).

    Args:
        name: the category name, or ``turn <n>``.
        measured: the slice's measured requests, errored ones included.
        max_tokens: the ``max_tokens`` they were sent with (tokens).

    Returns:
        A :class:`~deepseekbench.SliceStats`: medians in ms / tokens/s; acceptance
        over the slice's requests by :func:`~deepseekbench._analysis._rowstats.acceptance`,
        as for a row but without its ``/metrics`` fallback (a server-wide delta cannot
        be split by category or turn); ``None`` when no request reported any.
    """
    ok = [m for m in measured if m.error is None]
    # Per-request figures only: the /metrics fallback of a row is a server-wide
    # delta over the whole window, which cannot be split by category or turn.
    ratio, length, _, drafted, accepted = acceptance(ok, None)
    return SliceStats(
        name=name,
        n_requests=len(measured),
        n_errors=len(measured) - len(ok),
        ttft_ms=median(m.ttft_ms for m in ok),
        tpot_ms=median(m.tpot_ms for m in ok),
        e2e_ms=median(m.e2e_ms for m in ok),
        output_toks_per_s=median(m.output_toks_per_s for m in ok),
        accepted_token_ratio=ratio,
        acceptance_length=length,
        draft_tokens=drafted,
        accepted_tokens=accepted,
        tokens_estimated=any(m.tokens_estimated for m in ok),
        output_short=any(is_short(m, max_tokens) for m in ok),
    )


_WINDOW_FIELDS = (
    "output_throughput_toks_per_s",
    "request_throughput_per_s",
    "goodput_req_per_s",
    "slo_attainment",
)


def category_row(row: Row, name: str) -> Row | None:
    """``row`` narrowed to category ``name`` (its medians, counts and acceptance),
    or ``None`` when the row has no such category. Parity is the row's (it is
    established per route and reasoning mode, not per category)."""
    s = next((c for c in row.categories if c.name == name), None)
    if s is None:
        return None
    return row.model_copy(
        update={
            "ttft_ms": s.ttft_ms,
            "tpot_ms": s.tpot_ms,
            "e2e_ms": s.e2e_ms,
            "output_toks_per_s": s.output_toks_per_s,
            "accepted_token_ratio": s.accepted_token_ratio,
            "acceptance_length": s.acceptance_length,
            "draft_tokens": s.draft_tokens,
            "accepted_tokens": s.accepted_tokens,
            "tokens_estimated": s.tokens_estimated,
            "output_short": s.output_short,
            "n_requests": s.n_requests,
            "n_errors": s.n_errors,
            "categories": (),
            "turns": (),
            # window figures cover the whole row, not one category
            **{k: None for k in _WINDOW_FIELDS if k in Row.model_fields},
        }
    )


def category_speedups(
    baseline: Row,
    candidate: Row,
    *,
    metric: SpeedupMetric | str = SpeedupMetric.tpot_ms,
    min_requests: int | None = None,
) -> Mapping[str, SpeedupVerdict]:
    """Per-category :func:`~deepseekbench.compare_speedup` verdicts, for every
    category on both rows (sorted by name); every rule of a row-level speedup holds
    per category (the category's own request count included).

    Raises:
        ValueError: as :func:`~deepseekbench.compare_speedup`.
    """
    names = sorted({c.name for c in baseline.categories} & {c.name for c in candidate.categories})
    out: dict[str, SpeedupVerdict] = {}
    for name in names:
        b, c = category_row(baseline, name), category_row(candidate, name)
        assert b is not None and c is not None
        kwargs: dict[str, Any] = {"metric": metric}
        if min_requests is not None:
            kwargs["min_requests"] = min_requests
        out[name] = compare_speedup(b, c, **kwargs)
    return out
