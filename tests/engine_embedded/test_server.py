"""The engine over real loopback sockets, under asyncio and trio."""

from __future__ import annotations

import argparse
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import h11
import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deepseekbench import (
    FAULT_HEADER,
    CostModel,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    Speculative,
    all_reference_tasks,
    reference_tasks,
)
from deepseekbench._engine import FAST_COSTS, add_serve_arguments, config_from_args, serve

pytestmark = pytest.mark.anyio

FREE = CostModel(
    prefill_ms_per_token=0,
    target_step_ms=0,
    verify_token_ms=0,
    draft_step_ms=0,
    batch_exponent=0,
)
"""No modelled cost at all: parity tests only care about outputs."""


@asynccontextmanager
async def running(**kw: Any) -> AsyncIterator[tuple[EmbeddedEngine, httpx.AsyncClient]]:
    kw.setdefault("cost", FAST_COSTS)
    async with EmbeddedEngine(EngineConfig(**kw)) as engine:
        root = engine.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root, timeout=httpx.Timeout(30, pool=None)) as client:
            yield engine, client


def body(prompt: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "deepseekbench-ref",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        **extra,
    }


def events(raw: str) -> list[Any]:
    """``data:`` payloads of an SSE body: JSON objects, or the string ``[DONE]``."""
    out: list[Any] = []
    for block in raw.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                out.append(data if data == "[DONE]" else orjson.loads(data))
    return out


def content_of(evs: list[Any], field: str = "content") -> str:
    return "".join(
        c["delta"].get(field) or ""
        for e in evs
        if isinstance(e, dict)
        for c in e.get("choices", [])
    )


