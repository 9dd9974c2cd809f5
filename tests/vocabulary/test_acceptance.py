"""Acceptance adapters, the engine-neutral record, and the Prometheus fallback."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from deepseekbench import (
    AcceptanceRecord,
    AcceptanceScope,
    Dialect,
    EngineRoute,
    LiveGate,
    LiveGateError,
    acceptance_from_llamacpp,
    acceptance_from_sglang,
    acceptance_from_vllm,
    metrics_delta,
    parse_metrics,
    read_acceptance,
    scrape_metrics,
)
from tests._replay import RecordedRequest, Script, Write, replay_server

# Wire values of any JSON-ish kind, including the ones that must read as unknown.
_wire = (
    st.none()
    | st.booleans()
    | st.integers(-5, 10_000)
    | st.floats(allow_nan=True)
    | st.text(max_size=3)
)


@given(drafted=_wire, accepted=_wire, steps=_wire, ratio=_wire, length=_wire)
@example(drafted=0, accepted=0, steps=0, ratio=0.0, length=0)
@example(drafted=4, accepted=9, steps=2, ratio=None, length=None)
def test_record_ratio_in_range_and_unknown_stays_none(
    drafted: Any, accepted: Any, steps: Any, ratio: Any, length: Any
) -> None:
    r = AcceptanceRecord.from_counts(
        engine=Dialect.vllm,
        source="t",
        draft_tokens=drafted,
        accepted_tokens=accepted,
        verify_steps=steps,
        reported_ratio=ratio,
        reported_length=length,
    )
    if r.accepted_token_ratio is not None:
        assert 0.0 <= r.accepted_token_ratio <= 1.0
    if r.acceptance_length is not None:
        assert r.acceptance_length >= 1.0
    # a count that was not a non-negative integer is unknown, never 0
    for raw, got in (
        (drafted, r.draft_tokens),
        (accepted, r.accepted_tokens),
        (steps, r.verify_steps),
    ):
        if not (isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0) and not (
            isinstance(raw, float) and raw >= 0 and raw.is_integer()
        ):
            assert got is None
    if r.draft_tokens == 0:
        assert r.accepted_token_ratio is None  # nothing drafted: no ratio
    if r.verify_steps == 0:
        assert r.acceptance_length is None


@given(
    accepted=st.integers(0, 10_000),
    extra=st.integers(0, 10_000),
    steps=st.integers(1, 10_000),
)
def test_counts_define_both_figures(accepted: int, extra: int, steps: int) -> None:
    r = AcceptanceRecord.from_counts(
        engine=Dialect.sglang,
        source="t",
        draft_tokens=accepted + extra,
        accepted_tokens=accepted,
        verify_steps=steps,
        reported_ratio=0.123,  # counts win over reported figures
        reported_length=9.9,
    )
    if accepted + extra:
        assert r.accepted_token_ratio == pytest.approx(accepted / (accepted + extra))
    assert r.acceptance_length == pytest.approx(1 + accepted / steps)


@given(
    accepted=st.integers(0, 1000),
    rejected=st.integers(0, 1000),
    dialect=st.sampled_from(list(Dialect)),
)
def test_prediction_counts_never_become_acceptance(
    accepted: int, rejected: int, dialect: Dialect
) -> None:
    chunk = {
        "choices": [],
        "usage": {
            "completion_tokens": 5,
            "completion_tokens_details": {
                "accepted_prediction_tokens": accepted,
                "rejected_prediction_tokens": rejected,
            },
        },
    }
    assert read_acceptance(chunk, dialect) is None


def test_vllm_metrics_and_older_per_choice_shape() -> None:
    stats = {
        "num_draft_tokens": 8,
        "num_accepted_draft_tokens": 6,
        "num_spec_steps": 4,
        "mean_acceptance_length": 2.5,
        "draft_acceptance_rate": 0.75,
    }
    new = acceptance_from_vllm({"choices": [], "metrics": {"speculative_decoding": stats}})
    old = acceptance_from_vllm({"choices": [{"index": 0, "speculative_decoding_stats": stats}]})
    for r in (new, old):
        assert r is not None
        assert (r.draft_tokens, r.accepted_tokens, r.verify_steps) == (8, 6, 4)
        assert r.accepted_token_ratio == 0.75 and r.acceptance_length == 2.5
        assert r.scope is AcceptanceScope.per_request
    only_reported = acceptance_from_vllm(
        {
            "metrics": {
                "speculative_decoding": {
                    "mean_acceptance_length": 2.0,
                    "draft_acceptance_rate": 0.5,
                }
            }
        }
    )
    assert only_reported is not None and only_reported.draft_tokens is None
    assert (only_reported.accepted_token_ratio, only_reported.acceptance_length) == (0.5, 2.0)
    assert acceptance_from_vllm({"choices": [{"index": 0, "delta": {}}]}) is None


@pytest.mark.parametrize(
    ("meta", "where"),
    [
        (
            {"spec_verify_ct": 4, "spec_num_correct_drafts": 6, "spec_num_proposed_drafts": 8},
            "choice",
        ),
        ({"spec_verify_ct": 4, "spec_accepted_drafts": 6, "spec_proposed_drafts": 8}, "top"),
        ({"spec_verify_ct": 4, "spec_accept_token_num": 6, "spec_draft_token_num": 8}, "choice"),
    ],
)
def test_sglang_aliases_choice_or_top(meta: dict[str, Any], where: str) -> None:
    chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {}}]}
    if where == "choice":
        chunk["choices"][0]["meta_info"] = meta
    else:
        chunk["meta_info"] = meta
    r = acceptance_from_sglang(chunk)
    assert r is not None and r.engine is Dialect.sglang
    assert (r.draft_tokens, r.accepted_tokens, r.accepted_token_ratio, r.acceptance_length) == (
        8,
        6,
        0.75,
        2.5,
    )


def test_sglang_zero_verify_means_no_speculation() -> None:
    meta = {"spec_verify_ct": 0, "spec_accept_rate": 0.0, "spec_accept_length": 0}
    assert acceptance_from_sglang({"meta_info": meta}) is None
    assert acceptance_from_sglang({"meta_info": {"completion_tokens": 3}}) is None
    rate_only = acceptance_from_sglang(
        {"meta_info": {"spec_accept_rate": 0.6, "spec_accept_length": 2.2}}
    )
    assert rate_only is not None and rate_only.accepted_token_ratio == 0.6
    assert rate_only.acceptance_length == 2.2 and rate_only.draft_tokens is None


def test_llamacpp_timings() -> None:
    r = acceptance_from_llamacpp(
        {"timings": {"predicted_n": 10, "draft_n": 8, "draft_n_accepted": 6}}
    )
    assert r is not None and r.accepted_token_ratio == 0.75 and r.acceptance_length is None
    assert acceptance_from_llamacpp({"timings": {"predicted_n": 10}}) is None


def test_dialect_limits_adapters() -> None:
    chunk = {"timings": {"draft_n": 8, "draft_n_accepted": 6}}
    assert read_acceptance(chunk, Dialect.llamacpp) is not None
    assert read_acceptance(chunk, Dialect.auto) is not None
    assert read_acceptance(chunk, Dialect.vllm) is None
    assert read_acceptance(chunk, Dialect.openai) is None


_BEFORE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 7.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.7e9
"""
_AFTER = """\
vllm:spec_decode_num_drafts{engine="0",model_name="m"} 110.0
vllm:spec_decode_num_drafts{engine="0",model_name="other"} 99.0
vllm:spec_decode_num_draft_tokens{engine="0",model_name="m"} 330.0
vllm:spec_decode_num_accepted_tokens{engine="0",model_name="m"} 174.0
"""


