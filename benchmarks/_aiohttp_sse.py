"""The bare aiohttp reader the client benchmarks compare ``measure_streamed`` with.

How vLLM's bench client and AIPerf read a stream: lines from aiohttp, one per
iteration, a ``time.perf_counter_ns`` stamp per line, ``orjson`` per ``data:``
event, stop at ``[DONE]``. Used by ``bench_client_overhead.py`` and
``bench_fidelity.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson


async def read_deltas(
    session: Any, url: str, body: bytes, headers: Mapping[str, str]
) -> list[tuple[int, str]]:
    """POST ``body`` to ``url`` with an ``aiohttp.ClientSession`` and read the SSE stream.

    Returns:
        ``(arrival, content)`` of every non-empty content delta, in order: arrival is
        the ``perf_counter_ns`` stamp of the line that carried it.
    """
    deltas: list[tuple[int, str]] = []
    async with session.post(url, data=body, headers=dict(headers)) as response:
        async for raw in response.content:  # one line per iteration
            arrival = time.perf_counter_ns()
            line = raw.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                break
            for choice in orjson.loads(payload).get("choices", ()):
                content = choice.get("delta", {}).get("content")
                if content:
                    deltas.append((arrival, content))
    return deltas
