"""Fidelity at 256 streams: no CPU-clock read per request on the event loop.

Reading a CPU clock (``time.thread_time_ns``, ``time.process_time_ns``,
``/proc/thread-self/schedstat``) makes the kernel settle the thread's run time, and
on a busy host that is where it takes the core away (p99 2-4 ms per read under
load, against 6 µs for ``getppid``). ``measure_streamed`` used to read the loop
thread's clocks at the start and end of every request under a running
``SelfCheck``: 2 x C yields per wave at C streams. They are now read at most once
per ``SelfCheck.interval_s`` and shared.

This check starts the reference engine in its own process, sends ``--requests``
streamed requests with ``--concurrency`` in flight through ``measure_streamed``
under a ``SelfCheck``, and counts the reads of the loop thread's clocks
(``SelfCheck.sched_reads``, and every call of ``sched_sample``). It passes when the
reads are bounded by the elapsed time (one per five ticker periods, plus one per
request shorter than that, plus 2), not by the number of requests, and every
measured request still carries its CPU share. Counts, not timings: the machine's load
does not decide it.

Run: ``python benchmarks/check_request_path.py [--concurrency 128 --requests 256]``;
exit status 0 = pass, 1 = regression.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_fidelity import _body, _start_engine

import deepseekbench._measure._measure as measure_module
import deepseekbench._measure._selfcheck as selfcheck_module
from deepseekbench import (
    EngineRoute,
    LiveGate,
    SelfCheck,
    StreamMeasurement,
    measure_streamed,
    pool_limits,
)


async def _run(base_url: str, args: argparse.Namespace) -> int:
    calls = 0
    real = selfcheck_module.sched_sample

    def counting() -> selfcheck_module.SchedSample:
        nonlocal calls
        calls += 1
        return real()

    # every holder of the name: a module that imported it reads through its own binding
    holders = [m for m in (selfcheck_module, measure_module) if hasattr(m, "sched_sample")]
    for module in holders:
        module.sched_sample = counting  # type: ignore[attr-defined]
    gate = LiveGate()
    route = EngineRoute(base_url=base_url, model="deepseekbench-ref")
    out: list[StreamMeasurement] = []
    limiter = anyio.CapacityLimiter(args.concurrency)
    try:
        async with gate.client(limits=pool_limits(args.concurrency)) as client:

            async def one(i: int) -> None:
                async with limiter:
                    body = _body(i, args.max_tokens)
                    out.append(await measure_streamed(body, route=route, gate=gate, client=client))

            async with SelfCheck() as check:
                start = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for i in range(args.requests):
                        tg.start_soon(one, i)
                wall = time.perf_counter() - start
    finally:
        for module in holders:
            module.sched_sample = real  # type: ignore[attr-defined]
    periods = wall / check.interval_s
    # one shared reading per five periods; a request shorter than that may add one
    # (its window needs a second reading)
    short = sum(m.e2e_ms is not None and m.e2e_ms < 5 * check.interval_s * 1e3 for m in out)
    bound = int(periods / 5) + 2 + short
    ok = [m for m in out if m.error is None]
    shared = sum(m.client_cpu_share is not None for m in ok)
    print(
        f"{len(ok)}/{len(out)} requests ok at C={args.concurrency} in {wall:.2f} s "
        f"({periods:.0f} ticker periods, {short} requests under 5); clock reads: {calls} "
        f"(SelfCheck.sched_reads {getattr(check, 'sched_reads', '-')}); bound {bound}; "
        f"requests with a CPU share: {shared}"
    )
    misses = []
    if calls > bound:
        misses.append(f"{calls} clock reads for {len(out)} requests > {bound} ticker periods")
    if len(ok) != len(out):
        misses.append(f"{len(out) - len(ok)} requests failed")
    if shared != len(ok):
        misses.append(f"{len(ok) - shared} requests carry no CPU share")
    print("check: " + ("pass" if not misses else "REGRESSION: " + "; ".join(misses)))
    return 0 if not misses else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, base_url = _start_engine(Path(tmp) / "engine.log")
        try:
            status = anyio.run(_run, base_url, args)
        finally:
            proc.terminate()
            proc.wait(10)
    sys.exit(status)


if __name__ == "__main__":
    main()
