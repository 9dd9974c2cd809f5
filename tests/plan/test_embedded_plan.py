"""The one builder of embedded-engine plans: the capacity demo, the speedup-witness
benchmark and its end-to-end test share it."""

from __future__ import annotations

import pytest

from deepseekbench import PlanError, embedded_plan, embedded_route
from deepseekbench._cli._demo import demo_capacity_plan

COSTS = {"target_step_ms": 10.0, "verify_token_ms": 0.0}


def test_routes_launch_the_embedded_engine_with_their_costs_and_overrides() -> None:
    plan = embedded_plan(
        [
            embedded_route("off", "off", COSTS),
            embedded_route("mtp", "mtp", COSTS, depth=3, verify_delay_ms=20.0),
            embedded_route("grid", "mtp", COSTS, depth=(1, 2)),
        ],
        prompts=["Say hi."],
        max_tokens=32,
        concurrency=(1, 2),
        requests=4,
        workload={"output_length": "forced"},
        parity_max_tokens=16,
    )
    off, mtp, *grid = plan.routes
    assert off.launch is not None and off.launch.engine == "embedded"
    assert mtp.launch is not None and mtp.launch.engine_args["verify_delay_ms"] == 20.0
    assert mtp.launch.engine_args["target_step_ms"] == 10.0
    assert off.launch.engine_args.get("verify_delay_ms") is None  # the override is per route
    assert [r.launch.spec_tokens for r in grid if r.launch is not None] == [1, 2]  # a depth grid
    assert plan.parity.max_tokens == 16 and plan.parity.concurrency == 16
    assert plan.warmup_per_cell == 0 and plan.requests_per_cell == 4


def test_the_capacity_demo_plan_is_built_by_it() -> None:
    plan = demo_capacity_plan()
    labels = [r.label for r in plan.routes]
    assert labels == ["off", "mtp-k1", "mtp-k2", "mtp-k4", "mtp-mistuned"]
    assert all(r.launch is not None and r.launch.engine == "embedded" for r in plan.routes)


def test_a_bad_key_is_refused() -> None:
    with pytest.raises(PlanError):
        embedded_plan(
            [embedded_route("off", "off", COSTS)],
            prompts=["x"],
            max_tokens=8,
            concurrency=[1],
            requests=1,
            no_such_key=1,
        )