async def stream(client: httpx.AsyncClient, payload: dict[str, Any], **kw: Any) -> list[Any]:
    r = await client.post("/v1/chat/completions", json={**payload, "stream": True}, **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/event-stream"
    return events(r.text)


async def test_stream_layout_and_multi_token_chunks() -> None:
    task = next(t for t in reference_tasks(8, seed=1) if t.category == "counting")
    async with running(speculative=Speculative.mtp) as (_, client):
        evs = await stream(client, body(task.prompt, stream_options={"include_usage": True}))
    first, *middle, finish, usage, done = evs
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert done == "[DONE]"
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == len(task.answer)
    assert content_of(evs) == task.answer
    assert max(len(e["choices"][0]["delta"]["content"]) for e in middle) >= 2


async def test_non_stream_models_health_and_metrics_routes() -> None:
    task = reference_tasks(1, seed=2)[0]
    async with running() as (_, client):
        r = await client.post("/v1/chat/completions", json=body(task.prompt))
        assert r.status_code == 200
        data = r.json()
        assert data["choices"][0]["message"]["content"] == task.answer
        assert data["usage"]["completion_tokens"] == len(task.answer)
        models = (await client.get("/v1/models")).json()
        assert models["data"][0]["id"] == "deepseekbench-ref"
        assert (await client.get("/health")).json() == {"status": "ok"}
        metrics = (await client.get("/metrics")).text
        assert "vllm:spec_decode_num_drafts_total" in metrics


def _metric(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} missing")


def _reported(dialect: Dialect, evs: list[Any]) -> tuple[int, int, int | None]:
    """(drafted, accepted, verify steps or None) as the dialect reports them."""
    objs = [e for e in evs if isinstance(e, dict)]
    if dialect is Dialect.vllm:
        sd = next(e["metrics"]["speculative_decoding"] for e in objs if "metrics" in e)
        assert sd["mean_acceptance_length"] == pytest.approx(
            1 + sd["num_accepted_draft_tokens"] / sd["num_spec_steps"]
        )
        assert sd["draft_acceptance_rate"] == pytest.approx(
            sd["num_accepted_draft_tokens"] / sd["num_draft_tokens"]
        )
        assert sum(sd["acceptance_histogram"]) == sd["num_spec_steps"]
        assert sum(sd["per_step_accepted"]) == sd["num_accepted_draft_tokens"]
        assert sum(sd["per_step_drafted"]) == sd["num_draft_tokens"]
        assert len(sd["per_step_accepted"]) == sd["num_spec_steps"]
        assert "usage" in next(e for e in objs if "metrics" in e)
        return sd["num_draft_tokens"], sd["num_accepted_draft_tokens"], sd["num_spec_steps"]
    if dialect is Dialect.sglang:
        tail = next(e for e in objs if "sglext" in e)
        assert tail["choices"] == []  # a trailing chunk of its own, as current SGLang sends
        meta = tail["sglext"]["spec_tokens_details"]
        assert meta["spec_accept_length"] == pytest.approx(
            1 + meta["spec_num_correct_drafts"] / meta["spec_verify_ct"]
        )
        return (
            meta["spec_num_proposed_drafts"],
            meta["spec_num_correct_drafts"],
            meta["spec_verify_ct"],
        )
    timings = next(e["timings"] for e in objs if "timings" in e)
    assert timings["predicted_n"] > 0 and timings["prompt_n"] > 0
    return timings["draft_n"], timings["draft_n_accepted"], None


@pytest.mark.parametrize("dialect", [Dialect.vllm, Dialect.sglang, Dialect.llamacpp])
async def test_dialect_acceptance_equals_counters_and_metrics(dialect: Dialect) -> None:
    tasks = reference_tasks(12, seed=5)
    extra = {"stream_options": {"include_usage": True}, "return_spec_tokens_details": True}
    async with running(speculative=Speculative.dspark, dialect=dialect) as (engine, client):
        results = [await stream(client, body(t.prompt, **extra)) for t in tasks]
        metrics = (await client.get("/metrics")).text
        counters = engine.counters
    reported = [_reported(dialect, evs) for evs in results]
    drafted = sum(r[0] for r in reported)
    accepted = sum(r[1] for r in reported)
    assert 0 < accepted < drafted
    assert (drafted, accepted) == (counters.num_draft_tokens, counters.num_accepted_tokens)
    assert _metric(metrics, "vllm:spec_decode_num_draft_tokens_total") == drafted
    assert _metric(metrics, "vllm:spec_decode_num_accepted_tokens_total") == accepted
    if dialect is not Dialect.llamacpp:
        steps = sum(r[2] or 0 for r in reported)
        assert steps == counters.num_drafts == _metric(metrics, "vllm:spec_decode_num_drafts_total")
    assert counters.requests == counters.finished == len(tasks)
    assert sum(counters.accepted_per_position) == accepted
    assert [content_of(evs) for evs in results] == [t.answer for t in tasks]


async def test_off_reports_no_acceptance_in_any_dialect() -> None:
    task = reference_tasks(1)[0]
    extra = {"stream_options": {"include_usage": True}, "return_spec_tokens_details": True}
    for dialect in (Dialect.vllm, Dialect.sglang, Dialect.llamacpp, Dialect.openai):
        async with running(dialect=dialect) as (engine, client):
            evs = await stream(client, body(task.prompt, **extra))
            assert engine.counters.num_draft_tokens == 0
        raw = orjson.dumps([e for e in evs if isinstance(e, dict)]).decode()
        for key in ("speculative_decoding", "spec_verify_ct", "draft_n"):
            assert key not in raw


async def _worker(port: int, jobs: list[tuple[int, str]], out: dict[int, str]) -> None:
    """A lean keep-alive client (h11 over one socket): httpx per-request overhead would
    dominate a 3,862-request test on a 2-core machine."""
    conn = h11.Connection(h11.CLIENT)
    async with await anyio.connect_tcp("127.0.0.1", port) as sock:
        for i, prompt in jobs:
            data = orjson.dumps(body(prompt))
            headers = [
                ("host", "127.0.0.1"),
                ("content-type", "application/json"),
                ("content-length", str(len(data))),
            ]
            request = h11.Request(method="POST", target="/v1/chat/completions", headers=headers)
            await sock.send(
                conn.send(request) + conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage())
            )
            chunks: list[bytes] = []
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await sock.receive())
                elif isinstance(event, h11.Response):
                    assert event.status_code == 200
                elif isinstance(event, h11.Data):
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    break
            out[i] = orjson.loads(b"".join(chunks))["choices"][0]["message"]["content"]
            conn.start_next_cycle()


