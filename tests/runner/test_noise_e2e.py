"""Parity within noise end to end, on the embedded engines in numerics mode (loopback).

``off`` and ``mtp`` (depth 3) whose verify pass flips exactly the target's near-ties
(correct by construction) are ``verified`` under ``parity.exact = "within_noise"`` at 8,
48 and 256 measured requests: more data never flips the verdict, although the embedded
``off`` never flips against itself. τ is measured (decode against one-pass scoring) once
the sample holds enough jitter; every margin comes from a follow-up sent alone. A route
with relaxed acceptance (``relaxed_delta`` above τ) is ``differs`` at each size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from deepseekbench import (
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    LiveGate,
    QualityParity,
    RunResult,
    Speculative,
    run_plan,
)
from deepseekbench._analysis._divergence import TAU_MIN_SAMPLE
from deepseekbench._engine._numerics import VERIFY_PERTURBATION_NATS
from tests._helpers import COSTS, plan_of, read_records

PROMPTS = [
    f"Note {i}: the engine reads this long prompt so that every output position sits past "
    f"the numerics mode's 128 characters of context; continue the list from item {i}."
    for i in range(16)
]
PLAN: dict[str, Any] = {
    "warmup_per_cell": 0,
    "arrival": {"mode": "concurrency", "concurrency": 8},
    "parity": {"concurrency": 8, "max_tokens": 64, "exact": "within_noise"},
    # long prompts, short forced outputs: every position can carry a near-tie, and 256
    # requests stay quick
    "workload": {"output_length": "forced", "prompts": PROMPTS},
    "cells": [{"max_tokens": 32}],
}


RELAXED_DELTA_NATS = 1.0
"""The lossy route's ``relaxed_delta`` (nats): far above τ (default 0.05, measured 0.04)."""


async def run_trio(tmp_path: Path, over: dict[str, Any]) -> RunResult:
    """``off``, ``mtp`` (depth 3) and ``mtp-relaxed`` on three embedded engines in
    numerics mode, run under :data:`PLAN` with ``over`` on top (results in ``r.jsonl``)."""
    off = EngineConfig(cost=COSTS, numerics=True)
    mtp = off.model_copy(update={"speculative": Speculative.mtp, "draft_depth": 3})
    relaxed = mtp.model_copy(
        update={"relaxed_acceptance": True, "relaxed_delta": RELAXED_DELTA_NATS}
    )
    async with (
        EmbeddedEngine(off) as e0,
        EmbeddedEngine(mtp) as e1,
        EmbeddedEngine(relaxed) as e2,
    ):
        routes = [
            ("off", "off", e0.base_url, Dialect.vllm),
            ("mtp", "mtp", e1.base_url, Dialect.vllm),
            ("mtp-relaxed", "mtp", e2.base_url, Dialect.vllm),
        ]
        plan = plan_of(routes, PLAN, over)
        return await run_plan(plan, gate=LiveGate(), results_path=tmp_path / "r.jsonl")


def run(tmp_path: Path, requests: int) -> RunResult:
    return anyio.run(run_trio, tmp_path, {"requests_per_cell": requests})


@pytest.mark.parametrize("requests", [8, 48, 256])
def test_the_numerics_pair_is_verified_at_every_sample_size(tmp_path: Path, requests: int) -> None:
    result = run(tmp_path, requests)
    rows = {r.route_label: r for r in result.rows}
    mtp, off = rows["mtp"], rows["off"]
    assert mtp.quality_parity is QualityParity.verified, mtp.parity_detail
    assert off.quality_parity is QualityParity.verified, off.parity_detail
    assert mtp.parity_power_bound is not None and mtp.parity_power_bound <= 0.125
    assert mtp.outputs_profiled and mtp.near_tie_opportunities is not None
    assert not mtp.divergences_decisive and not mtp.divergences_charged_to_off
    if mtp.divergences_near_tie:
        assert mtp.near_tie_opportunities >= mtp.divergences_near_tie
    # relaxed acceptance (TensorRT-LLM's MTP rule as a fault) with relaxed_delta above τ:
    # differs at every sample size, decisively
    bad = rows["mtp-relaxed"]
    assert bad.quality_parity is QualityParity.differs, bad.parity_detail
    assert bad.divergences_decisive, bad.divergence_note
    records = read_records(tmp_path / "r.jsonl")
    profiles = [r["profile"] for r in records if r["record"] == "off_profile"]
    assert profiles and all(p["note"] == "" for p in profiles)
    assert all(p["one_pass_note"] == "" for p in profiles)  # the embedded engine scores
    # the one-pass score shows the verify shape directly: a near-tie's margin shifts by the
    # verify pass's perturbation and its top-1 becomes the runner-up
    mtp_margins = [r["margin"] for r in records if r["record"] == "divergence_margin"]
    shown = [m for m in mtp_margins if "verify shape shown directly" in m["note"]]
    if requests >= 48:  # the record says so where off's one-pass top-1 is mtp's token
        assert shown and all(m["kind"] == "near_tie" for m in shown), mtp_margins
    shifts = [x for p in profiles for x in p["shifts_nats"] if x > 0]
    assert all(x == pytest.approx(VERIFY_PERTURBATION_NATS) for x in shifts), shifts
    assert mtp.tau_sample == len(shifts)
    if mtp.tau_source == "measured_jitter":
        assert mtp.tau_nats == pytest.approx(VERIFY_PERTURBATION_NATS)
    else:
        assert mtp.tau_source == "default" and len(shifts) < TAU_MIN_SAMPLE
    print(f"\n{requests} requests: {mtp.divergence_note}")


def test_sequential_parity_reads_the_anytime_bound(tmp_path: Path) -> None:
    """Under ``[stopping] mode = "sequential"`` the within-noise verdict is read after
    every round, so its power bound is the anytime-valid one, named on the reason; the
    numerics pair is ``verified`` from 80 compared outputs (53 needed at the defaults),
    the lossy route ``differs`` at once."""
    from deepseekbench._analysis._anytime_rate import anytime_comparisons_needed
    from deepseekbench._analysis._divergence import SEQUENTIAL_BOUND_NAME

    # min_rounds = cap: no route stops early, so all 64 measured requests are
    # compared whatever the speedup does (the count does not depend on timing)
    stopping = {"mode": "sequential", "cap": 3, "min_rounds": 3}
    over = {"requests_per_cell": 64, "stopping": stopping}
    rows = {r.route_label: r for r in anyio.run(run_trio, tmp_path, over).rows}
    mtp = rows["mtp"]
    print(f"\nsequential: {mtp.parity_detail}")
    assert SEQUENTIAL_BOUND_NAME in (mtp.divergence_note or ""), mtp.divergence_note
    assert mtp.quality_parity is QualityParity.verified, mtp.parity_detail
    assert mtp.parity_power_bound is not None and mtp.parity_power_bound <= 0.125
    # the parity set and every measured request compared: enough for the anytime bound
    assert anytime_comparisons_needed(0.125, 0.05) <= 16 + 64
    assert rows["mtp-relaxed"].quality_parity is QualityParity.differs
