"""The fidelity benchmark's split of the TTFT excess from the call and its start spans
(``benchmarks/_fidelity_split.py``). No timing: every input is a constructed stamp."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _fidelity_split import excess_split, ramp_for_span_ms, wave_spans_ms

NS = st.integers(min_value=0, max_value=10**15)


@given(call=NS, wait=NS, wire=NS, engine_ttft=NS, rest=st.integers(-(10**9), 10**12))
def test_parts_add_up_to_the_excess(
    call: int, wait: int, wire: int, engine_ttft: int, rest: int
) -> None:
    """Each part is the stretch it names, and client wait + send → arrival + rest is the
    TTFT excess from the call (client TTFT from the call − engine TTFT)."""
    send, arrival = call + wait, call + wait + wire
    engine_first = arrival + engine_ttft
    first_chunk = engine_first + rest
    got = excess_split(call, send, first_chunk, arrival, engine_first)
    assert got.client_wait is not None
    assert got.client_wait == pytest.approx(wait / 1e6)
    assert got.send_to_arrival == pytest.approx(wire / 1e6)
    assert got.rest == pytest.approx(rest / 1e6)
    excess = (first_chunk - call) - (engine_first - arrival)
    assert got.excess == pytest.approx(excess / 1e6)
    assert got.client_wait + got.send_to_arrival + got.rest == pytest.approx(got.excess, abs=1e-6)


@given(call=NS, wire=NS, engine_ttft=NS, rest=st.integers(-(10**9), 10**12))
def test_no_send_stamp_puts_the_wait_in_send_to_arrival(
    call: int, wire: int, engine_ttft: int, rest: int
) -> None:
    """A reader that stamps no send (the raw loop): no client wait, and send → arrival runs
    from the call, so the parts still add up."""
    arrival = call + wire
    got = excess_split(call, None, arrival + engine_ttft + rest, arrival, arrival + engine_ttft)
    assert got.client_wait is None
    assert got.send_to_arrival == pytest.approx(wire / 1e6)
    assert got.send_to_arrival + got.rest == pytest.approx(got.excess, abs=1e-6)


@given(
    calls=st.lists(st.integers(0, 10**12), min_size=0, max_size=60),
    concurrency=st.integers(1, 20),
)
def test_wave_spans_are_the_first_and_second_c_calls(calls: list[int], concurrency: int) -> None:
    ordered = sorted(calls)
    want = []
    for wave in (ordered[:concurrency], ordered[concurrency : 2 * concurrency]):
        if len(wave) >= 2:
            want.append((max(wave) - min(wave)) / 1e6)
    assert wave_spans_ms(calls, concurrency) == pytest.approx(want)


def test_wave_spans_in_call_order_not_list_order() -> None:
    """Wave 1 is the C earliest calls however the readers appended them."""
    calls = [30_000_000, 0, 10_000_000, 20_000_000]  # ms 30, 0, 10, 20
    assert wave_spans_ms(calls, 2) == [10.0, 10.0]
    assert wave_spans_ms(calls, 4, waves=1) == [30.0]
    with pytest.raises(ValueError, match="concurrency"):
        wave_spans_ms(calls, 0)


@given(span=st.floats(0, 10_000), concurrency=st.integers(2, 1024))
def test_ramp_for_span_starts_the_last_stream_at_the_span(span: float, concurrency: int) -> None:
    """Stream s of C starts at s·R/C (``stream_starts_s``): the last, C − 1, at the span."""
    from deepseekbench._execute._ramp import stream_starts_s

    ramp = ramp_for_span_ms(span, concurrency)
    assert stream_starts_s(concurrency, ramp)[-1] * 1000 == pytest.approx(span, abs=1e-9)


def test_ramp_for_one_stream_is_none() -> None:
    assert ramp_for_span_ms(500.0, 1) == 0.0
    with pytest.raises(ValueError, match="concurrency"):
        ramp_for_span_ms(500.0, 0)
