"""The engine's figures are witnesses, checked against the client's own clock before a
``clock = "server"`` verdict uses them: an engine reporting an inter-token latency of
1e-9 ms for a stream the client read slower printed ``20000000000.00× by tpot_ms
(server clock)``. A differential property: per request, an independent statement of
the documented rule (docs/measurement.md, "The engine's clock") against the verdict
built from rows of those requests."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from deepseekbench import (
    Percentiles,
    RefusalReason,
    Row,
    ServerClockFault,
    ServerRateSpan,
    StreamMeasurement,
    compare_speedup,
)
from deepseekbench._analysis._clock_witness import request_faults, server_clock_fields
from tests._helpers import make_row

TOLERANCE, SLACK_MS = 0.25, 50.0  # as docs/measurement.md states them
COUNT_SLACK = (1, 0.02)
N_REQUESTS = 5


@dataclass(frozen=True)
class Request:
    """One request's client clock (ms) and what its engine said about it."""

    n: int  # usage completion_tokens
    ttft_ms: float
    tpot_ms: float  # client: (last - first token) / (n - 1)
    stall_ms: float  # the client's own longest stall
    server_ttft_ms: float
    server_itl_ms: float
    server_count: float  # the engine's own count: rate x generation time

    def measurement(self) -> StreamMeasurement:
        gen = self.server_itl_ms * (self.n - 1)
        rate = 1000.0 * self.server_count / gen if gen > 0 else None  # llama.cpp's span
        return StreamMeasurement(
            completion_tokens=self.n, tokens_estimated=False, ttft_ms=self.ttft_ms,
            tpot_ms=self.tpot_ms, e2e_ms=self.ttft_ms + self.tpot_ms * (self.n - 1),
            client_stall_ms=self.stall_ms, server_ttft_ms=self.server_ttft_ms,
            server_mean_itl_ms=self.server_itl_ms, server_generation_ms=gen,
            server_toks_per_s=rate, server_rate_span=ServerRateSpan.generation,
        )  # fmt: skip


def expected(r: Request) -> set[str]:
    """The documented rule, stated on its own: which faults ``r``'s engine figures have."""
    out: set[str] = set()
    if r.server_itl_ms <= 0 or r.server_ttft_ms <= 0:
        out.add("server_clock_not_positive")
    slack = SLACK_MS + r.stall_ms
    window, decode = r.tpot_ms * (r.n - 1), r.server_itl_ms * (r.n - 1)
    if decode * (1 + TOLERANCE) + slack < window:  # engine decoded faster than it streamed
        out.add("server_clock_contradicts_client")
    if r.ttft_ms * (1 + TOLERANCE) + slack < r.server_ttft_ms:  # client TTFT includes it
        out.add("server_clock_contradicts_client")
    if r.server_itl_ms > 0 and abs(r.server_count - r.n) > COUNT_SLACK[0] + COUNT_SLACK[1] * r.n:
        out.add("server_clock_count_mismatch")
    return out


def _far_from_edges(r: Request) -> bool:
    """Float rounding decides nothing: each comparison of the rule is clear by 1e-6."""
    slack = SLACK_MS + r.stall_ms
    window, decode = r.tpot_ms * (r.n - 1), r.server_itl_ms * (r.n - 1)
    gaps = [
        decode * (1 + TOLERANCE) + slack - window,
        r.ttft_ms * (1 + TOLERANCE) + slack - r.server_ttft_ms,
        abs(r.server_count - r.n) - COUNT_SLACK[0] - COUNT_SLACK[1] * r.n,
    ]
    return all(abs(g) > 1e-6 for g in gaps)


@st.composite
def requests(draw: st.DrawFn, n: int) -> Request:
    ttft = draw(st.floats(1.0, 500.0))
    tpot = draw(st.floats(0.1, 100.0))
    # the engine's per-token figure as a share of the client's: 0, absurdly small,
    # plausibly smaller (buffering), equal, or larger (a late first chunk)
    share = draw(
        st.one_of(st.just(0.0), st.floats(1e-12, 1e-3), st.floats(0.3, 0.9), st.floats(0.7, 2.0))
    )
    count_off = draw(st.one_of(st.just(0), st.integers(-3, 3), st.integers(-n, 4 * n)))
    return Request(
        n=n,
        ttft_ms=ttft,
        tpot_ms=tpot,
        stall_ms=draw(st.one_of(st.just(0.0), st.floats(0.0, 200.0))),
        server_ttft_ms=ttft * draw(st.one_of(st.just(0.0), st.floats(0.01, 3.0))),
        server_itl_ms=tpot * share,
        server_count=float(max(n + count_off, 1)),
    )


