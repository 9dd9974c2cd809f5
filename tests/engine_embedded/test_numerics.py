"""The embedded engine serves OpenAI logprobs; its numerics mode flips exactly near-ties."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench import DivergenceKind, EmbeddedEngine, EngineConfig, Speculative, reference_tasks
from deepseekbench._engine._numerics import NEAR_TIE_MAX_NATS
from deepseekbench._types._margin import align_divergence, parse_chat_logprobs
from tests.engine_embedded.test_server import FREE, body, running, stream

pytestmark = pytest.mark.anyio
LONG = {"max_tokens": 200, "ignore_eos": True}  # near-ties live past 128 chars of context


async def test_logprobs_in_openai_chat_format_whole_and_streamed() -> None:
    prompt = reference_tasks(4, seed=3)[0].prompt
    async with running() as (_, client):
        r = await client.post(
            "/v1/chat/completions", json=body(prompt, logprobs=True, top_logprobs=3)
        )
        evs = await stream(client, body(prompt, logprobs=True, top_logprobs=3))
        bad = await client.post("/v1/chat/completions", json=body(prompt, top_logprobs=3))
        plain = await client.post("/v1/chat/completions", json=body(prompt))
    js = r.json()
    choice = js["choices"][0]
    content = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == choice["message"]["content"]
    assert content[-1]["token"] == "" and choice["finish_reason"] == "stop"  # the EOS token
    for e in content:
        tops = e["top_logprobs"]
        assert 1 <= len(tops) <= 3 and tops[0]["token"] == e["token"]  # greedy: top-1 emitted
        assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
        assert e["bytes"] == list(e["token"].encode())
    pos = parse_chat_logprobs(js)
    assert pos is not None and all(p.margin_nats is not None for p in pos if len(p.top) > 1)
    streamed = [
        e for ev in evs if isinstance(ev, dict) for c in ev["choices"] for e in
        (c.get("logprobs") or {}).get("content", [])
    ]  # fmt: skip
    assert streamed == content
    assert bad.status_code == 400 and "top_logprobs" in bad.text
    assert "logprobs" not in plain.json()["choices"][0]


async def _texts(config: EngineConfig, prompts: list[str], **extra: Any) -> list[dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    async with EmbeddedEngine(config) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root, timeout=60) as client:

            async def one(i: int, p: str) -> None:
                r = await client.post("/v1/chat/completions", json=body(p, seed=7, **extra))
                out[i] = r.json()

            async with anyio.create_task_group() as tg:
                for i, p in enumerate(prompts):
                    tg.start_soon(one, i, p)
    return [out[i] for i in range(len(prompts))]


def _text(js: dict[str, Any]) -> str:
    return str(js["choices"][0]["message"]["content"])


async def _divergences(mtp: EngineConfig, off: EngineConfig, n: int) -> list[Any]:
    prompts = [t.prompt for t in reference_tasks(n, seed=11)]
    lp = {"logprobs": True, "top_logprobs": 5, **LONG}
    offs = await _texts(off, prompts, **lp)
    cands = await _texts(mtp, prompts, **LONG)
    plain = await _texts(off.model_copy(update={"numerics": False}), prompts, **LONG)
    assert [_text(o) for o in offs] == [_text(o) for o in plain]  # off's text never moves
    out = []
    for i, (o, c) in enumerate(zip(offs, cands, strict=True)):
        if _text(o) != _text(c):
            pos = parse_chat_logprobs(o)
            assert pos is not None
            out.append(
                align_divergence(pos, _text(c), prompt_id=f"p{i}", candidate="mtp", tau_nats=0.05)
            )
    return out


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_numerics_mode_mtp_flips_only_near_ties() -> None:
    off = EngineConfig(cost=FREE, numerics=True)
    mtp = off.model_copy(update={"speculative": Speculative.mtp, "draft_depth": 3})
    divs = await _divergences(mtp, off, 40)
    assert divs, "the numerics mode flipped nothing"
    for d in divs:
        assert d.kind is DivergenceKind.near_tie, d.describe()
        assert d.margin_nats is not None and 0 < d.margin_nats <= NEAR_TIE_MAX_NATS + 1e-9
        assert d.candidate_rank == 2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mistuned_route_diverges_decisively() -> None:
    off = EngineConfig(cost=FREE)
    bad = off.model_copy(
        update={"speculative": Speculative.mtp, "draft_depth": 3, "mistuned_draft": True}
    )
    divs = await _divergences(bad, off, 20)
    assert any(d.kind is DivergenceKind.decisive for d in divs)
    assert all(d.kind is not DivergenceKind.unexplained for d in divs)


def test_every_numerics_near_tie_is_served_as_a_near_tie_and_flipped_to_its_runner_up() -> None:
    import math

    from deepseekbench._engine._model import EOS_CH, context_of, reference_lm
    from deepseekbench._engine._numerics import NumericsLM

    lm = NumericsLM(reference_lm())
    seen = 0
    smoke = Path(__file__).parents[2] / "deepseekbench" / "data" / "smoke_tasks.jsonl"
    prompts = [orjson.loads(line)["prompt"] for line in smoke.read_bytes().splitlines()]
    for prompt in prompts + [t.prompt for t in reference_tasks(40, seed=5)]:
        ctx = context_of(prompt)
        for _ in range(300):  # greedy, EOS as a newline (ignore_eos), like the engine
            if lm.near_tie_margin(ctx) is not None:
                seen += 1
                ranked = sorted(lm.target(ctx).items(), key=lambda kv: (-kv[1], ord(kv[0])))
                assert ranked[0][0] == lm.target_argmax(ctx)
                assert ranked[1][0] == lm.verify_argmax(ctx)
                assert math.log(ranked[0][1]) - math.log(ranked[1][1]) <= NEAR_TIE_MAX_NATS
            else:
                assert lm.verify_argmax(ctx) == lm.target_argmax(ctx)
            ch = lm.target_argmax(ctx)
            ctx += "\n" if ch == EOS_CH else ch
    assert seen > 5
