"""Fidelity: how far client-side timings sit from the engine's own ground truth.

Starts the reference engine in its own process (``python -m deepseekbench serve
--record-send-times``), then for each concurrency C in ``--levels`` (default 1,
16, 64, 256) sends ``max(--waves * C, --min-requests)`` streamed requests, C in
flight, with two readers in the same run: ``measure_streamed`` (through
``gate.client()``, pool sized to C, a :class:`SelfCheck` running) and a raw
aiohttp loop (how vLLM's bench client and AIPerf read). Each request carries
an ``x-request-id``; afterwards ``GET /v1/timelines`` gives, per request, the
engine's arrival time and the send time and tokens of every chunk on the same
clock (``time.perf_counter`` = CLOCK_MONOTONIC on Linux, shared by both
processes).

Per level and reader it prints (ms):

* recv TTFT err: client arrival of the first token − engine send of it (p50, p99);
* TTFT − eng: client TTFT − engine TTFT (first token send − request arrival) (p50, p99);
* ITL err p99: |client chunk gap − engine send gap|, all gaps;
* TPOT err p99: |client TPOT − engine TPOT| per request;
* peak: the most requests the engine had in flight at once (must equal C);
* lag/cpu: the client's self-check during the phase (largest event-loop lag, ms; CPU
  share) — the same ticker runs for both readers.

The two readers take turns going first (raw first at the 1st, 3rd, ... level).
A third row, ``measure_streamed from hand-over``, times the same requests from the
connection hand-over (the clock before the 256-stream fidelity fix; the difference is
``send_wait_ms``). With AIPerf installed (``--aiperf``, default ``aiperf`` on PATH)
it runs after them at each level as a fourth reader: its per-request records
(``profile_export.jsonl``, read by ``_aiperf_export.aiperf_requests``) give each
request's start and content-chunk arrivals (start + TTFT + inter-chunk gaps), mapped
from AIPerf's wall clock to perf_counter by an offset sampled here, matched to the
engine's by ``X-Request-ID`` and scored by the same code as our readers: rows
``AIPerf`` (from the call: AIPerf's request start) and ``AIPerf from connection``
(start + pool wait + DNS + connecting). The target is ``measure_streamed``'s TTFT
excess p50 within 1.5x of AIPerf's.
``--repeats N`` runs everything N times and prints min / median / max per reader.

Run: ``python benchmarks/bench_fidelity.py [--levels 1,16,64,256 --max-tokens 32
--repeats 3 --aiperf PATH --aiperf-tokenizer DIR]``
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _aiohttp_sse import read_deltas
from _aiperf_export import aiperf_requests

from deepseekbench import EngineRoute, LiveGate, SelfCheck, Timeouts, measure_streamed, pool_limits

PROMPTS = [f"What is {a} plus {b}?" for a, b in itertools.product(range(3, 40), range(2, 9))]


@dataclass
class Observed:
    """One request as a client saw it: perf_counter ns of sending and of each token chunk."""

    request_id: str
    sent_ns: int
    chunk_ns: list[int] = field(default_factory=list)
    tokens: int | None = None
    ok: bool = True
    handover_ns: int | None = None  # measure_streamed: the connection hand-over


@dataclass(frozen=True)
class Truth:
    """One request as the engine saw it (perf_counter s)."""

    arrival_s: float
    token_sends_s: list[float]
    end_s: float


def _body(i: int, max_tokens: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


# -- readers ------------------------------------------------------------------------

Reader = Callable[[str, int], Awaitable[Observed]]


def _ours(gate: LiveGate, client: httpx.AsyncClient, base_url: str, max_tokens: int) -> Reader:
    async def read(rid: str, i: int) -> Observed:
        route = EngineRoute(
            base_url=base_url, model="deepseekbench-ref", headers={"x-request-id": rid}
        )
        m = await measure_streamed(
            _body(i, max_tokens), route=route, gate=gate, client=client, timeouts=Timeouts()
        )
        start = m.start_perf_ns or 0
        obs = Observed(rid, start, [start + int(ms * 1e6) for ms in m.chunk_arrival_ms])
        obs.tokens, obs.ok = m.completion_tokens, m.error is None
        obs.handover_ns = start - int((getattr(m, "send_wait_ms", None) or 0.0) * 1e6)
        return obs

    return read


def _raw_aiohttp(session: Any, base_url: str, max_tokens: int) -> Reader:
    url = f"{base_url}/chat/completions"

    async def read(rid: str, i: int) -> Observed:
        body = orjson.dumps({"model": "deepseekbench-ref", "stream": True, **_body(i, max_tokens)})
        headers = {"content-type": "application/json", "x-request-id": rid}
        obs = Observed(rid, time.perf_counter_ns())
        obs.chunk_ns = [arrival for arrival, _ in await read_deltas(session, url, body, headers)]
        obs.ok = bool(obs.chunk_ns)
        return obs

    return read


async def _phase(read: Reader, prefix: str, n: int, concurrency: int) -> list[Observed]:
    out: list[Observed] = []
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            out.append(await read(f"{prefix}-{i}", i))

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return out


def _run_aiperf(
    aiperf: str, tokenizer: str, base_url: str, c: int, n: int, max_tokens: int, out: Path
) -> str:
    """Run AIPerf (``aiperf profile``) at concurrency ``c`` for ``n`` streamed chat
    requests (``c`` warm-up requests first) against the engine; its per-request records
    land in ``out``. Returns ``""`` or why it failed. AIPerf sends an ``X-Request-ID``
    per request, which the engine's timelines keep. ``tokenizer``: AIPerf's
    ``--tokenizer`` (it builds its synthetic prompts with one; ``builtin`` downloads
    tiktoken's encoding, so offline give a local Hugging Face tokenizer folder)."""
    cmd = [
        aiperf, "profile", "--model", "deepseekbench-ref", "--url", base_url.removesuffix("/v1"),
        "--endpoint-type", "chat", "--streaming", "--concurrency", str(c),
        "--request-count", str(n), "--warmup-request-count", str(c),
        "--tokenizer", tokenizer, "--prompt-input-tokens-mean", "12",
        "--prompt-input-tokens-stddev", "0", "--output-tokens-mean", str(max_tokens),
        "--output-tokens-stddev", "0", "--use-legacy-max-tokens", "--extra-inputs",
        "temperature:0", "--artifact-dir", str(out), "--ui-type", "none",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        return f"aiperf exited {done.returncode}: {(done.stderr or done.stdout)[-400:]}"
    return ""


def _wall_minus_perf_ns() -> int:
    """``time.time_ns() - time.perf_counter_ns()`` (ns), the pair read closest together of 5."""
    best: tuple[int, int] | None = None
    for _ in range(5):
        a = time.perf_counter_ns()
        wall = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    assert best is not None
    return best[1]


def _aiperf_observed(out: Path) -> tuple[list[Observed], list[Observed]] | None:
    """AIPerf's profiled requests from its ``profile_export.jsonl`` as two reader rows on the
    engine's clock: timed from the call (AIPerf's request start) and from the connection
    (start + pool wait + DNS + connecting). Matched to the engine by ``X-Request-ID``."""
    files = list(out.rglob("profile_export.jsonl"))
    if not files:
        return None
    requests = aiperf_requests(files[0].read_bytes().splitlines(), _wall_minus_perf_ns())
    call = [Observed(r.request_id, r.call_ns, r.chunk_ns, ok=bool(r.chunk_ns)) for r in requests]
    conn = [
        Observed(r.request_id, r.connection_ns, r.chunk_ns, ok=bool(r.chunk_ns)) for r in requests
    ]
    return call, conn


# -- ground truth and figures --------------------------------------------------------


def _truths(timelines: dict[str, Any]) -> dict[str, Truth]:
    out: dict[str, Truth] = {}
    for t in timelines["data"]:
        rid = t.get("request_id")
        if rid is None or t.get("arrival_s") is None or not t["chunks"]:
            continue
        sends = [c["t_s"] for c in t["chunks"] if c["tokens"] > 0 and c["kind"] == "content"]
        out[rid] = Truth(t["arrival_s"], sends, t["chunks"][-1]["t_s"])
    return out


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _peak(intervals: Iterable[tuple[float, float]]) -> int:
    events = sorted(e for a, b in intervals for e in ((a, 1), (b, -1)))
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


@dataclass
class Figures:
    n: int
    ok: int
    recv_p50: float
    recv_p99: float
    excess_p50: float
    excess_p99: float
    itl_p99: float
    tpot_p99: float
    peak: int


def _figures(observed: list[Observed], truths: dict[str, Truth]) -> Figures:
    recv: list[float] = []
    excess: list[float] = []
    itl: list[float] = []
    tpot: list[float] = []
    pairs = [(o, truths[o.request_id]) for o in observed if o.ok and o.request_id in truths]
    for o, t in pairs:
        if not o.chunk_ns or not t.token_sends_s or len(o.chunk_ns) != len(t.token_sends_s):
            continue
        client = [ns / 1e6 for ns in o.chunk_ns]  # ms
        engine = [s * 1e3 for s in t.token_sends_s]
        recv.append(client[0] - engine[0])
        excess.append((client[0] - o.sent_ns / 1e6) - (engine[0] - t.arrival_s * 1e3))
        itl.extend(
            abs((c1 - c0) - (e1 - e0))
            for (c0, c1), (e0, e1) in zip(
                itertools.pairwise(client), itertools.pairwise(engine), strict=True
            )
        )
        if len(client) > 1:
            k = len(client) - 1
            tpot.append(abs((client[-1] - client[0]) / k - (engine[-1] - engine[0]) / k))
    return Figures(
        n=len(observed),
        ok=len(recv),
        recv_p50=_pct(recv, 0.5),
        recv_p99=_pct(recv, 0.99),
        excess_p50=_pct(excess, 0.5),
        excess_p99=_pct(excess, 0.99),
        itl_p99=_pct(itl, 0.99),
        tpot_p99=_pct(tpot, 0.99),
        peak=_peak((t.arrival_s, t.end_s) for _, t in pairs),
    )


# -- the run --------------------------------------------------------------------------


def _start_engine(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    cmd = [sys.executable, "-m", "deepseekbench", "serve", "--port", "0", "--record-send-times"]
    proc = subprocess.Popen(cmd, stderr=log.open("wb"), env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if " at http://" in text:
            return proc, text.split(" at ", 1)[1].split()[0]
        if proc.poll() is not None:
            raise RuntimeError(f"engine exited: {text}")
        time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("engine did not start within 120 s")


async def _level(
    c: int, base_url: str, args: argparse.Namespace, gate: LiveGate, ours_first: bool, rep: int = 0
) -> dict[str, tuple[Figures, str]]:
    import aiohttp

    n = max(args.waves * c, args.min_requests)
    results: dict[str, tuple[list[Observed], str]] = {}

    async def measured(name: str, read: Reader, prefix: str) -> None:
        prefix = f"r{rep}-{prefix}"
        await _phase(read, f"warm-{prefix}", c, c)
        async with SelfCheck() as check:  # the same ticker watches both readers
            observed = await _phase(read, prefix, n, c)
        s = check.summary()
        results[name] = (observed, f"{s.max_lag_ms:.1f} / {s.cpu_share:.2f}")

    async def run_raw() -> None:
        connector = aiohttp.TCPConnector(limit=c)
        async with aiohttp.ClientSession(connector=connector) as session:
            await measured(
                "raw aiohttp loop", _raw_aiohttp(session, base_url, args.max_tokens), f"raw-{c}"
            )

    async def run_ours() -> None:
        async with gate.client(limits=pool_limits(c)) as client:
            await measured(
                "measure_streamed", _ours(gate, client, base_url, args.max_tokens), f"ours-{c}"
            )

    for run in (run_ours, run_raw) if ours_first else (run_raw, run_ours):
        await run()
    aiperf_dir = Path(args.tmp) / f"aiperf-{c}-{rep}"
    aiperf_error = None
    if args.aiperf:
        aiperf_error = await anyio.to_thread.run_sync(
            _run_aiperf,
            args.aiperf,
            args.aiperf_tokenizer,
            base_url,
            c,
            n,
            args.max_tokens,
            aiperf_dir,
        )
    async with httpx.AsyncClient(timeout=120) as plain:
        timelines = orjson.loads(
            (await plain.get(base_url.removesuffix("/v1") + "/v1/timelines")).content
        )
    truths = _truths(timelines)
    out = {name: (_figures(obs, truths), note) for name, (obs, note) in results.items()}
    ours, note = results["measure_streamed"]
    from_handover = [
        Observed(o.request_id, o.handover_ns or o.sent_ns, o.chunk_ns, o.tokens, o.ok) for o in ours
    ]  # the same requests, timed from the hand-over as before the 256-stream fix
    out["measure_streamed from hand-over"] = (_figures(from_handover, truths), note)
    if aiperf_error:
        print(f"C={c} AIPerf: {aiperf_error}", file=sys.stderr)
    elif args.aiperf:
        aiperf = _aiperf_observed(aiperf_dir)
        if aiperf is not None:
            out["AIPerf"] = (_figures(aiperf[0], truths), "")
            out["AIPerf from connection"] = (_figures(aiperf[1], truths), "")
    return out


def _print_table(
    rows: list[tuple[int, str, Figures, str]], load: tuple[float, float, float]
) -> None:
    print(
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs); "
        "times in ms"
    )
    head = (
        "| C | reader | ok/n | engine peak in flight | recv TTFT err p50 / p99 | "
        "TTFT − engine TTFT p50 / p99 | ITL err p99 | TPOT err p99 | self-check lag ms / CPU |"
    )
    print(head)
    print("|---" * 9 + "|")
    for c, name, f, note in rows:
        print(
            f"| {c} | {name} | {f.ok}/{f.n} | {f.peak} | {f.recv_p50:.2f} / {f.recv_p99:.2f} | "
            f"{f.excess_p50:.2f} / {f.excess_p99:.2f} | {f.itl_p99:.2f} | {f.tpot_p99:.3f} | "
            f"{note or '—'} |"
        )


async def _run(base_url: str, args: argparse.Namespace) -> None:
    gate = LiveGate()
    repeats: list[list[tuple[int, str, Figures, str]]] = []
    for r in range(args.repeats):
        rows: list[tuple[int, str, Figures, str]] = []
        for i, c in enumerate(args.levels):
            figures = await _level(c, base_url, args, gate, ours_first=(i + r) % 2 == 1, rep=r)
            for name, (f, note) in sorted(figures.items(), reverse=True):
                rows.append((c, name, f, note))
                print(f"C={c} {name}: done ({f.ok}/{f.n} usable)", file=sys.stderr)
        print(f"\nrepeat {r + 1} of {args.repeats}")
        _print_table(rows, os.getloadavg())
        repeats.append(rows)
    if args.repeats > 1:
        _print_repeats(repeats)
    rows = repeats[-1]
    misses = [f"C={c}: the engine saw {f.peak} in flight" for c, _, f, _ in rows if f.peak != c]
    by = {(c, name): f for c, name, f, _ in rows}
    for c in args.levels:
        ours, raw = by[(c, "measure_streamed")], by[(c, "raw aiohttp loop")]
        if ours.excess_p50 > raw.excess_p50:
            misses.append(
                f"C={c}: TTFT excess p50 {ours.excess_p50:.2f} > raw {raw.excess_p50:.2f} ms"
            )
    for c in args.levels:  # fidelity at 256 streams: within 1.5x of AIPerf's in the same run
        if (c, "AIPerf") in by:
            ours, theirs = by[(c, "measure_streamed")], by[(c, "AIPerf")]
            if ours.excess_p50 > 1.5 * theirs.excess_p50:
                misses.append(
                    f"C={c}: TTFT excess p50 {ours.excess_p50:.2f} > 1.5 x AIPerf's "
                    f"{theirs.excess_p50:.2f} ms"
                )
    for c, limit in ((64, 1.0), (256, 5.0)):
        if (c, "measure_streamed") in by and by[(c, "measure_streamed")].recv_p99 >= limit:
            misses.append(f"C={c}: receive-side TTFT error p99 >= {limit} ms")
    print("targets: " + ("all met" if not misses else "MISSED: " + "; ".join(misses)))


def _spread(values: Sequence[float]) -> str:
    s = sorted(values)
    return f"{s[0]:.2f} / {s[len(s) // 2]:.2f} / {s[-1]:.2f}"


def _print_repeats(repeats: list[list[tuple[int, str, Figures, str]]]) -> None:
    """Per C and reader over the repeats, min / median / max (ms) of: TTFT excess p50,
    receive-side TTFT error p50 and p99, ITL error p99, TPOT error p99; then
    measure_streamed's TTFT excess over the raw loop's and AIPerf's, repeat by repeat."""
    print("\nover the repeats, min / median / max (ms)")
    print("| C | reader | TTFT − engine p50 | recv TTFT err p50 | recv TTFT err p99 | "
          "ITL err p99 | TPOT err p99 |")  # fmt: skip
    print("|---" * 7 + "|")
    by: dict[tuple[int, str], list[Figures]] = {}
    for rows in repeats:
        for c, name, f, _ in rows:
            by.setdefault((c, name), []).append(f)
    for (c, name), fs in sorted(by.items()):
        cells = [
            _spread([getattr(f, k) for f in fs])
            for k in ("excess_p50", "recv_p50", "recv_p99", "itl_p99", "tpot_p99")
        ]
        print(f"| {c} | {name} | " + " | ".join(cells) + " |")
    for c in sorted({c for c, _ in by}):
        ours = [f.excess_p50 for f in by.get((c, "measure_streamed"), [])]
        for other in ("raw aiohttp loop", "AIPerf"):
            theirs = [f.excess_p50 for f in by.get((c, other), [])]
            if ours and theirs and len(theirs) == len(ours):
                ratios = " ".join(f"{o / t:.2f}" for o, t in zip(ours, theirs, strict=True))
                print(f"  C={c} measure_streamed / {other} TTFT excess p50, per repeat: {ratios}")
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64, 256]
    )
    parser.add_argument("--max-tokens", type=int, default=32, help="output tokens per request")
    parser.add_argument("--waves", type=int, default=2, help="requests per level = waves x C")
    parser.add_argument("--min-requests", type=int, default=16, help="at least this many per level")
    parser.add_argument("--repeats", type=int, default=1, help="run every level this many times")
    parser.add_argument(
        "--aiperf",
        default=shutil.which("aiperf"),
        help="the aiperf command to compare with (default: aiperf on PATH; '' = none)",
    )
    parser.add_argument(
        "--aiperf-tokenizer",
        default="builtin",
        help="AIPerf's --tokenizer (a local Hugging Face tokenizer folder when offline)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = tmp
        proc, base_url = _start_engine(Path(tmp) / "engine.log")
        try:
            anyio.run(_run, base_url, args)
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