async def _outputs(
    speculative: Speculative, prompts: list[str], *, mistuned: bool = False
) -> tuple[list[str], float | None]:
    out: dict[int, str] = {}
    config = EngineConfig(speculative=speculative, mistuned_draft=mistuned, cost=FREE)
    jobs = list(enumerate(prompts))
    async with EmbeddedEngine(config) as engine:
        async with anyio.create_task_group() as tg:
            for w in range(16):
                tg.start_soon(_worker, engine.port, jobs[w::16], out)
        ratio = engine.counters.accepted_token_ratio
    return [out[i] for i in range(len(prompts))], ratio


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_off_and_mtp_are_identical_over_http_on_a_spread_of_prompts() -> None:
    """Every sixth reference task (322 of 1931, all categories) through the server.

    The decoder itself is checked on every task in process (test_speculative.py:
    ``_acceptance`` with stride 1 for mtp, dspark on every task); this test proves the
    HTTP path (batching, streaming, detokenising) changes nothing on top of it."""
    tasks = all_reference_tasks()[::6]
    assert {t.category for t in tasks} == {t.category for t in all_reference_tasks()}
    prompts = [t.prompt for t in tasks]
    off, _ = await _outputs(Speculative.off, prompts)
    mtp, ratio = await _outputs(Speculative.mtp, prompts)
    assert off == mtp == [t.answer for t in tasks]
    assert ratio is not None and 0.5 < ratio < 0.95


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mistuned_draft_changes_a_share_of_outputs() -> None:
    tasks = reference_tasks(100, seed=9)  # in process the share is 0.44 here, 0.47 at 200
    outputs, ratio = await _outputs(Speculative.mtp, [t.prompt for t in tasks], mistuned=True)
    share = sum(o != t.answer for o, t in zip(outputs, tasks, strict=True)) / len(tasks)
    assert 0.1 < share < 0.5, share
    assert ratio is not None and ratio > 0.85


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_256_concurrent_streams_complete() -> None:
    tasks = reference_tasks(256, seed=4)
    texts: dict[int, str] = {}
    async with running(speculative=Speculative.mtp) as (engine, client):

        async def one(i: int) -> None:
            evs = await stream(client, body(tasks[i].prompt))
            assert evs[-1] == "[DONE]"
            texts[i] = content_of(evs)

        async with anyio.create_task_group() as tg:
            for i in range(len(tasks)):
                tg.start_soon(one, i)
        assert engine.counters.finished == 256
    assert [texts[i] for i in range(256)] == [t.answer for t in tasks]


async def test_bad_requests_get_openai_errors_and_the_server_keeps_serving() -> None:
    async with running(max_context_tokens=64) as (_, client):
        url = "/v1/chat/completions"
        cases: list[tuple[int, str, httpx.Response]] = [
            (400, "invalid_json", await client.post(url, content=b"{nope")),
            (400, "invalid_json", await client.post(url, content=b"[1]")),
            (400, "", await client.post(url, json={"messages": []})),
            (400, "", await client.post(url, json=body("hi", temperature=-1))),
            (400, "", await client.post(url, json=body("hi", n=2))),
            (404, "model_not_found", await client.post(url, json={**body("hi"), "model": "x"})),
            (400, "context_length_exceeded", await client.post(url, json=body("x" * 100))),
            (404, "not_found", await client.get("/v2/nothing")),
            (405, "method_not_allowed", await client.get(url)),
            (400, "", await client.post(url, json=body("hi"), headers={FAULT_HEADER: "boom"})),
        ]
        for status, code, r in cases:
            assert r.status_code == status, r.text
            err = r.json()["error"]
            assert err["message"] and err["type"]
            if code:
                assert err["code"] == code
        ok = await client.post(url, json=body(reference_tasks(1)[0].prompt))
        assert ok.status_code == 200


