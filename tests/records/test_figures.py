"""The derived figures (output tokens, TPOT, output speed, acceptance over requests)
are defined once and every stage that reports them agrees."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import AcceptanceRecord, Dialect, StreamMeasurement
from deepseekbench._analysis._breakdown import is_short, output_tokens_of, slice_stats
from deepseekbench._analysis._rowstats import RowRequests, acceptance
from deepseekbench._execute._workers import charged_tokens
from deepseekbench._records._figures import (
    counted_output_tokens,
    output_tokens,
    output_toks_per_s,
    tpot_ms,
)
from deepseekbench._store._results import MeasureInfo

counts = st.none() | st.integers(min_value=0, max_value=10_000)


@given(completion=counts, estimated=counts)
def test_every_stage_counts_the_same_output_tokens(
    completion: int | None, estimated: int | None
) -> None:
    m = StreamMeasurement(completion_tokens=completion, estimated_completion_tokens=estimated)
    n = output_tokens(m)
    expected = completion if completion is not None else estimated
    assert n == expected
    # The budget charge and the window sums count an unknown output as 0 tokens;
    # the per-request figures keep it unknown.
    assert charged_tokens(m) == counted_output_tokens(m) == (0 if n is None else n)
    assert output_tokens_of(m) == n
    assert is_short(m, 1) is (n is None or n < 1)


def test_the_old_disagreement_is_gone_a_measurement_with_no_count() -> None:
    """Before: ``output_tokens_of`` said None, the budget and the row throughput 0, by
    three separate copies; now one definition says None and the sums count 0."""
    m = StreamMeasurement(completion_tokens=None, estimated_completion_tokens=None)
    assert output_tokens(m) is None
    assert output_tokens_of(m) is None
    assert charged_tokens(m) == 0
    assert counted_output_tokens(m) == 0


def test_usage_count_wins_over_the_estimate() -> None:
    m = StreamMeasurement(completion_tokens=7, estimated_completion_tokens=3)
    assert output_tokens(m) == 7 == charged_tokens(m)


def test_row_throughput_sums_the_same_counts() -> None:
    ms = [
        StreamMeasurement(
            completion_tokens=c, estimated_completion_tokens=e, e2e_ms=1000.0, start_perf_ns=0
        )
        for c, e in [(10, None), (None, 4), (None, None)]
    ]
    info = MeasureInfo(round=0, queue_ms=None, run_id="r")
    rr = RowRequests(tuple((m, info) for m in ms), {})
    # a 1 s window: 10 + 4 + 0 tokens
    assert rr.output_throughput() == pytest.approx(14.0)


@given(
    ttft=st.none() | st.floats(0, 1e5),
    e2e=st.none() | st.floats(0, 1e5),
    n=st.none() | st.integers(0, 10_000),
)
def test_tpot_definition(ttft: float | None, e2e: float | None, n: int | None) -> None:
    got = tpot_ms(ttft, e2e, n)
    if ttft is None or e2e is None or n is None or n < 2:
        assert got is None
    else:
        assert got == pytest.approx((e2e - ttft) / (n - 1))


def test_tpot_and_speed_values() -> None:
    assert tpot_ms(10.0, 110.0, 11) == pytest.approx(10.0)
    assert tpot_ms(10.0, 110.0, 1) is None
    assert output_toks_per_s(500.0, 50) == pytest.approx(100.0)
    assert output_toks_per_s(0.0, 50) is None
    assert output_toks_per_s(500.0, 0) is None
    assert output_toks_per_s(None, 5) is None


def _acc(drafted: int, accepted: int, steps: int | None) -> AcceptanceRecord:
    counts: dict[str, Any] = {
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "verify_steps": steps,
    }
    return AcceptanceRecord.from_counts(engine=Dialect.vllm, source="test", **counts)


def _with_acc(drafted: int, accepted: int, steps: int | None) -> StreamMeasurement:
    a = _acc(drafted, accepted, steps)
    return StreamMeasurement(
        draft_tokens=drafted,
        accepted_tokens=accepted,
        acceptance=a,
        acceptance_length=a.acceptance_length,
        accepted_token_ratio=a.accepted_token_ratio,
    )


@given(
    st.lists(
        st.tuples(st.integers(1, 50), st.integers(0, 50), st.none() | st.integers(1, 20)),
        min_size=1,
        max_size=6,
    )
)
def test_a_slice_and_a_row_agree_on_acceptance(reqs: list[tuple[int, int, int | None]]) -> None:
    ms = [_with_acc(d, min(a, d), s) for d, a, s in reqs]
    ratio, length, _, drafted, accepted = acceptance(ms, None)
    s = slice_stats("all", ms, max_tokens=8)
    assert (s.accepted_token_ratio, s.acceptance_length) == (ratio, length)
    assert (s.draft_tokens, s.accepted_tokens) == (drafted, accepted)
    assert drafted == sum(d for d, _, _ in reqs)


def test_a_slice_without_counts_uses_the_per_request_figures_like_a_row() -> None:
    """Before: a slice whose requests carried only acceptance_length / ratio (no
    counts) reported None while its row reported their medians."""
    ms = [
        StreamMeasurement(acceptance_length=2.0, accepted_token_ratio=0.5),
        StreamMeasurement(acceptance_length=3.0, accepted_token_ratio=0.7),
    ]
    ratio, length, _, _, _ = acceptance(ms, None)
    s = slice_stats("all", ms, max_tokens=8)
    assert (ratio, length) == pytest.approx((0.6, 2.5))
    assert (s.accepted_token_ratio, s.acceptance_length) == pytest.approx((0.6, 2.5))


def test_a_slice_ignores_the_server_wide_fallback_the_row_uses() -> None:
    ms = [StreamMeasurement(), StreamMeasurement()]
    server = _acc(10, 5, 4)
    assert acceptance(ms, server)[:2] == (server.accepted_token_ratio, server.acceptance_length)
    s = slice_stats("all", ms, max_tokens=8)
    assert s.accepted_token_ratio is None and s.acceptance_length is None
