"""Replay every shared case (../shared/cases/{sse,requests,metrics}/*.json).

* ``sse/`` and ``requests/`` cases are served write by write with their delays
  over a real loopback socket, measured with ``measure_streamed`` on asyncio and
  trio, and every ``expect`` field asserted. ``requests/`` cases also set the
  route's dialect (``harness.dialect``) and request fields (``harness.request``);
  the server answers the case's refusal instead of the stream when the request
  body carries every ``harness.refuse_when.body_has`` field, and the ``extra``
  checks (``request_body_must_not_have``, ``tpot_ms_range``, ``chunk_count``,
  ``itl_count``, ``reasoning_tokens``) are enforced.
* The cases are samples of fault kinds, so each stream case is also replayed
  re-framed: with CRLF and CR-only line ends, and re-split into small reads, and
  must give the same non-timing results.
* ``metrics/`` cases are served over loopback, scrape by scrape (``before``, then
  ``after``), on asyncio and trio; the server answers ``harness.refusal`` to a
  scrape whose query string lacks a ``harness.require_query`` pair. The scrapes go
  through the library's Prometheus window code (``scrape_metrics``, then
  ``metrics_delta`` against ``expect.record`` and ``cache_window`` against
  ``expect.cache``).

Where the cases are: ``$DEEPSEEKBENCH_CASES`` or ``<repo>/../shared/cases``.
Missing cases fail under ``CI=true`` and skip elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from deepseekbench import (
    AcceptanceRecord,
    CacheWindow,
    Dialect,
    EngineRoute,
    LiveGate,
    MetricsSnapshot,
    StreamMeasurement,
    measure_streamed,
    metrics_delta,
    scrape_metrics,
)
from deepseekbench._measure._cache_metrics import cache_window
from tests._replay import RecordedRequest, Script, Write, replay_server

REPO_ROOT = Path(__file__).resolve().parents[2]


def cases_dir() -> Path:
    env = os.environ.get("DEEPSEEKBENCH_CASES")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "cases"


def _case_files(folder: str) -> list[Path]:
    base = cases_dir()
    sub = base / folder
    if folder == "sse" and not sub.is_dir() and not (base / "requests").is_dir():
        sub = base  # an old flat cases folder holds the sse cases directly
    return sorted(sub.glob("*.json"))


def _params(folder: str) -> list[Any]:
    files = _case_files(folder)
    return [pytest.param(p, id=f"{folder}/{p.stem}") for p in files] or [
        pytest.param(None, id=f"{folder}-cases-missing")
    ]


STREAM_PARAMS = _params("sse") + _params("requests")
METRICS_PARAMS = _params("metrics")

KNOWN_EXPECT = {
    "text",
    "reasoning_text",
    "completion_tokens",
    "tokens_estimated",
    "ttft_ms_range",
    "e2e_ms_range",
    "finish_reason",
    "error_kind",
    "http_status",
    "accepted_token_ratio",
    "acceptance_length",
    "draft_tokens",
    "accepted_tokens",
    "acceptance_by_position",
}
KNOWN_EXTRA = {
    "request_body_must_not_have",
    "tpot_ms_range",
    "chunk_count",
    "itl_count",
    "reasoning_tokens",
}
KNOWN_HARNESS = {"request", "refuse_when", "dialect"}
RECORD_FIELDS = (
    "draft_tokens",
    "accepted_tokens",
    "verify_steps",
    "accepted_token_ratio",
    "acceptance_length",
    "scope",
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _load(path: Path | None) -> dict[str, Any]:
    if path is None:
        where = cases_dir()
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"shared cases not found under {where} (set DEEPSEEKBENCH_CASES)")
        pytest.skip(f"shared cases not found under {where}")
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return case


def _refusal(case: dict[str, Any]) -> tuple[dict[str, Any], Script] | None:
    """The case's ``refuse_when``: the fields that trigger it and the error response."""
    refuse = case.get("harness", {}).get("refuse_when")
    if refuse is None:
        return None
    body = refuse["body"]
    text = body if isinstance(body, str) else json.dumps(body)
    script = Script(
        status=int(refuse["status"]),
        headers=dict(refuse.get("headers", {"content-type": "application/json"})),
        writes=(Write(0.0, text.encode("utf-8")),),
    )
    return dict(refuse["body_has"]), script


