"""``compare_runs`` on real runs of the embedded engine, launched from a plan: one factor
changed between the runs (mtp's verify cost in the cost model) is the one recorded
difference named. Only the attribution and the engine's deterministic figures are
asserted (acceptance: the engine's draft is seeded); the speed figures depend on how
busy the machine is, so no assertion reads them."""

from __future__ import annotations

from pathlib import Path

import anyio

from deepseekbench import BenchmarkPlan, LiveGate, compare_runs, run_plan
from deepseekbench._plan._tasks import smoke_tasks


def _plan(results: Path, verify_token_ms: float) -> BenchmarkPlan:
    prompts = [t.prompt for t in smoke_tasks()][:2]

    def route(label: str, speculative: str, **args: object) -> dict[str, object]:
        launch: dict[str, object] = {
            "engine": "embedded",
            "engine_args": {"eos_counted": True, **args},
        }
        if speculative != "off":
            launch["spec_tokens"] = 3
        return {"label": label, "speculative": speculative, "dialect": "vllm", "launch": launch}

    return BenchmarkPlan.from_mapping(
        {
            "model": "deepseekbench-ref",
            "provider_route": "local",
            "engine_route": "embedded",
            "hosting": "embedded",
            "results": str(results),
            "routes": [
                route("off", "off"),
                route("mtp", "mtp", verify_token_ms=verify_token_ms),
            ],
            "workload": {"prompts": prompts},
            "requests_per_cell": 6,
            "warmup_per_cell": 0,
            "repeats": 2,
            "cells": [{"max_tokens": 32}],
            "arrival": {"mode": "concurrency", "concurrency": [1]},
            "parity": {"prompts": prompts, "tasks": "none", "max_tokens": 16, "concurrency": 2},
        }
    )


def test_a_verify_cost_change_is_the_one_factor_named(tmp_path: Path) -> None:
    a_path, b_path = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    anyio.run(lambda: run_plan(_plan(a_path, 0.4), gate=LiveGate()))
    anyio.run(lambda: run_plan(_plan(b_path, 1.2), gate=LiveGate()))
    cmp = compare_runs(a_path, b_path)
    assert [(f.kind, f.name, f.route, f.a, f.b) for f in cmp.factors] == [
        ("launch flag", "--verify-token-ms", "mtp", "0.4", "1.2")
    ]
    assert {ln.route for ln in cmp.lines} == {"off", "mtp"}
    (mtp,) = [ln for ln in cmp.lines if ln.route == "mtp"]
    rate = mtp.figure("acceptance_rate")
    assert rate is not None and rate.status == "no_significant_change", rate
    assert not mtp.parity.changed
    assert "launch flag --verify-token-ms (mtp): 0.4 → 1.2" in cmp.summary
