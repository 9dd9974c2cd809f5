"""``demo --capacity --sequential``: the same verdicts as the fixed horizon from fewer
measured requests, and the scorecard says how many were saved.

The equality is checked without a second engine run (two runs differ by the machine's
noise, not by the rule): the fixed run's records are replayed in schedule order
through the sequential rule (:class:`~deepseekbench._runner._stopping.SequentialSkip`),
keeping only the blocks it would have sent. Every assertion holds however busy the
machine is: a search level is cut short only once it has failed whatever its other
requests show, so its verdict is the fixed run's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from deepseekbench import LoadPoint, ReasoningMode, StoppingPlan, load_results
from deepseekbench._analysis._lines import load_point
from deepseekbench._cli._exits import EXIT_OK
from deepseekbench._plan._schedule import Block, Phase
from deepseekbench._runner._stopping import SequentialSkip
from deepseekbench._store._results import MeasureInfo, ResultsState
from tests._helpers import read_records, run_cli


def _replay(result: Any) -> tuple[ResultsState, Any]:
    """The fixed run's measurements a sequential run of its plan would have made."""
    plan = result.plan.model_copy(update={"stopping": StoppingPlan(mode="sequential")})
    loads: dict[str, LoadPoint] = {}
    for row, (_, _, key) in zip(result.rows, result.row_keys, strict=True):
        lp = load_point(row)
        if key is not None and lp is not None:
            loads.setdefault(key, lp)
    by_block: dict[tuple[str, str, str, int], list[Any]] = {}
    for m in result.measurements:
        by_block.setdefault((m.route, m.cell, m.load, m.round), []).append(m)
    cells = sorted({k[1] for k in result.row_keys})
    state = ResultsState()
    skip = SequentialSkip(plan, [], state)  # the fixed run ran the parity set first
    labels = [r.label for r in plan.routes]
    for key, lp in loads.items():
        for cell in cells:
            for rnd in range(plan.rounds):
                for route in labels if rnd % 2 == 0 else labels[::-1]:
                    block = Block(
                        Phase.measure, route, (), lp.concurrency, ReasoningMode.non_think,
                        cell=cell, load=lp, round=rnd,
                    )  # fmt: skip
                    if skip.skip(block):
                        continue
                    for m in by_block.get((route, cell, key, rnd), ()):
                        k = (m.route, m.cell, m.load, m.index, m.turn)
                        state.measurements[k] = m.measurement
                        state.info[k] = _info(m)
    return state, plan


def _info(m: Any) -> MeasureInfo:
    return MeasureInfo(m.round, m.queue_ms, m.run_id)


def test_sequential_reaches_the_fixed_verdicts_with_fewer_requests(tmp_path: Path) -> None:
    results = tmp_path / "fixed.jsonl"
    proc = run_cli("demo", "--capacity", "--results", str(results), cwd=tmp_path, timeout=300)
    assert proc.returncode == EXIT_OK, proc.stderr
    fixed = load_results(results)
    state, plan = _replay(fixed)
    kept = len(state.measurements)
    total = len(fixed.measurements)
    per_line: dict[tuple[str, str | None], int] = {}
    for route, _, load, _, _ in state.measurements:
        per_line[(route, load)] = per_line.get((route, load), 0) + 1
    verdicts = {
        (r["route"], r["load"]): r["passed"]
        for r in read_records(results)
        if r["record"] == "search_probe" and r["n_requests"]
    }
    search_loads = {load for _, load in verdicts}
    cut = [k for k in verdicts if per_line.get(k, 0) < plan.requests_per_cell]
    # every search level cut short is one the fixed run failed: the same verdicts
    assert all(not verdicts[k] for k in cut), cut
    print(
        f"\ndemo --capacity replayed sequentially: {kept} of {total} measured requests "
        f"({total - kept} saved); search levels cut short: {sorted(cut)}"
    )
    # off fails the SLO at the bisected level on the modelled costs alone: always cut
    assert cut and kept < total
    assert all(load in search_loads for _, load in cut)


def test_demo_capacity_sequential_prints_the_requests_saved(tmp_path: Path) -> None:
    results = tmp_path / "seq.jsonl"
    proc = run_cli(
        "demo", "--capacity", "--sequential", "--results", str(results), cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == EXIT_OK, proc.stderr
    saved = re.search(
        r"^sequential stopping: (\d+) of (\d+) measured requests saved against the fixed "
        r"horizon \(about [\d.]+ s of engine time\)$",
        proc.stdout,
        re.MULTILINE,
    )
    assert saved is not None, proc.stdout
    result = load_results(results)
    assert int(saved[2]) - int(saved[1]) == len(result.measurements)
    assert re.search(r"^mtp-k1 @ \S+ \(c=1\): rounds \d of 3, stopped: ", proc.stdout, re.M)


def test_sequential_is_for_the_capacity_scenario(tmp_path: Path) -> None:
    proc = run_cli("demo", "--sequential", "--results", str(tmp_path / "r.jsonl"), cwd=tmp_path)
    assert proc.returncode != EXIT_OK and "--sequential applies to --capacity only" in proc.stderr