def _serving(case: dict[str, Any], script: Script) -> Any:
    """The replay source: the case's stream, or its refusal when the body triggers it."""
    refusal = _refusal(case)
    if refusal is None:
        return script
    body_has, refused = refusal

    def answer(request: RecordedRequest) -> Script:
        try:
            sent = json.loads(request.body)
        except ValueError:
            return script
        if all(k in sent and sent[k] == v for k, v in body_has.items()):
            return refused
        return script

    return answer


async def _measure(
    case: dict[str, Any], script: Script, *, extras: dict[str, Any] | None = None
) -> tuple[StreamMeasurement, dict[str, Any]]:
    """Measure ``script`` as the case asks; return the measurement and the body sent."""
    harness = case.get("harness", {})
    unknown = set(harness) - KNOWN_HARNESS
    assert not unknown, f"case has harness fields this test does not apply: {unknown}"
    dialect = Dialect(harness.get("dialect", "auto"))
    request: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    request.update(harness.get("request", {}))
    async with replay_server(_serving(case, script)) as server:
        route = EngineRoute(
            base_url=server.base_url,
            model="dsv4-test",
            dialect=dialect,
            request_extras=extras or {},
        )
        m = await measure_streamed(request, route=route, gate=LiveGate())
        _assert_as_validated(m)
        assert server.connections == 1
        sent: dict[str, Any] = json.loads(server.requests[0].body)
        return m, sent


def _assert_as_validated(m: StreamMeasurement) -> None:
    """The measurement, built without validation on the hot path, is what validating
    its fields gives: equal values of the same types, the same fields set."""
    validated = StreamMeasurement.model_validate(dict(m.__dict__))
    assert validated == m
    for name, value in validated.__dict__.items():
        got = m.__dict__[name]
        assert type(got) is type(value), (name, got, value)
        if isinstance(value, list):
            assert [type(v) for v in got] == [type(v) for v in value], name
    assert m.model_fields_set <= set(StreamMeasurement.model_fields)
    assert m.model_dump_json() == validated.model_dump_json()


def _approx_or_none(got: Any, want: Any, name: str) -> None:
    if want is None:
        assert got is None, name
    else:
        assert got == pytest.approx(want), name


def _in_range(got: float | None, rng: list[float] | None, name: str) -> None:
    if rng is None:
        return
    assert got is not None, name
    low, high = rng
    assert low <= got <= high, f"{name}: {got:.1f} ms not in [{low}, {high}]"


def _assert_expect(m: StreamMeasurement, expect: dict[str, Any], *, timing: bool) -> None:
    unknown = set(expect) - KNOWN_EXPECT
    assert not unknown, f"case has expect fields this test does not check: {unknown}"
    assert m.text == expect["text"]
    assert m.reasoning_text == expect["reasoning_text"]
    assert m.completion_tokens == expect["completion_tokens"]
    assert m.tokens_estimated is expect["tokens_estimated"]
    assert m.finish_reason == expect["finish_reason"]
    assert m.http_status == expect["http_status"]
    kind = m.error.kind.value if m.error is not None else None
    assert kind == expect["error_kind"], m.errors
    for name in ("draft_tokens", "accepted_tokens"):
        assert getattr(m, name) == expect[name], name
    for name in ("accepted_token_ratio", "acceptance_length"):
        _approx_or_none(getattr(m, name), expect[name], name)
    if "acceptance_by_position" in expect:
        _approx_or_none(m.acceptance_by_position, expect["acceptance_by_position"], "by_pos")
    if timing:
        _in_range(m.ttft_ms, expect["ttft_ms_range"], "ttft_ms_range")
        _in_range(m.e2e_ms, expect["e2e_ms_range"], "e2e_ms_range")