async def test_reasoning_streams_before_content_and_counts_in_usage() -> None:
    task = reference_tasks(1, seed=3)[0]
    async with running() as (_, client):
        high = await stream(
            client,
            body(
                task.prompt,
                chat_template_kwargs={"thinking": True},
                stream_options={"include_usage": True},
            ),
        )
        peak = await stream(client, body(task.prompt, reasoning_effort="max"))
        plain = await stream(
            client, body(task.prompt, thinking={"type": "disabled"}, reasoning_effort="high")
        )
    reasoning = content_of(high, "reasoning_content")
    assert reasoning.startswith("Task type: ")
    assert content_of(high) == task.answer
    kinds = [
        "r" if c["delta"].get("reasoning_content") else "c"
        for e in high
        if isinstance(e, dict)
        for c in e["choices"]
        if c["delta"].get("reasoning_content") or c["delta"].get("content")
    ]
    assert kinds == sorted(kinds, reverse=True)  # every reasoning delta before any content
    usage = high[-2]["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == len(reasoning)
    assert usage["completion_tokens"] == len(reasoning) + len(task.answer)
    assert len(content_of(peak, "reasoning_content")) > len(reasoning)
    assert content_of(plain, "reasoning_content") == ""


async def test_continuous_usage_stats_are_cumulative() -> None:
    task = reference_tasks(2, seed=8)[1]
    opts = {"include_usage": True, "continuous_usage_stats": True}
    async with running(speculative=Speculative.mtp) as (_, client):
        evs = await stream(client, body(task.prompt, stream_options=opts))
    counts = [
        e["usage"]["completion_tokens"]
        for e in evs
        if isinstance(e, dict) and e["choices"] and e["choices"][0]["delta"].get("content")
    ]
    assert counts == sorted(counts) and counts[-1] == len(task.answer)
    assert all("usage" in e for e in evs if isinstance(e, dict))


async def test_send_times_are_recorded_per_write() -> None:
    task = reference_tasks(1)[0]
    async with running(record_send_times=True, speculative=Speculative.mtp) as (engine, client):
        evs = await stream(client, body(task.prompt, stream_options={"include_usage": True}))
        record = engine.send_times[evs[0]["id"]]
    kinds = [r.kind for r in record]
    assert kinds[0] == "role" and kinds[-3:] == ["finish", "usage", "done"]
    assert [r.index for r in record] == list(range(len(record)))
    times = [r.t_s for r in record]
    assert times == sorted(times)
    assert sum(r.tokens for r in record) == len(task.answer)


async def test_seeded_sampling_and_stop_strings() -> None:
    task = next(t for t in reference_tasks(8) if t.category == "counting")
    async with running() as (_, client):
        url = "/v1/chat/completions"
        sampled = [
            (await client.post(url, json=body(task.prompt, temperature=0.9, seed=s))).json()[
                "choices"
            ][0]["message"]["content"]
            for s in (1, 1, 2, 3, 4)
        ]
        stop_at = task.answer.split(" ")[2]
        r = (await client.post(url, json=body(task.prompt, stop=[" " + stop_at]))).json()
        capped = (await client.post(url, json=body(task.prompt, max_tokens=3))).json()
    assert sampled[0] == sampled[1] and len(set(sampled)) > 1
    assert r["choices"][0]["message"]["content"] == " ".join(task.answer.split(" ")[:2])
    assert r["choices"][0]["finish_reason"] == "stop"
    assert capped["choices"][0]["message"]["content"] == task.answer[:3]
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["usage"]["completion_tokens"] == 3


async def test_serve_and_cli_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    ns = parser.parse_args(
        [
            "--port",
            "0",
            "--speculative",
            "mtp",
            "--draft-depth",
            "2",
            "--dialect",
            "sglang",
            "--target-step-ms",
            "0.1",
            "--fault",
            "keepalive",
            "--fault",
            "http_503",
            "--mistuned-draft",
            "--seed",
            "3",
        ]
    )
    cfg = config_from_args(ns)
    assert cfg.speculative is Speculative.mtp and cfg.effective_draft_depth == 2
    assert cfg.dialect is Dialect.sglang and cfg.mistuned_draft and cfg.seed == 3
    assert cfg.cost.target_step_ms == 0.1
    assert cfg.faults.keepalive_comments and cfg.faults.http_status == 503
    assert ns.host == "127.0.0.1"
    urls: list[str] = []
    ready = anyio.Event()

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve(cfg, ns.host, ns.port, on_ready=on_ready))
        with anyio.fail_after(10):
            await ready.wait()
        assert urls[0].startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            r = await client.post(urls[0] + "/chat/completions", json=body("hi"))
            assert r.status_code == 503
            assert (await client.get(urls[0].removesuffix("/v1") + "/health")).status_code == 200
        tg.cancel_scope.cancel()
    assert math.isfinite(len(urls))


