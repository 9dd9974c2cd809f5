"""A plan with ``workers = 2`` against the embedded engine: the executor stage on worker
processes gives the rows of one process at a light load, and records its windows."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    LiveGate,
    QualityParity,
    RunResult,
    Scorecard,
    load_results,
    run_plan,
)
from deepseekbench._cli._commands import with_client_flags
from deepseekbench._cli._main import main
from deepseekbench._cli._parser import build_parser
from tests._helpers import COSTS, make_row, off_and_mtp, plan_of

PLAN: dict[str, Any] = {
    "requests_per_cell": 6,
    "warmup_per_cell": 2,
    "repeats": 2,
    "arrival": {"mode": "concurrency", "concurrency": [1, 4]},
    "parity": {"concurrency": 8, "max_tokens": 48},
}


def _plan(off: str, mtp: str, **over: Any) -> BenchmarkPlan:
    return plan_of([("off", "off", off), ("mtp", "mtp", mtp)], PLAN, over)


def _texts(result: RunResult) -> dict[tuple[str, str, str | None, int], str]:
    return {(m.route, m.cell, m.load, m.index): m.measurement.text for m in result.measurements}


def test_two_workers_give_the_rows_of_one_at_a_light_load(tmp_path: Path) -> None:
    async def main() -> tuple[RunResult, RunResult]:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            one = _plan(off.base_url, mtp.base_url)
            two = _plan(off.base_url, mtp.base_url, workers=2)
            assert one.plan_hash() == two.plan_hash()  # how load is sent is not the plan
            r1 = await run_plan(one, gate=LiveGate(), results_path=tmp_path / "one.jsonl")
            r2 = await run_plan(two, gate=LiveGate(), results_path=tmp_path / "two.jsonl")
            return r1, r2

    r1, r2 = anyio.run(main)
    assert [r.route_label for r in r1.rows] == [r.route_label for r in r2.rows]
    for a, b in zip(r1.rows, r2.rows, strict=True):
        assert b.quality_parity is QualityParity.verified is a.quality_parity
        assert (a.n_requests, a.n_errors) == (b.n_requests, b.n_errors) == (6, 0)
        assert a.draft_tokens == b.draft_tokens  # the same speculative work
    assert _texts(r1) == _texts(r2)  # the same requests, the same answers
    records = [orjson.loads(x) for x in (tmp_path / "two.jsonl").read_bytes().splitlines()]
    blocks = [r for r in records if r["record"] == "workers"]
    assert blocks and all(b["deaths"] == [] for b in blocks)
    measured = [b for b in blocks if b["phase"] == "measure"]
    assert {b["workers"] for b in measured if b["load"] == "closed:c=4"} == {2}
    assert {b["workers"] for b in measured if b["load"] == "closed:c=1"} == {1}
    assert all(b["window_end_ns"] > b["window_start_ns"] for b in measured)
    again = load_results(tmp_path / "two.jsonl")
    assert [r.model_dump() for r in again.rows] == [r.model_dump() for r in r2.rows]
    assert Scorecard.from_results(tmp_path / "two.jsonl").client_workers == 2


def test_auto_workers_size_every_load_point_alike(tmp_path: Path) -> None:
    """``workers = "auto"`` against the embedded engine: every measured block says why it
    used that many workers, the same for both routes at a load point, and so do the
    rows and the scorecard."""

    async def main() -> RunResult:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            auto = _plan(off.base_url, mtp.base_url, workers="auto")
            return await run_plan(auto, gate=LiveGate(), results_path=tmp_path / "auto.jsonl")

    result = anyio.run(main)
    records = [orjson.loads(x) for x in (tmp_path / "auto.jsonl").read_bytes().splitlines()]
    measured = [r for r in records if r["record"] == "workers" and r["phase"] == "measure"]
    for load in ("closed:c=1", "closed:c=4"):
        here = [(b["workers"], b["basis"]) for b in measured if b["load"] == load]
        assert len(here) == 4 and len(set(here)) == 1, here  # 2 routes x 2 rounds, one choice
        assert here[0][1].startswith("auto: "), here
    assert {b["workers"] for b in measured if b["load"] == "closed:c=1"} == {1}
    for row in result.rows:
        assert row.client_workers is not None and row.client_workers_basis is not None
        assert row.client_workers_basis.startswith("auto: ")
        assert (row.n_requests, row.n_errors) == (6, 0)
    assert "client workers: auto: " in Scorecard.from_results(tmp_path / "auto.jsonl").to_text()


def test_cli_flags_set_workers_and_executor_and_are_validated(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'model = "deepseekbench-ref"\n'
        '[[routes]]\nlabel = "off"\nspeculative = "off"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[routes]]\nlabel = "mtp"\nspeculative = "mtp"\nbase_url = "http://127.0.0.1:8/v1"\n'
    )
    args = build_parser().parse_args(["run", str(plan), "--workers", "3", "--executor", "ray"])
    flagged = with_client_flags(BenchmarkPlan.load(plan), args)
    assert (flagged.workers, flagged.executor, flagged.ray_address) == (3, "ray", None)
    assert flagged.plan_hash() == BenchmarkPlan.load(plan).plan_hash()
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(plan), "--workers", "0", "--dry-run"], stdout=out, stderr=err) == 2
    assert "workers" in err.getvalue()


def test_a_saturated_client_is_told_to_add_workers() -> None:
    busy = {"client_saturated": True, "client_cpu_share": 0.97}  # a busy client
    rows = [make_row(), make_row(speculative="mtp", route_label="mtp", **busy)]
    card = Scorecard.from_rows(rows)
    assert "client saturated: 97% CPU (1 of 2 rows); add workers (plan key workers" in (
        card.to_text()
    )
    card.client_workers = 2
    assert "workers = 4, now 2" in card.to_text()
    calm = Scorecard.from_rows([make_row(), make_row(speculative="mtp", route_label="mtp")])
    calm.client_workers = 1
    assert "add workers" not in calm.to_text()


def test_workers_auto_is_one_per_core(tmp_path: Path) -> None:
    """``workers = "auto"`` (plan key or ``--workers auto``) starts one worker per core the
    process may run on; the plan keeps ``"auto"``, and a saturated client is told of it."""
    import os

    from deepseekbench import BenchmarkPlan

    cores = len(os.sched_getaffinity(0))
    routes = [
        {"label": "off", "base_url": "http://127.0.0.1:1/v1", "speculative": "off"},
        {"label": "mtp", "base_url": "http://127.0.0.1:2/v1", "speculative": "mtp"},
    ]
    plan = BenchmarkPlan.model_validate({"model": "m", "routes": routes, "workers": "auto"})
    assert (plan.workers, plan.pool_workers) == ("auto", min(256, cores))
    args = build_parser().parse_args(["run", "plan.toml", "--workers", "auto"])
    assert args.workers == "auto"
    busy = {"client_saturated": True, "client_cpu_share": 0.97}
    card = Scorecard.from_rows([make_row(), make_row(speculative="mtp", route_label="mtp", **busy)])
    assert 'or workers = "auto": one per core' in card.to_text()
    with pytest.raises(ValueError):
        BenchmarkPlan.model_validate({"model": "m", "routes": routes, "workers": "many"})
