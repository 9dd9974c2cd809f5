"""Sequential stopping in the run: decided comparisons skip their later rounds.

The skip rule is checked on synthetic records (deterministic: no engine, no timing);
the end-to-end run on the embedded engine asserts only what holds however busy the
machine is (its decisions agree with its records, and the savings add up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from deepseekbench import LiveGate, Scorecard, StreamMeasurement, load_results, run_plan
from deepseekbench._analysis._sequential import StopReason
from deepseekbench._analysis._stopping import stopping_report
from deepseekbench._plan._schedule import Block, Phase, build_schedule, parity_prompts
from deepseekbench._runner._stopping import SequentialSkip
from deepseekbench._store._results import MeasureInfo, ResultsState
from deepseekbench._types._parity import ParityOutput
from tests._helpers import COSTS, off_and_mtp, plan_of, read_records

PARITY = {"tasks": "none", "prompts": ["Count from 5 to 12.", "What is 7 × 8?"], "max_tokens": 32}


def _plan(**over: Any) -> Any:
    routes = [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")]
    stopping = {"mode": "sequential", "cap": 4, "min_requests": 2}
    base = {"requests_per_cell": 8, "warmup_per_cell": 0, "parity": PARITY, "stopping": stopping}
    return plan_of(routes, base, over)


def _record(state: ResultsState, route: str, block: Block, tpot: list[float]) -> None:
    assert block.load is not None
    for item, t in zip(block.items, tpot, strict=True):
        key = (route, block.cell, block.load.key, item.index, 0)
        state.measurements[key] = StreamMeasurement(tpot_ms=t)
        state.info[key] = MeasureInfo(block.round, None, "run")


def _parity_ran(state: ResultsState, blocks: list[Block]) -> None:
    for b in blocks:
        if b.phase is Phase.parity:
            for it in b.items:
                key = (b.route, b.reasoning_mode.value, b.parity_pass, it.prompt_id)
                state.outputs[key] = ParityOutput(prompt_id=it.prompt_id, text="x")


def _measure(blocks: list[Block], round_: int) -> dict[str, Block]:
    return {b.route: b for b in blocks if b.phase is Phase.measure and b.round == round_}


def _schedule(plan: Any) -> list[Block]:
    return list(build_schedule(plan, ("p0", "p1"), parity_prompts(plan, ())))


def test_a_decided_route_and_its_off_skip_their_later_rounds() -> None:
    plan = _plan()
    blocks = _schedule(plan)
    state = ResultsState()
    for r in (0, 1):  # a clear 2x, the rounds agreeing closely
        _record(state, "off", _measure(blocks, r)["off"], [10.0, 10.0])
        _record(state, "mtp", _measure(blocks, r)["mtp"], [5.0, 5.0 + r * 0.001])
    skip = SequentialSkip(plan, blocks, state)
    later = _measure(blocks, 2)
    # the parity set has not run: no verdict yet, nothing skipped
    assert not skip.skip(later["mtp"]) and not skip.skip(later["off"])
    _parity_ran(state, blocks)
    assert skip.skip(later["mtp"]) and skip.skip(later["off"])
    assert not skip.skip(next(b for b in blocks if b.phase is Phase.control))


def test_an_undecided_route_runs_on_and_so_does_off() -> None:
    plan = _plan()
    blocks = _schedule(plan)
    state = ResultsState()
    _parity_ran(state, blocks)
    for r, cand in ((0, 5.0), (1, 9.0)):  # the rounds disagree: the sequence holds 1
        _record(state, "off", _measure(blocks, r)["off"], [10.0, 10.0])
        _record(state, "mtp", _measure(blocks, r)["mtp"], [cand, cand])
    skip = SequentialSkip(plan, blocks, state)
    later = _measure(blocks, 2)
    assert not skip.skip(later["mtp"]) and not skip.skip(later["off"])


def test_too_little_traffic_is_no_verdict() -> None:
    plan = _plan(stopping={"mode": "sequential", "cap": 4, "min_requests": 5})
    blocks = _schedule(plan)
    state = ResultsState()
    _parity_ran(state, blocks)
    for r in (0, 1):  # 4 requests a side: below min_requests
        _record(state, "off", _measure(blocks, r)["off"], [10.0, 10.0])
        _record(state, "mtp", _measure(blocks, r)["mtp"], [5.0, 5.0])
    assert not SequentialSkip(plan, blocks, state).skip(_measure(blocks, 2)["mtp"])


def test_fixed_mode_never_skips() -> None:
    plan = _plan(repeats=4, stopping={"mode": "fixed"})
    blocks = _schedule(plan)
    state = ResultsState()
    _parity_ran(state, blocks)
    for r in (0, 1):
        _record(state, "off", _measure(blocks, r)["off"], [10.0, 10.0])
        _record(state, "mtp", _measure(blocks, r)["mtp"], [5.0, 5.0])
    assert not SequentialSkip(plan, blocks, state).skip(_measure(blocks, 2)["mtp"])


def _rounds_recorded(records: list[dict[str, Any]], route: str, load: str) -> set[int]:
    return {
        r["round"]
        for r in records
        if r["record"] == "measurement" and r["route"] == route and r["load"] == load
    }


def test_a_sequential_run_stops_as_its_records_say_and_resumes_to_the_same(
    tmp_path: Path,
) -> None:
    results = tmp_path / "seq.jsonl"

    async def main() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = plan_of(
                [("off", "off", off.base_url), ("mtp", "mtp", mtp.base_url)],
                {
                    "cells": [{"max_tokens": 32}],
                    "requests_per_cell": 12,
                    "warmup_per_cell": 0,
                    "parity": PARITY,
                    "arrival": {"concurrency": [1, 2]},
                    "stopping": {"mode": "sequential", "cap": 4, "min_requests": 3},
                },
                {},
            )
            first = await run_plan(plan, gate=LiveGate(), results_path=results)
            again = await run_plan(plan, gate=LiveGate(), results_path=results)
            return first, again

    first, again = anyio.run(main)
    records = read_records(results)
    report = stopping_report(load_results(results))
    assert report is not None and set(report.lines) == {
        ("mtp", "1k/256/non_think", "closed:c=1"),
        ("mtp", "1k/256/non_think", "closed:c=2"),
    }
    measured = 0
    for (route, _cell, load), stop in report.lines.items():
        ran = _rounds_recorded(records, route, load)
        assert ran == set(range(stop.rounds)) and stop.reason is not None
        if stop.reason is StopReason.credited:
            assert stop.sequence is not None and not stop.sequence.contains_one
        elif stop.reason is StopReason.no_meaningful_difference:
            assert stop.sequence is not None and stop.sequence.within(0.03)
        else:
            assert stop.rounds == 4
        measured += sum(1 for r in first.measurements if r.route == route and r.load == load)
    off = sum(1 for r in first.measurements if r.route == "off")
    assert report.requests_fixed - report.requests_saved == measured + off
    # the second run resumed: every decision rebuilt from the file, nothing sent again
    assert len(again.measurements) == len(first.measurements)
    assert stopping_report(again) == stopping_report(first)
    text = Scorecard.from_run(first).to_text()
    assert "mtp @ 1k/256/non_think (c=1): rounds " in text
    assert f"sequential stopping: {report.requests_saved} of 48 measured requests saved" in text


def test_a_search_level_already_failed_skips_its_later_rounds() -> None:
    """At a ``[search]`` level, once F of the N requests missed an SLO limit with
    (N − F)/N below the target, the level has failed whatever the rest show (the fixed
    run's verdict, known early): the route's later rounds there are skipped."""
    plan = _plan(
        requests_per_cell=9,
        repeats=3,
        slo={"tpot_ms": 20.0},
        search={"target": 0.9, "start": 2, "max_level": 3},
        stopping={"mode": "sequential"},
    )
    level = plan.search_load(3)
    at_level = plan.model_copy(
        update={"arrival": plan.arrival.model_copy(update={"concurrency": level.concurrency})}
    )
    blocks = _schedule(at_level)
    skip = SequentialSkip(plan, _schedule(plan), ResultsState())
    one_miss, two_misses = ResultsState(), ResultsState()
    _record(one_miss, "mtp", _measure(blocks, 0)["mtp"], [30.0, 10.0, 10.0])
    _record(two_misses, "mtp", _measure(blocks, 0)["mtp"], [30.0, 30.0, 10.0])
    later = _measure(blocks, 1)
    assert later["mtp"].load == level
    # one miss of 9 already bounds the attainment at 8/9 = 0.89 < 0.9: the level failed
    skip.state = one_miss
    assert skip.skip(later["mtp"]) and not skip.skip(later["off"])
    loose = _plan(
        requests_per_cell=9,
        slo={"tpot_ms": 20.0},
        search={"target": 0.8, "start": 2, "max_level": 3},
        stopping={"mode": "sequential"},
    )
    skip_loose = SequentialSkip(loose, _schedule(loose), one_miss)
    assert not skip_loose.skip(later["mtp"])  # 8/9 = 0.89 can still reach 0.8
    skip_loose.state = two_misses
    assert skip_loose.skip(later["mtp"])  # 7/9 = 0.78 cannot
    fixed = _plan(
        requests_per_cell=9,
        slo={"tpot_ms": 20.0},
        search={"target": 0.9, "start": 2, "max_level": 3},
        stopping={"mode": "fixed"},
    )
    assert not SequentialSkip(fixed, _schedule(fixed), two_misses).skip(later["mtp"])
