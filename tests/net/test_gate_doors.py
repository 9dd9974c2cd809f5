"""Every door of the gate (keys echoed by servers, blank keys,
terminal escapes, proxies on any transport, Ray's address).

Everything here talks to 127.0.0.1 only; a would-be non-loopback connection is
refused before a socket opens.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import orjson
import pytest
from pydantic import SecretStr

from deepseekbench import (
    EngineRoute,
    ErrorKind,
    LiveGate,
    LiveGateError,
    RayPool,
    RayUnavailableError,
    StreamError,
    StreamMeasurement,
    measure_streamed,
    scrape_metrics,
)
from deepseekbench._measure._redact import redact_measurement
from deepseekbench._types._secrets import printable, redact, safe_server_text
from tests._helpers import ray_plan_file
from tests._replay import Script, Write, replay_server

REQ = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
SECRET = "sk-doors19-SECRET-0123456789"
ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"  # set title, clear screen, red


# -- a key echoed into content_encoding or a /metrics parse error -------------------
def test_a_key_echoed_into_content_encoding_is_redacted() -> None:
    script = Script(
        headers={"content-type": "text/event-stream", "content-encoding": f"x-{SECRET}"},
        writes=(Write(0, b"data: [DONE]\n\n"),),
    )

    async def go() -> StreamMeasurement:
        async with replay_server(script) as server:
            route = EngineRoute(base_url=server.base_url, model="m", api_key=SecretStr(SECRET))
            return await measure_streamed(REQ, route=route, gate=LiveGate())

    m = anyio.run(go)
    assert m.content_encoding is not None and m.error is not None
    assert m.error.kind is ErrorKind.content_encoding
    assert SECRET not in m.model_dump_json() and "x-***" in m.content_encoding


def test_a_key_and_escapes_in_a_metrics_parse_error_never_reach_the_snapshot() -> None:
    body = f'vllm:num_requests_running{{a="{SECRET}{ESC}" 1\n'.encode()
    script = Script(
        headers={"content-type": "text/plain"}, writes=(Write(0, body),), framing="close"
    )

    async def go() -> str | None:
        async with replay_server(script) as server:
            route = EngineRoute(base_url=server.base_url, model="m", api_key=SecretStr(SECRET))
            return (await scrape_metrics(route, gate=LiveGate())).error

    error = anyio.run(go)
    assert error is not None and error.startswith("unparsable metrics")
    assert SECRET not in error and "\x1b" not in error and "\x07" not in error


def test_the_gates_key_echoed_in_a_metrics_parse_error_is_redacted() -> None:
    gate_key = "sk-gate-doors19-777"
    body = f"vllm:num_requests_running {gate_key}\n".encode()
    script = Script(
        headers={"content-type": "text/plain"}, writes=(Write(0, body),), framing="close"
    )

    async def go() -> str | None:
        async with replay_server(script) as server:
            route = EngineRoute(base_url=server.base_url, model="m")
            return (await scrape_metrics(route, gate=LiveGate(api_key=gate_key))).error

    error = anyio.run(go)
    assert error is not None and gate_key not in error and "***" in error


# -- a whitespace-only key is no key --------------------------------------------------
@pytest.mark.parametrize("blank", [" ", "\t\n", "   "])
def test_a_blank_key_counts_as_no_key(blank: str) -> None:
    for gate in (
        LiveGate(api_key=blank, spend=True),
        LiveGate(api_key=SecretStr(blank), spend=True),
        LiveGate.from_env({"DEEPSEEKBENCH_API_KEY": blank, "DEEPSEEKBENCH_SPEND": "1"}),
    ):
        assert gate.api_key is None and "api_key=unset" in repr(gate)
        err = gate.refusal("https://api.example.com/v1/chat/completions")
        assert err is not None and any(m.startswith("an API key") for m in err.missing)
    assert not EngineRoute(base_url="http://127.0.0.1:9/v1", model="m", api_key=blank).has_api_key
    # a blank "secret" would turn every space of a text into ***
    assert redact("a b c", [blank]) == "a b c"
    m = StreamMeasurement(text="two words")
    assert redact_measurement(m, [blank]).text == "two words"


def test_a_key_with_surrounding_whitespace_is_sent_stripped() -> None:
    gate = LiveGate(api_key=f"  {SECRET}\n", spend=True)
    assert gate.api_key is not None and gate.api_key.get_secret_value() == SECRET


# -- terminal escapes in server text ---------------------------------------------------
def _measurement(message: str = "boom") -> StreamMeasurement:
    err = StreamError(kind=ErrorKind.http_status, message=message)
    return StreamMeasurement(error=err, errors=[err])


def test_escape_sequences_in_a_server_error_are_escaped_in_the_record() -> None:
    m = redact_measurement(_measurement(f"HTTP 500: {ESC}bad {SECRET}"), [SECRET])
    assert m.error is not None
    assert "\x1b" not in m.error.message and "\x07" not in m.error.message
    assert "\\x1b[2J" in m.error.message and SECRET not in m.error.message
    assert all("\x1b" not in e.message for e in m.errors)


def test_escape_sequences_from_a_live_server_never_reach_stderr() -> None:
    body = orjson.dumps({"error": {"message": f"{ESC}overloaded \u202eevil"}})
    script = Script(
        status=500, headers={"content-type": "application/json"}, writes=(Write(0, body),)
    )

    async def go() -> StreamMeasurement:
        async with replay_server(script) as server:
            route = EngineRoute(base_url=server.base_url, model="m")
            return await measure_streamed(REQ, route=route, gate=LiveGate())

    m = anyio.run(go)
    assert m.error is not None and "overloaded" in m.error.message
    assert not any(ch in m.error.message for ch in ("\x1b", "\x07", "\u202e"))


def test_printable_escapes_every_control_character() -> None:
    for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x202E, 0x200B]:
        ch = chr(code)
        if ch == "\t":
            continue
        out = printable(f"a{ch}b")
        assert ch not in out and out.startswith("a\\") and out.endswith("b"), hex(code)
    assert printable("plain text, ünïcode ✓\tok") == "plain text, ünïcode ✓\tok"
    assert printable("two\nlines", keep_newlines=True) == "two\nlines"
    assert safe_server_text(f"{SECRET}\x1b", [SECRET]) == "***\\x1b"


def test_the_cli_error_summary_escapes_server_text() -> None:
    from deepseekbench._cli._output import write_error_summary

    class Summary:
        route, kind, count = "off", "http_status", 1
        first_message = f"{ESC}{SECRET}"

    class Result:
        def error_summary(self) -> list[Summary]:
            return [Summary()]

    err = io.StringIO()
    write_error_summary(Result(), err, [SECRET])  # type: ignore[arg-type]
    assert "\x1b" not in err.getvalue() and SECRET not in err.getvalue()
    assert "***" in err.getvalue()


# -- a proxy on any transport the library builds, or on a wrapper ---------------------
_OFF_LOOPBACK: list[str] = []  # connects this module's guard refused


def _loopback_guard(event: str, args: tuple[object, ...]) -> None:
    """Refuse (and record) any in-process connect to a non-loopback address."""
    if event != "socket.connect" or len(args) < 2:
        return
    address = args[1]
    if isinstance(address, tuple) and address and isinstance(address[0], str):
        host = address[0]
        if not (host.startswith("127.") or host in ("::1", "localhost")):
            _OFF_LOOPBACK.append(host)
            raise PermissionError(f"test guard: connect to {host} refused")


sys.addaudithook(_loopback_guard)


@pytest.fixture
def no_packet_leaves() -> Iterator[None]:
    _OFF_LOOPBACK.clear()
    yield
    assert _OFF_LOOPBACK == [], f"connects off loopback: {_OFF_LOOPBACK}"


class Wrapper(httpx.AsyncBaseTransport):
    """A caller's wrapper (retries, logging, …) around another transport."""

    def __init__(self, wrapped: httpx.AsyncBaseTransport) -> None:
        self.wrapped = wrapped

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.wrapped.handle_async_request(request)


