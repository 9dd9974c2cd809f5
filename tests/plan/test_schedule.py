"""The schedule stage alone (no server): order, rounds, load points, resume filter."""

from __future__ import annotations

from typing import Any

import pytest

from deepseekbench import Arrival, BenchmarkPlan, PlanError, StreamMeasurement
from deepseekbench._plan._schedule import Phase, build_schedule, measure_slot, parity_prompts
from deepseekbench._runner._dry_run import grid_text
from deepseekbench._runner._resume import pending
from deepseekbench._store._results import ResultsState
from tests._helpers import plan_of

PROMPTS = ("p0", "p1", "p2", "p3")


def _plan(**over: Any) -> BenchmarkPlan:
    routes = [(s, s, f"http://127.0.0.1:{i}/v1") for i, s in enumerate(("off", "mtp", "ngram"), 1)]
    defaults = {
        "requests_per_cell": 7,
        "warmup_per_cell": 2,
        "arrival": {"concurrency": [1, 8]},
        "parity": {"tasks": "none", "prompts": ["a", "b"]},
    }
    return plan_of(routes, defaults, over)


def _schedule(plan: BenchmarkPlan) -> Any:
    return build_schedule(plan, PROMPTS, parity_prompts(plan, ()))


def test_phases_in_order_parity_measure_control() -> None:
    blocks = _schedule(_plan())
    phases = [b.phase for b in blocks]
    assert phases[:3] == [Phase.parity] * 3 and phases[-1] is Phase.control
    assert [b.route for b in blocks[:3]] == ["off", "mtp", "ngram"]  # off first
    measure = [b for b in blocks if b.phase is Phase.measure]
    # 2 load points x 3 rounds x 3 routes
    assert len(measure) == 2 * 3 * 3
    assert {b.load.concurrency for b in measure if b.load} == {1, 8}
    assert all(b.concurrency == b.load.concurrency for b in measure if b.load)


def test_route_order_alternates_between_rounds() -> None:
    measure = [b for b in _schedule(_plan()) if b.phase is Phase.measure]
    first_load = [b for b in measure if b.load is not None and b.load.concurrency == 1]
    order = [(b.round, b.route) for b in first_load]
    assert order == [
        (0, "off"), (0, "mtp"), (0, "ngram"),
        (1, "ngram"), (1, "mtp"), (1, "off"),
        (2, "off"), (2, "mtp"), (2, "ngram"),
    ]  # fmt: skip


def test_every_route_of_a_round_sends_the_same_prompts_and_rounds_repeat_them() -> None:
    measure = [b for b in _schedule(_plan()) if b.phase is Phase.measure]
    by_round: dict[int, set[tuple[Any, ...]]] = {}
    for b in measure:
        if b.load is not None and b.load.concurrency == 8:
            sent = tuple((it.index, it.request.messages[0]["content"]) for it in b.items)
            by_round.setdefault(b.round, set()).add(sent)
    assert all(len(v) == 1 for v in by_round.values())  # identical across routes
    rounds = {r: next(iter(v)) for r, v in by_round.items()}
    # 7 requests over 3 rounds: indices 0,3,6 / 1,4 / 2,5; each round prompts p0, p1, (p2)
    assert [i for i, _ in rounds[0]] == [0, 3, 6] and [i for i, _ in rounds[1]] == [1, 4]
    assert [p for _, p in rounds[0]] == ["p0", "p1", "p2"]
    assert [p for _, p in rounds[1]] == ["p0", "p1"]
    assert measure_slot(_plan(), 4) == (1, 1)


def test_warmups_only_before_a_routes_first_round() -> None:
    measure = [b for b in _schedule(_plan()) if b.phase is Phase.measure]
    assert all(len(b.warmup) == (2 if b.round == 0 else 0) for b in measure)


def test_open_loop_send_times_are_shared_by_the_routes_of_a_round() -> None:
    plan = _plan(arrival={"mode": "rate", "rate_per_s": [2.0, 8.0], "concurrency": 4})
    measure = [b for b in _schedule(plan) if b.phase is Phase.measure]
    assert {b.load.arrival for b in measure if b.load} == {Arrival.poisson}
    for r in range(3):
        same = {b.offsets_s for b in measure if b.round == r and b.load and b.load.rate_per_s == 8}
        assert len(same) == 1 and next(iter(same)) is not None
    per_round = {b.offsets_s for b in measure if b.load and b.load.rate_per_s == 8}
    assert len(per_round) == 3  # a fresh draw per round


def test_repeats_one_is_the_sequential_design() -> None:
    measure = [b for b in _schedule(_plan(repeats=1)) if b.phase is Phase.measure]
    assert [b.route for b in measure] == ["off", "mtp", "ngram"] * 2
    assert all(len(b.items) == 7 for b in measure)


def test_resume_filter_skips_recorded_requests_and_keeps_the_warmup() -> None:
    plan = _plan(arrival={"concurrency": 1})
    blocks = _schedule(plan)
    state = ResultsState()
    first = next(b for b in blocks if b.phase is Phase.measure and b.route == "mtp")
    assert first.load is not None
    for it in first.items:  # round 0 of mtp already measured
        state.measurements[("mtp", first.cell, first.load.key, it.index, 0)] = StreamMeasurement()
    work = pending(blocks, state)
    mtp = [(b, items) for b, items in work if b.phase is Phase.measure and b.route == "mtp"]
    assert [b.round for b, _ in mtp] == [1, 2]
    assert len(mtp[0][0].warmup) == 2  # moved to mtp's first block with work
    assert all(len(b.warmup) == 0 for b, _ in mtp[1:])


def test_grid_text_names_routes_cells_load_points_and_rounds() -> None:
    assert grid_text(_plan()) == ("3 routes × 1 cell × 2 load points (concurrency 1, 8) × 3 rounds")
    rate = _plan(arrival={"mode": "rate", "rate_per_s": [2, 8, 32], "concurrency": 64})
    assert "3 load points (2, 8, 32 req/s, poisson)" in grid_text(rate)


def test_task_id_colliding_with_a_parity_prompt_id_is_refused() -> None:
    from deepseekbench import Task

    task = Task.model_validate(
        {"id": "prompt-1", "prompt": "x", "grader": {"kind": "exact", "expected": "x"}}
    )
    with pytest.raises(PlanError, match="collides"):
        parity_prompts(_plan(), (task,))
