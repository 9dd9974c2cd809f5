"""Client scale-out: one load point from 1 and 2 worker processes (and 2 Ray actors).

A server in its own process streams to a closed loop of ``--concurrency``
streams; the same load point (same requests, same split rule) is sent by
:class:`WorkerPool` with 1 and 2 workers and, when ``ray`` is installed, by
:class:`RayPool` with 2 actors on a local loopback instance. Per executor:

* sustained chunks/s: token-bearing chunks received / the load point's window
  (shared start to last finish, CLOCK_MONOTONIC);
* TTFT median and p90 (ms), and the *added* TTFT: median TTFT at load minus the
  median TTFT of one stream alone (same server, same requests, measured first);
* the client self-check: the largest event-loop lag any request saw in its
  worker (ms) and whether a row would be flagged ``client_saturated`` (a lag
  above ``DEFAULT_LAG_THRESHOLD_MS``);
* errors, and the 1-minute load average before and after.

Servers: ``--server engine`` (default) runs ``python -m deepseekbench serve``
with near-free step costs (the reference engine: Python, so it may itself be
the bottleneck on a small machine); ``--server raw`` is the precomputed-chunk
server of ``bench_client_overhead.py`` (``max_tokens`` chunks per response; in
``--raw-mode paced`` one event per write, ``--interval-ms`` apart, as an engine
sends; ``burst`` writes the whole response at once), which a client saturates
first.

Run: ``python benchmarks/bench_scaling.py [--server raw --concurrency 64 --max-tokens 1000]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from deepseekbench import (
    DEFAULT_LAG_THRESHOLD_MS,
    ChatRequest,
    EngineRoute,
    LiveGate,
    LoadWork,
    PoolItem,
    PoolReport,
    PoolResult,
    RayPool,
    Timeouts,
    WorkerPool,
)

PROMPTS = ("Count from 10 to 90.", "Count from 3 to 60.", "Reverse bratakolu.", "12 + 30 =")


@dataclass(frozen=True, slots=True)
class Outcome:
    name: str
    workers: int
    chunks_per_s: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    errors: int
    max_lag_ms: float
    p90_lag_ms: float
    flagged_share: float
    window_s: float
    load_before: float
    load_after: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(url: str, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            httpx.get(url, timeout=1.0, trust_env=False)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"server at {url} did not come up")


@contextmanager
def engine_server(speculative: str = "off") -> Iterator[str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "deepseekbench", "serve", "--port", str(port)]
    cmd += ["--speculative", speculative]
    cmd += ["--target-step-ms", "0.2", "--prefill-ms-per-token", "0", "--batch-exponent", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_up(f"http://127.0.0.1:{port}/v1/models")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def raw_server(mode: str, interval_ms: float, events_per_write: int = 1) -> Iterator[str]:
    from bench_client_overhead import _serve

    queue: mp.Queue[int] = mp.Queue()
    proc = mp.Process(target=_serve, args=(queue, mode, interval_ms, events_per_write), daemon=True)
    proc.start()
    try:
        yield f"http://127.0.0.1:{queue.get(timeout=30)}/v1"
    finally:
        proc.terminate()
        proc.join(5)


def _work(n: int, concurrency: int, max_tokens: int, warm: int, spread: float = 0.0) -> LoadWork:
    def req(i: int) -> ChatRequest:
        # spread > 0: output lengths vary deterministically over [1 - spread, 1 + spread]
        # x max_tokens (as real traffic does), so streams do not start and finish in step.
        f = 1.0 + spread * (2.0 * ((i * 37) % 101) / 100.0 - 1.0)
        return ChatRequest(
            messages=({"role": "user", "content": PROMPTS[i % len(PROMPTS)]},),
            max_tokens=max(1, round(max_tokens * f)),
            temperature=0,
        )

    items = tuple(PoolItem(i, "off", req(i)) for i in range(n))
    return LoadWork(
        items, concurrency, warmup=tuple(PoolItem(-1, "off", req(i)) for i in range(warm))
    )


def _ttfts(results: list[PoolResult]) -> list[float]:
    return sorted(
        r.measurement.ttft_ms
        for r in results
        if r.item is not None and r.measurement.ttft_ms is not None
    )


def _outcome(
    name: str, workers: int, results: list[PoolResult], report: PoolReport, load_before: float
) -> Outcome:
    measured = [r for r in results if r.item is not None]
    chunks = sum(len(r.measurement.chunk_arrival_ms) for r in measured)
    ttft = _ttfts(results)
    lags = sorted(r.measurement.client_lag_ms or 0.0 for r in measured)
    return Outcome(
        name=name,
        workers=workers,
        chunks_per_s=chunks / report.window_s if report.window_s > 0 else 0.0,
        ttft_p50_ms=statistics.median(ttft) if ttft else float("nan"),
        ttft_p90_ms=ttft[int(0.9 * (len(ttft) - 1))] if ttft else float("nan"),
        errors=sum(1 for r in measured if r.measurement.error is not None),
        max_lag_ms=lags[-1] if lags else 0.0,
        p90_lag_ms=lags[int(0.9 * (len(lags) - 1))] if lags else 0.0,
        flagged_share=(
            sum(1 for x in lags if x > DEFAULT_LAG_THRESHOLD_MS) / len(lags) if lags else 0.0
        ),
        window_s=report.window_s,
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )


async def _one(kind: str, workers: int, route: EngineRoute, work: LoadWork) -> Outcome:
    results: list[PoolResult] = []
    routes = {"off": route}
    timeouts = Timeouts(total_s=600)
    pool: WorkerPool | RayPool
    if kind == "ray":
        pool = RayPool(workers, routes=routes, gate=LiveGate(), timeouts=timeouts, actor_cpus=0)
    else:
        pool = WorkerPool(workers, routes=routes, gate=LiveGate(), timeouts=timeouts)
    async with pool:
        load_before = os.getloadavg()[0]
        report = await pool.run(work, results.append)
    name = f"{'Ray actors' if kind == 'ray' else 'processes'} x{workers}"
    return _outcome(name, workers, results, report, load_before)


async def _bench(base_url: str, args: argparse.Namespace) -> None:
    route = EngineRoute(base_url=base_url, model=args.model)
    alone = await _one("process", 1, route, _work(args.alone, 1, args.max_tokens, 1))
    base_ttft = alone.ttft_p50_ms
    runs = [("process", 1), ("process", 2)]
    if not args.no_ray:
        runs.append(("ray", 2))
    work = _work(args.requests, args.concurrency, args.max_tokens, args.warmup, args.spread)
    outcomes = []
    for kind, n in runs:
        outcomes.append(await _one(kind, n, route, work))
    print(
        f"server: {args.server}; closed loop, concurrency {args.concurrency}, "
        f"{args.requests} requests, max_tokens {args.max_tokens} (spread {args.spread:g}); "
        f"TTFT of one stream alone: {base_ttft:.2f} ms; {os.cpu_count()} CPUs"
    )
    print(
        "| executor | chunks/s | TTFT p50 (ms) | added TTFT p50 (ms) | TTFT p90 (ms) "
        "| client lag p90 / max (ms) | requests over lag threshold | client_saturated "
        "| errors | window (s) "
        "| load avg before → after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for o in outcomes:
        print(
            f"| {o.name} | {o.chunks_per_s:,.0f} | {o.ttft_p50_ms:.1f} | "
            f"{o.ttft_p50_ms - base_ttft:+.1f} | {o.ttft_p90_ms:.1f} | "
            f"{o.p90_lag_ms:.1f} / {o.max_lag_ms:.1f} | {o.flagged_share:.1%} | "
            f"{'yes' if o.max_lag_ms > DEFAULT_LAG_THRESHOLD_MS else 'no'} | {o.errors} | "
            f"{o.window_s:.2f} | {o.load_before:.2f} → {o.load_after:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--server", choices=["engine", "raw"], default="engine")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--alone", type=int, default=8, help="requests for the one-stream TTFT")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--raw-mode", choices=["paced", "burst"], default="paced")
    parser.add_argument("--interval-ms", type=float, default=0.0, help="raw paced: event gap")
    parser.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="output lengths vary over (1 +- spread) x max_tokens (0 = all equal, in step)",
    )
    parser.add_argument(
        "--events-per-write",
        type=int,
        default=1,
        help="raw paced: events per server write (more = a cheaper server per event)",
    )
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    if args.server == "raw":
        args.model = "bench"
        server = raw_server(args.raw_mode, args.interval_ms, args.events_per_write)
    else:
        args.model = "deepseekbench-ref"
        server = engine_server()
    with server as base_url:
        anyio.run(_bench, base_url, args)


if __name__ == "__main__":
    main()
