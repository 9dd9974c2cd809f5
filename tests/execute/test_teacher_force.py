"""Teacher forcing: one-pass scoring of a given output, its parse, its bounds, and the
embedded engine's vLLM-shaped ``prompt_logprobs`` (asyncio and trio)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from deepseekbench import ChatRequest, Dialect, EmbeddedEngine, EngineConfig, EngineRoute, LiveGate
from deepseekbench._engine._model import context_of, reference_lm
from deepseekbench._engine._numerics import VERIFY_PERTURBATION_NATS, NumericsLM
from deepseekbench._execute._teacher_force import (
    parse_prompt_logprobs,
    score_output,
    teacher_force_body,
    teacher_force_reason,
)
from deepseekbench._types._scored import ScoredOutput
from tests.engine_embedded.test_server import FREE


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``anyio`` test here runs under asyncio and under trio."""
    return str(request.param)


OFF = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m", dialect=Dialect.vllm)
REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, seed=3)


def _alt(lp: float | None, tok: str, rank: int = 1) -> dict[str, Any]:
    return {"logprob": lp, "rank": rank, "decoded_token": tok}


def _answer(tokens: list[tuple[int, str, float, int]], extra: list[Any] | None = None) -> Any:
    """A vLLM answer whose prompt is ``extra`` entries then ``tokens`` (id, text, lp, rank);
    each entry holds the forced token and a rival ``z`` (id 999) at -3.0."""
    entries: list[Any] = [None, *(extra or [])]
    for tid, tok, lp, rank in tokens:
        entries.append({str(tid): _alt(lp, tok, rank), "999": _alt(-3.0, "z", 2)})
    ids = [7] * (1 + len(extra or [])) + [t[0] for t in tokens]
    return {"prompt_logprobs": entries, "prompt_token_ids": ids}


def test_the_output_is_found_by_spelling_back_from_the_end() -> None:
    junk = {"5": _alt(float("nan"), "<")}  # the template's own tokens are never read
    body = _answer([(1, "<a>", -0.5, 1), (2, "he", -0.1, 1), (3, "llo", -4.0, 3)], [junk])
    out = parse_prompt_logprobs(body, "hello", top_k=1, kind="raw")
    assert isinstance(out, ScoredOutput) and out.text_bytes == b"hello"
    assert [p.token for p in out.positions] == ["he", "llo"]
    assert out.positions[0].top[0].token == "he"  # rank 1 within k=1
    assert [t.token for t in out.positions[1].top] == ["z"]  # rank 3 > k: left out of top
    assert out.positions[1].rank == 3 and out.logprobs_kind == "raw"


def test_without_token_ids_the_first_key_is_the_forced_token() -> None:
    body = _answer([(2, "he", -0.1, 1), (3, "llo", -4.0, 3)])
    del body["prompt_token_ids"]
    out = parse_prompt_logprobs(body, "hello", top_k=2)
    assert isinstance(out, ScoredOutput) and [p.logprob for p in out.positions] == [-0.1, -4.0]


@pytest.mark.parametrize(
    ("tokens", "text", "says"),
    [
        ([(2, "he", -0.1, 1), (3, "\ufffd", -0.2, 1)], "heé", "U+FFFD"),
        ([(2, "xhe", -0.1, 1), (3, "llo", -0.2, 1)], "hello", "straddles"),
        ([(2, "ha", -0.1, 1), (3, "llo", -0.2, 1)], "hello", "do not spell"),
        ([(3, "llo", -0.2, 1)], "hello", "prompt token 0: no logprobs"),
        ([(2, "he", 0.5, 1), (3, "llo", -0.2, 1)], "hello", "impossible"),
        ([(2, "he", float("inf"), 1), (3, "llo", -0.2, 1)], "hello", "impossible"),
    ],
)
def test_tokens_that_do_not_spell_the_output_give_a_reason_never_a_guess(
    tokens: list[tuple[int, str, float, int]], text: str, says: str
) -> None:
    out = parse_prompt_logprobs(_answer(tokens), text, top_k=2)
    assert isinstance(out, str) and says in out, out


