"""Each engine's output rate is held against usage over the span that engine divides it
by: vLLM 0.32's ``metrics.tokens_per_second`` over TTFT + generation time (shared case
``sse/21``: 128 / (871.34 + 80.69) ms = 134.45 tokens/s), llama.cpp's
``timings.predicted_per_second`` over the generation time alone (tools/server/server.cpp).
Multiplying vLLM's rate by the generation time alone flagged every vLLM request
``server_clock_count_mismatch``, refusing every server-clock verdict on vLLM.

The property states each engine's rate on its own (as the engine computes it, not via
the library) and checks the witness accepts it under the dialect's stated span, and that
the other engine's span would flag it (the check has the power to tell them apart)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deepseekbench import Dialect, ServerClockFault, ServerRateSpan, StreamMeasurement
from deepseekbench._analysis._clock_witness import (
    count_check_skipped,
    rate_span_ms,
    request_faults,
)
from deepseekbench._dialects import SERVER_TIME_FIELDS, EngineDialect, all_dialects
from deepseekbench._dialects.auto import DIALECT as AUTO
from deepseekbench._dialects.llamacpp import DIALECT as LLAMACPP
from deepseekbench._dialects.vllm import DIALECT as VLLM
from deepseekbench._engine._dialects import RequestStats, tail_extras

MISMATCH = ServerClockFault.server_clock_count_mismatch
COUNT_SLACK = (1, 0.02)  # 1 token + 2 %, as docs/measurement.md states it


def vllm_chunk(n: int, ttft_ms: float, gen_ms: float) -> dict[str, Any]:
    """vLLM 0.32's final-chunk ``metrics`` (its rate over TTFT + generation)."""
    return {
        "metrics": {
            "time_to_first_token_ms": ttft_ms,
            "generation_time_ms": gen_ms,
            "queue_time_ms": 0.03,
            "mean_itl_ms": gen_ms / (n - 1) if n > 1 else 0.0,
            "tokens_per_second": 1000.0 * n / (ttft_ms + gen_ms),
        }
    }


def llamacpp_chunk(n: int, ttft_ms: float, gen_ms: float) -> dict[str, Any]:
    """llama-server's ``timings`` (its rate over the generation time, 3 decimals)."""
    return {
        "timings": {
            "prompt_n": 7,
            "prompt_ms": round(ttft_ms, 3),
            "predicted_n": n,
            "predicted_ms": round(gen_ms, 3),
            "predicted_per_token_ms": round(gen_ms / n, 3),
            "predicted_per_second": round(1000.0 * n / gen_ms, 3),
        }
    }


ENGINES = {"vllm": (VLLM, vllm_chunk), "llamacpp": (LLAMACPP, llamacpp_chunk)}


def measured(
    dialect: EngineDialect, chunk: Mapping[str, Any], n: int, **kw: Any
) -> StreamMeasurement:
    """The measurement the accumulator makes of ``chunk``'s server times under ``dialect``
    (``kw`` overrides the span)."""
    times = dialect.server_times(chunk)
    assert times is not None
    fields: dict[str, Any] = {k: times.get(k) for k in SERVER_TIME_FIELDS}
    span = kw.get("span", dialect.server_rate_span)
    return StreamMeasurement(
        completion_tokens=n, tokens_estimated=False, server_rate_span=span, **fields
    )


@settings(max_examples=400, deadline=None)
@given(
    engine=st.sampled_from(sorted(ENGINES)),
    n=st.integers(2, 4096),
    ttft_ms=st.floats(0.5, 100_000.0),
    gen_ms=st.floats(1.0, 1_000_000.0),
)
@example(engine="vllm", n=128, ttft_ms=871.3391820001561, gen_ms=80.69040899999891)  # sse/21
@example(engine="llamacpp", n=10, ttft_ms=3.1, gen_ms=41.0)  # sse/16
def test_a_consistent_rate_passes_under_its_engines_span(
    engine: str, n: int, ttft_ms: float, gen_ms: float
) -> None:
    dialect, chunk_of = ENGINES[engine]
    m = measured(dialect, chunk_of(n, ttft_ms, gen_ms), n)
    assert count_check_skipped(m) is None
    assert MISMATCH not in request_faults(m), m
    # the other engine's span: flagged whenever TTFT alone is beyond the count slack
    other = next(d for name, (d, _) in ENGINES.items() if name != engine)
    wrong = measured(dialect, chunk_of(n, ttft_ms, gen_ms), n, span=other.server_rate_span)
    share = ttft_ms / gen_ms if engine == "llamacpp" else ttft_ms / (ttft_ms + gen_ms)
    if share * n > 1.5 * (COUNT_SLACK[0] + COUNT_SLACK[1] * n):
        assert MISMATCH in request_faults(wrong), wrong


