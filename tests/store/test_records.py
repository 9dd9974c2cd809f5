"""Typed results records: old files still read, and a
results file stands alone (the plan's task and dataset files are never read again)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from deepseekbench import (
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    LiveGate,
    ResultsFormatError,
    Row,
    Scorecard,
    Speculative,
    load_results,
    run_plan,
)
from deepseekbench._store._records import (
    MeasurementRecord,
    RunStartRecord,
    parse_record,
    record_json,
)
from tests._helpers import COSTS, plan_of, read_records

FIXTURE = Path(__file__).parent.parent / "data" / "results_v0"
"""A results file written by commit 8900197 (before typed records), with the task
and dataset files its plan named; ``make_fixture.py.txt`` wrote it."""

WRITTEN_AT = "/tmp/dsb-fixture-v0"
"""Where the fixture's task and dataset files were when it was written."""


WITNESS_ROW_FIELDS = (
    "witness_test",
    "witness_statistic",
    "witness_p_value",
    "witness_tokens_tested",
    "witness_tokens_excluded",
    "witness_detectable_distance",
    "witness_power",
    "witness_requests",
    "witness_scored_tokens",
    "witness_note",
)


def _old_file(tmp_path: Path) -> Path:
    """The fixture, its plan's file paths moved to ``tmp_path``."""
    for name in ("tasks.jsonl", "data.jsonl"):
        shutil.copy(FIXTURE / name, tmp_path / name)
    text = (FIXTURE / "results.jsonl").read_text(encoding="utf-8")
    out = tmp_path / "results.jsonl"
    out.write_text(text.replace(WRITTEN_AT, str(tmp_path)), encoding="utf-8")
    return out


# the client-clock checks: measurement and row fields added since the fixture was written
_CLIENT_CLOCK = ("client_stall_ms", "client_cpu_share", "client_core_wait_share")
CLIENT_CLOCK_FIELDS: dict[str, tuple[str, ...]] = {
    "measurement": (*_CLIENT_CLOCK, "client_cores", "client_load_1m", "send_wait_ms"),
    "row": (*_CLIENT_CLOCK, "client_cores", "client_load_1m", "n_client_starved",
            "server_tpot_ms", "client_starved"),
}  # fmt: skip
_TRAFFIC_ROW_FIELDS = (
    "prefix_cache_hit_rate", "kv_cache_usage_peak", "queue_depth_peak", "trace", "trace_speedup",
    "ramp_ms",  # the closed loop's ramp: unknown on a row written before it existed
    "engine_steps", "engine_batch_mean", "engine_steps_source",  # the engine's own steps
)  # fmt: skip
_CAPACITY_ROW_FIELDS = (
    "route_identity", "route_identity_detail", "engine_command", "engine_version", "spec_config",
    "client_workers", "client_workers_basis",  # the pool's workers and workers = "auto"'s why
)  # fmt: skip
_ACCEPTANCE_ROW_FIELDS = (
    "acceptance_length_p10", "acceptance_length_p50", "acceptance_length_p90",
    "accepted_per_step", "acceptance_split",
)  # fmt: skip
"""The per-request acceptance spread, added since: ``None`` on old rows, derived from the
measurements when the file is read back."""
MARGIN_ROW_FIELDS = (
    "parity_basis",
    "divergences_near_tie",
    "divergences_decisive",
    "divergences_unexplained",
    "noise_floor",
    "tau_nats",
    "tau_source",
    "tau_quantile",  # the noise model: tau measured, opportunities, attribution, power
    "tau_sample",
    "near_tie_opportunities",
    "outputs_with_opportunity",
    "outputs_profiled",
    "divergences_shown_one_pass",
    "divergences_charged_to_off",
    "parity_power_bound",
    "parity_lossy_rate",
    "first_divergence_margin_nats",
    "divergence_note",
    "engine_deterministic",  # the engine's deterministic mode (llama2)
    "engine_deterministic_source",
)


def test_every_old_record_reads_typed_and_writes_back_the_same_json() -> None:
    lines = (FIXTURE / "results.jsonl").read_bytes().split(b"\n")
    records = [orjson.loads(line) for line in lines if line]
    kinds = {r["record"] for r in records}
    assert {"run_start", "measurement", "parity_output", "server_metrics", "workload"} <= kinds
    assert {"parity", "row", "run_end"} <= kinds
    for raw in records:
        out = record_json(parse_record(raw))
        if out["record"] == "run_start":
            # the fields added since
            assert out.pop("parity_set") is None and out.pop("library_version") is None
            assert out.pop("launched") is None  # nothing launched
            assert out.pop("command") is None  # the CLI command, recorded since
        for name in CLIENT_CLOCK_FIELDS.get(out["record"], ()):  # added since, at their defaults
            body = out[out["record"]]
            assert body.pop(name) in (None, 0, False), name
        if out["record"] == "row":  # traffic, capacity: row fields added since, None on old rows
            for name in (*_TRAFFIC_ROW_FIELDS, *_CAPACITY_ROW_FIELDS, *_ACCEPTANCE_ROW_FIELDS):
                assert out["row"].pop(name) is None, name
        if out["record"] == "row":  # the margin fields, at their defaults
            defaults = {"parity_basis": "bit_exact", "divergence_note": None}
            for name in MARGIN_ROW_FIELDS:
                assert out["row"].pop(name) == defaults.get(name), name
        if out["record"] == "measurement":  # TPOT's decode window, added since
            for name in ("finish_ms", "tpot_tokens", "server_rate_span"):  # + the rate's span
                assert out["measurement"].pop(name) is None, name
        if out["record"] == "row":  # the row fields added since (traffic)
            assert out["row"].pop("output_length") is None
            assert out["row"].pop("tokens_past_eos") is None
            assert out["row"].pop("server_clock_faults") == []  # the engine's clock checked
            for name in WITNESS_ROW_FIELDS:  # the distribution witness, added since
                assert out["row"].pop(name) is None, name
        assert out == raw, raw["record"]


