"""Where ``send_wait_ms`` comes from at C streams started together: the per-request cost
of the step that ends at the connection hand-over, and of aiohttp's body writer.

``measure_streamed`` starts its clock when the request's body is written; the wait from
the connection hand-over to that write is ``send_wait_ms``. aiohttp writes the body in a
task of its own (started eagerly only on Python >= 3.12), queued behind every task
already ready. When C requests start together, each task runs its first step (building
the request, the gate, the transport, aiohttp up to the hand-over) and queues its
writer; the writers run after all C first steps. So the hand-over stamps are spread
over C first steps and the writes over C writer steps, and request ``i`` waits
``(C - i)`` first steps plus ``i`` writer steps: ``send_wait_ms`` p99 ~ C x the first
step's cost.

This script sends ``--waves`` waves of ``--concurrency`` one-chunk requests (after one
wave that opens the connections) to a loopback server in its own process (the one of
``bench_client_overhead.py``, burst mode) and prints, per wave, the spread of the
hand-over stamps and of the write stamps divided by C - 1 (µs per request: the two
step costs) and ``send_wait_ms`` p50 / p99 (ms), then min / median / max of each over
the waves and the load average.

Run: ``python benchmarks/bench_send_wait.py [--concurrency 256 --waves 5]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_client_overhead import _request, _serve

from deepseekbench import (
    ChatRequest,
    EngineRoute,
    LiveGate,
    StreamMeasurement,
    Timeouts,
    measure_streamed,
    pool_limits,
)


def _wave_figures(ms: list[StreamMeasurement]) -> tuple[float, float, float, float]:
    """(first step µs/request, writer µs/request, send_wait p50 ms, send_wait p99 ms)."""
    n = len(ms)
    written = sorted(m.start_perf_ns or 0 for m in ms)
    waits = sorted(m.send_wait_ms or 0.0 for m in ms)
    handed = sorted((m.start_perf_ns or 0) - round((m.send_wait_ms or 0.0) * 1e6) for m in ms)
    per = max(1, n - 1)
    return (
        (handed[-1] - handed[0]) / 1e3 / per,
        (written[-1] - written[0]) / 1e3 / per,
        waits[n // 2],
        waits[min(n - 1, int(n * 0.99))],
    )


async def _run(port: int, args: argparse.Namespace) -> None:
    gate = LiveGate()
    route = EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model="bench")
    request = ChatRequest.model_validate(_request(1))
    timeouts = Timeouts()
    rows: list[tuple[float, float, float, float]] = []
    async with gate.client(timeout=60, limits=pool_limits(args.concurrency)) as client:
        for wave in range(args.waves + 1):
            ms: list[StreamMeasurement] = []

            async def one(out: list[StreamMeasurement]) -> None:
                m = await measure_streamed(
                    request, route=route, gate=gate, client=client, timeouts=timeouts
                )
                assert m.error is None, m.error
                out.append(m)

            async with anyio.create_task_group() as tg:
                for _ in range(args.concurrency):
                    tg.start_soon(one, ms)
            if wave:  # the first wave opens the connections
                rows.append(_wave_figures(ms))
    print(f"C={args.concurrency}, {args.waves} waves, Python {sys.version.split()[0]}")
    print(f"{'wave':<6}{'first step us':>15}{'writer us':>11}{'send_wait p50':>15}{'p99 ms':>8}")
    for i, (first, writer, p50, p99) in enumerate(rows, 1):
        print(f"{i:<6}{first:>15.0f}{writer:>11.0f}{p50:>15.1f}{p99:>8.1f}")
    names = ("first step us/request", "writer us/request", "send_wait p50 ms", "send_wait p99 ms")
    for k, name in enumerate(names):
        values = [r[k] for r in rows]
        print(
            f"  {name}: min {min(values):.1f} / median {statistics.median(values):.1f} / "
            f"max {max(values):.1f}"
        )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--concurrency", type=int, default=256, help="requests started together")
    parser.add_argument("--waves", type=int, default=5, help="measured waves")
    args = parser.parse_args()
    queue: mp.Queue[int] = mp.Queue()
    server = mp.Process(target=_serve, args=(queue, "burst", 2.0, 1, False), daemon=True)
    server.start()
    try:
        anyio.run(_run, queue.get(timeout=30), args, backend="asyncio")
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