@settings(max_examples=200, deadline=None)
@given(
    engine=st.sampled_from(sorted(ENGINES)),
    n=st.integers(200, 4096),
    ttft_ms=st.floats(0.5, 10_000.0),
    gen_ms=st.floats(1.0, 100_000.0),
    off=st.sampled_from([0.9, 0.85, 1.1, 1.2]),
)
def test_a_rate_ten_percent_off_is_flagged_per_engine(
    engine: str, n: int, ttft_ms: float, gen_ms: float, off: float
) -> None:
    dialect, chunk_of = ENGINES[engine]
    m = measured(dialect, chunk_of(n, ttft_ms, gen_ms), n)
    altered = m.model_copy(update={"server_toks_per_s": (m.server_toks_per_s or 0.0) * off})
    assert MISMATCH in request_faults(altered)


def test_the_spans_each_dialect_states() -> None:
    assert VLLM.server_rate_span is ServerRateSpan.ttft_and_generation
    assert LLAMACPP.server_rate_span is ServerRateSpan.generation
    assert AUTO.server_rate_span is VLLM.server_rate_span  # auto reads vLLM's times
    for d in all_dialects():
        assert d.server_rate_source, d  # the source, or why there is none
        if d.server_times({"metrics": {}, "timings": {"predicted_per_token_ms": 1.0}}) is None:
            assert d.server_rate_span is None, d  # no server times: no rate to span


def test_an_unstated_span_skips_the_count_check_and_says_why() -> None:
    m = measured(VLLM, vllm_chunk(128, 871.34, 80.69), 128, span=None)
    m = m.model_copy(update={"server_toks_per_s": 1.0})  # any rate: it is not checked
    assert MISMATCH not in request_faults(m)
    assert count_check_skipped(m) == "the dialect states no span for the engine's output rate"
    no_ttft = measured(VLLM, vllm_chunk(128, 871.34, 80.69), 128)
    no_ttft = no_ttft.model_copy(update={"server_ttft_ms": None})
    assert rate_span_ms(no_ttft) is None and MISMATCH not in request_faults(no_ttft)
    assert "ttft_and_generation" in (count_check_skipped(no_ttft) or "")
    estimated = no_ttft.model_copy(update={"tokens_estimated": True})
    assert "usage count" in (count_check_skipped(estimated) or "")


def test_the_shared_vllm_figures_are_one_consistent_count() -> None:
    m = measured(VLLM, vllm_chunk(128, 871.3391820001561, 80.69040899999891), 128)
    m = m.model_copy(update={"server_toks_per_s": 134.44960241785083})  # as the case says
    assert rate_span_ms(m) == pytest.approx(952.03, abs=0.01)
    assert request_faults(m) == frozenset()
    # the generation time alone (the old rule for every engine) counts 10.8 tokens of 128
    old = m.model_copy(update={"server_rate_span": ServerRateSpan.generation})
    assert request_faults(old) == {MISMATCH}


@settings(max_examples=200, deadline=None)
@given(
    dialect=st.sampled_from([Dialect.vllm, Dialect.llamacpp]),
    n=st.integers(2, 2048),
    prompt_ms=st.floats(0.5, 10_000.0),
    predicted_ms=st.floats(1.0, 100_000.0),
)
def test_the_embedded_engine_reports_each_engines_rate_as_that_engine(
    dialect: Dialect, n: int, prompt_ms: float, predicted_ms: float
) -> None:
    # the embedded engine mirrors each engine's wire: its rate must pass the same check
    stats = RequestStats(
        prompt_tokens=7, depth=1, completion_tokens=n, prompt_ms=prompt_ms,
        predicted_ms=predicted_ms,
    )  # fmt: skip
    adapter = VLLM if dialect is Dialect.vllm else LLAMACPP
    m = measured(adapter, tail_extras(dialect, stats), n)
    assert count_check_skipped(m) is None and MISMATCH not in request_faults(m), m