def test_an_old_results_file_reports_the_rows_its_run_wrote(tmp_path: Path) -> None:
    path = _old_file(tmp_path)
    written = [Row.model_validate(r["row"]) for r in read_records(path) if r["record"] == "row"]
    with pytest.warns(FutureWarning, match="reach_max_tokens is deprecated"):
        result = load_results(path)
    assert len(written) == 3
    # the same rows, plus what the client-clock checks derive from the same
    # measurements (the engine's TPOT, the client-clock counts), the route-identity
    # check, which applies to old files too, and natural-length decode's output_length:
    # the old plan's reach_max_tokens = true reads as "forced"; with no calibration pass
    # in the file, nothing says how much was past EOS
    new = {*CLIENT_CLOCK_FIELDS["row"], "route_identity", "route_identity_detail", "output_length"}
    new.add("ramp_ms")  # rebuilt: its closed loop started all at once (0), as every one then
    assert all(r.ramp_ms == 0.0 for r in result.rows)
    new |= set(_ACCEPTANCE_ROW_FIELDS)  # the acceptance spread, derived from the measurements
    assert [r.model_dump(exclude=new) for r in result.rows] == [
        r.model_dump(exclude=new) for r in written
    ]
    assert any(r.server_tpot_ms is not None for r in result.rows)  # vLLM metrics.mean_itl_ms
    assert all(r.route_identity is not None for r in result.rows)
    assert all(r.output_length == "forced" and r.tokens_past_eos is None for r in result.rows)
    assert len(result.measurements) == 18 and result.complete
    # an old file has no parity set of its own: it needs its plan's task file
    (tmp_path / "tasks.jsonl").unlink()
    with pytest.raises(ResultsFormatError, match="task file"):
        load_results(path)


def _run(tmp_path: Path, results: Path) -> Any:
    (tmp_path / "tasks.jsonl").write_text((FIXTURE / "tasks.jsonl").read_text())
    (tmp_path / "data.jsonl").write_text((FIXTURE / "data.jsonl").read_text())

    async def main() -> Any:
        async with (
            EmbeddedEngine(EngineConfig(cost=COSTS)) as off,
            EmbeddedEngine(EngineConfig(speculative=Speculative.mtp, cost=COSTS)) as mtp,
            EmbeddedEngine(EngineConfig(speculative=Speculative.mtp, mistuned_draft=True,
                                        cost=COSTS)) as bad,
        ):  # fmt: skip
            plan = plan_of(
                [
                    ("off", "off", off.base_url),
                    ("mtp", "mtp", mtp.base_url),
                    ("bad", "mtp", bad.base_url, Dialect.vllm),
                ],
                {
                    "requests_per_cell": 2,
                    "warmup_per_cell": 0,
                    "repeats": 1,
                    "parity": {"max_tokens": 24, "tasks": "tasks.jsonl", "prompts": ["Say hi."]},
                    "workload": {"source": "spec_bench", "path": "data.jsonl"},
                    "cells": [{"context_bucket": "1k", "output_target": "256", "max_tokens": 16}],
                    "base_dir": str(tmp_path),
                },
                {},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    return anyio.run(main)


def test_a_results_file_stands_alone_when_its_task_and_dataset_files_change(
    tmp_path: Path,
) -> None:
    results = tmp_path / "run.jsonl"
    result = _run(tmp_path, results)
    card = Scorecard.from_run(result).to_text()
    (start,) = [parse_record(r) for r in read_records(results) if r["record"] == "run_start"]
    assert isinstance(start, RunStartRecord) and start.parity_set is not None
    ids = [e.prompt_id for e in start.parity_set]
    assert ids[:3] == ["prompt-1", "t-add", "t-mul"]
    assert "conv:spec_bench-1#2" in ids  # a conversation's second turn
    graded = {e.prompt_id: e.task for e in start.parity_set if e.task is not None}
    assert graded["t-add"] is not None and graded["t-add"].grader.expected == "42"
    # edited: a different expected answer would flip every task verdict
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(tasks.read_text().replace('"expected":"42"', '"expected":"7"'))
    (tmp_path / "data.jsonl").write_text('{"question_id": 9, "turns": ["Other."]}\n')
    again = load_results(results)
    assert again.rows == result.rows and again.parity == result.parity
    assert Scorecard.from_run(again).to_text() == card
    # deleted
    tasks.unlink()
    (tmp_path / "data.jsonl").unlink()
    assert load_results(results).rows == result.rows


def test_the_store_is_the_one_writer_of_measurements(tmp_path: Path) -> None:
    """Every measurement the run returned is a record of its file, in the same order."""
    results = tmp_path / "run.jsonl"
    result = _run(tmp_path, results)
    recs = [parse_record(r) for r in read_records(results) if r["record"] == "measurement"]
    assert all(isinstance(r, MeasurementRecord) for r in recs)
    assert [(r.route, r.index, r.turn) for r in recs if isinstance(r, MeasurementRecord)] == [
        (m.route, m.index, m.turn) for m in result.measurements
    ]
