"""Fidelity: how far client-side timings sit from the engine's own ground truth.

Starts the reference engine in its own process (``python -m deepseekbench serve
--record-send-times``), then for each concurrency C in ``--levels`` (default 1,
16, 64, 256) sends ``max(--waves * C, --min-requests)`` streamed requests, C in
flight, with its readers in the same run: ``measure_streamed`` (through
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
  share) — the same ticker runs for every reader.

``measure_streamed`` runs twice per level: all at once (every stream's first request
together, as ``run`` does by default) and ``measure_streamed ramped``, its first C starts
spread by the runner's own ramp (``arrival.ramp_ms``: the executor's limiter and
``ramp_limiter``) over ``--ramp-ms``, else the span of AIPerf's first C profiled starts in
the same run (stretched by C / (C − 1): our last stream starts at that span's end), else
3 ms per stream. Every row names its start pattern. The three readers take turns going
first (rotated per level and repeat). Each ``measure_streamed`` reader gives two rows:
from the **write** (the library's clock, ``start_perf_ns``) and from the **call** (AIPerf's
clock: the write − ``send_wait_ms`` − ``pool_wait_ms``). With AIPerf installed (``--aiperf``,
default ``aiperf`` on PATH) it runs first at each level (its span sets the ramp): its
per-request records (``profile_export.jsonl``, read by ``_aiperf_export.aiperf_requests``)
give each request's start and content-chunk arrivals (start + TTFT + inter-chunk gaps),
mapped from AIPerf's wall clock to perf_counter by an offset sampled here, matched to the
engine's by ``X-Request-ID`` and scored by the same code as our readers (row ``AIPerf``,
from its call).

A second table splits each reader's TTFT excess from the call (``_fidelity_split``) into
client wait (the call → the client's send; AIPerf: pool + DNS + connect; raw loop: not
stamped), send → engine arrival and the rest (the receive-side TTFT error): p50s for wave 1
(the first C calls), for the calls after it and for all, and the means (which add up), with
the spans of the first and second C calls. Targets are judged like with like: the ramped
reader's TTFT excess from the call p50 no worse than AIPerf's (when the ramp is AIPerf's
span), ``measure_streamed``'s (all at once, from the write) no worse than the raw loop's;
the all-at-once reader's ratio to AIPerf's is printed, marked not judged.
``--repeats N`` runs everything N times and prints min / median / max per reader and clock.

Run: ``python benchmarks/bench_fidelity.py [--levels 1,16,64,256 --max-tokens 32
--repeats 3 --aiperf PATH --aiperf-tokenizer DIR --ramp-ms MS]``
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
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
from _fidelity_split import ExcessSplit, excess_split, ramp_for_span_ms, wave_spans_ms

from deepseekbench import EngineRoute, LiveGate, SelfCheck, Timeouts, measure_streamed, pool_limits
from deepseekbench._execute._ramp import ramp_limiter, stream_starts_s

PROMPTS = [f"What is {a} plus {b}?" for a, b in itertools.product(range(3, 40), range(2, 9))]


@dataclass
class Observed:
    """One request as a client saw it: perf_counter ns of sending and of each token chunk."""

    request_id: str
    sent_ns: int
    chunk_ns: list[int] = field(default_factory=list)
    tokens: int | None = None
    ok: bool = True
    call_ns: int | None = None  # the call (AIPerf's clock); None = sent_ns
    send_ns: int | None = None  # the client's send of the body, where the reader stamps it


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
        waits_ms = (m.send_wait_ms or 0.0) + (m.pool_wait_ms or 0.0)
        obs.call_ns, obs.send_ns = start - round(waits_ms * 1e6), start
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


async def _phase(
    read: Reader, prefix: str, n: int, concurrency: int, ramp_ms: float = 0.0
) -> list[Observed]:
    """``n`` requests, ``concurrency`` in flight (a closed loop); with ``ramp_ms`` > 0 the
    loop's first starts are spread as the runner spreads them (``arrival.ramp_ms``: the
    same limiter and :func:`ramp_limiter` as ``_execute/_executor.py``)."""
    out: list[Observed] = []
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            out.append(await read(f"{prefix}-{i}", i))

    async with anyio.create_task_group() as ramp:
        t0_ns = time.perf_counter_ns()
        if ramp_ms > 0:
            limiter.total_tokens = 1  # stream 0; the others join at their starts
            ramp.start_soon(ramp_limiter, limiter, stream_starts_s(concurrency, ramp_ms), t0_ns)
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        ramp.cancel_scope.cancel()
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


def _aiperf_observed(out: Path) -> list[Observed] | None:
    """AIPerf's profiled requests from its ``profile_export.jsonl`` on the engine's clock,
    timed from the call (its request start); its send stamp is the connection ready (start
    + pool wait + DNS + connecting: it stamps no write). Matched to the engine by
    ``X-Request-ID``."""
    files = list(out.rglob("profile_export.jsonl"))
    if not files:
        return None
    requests = aiperf_requests(files[0].read_bytes().splitlines(), _wall_minus_perf_ns())
    return [
        Observed(r.request_id, r.call_ns, r.chunk_ns, ok=bool(r.chunk_ns), send_ns=r.connection_ns)
        for r in requests
    ]


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
    """One reader's figures (ms). ``excess_*``: on the row's own clock (from the write or
    from the call). ``call_excess_p50`` / ``wait_p50`` / ``wire_p50`` and ``means``: the split
    of the TTFT excess *from the call* (``_fidelity_split``; a wait is ``None`` where the
    reader stamps no send; the rest is ``recv_*``). ``waves_ms``: the spans of the first and
    second ``C`` calls; ``by_wave``: client wait p50 and send → arrival p50 of the first
    ``C`` calls, then of the calls after them."""

    n: int
    ok: int
    recv_p50: float
    recv_p99: float
    excess_p50: float
    excess_p99: float
    itl_p99: float
    tpot_p99: float
    peak: int
    call_excess_p50: float = float("nan")
    wait_p50: float | None = None
    wire_p50: float = float("nan")
    means: tuple[float, float | None, float, float] = (float("nan"), None, float("nan"), 0.0)
    waves_ms: tuple[float, ...] = ()
    by_wave: tuple[float | None, float | None, float, float] = (None, None, math.nan, math.nan)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _waits_p50(splits: Sequence[ExcessSplit]) -> float | None:
    waits = [x.client_wait for x in splits if x.client_wait is not None]
    return _pct(waits, 0.5) if splits and len(waits) == len(splits) else None


def _split_fields(timed: list[tuple[int, ExcessSplit]], concurrency: int) -> dict[str, Any]:
    """The from-the-call split's fields of :class:`Figures` from ``(call_ns, split)`` pairs."""
    timed = sorted(timed, key=lambda pair: pair[0])
    splits = [x for _, x in timed]
    first, after = splits[:concurrency], splits[concurrency:]
    waits = [x.client_wait for x in splits if x.client_wait is not None]
    has_wait = bool(splits) and len(waits) == len(splits)
    return {
        "call_excess_p50": _pct([x.excess for x in splits], 0.5),
        "wait_p50": _waits_p50(splits),
        "wire_p50": _pct([x.send_to_arrival for x in splits], 0.5),
        "means": (
            _mean([x.excess for x in splits]),
            _mean(waits) if has_wait else None,
            _mean([x.send_to_arrival for x in splits]),
            _mean([x.rest for x in splits]),
        ),
        "by_wave": (
            _waits_p50(first),
            _waits_p50(after),
            _pct([x.send_to_arrival for x in first], 0.5),
            _pct([x.send_to_arrival for x in after], 0.5),
        ),
    }


