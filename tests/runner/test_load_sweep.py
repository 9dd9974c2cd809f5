"""Load sweeps, rounds and window figures end to end on the embedded engine (loopback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from deepseekbench import (
    Arrival,
    BenchmarkPlan,
    EmbeddedEngine,
    EngineConfig,
    LiveGate,
    ProgressEvent,
    QualityParity,
    RefusalReason,
    Scorecard,
    run_plan,
)
from tests._helpers import COSTS, off_and_mtp, off_mtp_and_mistuned, plan_of, read_records

PARITY = {"tasks": "none", "prompts": ["Count from 5 to 12.", "What is 7 × 8?"], "max_tokens": 32}
PLAN: dict[str, Any] = {
    "cells": [{"max_tokens": 32}],
    "requests_per_cell": 6,
    "warmup_per_cell": 0,
    "parity": PARITY,
}


def _plan(routes: list[tuple[str, str, str]], **over: Any) -> BenchmarkPlan:
    return plan_of(routes, PLAN, over)


def _window_figures(records: list[dict[str, Any]], route: str, load: str) -> tuple[float, float]:
    """(output tokens/s, requests/s) recomputed from the raw measurement records."""
    blocks: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if r["record"] == "measurement" and r["route"] == route and r["load"] == load:
            m = r["measurement"]
            if m["error"] is None:
                blocks.setdefault(r["round"], []).append(m)
    window_ns = 0.0
    tokens = n = 0
    for ms in blocks.values():
        ends = [m["start_perf_ns"] + m["e2e_ms"] * 1e6 for m in ms]
        window_ns += max(ends) - min(m["start_perf_ns"] for m in ms)
        tokens += sum(m["completion_tokens"] for m in ms)
        n += len(ms)
    return tokens / (window_ns / 1e9), n / (window_ns / 1e9)


def test_a_concurrency_sweep_gives_a_row_per_load_point_and_names_the_crossover(
    tmp_path: Path,
) -> None:
    results = tmp_path / "sweep.jsonl"

    async def main() -> Any:
        async with (
            off_mtp_and_mistuned(cost=COSTS) as (off, mtp, bad),
        ):
            plan = _plan(
                [
                    ("off", "off", off.base_url),
                    ("mtp", "mtp", mtp.base_url),
                    ("mtp-mistuned", "mtp", bad.base_url),
                ],
                arrival={"concurrency": [1, 4, 8]},
                requests_per_cell=12,
                parity={"tasks": "smoke", "max_tokens": 48},
                slo={"e2e_ms": 10_000.0},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    rows = {(r.route_label, r.concurrency): r for r in result.rows}
    assert len(result.rows) == 3 * 3
    for (label, c), row in rows.items():
        assert row.arrival is Arrival.closed and row.request_rate_per_s is None
        assert row.rounds == 3 and row.n_requests == 12 and row.n_errors == 0
        assert row.goodput_req_per_s is not None and row.slo_attainment == 1.0
        # the row's window figures agree with what its records give
        out_tps, req_ps = _window_figures(read_records(results), label, f"closed:c={c}")
        assert row.output_throughput_toks_per_s == pytest.approx(out_tps, rel=0.05)
        assert row.request_throughput_per_s == pytest.approx(req_ps, rel=0.05)
        assert row.goodput_req_per_s == pytest.approx(req_ps, rel=0.05)
    card = Scorecard.from_run(result)
    for c in (1, 4, 8):  # the mis-tuned route is refused at every load
        line = next(ln for ln in card.lines if ln.route == "mtp-mistuned" and ln.load == f"c={c}")
        assert line.verdict is not None and not line.credited
        assert RefusalReason.candidate_parity_not_verified in line.verdict.reasons
        assert rows[("mtp", c)].quality_parity is QualityParity.verified
    crossing = [c for c in card.crossovers() if c.startswith("mtp @ 1k/256/non_think")]
    assert len(crossing) == 1 and "concurrency 1" in crossing[0]
    assert "concurrency 8" in crossing[0]
    assert any(
        c.startswith("mtp-mistuned") and "no speedup credited at" in c for c in card.crossovers()
    )
    assert "crossover: mtp @ 1k/256/non_think" in card.to_text()


def _slow_down(*engines: EmbeddedEngine, factor: float) -> None:
    """Machine-wide drift: every engine's steps now cost ``factor`` times more."""
    slow = COSTS.model_copy(update={"target_step_ms": COSTS.target_step_ms * factor})
    for e in engines:
        e._require().scheduler._cost = slow


def _drift_run(repeats: int) -> Any:
    """Two identical routes (an ``off`` engine behind both); after half the measured
    requests, every engine becomes 4 times slower."""

    async def main() -> Any:
        async with (
            EmbeddedEngine(EngineConfig(cost=COSTS)) as a,
            EmbeddedEngine(EngineConfig(cost=COSTS)) as b,
        ):
            plan = _plan(
                [("off", "off", a.base_url), ("same", "ngram", b.base_url)], repeats=repeats
            )
            seen = {"done": 0, "measured": 0}

            def progress(ev: ProgressEvent) -> None:
                if ev.done > seen["done"] and ev.phase.startswith("measure"):
                    seen["measured"] += ev.done - seen["done"]
                    if seen["measured"] == plan.requests_per_cell:  # half of 2 routes' work
                        _slow_down(a, b, factor=4.0)
                seen["done"] = ev.done

            return await run_plan(plan, gate=LiveGate(), results_path=None, progress=progress)

    result = anyio.run(main)
    line = next(ln for ln in Scorecard.from_run(result).lines if ln.route == "same")
    assert line.quality_parity is QualityParity.verified  # identical outputs
    return line.verdict


def test_drift_between_route_windows_is_not_credited_as_a_speedup() -> None:
    # the alternating rounds: the drift lands inside a round, the paired ratios
    # disagree, and the interval includes 1 (no credited speedup whose CI excludes 1)
    paired = _drift_run(repeats=3)
    assert paired is not None and not paired.printed and paired.rounds == 3
    assert paired.ci_low is not None and paired.ci_high is not None
    assert paired.ci_low <= 1.0 <= paired.ci_high and paired.within_noise
    assert paired.reasons == (RefusalReason.no_significant_difference,)  # the significance rule
    # the old sequential design (one window per route) credits the drift itself:
    # a 4x "difference" between two identical routes, its interval far from 1
    sequential = _drift_run(repeats=1)
    assert sequential is not None and sequential.printed and sequential.rounds is None
    assert sequential.ci_low is not None and sequential.ci_high is not None
    assert not sequential.within_noise and sequential.ci_high < 1.0


def test_an_open_loop_records_schedule_lag_and_flags_a_lagging_client(tmp_path: Path) -> None:
    results = tmp_path / "open.jsonl"

    async def main() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = _plan(
                [("off", "off", off.base_url), ("mtp", "mtp", mtp.base_url)],
                # 1000 req/s with one request in flight: the schedule cannot be kept
                arrival={
                    "mode": "rate",
                    "rate_per_s": [1000.0],
                    "concurrency": 1,
                    "max_lag_ms": 20.0,
                },
                requests_per_cell=9,
            )
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    assert all(r.arrival is Arrival.poisson and r.request_rate_per_s == 1000.0 for r in result.rows)
    assert all(r.schedule_lagged for r in result.rows)
    lags = [m.queue_ms for m in result.measurements]
    assert all(q is not None and q >= 0 for q in lags) and max(q or 0 for q in lags) > 20.0
    queued = [r["queue_ms"] for r in read_records(results) if r["record"] == "measurement"]
    assert queued == [m.queue_ms for m in result.measurements]  # recorded per request