def _assert_extra(
    m: StreamMeasurement, sent: dict[str, Any], extra: dict[str, Any], *, timing: bool
) -> None:
    unknown = {k for k in extra if not k.endswith("_note")} - KNOWN_EXTRA
    assert not unknown, f"case has extra checks this test does not enforce: {unknown}"
    for name in extra.get("request_body_must_not_have", []):
        assert name not in sent, f"the request body carried {name!r}"
    # counts of token-bearing chunks and usage figures do not depend on the framing
    if "chunk_count" in extra:
        assert len(m.chunk_arrival_ms) == extra["chunk_count"], m.chunk_arrival_ms
    if "itl_count" in extra:
        assert len(m.itl_ms) == extra["itl_count"], m.itl_ms
    if "reasoning_tokens" in extra:
        assert m.reasoning_tokens == extra["reasoning_tokens"], m.usage
    if timing:
        _in_range(m.tpot_ms, extra.get("tpot_ms_range"), "tpot_ms_range")


@pytest.mark.shared_cases
@pytest.mark.anyio
@pytest.mark.parametrize("path", STREAM_PARAMS)
async def test_shared_case(path: Path | None) -> None:
    """Every expected value on each try; the wall-clock ranges on at least one of
    TIMED_TRIES tries, so a 2-core machine starving the in-process replay server
    for a moment does not fail a correct client (a client that times the wrong event
    misses the range on every try)."""
    case = _load(path)
    misses: list[str] = []
    for _ in range(TIMED_TRIES):
        m, sent = await _measure(case, Script.from_case(case))
        _assert_expect(m, case["expect"], timing=False)
        _assert_extra(m, sent, case.get("extra", {}), timing=False)
        try:
            _assert_expect(m, case["expect"], timing=True)
            _assert_extra(m, sent, case.get("extra", {}), timing=True)
            return
        except AssertionError as exc:
            misses.append(str(exc).splitlines()[0])
    pytest.fail(f"timing outside the case's ranges on all {TIMED_TRIES} tries: {misses}")


TIMED_TRIES = 3


def _reframed(case: dict[str, Any], variant: str) -> Script:
    """The case's body with other line ends, or re-split into 7-byte reads, no delays."""
    script = Script.from_case(case)
    body = script.body()
    if variant == "crlf":
        body = body.replace(b"\n", b"\r\n")
    elif variant == "cr":
        body = body.replace(b"\n", b"\r")
    if variant == "split7":
        writes = tuple(Write(0.0, body[i : i + 7]) for i in range(0, len(body), 7))
    else:
        writes = (Write(0.0, body),)
    return Script(status=script.status, headers=script.headers, writes=writes)


@pytest.mark.shared_cases
@pytest.mark.anyio
@pytest.mark.parametrize("variant", ["crlf", "cr", "split7"])
@pytest.mark.parametrize("path", STREAM_PARAMS)
async def test_shared_case_reframed(path: Path | None, variant: str) -> None:
    case = _load(path)
    m, sent = await _measure(case, _reframed(case, variant))
    _assert_expect(m, case["expect"], timing=False)
    _assert_extra(m, sent, case.get("extra", {}), timing=False)


KNOWN_METRICS_HARNESS = {"require_query", "refusal"}
CACHE_FIELDS = (
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prefix_cache_hit_rate",
    "kv_cache_usage_peak",
    "queue_depth_peak",
)


def _metrics_answer(case: dict[str, Any]) -> Any:
    """The case's ``/metrics`` server: ``before`` on the first answered scrape,
    ``after`` on every later one; ``harness.refusal`` to a scrape whose query
    string lacks a ``harness.require_query`` pair (the refusal is not a scrape)."""
    harness = case.get("harness", {})
    unknown = set(harness) - KNOWN_METRICS_HARNESS
    assert not unknown, f"case has harness fields this test does not apply: {unknown}"
    required = {str(k): str(v) for k, v in harness.get("require_query", {}).items()}
    refusal = harness.get("refusal", {})
    refused_body = refusal.get("body", "")
    refused = Script(
        status=int(refusal.get("status", 400)),
        headers=dict(refusal.get("headers", {"content-type": "application/json"})),
        writes=(Write(0.0, json.dumps(refused_body).encode("utf-8")),),
    )
    answered: list[str] = []

    def answer(request: RecordedRequest) -> Script:
        url = httpx.URL(request.path)
        assert url.path == "/metrics", request.path
        if any(url.params.get(k) != v for k, v in required.items()):
            return refused
        text = case["before"] if not answered else case["after"]
        answered.append(request.path)
        return Script(
            headers={"content-type": "text/plain; version=0.0.4"},
            writes=(Write(0.0, text.encode("utf-8")),),
        )

    return answer


