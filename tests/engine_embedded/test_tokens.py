"""Token counting: the engine's /tokenize (through the gate) and a local tokenizer.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from deepseekbench import (
    Dialect,
    EmbeddedEngine,
    EndpointTokenCounter,
    EngineConfig,
    EngineRoute,
    HFTokenizerCounter,
    LiveGate,
    LiveGateError,
    StreamMeasurement,
    TokenizeError,
)
from deepseekbench._engine import FAST_COSTS
from deepseekbench._measure._tokens import recount_output, tokenize_url

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def route(dialect: Dialect = Dialect.vllm, base: str = "http://127.0.0.1:9/v1") -> EngineRoute:
    return EngineRoute(base_url=base, model="m", dialect=dialect)


def test_tokenize_url_is_at_the_server_root() -> None:
    assert tokenize_url(route()) == "http://127.0.0.1:9/tokenize"
    assert tokenize_url(route(base="http://127.0.0.1:9")) == "http://127.0.0.1:9/tokenize"


@pytest.mark.parametrize("dialect", [Dialect.vllm, Dialect.sglang, Dialect.llamacpp])
async def test_embedded_engine_tokenize_counts_characters(dialect: Dialect) -> None:
    gate = LiveGate()
    async with EmbeddedEngine(EngineConfig(cost=FAST_COSTS)) as engine, gate.client() as client:
        counter = EndpointTokenCounter(route(dialect, engine.base_url), gate=gate, client=client)
        assert await counter.count(["", "abc", "What is 3 × 4?"]) == [0, 3, 14]
        assert counter.name == f"endpoint:{engine.base_url.removesuffix('/v1')}/tokenize"
    assert gate.requests_admitted == 3


async def test_embedded_tokenize_messages_use_the_chat_template() -> None:
    async with EmbeddedEngine(EngineConfig(cost=FAST_COSTS)) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient() as client:
            r = await client.post(
                f"{root}/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}
            )
            assert r.json()["count"] == len("<|user|>hi\n<|assistant|>")
            bad = await client.post(f"{root}/tokenize", json={"text": "hi"})
            assert bad.status_code == 400


def mock_counter(
    handler: Any, dialect: Dialect = Dialect.vllm
) -> tuple[EndpointTokenCounter, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def wrapped(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        result: httpx.Response = handler(request)
        return result

    gate = LiveGate()
    client = gate.client(transport=httpx.MockTransport(wrapped))
    return EndpointTokenCounter(route(dialect), gate=gate, client=client), seen


async def test_request_shapes_per_dialect() -> None:
    ok = lambda r: httpx.Response(200, json={"tokens": [1, 2]})  # noqa: E731
    vllm, seen = mock_counter(ok)
    assert await vllm.count(["hello"]) == [2]
    assert seen == [{"model": "m", "prompt": "hello", "add_special_tokens": False}]
    llama, seen = mock_counter(ok, Dialect.llamacpp)
    assert await llama.count(["hello"]) == [2]
    # router-mode llama-server routes /tokenize by the body's model (400 without it)
    assert seen == [{"model": "m", "content": "hello", "add_special": False}]
    count_only, _ = mock_counter(lambda r: httpx.Response(200, json={"count": 7}))
    assert await count_only.count(["x"]) == [7]


@pytest.mark.parametrize(
    ("response", "needle"),
    [
        (httpx.Response(404, text="Not Found"), "HTTP 404"),
        (httpx.Response(200, text="<html>"), "did not answer JSON"),
        (httpx.Response(200, json={"ids": [1]}), "without a 'tokens' list"),
        (httpx.Response(200, json={"count": -1}), "without a 'tokens' list"),
    ],
)
async def test_bad_answers_raise_tokenize_error_naming_the_url(
    response: httpx.Response, needle: str
) -> None:
    counter, _ = mock_counter(lambda r: response)
    with pytest.raises(TokenizeError, match=needle) as info:
        await counter.count(["x"])
    assert info.value.source == "http://127.0.0.1:9/tokenize"
    assert "127.0.0.1:9/tokenize" in str(info.value)


async def test_transport_failure_is_a_tokenize_error() -> None:
    def boom(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    counter, _ = mock_counter(boom)
    with pytest.raises(TokenizeError, match="ConnectError"):
        await counter.count(["x"])


async def test_ungated_client_and_refused_host_are_refused_before_sending() -> None:
    gate = LiveGate()
    async with httpx.AsyncClient() as plain:
        with pytest.raises(LiveGateError, match="does not wrap"):
            await EndpointTokenCounter(route(), gate=gate, client=plain).count(["x"])
    calls: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json={"tokens": []})

    client = gate.client(transport=httpx.MockTransport(record))
    far = EngineRoute(base_url="https://api.example.com/v1", model="m")
    with pytest.raises(LiveGateError, match="API key"):
        await EndpointTokenCounter(far, gate=gate, client=client).count(["x"])
    assert calls == []


def write_tokenizer(path: Path) -> Path:
    """A tiny word-level tokenizer.json built here (no download)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3, ".": 4}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    out = path / "tokenizer.json"
    tok.save(str(out))
    return out


async def test_hf_tokenizer_counts_without_special_tokens(tmp_path: Path) -> None:
    file = write_tokenizer(tmp_path)
    counter = HFTokenizerCounter(file)
    assert await counter.count(["the cat sat.", "", "dog"]) == [4, 0, 1]
    assert HFTokenizerCounter(tmp_path).name == f"tokenizer.json:{file}"


def test_hf_tokenizer_bad_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(TokenizeError, match=r"missing\.json"):
        HFTokenizerCounter(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(TokenizeError, match=r"bad\.json"):
        HFTokenizerCounter(bad)


class FixedCounter:
    name = "fixed"

    def __init__(self, n: int) -> None:
        self.n = n

    async def count(self, texts: Any) -> list[int]:
        return [self.n for _ in texts]


async def test_recount_replaces_the_chunk_estimate_with_the_tokenizer_count() -> None:
    # 3 chunks of several tokens each (MTP): the chunk count under-counts
    m = StreamMeasurement(
        text="abcdefghi",
        tokens_estimated=True,
        estimated_completion_tokens=3,
        tokens_estimated_by="chunks",
        ttft_ms=10.0,
        e2e_ms=90.0,
        tpot_ms=40.0,
        output_toks_per_s=3 / 0.09,
    )
    r = await recount_output(m, FixedCounter(9))
    assert r.estimated_completion_tokens == 9
    assert r.tokens_estimated and r.tokens_estimated_by == "fixed"
    assert r.tpot_ms == pytest.approx(80.0 / 8)
    assert r.output_toks_per_s == pytest.approx(100.0)
    with_usage = m.model_copy(update={"completion_tokens": 9, "tokens_estimated": False})
    assert await recount_output(with_usage, FixedCounter(1)) is with_usage