def _figures(observed: list[Observed], truths: dict[str, Truth], concurrency: int) -> Figures:
    recv: list[float] = []
    excess: list[float] = []
    itl: list[float] = []
    tpot: list[float] = []
    timed: list[tuple[int, ExcessSplit]] = []
    pairs = [(o, truths[o.request_id]) for o in observed if o.ok and o.request_id in truths]
    for o, t in pairs:
        if not o.chunk_ns or not t.token_sends_s or len(o.chunk_ns) != len(t.token_sends_s):
            continue
        client = [ns / 1e6 for ns in o.chunk_ns]  # ms
        engine = [s * 1e3 for s in t.token_sends_s]
        recv.append(client[0] - engine[0])
        excess.append((client[0] - o.sent_ns / 1e6) - (engine[0] - t.arrival_s * 1e3))
        call = o.sent_ns if o.call_ns is None else o.call_ns
        arrival, engine_first = round(t.arrival_s * 1e9), round(t.token_sends_s[0] * 1e9)
        timed.append((call, excess_split(call, o.send_ns, o.chunk_ns[0], arrival, engine_first)))
        itl.extend(
            abs((c1 - c0) - (e1 - e0))
            for (c0, c1), (e0, e1) in zip(
                itertools.pairwise(client), itertools.pairwise(engine), strict=True
            )
        )
        if len(client) > 1:
            k = len(client) - 1
            tpot.append(abs((client[-1] - client[0]) / k - (engine[-1] - engine[0]) / k))
    calls = [o.sent_ns if o.call_ns is None else o.call_ns for o in observed]
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
        waves_ms=tuple(wave_spans_ms(calls, concurrency)),
        **_split_fields(timed, concurrency),
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