async def _scraped_window(case: dict[str, Any]) -> tuple[MetricsSnapshot, MetricsSnapshot]:
    """The case's two scrapes, each taken by ``scrape_metrics`` over loopback."""
    async with replay_server(_metrics_answer(case)) as server:
        route = EngineRoute(base_url=server.base_url, model=case.get("model") or "dsv4-test")
        gate = LiveGate()
        before = await scrape_metrics(route, gate=gate)
        after = await scrape_metrics(route, gate=gate)
    assert before.error is None and after.error is None, (before.error, after.error)
    return before, after


def _check_record(record: AcceptanceRecord | None, want: dict[str, Any] | None) -> None:
    if want is None:
        assert record is None, record
        return
    assert record is not None
    unknown = set(want) - set(RECORD_FIELDS) - {"acceptance_by_position"}
    assert not unknown, f"case has record fields this test does not check: {unknown}"
    for name in RECORD_FIELDS:
        if name in want:
            got = getattr(record, name)
            got = got.value if name == "scope" else got
            if isinstance(want[name], float):
                assert got == pytest.approx(want[name]), name
            else:
                assert got == want[name], name
    if "acceptance_by_position" in want:
        _approx_or_none(record.acceptance_by_position, want["acceptance_by_position"], "by_pos")


def _check_cache(window: CacheWindow | None, want: dict[str, Any]) -> None:
    unknown = set(want) - set(CACHE_FIELDS)
    assert not unknown, f"case has cache fields this test does not check: {unknown}"
    for name in CACHE_FIELDS:
        if name in want:
            got = getattr(window, name) if window is not None else None
            _approx_or_none(got, want[name], name)


async def check_metrics_case(case: dict[str, Any]) -> AcceptanceRecord | None:
    """Serve a metrics case's two scrapes over loopback (``harness.require_query``
    enforced), scrape them with ``scrape_metrics``, derive the window's record and
    cache figures and check them against ``expect.record`` (``None`` expected: no
    record) and ``expect.cache``; returns the record."""
    unknown = set(case["expect"]) - {"record", "cache"}
    assert not unknown, f"case has expect fields this test does not check: {unknown}"
    before, after = await _scraped_window(case)
    record = metrics_delta(before, after)
    _check_record(record, case["expect"]["record"])
    if "cache" in case["expect"]:
        _check_cache(cache_window(before, after), case["expect"]["cache"])
    return record


@pytest.mark.shared_cases
@pytest.mark.anyio
@pytest.mark.parametrize("path", METRICS_PARAMS)
async def test_shared_metrics_case(path: Path | None) -> None:
    await check_metrics_case(_load(path))


def _first_case_with(folder: str, harness_key: str) -> dict[str, Any]:
    """The first ``folder`` case whose harness has ``harness_key`` (skips without one)."""
    for path in _case_files(folder):
        case = _load(path)
        if harness_key in case.get("harness", {}):
            return case
    pytest.skip(f"no {folder}/ case with {harness_key}")


@pytest.mark.anyio
async def test_require_query_is_enforced_by_the_metrics_server() -> None:
    """The harness can fail: a scrape without the required query gets the refusal."""
    case = _first_case_with("metrics", "require_query")
    async with replay_server(_metrics_answer(case)) as server, httpx.AsyncClient() as client:
        response = await client.get(server.base_url.removesuffix("/v1") + "/metrics")
    assert response.status_code == case["harness"]["refusal"]["status"]


@pytest.mark.anyio
async def test_refuse_when_is_enforced_by_the_replay_server() -> None:
    """The harness can fail: a body carrying the refused fields gets the engine's error."""
    case = _first_case_with("requests", "refuse_when")
    body_has = dict(case["harness"]["refuse_when"]["body_has"])
    body_has.pop("stream", None)  # the route forces stream itself
    m, sent = await _measure(case, Script.from_case(case), extras=body_has)
    assert all(sent.get(k) == v for k, v in body_has.items())
    assert m.http_status == case["harness"]["refuse_when"]["status"]
    assert m.error is not None and m.error.kind.value == "http_status"
