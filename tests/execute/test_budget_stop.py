"""A run's budget spent mid-block in this process's executor keeps what it admitted.

``run_plan`` against two embedded engines on 127.0.0.1 (no ``/metrics`` scrapes, no
probe, so every request the gate admits is a chat request): the parity set sends one
request per route, then ``off``'s block of 6 requests runs on 4 streams. The budget's
refusal must not cancel the requests already admitted and in flight: they are
recorded with their measurements, the refused ones are recorded unsent
(``budget_refused``), the run stops with ``LiveGateError``, and no row counts an
unsent request (``n_requests``, speed figures, parity).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    CostModel,
    EngineRoute,
    ErrorKind,
    LiveGate,
    LiveGateError,
    QualityParity,
    load_results,
    run_plan,
)
from deepseekbench._cli._exits import EXIT_GATE, EXIT_OK
from deepseekbench._execute._budget import BudgetStop
from deepseekbench._net._gate import is_budget_refusal
from deepseekbench._records._measurement import is_unsent
from tests._helpers import off_and_mtp, plan_of, read_records, run_cli

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::deepseekbench.WorkloadCoverageWarning"),
]

SLOW = CostModel(target_step_ms=5.0, verify_token_ms=0.0, draft_step_ms=0.0)
"""Requests long enough (~60 ms) that the 4th stream is refused while 3 are in flight."""

PARITY_REQUESTS = 2
"""Requests the run sends before its first measured block: one parity prompt per route."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def budget_plan(off: str, mtp: str) -> BenchmarkPlan:
    """``off`` and ``mtp``, one parity prompt, one block of 6 requests per route on 4
    streams, no probe and no ``/metrics`` scrape (``managed_api``)."""
    return plan_of(
        [("off", "off", off), ("mtp", "mtp", mtp)],
        {
            "probe_routes": False,
            "hosting": "managed_api",
            "warmup_per_cell": 0,
            "repeats": 1,
            "requests_per_cell": 6,
            "arrival": {"concurrency": 4},
            "parity": {"tasks": "none", "prompts": ["Count from 5 to 12."]},
            "workload": {"output_length": "natural"},
        },
        {},
    )


def measurements(path: Path) -> list[dict[str, Any]]:
    return [r for r in read_records(path) if r["record"] == "measurement"]


def check_refused(records: list[dict[str, Any]]) -> None:
    """Each record is unsent: kind ``budget_refused``, the budget named, nothing measured."""
    for r in records:
        m = r["measurement"]
        assert m["error"]["kind"] == "budget_refused"
        assert "request budget" in m["error"]["message"]
        assert m["ttft_ms"] is None and m["completion_tokens"] is None and m["text"] == ""
        assert r["queue_ms"] is None and m["route_label"] == r["route"]


async def test_a_spent_budget_keeps_the_admitted_requests_of_the_block(tmp_path: Path) -> None:
    """A budget of 3 requests for ``off``'s 4 streams: the 3 admitted are recorded with
    their measurements (before, the refusal cancelled them: served, admitted, lost), the
    3 refused are recorded unsent, the run stops; a resume sends the refused ones."""
    path = tmp_path / "r.jsonl"
    async with off_and_mtp(cost=SLOW) as (off, mtp):
        plan = budget_plan(off.base_url, mtp.base_url)
        gate = LiveGate(max_requests=PARITY_REQUESTS + 3)
        with pytest.raises(LiveGateError, match="request budget"):
            await run_plan(plan, gate=gate, results_path=path)
        served = off.counters.requests + mtp.counters.requests
        assert gate.requests_admitted == served == PARITY_REQUESTS + 3
        records = measurements(path)
        assert sorted(r["index"] for r in records) == list(range(6))
        assert {r["route"] for r in records} == {"off"}
        sent = [r for r in records if r["measurement"]["error"] is None]
        assert len(sent) == 3
        assert all(r["measurement"]["text"] and r["measurement"]["tpot_ms"] for r in sent)
        check_refused([r for r in records if r["measurement"]["error"] is not None])

        # the partial file's rows count only what was sent
        partial = load_results(path)
        row = next(r for r in partial.rows if r.route_label == "off")
        assert row.n_requests == 3 and row.n_errors == 0
        assert row.tpot_ms == pytest.approx(
            statistics.median(r["measurement"]["tpot_ms"] for r in sent)
        )

        # a resume (errored measurements retried) sends the refused ones
        result = await run_plan(plan, gate=LiveGate(), results_path=path)
    assert result.retried == 3
    done = next(r for r in result.rows if r.route_label == "off")
    assert done.n_requests == 6 and done.n_errors == 0


