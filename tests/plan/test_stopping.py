"""``[stopping]``: validated at the edge with typed errors, the few-rounds warning,
and the rounds a sequential plan schedules."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from deepseekbench import (
    MIN_REQUESTS_FOR_SPEEDUP,
    BenchmarkPlan,
    FewRoundsWarning,
    PlanError,
    StoppingPlan,
)
from deepseekbench._plan._stopping import MIN_VERDICT_REQUESTS, few_rounds_message
from tests._helpers import plan_of


def _plan(**over: Any) -> BenchmarkPlan:
    """Validated at the edge (``from_mapping``): a bad value is a :class:`PlanError`."""
    routes = [(s, s, f"http://127.0.0.1:{i}/v1") for i, s in enumerate(("off", "mtp"), 1)]
    defaults = {"requests_per_cell": 12, "parity": {"tasks": "none", "prompts": ["a"]}}
    return BenchmarkPlan.from_mapping(plan_of(routes, defaults, {}).model_dump() | over)


def test_default_is_fixed_and_hashes_as_before() -> None:
    plan = _plan()
    assert plan.stopping is None and not plan.sequential and plan.rounds == 3
    fixed = _plan(stopping={"mode": "fixed"})
    assert fixed.plan_hash() != _plan(stopping={"mode": "sequential"}).plan_hash()
    assert plan.plan_hash() == _plan(stopping=None).plan_hash()


def test_sequential_schedules_the_cap() -> None:
    plan = _plan(stopping={"mode": "sequential", "cap": 6, "delta": 0.05})
    assert plan.sequential and plan.rounds == 6
    assert plan.stopping == StoppingPlan(mode="sequential", cap=6, delta=0.05)
    assert _plan(stopping={"mode": "sequential"}).rounds == 3  # cap defaults to repeats
    assert _plan(requests_per_cell=4, stopping={"mode": "sequential", "cap": 9}).rounds == 4


@pytest.mark.parametrize(
    ("stopping", "match"),
    [
        ({"mode": "adaptive"}, "mode"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 0.6}, "delta"),
        ({"cap": 1}, "cap"),
        ({"min_rounds": 1}, "min_rounds"),
        ({"cap": 3, "min_rounds": 4}, "must not exceed cap"),
        ({"alpha": 0.5}, "alpha"),
        ({"min_requests": 0}, "min_requests"),
        ({"rounds": 3}, "rounds"),  # an unknown key
    ],
)
def test_bad_stopping_is_a_plan_error(stopping: dict[str, Any], match: str) -> None:
    with pytest.raises(PlanError, match=match):
        _plan(stopping=stopping)


def test_sequential_needs_min_rounds_rounds() -> None:
    with pytest.raises(PlanError, match="min_rounds = 2 rounds; the plan runs 1"):
        _plan(repeats=1, stopping={"mode": "sequential"})
    with pytest.raises(PlanError, match="min_rounds = 4"):
        _plan(requests_per_cell=3, stopping={"mode": "sequential", "cap": 5, "min_rounds": 4})


@pytest.mark.parametrize(("repeats", "warns"), [(1, True), (2, True), (3, False), (5, False)])
def test_fewer_than_three_rounds_warn_at_plan_time(repeats: int, warns: bool) -> None:
    plan = _plan(repeats=repeats)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan.validate_sources()
    few = [w for w in caught if issubclass(w.category, FewRoundsWarning)]
    assert bool(few) is warns
    if warns:
        assert "repeats = 3" in str(few[0].message)


def test_the_warning_names_the_degrees_of_freedom() -> None:
    assert few_rounds_message(3) is None
    assert "1 degree of freedom" in (few_rounds_message(2) or "")
    one = few_rounds_message(1) or ""
    assert "paired cluster bootstrap over the prompts" in one  # what one round does
    assert "prompt ids" in one and "drift" in one


def test_the_warning_points_at_the_users_call_through_a_run() -> None:
    """Raised deep inside a run (preflight, dry run), the warning's source line is the
    user's own call, never a package line such as ``sources = plan.validate_sources()``."""
    from deepseekbench import LiveGate, dry_run

    plan = _plan(repeats=1)
    for call in (plan.validate_sources, lambda: dry_run(plan, gate=LiveGate())):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        few = [w for w in caught if issubclass(w.category, FewRoundsWarning)]
        assert few and few[0].filename == __file__, few[0].filename


def test_the_minimum_traffic_is_the_speedups_own() -> None:
    assert MIN_VERDICT_REQUESTS == MIN_REQUESTS_FOR_SPEEDUP