def row_of(reqs: list[Request], **kw: object) -> Row:
    """A row as the analysis makes it: the client's medians, the engine's medians, the
    client's longest stall, and the faults its requests showed."""
    ms = [r.measurement() for r in reqs]
    return make_row(
        n_requests=len(reqs),
        ttft_ms=statistics.median(r.ttft_ms for r in reqs),
        tpot_ms=statistics.median(r.tpot_ms for r in reqs),
        e2e_ms=statistics.median(m.e2e_ms or 0.0 for m in ms),
        output_tokens=Percentiles(p50=statistics.median(r.n for r in reqs)),
        client_stall_ms=max(r.stall_ms for r in reqs),
        server_ttft_ms=statistics.median(r.server_ttft_ms for r in reqs),
        **server_clock_fields(ms),
        **kw,
    )


def _issue_case(n: int) -> list[Request]:
    """The report: the engine says 1e-9 ms per token; the client read 12 ms per token."""
    return [Request(n, 20.0, 12.0, 0.0, 15.0, 1e-9, float(n))] * N_REQUESTS


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    n_base=st.integers(2, 600),
    n_cand=st.integers(2, 600),
    metric=st.sampled_from(["tpot_ms", "ttft_ms"]),
)
@example(data=None, n_base=256, n_cand=256, metric="tpot_ms")
def test_implausible_engine_figures_are_refused_and_plausible_ones_used(
    data: st.DataObject | None, n_base: int, n_cand: int, metric: str
) -> None:
    if data is None:  # the pinned report: a plausible baseline, the 1e-9 ms candidate
        base = [Request(n_base, 20.0, 10.0, 0.0, 15.0, 9.0, float(n_base))] * N_REQUESTS
        cand = _issue_case(n_cand)
    else:
        base = [data.draw(requests(n_base)) for _ in range(N_REQUESTS)]
        cand = [data.draw(requests(n_cand)) for _ in range(N_REQUESTS)]
    assume(all(_far_from_edges(r) for r in base + cand))
    for r in base + cand:  # each request's faults, as the rule states them
        assert {f.value for f in request_faults(r.measurement())} == expected(r), r
    b = row_of(base)
    c = row_of(cand, speculative="mtp", route_label="mtp")
    verdict = compare_speedup(b, c, clock="server", metric=metric)
    faults = set().union(*(expected(r) for r in base + cand))
    server = {r.value for r in verdict.reasons if r.value.startswith("server_clock_")}
    if faults:
        assert not verdict and verdict.speedup is None
        assert "×" not in str(verdict) and faults <= server, (faults, str(verdict))
    else:  # plausible figures are still used: the verdict is on the engine's clock
        assert not server, str(verdict)
        assert verdict.reasons in ((), (RefusalReason.no_significant_difference,))
        if verdict.printed:
            assert str(verdict).endswith("(server clock)") or "(server clock)" in str(verdict)


def test_the_reported_case_prints_no_ratio() -> None:
    base = [Request(256, 20.0, 10.0, 0.0, 15.0, 9.0, 256.0)] * N_REQUESTS
    b, c = row_of(base), row_of(_issue_case(256), speculative="mtp", route_label="mtp")
    verdict = compare_speedup(b, c, clock="server")
    assert str(verdict) == "refused: server_clock_contradicts_client"
    # the same rows without the per-request record: the row's own medians refuse it
    bare = c.model_copy(update={"server_clock_faults": ()})
    assert compare_speedup(b, bare, clock="server").reasons == (
        RefusalReason.server_clock_contradicts_client,
    )


def test_each_fault_is_named_per_request() -> None:
    ok = Request(100, 20.0, 10.0, 0.0, 15.0, 9.0, 100.0)
    F = ServerClockFault
    assert request_faults(ok.measurement()) == frozenset()
    zero = Request(100, 20.0, 10.0, 0.0, 15.0, 0.0, 100.0).measurement()
    assert request_faults(zero) == {F.server_clock_not_positive, F.server_clock_contradicts_client}
    fast = Request(100, 20.0, 10.0, 0.0, 15.0, 7.0, 100.0).measurement()
    assert request_faults(fast) == {F.server_clock_contradicts_client}  # 693 ms vs 990 ms
    stalled = Request(100, 20.0, 10.0, 300.0, 15.0, 7.0, 100.0).measurement()
    assert request_faults(stalled) == frozenset()  # the client's own stall explains it
    late = Request(100, 20.0, 10.0, 0.0, 90.0, 9.0, 100.0).measurement()
    assert request_faults(late) == {F.server_clock_contradicts_client}  # TTFT 90 > 20 ms
    counted = Request(100, 20.0, 10.0, 0.0, 15.0, 9.0, 140.0).measurement()
    assert request_faults(counted) == {F.server_clock_count_mismatch}
    failed = zero.model_copy(update={"error": {"kind": "http_status", "message": "503"}})
    assert request_faults(failed) == frozenset()