def _refused_through(transport: httpx.AsyncBaseTransport) -> None:
    async def go() -> None:
        async with LiveGate().client(transport=transport) as client:
            with pytest.raises(LiveGateError, match=r"192\.0\.2\.1.*proxy"):
                await client.get("http://127.0.0.1:9/health")

    anyio.run(go)


def test_a_proxy_inside_a_wrapper_transport_is_refused(no_packet_leaves: None) -> None:
    _refused_through(Wrapper(Wrapper(httpx.AsyncHTTPTransport(proxy="http://192.0.2.1:3128"))))


def test_a_proxy_on_the_librarys_aiohttp_transport_is_refused(no_packet_leaves: None) -> None:
    from deepseekbench._net._transport import BenchTransport

    async def go() -> None:
        transport = BenchTransport()  # picks aiohttp on this asyncio loop
        inner = transport._pick()
        inner._inner.proxy = httpx.Proxy("http://192.0.2.1:3128")  # type: ignore[attr-defined]
        async with LiveGate().client(transport=transport) as client:
            with pytest.raises(LiveGateError, match=r"192\.0\.2\.1.*proxy"):
                await client.get("http://127.0.0.1:9/health")

    anyio.run(go)


def test_a_proxy_on_an_aiohttp_session_is_refused(no_packet_leaves: None) -> None:
    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    async def go() -> None:
        session = aiohttp.ClientSession(proxy="http://192.0.2.1:3128")
        async with LiveGate().client(transport=Wrapper(AiohttpTransport(client=session))) as c:
            with pytest.raises(LiveGateError, match=r"192\.0\.2\.1.*proxy"):
                await c.get("http://127.0.0.1:9/health")
        await session.close()

    anyio.run(go)