OURS, RAMPED, RAW, AIPERF = (
    "measure_streamed",
    "measure_streamed ramped",
    "raw aiohttp loop",
    "AIPerf",
)


@dataclass(frozen=True)
class Row:
    """One reader at one level: its clock (``write``: from the body's write, the library's
    own clock; ``call``: from the call, AIPerf's clock), its start pattern and figures."""

    c: int
    reader: str
    clock: str
    pattern: str
    figures: Figures
    note: str


def _ramp_choice(
    args: argparse.Namespace, c: int, aiperf_span_ms: float | None
) -> tuple[float, str]:
    """The ramped reader's ramp (ms) and where it came from: ``--ramp-ms``, else the span of
    AIPerf's first C starts in this run (stretched so our last stream starts at its span's
    end), else 3 ms per stream (AIPerf's 256 over ~0.7–0.9 s)."""
    if c == 1:
        return 0.0, "one stream: every pattern is the same"
    if args.ramp_ms is not None:
        return args.ramp_ms, "--ramp-ms"
    if aiperf_span_ms is not None:
        return ramp_for_span_ms(aiperf_span_ms, c), "AIPerf's span in this run"
    return 3.0 * c, "3 ms per stream, no AIPerf span"


async def _aiperf_first(
    c: int, n: int, base_url: str, args: argparse.Namespace, rep: int
) -> tuple[list[Observed] | None, float | None]:
    """Run AIPerf at this level (first, so its start span can set the ramp); returns its
    requests and the span of its first C profiled starts (ms), or ``(None, None)``."""
    if not args.aiperf:
        return None, None
    aiperf_dir = Path(args.tmp) / f"aiperf-{c}-{rep}"
    error = await anyio.to_thread.run_sync(
        _run_aiperf, args.aiperf, args.aiperf_tokenizer, base_url, c, n, args.max_tokens, aiperf_dir
    )
    if error:
        print(f"C={c} AIPerf: {error}", file=sys.stderr)
        return None, None
    observed = _aiperf_observed(aiperf_dir)
    if not observed:
        return None, None
    spans = wave_spans_ms([o.sent_ns for o in observed], c, waves=1)
    return observed, spans[0] if spans else None


async def _level(
    c: int, base_url: str, args: argparse.Namespace, gate: LiveGate, turn: int, rep: int = 0
) -> list[Row]:
    import aiohttp

    n = max(args.waves * c, args.min_requests)
    aiperf, aiperf_span = await _aiperf_first(c, n, base_url, args, rep)
    ramp_ms, ramp_source = _ramp_choice(args, c, aiperf_span)
    results: dict[str, tuple[list[Observed], str]] = {}

    async def measured(name: str, read: Reader, prefix: str, ramp: float = 0.0) -> None:
        prefix = f"r{rep}-{prefix}"
        await _phase(read, f"warm-{prefix}", c, c)
        async with SelfCheck() as check:  # the same ticker watches every reader
            observed = await _phase(read, prefix, n, c, ramp)
        s = check.summary()
        results[name] = (observed, f"{s.max_lag_ms:.1f} / {s.cpu_share:.2f}")

    async def run_raw() -> None:
        connector = aiohttp.TCPConnector(limit=c)
        async with aiohttp.ClientSession(connector=connector) as session:
            await measured(RAW, _raw_aiohttp(session, base_url, args.max_tokens), f"raw-{c}")

    async def run_ours() -> None:
        async with gate.client(limits=pool_limits(c)) as client:
            await measured(OURS, _ours(gate, client, base_url, args.max_tokens), f"ours-{c}")

    async def run_ramped() -> None:
        async with gate.client(limits=pool_limits(c)) as client:
            read = _ours(gate, client, base_url, args.max_tokens)
            await measured(RAMPED, read, f"ramp-{c}", ramp_ms)

    runs = [run_ours, run_ramped, run_raw]
    for run in runs[turn % 3 :] + runs[: turn % 3]:
        await run()
    async with httpx.AsyncClient(timeout=120) as plain:
        timelines = orjson.loads(
            (await plain.get(base_url.removesuffix("/v1") + "/v1/timelines")).content
        )
    truths = _truths(timelines)
    rows: list[Row] = []
    for name, (obs, note) in results.items():
        pattern = f"ramp {ramp_ms:.0f} ms ({ramp_source})" if name == RAMPED else "all at once"
        if name != RAW:  # the library's own clock, then AIPerf's (the same requests)
            rows.append(Row(c, name, "write", pattern, _figures(obs, truths, c), note))
            obs = [dataclasses.replace(o, sent_ns=o.call_ns or o.sent_ns) for o in obs]
        rows.append(Row(c, name, "call", pattern, _figures(obs, truths, c), note))
    if aiperf is not None:
        own = f"AIPerf's own (first {c} over {aiperf_span or 0:.0f} ms)"
        rows.append(Row(c, AIPERF, "call", own, _figures(aiperf, truths, c), ""))
    return rows