def test_vllm_counter_delta_with_and_without_total() -> None:
    r = metrics_delta(parse_metrics(_BEFORE, model_name="m"), parse_metrics(_AFTER, model_name="m"))
    assert r is not None and r.scope is AcceptanceScope.server_wide
    assert (r.verify_steps, r.draft_tokens, r.accepted_tokens) == (10, 30, 24)
    assert r.accepted_token_ratio == pytest.approx(0.8)
    assert r.acceptance_length == pytest.approx(3.4)


def test_counter_reset_is_unknown_and_garbage_is_none() -> None:
    r = metrics_delta(parse_metrics(_AFTER, model_name="m"), parse_metrics(_BEFORE, model_name="m"))
    assert r is None
    bad = parse_metrics("garbage {{{ x\n")
    assert bad.error is not None
    assert metrics_delta(bad, parse_metrics(_AFTER)) is None


def test_sglang_gauges_after_value() -> None:
    text = (
        '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="m"} 2.75\n'
    )
    text += 'sglang:spec_accept_rate{model_name="m"} 0.58\n'
    r = metrics_delta(parse_metrics(""), parse_metrics(text))
    assert r is not None and r.engine is Dialect.sglang and r.scope is AcceptanceScope.server_wide
    assert (r.acceptance_length, r.accepted_token_ratio) == (2.75, 0.58)
    assert r.draft_tokens is None


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_scrape_through_gate_before_after() -> None:
    bodies = iter([_BEFORE, _AFTER])

    def serve(request: RecordedRequest) -> Script:
        assert request.method == "GET" and request.path == "/metrics"
        return Script(
            headers={"content-type": "text/plain; version=0.0.4"},
            writes=(Write(0, next(bodies).encode()),),
        )

    gate = LiveGate()
    async with replay_server(serve) as server:
        route = EngineRoute(base_url=server.base_url, model="m")
        before = await scrape_metrics(route, gate=gate)
        async with gate.client() as client:
            after = await scrape_metrics(route, gate=gate, client=client)
        with pytest.raises(LiveGateError):
            await scrape_metrics(route, gate=LiveGate(max_requests=0))
        assert server.connections == 2
    r = metrics_delta(before, after)
    assert r is not None and r.accepted_tokens == 24 and gate.requests_admitted == 2
