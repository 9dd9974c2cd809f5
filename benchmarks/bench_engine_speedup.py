"""Measured TPOT speedup of the embedded engine's speculative modes over ``off``.

Starts the reference engine (default :class:`CostModel`) in a child process per
mode, streams generated reference tasks to it over loopback with the library's
own instrument, ``measure_streamed`` (one gated, shared httpx client), and
reports per run: median TPOT (ms/token), median TTFT (ms), the acceptance rate
(server-wide: the delta of the engine's ``/metrics`` counters over the run, via
``scrape_metrics``/``metrics_delta``), and the speedup = median TPOT(off) /
median TPOT(mode). TPOT and TTFT are as ``measure_streamed`` defines them
(``docs/measurement.md``): TPOT = (E2E − TTFT) / (completion tokens − 1).
Every output is also checked against the reference answer (greedy parity); a
measurement with an error counts as not exact.

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
from dataclasses import dataclass

import anyio

from deepseekbench._engine import EngineTask, reference_tasks
from deepseekbench._measure._measure import Timeouts, measure_streamed
from deepseekbench._measure._server_metrics import metrics_delta, scrape_metrics
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._axes import Dialect, Speculative
from deepseekbench._types._request import ChatRequest

_CHILD = """
import anyio, sys
from deepseekbench._types._axes import Speculative
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


async def _measure(url: str, mode: str, tasks: list[EngineTask], concurrency: int) -> RunResult:
    gate = LiveGate()
    route = EngineRoute(
        base_url=url,
        model="deepseekbench-ref",
        dialect=Dialect.vllm,
        speculative=Speculative(mode.partition("+")[0]),
        label=mode,
    )
    timeouts = Timeouts(total_s=60.0)
    done: list[tuple[EngineTask, StreamMeasurement]] = []
    limiter = anyio.Semaphore(concurrency)
    async with gate.client() as client:

        async def run(task: EngineTask) -> None:
            request = ChatRequest(
                messages=({"role": "user", "content": task.prompt},), temperature=0
            )
            async with limiter:
                m = await measure_streamed(
                    request, route=route, gate=gate, client=client, timeouts=timeouts
                )
            done.append((task, m))

        before = await scrape_metrics(route, gate=gate, client=client)
        async with anyio.create_task_group() as tg:
            for task in tasks:
                tg.start_soon(run, task)
        after = await scrape_metrics(route, gate=gate, client=client)
    server = metrics_delta(before, after)
    exact = all(m.error is None and m.text == task.answer for task, m in done)
    tpots = [m.tpot_ms for _, m in done if m.tpot_ms is not None]
    ttfts = [m.ttft_ms for _, m in done if m.ttft_ms is not None]
    if not tpots or not ttfts:
        errors = [m.error for _, m in done if m.error is not None][:3]
        raise RuntimeError(f"{mode}: no request gave a TPOT (errors: {errors})")
    ratio = server.accepted_token_ratio if server is not None else None
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
