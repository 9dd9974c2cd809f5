"""Hypothesis strategies built from the public models."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from deepseekbench import (
    KEY_AXES,
    AcceptanceScope,
    Arrival,
    ContextBucket,
    Dispersion,
    Hosting,
    OutputTarget,
    Percentiles,
    QualityParity,
    ReasoningMode,
    Row,
    Speculative,
)

ms = st.floats(min_value=0.0, max_value=1e7, allow_nan=False, allow_infinity=False)
positive_ms = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
names = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12)

percentiles = st.builds(Percentiles, p50=st.none() | ms, p90=st.none() | ms, p99=st.none() | ms)
dispersion = st.builds(
    Dispersion,
    ttft_ms=st.none() | percentiles,
    tpot_ms=st.none() | percentiles,
    e2e_ms=st.none() | percentiles,
    itl_ms=st.none() | percentiles,
    output_toks_per_s=st.none() | percentiles,
)


@st.composite
def rows(draw: st.DrawFn, /, **fixed: Any) -> Row:
    """Any valid Row; keyword arguments pin fields (values or strategies)."""
    n_requests = draw(st.integers(min_value=0, max_value=10_000))
    fields: dict[str, Any] = {
        "model_id": names,
        "provider_route": names,
        "engine_route": names,
        "hosting": st.sampled_from(Hosting),
        "context_bucket": st.sampled_from(ContextBucket),
        "output_target": st.sampled_from(OutputTarget),
        "reasoning_mode": st.sampled_from(ReasoningMode),
        "stream": st.booleans(),
        "speculative": st.sampled_from(Speculative),
        "route_label": st.none() | names,
        "ttft_ms": st.none() | ms,
        "tpot_ms": st.none() | ms,
        "e2e_ms": st.none() | ms,
        "output_toks_per_s": st.none() | ms,
        "accepted_token_ratio": st.none() | st.floats(min_value=0.0, max_value=1.0),
        "acceptance_length": st.none() | st.floats(min_value=1.0, max_value=64.0, allow_nan=False),
        "acceptance_scope": st.none() | st.sampled_from(AcceptanceScope),
        "draft_tokens": st.none() | st.integers(min_value=0, max_value=10**9),
        "accepted_tokens": st.none() | st.integers(min_value=0, max_value=10**9),
        "tokens_estimated": st.booleans(),
        "quality_parity": st.sampled_from(QualityParity),
        "parity_detail": st.none() | st.text(max_size=40),
        "n_requests": st.just(n_requests),
        "n_errors": st.integers(min_value=0, max_value=n_requests),
        "dispersion": dispersion,
        "concurrency": st.none() | st.integers(min_value=1, max_value=4096),
        "request_rate_per_s": st.none() | st.floats(min_value=0.01, max_value=1e4),
        "arrival": st.none() | st.sampled_from(Arrival),
        "output_throughput_toks_per_s": st.none() | ms,
        "request_throughput_per_s": st.none() | ms,
        "goodput_req_per_s": st.none() | ms,
        "slo_attainment": st.none() | st.floats(min_value=0.0, max_value=1.0),
        "rounds": st.none() | st.integers(min_value=1, max_value=100),
        "schedule_lagged": st.booleans(),
    }
    for name, value in fixed.items():
        fields[name] = value if isinstance(value, st.SearchStrategy) else st.just(value)
    return Row(**{name: draw(strategy) for name, strategy in fields.items()})


known_loads: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.fixed_dictionaries(
        {
            "concurrency": st.integers(min_value=1, max_value=4096),
            "request_rate_per_s": st.none(),
            "arrival": st.just(Arrival.closed),
        }
    ),
    st.fixed_dictionaries(
        {
            "concurrency": st.none() | st.integers(min_value=1, max_value=4096),
            "request_rate_per_s": st.floats(min_value=0.01, max_value=1e4),
            "arrival": st.sampled_from([Arrival.poisson, Arrival.gamma]),
        }
    ),
)
"""A load a row states in full: a closed loop with its concurrency, or an open loop
with its rate."""

unknown_loads: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.fixed_dictionaries(
        {
            "concurrency": st.none() | st.integers(min_value=1, max_value=4096),
            "request_rate_per_s": st.none() | st.floats(min_value=0.01, max_value=1e4),
            "arrival": st.none(),
        }
    ),
    st.fixed_dictionaries(
        {
            "concurrency": st.none(),
            "request_rate_per_s": st.none() | st.floats(min_value=0.01, max_value=1e4),
            "arrival": st.just(Arrival.closed),
        }
    ),
    st.fixed_dictionaries(
        {
            "concurrency": st.none() | st.integers(min_value=1, max_value=4096),
            "request_rate_per_s": st.none(),
            "arrival": st.sampled_from([Arrival.poisson, Arrival.gamma]),
        }
    ),
)
"""A load a row leaves unknown (schema-1 rows, rows built without their load)."""


def _creditable_row(
    speculative: Speculative | st.SearchStrategy[Speculative],
) -> st.SearchStrategy[Row]:
    """Rows that meet a speedup's conditions on their own: parity verified, positive
    figures, enough requests, no errors, counted tokens."""
    return rows(
        speculative=speculative,
        quality_parity=QualityParity.verified,
        ttft_ms=positive_ms,
        tpot_ms=positive_ms,
        e2e_ms=positive_ms,
        output_toks_per_s=positive_ms,
        output_throughput_toks_per_s=positive_ms,
        goodput_req_per_s=positive_ms,
        n_requests=st.integers(min_value=5, max_value=10_000),
        n_errors=st.just(0),
        tokens_estimated=False,
    )


@st.composite
def creditable_pairs(draw: st.DrawFn) -> tuple[Row, Row]:
    """An (off, speculative) pair that satisfies every condition for a speedup."""
    base = draw(_creditable_row(Speculative.off))
    cand = draw(
        _creditable_row(st.sampled_from([s for s in Speculative if s is not Speculative.off]))
    )
    base = base.model_copy(update=draw(known_loads))
    same_keys = {axis: getattr(base, axis) for axis in KEY_AXES if axis != "speculative"}
    return base, cand.model_copy(update=same_keys)
