"""Teacher forcing on the sampled token ids: positions align by construction.

A route may sample a non-canonical tokenization (``a`` + ``b`` where the tokenizer
writes ``ab``); its text re-tokenized gives other positions. Scored on the ids, ``off``
scores exactly the sampled tokens. A vLLM-shaped server (a mock transport, no network)
shows both paths on one output; the embedded engine serves the same wire on loopback
(asyncio and trio).
"""

from __future__ import annotations

import math
from typing import Any

import httpx
import orjson
import pytest

from deepseekbench import ChatRequest, Dialect, EmbeddedEngine, EngineConfig, EngineRoute, LiveGate
from deepseekbench._analysis._witness import _category, _ranked
from deepseekbench._execute._teacher_force import score_output
from deepseekbench._execute._teacher_force_ids import (
    completions_url,
    id_scoring_body,
    parse_id_logprobs,
    score_token_ids,
)
from deepseekbench._types._margin import TopLogprob
from deepseekbench._types._scored import ScoredOutput, ScoredPosition
from tests.engine_embedded.test_server import FREE


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``anyio`` test here runs under asyncio and under trio."""
    return str(request.param)


OFF = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m", dialect=Dialect.vllm)
REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, seed=3)
PROMPT_IDS = [1, 2, 3]
PIECES = {10: "a", 11: "b", 12: "ab", 13: "c"}
"""A vocabulary where ``ab`` is one token: the canonical tokenization of ``abc`` is
``[12, 13]``; the route sampled ``[10, 11, 13]``."""
SAMPLED = [10, 11, 13]
CANONICAL = [12, 13]


def _logprob(position: int, tid: int) -> float:
    """The mock's logprob of ``tid`` after ``position`` tokens: distinct per position."""
    return -0.1 * (position + 1) - 0.01 * (tid - 9)


def _entries(ids: list[int]) -> list[Any]:
    out: list[Any] = [None]
    for i, tid in enumerate(ids[1:], start=1):
        alts = {str(t): {"logprob": _logprob(i, t), "rank": 1, "decoded_token": PIECES.get(t, "?")}
                for t in (tid, 12, 13)}  # fmt: skip
        out.append(alts)
    return out


def _vllm(request: httpx.Request) -> httpx.Response:
    """A vLLM-shaped server: chat answers its prompt ids (and, continuing a final
    message, re-tokenizes it canonically); completions score a token-id prompt."""
    body = orjson.loads(request.content)
    usage = {"prompt_tokens": 3, "completion_tokens": 1}
    if request.url.path.endswith("/chat/completions"):
        ids = list(PROMPT_IDS)
        if body.get("continue_final_message"):
            ids += CANONICAL  # "abc" re-tokenized
        out: dict[str, Any] = {"prompt_token_ids": ids, "usage": usage, "choices": []}
        if body.get("prompt_logprobs") is not None:
            out["prompt_logprobs"] = _entries(ids)
        return httpx.Response(200, json=out)
    ids = body["prompt"]
    return httpx.Response(
        200, json={"choices": [{"prompt_logprobs": _entries(ids)}], "usage": usage}
    )