async def test_an_exception_in_the_block_comes_out_unwrapped() -> None:
    # A user's bug inside `async with` must be catchable as itself, not as an
    # ExceptionGroup from the engine's task group (nor nested groups with two engines).
    with pytest.raises(ValueError, match="user bug") as info:
        async with (
            EmbeddedEngine(EngineConfig(cost=FAST_COSTS)) as off,
            EmbeddedEngine(EngineConfig(speculative=Speculative.mtp, cost=FAST_COSTS)),
        ):
            assert off.base_url.startswith("http://127.0.0.1:")
            raise ValueError("user bug")
    assert type(info.value) is ValueError


async def test_sglang_refuses_return_meta_info_on_a_streamed_request() -> None:
    """As current SGLang does (shared/cases/requests/01); a non-stream request may ask."""
    task = reference_tasks(1, seed=2)[0]
    async with running(speculative=Speculative.dspark, dialect=Dialect.sglang) as (_, client):
        r = await client.post(
            "/v1/chat/completions",
            json=body(task.prompt, stream=True, return_meta_info=True),
        )
        assert r.status_code == 400 and "return_meta_info" in r.text
        r = await client.post("/v1/chat/completions", json=body(task.prompt, return_meta_info=True))
        assert r.status_code == 200
        assert r.json()["choices"][0]["meta_info"]["spec_verify_ct"] > 0


async def test_a_request_that_waits_for_the_running_step_reports_that_queue_time() -> None:
    """A request sent while another decodes is admitted when the running step ends: its
    vLLM ``metrics.queue_time_ms`` is that wait (was always 0), and its TTFT holds it."""
    cost = CostModel(
        prefill_ms_per_token=0, target_step_ms=20, verify_token_ms=0, draft_step_ms=0,
        batch_exponent=0,
    )  # fmt: skip
    async with running(cost=cost) as (_, client):
        long = body("Count from 1 to 40.", max_tokens=40, ignore_eos=True, stream=True)
        async with client.stream("POST", "/v1/chat/completions", json=long) as r:
            lines = r.aiter_lines()
            while not (await anext(lines)).startswith("data: {"):
                pass  # the first token: the loop is in its next step now
            second = await client.post("/v1/chat/completions", json=body("Hi", max_tokens=2))
            async for _ in lines:
                pass
    metrics = second.json()["metrics"]
    assert 0 < metrics["queue_time_ms"] <= metrics["time_to_first_token_ms"]