def _print_table(rows: list[Row], load: tuple[float, float, float]) -> None:
    print(
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs); "
        "times in ms"
    )
    print(
        "| C | reader | from | start pattern | ok/n | engine peak in flight | "
        "recv TTFT err p50 / p99 | TTFT − engine TTFT p50 / p99 | ITL err p99 | "
        "TPOT err p99 | self-check lag ms / CPU |"
    )
    print("|---" * 11 + "|")
    for r in rows:
        f = r.figures
        print(
            f"| {r.c} | {r.reader} | {r.clock} | {r.pattern} | {f.ok}/{f.n} | {f.peak} | "
            f"{f.recv_p50:.2f} / {f.recv_p99:.2f} | {f.excess_p50:.2f} / {f.excess_p99:.2f} | "
            f"{f.itl_p99:.2f} | {f.tpot_p99:.3f} | {r.note or '—'} |"
        )
    print(
        "\nwhere the TTFT excess from the call lives (ms): client wait = call → the client's "
        "send (measure_streamed: pool + send wait; AIPerf: pool + DNS + connect, it stamps no "
        "write; raw: not stamped, inside the next); send → engine arrival; rest = recv TTFT "
        "err. p50s, then means (which add up)."
    )
    print(
        "| C | reader | start pattern | wave 1 / wave 2 call span | client wait p50: "
        "wave 1 / after | send → arrival p50: wave 1 / after | excess p50 | "
        "client wait p50 | send → arrival p50 | rest p50 | means: wait + send→arrival + "
        "rest = excess |"
    )
    print("|---" * 11 + "|")
    for r in rows:
        if r.clock != "call":
            continue
        f, (m_ex, m_wait, m_wire, m_rest) = r.figures, r.figures.means
        w1, w2, a1, a2 = f.by_wave
        waves = " / ".join(f"{w:.0f}" for w in f.waves_ms) or "—"
        print(
            f"| {r.c} | {r.reader} | {r.pattern} | {waves} | {_opt(w1)} / {_opt(w2)} | "
            f"{a1:.2f} / {a2:.2f} | "
            f"{f.call_excess_p50:.2f} | "
            f"{_opt(f.wait_p50)} | {f.wire_p50:.2f} | {f.recv_p50:.2f} | "
            f"{_opt(m_wait)} + {m_wire:.2f} + {m_rest:.2f} = {m_ex:.2f} |"
        )


