"""Client CPU cost per streamed chunk: ``measure_streamed`` vs a minimal httpx + orjson loop.

A loopback server in a separate process streams ``--chunks`` OpenAI chat
chunks per request (each SSE event its own HTTP chunk) as fast as it can. The
client process's CPU time (``time.process_time``) is measured for both readers,
alternating, over the same responses, so the server's CPU is not counted.

Prints, per reader: CPU µs per chunk and the chunk rate one core sustains
(chunks per CPU-second), and the ratio ours / baseline.

Run: ``python benchmarks/bench_client_overhead.py [--chunks 20000 --requests 4 --rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import anyio
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deepseekbench._gate import LiveGate
from deepseekbench._measure import Timeouts, measure_streamed
from deepseekbench._route import EngineRoute


def _body(chunks: int) -> bytes:
    """A chunked-encoded SSE body: ``chunks`` token chunks, finish, usage, [DONE]."""
    events: list[bytes] = []
    for i in range(chunks):
        obj = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1764400000,
            "model": "bench",
            "choices": [{"index": 0, "delta": {"content": f" tok{i % 97}"}, "finish_reason": None}],
        }
        events.append(b"data: " + orjson.dumps(obj) + b"\n\n")
    events.append(
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
        + b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":%d}}\n\n' % chunks
        + b"data: [DONE]\n\n"
    )
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def _serve(port_queue: mp.Queue[int], chunks: int) -> None:
    body = _body(chunks)
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in request_head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_queue.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


REQUEST = {"messages": [{"role": "user", "content": "go"}], "max_tokens": 1}


async def _ours(client: httpx.AsyncClient, gate: LiveGate, route: EngineRoute, chunks: int) -> None:
    m = await measure_streamed(
        REQUEST, route=route, gate=gate, client=client, timeouts=Timeouts(total_s=600)
    )
    assert m.error is None and m.completion_tokens == chunks, m.error


async def _baseline(client: httpx.AsyncClient, url: str, chunks: int) -> None:
    """The minimal loop: lines, orjson, content, a timestamp per token chunk."""
    body = orjson.dumps({"model": "bench", "stream": True, **REQUEST})
    text: list[str] = []
    stamps: list[int] = []
    async with client.stream("POST", url, content=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                break
            obj = orjson.loads(payload)
            for choice in obj.get("choices", ()):
                content = choice["delta"].get("content")
                if content:
                    text.append(content)
                    stamps.append(time.perf_counter_ns())
    assert len(stamps) == chunks


async def _run(port: int, chunks: int, requests: int, rounds: int) -> None:
    gate = LiveGate()
    route = EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model="bench")
    ours_us: list[float] = []
    base_us: list[float] = []
    async with gate.client(timeout=60) as client:
        await _ours(client, gate, route, chunks)  # warm-up
        await _baseline(client, route.chat_url, chunks)
        for _ in range(rounds):
            t0 = time.process_time()
            for _ in range(requests):
                await _baseline(client, route.chat_url, chunks)
            base_us.append((time.process_time() - t0) / (requests * chunks) * 1e6)
            t0 = time.process_time()
            for _ in range(requests):
                await _ours(client, gate, route, chunks)
            ours_us.append((time.process_time() - t0) / (requests * chunks) * 1e6)
    ours, base = statistics.median(ours_us), statistics.median(base_us)
    print(f"chunks per request: {chunks}, requests per round: {requests}, rounds: {rounds}")
    print(f"{'reader':<28}{'CPU us/chunk':>14}{'chunks/CPU-s':>16}")
    print(f"{'measure_streamed':<28}{ours:>14.2f}{1e6 / ours:>16,.0f}")
    print(f"{'raw httpx + orjson loop':<28}{base:>14.2f}{1e6 / base:>16,.0f}")
    print(f"ratio (measure_streamed / baseline CPU per chunk): {ours / base:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    queue: mp.Queue[int] = mp.Queue()
    server = mp.Process(target=_serve, args=(queue, args.chunks), daemon=True)
    server.start()
    try:
        port = queue.get(timeout=30)
        anyio.run(_run, port, args.chunks, args.requests, args.rounds, backend=args.backend)
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
