"""Observers of real vLLM servers that are independent of the library's measurement code.

* :class:`StreamRecorder` - an httpx transport (wrapped by the gate) that keeps, for
  every chat completion, the request's prompt and ``max_tokens``, the streamed text
  (``choices[0].delta.content`` joined, parsed here with plain ``json``, not the
  library's SSE decoder) and the final chunk's ``metrics`` object (server timings and
  ``speculative_decoding``).
  It also keeps the text of every ``GET /metrics`` answer that passes it (the
  runner's own window scrapes), with the number of completions the port had seen
  by then, so a test of a server it never reaches itself (one the plan launched
  and stopped) can still read vLLM's own counters.
* :func:`read_spec_counters` - the ``vllm:spec_decode_*`` Prometheus counters of one
  server, including ``num_accepted_tokens_per_pos`` by position
  (:func:`parse_spec_counters` for an exposition text already read).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
ZERO_COUNTERS: dict[str, Any] = {**dict.fromkeys(COUNTERS, 0), "per_pos": {}}
"""The counters of a server that has served nothing (a freshly launched one)."""


@dataclass
class Completion:
    """One observed chat completion: its prompt, max_tokens, text and spec metrics."""

    prompt: str
    max_tokens: int | None
    text: str = ""
    spec: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    finished: bool = False
    logprobs: bool = False  # the body asked for logprobs (the margin follow-ups)
    completion_tokens: int | None = None  # the stream's usage count


@dataclass
class _Parser:
    completion: Completion
    buffer: bytes = b""
    parts: list[str] = field(default_factory=list)

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.completion.finished = True
            return
        obj = json.loads(data)
        for choice in obj.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if choice.get("index", 0) == 0 and isinstance(content, str):
                self.parts.append(content)
        usage = obj.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.completion.completion_tokens = usage["completion_tokens"]
        metrics = obj.get("metrics")
        if isinstance(metrics, dict):
            self.completion.metrics = metrics
            if isinstance(metrics.get("speculative_decoding"), dict):
                self.completion.spec = metrics["speculative_decoding"]

    def close(self) -> None:
        self.completion.text = "".join(self.parts)


class _TeeStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, parser: _Parser) -> None:
        self._inner = inner
        self._parser = parser

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._parser.feed(chunk)
            yield chunk

    async def aclose(self) -> None:
        self._parser.close()
        await self._inner.aclose()


class _BodyTee(httpx.AsyncByteStream):
    """Passes a body through unchanged and hands the raw bytes to ``done`` on close."""

    def __init__(self, inner: httpx.AsyncByteStream, done: Callable[[bytes], None]) -> None:
        self._inner = inner
        self._done = done
        self._body = bytearray()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._body += chunk
            yield chunk

    async def aclose(self) -> None:
        self._done(bytes(self._body))
        await self._inner.aclose()


@dataclass(frozen=True)
class MetricsText:
    """One ``GET /metrics`` answer seen on a port: its decoded text and how many chat
    completions the port had seen when it was asked."""

    completions_before: int
    text: str


class StreamRecorder(httpx.AsyncBaseTransport):
    """Records every streamed chat completion and every ``/metrics`` answer per server
    port (see the module docstring)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.completions: dict[int, list[Completion]] = defaultdict(list)
        self.metrics: dict[int, list[MetricsText]] = defaultdict(list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        port = request.url.port or 0
        n_before = len(self.completions[port])
        response = await self._inner.handle_async_request(request)
        if request.method == "GET" and request.url.path == "/metrics":
            return self._tee_metrics(request, response, port, n_before)
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return response
        body = json.loads(request.content)
        prompt = body["messages"][-1]["content"]
        completion = Completion(
            prompt=prompt, max_tokens=body.get("max_tokens"), logprobs=bool(body.get("logprobs"))
        )
        self.completions[request.url.port or 0].append(completion)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, _Parser(completion)),
            extensions=response.extensions,
            request=request,
        )

    def _tee_metrics(
        self, request: httpx.Request, response: httpx.Response, port: int, n_before: int
    ) -> httpx.Response:
        headers = response.headers

        def done(raw: bytes) -> None:
            if response.status_code == 200:  # decoded as the client would (gzip, ...)
                text = httpx.Response(200, headers=headers, content=raw).text
                self.metrics[port].append(MetricsText(n_before, text))

        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=headers,
            stream=_BodyTee(response.stream, done),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()

    def texts(self, port: int, prompts: tuple[str, ...], max_tokens: int) -> list[list[str]]:
        """For each prompt, the texts of every completion of it with ``max_tokens``."""
        seen = self.completions[port]
        return [
            [c.text for c in seen if c.prompt == p and c.max_tokens == max_tokens] for p in prompts
        ]


def read_spec_counters(origin: str) -> dict[str, Any]:
    """The ``vllm:spec_decode_*`` counters of ``origin``'s ``/metrics`` (summed over labels).

    Returns ``{"num_drafts": int, "num_draft_tokens": int, "num_accepted_tokens": int,
    "per_pos": {position: int}}``; a counter the server does not expose (speculation
    off) reads 0.
    """
    return parse_spec_counters(httpx.get(f"{origin}/metrics", timeout=10.0, trust_env=False).text)


def parse_spec_counters(text: str) -> dict[str, Any]:
    """:func:`read_spec_counters` of an exposition text already read."""
    out: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
    for name in COUNTERS:
        pattern = rf"^vllm:spec_decode_{name}_total(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$"
        out[name] = sum(round(float(v)) for v in re.findall(pattern, text, re.MULTILINE))
    per_pos: dict[int, int] = defaultdict(int)
    pos_re = r"^vllm:spec_decode_num_accepted_tokens_per_pos_total\{([^}]*)\} ([0-9.eE+-]+)$"
    for labels, value in re.findall(pos_re, text, re.MULTILINE):
        m = re.search(r'position="(\d+)"', labels)
        if m:
            per_pos[int(m.group(1))] += round(float(value))
    out["per_pos"] = dict(per_pos)
    return out


def per_position_accepted(spec: dict[str, Any]) -> dict[int, int]:
    """Accepted drafts by position from one request's ``acceptance_histogram``.

    ``acceptance_histogram[k]`` counts verify steps that accepted exactly ``k`` drafts;
    position ``p`` (0-based) is accepted in every step that accepted more than ``p``.
    """
    hist = [int(x) for x in spec.get("acceptance_histogram") or []]
    return {p: sum(hist[p + 1 :]) for p in range(max(len(hist) - 1, 0))}


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after - before`` for the three counters and the per-position map."""
    out: dict[str, Any] = {k: after[k] - before[k] for k in COUNTERS}
    positions = set(before["per_pos"]) | set(after["per_pos"])
    out["per_pos"] = {
        p: after["per_pos"].get(p, 0) - before["per_pos"].get(p, 0) for p in sorted(positions)
    }
    return out


Reader = Callable[[str], dict[str, Any]]