def _opt(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _targets(rows: list[Row], levels: Sequence[int]) -> list[str]:
    """The targets, judged like with like (the same start pattern); returns the misses."""
    misses = [f"C={r.c} {r.reader}: the engine saw {r.figures.peak} in flight"
              for r in rows if r.figures.peak != r.c]  # fmt: skip
    by = {(r.c, r.reader, r.clock): r for r in rows}
    for c in levels:
        ours, raw = by[(c, OURS, "write")].figures, by[(c, RAW, "call")].figures
        if ours.excess_p50 > raw.excess_p50:  # both all at once
            misses.append(
                f"C={c}: TTFT excess p50 {ours.excess_p50:.2f} > raw {raw.excess_p50:.2f} ms"
            )
        if (c, AIPERF, "call") not in by:
            continue
        theirs = by[(c, AIPERF, "call")].figures
        ramped = by[(c, RAMPED, "call")]
        like = c == 1 or "AIPerf's span" in ramped.pattern
        verdict = "no worse" if ramped.figures.excess_p50 <= theirs.excess_p50 else "WORSE"
        print(
            f"C={c}: TTFT excess from the call p50, {RAMPED} ({ramped.pattern}) "
            f"{ramped.figures.excess_p50:.2f} vs AIPerf {theirs.excess_p50:.2f} ms: {verdict}"
            + ("" if like else " (ramp not AIPerf's span: not like with like, not judged)")
        )
        if like and verdict == "WORSE":
            misses.append(f"C={c}: ramped TTFT excess from the call p50 > AIPerf's")
        at_once = by[(c, OURS, "call")].figures
        print(
            f"C={c}: (different start pattern, not judged) {OURS} all at once from the call "
            f"{at_once.excess_p50:.2f} vs AIPerf {theirs.excess_p50:.2f} ms"
        )
    for c, limit in ((64, 1.0), (256, 5.0)):
        if (c, OURS, "write") in by and by[(c, OURS, "write")].figures.recv_p99 >= limit:
            misses.append(f"C={c}: receive-side TTFT error p99 >= {limit} ms")
    return misses


async def _run(base_url: str, args: argparse.Namespace) -> None:
    gate = LiveGate()
    repeats: list[list[Row]] = []
    for r in range(args.repeats):
        rows: list[Row] = []
        for i, c in enumerate(args.levels):
            for row in await _level(c, base_url, args, gate, turn=i + r, rep=r):
                rows.append(row)
                print(f"C={c} {row.reader} from {row.clock}: done "
                      f"({row.figures.ok}/{row.figures.n} usable)", file=sys.stderr)  # fmt: skip
        print(f"\nrepeat {r + 1} of {args.repeats}")
        _print_table(rows, os.getloadavg())
        repeats.append(rows)
    if args.repeats > 1:
        _print_repeats(repeats)
    misses = _targets(repeats[-1], args.levels)
    print("targets (last repeat): " + ("all met" if not misses else "MISSED: " + "; ".join(misses)))


def _spread(values: Sequence[float]) -> str:
    s = sorted(values)
    return f"{s[0]:.2f} / {s[len(s) // 2]:.2f} / {s[-1]:.2f}"


def _print_repeats(repeats: list[list[Row]]) -> None:
    """Per C, reader and clock over the repeats, min / median / max (ms) of: TTFT excess
    p50, receive-side TTFT error p50 and p99, ITL error p99, TPOT error p99, and the
    from-the-call split (client wait, send → engine arrival p50); then the ramped reader's
    and the all-at-once reader's TTFT excess from the call over AIPerf's, repeat by repeat."""
    print("\nover the repeats, min / median / max (ms)")
    print("| C | reader | from | TTFT − engine p50 | recv TTFT err p50 | recv TTFT err p99 | "
          "ITL err p99 | TPOT err p99 | client wait p50 | send → arrival p50 | "
          "client wait p50, wave 1 / after | send → arrival p50, wave 1 / after |")  # fmt: skip
    print("|---" * 12 + "|")
    by: dict[tuple[int, str, str], list[Row]] = {}
    for rows in repeats:
        for row in rows:
            by.setdefault((row.c, row.reader, row.clock), []).append(row)
    for (c, name, clock), rs in sorted(by.items()):
        fs = [r.figures for r in rs]
        cells = [
            _spread([getattr(f, k) for f in fs])
            for k in ("excess_p50", "recv_p50", "recv_p99", "itl_p99", "tpot_p99")
        ]
        waits = [f.wait_p50 for f in fs if f.wait_p50 is not None]
        cells.append(_spread(waits) if len(waits) == len(fs) else "—")
        cells.append(_spread([f.wire_p50 for f in fs]))
        for k in (0, 2):  # client wait, send → arrival: wave 1, then the calls after it
            pair = [(f.by_wave[k], f.by_wave[k + 1]) for f in fs]
            if all(a is not None and b is not None for a, b in pair):
                first, after = (_spread([p[j] or 0.0 for p in pair]) for j in (0, 1))
                cells.append(f"wave 1 {first}; after {after}")
            else:
                cells.append("—")
        print(f"| {c} | {name} | {clock} | " + " | ".join(cells) + " |")
    for c in sorted({c for c, _, _ in by}):
        patterns = "; ".join(r.pattern for r in by.get((c, RAMPED, "call"), []))
        print(f"  C={c} ramped reader's patterns, per repeat: {patterns}")
        theirs = [r.figures.excess_p50 for r in by.get((c, AIPERF, "call"), [])]
        for name, clock in ((RAMPED, "call"), (OURS, "call"), (OURS, "write"), (RAW, "call")):
            ours = [r.figures.excess_p50 for r in by.get((c, name, clock), [])]
            if ours and theirs and len(theirs) == len(ours):
                ratios = " ".join(f"{o / t:.2f}" for o, t in zip(ours, theirs, strict=True))
                print(
                    f"  C={c} {name} from the {clock} / AIPerf TTFT excess p50, "
                    f"per repeat: {ratios}"
                )
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
    parser.add_argument(
        "--ramp-ms",
        type=float,
        default=None,
        help="the ramped reader's ramp (ms; default: AIPerf's span of its first C starts in "
        "the same run, else 3 ms x C)",
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
