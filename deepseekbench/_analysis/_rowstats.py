"""A row's figures from its measured requests (pure).

Medians and percentiles per request, acceptance over the row, and the
window figures: output throughput (tokens/s) and request throughput
(requests/s) over the measurement window, goodput (requests/s meeting every
SLO limit) and SLO attainment, after vLLM's ``bench serve`` (``--goodput``,
"Output token throughput", "Request throughput") and NVIDIA AIPerf
("Output Token Throughput", "Request Throughput", "Goodput"); sources in
``docs/measurement.md``.

**Measurement window.** For one block (a route's requests of one round) it
runs from the first request's send to the last token of the last request
(``start_perf_ns`` + ``e2e_ms``); a row's window is the sum of its blocks'
windows (the time the route spent being measured at that cell and load).
Only successful requests count, in the tokens and in the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from deepseekbench._analysis._stats import median, percentiles
from deepseekbench._records._figures import counted_output_tokens
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._store._results import MeasureInfo
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import AcceptanceScope

__all__ = [
    "WINDOW_METRICS",
    "RowRequests",
    "acceptance",
    "combine_windows",
]

WINDOW_METRICS: frozenset[str] = frozenset(
    {"output_throughput_toks_per_s", "request_throughput_per_s", "goodput_req_per_s"}
)
"""Row metrics measured over a window (not per request)."""


def _sum_known(values: Iterable[int | None]) -> int | None:
    vals = list(values)
    if not vals or any(v is None for v in vals):
        return None
    return sum(v for v in vals if v is not None)


def _window_steps(server: AcceptanceRecord | None, drafted: int, accepted: int) -> int | None:
    """The server-wide verify steps when that record covers exactly these sums, else None."""
    if server is None or not server.verify_steps:
        return None
    if server.draft_tokens != drafted or server.accepted_tokens != accepted:
        return None
    return server.verify_steps


def acceptance(
    ok: Sequence[StreamMeasurement], server: AcceptanceRecord | None
) -> tuple[float | None, float | None, AcceptanceScope | None, int | None, int | None]:
    """``(ratio, length, scope, drafted, accepted)`` over a set of successful requests.

    The one definition of acceptance over requests, used for a row and (with
    ``server=None``) for its category and turn slices. Acceptance rate =
    accepted draft tokens / drafted tokens (summed over the requests; ``None``
    when nothing was drafted or more was accepted than drafted); acceptance
    length = 1 + accepted / verify steps (tokens per verify step), else the
    median of the per-request lengths. Sources: vLLM's spec-decode metrics
    (``num_accepted_tokens / num_draft_tokens``, mean acceptance length), as in
    ``docs/measurement.md``.

    Per-request counts win; the server-wide ``/metrics`` delta ``server`` (the
    row's measurement windows) is the fallback, and supplies the verify steps
    when its counts equal the per-request sums. ``drafted`` and ``accepted`` are
    token counts, ``None`` when no request carried both.
    """
    with_counts = [m for m in ok if m.draft_tokens is not None and m.accepted_tokens is not None]
    if with_counts:
        drafted = sum(m.draft_tokens or 0 for m in with_counts)
        accepted = sum(m.accepted_tokens or 0 for m in with_counts)
        ratio = accepted / drafted if drafted > 0 and accepted <= drafted else None
        steps = _sum_known(
            m.acceptance.verify_steps if m.acceptance is not None else None for m in with_counts
        )
        length: float | None
        if steps is not None and steps > 0:
            length = 1.0 + accepted / steps
        else:
            length = median(m.acceptance_length for m in with_counts)
        window_steps = _window_steps(server, drafted, accepted)
        if length is None and window_steps is not None:
            # llama.cpp reports no per-request verify steps; its counters do. When the
            # counter delta over the measurement windows holds exactly the per-request
            # drafted/accepted sums, its step count belongs to those same requests.
            length = 1.0 + accepted / window_steps
        return ratio, length, AcceptanceScope.per_request, drafted, accepted
    lengths = [m.acceptance_length for m in ok if m.acceptance_length is not None]
    ratios = [m.accepted_token_ratio for m in ok if m.accepted_token_ratio is not None]
    if lengths or ratios:
        return median(ratios), median(lengths), AcceptanceScope.per_request, None, None
    if server is not None and server.known:
        return (
            server.accepted_token_ratio,
            server.acceptance_length,
            AcceptanceScope.server_wide,
            server.draft_tokens,
            server.accepted_tokens,
        )
    return None, None, None, None, None


def combine_windows(records: Sequence[AcceptanceRecord]) -> AcceptanceRecord | None:
    """The ``/metrics`` deltas of a row's rounds as one: counts summed when every
    window has them, else the last window's (gauges are not additive)."""
    if not records:
        return None
    if len(records) == 1:
        return records[0]
    counts = [(r.draft_tokens, r.accepted_tokens, r.verify_steps) for r in records]
    if all(d is not None and a is not None for d, a, _ in counts):
        last = records[-1]
        return AcceptanceRecord.from_counts(
            engine=last.engine,
            source=last.source,
            draft_tokens=sum(d or 0 for d, _, _ in counts),
            accepted_tokens=sum(a or 0 for _, a, _ in counts),
            verify_steps=_sum_known(s for _, _, s in counts),
            scope=last.scope,
            by_position=_positions(records),
            spec_tokens=last.spec_tokens,
        )
    return records[-1]


def _positions(records: Sequence[AcceptanceRecord]) -> tuple[float, ...] | None:
    """Per-position acceptance over windows, weighted by each window's verify steps;
    ``None`` unless every window has both, of one depth."""
    if any(r.acceptance_by_position is None or not r.verify_steps for r in records):
        return None
    depths = {len(r.acceptance_by_position or ()) for r in records}
    if len(depths) != 1:
        return None
    steps = sum(r.verify_steps or 0 for r in records)
    depth = depths.pop()
    return tuple(
        sum((r.acceptance_by_position or ())[k] * (r.verify_steps or 0) for r in records) / steps
        for k in range(depth)
    )


def _window_s(ms: Sequence[StreamMeasurement]) -> float:
    """First send to last token of ``ms`` (s); 0 when no request has both times."""
    spans = [
        (m.start_perf_ns, m.start_perf_ns + m.e2e_ms * 1e6)
        for m in ms
        if m.start_perf_ns is not None and m.e2e_ms is not None
    ]
    if not spans:
        return 0.0
    return (max(e for _, e in spans) - min(s for s, _ in spans)) / 1e9


def _meets(m: StreamMeasurement, limits: Mapping[str, float]) -> bool:
    """Every limit met (a metric the request lacks counts as missed)."""
    if m.error is not None:
        return False
    for name, limit in limits.items():
        value = getattr(m, name)
        if value is None or value > limit:
            return False
    return True


@dataclass(frozen=True, slots=True)
class RowRequests:
    """A row's measured requests with what their records hold beside them.

    Attributes:
        requests: ``(measurement, info)`` per measured request (warm-ups excluded).
        limits: the plan's SLO limits by metric (``ttft_ms``, ``tpot_ms``, ``e2e_ms``).
    """

    requests: tuple[tuple[StreamMeasurement, MeasureInfo], ...]
    limits: Mapping[str, float]

    @property
    def ok(self) -> list[StreamMeasurement]:
        """The successful measurements."""
        return [m for m, _ in self.requests if m.error is None]

    def rounds(self) -> list[int]:
        """The rounds with a successful request, ascending."""
        return sorted({i.round for m, i in self.requests if m.error is None})

    def in_round(self, round_: int) -> RowRequests:
        """The requests of one round."""
        return RowRequests(tuple(r for r in self.requests if r[1].round == round_), self.limits)

    def window_s(self) -> float:
        """The measurement window (s): the sum over blocks (round, run) of first send
        to last token of the block's successful requests."""
        blocks: dict[tuple[int, str], list[StreamMeasurement]] = {}
        for m, info in self.requests:
            if m.error is None:
                blocks.setdefault((info.round, info.run_id), []).append(m)
        return sum(_window_s(ms) for ms in blocks.values())

    def per_window(self, count: float) -> float | None:
        """``count`` / the window (per s), or ``None`` without a window."""
        w = self.window_s()
        return count / w if w > 0 else None

    def output_throughput(self) -> float | None:
        """Output tokens of the successful requests / the window (tokens/s)."""
        return self.per_window(sum(counted_output_tokens(m) for m in self.ok))

    def request_throughput(self) -> float | None:
        """Successful requests / the window (requests/s)."""
        return self.per_window(len(self.ok))

    def good(self) -> int:
        """Requests meeting every SLO limit."""
        return sum(_meets(m, self.limits) for m, _ in self.requests)

    def goodput(self) -> float | None:
        """Requests meeting every SLO limit / the window (requests/s); ``None`` without SLOs."""
        return self.per_window(self.good()) if self.limits else None

    def slo_attainment(self) -> float | None:
        """Fraction of measured requests meeting every SLO limit; ``None`` without SLOs."""
        if not self.limits or not self.requests:
            return None
        return self.good() / len(self.requests)

    def queue_p90_ms(self) -> float | None:
        """p90 of the open-loop schedule lag (ms); ``None`` for a closed loop."""
        p = percentiles(i.queue_ms for _, i in self.requests)
        return p.p90 if p is not None else None

    def value(self, metric: str) -> float | None:
        """The row-level value of ``metric``: a window figure, or the median of a
        per-request field over the successful requests.

        Raises:
            AttributeError: ``metric`` names neither.
        """
        if metric == "output_throughput_toks_per_s":
            return self.output_throughput()
        if metric == "request_throughput_per_s":
            return self.request_throughput()
        if metric == "goodput_req_per_s":
            return self.goodput()
        return median(getattr(m, metric) for m in self.ok)

    def round_values(self, metric: str) -> dict[int, float]:
        """``metric`` per round (rounds where it is known), for paired comparisons.

        Raises:
            AttributeError: as :meth:`value`.
        """
        out: dict[int, float] = {}
        for r in self.rounds():
            v = self.in_round(r).value(metric)
            if v is not None:
                out[r] = v
        return out