async def test_unsent_requests_enter_no_row_and_no_parity_verdict(tmp_path: Path) -> None:
    """The budget runs out in ``mtp``'s block (3 of 6 sent) and, in a second run, at
    ``mtp``'s parity request: ``mtp``'s row counts the 3 sent requests only (3 could not
    pass the 5-request minimum of a speedup), and a refused parity output makes parity
    unknown, never ``differs``."""
    path = tmp_path / "r.jsonl"
    async with off_and_mtp(cost=SLOW) as (off, mtp):
        plan = budget_plan(off.base_url, mtp.base_url)
        with pytest.raises(LiveGateError, match="request budget"):
            spent_in_mtp = LiveGate(max_requests=PARITY_REQUESTS + 6 + 3)
            await run_plan(plan, gate=spent_in_mtp, results_path=path)
        refused_parity = tmp_path / "p.jsonl"
        with pytest.raises(LiveGateError, match="request budget"):
            await run_plan(plan, gate=LiveGate(max_requests=1), results_path=refused_parity)
    records = [r for r in measurements(path) if r["route"] == "mtp"]
    check_refused([r for r in records if r["measurement"]["error"] is not None])
    assert sum(r["measurement"]["error"] is None for r in records) == 3
    rows = {r.route_label: r for r in load_results(path).rows}
    assert rows["mtp"].n_requests == 3 and rows["mtp"].n_errors == 0
    assert rows["off"].n_requests == 6
    assert rows["mtp"].quality_parity is not QualityParity.differs

    outputs = [r for r in read_records(refused_parity) if r["record"] == "parity_output"]
    assert [o["output"]["error"] is None for o in outputs] == [True, False]
    assert outputs[1]["output"]["error"].startswith("budget_refused: ")
    by_route = {r.route_label: r for r in load_results(refused_parity).rows}
    assert by_route["mtp"].quality_parity is QualityParity.unknown
    assert "errored" in (by_route["mtp"].parity_detail or "")


async def test_the_cli_exits_3_keeps_what_it_admitted_and_report_renders(tmp_path: Path) -> None:
    """``python -m deepseekbench run PLAN --max-requests 5``: the 3 admitted requests of
    ``off``'s 4 streams are recorded with their measurements, the 3 refused ones as
    ``budget_refused``; the run exits 3 with one line (before: a task group's traceback,
    none of them recorded), and ``report`` renders the file, its row counting only the
    sent requests."""
    results, plan_file = tmp_path / "b.jsonl", tmp_path / "plan.json"
    budget = str(PARITY_REQUESTS + 3)
    async with off_and_mtp(cost=SLOW) as (off, mtp):
        plan = budget_plan(off.base_url, mtp.base_url)
        plan_file.write_bytes(orjson.dumps(plan.model_dump(mode="json")))
        args = ("run", str(plan_file), "--results", str(results), "--max-requests", budget)
        proc = await anyio.to_thread.run_sync(lambda: run_cli(*args, cwd=tmp_path))
    assert proc.returncode == EXIT_GATE, proc.stderr
    assert "request budget (max_requests=5 spent)" in proc.stderr
    assert "Traceback" not in proc.stderr
    records = measurements(results)
    assert sorted(r["index"] for r in records) == list(range(6))
    assert sum(r["measurement"]["error"] is None for r in records) == 3
    check_refused([r for r in records if r["measurement"]["error"] is not None])

    report = run_cli("report", str(results), "--format", "json", cwd=tmp_path)
    assert report.returncode == EXIT_OK, report.stderr
    lines = {ln["route"]: ln for ln in json.loads(report.stdout)["lines"]}
    assert lines["off"]["n_requests"] == 3 and lines["off"]["n_errors"] == 0
    assert "budget_refused × 3" in report.stderr and "did not finish" in report.stderr
    text = run_cli("report", str(results), cwd=tmp_path)
    assert text.returncode == EXIT_OK and "off" in text.stdout


def test_only_a_spent_budget_is_held_other_refusals_raise_where_they_happen() -> None:
    """A refusal that is only a spent budget is held (the block goes on recording);
    a refused host, with or without a spent budget beside it, raises at once."""
    spent = LiveGate(max_requests=0).refusal("http://127.0.0.1:9/v1")
    tokens = LiveGate(max_output_tokens=0).refusal("http://127.0.0.1:9/v1")
    host = LiveGate().refusal("http://192.0.2.1/v1")
    both = LiveGate(max_requests=0).refusal("http://192.0.2.1/v1")
    assert spent is not None and tokens is not None and host is not None and both is not None
    assert is_budget_refusal(spent) and is_budget_refusal(tokens)
    assert not is_budget_refusal(host) and not is_budget_refusal(both)
    stop = BudgetStop()
    for err in (host, both):
        with pytest.raises(LiveGateError) as raised:
            stop.hold(err)
        assert raised.value is err and not stop.stopped
    stop.hold(spent)
    stop.hold(tokens)  # the first refusal is the one kept
    route = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m", label="off")
    m = stop.unsent(route)
    assert m.error is not None and m.error.kind is ErrorKind.budget_refused and is_unsent(m)
    assert "request budget" in m.error.message and m.route_label == "off"
    with pytest.raises(LiveGateError, match="request budget"):
        stop.raise_held()
    assert not stop.stopped
    stop.raise_held()  # nothing held: nothing raised
