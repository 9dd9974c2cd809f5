"""The margin follow-up (forensics) against engines that serve no logprobs or fail."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench import ChatRequest, Dialect, DivergenceKind, EngineRoute, LiveGate
from deepseekbench._execute._forensics import (
    explain_divergences,
    follow_up_body,
    off_profile,
    profile_off_outputs,
)
from deepseekbench._records._follow_up import FollowUp, ProfileFollowUp
from deepseekbench._types._margin import TopLogprob, parse_chat_logprobs
from deepseekbench._types._scored import ScoredOutput, ScoredPosition

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
    """A chat answer whose message.content is what its tokens spell (as a real engine's)."""
    text = "".join(str(e["token"]) for e in content) if content else "aa"
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
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


def _content(text: str, near: int, margin: float, runner: str = "z") -> list[dict[str, Any]]:
    """One char per token; at ``near`` the runner-up ``runner`` trails by ``margin`` nats."""
    out = []
    for i, ch in enumerate(text):
        lp = -0.01 - margin if i == near else -6.0
        top = [{"token": ch, "logprob": -0.01}, {"token": runner, "logprob": lp}]
        out.append({"token": ch, "logprob": -0.01, "top_logprobs": top})
    return out


def test_off_s_own_flip_is_charged_to_off_never_to_the_candidate() -> None:
    """off's alone answer spells the candidate's text: off's measured output flipped."""

    def handler(request: httpx.Request) -> httpx.Response:
        return answer(_content("abzd", 2, 0.01, "c"))  # off alone: "abzd"; measured: "abcd"

    gate = LiveGate()

    async def main() -> Any:
        async with gate.client(transport=httpx.MockTransport(handler)) as client:
            follow = [FollowUp("p1", "mtp", REQUEST, "abzd", other_text="abcd")]
            return await explain_divergences(
                follow, off=OFF, gate=gate, client=client, timeout_s=5, off_label="off"
            )

    ((_, m),) = anyio.run(main)
    assert m.candidate == "off" and m.token_index == 2 and m.candidate_token == "c"
    assert "off emitted" in m.describe()


def test_follow_ups_run_one_at_a_time() -> None:
    """Margins never depend on batching: never two follow-ups in flight."""
    in_flight = peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.sleep(0.01)
        in_flight -= 1
        return answer(_content("ab", 1, 0.01))

    gate = LiveGate()

    async def main() -> None:
        async with gate.client(transport=httpx.MockTransport(handler)) as client:
            follow = [FollowUp(f"p{i}", "mtp", REQUEST, "az") for i in range(6)]
            await explain_divergences(follow, off=OFF, gate=gate, client=client, timeout_s=5)
            prof = [ProfileFollowUp(f"p{i}", REQUEST, "ab") for i in range(6)]
            await profile_off_outputs(prof, off=OFF, gate=gate, client=client, timeout_s=5)

    anyio.run(main)
    assert peak == 1


def _scored(text: str, flip_at: int, shift: float) -> ScoredOutput:
    """off's one-pass score of ``text``: at ``flip_at`` the runner-up ``z`` leads by ``shift``."""
    positions = []
    for i, ch in enumerate(text):
        a, z = (-0.02, -0.02 + shift) if i == flip_at else (-0.01, -6.0)
        top = sorted(
            [TopLogprob(token=ch, logprob=a), TopLogprob(token="z", logprob=z)],
            key=lambda t: -t.logprob,
        )
        positions.append(
            ScoredPosition(token=ch, token_bytes=ch.encode(), logprob=a, top=tuple(top))
        )
    return ScoredOutput(positions=tuple(positions), top_k=5, logprobs_kind="raw")


@pytest.mark.parametrize("fail", [False, True])
def test_a_profile_holds_opportunities_shifts_and_the_verify_shape(fail: bool) -> None:
    gate = LiveGate()

    async def score(request: ChatRequest, text: str) -> ScoredOutput | str:
        return "HTTP 400" if fail else _scored(text, 2, 0.03)

    async def main() -> Any:
        transport = httpx.MockTransport(lambda r: answer(_content("abcd", 2, 0.01)))
        async with gate.client(transport=transport) as client:
            prof = [ProfileFollowUp("p1", REQUEST, "abcd")]
            return await profile_off_outputs(
                prof, off=OFF, gate=gate, client=client, timeout_s=5, score=score
            )

    ((_, p),) = anyio.run(main)
    assert p.reproduced and p.n_tokens == 4 and p.opportunities(0.05) == 1
    assert p.margins[0] == (2, pytest.approx(0.01))
    if fail:
        assert p.one_pass_note == "HTTP 400" and not p.shifts_nats
    else:  # decode margin 0.01 for "c"; one pass: "z" ahead by 0.03: shift 0.04
        assert p.shifts_nats[2] == pytest.approx(0.04) and max(p.shifts_nats) == p.shifts_nats[2]
        assert p.one_pass_top1(2) == "z"


def test_a_profile_of_an_output_off_does_not_reproduce_records_the_fork() -> None:
    p = off_profile(parse_chat_logprobs(answer(_content("abzd", 2, 0.2)).json()) or (), "abcd")
    assert not p.reproduced and p.fork_index == 2
    assert p.fork_margin_nats == pytest.approx(0.2)


def test_a_thinking_profile_passes_over_the_reasoning_markers() -> None:
    def entry(token: str, margin: float) -> dict[str, Any]:
        top = [{"token": token, "logprob": -0.1}, {"token": "~", "logprob": -0.1 - margin}]
        return {"token": token, "logprob": -0.1, "top_logprobs": top}

    content = [entry("<think>", 5), entry("ab", 0.01), entry("</think>", 5), entry("\n", 5)]
    content += [entry("cd", 0.02), entry("e", 3)]
    message = {"role": "assistant", "content": "cde", "reasoning_content": "ab"}
    body = {"choices": [{"index": 0, "message": message, "logprobs": {"content": content}}]}
    chat = parse_chat_logprobs(body)
    assert chat is not None and not chat.problem
    p = off_profile(chat, "abcde")  # reasoning then content, as parity compares it
    assert p.reproduced and [i for i, _ in p.margins] == [1, 4]