def test_env_proxies_of_a_trust_env_session_are_checked(
    monkeypatch: pytest.MonkeyPatch, no_packet_leaves: None
) -> None:
    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.1:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def go(expect_refusal: bool) -> None:
        async with replay_server(Script(headers={}, writes=(Write(0, b"ok"),))) as server:
            session = aiohttp.ClientSession(trust_env=True)
            transport = AiohttpTransport(client=session)
            async with LiveGate().client(transport=transport) as client:
                if expect_refusal:
                    with pytest.raises(LiveGateError, match=r"192\.0\.2\.1.*proxy"):
                        await client.get(f"{server.base_url}/health")
                else:  # NO_PROXY covers the host: aiohttp goes direct, the gate admits
                    assert (await client.get(f"{server.base_url}/health")).text == "ok"
            await session.close()

    anyio.run(go, True)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    anyio.run(go, False)


# -- ray_address = "auto" is resolved before the gate judges it -----------------------
def test_auto_resolves_like_ray_and_is_judged_by_the_resolved_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deepseekbench._execute._ray_executor import ray_address_refusal, resolve_ray_address

    env = {"RAY_ADDRESS": "203.0.113.1:6379"}
    assert resolve_ray_address("auto", env) == "203.0.113.1:6379"
    resolved, err = ray_address_refusal("auto", LiveGate(), env)
    assert resolved == "203.0.113.1:6379" and err is not None
    assert err.host == "203.0.113.1" and "resolved from 'auto'" in str(err)
    # with key and spend the same address is admitted
    assert ray_address_refusal("auto", LiveGate(api_key="k", spend=True), env)[1] is None
    # a leftover cluster file, as `ray start` leaves it
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("198.51.100.7:6379\n")
    file_env = {"RAY_TMPDIR": str(tmp_path)}
    assert resolve_ray_address("auto", file_env) == "198.51.100.7:6379"
    assert ray_address_refusal("auto", LiveGate(), file_env)[1] is not None
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:6379\n")
    assert ray_address_refusal("auto", LiveGate(), file_env) == ("127.0.0.1:6379", None)
    # RAY_ADDRESS wins over the file, as in ray.init
    assert resolve_ray_address("auto", {**file_env, **env}) == "203.0.113.1:6379"
    # nothing to resolve: refused with one clear line, never "loopback"
    with pytest.raises(RayUnavailableError, match="found no cluster address"):
        resolve_ray_address("auto", {"RAY_TMPDIR": str(tmp_path / "none")})
    # a local instance ignores both
    assert resolve_ray_address(None, env) is None and resolve_ray_address("local", env) is None


