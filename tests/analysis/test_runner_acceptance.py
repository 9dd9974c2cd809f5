"""How a row's acceptance is aggregated from per-request and server-wide records."""

from __future__ import annotations

import pytest

from deepseekbench import AcceptanceRecord, AcceptanceScope, Dialect, StreamMeasurement
from deepseekbench._analysis._rowstats import acceptance as _acceptance


def llamacpp_measurement(drafted: int, accepted: int) -> StreamMeasurement:
    """A measurement as llama.cpp reports it: counts, no verify steps."""
    record = AcceptanceRecord.from_counts(
        engine=Dialect.llamacpp, source="timings", draft_tokens=drafted, accepted_tokens=accepted
    )
    return StreamMeasurement(
        draft_tokens=drafted,
        accepted_tokens=accepted,
        accepted_token_ratio=record.accepted_token_ratio,
        acceptance_length=record.acceptance_length,
        acceptance=record,
    )


def server(drafted: int, accepted: int, steps: int) -> AcceptanceRecord:
    return AcceptanceRecord.from_counts(
        engine=Dialect.llamacpp,
        source="prometheus:llamacpp:spec_decode_*",
        draft_tokens=drafted,
        accepted_tokens=accepted,
        verify_steps=steps,
        scope=AcceptanceScope.server_wide,
    )


def test_llamacpp_length_comes_from_the_matching_counter_window() -> None:
    ok = [llamacpp_measurement(40, 20), llamacpp_measurement(60, 40)]
    ratio, length, scope, drafted, accepted = _acceptance(ok, server(100, 60, 30))
    assert (ratio, scope, drafted, accepted) == (0.6, AcceptanceScope.per_request, 100, 60)
    assert length == pytest.approx(1 + 60 / 30)


@pytest.mark.parametrize("window", [(101, 60, 30), (100, 59, 30), (100, 60, 0)])
def test_a_window_that_does_not_match_leaves_the_length_unknown(
    window: tuple[int, int, int],
) -> None:
    ok = [llamacpp_measurement(40, 20), llamacpp_measurement(60, 40)]
    _, length, *_ = _acceptance(ok, server(*window))
    assert length is None
    _, length, *_ = _acceptance(ok, None)
    assert length is None