def test_a_null_alternative_drops_that_alternative_a_null_forced_logprob_the_answer() -> None:
    body = _answer([(2, "he", -0.1, 1), (3, "llo", -0.2, 1)])
    body["prompt_logprobs"][-1]["999"]["logprob"] = None
    out = parse_prompt_logprobs(body, "hello", top_k=2)
    assert isinstance(out, ScoredOutput) and [t.token for t in out.positions[1].top] == ["llo"]
    body["prompt_logprobs"][-1]["3"]["logprob"] = None
    assert "null" in str(parse_prompt_logprobs(body, "hello", top_k=2))
    assert "no prompt_logprobs" in str(parse_prompt_logprobs({"choices": []}, "x", top_k=2))


def test_the_capability_lives_in_the_dialect() -> None:
    assert teacher_force_reason(OFF) is None
    for dialect, says in [(Dialect.llamacpp, "llama.cpp"), (Dialect.sglang, "SGLang")]:
        reason = teacher_force_reason(OFF.model_copy(update={"dialect": dialect}))
        assert reason is not None and says in reason


def test_the_body_continues_the_output_as_the_final_assistant_message() -> None:
    pinned = REQUEST.model_copy(update={"reach_max_tokens": True, "pinned_length": True})
    b = teacher_force_body(OFF, pinned, "abc", top_k=5)
    assert b["messages"][-1] == {"role": "assistant", "content": "abc"}
    assert b["continue_final_message"] is True and b["add_generation_prompt"] is False
    assert b["prompt_logprobs"] == 5 and b["max_tokens"] == 1 and b["stream"] is False
    assert b["temperature"] == 1.0 and b["top_p"] == 1.0 and b["top_k"] == -1
    assert "min_tokens" not in b and "stream_options" not in b and "logprobs" not in b
    with pytest.raises(ValueError, match="top_k"):
        teacher_force_body(OFF, REQUEST, "abc", top_k=21)


async def _score_with(handler: Any, timeout_s: float = 5, max_bytes: int = 1 << 20) -> Any:
    gate = LiveGate()
    async with gate.client(transport=httpx.MockTransport(handler)) as client:
        return await score_output(
            OFF, REQUEST, "hello", top_k=2, client=client, gate=gate,
            timeout_s=timeout_s, max_bytes=max_bytes,
        )  # fmt: skip


@pytest.mark.anyio
async def test_a_slow_answer_ends_at_the_deadline_and_a_huge_one_at_the_cap() -> None:
    async def drip() -> AsyncIterator[bytes]:
        for _ in range(1000):
            yield b" "
            await anyio.sleep(0.05)

    async def flood() -> AsyncIterator[bytes]:
        for _ in range(10_000):
            yield b" " * 65536

    with anyio.fail_after(20):  # the test's own bound; score_output must end long before
        slow = await _score_with(lambda r: httpx.Response(200, content=drip()), timeout_s=0.5)
        big = await _score_with(lambda r: httpx.Response(200, content=flood()), max_bytes=1 << 16)
    assert isinstance(slow, str) and "within 0.5 s" in slow
    assert isinstance(big, str) and "cap of 65536 bytes" in big
    declared = await _score_with(
        lambda r: httpx.Response(200, headers={"content-length": "999999999"}, content=b"{}"),
    )
    assert isinstance(declared, str) and "declares" in declared


@pytest.mark.anyio
async def test_http_errors_and_transport_failures_are_reasons() -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert "HTTP 400" in await _score_with(lambda r: httpx.Response(400, json={}))
    assert "ConnectError" in await _score_with(fail)
    assert "not JSON" in await _score_with(lambda r: httpx.Response(200, content=b"<html>"))