async def _both() -> tuple[ScoredOutput | str, ScoredOutput | str, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _vllm(request)

    gate = LiveGate()
    async with gate.client(transport=httpx.MockTransport(handler)) as client:
        kw: dict[str, Any] = {"top_k": 2, "client": client, "gate": gate, "timeout_s": 5,
                              "max_bytes": 1 << 20}  # fmt: skip
        by_ids = await score_token_ids(OFF, REQUEST, SAMPLED, **kw)
        by_text = await score_output(OFF, REQUEST, "abc", **kw)
    return by_ids, by_text, seen


@pytest.mark.anyio
async def test_a_non_canonical_output_is_scored_at_the_sampled_positions() -> None:
    by_ids, by_text, seen = await _both()
    assert isinstance(by_ids, ScoredOutput) and by_ids.scored_by == "token_ids"
    assert [p.token_id for p in by_ids.positions] == SAMPLED
    start = len(PROMPT_IDS)
    expected = [_logprob(start + j, t) for j, t in enumerate(SAMPLED)]
    assert [p.logprob for p in by_ids.positions] == pytest.approx(expected)
    assert [p.token for p in by_ids.positions] == ["a", "b", "c"]
    # the text path re-tokenizes "abc" as "ab" + "c": other positions, other tokens
    assert isinstance(by_text, ScoredOutput) and by_text.scored_by == "text"
    assert [p.token for p in by_text.positions] == ["ab", "c"]
    chat, scoring = (orjson.loads(r.content) for r in seen[:2])
    assert chat["return_token_ids"] and chat["max_tokens"] == 1 and not chat["stream"]
    assert chat["messages"] == [{"role": "user", "content": "hi"}]  # the prompt alone
    assert str(seen[1].url) == completions_url(OFF)
    assert scoring == id_scoring_body(OFF, PROMPT_IDS, SAMPLED, top_k=2)


def test_a_short_or_unkeyed_answer_is_a_reason_never_a_guess() -> None:
    sent = [*PROMPT_IDS, *SAMPLED]
    short = {"choices": [{"prompt_logprobs": _entries(sent)[:-1]}]}
    assert "entries for 6 prompt tokens" in str(parse_id_logprobs(short, sent, SAMPLED, top_k=2))
    wrong = _entries(sent)
    wrong[-1] = {"12": {"logprob": -1.0, "rank": 1, "decoded_token": "ab"}}
    got = parse_id_logprobs({"prompt_logprobs": wrong}, sent, SAMPLED, top_k=2)
    assert isinstance(got, str) and "id 13" in got and "not among" in got
    assert "no prompt_logprobs" in str(parse_id_logprobs({}, sent, SAMPLED, top_k=2))


def test_the_witness_finds_the_token_by_id_where_pieces_collide() -> None:
    """Two byte-fallback pieces both decode to U+FFFD: only the id tells them apart."""
    top = (TopLogprob(token="\ufffd", logprob=math.log(0.6)),
           TopLogprob(token="\ufffd", logprob=math.log(0.3)))  # fmt: skip
    pos = ScoredPosition(token="\ufffd", token_bytes="\ufffd".encode(), logprob=math.log(0.3),
                         top=top, token_id=6, top_ids=(5, 6))  # fmt: skip
    ranked, ids = _ranked(pos, 20)
    assert _category(pos, ranked, ids) == 1
    blind = pos.model_copy(update={"token_id": None, "top_ids": None})
    ranked, ids = _ranked(blind, 20)
    assert _category(blind, ranked, ids) == 0  # by bytes: the first piece that matches


async def _sampled_ids(route: EngineRoute, client: httpx.AsyncClient) -> tuple[str, list[int]]:
    """A sampled streamed output and the ids its chunks carried (``return_token_ids``)."""
    body = route.build_body(
        ChatRequest(
            messages=[{"role": "user", "content": "Reverse the word planet."}],
            max_tokens=40,
            temperature=0.7,
            seed=11,
        )
    )
    assert body["return_token_ids"] is True
    text, ids = "", list[int]()
    async with client.stream("POST", route.chat_url, json=body) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in orjson.loads(line[6:])["choices"]:
                text += choice.get("delta", {}).get("content") or ""
                ids += choice.get("token_ids") or []
    return text, ids


@pytest.mark.anyio
async def test_the_embedded_engine_serves_the_ids_wire_as_the_text_one() -> None:
    async with EmbeddedEngine(EngineConfig(cost=FREE)) as engine:
        route = EngineRoute(base_url=engine.base_url, model="deepseekbench-ref", dialect="vllm")
        gate = LiveGate()
        async with gate.client(timeout=30) as client:
            text, ids = await _sampled_ids(route, client)
            kw: dict[str, Any] = {"top_k": 5, "client": client, "gate": gate, "timeout_s": 30,
                                  "max_bytes": 8 << 20}  # fmt: skip
            by_ids = await score_token_ids(
                route,
                REQUEST.model_copy(
                    update={"messages": ({"role": "user", "content": "Reverse the word planet."},)}
                ),
                ids,
                **kw,
            )
            by_text = await score_output(
                route,
                ChatRequest(messages=[{"role": "user", "content": "Reverse the word planet."}]),
                text,
                **kw,
            )
    assert isinstance(by_ids, ScoredOutput) and isinstance(by_text, ScoredOutput), (by_ids, by_text)
    assert len(ids) >= len(text) > 0  # one id per character, the end token last when stopped
    assert [p.token_id for p in by_ids.positions] == ids
    for a, b in zip(by_ids.positions, by_text.positions, strict=False):
        assert (a.token, a.top) == (b.token, b.top) and a.logprob == pytest.approx(b.logprob)
