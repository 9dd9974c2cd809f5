"""Unit tests of the axes, Row, compare_speedup and LiveGate."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path

import anyio
import httpx
import pytest
from pydantic import SecretStr, ValidationError

import deepseekbench as d
from deepseekbench import (
    REQUIRED_FIELDS,
    ContextBucket,
    LiveGate,
    LiveGateError,
    OutputTarget,
    RefusalReason,
    Row,
    RowFormatError,
    SpeedupMetric,
    compare_speedup,
)
from tests._fakes import Spy

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-live-do-not-print-0123"


def make_row(**kw: object) -> Row:
    base: dict[str, object] = dict(
        model_id="m",
        provider_route="local",
        engine_route="embedded",
        hosting="embedded",
        context_bucket="1k",
        output_target="256",
        reasoning_mode="non_think",
        stream=True,
        speculative="off",
        ttft_ms=10.0,
        tpot_ms=20.0,
        e2e_ms=200.0,
        output_toks_per_s=50.0,
        quality_parity="verified",
        n_requests=8,
        concurrency=1,
        arrival="closed",
    )
    base.update(kw)
    return Row.model_validate(base)


# --- axes -------------------------------------------------------------------------
def test_bounds_in_tokens() -> None:
    assert [b.max_prompt_tokens for b in ContextBucket] == [
        1_024,
        8_192,
        32_768,
        131_072,
        1_048_576,
    ]
    assert [t.max_output_tokens for t in OutputTarget] == [256, 1_024, 8_192, 32_768]


@pytest.mark.parametrize(
    "enum",
    [
        d.ContextBucket,
        d.OutputTarget,
        d.ReasoningMode,
        d.Speculative,
        d.QualityParity,
        d.Hosting,
        d.Dialect,
    ],
)
def test_unknown_axis_value_lists_allowed(enum: type[StrEnum]) -> None:
    with pytest.raises(ValueError) as info:
        enum("nope")
    for member in enum:
        assert repr(member.value) in str(info.value)


def test_row_rejects_unknown_axis_value_with_allowed_list() -> None:
    with pytest.raises(ValidationError) as info:
        make_row(speculative="medusa")
    assert "eagle3" in str(info.value)


# --- Row --------------------------------------------------------------------------
def test_row_is_frozen_and_forbids_extra() -> None:
    row = make_row()
    with pytest.raises(ValidationError):
        row.ttft_ms = 1.0
    with pytest.raises(ValidationError):
        make_row(speedup=2.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"accepted_token_ratio": 1.5},
        {"accepted_token_ratio": -0.1},
        {"acceptance_length": 0.5},
        {"ttft_ms": -1.0},
        {"tpot_ms": float("nan")},
        {"e2e_ms": float("inf")},
        {"n_requests": 2, "n_errors": 3},
    ],
)
def test_row_rejects_impossible_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        make_row(**bad)


def test_incomplete_row_can_be_recorded_and_says_so() -> None:
    row = make_row(tpot_ms=None, n_requests=0)
    assert not row.is_complete
    assert row.missing_fields() == ("tpot_ms", "n_requests")
    assert "incomplete" in repr(row)
    assert make_row().is_complete and "incomplete" not in repr(make_row())
    assert set(REQUIRED_FIELDS) <= set(Row.model_fields)


def test_every_field_documents_itself() -> None:
    for name, field in Row.model_fields.items():
        if name in d.KEY_AXES or name == "schema_version":
            continue
        assert field.description, name
    for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert "ms" in (Row.model_fields[name].description or "")
    assert "tokens/s" in (Row.model_fields["output_toks_per_s"].description or "")


def test_checked_in_schema_matches_export() -> None:
    checked_in = json.loads((ROOT / "docs" / "row.schema.json").read_text())
    assert checked_in == d.row_json_schema(), (
        "docs/row.schema.json is stale: regenerate with `nox -s schema`"
    )


def test_jsonl_write_read(tmp_path: Path) -> None:
    rows = [make_row(), make_row(speculative="mtp", accepted_token_ratio=0.7, tpot_ms=None)]
    path = d.write_rows(tmp_path / "rows.jsonl", rows)
    d.write_rows(path, rows[:1])
    assert d.read_rows(path) == [*rows, rows[0]]


def test_read_rows_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(make_row().to_json_line() + b'\n{"model_id": 3}\n')
    with pytest.raises(RowFormatError) as info:
        d.read_rows(path)
    assert info.value.line_number == 3


def test_read_rows_points_a_results_file_to_load_results(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"record": "run_start", "plan_hash": "abc"}\n')
    with pytest.raises(RowFormatError, match="load_results") as info:
        d.read_rows(path)
    assert info.value.line_number == 1 and "errors.pydantic.dev" not in str(info.value)


def test_row_html_table() -> None:
    html = make_row()._repr_html_()
    assert html.startswith("<table>") and "tpot_ms" in html


# --- compare_speedup ----------------------------------------------------------------
def test_credited_speedup_each_metric() -> None:
    window = {"output_throughput_toks_per_s": 40.0, "goodput_req_per_s": 2.0}
    base = make_row(**window)
    cand = make_row(
        speculative="mtp",
        tpot_ms=10.0,
        ttft_ms=5.0,
        e2e_ms=100.0,
        output_toks_per_s=100.0,
        output_throughput_toks_per_s=80.0,  # higher is better: candidate / baseline
        goodput_req_per_s=4.0,
    )
    for metric in SpeedupMetric:
        verdict = compare_speedup(base, cand, metric=metric)
        assert verdict.printed and verdict.speedup == pytest.approx(2.0)
        assert "2.00×" in str(verdict)
    assert d.CompareSpeedup is compare_speedup


@pytest.mark.parametrize(
    ("base_kw", "cand_kw", "expected"),
    [
        ({"quality_parity": "unknown"}, {}, {RefusalReason.baseline_parity_not_verified}),
        ({}, {"quality_parity": "differs"}, {RefusalReason.candidate_parity_not_verified}),
        ({"speculative": "mtp"}, {}, {RefusalReason.baseline_not_off}),
        ({}, {"speculative": "off"}, {RefusalReason.candidate_is_off}),
        ({}, {"context_bucket": "8k"}, {RefusalReason.key_axis_mismatch}),
        (
            {},
            {"tpot_ms": None},
            {RefusalReason.candidate_incomplete, RefusalReason.candidate_metric_missing},
        ),
        ({"n_requests": 4}, {}, {RefusalReason.baseline_too_few_requests}),
        ({}, {"tpot_ms": 0.0}, {RefusalReason.candidate_metric_not_positive}),
        ({}, {"tpot_ms": 1e-320}, {RefusalReason.speedup_not_finite}),
    ],
)
def test_each_refusal_reason(
    base_kw: dict[str, object], cand_kw: dict[str, object], expected: set[RefusalReason]
) -> None:
    cand_defaults: dict[str, object] = {"speculative": "mtp", "tpot_ms": 10.0}
    verdict = compare_speedup(make_row(**base_kw), make_row(**{**cand_defaults, **cand_kw}))
    assert not verdict.printed and verdict.speedup is None
    assert set(verdict.reasons) == expected


def test_every_applicable_reason_is_listed() -> None:
    base = make_row(quality_parity="unknown", speculative="ngram", n_requests=1)
    cand = make_row(quality_parity="differs", speculative="off", hosting="self_hosted")
    verdict = compare_speedup(base, cand)
    assert set(verdict.reasons) >= {
        RefusalReason.baseline_parity_not_verified,
        RefusalReason.candidate_parity_not_verified,
        RefusalReason.baseline_not_off,
        RefusalReason.candidate_is_off,
        RefusalReason.key_axis_mismatch,
        RefusalReason.baseline_too_few_requests,
    }
    assert verdict.mismatched_axes == ("hosting",)


def test_verdict_invariant_and_interval() -> None:
    with pytest.raises(ValidationError):
        d.SpeedupVerdict(metric=SpeedupMetric.tpot_ms, printed=True)
    with pytest.raises(ValidationError):
        d.SpeedupVerdict(
            metric=SpeedupMetric.tpot_ms,
            printed=False,
            speedup=2.0,
            reasons=(RefusalReason.candidate_is_off,),
        )
    refused = compare_speedup(make_row(), make_row())
    assert refused.with_interval(1.0, 2.0) is refused
    credited = compare_speedup(make_row(), make_row(speculative="mtp", tpot_ms=10.0))
    assert "95% CI 1.50–2.50" in str(credited.with_interval(1.5, 2.5))
    assert not credited.with_interval(1.5, 2.5).within_noise
    noisy = credited.with_interval(0.9, 2.5)  # an interval spanning 1 credits nothing
    assert noisy.within_noise and not noisy and noisy.speedup is None
    assert str(noisy) == "no significant difference (0.90–2.50) by tpot_ms"


def test_bad_metric_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="allowed: 'tpot_ms', 'ttft_ms', 'e2e_ms', 'output_toks"):
        compare_speedup(make_row(), make_row(), metric="itl_ms")


# --- LiveGate ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.3.2.1", "localhost", "LOCALHOST", "[::1]", "[::ffff:127.0.0.1]"]
)
def test_loopback_allowed_by_default(host: str) -> None:
    spy = Spy()

    async def go() -> None:
        async with LiveGate().client(transport=spy) as client:
            await client.get(f"http://{host}:9/health")

    anyio.run(go)
    assert len(spy.requests) == 1


@pytest.mark.parametrize(
    "host",
    [
        "10.0.0.1",
        "192.168.1.1",
        "8.8.8.8",
        "[2001:db8::1]",
        "127.0.0.1.nip.example",
        "localhost.example",
        "localhost.",
        "0.0.0.0",
    ],
)
def test_non_loopback_needs_key_and_spend(host: str) -> None:
    for gate in (LiveGate(), LiveGate(spend=True), LiveGate(api_key=SECRET)):
        with pytest.raises(LiveGateError) as info:
            gate.check_url(f"https://{host}/v1")
        assert SECRET not in str(info.value) and SECRET not in repr(gate)
        assert info.value.host
    LiveGate(api_key=SECRET, spend=True).check_url(f"https://{host}/v1")


def test_refusal_names_what_is_missing() -> None:
    with pytest.raises(LiveGateError) as info:
        LiveGate().check_url("https://api.example.com/v1")
    assert "api.example.com" in str(info.value)
    assert "API key" in str(info.value) and "spend" in str(info.value)


def test_open_gate_injects_key_only_for_remote_hosts() -> None:
    spy = Spy()
    gate = LiveGate(api_key=SECRET, spend=True)

    async def go() -> None:
        async with gate.client(transport=spy) as client:
            await client.get("https://api.example.com/v1/models")
            await client.get("http://127.0.0.1:9/health")

    anyio.run(go)
    assert spy.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert "authorization" not in spy.requests[1].headers
    assert SECRET not in repr(gate)


def test_redirect_to_remote_host_passes_the_gate() -> None:
    spy = Spy(status=307, headers={"location": "https://evil.example.com/steal"})

    async def go() -> None:
        async with LiveGate().client(transport=spy, follow_redirects=True) as client:
            with pytest.raises(LiveGateError):
                await client.get("http://127.0.0.1:9/start")

    anyio.run(go)
    assert [str(r.url.host) for r in spy.requests] == ["127.0.0.1"]


def test_budgets() -> None:
    spy = Spy()
    gate = LiveGate(max_requests=2, max_output_tokens=100)

    async def go() -> None:
        async with gate.client(transport=spy) as client:
            await client.get("http://127.0.0.1:9/a")
            gate.charge_output_tokens(100)
            with pytest.raises(LiveGateError) as info:
                await client.get("http://127.0.0.1:9/b")
            assert "output-token budget" in str(info.value)

    anyio.run(go)
    assert len(spy.requests) == 1
    gate2 = LiveGate(max_requests=1)
    gate2.admit(httpx.Request("GET", "http://127.0.0.1/"))
    with pytest.raises(LiveGateError, match="request budget"):
        gate2.admit(httpx.Request("GET", "http://127.0.0.1/"))
    with pytest.raises(ValueError):
        LiveGate(max_requests=-1)


def test_from_env() -> None:
    gate = LiveGate.from_env({"DEEPSEEKBENCH_API_KEY": SECRET, "DEEPSEEKBENCH_SPEND": "1"})
    assert gate.spend and isinstance(gate.api_key, SecretStr)
    assert SECRET not in repr(gate)
    assert not LiveGate.from_env({"DEEPSEEKBENCH_API_KEY": SECRET}).spend
    assert not LiveGate.from_env({"DEEPSEEKBENCH_SPEND": "1"}, spend=False).spend
    assert LiveGate.from_env({}).api_key is None


def test_client_refuses_bypassing_options() -> None:
    with pytest.raises(TypeError):
        LiveGate().client(mounts={})
    with pytest.raises(TypeError):
        LiveGate().client(proxy="http://127.0.0.1:3128")
