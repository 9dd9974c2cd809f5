"""The gate's side doors, and secrets that never land anywhere.

Everything here talks to 127.0.0.1 only; a would-be non-loopback connection is
either refused by the gate before a socket opens or recorded by an in-memory
transport (``Spy``) that opens none.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import httpcore
import httpx
import orjson
import pytest
from pydantic import SecretStr, ValidationError

from deepseekbench import (
    BenchmarkPlan,
    EngineRoute,
    LiveGate,
    LiveGateError,
    PlanError,
    measure_streamed,
    run_plan,
    scrape_metrics,
)
from deepseekbench._cli._main import main
from deepseekbench._execute._served_config import served_spec_tokens
from tests._fakes import Spy
from tests._replay import Script, Write, replay_server

REQ = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
SECRET = "sk-hardening-SECRET-0123456789"


def _sse(*frames: dict[str, Any]) -> Script:
    return Script.sse(
        ["data: " + orjson.dumps(f).decode() + "\n\n" for f in frames] + ["data: [DONE]\n\n"]
    )


def _chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


# -- item 1: a transport that connects through a proxy -------------------------------
class NoNetwork(httpcore.AsyncNetworkBackend):
    """Records every connect the transport attempts and refuses it (opens no socket)."""

    def __init__(self) -> None:
        self.connects: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append(f"{host}:{port}")
        raise httpcore.ConnectError("NoNetwork: no socket in this test")


def test_non_loopback_proxy_transport_is_refused_before_connecting() -> None:
    transport = httpx.AsyncHTTPTransport(proxy="http://192.0.2.1:3128")
    backend = NoNetwork()
    transport._pool._network_backend = backend

    async def go() -> None:
        async with LiveGate().client(transport=transport) as client:
            with pytest.raises(LiveGateError, match=r"192\.0\.2\.1.*proxy"):
                await client.get("http://127.0.0.1:9/health")

    anyio.run(go)
    assert backend.connects == []


def test_loopback_proxy_passes_the_gate() -> None:
    async def go() -> None:
        async with replay_server(Script(headers={}, writes=(Write(0, b"via proxy"),))) as proxy:
            transport = httpx.AsyncHTTPTransport(proxy=f"http://127.0.0.1:{proxy.port}")
            async with LiveGate().client(transport=transport) as client:
                r = await client.get("http://127.0.0.1:9/health")
            assert r.text == "via proxy"
            assert proxy.requests[0].path == "http://127.0.0.1:9/health"  # absolute form

    anyio.run(go)


# -- item 2: every I/O entry point checks every transport of its client ---------------
def test_scrape_metrics_refuses_an_ungated_client() -> None:
    spy = Spy()
    route = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m")

    async def go() -> None:
        async with httpx.AsyncClient(transport=spy) as client:
            with pytest.raises(LiveGateError, match="does not wrap"):
                await scrape_metrics(route, gate=LiveGate(), client=client)

    anyio.run(go)
    assert spy.requests == []


def test_served_spec_tokens_refuses_an_ungated_client() -> None:
    spy = Spy()
    route = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m", dialect="llamacpp")

    async def go() -> None:
        async with httpx.AsyncClient(transport=spy) as client:
            with pytest.raises(LiveGateError, match="does not wrap"):
                await served_spec_tokens(route, gate=LiveGate(), client=client)

    anyio.run(go)
    assert spy.requests == []


def _client_with_ungated_mount(gate: LiveGate, outside: Spy) -> httpx.AsyncClient:
    inside = Spy(status=307, headers={"location": "http://evil.example.com/steal"})
    return httpx.AsyncClient(
        transport=gate.wrap(inside),
        mounts={"all://evil.example.com": outside},
        follow_redirects=True,
    )


def test_measure_streamed_refuses_a_client_with_an_ungated_mount() -> None:
    gate = LiveGate()
    outside = Spy()
    route = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m")

    async def go() -> None:
        async with _client_with_ungated_mount(gate, outside) as client:
            with pytest.raises(LiveGateError, match="mounts"):
                await measure_streamed(REQ, route=route, gate=gate, client=client)
            with pytest.raises(LiveGateError, match="mounts"):
                await scrape_metrics(route, gate=gate, client=client)

    anyio.run(go)
    assert outside.requests == []  # the redirect never reached the ungated mount


def test_run_plan_refuses_a_client_with_an_ungated_mount(tmp_path: Path) -> None:
    gate = LiveGate()
    outside = Spy()
    plan = BenchmarkPlan.model_validate(
        {
            "model": "m",
            "routes": [
                {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:9/v1"},
                {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:8/v1"},
            ],
        }
    )

    async def go() -> None:
        async with _client_with_ungated_mount(gate, outside) as client:
            with pytest.raises(LiveGateError):
                await run_plan(plan, gate=gate, client=client, results_path=tmp_path / "r.jsonl")

    anyio.run(go)
    assert outside.requests == [] and not (tmp_path / "r.jsonl").exists()


def test_scrape_metrics_refuses_a_client_that_follows_an_env_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.1:3128")  # TEST-NET-1, never reached
    route = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m")

    async def go() -> None:
        async with httpx.AsyncClient(trust_env=True, follow_redirects=True) as client:
            assert client._mounts  # the environment proxy became a mount
            backend = NoNetwork()
            for mount in client._mounts.values():
                mount._pool._network_backend = backend  # type: ignore[union-attr]
            with pytest.raises(LiveGateError):
                await scrape_metrics(route, gate=LiveGate(), client=client)
            assert backend.connects == []

    anyio.run(go)


# -- item 3: user-info in a base URL ---------------------------------------------------
def test_user_info_in_a_base_url_is_refused_without_showing_it() -> None:
    url = f"http://user:{SECRET}@127.0.0.1:8000/v1"
    with pytest.raises(ValidationError) as info:
        EngineRoute(base_url=url, model="m")
    assert "user-info" in str(info.value) and SECRET not in str(info.value)
    routes = [
        {"label": "off", "speculative": "off", "base_url": url},
        {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:9/v1"},
    ]
    with pytest.raises(PlanError) as pinfo:
        BenchmarkPlan.from_mapping({"model": "m", "routes": routes})
    assert "routes[0].base_url" in str(pinfo.value) and SECRET not in str(pinfo.value)


# -- item 4: redact first, then cut --------------------------------------------------
def test_a_key_straddling_the_message_cut_is_redacted_whole() -> None:
    message = "x" * 475 + " Bearer " + SECRET  # the 500-character cut falls inside the key
    body = orjson.dumps({"error": {"message": message}})
    script = Script(
        status=401, headers={"content-type": "application/json"}, writes=(Write(0, body),)
    )

    async def go() -> None:
        async with replay_server(script) as server:
            route = EngineRoute(base_url=server.base_url, model="m", api_key=SecretStr(SECRET))
            m = await measure_streamed(REQ, route=route, gate=LiveGate())
        assert m.error is not None and len(m.error.message) <= 500
        assert "hardening" not in m.error.message and "Bearer ***" in m.error.message

    anyio.run(go)


# -- item 5: secrets echoed in texts and usage -------------------------------------
def test_a_key_echoed_in_text_usage_and_finish_reason_is_redacted() -> None:
    gate_key = "sk-gate-key-echo-987654"
    script = _sse(
        _chunk(f"your key is {SECRET} and "),
        _chunk(f"the gate's is {gate_key}", finish=f"stop {SECRET}"),
        {"choices": [], "usage": {"completion_tokens": 2, "echo": {SECRET: [gate_key]}}},
    )

    async def go() -> None:
        async with replay_server(script) as server:
            route = EngineRoute(base_url=server.base_url, model="m", api_key=SecretStr(SECRET))
            m = await measure_streamed(REQ, route=route, gate=LiveGate(api_key=gate_key))
        dumped = m.model_dump_json()
        assert SECRET not in dumped and gate_key not in dumped
        assert m.text == "your key is *** and the gate's is ***"
        assert m.usage == {"completion_tokens": 2, "echo": {"***": ["***"]}}
        assert m.completion_tokens == 2

    anyio.run(go)


def test_keys_echoed_by_servers_never_reach_the_results_file_or_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARDENING_KEY", SECRET)

    def off(_: Any) -> Script:  # echoes the *other* route's key: it was never sent here
        return _sse(_chunk(f"A {SECRET}", finish="stop"))

    def mtp(_: Any) -> Script:
        return _sse(_chunk(f"B {SECRET}", finish="stop"))

    async def go() -> Path:
        async with replay_server(off) as s_off, replay_server(mtp) as s_mtp:
            plan = BenchmarkPlan.model_validate(
                {
                    "model": "m",
                    "routes": [
                        {"label": "off", "speculative": "off", "base_url": s_off.base_url},
                        {
                            "label": "mtp",
                            "speculative": "mtp",
                            "base_url": s_mtp.base_url,
                            "api_key_env": "HARDENING_KEY",
                        },
                    ],
                    "requests_per_cell": 1,
                    "warmup_per_cell": 0,
                    "parity": {"prompts": ["p"], "tasks": "none"},
                }
            )
            path = tmp_path / "r.jsonl"
            await run_plan(plan, gate=LiveGate(), results_path=path)
            return path

    path = anyio.run(go)
    raw = path.read_text(encoding="utf-8")
    assert SECRET not in raw and "A ***" in raw and "B ***" in raw
    for fmt in ("text", "markdown", "json", "csv"):
        out, err = io.StringIO(), io.StringIO()
        main(["report", str(path), "--format", fmt], stdout=out, stderr=err)
        assert SECRET not in out.getvalue() + err.getvalue()
    # a file written before redaction existed: the report still hides the known key
    path.write_text(raw.replace("***", SECRET), encoding="utf-8")
    out = io.StringIO()
    main(["report", str(path)], stdout=out, stderr=io.StringIO())
    assert "first divergence" in out.getvalue() and SECRET not in out.getvalue()


# -- item 6: error messages name the field, never a value that may be a secret -------
def test_secret_header_error_does_not_print_the_key() -> None:
    with pytest.raises(ValidationError) as info:
        EngineRoute(
            base_url="http://127.0.0.1:9/v1",
            model="m",
            headers={"Authorization": f"Bearer {SECRET}"},
        )
    # pydantic shortens a long input in the middle: no part of the key may show
    assert "Authorization" in str(info.value) and "0123456789" not in str(info.value)
    assert "0123456789" not in repr(info.value)


@pytest.mark.parametrize("pasted", [SECRET, "sk_live_pasted_key_0123456789"])
def test_a_key_pasted_into_api_key_env_is_not_printed(tmp_path: Path, pasted: str) -> None:
    plan = {
        "model": "m",
        "routes": [
            {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:9/v1"},
            {
                "label": "mtp",
                "speculative": "mtp",
                "base_url": "http://127.0.0.1:8/v1",
                "api_key_env": pasted,
            },
        ],
    }
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(plan), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", str(p), "--results", str(tmp_path / "r.jsonl")], stdout=out, stderr=err)
    assert code == 2, err.getvalue()
    assert "api_key_env" in err.getvalue()
    assert pasted not in out.getvalue() + err.getvalue()
    if not pasted.isidentifier():  # refused by the pattern: pydantic's own message too
        with pytest.raises(ValidationError) as info:
            BenchmarkPlan.model_validate(plan)
        assert "api_key_env" in str(info.value) and pasted not in str(info.value)
