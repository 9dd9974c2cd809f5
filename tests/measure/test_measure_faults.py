"""Fault kinds beyond the shared samples, over real loopback sockets, on asyncio and trio."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import orjson
import pytest
from pydantic import SecretStr, ValidationError

from deepseekbench import (
    ChatRequest,
    Dialect,
    EngineRoute,
    ErrorKind,
    LiveGate,
    LiveGateError,
    ReasoningMode,
    Speculative,
    StreamMeasurement,
    Timeouts,
    measure_streamed,
)
from tests._replay import RecordedRequest, Script, Write, closed_port, replay_server

REQ = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 32}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def chunk(content: str | None = None, *, finish: str | None = None, **extra: Any) -> str:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    obj: dict[str, Any] = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    obj.update(extra)
    return "data: " + orjson.dumps(obj).decode() + "\n\n"


def usage(n: int, **extra: Any) -> str:
    obj = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n, **extra}}
    return "data: " + orjson.dumps(obj).decode() + "\n\n"


DONE = "data: [DONE]\n\n"


async def run(
    script: Script,
    *,
    timeouts: Timeouts | None = None,
    route_kw: dict[str, Any] | None = None,
    request: Any = None,
    gate: LiveGate | None = None,
) -> tuple[StreamMeasurement, list[RecordedRequest]]:
    async with replay_server(script) as server:
        route = EngineRoute(base_url=server.base_url, model="m", **(route_kw or {}))
        m = await measure_streamed(
            REQ if request is None else request,
            route=route,
            gate=gate or LiveGate(),
            timeouts=timeouts,
        )
        return m, server.requests


@pytest.mark.anyio
async def test_multiline_data_nospace_unknown_fields_bom() -> None:
    frames: list[str | bytes] = [
        b"\xef\xbb\xbf: hello\n",
        b'retry: 100\nfoo: bar\nevent: message\nid: 7\ndata:{"choices":[{"index":0,\n',
        b'data: "delta":{"content":"x"}}]}\n\n',
        chunk("y", finish="stop"),
        usage(2),
        DONE,
    ]
    m, _ = await run(Script.sse(frames))
    assert m.error is None, m.errors
    assert m.text == "xy"
    assert m.completion_tokens == 2


@pytest.mark.anyio
async def test_crlf_split_between_reads_and_cr_only() -> None:
    body = (chunk("a") + chunk("b", finish="stop") + usage(2) + DONE).replace("\n", "\r\n")
    cut = body.index("\r\n") + 1  # the CR ends one read, the LF opens the next
    m, _ = await run(Script.sse([body[:cut], body[cut:]], delay_ms=20))
    assert (m.text, m.error) == ("ab", None)
    m, _ = await run(Script.sse([body.replace("\r\n", "\r")]))
    assert (m.text, m.error) == ("ab", None)


@pytest.mark.anyio
async def test_invalid_json_is_recorded_and_reading_goes_on() -> None:
    frames = [chunk("a"), "data: {not json\n\n", "data: [1,2]\n\n", chunk("b", finish="stop")]
    m, _ = await run(Script.sse([*frames, usage(2), DONE]))
    assert m.text == "ab"
    assert m.error is not None and m.error.kind is ErrorKind.invalid_event
    assert [e.kind for e in m.errors] == [ErrorKind.invalid_event] * 2
    assert m.completion_tokens == 2 and m.finish_reason == "stop"


@pytest.mark.anyio
async def test_truncated_mid_event() -> None:
    m, _ = await run(Script.sse([chunk("a"), chunk("b", finish="stop"), 'data: {"choi']))
    assert m.text == "ab"
    assert m.error is not None and m.error.kind is ErrorKind.truncated


@pytest.mark.anyio
async def test_truncated_broken_chunked_body_and_close_framing() -> None:
    m, _ = await run(Script.sse([chunk("a"), chunk("b")], abort=True))
    assert m.text == "ab"
    assert m.error is not None and m.error.kind is ErrorKind.truncated
    m, _ = await run(Script.sse([chunk("a"), chunk("b")], framing="close"))
    assert m.error is not None and m.error.kind is ErrorKind.truncated
    assert m.tokens_estimated and m.completion_tokens is None
    assert m.estimated_completion_tokens == 2


@pytest.mark.anyio
async def test_finish_without_done_is_not_an_error() -> None:
    m, _ = await run(Script.sse([chunk("a", finish="stop"), usage(1)]))
    assert m.error is None and m.completion_tokens == 1 and not m.done


@pytest.mark.anyio
async def test_error_event_field_and_object_error() -> None:
    frames = [chunk("a"), 'event: error\ndata: {"message":"boom"}\n\n', chunk("b", finish="stop")]
    m, _ = await run(Script.sse([*frames, DONE]))
    assert m.error is not None and m.error.kind is ErrorKind.server_error_event
    assert "boom" in m.error.message and m.text == "ab"
    old = 'data: {"object":"error","message":"bad thing","type":"X","code":500}\n\n'
    m, _ = await run(Script.sse([chunk("a"), old]))
    assert m.error is not None and m.error.kind is ErrorKind.server_error_event
    assert "bad thing" in m.error.message


@pytest.mark.anyio
async def test_first_token_timeout_keeps_what_came() -> None:
    # margins a busy machine cannot cross: the head and the ping come at once, well
    # inside the deadline; the late chunk long after it, cut before it came
    script = Script(writes=(Write(0, b": ping\n\n"), Write(30_000, chunk("late").encode())))
    m, _ = await run(script, timeouts=Timeouts(first_token_s=2.0))
    assert m.error is not None and m.error.kind is ErrorKind.timeout
    assert m.status_code == 200 and m.ttft_ms is None and m.text == ""


@pytest.mark.anyio
async def test_first_token_deadline_lifted_after_first_token() -> None:
    # "a" at once, well inside the first-token deadline; "b" past it
    frames = [Write(0, chunk("a").encode()), Write(2500, chunk("b", finish="stop").encode())]
    m, _ = await run(
        Script(writes=(*frames, Write(0, DONE.encode()))), timeouts=Timeouts(first_token_s=1.0)
    )
    assert m.error is None and m.text == "ab"


@pytest.mark.anyio
async def test_total_timeout_keeps_partial_data() -> None:
    # "a" at once, well inside the total deadline; "b" long after it, cut before it came
    script = Script(writes=(Write(0, chunk("a").encode()), Write(30_000, chunk("b").encode())))
    m, _ = await run(script, timeouts=Timeouts(total_s=2.0))
    assert m.error is not None and m.error.kind is ErrorKind.timeout
    assert m.text == "a" and m.ttft_ms is not None


@pytest.mark.anyio
async def test_a_server_silent_after_done_is_given_up_by_the_drain_bound_not_a_fault() -> None:
    # [DONE] and two lines after it at once, the last one unterminated; then the body never
    # ends: the drain's 1 s bound (on the measurement's one cancel scope) gives up without a
    # fault, and both lines are counted (the unterminated one when the decoder is flushed)
    frames = [chunk("a", finish="stop"), DONE, "data: after\n", "data: unterminated"]
    script = Script(writes=(*(Write(0, f.encode()) for f in frames), Write(30_000, b": x\n\n")))
    m, _ = await run(script, timeouts=Timeouts(first_token_s=20.0, total_s=25.0))
    assert m.error is None and m.errors == [] and m.text == "a" and m.done
    assert m.sse_ignored_lines == 2


@pytest.mark.anyio
async def test_a_total_deadline_before_the_drain_bound_is_a_timeout() -> None:
    # the total deadline (0.5 s) passes before the drain's 1 s bound would: recorded as
    # the total timeout, with the answer kept
    frames = [chunk("a", finish="stop"), DONE]
    script = Script(writes=(*(Write(0, f.encode()) for f in frames), Write(30_000, b": x\n\n")))
    m, _ = await run(script, timeouts=Timeouts(total_s=0.5))
    assert m.error is not None and m.error.kind is ErrorKind.timeout
    assert "total_s" in m.error.message


@pytest.mark.anyio
async def test_no_response_head_times_out() -> None:
    m, _ = await run(Script(head_delay_ms=3000), timeouts=Timeouts(first_token_s=0.3))
    assert m.error is not None and m.error.kind is ErrorKind.timeout and m.status_code is None


@pytest.mark.anyio
async def test_connect_refused() -> None:
    port = await closed_port()
    route = EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model="m")
    m = await measure_streamed(REQ, route=route, gate=LiveGate())
    assert m.error is not None and m.error.kind is ErrorKind.connect
    assert m.text == "" and m.http_status is None


@pytest.mark.anyio
async def test_connect_timeout() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=request)

    gate = LiveGate()
    async with gate.client(transport=httpx.MockTransport(handler)) as client:
        route = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m")
        m = await measure_streamed(REQ, route=route, gate=gate, client=client)
    assert m.error is not None and m.error.kind is ErrorKind.timeout
    assert "connect" in m.error.message


def _json_error(status: int, message: str) -> Script:
    """A server answering ``status`` with an OpenAI-style JSON error body."""
    body = orjson.dumps({"error": {"message": message, "code": status}})
    return Script(
        status=status, headers={"content-type": "application/json"}, writes=(Write(0, body),)
    )


@pytest.mark.anyio
async def test_http_error_body_message_without_key() -> None:
    secret = "sk-test-SECRET-123"
    script = _json_error(401, f"bad key {secret}")
    m, reqs = await run(script, route_kw={"api_key": SecretStr(secret)})
    assert m.http_status == 401 and m.error is not None
    assert m.error.kind is ErrorKind.http_status
    assert "bad key" in m.error.message and secret not in m.model_dump_json()
    assert reqs[0].headers["authorization"] == f"Bearer {secret}"


@pytest.mark.anyio
async def test_gate_key_echoed_in_an_error_body_is_redacted() -> None:
    secret = "sk-gate-SECRET-456"
    m, _ = await run(_json_error(403, f"Bearer {secret} rejected"), gate=LiveGate(api_key=secret))
    assert m.error is not None and "rejected" in m.error.message
    assert secret not in m.model_dump_json() and secret not in repr(m)


@pytest.mark.anyio
async def test_non_sse_content_type_is_recorded() -> None:
    # a complete event stream under another type is measured and flagged (docs/measurement.md)
    script = Script.sse([chunk("a", finish="stop"), DONE], headers={"content-type": "text/plain"})
    m, _ = await run(script)
    assert m.text == "a"
    assert m.error is None, m.errors
    assert m.unexpected_content_type == "text/plain"


@pytest.mark.anyio
async def test_continuous_usage_gives_tokens_per_chunk() -> None:
    def c(text: str, n: int) -> str:
        return chunk(text, usage={"prompt_tokens": 3, "completion_tokens": n})

    frames = [c("ab", 1), c("cde", 4), c("fgh", 7), chunk(None, finish="stop"), usage(7), DONE]
    m, reqs = await run(
        Script.sse(frames, delay_ms=30), route_kw={"continuous_usage": True, "dialect": "vllm"}
    )
    assert m.error is None
    assert m.tokens_per_chunk == [1, 3, 3]
    assert m.itl_per_token_ms is not None and len(m.itl_per_token_ms) == 6
    assert m.itl_per_token_ms[0] == pytest.approx(m.itl_ms[0] / 3)
    assert m.tpot_ms == pytest.approx((m.e2e_ms - m.ttft_ms) / 6)  # type: ignore[operator]
    sent = orjson.loads(reqs[0].body)
    assert sent["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}


@pytest.mark.anyio
async def test_tool_calls_count_as_tokens_and_role_frame_does_not() -> None:
    role = 'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
    tool = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}
    tool_chunk = (
        'data: {"choices":[{"index":0,"delta":{"tool_calls":['
        + orjson.dumps(tool).decode()
        + "]}}]}\n\n"
    )
    script = Script(
        writes=(
            Write(0, role.encode()),
            Write(150, tool_chunk.encode()),
            Write(0, chunk(None, finish="tool_calls").encode()),
            Write(0, DONE.encode()),
        )
    )
    m, _ = await run(script)
    assert m.ttft_ms is not None and m.ttft_ms >= 140
    assert m.finish_reason == "tool_calls" and m.tokens_estimated


@pytest.mark.anyio
async def test_token_ids_and_prediction_counts_stay_apart() -> None:
    frames = [
        chunk("a", choices=[{"index": 0, "delta": {"content": "a"}, "token_ids": [5, 6]}]),
        chunk(None, finish="stop"),
        usage(
            2,
            completion_tokens_details={
                "accepted_prediction_tokens": 4,
                "rejected_prediction_tokens": 1,
            },
        ),
        DONE,
    ]
    m, _ = await run(Script.sse(frames))
    assert m.token_ids == [5, 6]
    assert (m.accepted_prediction_tokens, m.rejected_prediction_tokens) == (4, 1)
    assert m.accepted_token_ratio is None and m.acceptance is None


@pytest.mark.anyio
async def test_request_body_per_dialect_and_gate_charge() -> None:
    frames = [chunk("a"), chunk("b", finish="stop"), usage(2), DONE]
    gate = LiveGate()
    req = ChatRequest(
        messages=({"role": "user", "content": "x"},), reasoning_mode=ReasoningMode.think_max
    )
    m, reqs = await run(
        Script.sse(frames),
        route_kw={"dialect": Dialect.sglang, "speculative": Speculative.mtp, "label": "s"},
        request=req,
        gate=gate,
    )
    sent = orjson.loads(reqs[0].body)
    assert reqs[0].path == "/v1/chat/completions"
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    # current SGLang refuses return_meta_info on a streamed request (HTTP 400)
    assert "return_meta_info" not in sent and sent["model"] == "m"
    assert sent["return_spec_tokens_details"] is True
    assert sent["chat_template_kwargs"] == {"thinking": True, "reasoning_effort": "max"}
    assert gate.output_tokens_charged == 2 and gate.requests_admitted == 1
    assert m.speculative is Speculative.mtp and m.route_label == "s"


@pytest.mark.anyio
async def test_closed_gate_raises_before_any_connection() -> None:
    async with replay_server(Script.sse([DONE])) as server:
        route = EngineRoute(base_url=server.base_url, model="m")
        with pytest.raises(LiveGateError):
            await measure_streamed(REQ, route=route, gate=LiveGate(max_requests=0))
        spent = LiveGate(max_output_tokens=0)
        with pytest.raises(LiveGateError):
            await measure_streamed(REQ, route=route, gate=spent)
        gate = LiveGate()
        async with gate.client() as client:  # a shared client hits the gate too
            with pytest.raises(LiveGateError):
                await measure_streamed(
                    REQ, route=route, gate=LiveGate(max_requests=0), client=client
                )
        async with httpx.AsyncClient() as plain:
            with pytest.raises(LiveGateError):
                await measure_streamed(REQ, route=route, gate=gate, client=plain)
        with pytest.raises(ValidationError):
            await measure_streamed({"messages": []}, route=route, gate=gate)
        assert server.connections == 0
    remote = EngineRoute(base_url="http://203.0.113.7:8000/v1", model="m")
    with pytest.raises(LiveGateError) as info:
        await measure_streamed(REQ, route=remote, gate=LiveGate())
    assert "203.0.113.7" in str(info.value)


@pytest.mark.anyio
async def test_many_concurrent_calls_share_one_client() -> None:
    def script_for(request: RecordedRequest) -> Script:
        word = orjson.loads(request.body)["messages"][0]["content"]
        return Script.sse([chunk(word), chunk("!", finish="stop"), usage(2), DONE], delay_ms=5)

    gate = LiveGate()
    results: dict[int, StreamMeasurement] = {}
    async with replay_server(script_for) as server, gate.client() as client:
        route = EngineRoute(base_url=server.base_url, model="m")

        async def one(i: int) -> None:
            req = {"messages": [{"role": "user", "content": f"w{i}"}]}
            results[i] = await measure_streamed(req, route=route, gate=gate, client=client)

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
    assert all(results[i].text == f"w{i}!" and results[i].error is None for i in range(16))
    assert gate.output_tokens_charged == 32
