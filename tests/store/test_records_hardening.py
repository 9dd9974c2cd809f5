"""Nothing crashes a run, on the results file: line separators inside strings,
dry runs that never replace measured rows, no empty file after a failed probe,
and exports that say which run they show."""

from __future__ import annotations

import csv
import io
import json
import socket
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    LiveGate,
    ParityOutput,
    RouteUnreachableError,
    Scorecard,
    load_jsonl,
    load_results,
    load_tasks,
    read_rows,
    run_plan,
    write_rows,
)
from deepseekbench._cli._exits import EXIT_USAGE
from deepseekbench._cli._main import main
from deepseekbench._store._records import ParityOutputRecord, parse_record
from deepseekbench._store._results import ResultsStore, read_numbered_records
from tests._helpers import COSTS, make_row, off_and_mtp, plan_of

SEPARATORS = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg"
"""Characters ``str.splitlines()`` splits on that JSON strings may hold raw."""


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_jsonl_inputs_keep_line_separators_inside_strings(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    task = {"id": "t", "prompt": f"Say {SEPARATORS}", "grader": "exact", "expected": "x"}
    tasks.write_bytes(orjson.dumps(task) + b"\n")
    assert orjson.dumps(task).count(b"\xe2\x80\xa8") == 1  # written raw, not escaped
    (loaded,) = load_tasks(tasks)
    assert loaded.prompt == f"Say {SEPARATORS}"
    data = tmp_path / "data.jsonl"
    data.write_bytes(orjson.dumps({"id": "i", "turns": [SEPARATORS]}) + b"\r\n")
    (item,) = load_jsonl(data)
    assert item.turns == (SEPARATORS,)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(orjson.dumps({"prompt": SEPARATORS}) + b"\n")
    plan = plan_of(
        [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")],
        {"workload": {"prompts_file": str(prompts)}},
        {},
    )
    assert plan.workload_prompts() == (SEPARATORS,)


def _plan_file(tmp_path: Path) -> Path:
    p = tmp_path / "plan.json"
    data = {
        "model": "m",
        "routes": [
            {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:9/v1"},
            {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:8/v1"},
        ],
        "parity": {"prompts": ["p"], "tasks": "none"},
    }
    p.write_text(json.dumps(data), encoding="utf-8")
    return p


def test_a_dry_run_never_replaces_measured_rows(tmp_path: Path) -> None:
    plan = _plan_file(tmp_path)
    rows = tmp_path / "rows.jsonl"
    write_rows(rows, [make_row(), make_row(route_label="mtp", speculative="mtp")])
    before = rows.read_bytes()
    code, _, err = _cli("run", str(plan), "--dry-run", "--results", str(rows))
    assert code == EXIT_USAGE and "holds results" in err
    assert rows.read_bytes() == before
    # a dry run's own rows may still be replaced by the next dry run
    dry = tmp_path / "dry.jsonl"
    assert _cli("run", str(plan), "--dry-run", "--results", str(dry))[0] == 0
    assert _cli("run", str(plan), "--dry-run", "--results", str(dry))[0] == 0
    assert all(r.n_requests == 0 for r in read_rows(dry))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_failed_probe_leaves_no_results_file(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    plan = BenchmarkPlan.model_validate(
        {
            "model": "m",
            "routes": [
                {"label": "off", "speculative": "off", "base_url": url},
                {"label": "mtp", "speculative": "mtp", "base_url": url.replace("/v1", "/mtp/v1")},
            ],
            "parity": {"prompts": ["p"], "tasks": "none"},
        }
    )
    results = tmp_path / "new" / "r.jsonl"

    async def main() -> None:
        await run_plan(plan, gate=LiveGate(), results_path=results)

    with pytest.raises(RouteUnreachableError):
        anyio.run(main)
    assert not results.exists()
    # a file that was there before is never removed, even when empty
    results.write_bytes(b"")
    with pytest.raises(RouteUnreachableError):
        anyio.run(main)
    assert results.exists()


def test_every_export_carries_the_run_metadata(tmp_path: Path) -> None:
    results = tmp_path / "run.jsonl"

    async def run() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = plan_of(
                [("off", "off", off.base_url), ("mtp", "mtp", mtp.base_url)],
                {
                    "requests_per_cell": 2,
                    "warmup_per_cell": 0,
                    "repeats": 1,
                    "engine_route": "embedded",
                    "parity": {"tasks": "none", "prompts": ["Hi"], "max_tokens": 8},
                },
                {},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(run)
    meta = result.meta
    assert meta is not None and meta.model == "deepseekbench-ref"
    assert meta.plan_hash == result.plan_hash and meta.started_at and meta.finished_at
    assert meta.library_version and meta.engines == {
        "off": "embedded (vllm)",
        "mtp": "embedded (vllm)",
    }
    again = load_results(results)
    assert again.meta == meta  # the file alone says the same
    card = Scorecard.from_run(again)
    for fmt in ("text", "markdown", "html"):
        text = card.render(fmt) if fmt != "html" else card.to_html(plots=False)
        assert "deepseekbench-ref" in text and meta.plan_hash in text, fmt
        assert meta.started_at in text and "mtp=embedded (vllm)" in text, fmt
    assert json.loads(card.to_json())["run"] == meta.model_dump(mode="json")
    (first, *_) = csv.DictReader(io.StringIO(card.to_csv()))
    assert first["model"] == "deepseekbench-ref" and first["plan_hash"] == meta.plan_hash
    assert first["run_started_at"] == meta.started_at and first["engine"] == "embedded (vllm)"
    code, out, _ = _cli("report", str(results), "--format", "markdown")
    assert code == 0 and f"plan {meta.plan_hash}" in out


def test_a_results_file_keeps_line_separators_inside_strings(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    store = ResultsStore(path)
    rec = ParityOutputRecord(
        plan_hash="h",
        route="off",
        reasoning_mode="non_think",
        parity_pass=1,
        prompt_id="p",
        output=ParityOutput(prompt_id="p", text=SEPARATORS),
    )
    store.append(rec)
    store.close()
    assert "\u2028".encode() in path.read_bytes()  # raw in the file, one line
    ((number, raw),) = read_numbered_records(path)
    assert number == 1 and parse_record(raw) == rec
