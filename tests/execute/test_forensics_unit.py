"""The margin follow-up (forensics) against engines that serve no logprobs or fail."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench import ChatRequest, Dialect, DivergenceKind, EngineRoute, LiveGate
from deepseekbench._execute._forensics import explain_divergences, follow_up_body
from deepseekbench._records._follow_up import FollowUp

OFF = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m", dialect=Dialect.vllm)
REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, seed=3)


def explain(handler: Any, candidate_text: str = "ab") -> Any:
    gate = LiveGate()

    async def main() -> Any:
        async with gate.client(transport=httpx.MockTransport(handler)) as client:
            follow = [FollowUp("p1", "mtp", REQUEST, candidate_text)]
            return await explain_divergences(follow, off=OFF, gate=gate, client=client, timeout_s=5)

    ((_, margin),) = anyio.run(main)
    return margin


def answer(content: list[dict[str, Any]] | None) -> httpx.Response:
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": "aa"}}
    choice["logprobs"] = None if content is None else {"content": content}
    return httpx.Response(200, json={"choices": [choice], "usage": {"completion_tokens": 2}})


def test_an_engine_without_logprobs_gives_no_margin_never_a_guess() -> None:
    m = explain(lambda request: answer(None))
    assert m.kind is DivergenceKind.unexplained and m.margin_nats is None
    assert "no logprobs" in m.note


@pytest.mark.parametrize("status", [400, 500, 503])
def test_an_http_error_gives_no_margin(status: int) -> None:
    m = explain(lambda request: httpx.Response(status, json={"error": {"message": "x"}}))
    assert m.margin_nats is None and f"HTTP {status}" in m.note


def test_a_transport_failure_gives_no_margin() -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    m = explain(fail)
    assert m.margin_nats is None and "ConnectError" in m.note


def test_the_follow_up_asks_off_for_logprobs_greedily_unstreamed() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        top = [{"token": "a", "logprob": -0.30}, {"token": "b", "logprob": -0.32}]
        return answer(
            [
                {
                    "token": "a",
                    "logprob": -0.01,
                    "top_logprobs": [{"token": "a", "logprob": -0.01}],
                },
                {"token": "a", "logprob": -0.30, "top_logprobs": top},
            ]
        )

    m = explain(handler)
    assert m.kind is DivergenceKind.near_tie and m.token_index == 1
    assert m.margin_nats == pytest.approx(0.02)
    (body,) = seen
    assert body == follow_up_body(OFF, REQUEST)
    assert body["stream"] is False and body["temperature"] == 0 and body["logprobs"] is True
    assert body["seed"] == 3 and "stream_options" not in body


def test_a_spent_gate_budget_gives_no_margin_and_keeps_the_run() -> None:
    gate = LiveGate(max_requests=0)

    async def main() -> Any:
        transport = httpx.MockTransport(lambda request: answer(None))
        async with gate.client(transport=transport) as client:
            follow = [FollowUp("p1", "mtp", REQUEST, "ab")]
            return await explain_divergences(follow, off=OFF, gate=gate, client=client, timeout_s=5)

    ((_, m),) = anyio.run(main)
    assert m.margin_nats is None and "gate refused" in m.note
