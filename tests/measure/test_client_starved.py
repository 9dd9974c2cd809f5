"""Burst detection. A starved client reads token chunks in bursts;
such a row gets no TPOT speedup (``client_starved``), while parity and acceptance stand."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from deepseekbench import (
    EmbeddedEngine,
    EngineConfig,
    LiveGate,
    QualityParity,
    RefusalReason,
    Scorecard,
    Speculative,
    SpeedupMetric,
    StreamMeasurement,
    compare_speedup,
    run_plan,
)
from deepseekbench._records._client_clock import (
    BURST_WINDOW_MS,
    burst_share,
    client_clock_fields,
    request_starved,
)
from deepseekbench._report._client_diagnosis import STARVED_WAIT_SHARE
from tests._helpers import COSTS, make_row, plan_of, verdict_judged

BUNCHED = [10.0, 10.1, 10.2, 10.2, 10.3, 40.0]  # 4 of 5 gaps under 1 ms
PACED = [10.0, 13.0, 16.0, 19.0, 22.0, 25.0]


def _m(arrivals: list[float], **kw: Any) -> StreamMeasurement:
    return StreamMeasurement(chunk_arrival_ms=arrivals, **kw)


def test_burst_share_counts_gaps_under_the_window() -> None:
    assert burst_share(BUNCHED) == pytest.approx(0.8)
    assert burst_share(PACED) == 0.0
    assert burst_share([1.0, 1.0]) is None  # one gap says nothing about pacing
    assert burst_share([0.0, 0.5, 5.0], window_ms=0.4) == 0.0
    with pytest.raises(ValueError, match="window_ms"):
        burst_share(PACED, window_ms=0)
    assert BURST_WINDOW_MS == 1.0


def test_a_request_is_starved_only_when_bunched_and_the_client_is_to_blame() -> None:
    assert request_starved(_m(BUNCHED, client_stall_ms=200.0), 10.0)
    assert request_starved(_m(BUNCHED, server_mean_itl_ms=3.0), 10.0)  # the server paced
    assert not request_starved(_m(BUNCHED), 10.0)  # no evidence the client did it
    assert not request_starved(_m(BUNCHED, client_stall_ms=5.0), 10.0)
    assert not request_starved(_m(PACED, client_stall_ms=200.0), 10.0)  # not bunched


def test_row_fields_count_starved_requests() -> None:
    starved = _m(BUNCHED, client_stall_ms=200.0, client_cpu_share=0.05, client_core_wait_share=0.4)
    clean = _m(PACED, client_stall_ms=6.0, client_cpu_share=0.1, client_core_wait_share=0.0)
    row = client_clock_fields([starved, clean, clean, clean], 10.0)
    assert row["n_client_starved"] == 1 and not row["client_starved"]  # 1/4 is not > 1/4
    assert row["client_stall_ms"] == 200.0 and row["client_cpu_share"] == pytest.approx(0.1)
    row = client_clock_fields([starved, starved, clean], 10.0)
    assert row["n_client_starved"] == 2 and row["client_starved"]
    assert client_clock_fields([], 10.0)["client_starved"] is False


def test_a_starved_row_gets_no_tpot_speedup_but_other_metrics_stand() -> None:
    base, cand = make_row(), make_row(speculative="mtp", route_label="mtp", tpot_ms=5.0)
    assert compare_speedup(base, cand).printed
    for starved in (base, cand):
        b = base.model_copy(update={"client_starved": True}) if starved is base else base
        c = cand.model_copy(update={"client_starved": True}) if starved is cand else cand
        verdict = compare_speedup(b, c)
        assert not verdict and verdict.reasons == (RefusalReason.client_starved,)
        assert compare_speedup(b, c, metric=SpeedupMetric.ttft_ms).reasons != (
            RefusalReason.client_starved,
        )


# --- end to end: a blocked client loop on the embedded engine ---------------------
PLAN: dict[str, Any] = {
    "cells": [{"max_tokens": 48}],
    "requests_per_cell": 6,
    "warmup_per_cell": 0,
    "repeats": 1,
    "parity": {"tasks": "none", "prompts": ["Count from 5 to 12."], "max_tokens": 32},
    # 48 tokens a request, as the plan was sized: pinned natural answers are a few
    # tokens, too few for a TPOT interval that excludes 1
    "workload": {"output_length": "forced"},
}


async def _hog(stop: anyio.Event) -> None:
    """Starve the client: block its event loop 60 ms at a time (the engine's own thread
    keeps sending, so the chunks pile up in the socket and are read in one burst)."""
    while not stop.is_set():
        time.sleep(0.06)  # noqa: ASYNC251 - the starvation under test
        await anyio.sleep(0.002)


def _run(starve: bool, **over: Any) -> Any:
    async def main() -> Any:
        # the engines serve from their own threads (start()), so blocking the client's
        # loop does not slow them: they keep pacing tokens while the client cannot read
        off = await EmbeddedEngine(EngineConfig(cost=COSTS)).start()
        mtp = await EmbeddedEngine(EngineConfig(cost=COSTS, speculative=Speculative.mtp)).start()
        try:
            plan = plan_of([("off", "off", off.base_url), ("mtp", "mtp", mtp.base_url)], PLAN, over)
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                if starve:
                    tg.start_soon(_hog, stop)
                result = await run_plan(plan, gate=LiveGate(), results_path=None)
                stop.set()
            return result
        finally:
            await off.aclose()
            await mtp.aclose()

    return anyio.run(main)


@pytest.mark.parametrize("starve", [True, False])
def test_a_starved_client_is_refused_for_tpot_and_a_clean_one_credited(starve: bool) -> None:
    result = _run(starve)
    line = next(ln for ln in Scorecard.from_run(result).lines if ln.route == "mtp")
    rows = {r.route_label: r for r in result.rows}
    assert line.quality_parity is QualityParity.verified  # parity stands either way
    assert rows["mtp"].accepted_token_ratio is not None  # so does acceptance
    assert line.verdict is not None
    if starve:
        assert rows["mtp"].client_starved and rows["mtp"].n_client_starved > 0
        assert RefusalReason.client_starved in line.verdict.reasons
        assert rows["mtp"].client_stall_ms is not None and rows["mtp"].client_stall_ms >= 50
        text = Scorecard.from_run(result).to_text()
        assert text.count("client starved") == 1  # one line per run, not one per row
    else:
        # a clean client is credited; a busy machine may withhold the credit for clock
        # reasons alone (never parity), and starve a row only by making its client wait
        # for a core (as the scorecard's diagnosis reads it)
        assert verdict_judged(line.verdict), str(line.verdict)
        for row in rows.values():
            if row.client_starved and row.client_core_wait_share is not None:
                assert row.client_core_wait_share >= STARVED_WAIT_SHARE, row
        if RefusalReason.client_starved in line.verdict.reasons:
            assert rows["mtp"].client_starved or rows["off"].client_starved


def test_the_server_clock_still_judges_a_starved_run() -> None:
    """The server clock witness: the engine's own timings are not bunched by the client, so a
    plan with ``clock = "server"`` is judged on them and says so."""
    result = _run(True, clock="server")
    line = next(ln for ln in Scorecard.from_run(result).lines if ln.route == "mtp")
    rows = {r.route_label: r for r in result.rows}
    assert rows["mtp"].client_starved and rows["mtp"].server_tpot_ms is not None
    assert line.verdict is not None and line.verdict.clock.value == "server"
    assert RefusalReason.client_starved not in line.verdict.reasons
    assert line.verdict.printed or line.verdict.inconclusive, str(line.verdict)
    assert "(server clock)" in line.speedup_text
