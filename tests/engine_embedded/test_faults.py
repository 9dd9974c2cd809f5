"""Injected faults, read at the byte level from a raw loopback socket."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench import (
    FAULT_HEADER,
    EmbeddedEngine,
    EngineConfig,
    FaultConfig,
    Speculative,
    reference_tasks,
)
from deepseekbench._engine import FAST_COSTS

pytestmark = pytest.mark.anyio

REVERSAL = next(t for t in reference_tasks(8, seed=2) if t.category == "reversal")


@dataclass
class Raw:
    status: int
    headers: dict[str, str]
    chunks: list[bytes]
    complete: bool

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def events(self) -> list[Any]:
        out: list[Any] = []
        for block in self.body.decode().split("\n\n"):
            if block.startswith("data: "):
                data = block[len("data: ") :]
                out.append(data if data == "[DONE]" else orjson.loads(data))
        return out


def _parse(raw: bytes) -> Raw:
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    if "content-length" in headers:
        return Raw(status, headers, [rest], True)
    chunks: list[bytes] = []
    while True:
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            return Raw(status, headers, chunks, False)
        size = int(size_line, 16)
        if size == 0:
            return Raw(status, headers, chunks, True)
        chunks.append(rest[:size])
        rest = rest[size + 2 :]


async def raw_post(port: int, payload: dict[str, Any], fault: str | None = None) -> Raw:
    data = orjson.dumps(payload)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n"
    )
    if fault:
        head += f"{FAULT_HEADER}: {fault}\r\n"
    received = bytearray()
    async with await anyio.connect_tcp("127.0.0.1", port) as sock:
        await sock.send(head.encode() + b"\r\n" + data)
        while True:
            try:
                received += await sock.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                break
    return _parse(bytes(received))


def payload(**extra: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": REVERSAL.prompt}],
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


def text_of(evs: list[Any]) -> str:
    return "".join(
        c["delta"].get("content") or ""
        for e in evs
        if isinstance(e, dict)
        for c in e.get("choices", [])
    )


async def test_faults_by_request_header_on_one_server() -> None:
    cfg = EngineConfig(
        speculative=Speculative.mtp,
        cost=FAST_COSTS,
        faults=FaultConfig(stall_ms=150, after_chunks=2),
        record_send_times=True,
    )
    async with EmbeddedEngine(cfg) as engine:
        port = engine.port
        clean = await raw_post(port, payload())
        assert clean.complete and text_of(clean.events()) == REVERSAL.answer

        keep = await raw_post(port, payload(), "keepalive")
        assert keep.body.startswith(b": keep-alive\n\n")
        assert text_of(keep.events()) == REVERSAL.answer

        split = await raw_post(port, payload(), "split_utf8")
        broken = [c for c in split.chunks if not _decodes(c)]
        assert broken, "no chunk ends inside a multi-byte character"
        assert text_of(split.events()) == REVERSAL.answer and "→" in REVERSAL.answer

        halves = await raw_post(port, payload(), "split_writes")
        assert len(halves.chunks) >= 2 * len(clean.chunks)
        assert halves.body.count(b"data: ") == clean.body.count(b"data: ")

        err = await raw_post(port, payload(), "error_event")
        evs = err.events()
        assert err.complete and evs[-1]["error"]["code"] == 500 and "[DONE]" not in evs

        dropped = await raw_post(port, payload(), "drop")
        assert not dropped.complete and b"[DONE]" not in dropped.body

        no_usage = await raw_post(port, payload(), "no_usage")
        assert all(e == "[DONE]" or e["choices"] for e in no_usage.events())
        assert no_usage.events()[-1] == "[DONE]"

        for name, status in (("http_429", 429), ("http_503", 503)):
            refused = await raw_post(port, payload(), name)
            assert refused.status == status
            assert orjson.loads(refused.body)["error"]["message"]
        assert refused.headers.get("retry-after") is None
        assert (await raw_post(port, payload(), "http_429")).headers["retry-after"] == "1"

        t0 = time.perf_counter()
        stalled = await raw_post(port, payload(), "stall")
        assert time.perf_counter() - t0 >= 0.15
        stall_id = stalled.events()[0]["id"]
        gaps = [
            b.t_s - a.t_s
            for a, b in zip(
                engine.send_times[stall_id], engine.send_times[stall_id][1:], strict=False
            )
        ]
        assert max(gaps) >= 0.14
        assert text_of(stalled.events()) == REVERSAL.answer

        # the server is still healthy and the dropped/errored sequences ended
        assert engine.counters.finished == engine.counters.requests


def _decodes(chunk: bytes) -> bool:
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def test_engine_wide_faults_and_httpx_sees_a_dropped_stream() -> None:
    cfg = EngineConfig(cost=FAST_COSTS, faults=FaultConfig(drop_connection=True, after_chunks=1))
    async with (
        EmbeddedEngine(cfg) as engine,
        httpx.AsyncClient(base_url=engine.base_url) as client,
    ):
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/chat/completions", json=payload())
        non_stream = {**payload(), "stream": False}
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/chat/completions", json=non_stream)
        assert (await client.get(engine.base_url.removesuffix("/v1") + "/health")).is_success
    cfg = EngineConfig(
        cost=FAST_COSTS, faults=FaultConfig(error_mid_stream=True), speculative=Speculative.ngram
    )
    async with EmbeddedEngine(cfg) as engine:
        r = await raw_post(engine.port, {**payload(), "stream": False})
        assert r.status == 500 and orjson.loads(r.body)["error"]["type"] == "InternalServerError"
