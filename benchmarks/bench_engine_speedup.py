"""Measured TPOT speedup of the embedded engine's speculative modes over ``off``.

Starts the reference engine (default :class:`CostModel`) in a child process per
mode, streams generated reference tasks to it over loopback with a plain httpx
client, and reports per run: median TPOT (ms/token), median TTFT (ms), the
acceptance rate, and the speedup = median TPOT(off) / median TPOT(mode).
TPOT = (time of last content chunk − time of first) / (completion tokens − 1).
Every output is also checked against the reference answer (greedy parity).

    python benchmarks/bench_engine_speedup.py [--runs 3] [--prompts 48]
        [--concurrency 4] [--modes mtp dspark mtp+mistuned] [--min-speedup 1.3]

A mode is a ``Speculative`` value, optionally ``+mistuned`` (the lossy-verify
fault: expected faster and *not* exact). Exits 1 when a correct mode's speedup
is below ``--min-speedup``, a correct mode's output differs, or a mistuned mode
shows no drift.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import anyio
import httpx
import orjson

from deepseekbench._engine import EngineTask, reference_tasks

_CHILD = """
import anyio, sys
from deepseekbench._axes import Speculative
from deepseekbench._engine import EngineConfig, serve
method, _, fault = sys.argv[1].partition("+")
cfg = EngineConfig(speculative=Speculative(method), mistuned_draft=fault == "mistuned")
anyio.run(lambda: serve(cfg, "127.0.0.1", 0, on_ready=lambda u: print(u, flush=True)))
"""


@dataclass
class RunResult:
    mode: str
    tpot_ms: float
    ttft_ms: float
    accepted_token_ratio: float | None
    exact: bool


async def _one(client: httpx.AsyncClient, url: str, task: EngineTask) -> tuple[float, float, bool]:
    payload = {
        "messages": [{"role": "user", "content": task.prompt}],
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first = last = 0.0
    text = ""
    tokens = 0
    async with client.stream("POST", url + "/chat/completions", json=payload) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = orjson.loads(line[6:])
            if obj.get("usage"):
                tokens = obj["usage"]["completion_tokens"]
            for c in obj["choices"]:
                if c["delta"].get("content"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    text += c["delta"]["content"]
    tpot = (last - first) * 1000.0 / (tokens - 1)
    return tpot, (first - start) * 1000.0, text == task.answer


async def _measure(url: str, mode: str, tasks: list[EngineTask], concurrency: int) -> RunResult:
    tpots: list[float] = []
    ttfts: list[float] = []
    exact = True
    limiter = anyio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=60) as client:

        async def run(task: EngineTask) -> None:
            nonlocal exact
            async with limiter:
                tpot, ttft, ok = await _one(client, url, task)
            tpots.append(tpot)
            ttfts.append(ttft)
            exact &= ok

        async with anyio.create_task_group() as tg:
            for task in tasks:
                tg.start_soon(run, task)
        metrics = (await client.get(url.removesuffix("/v1") + "/metrics")).text
    drafted = accepted = 0.0
    for line in metrics.splitlines():
        if line.startswith("vllm:spec_decode_num_draft_tokens_total{"):
            drafted = float(line.rsplit(" ", 1)[1])
        if line.startswith("vllm:spec_decode_num_accepted_tokens_total{"):
            accepted = float(line.rsplit(" ", 1)[1])
    ratio = accepted / drafted if drafted else None
    return RunResult(mode, statistics.median(tpots), statistics.median(ttfts), ratio, exact)


def _start(mode: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        raise RuntimeError(f"engine for {mode} did not start")
    return proc, url


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--modes", nargs="+", default=["mtp"])
    ap.add_argument("--min-speedup", type=float, default=1.3)
    args = ap.parse_args()
    failed = False
    for run in range(1, args.runs + 1):
        tasks = reference_tasks(args.prompts, seed=run)
        results: dict[str, RunResult] = {}
        for mode in ["off", *args.modes]:
            proc, url = _start(mode)
            try:
                results[mode] = anyio.run(_measure, url, mode, tasks, args.concurrency)
            finally:
                proc.terminate()
                proc.wait(10)
        base = results["off"].tpot_ms
        for mode, r in results.items():
            speedup = base / r.tpot_ms
            ratio = "-" if r.accepted_token_ratio is None else f"{r.accepted_token_ratio:.3f}"
            print(
                f"run {run} {mode:7s} TPOT {r.tpot_ms:6.2f} ms  TTFT {r.ttft_ms:6.2f} ms  "
                f"acceptance {ratio:>5s}  speedup {speedup:4.2f}x  exact {r.exact}"
            )
            if mode.endswith("+mistuned"):
                failed |= r.exact
            else:
                failed |= not r.exact or (mode != "off" and speedup < args.min_speedup)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