async def _start(pool: RayPool) -> None:
    await pool.start()


def test_a_ray_pool_with_auto_is_refused_before_ray_is_touched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from deepseekbench._execute import _ray_executor

    def no_ray(local: bool = False) -> None:
        raise AssertionError("ray was imported before the gate judged the address")

    monkeypatch.setattr(_ray_executor, "_ray", no_ray)
    monkeypatch.setenv("RAY_ADDRESS", "203.0.113.1:6379")
    pool = RayPool(1, routes={}, gate=LiveGate(), address="auto")
    with pytest.raises(LiveGateError, match=r"203\.0\.113\.1"):
        anyio.run(_start, pool, backend="asyncio")
    assert pool.resolved_address is None


def test_the_local_ray_environment_scrubs_and_keeps_usage_statistics_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Our own guarantee, apart from Ray's: a release wheel's ``ray.init`` also turns usage
    statistics off, a nightly one does not, so the Ray process test cannot tell them apart."""
    from deepseekbench._execute._ray_executor import _local_ray_env

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")
    monkeypatch.setenv("HTTPS_PROXY", "http://192.0.2.1:3128")
    monkeypatch.setenv("RAY_ADDRESS", "203.0.113.1:6379")
    monkeypatch.setenv("DEEPSEEKBENCH_API_KEY", "sk-local-env-7f3")
    monkeypatch.delenv("NO_PROXY", raising=False)
    with _local_ray_env(("sk-local-env-7f3",)):
        assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
        assert os.environ["NO_PROXY"] == "*"
        for gone in ("HTTPS_PROXY", "RAY_ADDRESS", "DEEPSEEKBENCH_API_KEY"):
            assert gone not in os.environ, gone
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"  # stays off for the driver
    assert os.environ["HTTPS_PROXY"] == "http://192.0.2.1:3128"
    assert os.environ["RAY_ADDRESS"] == "203.0.113.1:6379"
    assert os.environ["DEEPSEEKBENCH_API_KEY"] == "sk-local-env-7f3"
    assert "NO_PROXY" not in os.environ


def test_the_dry_run_shows_the_resolved_ray_address_and_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deepseekbench._cli._main import main

    monkeypatch.setenv("RAY_ADDRESS", "203.0.113.1:6379")
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", str(ray_plan_file(tmp_path, "auto")), "--dry-run"], stdout=out, stderr=err)
    assert "ray cluster 203.0.113.1:6379: gate would refuse" in err.getvalue()
    assert code != 0
    # a local instance: shown as such, admitted (RAY_ADDRESS does not apply to it)
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", str(ray_plan_file(tmp_path, None)), "--dry-run"], stdout=out, stderr=err)
    assert "ray cluster local: admitted" in err.getvalue() and code == 0, err.getvalue()


def test_a_session_made_on_first_use_is_checked_before_that_use(
    monkeypatch: pytest.MonkeyPatch, no_packet_leaves: None
) -> None:
    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.1:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def go() -> None:
        transport = AiohttpTransport(client=lambda: aiohttp.ClientSession(trust_env=True))
        async with LiveGate().client(transport=transport) as client:
            with pytest.raises(LiveGateError, match=r"192\.0\.2\.1.*proxy"):
                await client.get("http://127.0.0.1:9/health")

    anyio.run(go)
