"""The llama.cpp engine tests' shared pieces: their plan over the running routes, the plan
that launches its own ``off`` and draft routes, and a recording transport that observes
every chat request independently of the measurement code."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

from deepseekbench import BenchmarkPlan, Dialect, ReasoningMode, RunningLlamaServer
from deepseekbench._measure._sse import SSEDecoder
from tests.engine.gguf_models import EngineModels

MODE = ReasoningMode.non_think


def launched_pair_plan(
    models: EngineModels,
    results: Path,
    *,
    spec_tokens: int | list[int],
    requests_per_cell: int,
    repeats: int,
    draft_ctx: int = 1024,
) -> BenchmarkPlan:
    """``off`` and a draft-model route (``spec_tokens``: one depth or a list, one route
    each), both launched by the plan through ``[routes.launch]`` (``off`` at
    ``--ctx-size 1024``, the draft route at ``draft_ctx``), one 48-token cell, one
    warm-up, one workload and one parity prompt; results written to ``results``."""

    def launch(**extra: object) -> dict[str, object]:
        return {"engine": "llama.cpp", "model": str(models.target), "startup_timeout_s": 180,
                **extra}  # fmt: skip

    return BenchmarkPlan.model_validate(
        {
            "model": "deepseekbench-llama-generated",
            "engine_route": "llamacpp",
            "hosting": "self_hosted",
            "results": str(results),
            "routes": [
                {
                    "label": "off",
                    "speculative": "off",
                    "dialect": "llamacpp",
                    "launch": launch(engine_args={"ctx_size": 1024}),
                },
                {
                    "label": "draft",
                    "speculative": "draft",
                    "dialect": "llamacpp",
                    "launch": launch(
                        draft_model=str(models.draft),
                        spec_tokens=spec_tokens,
                        engine_args={"ctx_size": draft_ctx},
                    ),
                },
            ],
            "cells": [{"max_tokens": 48}],
            "requests_per_cell": requests_per_cell,
            "warmup_per_cell": 1,
            "repeats": repeats,
            "timeout_s": 120.0,
            "workload": {"prompts": ["Tell me about the river and the stone."]},
            "parity": {
                "prompts": ["Name a bird, a fish and a horse."],
                "tasks": "none",
                "max_tokens": 32,
                "concurrency": 1,
            },
        }
    )


def llamacpp_plan(
    routes: Mapping[str, RunningLlamaServer],
    table: Sequence[tuple[str, str, str]],
    *,
    max_tokens: int,
    requests_per_cell: int,
    warmup_per_cell: int,
    workload_prompts: Sequence[str],
    parity_prompts: Sequence[str],
    parity_max_tokens: int,
    repeats: int | None = None,
    exact: str | None = None,
) -> BenchmarkPlan:
    """A plan over running llama-server routes (ports are random, so built per session).

    ``table``: (plan label, fixture route name, speculative value) per route. One cell
    (1k/256/non_think, ``max_tokens`` tokens), a closed loop of 1 (the servers run
    ``--parallel 1``), ``repeats`` rounds (the plan's default when ``None``), greedy
    bit-exact parity on ``parity_prompts`` with
    the determinism control and no tasks (the models' random weights fail every smoke
    task on every route); ``exact`` sets ``parity.exact`` (e.g. ``"within_noise"``).

    Raises:
        pydantic.ValidationError: the plan is invalid.
    """
    parity: dict[str, Any] = {
        "prompts": list(parity_prompts),
        "tasks": "none",
        "max_tokens": parity_max_tokens,
        "seed": 1234,
        "determinism_control": True,
        "concurrency": 1,
    }
    if exact is not None:
        parity["exact"] = exact
    rounds = {} if repeats is None else {"repeats": repeats}
    return BenchmarkPlan.model_validate(
        {
            **rounds,
            "model": "deepseekbench-llama-generated",
            "engine_route": "llamacpp",
            "hosting": "self_hosted",
            "routes": [
                {
                    "label": label,
                    "speculative": spec,
                    "base_url": routes[name].base_url,
                    "dialect": Dialect.llamacpp.value,
                }
                for label, name, spec in table
            ],
            "cells": [
                {
                    "context_bucket": "1k",
                    "output_target": "256",
                    "reasoning_mode": MODE.value,
                    "max_tokens": max_tokens,
                }
            ],
            "requests_per_cell": requests_per_cell,
            "warmup_per_cell": warmup_per_cell,
            "arrival": {"mode": "concurrency", "concurrency": 1},
            "timeout_s": 120.0,
            "workload": {"prompts": list(workload_prompts)},
            "parity": parity,
        }
    )


class _TeeStream(httpx.AsyncByteStream):
    """Passes a response body through unchanged, decoding its SSE events on the way."""

    def __init__(self, inner: httpx.AsyncByteStream, on_close: Callable[[dict[str, Any]], None]):
        self._inner = inner
        self._on_close = on_close
        self._decoder = SSEDecoder()
        self._timings: dict[str, Any] = {}
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            for event in self._decoder.feed(chunk, time.perf_counter_ns()):
                if event.data == "[DONE]":
                    continue
                try:
                    obj = orjson.loads(event.data)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and isinstance(obj.get("timings"), dict):
                    self._timings = obj["timings"]
            yield chunk

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self._timings)
        await self._inner.aclose()


class TimingsRecorder(httpx.AsyncBaseTransport):
    """A transport (wrapped by the gate) that records every chat completion's last
    ``timings`` object per server port: an observer independent of the measurement code."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.timings: dict[int, list[dict[str, Any]]] = defaultdict(list)
        # every chat request body per port (the forensics' follow-ups included)
        self.bodies: dict[int, list[dict[str, Any]]] = defaultdict(list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return response
        port = request.url.port or 0
        body = orjson.loads(request.content)
        self.bodies[port].append(body)
        if not body.get("stream"):  # a forensics follow-up (non-streamed, no timings tee)
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, self.timings[port].append),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