PROMPT = "Count from 38 to 52."  # its 300 greedy characters meet 3 near-ties


async def _greedy_then_scored(config: EngineConfig) -> tuple[dict[str, Any], Any]:
    async with EmbeddedEngine(config) as engine:
        route = EngineRoute(base_url=engine.base_url, model="deepseekbench-ref", dialect="vllm")
        gate = LiveGate()
        async with gate.client(timeout=30) as client:
            msgs = [{"role": "user", "content": PROMPT}]
            r = await client.post(
                route.chat_url,
                json={"model": route.model, "messages": msgs, "temperature": 0, "max_tokens": 300,
                      "ignore_eos": True, "logprobs": True, "top_logprobs": 2},
            )  # fmt: skip
            decoded = r.json()
            text = decoded["choices"][0]["message"]["content"]
            scored = await score_output(
                route, ChatRequest(messages=msgs), text, top_k=2, client=client, gate=gate,
                timeout_s=30, max_bytes=8 << 20,
            )  # fmt: skip
    return decoded, scored


def _same(p: Any, d: dict[str, Any]) -> None:
    """One-pass position ``p`` equals decode's logprobs entry ``d`` (token, logprob, top)."""
    assert p.token == d["token"] and math.isclose(p.logprob, d["logprob"], abs_tol=1e-12)
    assert [t.token for t in p.top] == [t["token"] for t in d["top_logprobs"]]
    for t, u in zip(p.top, d["top_logprobs"], strict=True):
        assert math.isclose(t.logprob, u["logprob"], abs_tol=1e-12)


@pytest.mark.anyio
async def test_the_embedded_engine_scores_off_output_in_one_pass_as_decode_does() -> None:
    decoded, scored = await _greedy_then_scored(EngineConfig(cost=FREE))
    assert isinstance(scored, ScoredOutput), scored
    content = decoded["choices"][0]["logprobs"]["content"]
    assert scored.text_bytes.decode() == decoded["choices"][0]["message"]["content"]
    assert len(scored.positions) == len(content) > 128
    for p, d in zip(scored.positions, content, strict=False):
        _same(p, d)
        assert p.rank == 1 or p.token == "\n"  # ignore_eos writes a line break for EOS


@pytest.mark.anyio
async def test_numerics_one_pass_scoring_flips_exactly_off_near_ties_to_the_runner_up() -> None:
    decoded, scored = await _greedy_then_scored(EngineConfig(cost=FREE, numerics=True))
    assert isinstance(scored, ScoredOutput), scored
    text = decoded["choices"][0]["message"]["content"]
    lm = NumericsLM(reference_lm())
    ctx = context_of(PROMPT)
    ties = {i for i in range(len(text)) if lm.near_tie_margin(ctx + text[:i]) is not None}
    assert ties, "the prompt meets no near-tie: pick a longer one"
    content = decoded["choices"][0]["logprobs"]["content"]
    for i, p in enumerate(scored.positions):
        if i in ties:  # the verify shape: off's own token ranks second, the runner-up first
            assert p.rank == 2 and p.top[1].token == p.token
            assert p.top[0].token == lm.verify_argmax(ctx + text[:i])
            assert 0 < p.top[0].logprob - p.logprob < VERIFY_PERTURBATION_NATS
        else:
            _same(p, content[i])


@pytest.mark.anyio
async def test_engines_that_cannot_are_refused_without_a_request() -> None:
    gate = LiveGate()
    calls: list[httpx.Request] = []

    def seen(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(500)

    async with gate.client(transport=httpx.MockTransport(seen)) as client:
        out = await score_output(
            OFF.model_copy(update={"dialect": Dialect.llamacpp}), REQUEST, "x", top_k=2,
            client=client, gate=gate, timeout_s=5, max_bytes=1024,
        )  # fmt: skip
    assert isinstance(out, str) and "llama.cpp" in out and not calls
