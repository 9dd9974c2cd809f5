"""Client CPU cost per streamed chunk and per request: ``measure_streamed`` vs raw loops.

A loopback server in a separate process streams OpenAI chat chunks. Two modes:

* ``burst``: each response written at once (many SSE events per read): parsing cost.
* ``paced`` (default): ``--streams`` concurrent responses, one event per write
  every ``--interval-ms`` — how an engine streams, so each read carries one event
  and the transport's per-read cost counts.

Readers, alternating over the same responses: ``measure_streamed`` (through
``gate.client()``), a raw aiohttp loop (lines, orjson, a timestamp per token
chunk: how vLLM's bench client and AIPerf read) and a raw httpx loop. The
client process's CPU time (``time.process_time``) is measured, so the server's
CPU is not counted. A second phase sends ``--short`` one-chunk requests
(``--streams`` at a time) for the CPU cost of a request itself.

Prints CPU µs per chunk, CPU µs per request (medians over the rounds), the ratios to
the raw aiohttp loop (targets: per chunk ≤ 1.2×; per request ≤ 1.5× paced, ≤ 2× in bulk,
i.e. burst mode), each ratio's min/median/max over the rounds, and the load average.
The bulk per-request figure: ``--mode burst --short 3000 --chunks 20 --requests 1``
(3,000 one-chunk requests, 32 in flight, three rounds). ``measure_streamed`` is
given a :class:`ChatRequest` built once per shape, as the executor gives it (its
schedule's requests are validated when the plan is read); the raw loops a dict.

``--token-ids``: each token chunk carries ``token_ids`` (vLLM ``return_token_ids``, asked
on every sampled vLLM request for the witness), so a run with and one without give its
per-chunk cost.

Run: ``python benchmarks/bench_client_overhead.py [--mode paced --streams 32 --chunks 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _aiohttp_sse import read_deltas

from deepseekbench import ChatRequest, EngineRoute, LiveGate, Timeouts, measure_streamed


def _events(chunks: int, token_ids: bool = False) -> list[bytes]:
    """SSE events: ``chunks`` token chunks, finish, usage, [DONE]; with ``token_ids``
    each token chunk's choice carries ``"token_ids": [id]``, as vLLM streams it when a
    request asks ``return_token_ids`` (every sampled vLLM request: the witness reads them)."""
    events: list[bytes] = []
    for i in range(chunks):
        choice: dict[str, object] = {
            "index": 0,
            "delta": {"content": f" tok{i % 97}"},
            "finish_reason": None,
        }
        if token_ids:
            choice["token_ids"] = [1000 + i % 97]
        obj = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1764400000,
            "model": "bench",
            "choices": [choice],
        }
        events.append(b"data: " + orjson.dumps(obj) + b"\n\n")
    events.append(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n')
    events.append(
        b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":%d}}\n\n' % chunks
    )
    events.append(b"data: [DONE]\n\n")
    return events


def _chunked(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _serve(
    port_queue: mp.Queue[int],
    mode: str,
    interval_ms: float,
    events_per_write: int = 1,
    token_ids: bool = False,
) -> None:
    """Serve precomputed streams on 127.0.0.1 (port sent through ``port_queue``).

    ``paced``: ``events_per_write`` events per write, then a pause of
    ``interval_ms`` x ``events_per_write`` (ms); ``burst``: the whole response in one write.
    ``token_ids``: each token chunk carries its id (:func:`_events`).
    """
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
    )
    cache: dict[int, list[bytes]] = {}

    async def respond(writer: asyncio.StreamWriter, chunks: int) -> None:
        if chunks not in cache:
            cache[chunks] = [_chunked(e) for e in _events(chunks, token_ids)]
        events = cache[chunks]
        if mode == "burst":
            writer.write(head + b"".join(events) + b"0\r\n\r\n")
            await writer.drain()
            return
        writer.write(head)
        step = max(1, events_per_write)
        for i in range(0, len(events), step):
            writer.write(b"".join(events[i : i + step]))  # 1 = one event per write, as engines
            await writer.drain()
            await asyncio.sleep(interval_ms * step / 1000)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in request_head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = orjson.loads(await reader.readexactly(length))
                await respond(writer, int(body["max_tokens"]))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_queue.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


def _request(chunks: int) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": "go"}], "max_tokens": chunks}


Reader = Callable[[int], Awaitable[None]]


def _ours(client: httpx.AsyncClient, gate: LiveGate, route: EngineRoute) -> Reader:
    # built once, as the executor does (a schedule's ChatRequests are validated when the
    # plan is read): the hot path sends a ChatRequest, not a dict to validate
    requests: dict[int, ChatRequest] = {}
    timeouts = Timeouts()

    async def read(chunks: int) -> None:
        request = requests.get(chunks) or requests.setdefault(
            chunks, ChatRequest.model_validate(_request(chunks))
        )
        m = await measure_streamed(
            request, route=route, gate=gate, client=client, timeouts=timeouts
        )
        assert m.error is None and m.completion_tokens == chunks, m.error

    return read


def _raw_httpx(client: httpx.AsyncClient, url: str) -> Reader:
    async def read(chunks: int) -> None:
        body = orjson.dumps({"model": "bench", "stream": True, **_request(chunks)})
        stamps: list[int] = []
        text: list[str] = []
        async with client.stream("POST", url, content=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    break
                for choice in orjson.loads(payload).get("choices", ()):
                    content = choice["delta"].get("content")
                    if content:
                        text.append(content)
                        stamps.append(time.perf_counter_ns())
        assert len(stamps) == chunks

    return read


def _raw_aiohttp(session: object, url: str) -> Reader:
    import aiohttp

    assert isinstance(session, aiohttp.ClientSession)

    async def read(chunks: int) -> None:
        body = orjson.dumps({"model": "bench", "stream": True, **_request(chunks)})
        headers = {"content-type": "application/json"}
        deltas = await read_deltas(session, url, body, headers)
        assert len(deltas) == chunks

    return read


async def _cpu_of(read: Reader, n: int, chunks: int, streams: int) -> float:
    """Client CPU seconds for ``n`` requests of ``chunks`` chunks, ``streams`` at a time."""
    limiter = anyio.CapacityLimiter(streams)

    async def one() -> None:
        async with limiter:
            await read(chunks)

    t0 = time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return time.process_time() - t0


async def _run(port: int, args: argparse.Namespace) -> None:
    import aiohttp

    gate = LiveGate()
    route = EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model="bench")
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        gate.client(timeout=60) as client,
        httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=None)) as plain,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        readers: dict[str, Reader] = {"measure_streamed": _ours(client, gate, route)}
        readers["raw aiohttp loop"] = _raw_aiohttp(session, route.chat_url)
        if args.backend == "asyncio":
            readers["raw httpx loop"] = _raw_httpx(plain, route.chat_url)
        per_chunk: dict[str, list[float]] = {k: [] for k in readers}
        per_request: dict[str, list[float]] = {k: [] for k in readers}
        for read in readers.values():  # warm-up: connections, imports
            await _cpu_of(read, args.streams, 2, args.streams)
        n = args.streams * args.requests
        for _ in range(args.rounds):
            for name, read in readers.items():
                cpu = await _cpu_of(read, n, args.chunks, args.streams)
                short = await _cpu_of(read, args.short, 1, args.streams)
                per_request[name].append(short / args.short * 1e6)
                # chunk cost: the long run's CPU less its requests' own cost
                chunk_us = (cpu / n - short / args.short) / args.chunks * 1e6
                per_chunk[name].append(chunk_us)
    load = os.getloadavg()
    print(
        f"mode {args.mode}, {args.streams} streams x {args.requests} requests x {args.chunks} "
        f"chunks, interval {args.interval_ms} ms, rounds {args.rounds}, backend {args.backend}, "
        f"token_ids {'on' if args.token_ids else 'off'}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"{'reader':<20}{'CPU us/chunk':>14}{'CPU us/request':>16}")
    medians = {
        k: (statistics.median(per_chunk[k]), statistics.median(per_request[k])) for k in readers
    }
    for name, (chunk, req) in medians.items():
        print(f"{name:<20}{chunk:>14.2f}{req:>16.1f}")
    ours, raw = medians["measure_streamed"], medians["raw aiohttp loop"]
    request_target = 1.5 if args.mode == "paced" else 2.0  # bulk: whole bodies at once
    print(
        f"measure_streamed / raw aiohttp: per chunk {ours[0] / raw[0]:.2f}x (target <= 1.2), "
        f"per request {ours[1] / raw[1]:.2f}x (target <= {request_target})"
    )
    for what, table in (("per chunk", per_chunk), ("per request", per_request)):
        ratios = [
            a / b for a, b in zip(table["measure_streamed"], table["raw aiohttp loop"], strict=True)
        ]
        print(
            f"  {what} ratio over {len(ratios)} rounds (each round's own pair): min "
            f"{min(ratios):.2f} / median {statistics.median(ratios):.2f} / max {max(ratios):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mode", choices=["paced", "burst"], default="paced")
    parser.add_argument("--streams", type=int, default=32, help="requests in flight")
    parser.add_argument("--chunks", type=int, default=200, help="token chunks per response")
    parser.add_argument("--requests", type=int, default=2, help="requests per stream per round")
    parser.add_argument("--short", type=int, default=256, help="one-chunk requests per round")
    parser.add_argument("--interval-ms", type=float, default=2.0, help="paced: ms between writes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["asyncio"], default="asyncio")
    parser.add_argument(
        "--token-ids",
        action="store_true",
        help="each token chunk carries token_ids (vLLM return_token_ids): its per-chunk cost",
    )
    args = parser.parse_args()
    queue: mp.Queue[int] = mp.Queue()
    server = mp.Process(
        target=_serve, args=(queue, args.mode, args.interval_ms, 1, args.token_ids), daemon=True
    )
    server.start()
    try:
        port = queue.get(timeout=30)
        anyio.run(_run, port, args, backend=args.backend)
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
