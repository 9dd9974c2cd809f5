"""Token-true workloads, end to end against the embedded engine over loopback:
a 32k synthetic cell sized by the engine's tokenizer with outputs reaching the
target; the Spec-Bench sample with per-category acceptance and a two-turn item
measured per turn; a 128k cell of ten-token prompts refused before any request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    ContextBucket,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    LiveGate,
    Scorecard,
    WorkloadLengthError,
    load_results,
    run_plan,
)
from deepseekbench._engine import FAST_COSTS
from tests._helpers import off_and_mtp, plan_of, read_records

PLAN: dict[str, Any] = {
    "requests_per_cell": 2,
    "warmup_per_cell": 0,
    "arrival": {"mode": "concurrency", "concurrency": 4},
    "parity": {"tasks": "none", "prompts": ["What is 3 × 4?"], "max_tokens": 32},
}


def _plan(off: str, mtp: str, **over: Any) -> BenchmarkPlan:
    return plan_of([("off", "off", off), ("mtp", "mtp", mtp)], PLAN, over)


def test_a_32k_synthetic_cell_runs_within_its_bucket_and_reaches_the_target(
    tmp_path: Path,
) -> None:
    results = tmp_path / "run.jsonl"
    big: dict[str, Any] = {"cost": FAST_COSTS, "max_context_tokens": 40_000}

    async def main() -> Any:
        async with off_and_mtp(**big) as (off, mtp):
            plan = _plan(
                off.base_url,
                mtp.base_url,
                cells=[{"context_bucket": "32k", "output_target": "256", "max_tokens": 48}],
                workload={
                    # decoding to the 48-token target (past EOS) is what this test measures
                    "output_length": "forced",
                    "source": "synthetic",
                    "tokenizer": "endpoint",
                    "n_prompts": 2,
                    "input_length": {
                        "distribution": "uniform",
                        "tokens": 24_000,
                        "range_ratio": 0.1,
                    },
                },
            )
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    (workload,) = [r for r in read_records(results) if r["record"] == "workload"]
    assert workload["tokenizer"].startswith("endpoint:http://127.0.0.1:")
    counts = [i["prompt_tokens"] for i in workload["cells"]["32k/256/non_think"]]
    assert len(counts) == 2
    assert all(ContextBucket.k32.min_prompt_tokens <= n <= 26_400 for n in counts)
    for row in result.rows:
        assert row.context_bucket is ContextBucket.k32
        assert row.n_requests == 2 and row.n_errors == 0
        assert not row.output_short and row.n_output_short == 0
        assert row.output_tokens is not None and row.output_tokens.p50 == 48
        # usage prompt tokens = the text's tokens plus the template's role markers
        assert row.prompt_tokens is not None
        assert min(counts) <= (row.prompt_tokens.p50 or 0) <= max(counts) + 32
    assert load_results(results).rows == result.rows


def test_natural_eos_outputs_are_flagged_short(tmp_path: Path) -> None:
    async def main() -> Any:
        async with off_and_mtp(cost=FAST_COSTS) as (off, mtp):
            plan = _plan(
                off.base_url,
                mtp.base_url,
                workload={"prompts": ["What is 3 × 4?"], "output_length": "natural"},
            )
            return await run_plan(plan, gate=LiveGate())

    result = anyio.run(main)
    assert all(r.output_short and r.n_output_short == 2 for r in result.rows)
    text = Scorecard.from_run(result).to_text()  # said once, as the plan asked for it
    n = len(result.rows)
    assert f"{2 * n} of {2 * n} outputs on {n} line(s) ended before max_tokens" in text
    assert 'as workload.output_length = "natural" asks' in text


def test_spec_bench_sample_gives_per_category_acceptance_and_per_turn_figures(
    tmp_path: Path,
) -> None:
    results = tmp_path / "run.jsonl"

    async def main() -> Any:
        async with off_and_mtp(cost=FAST_COSTS) as (off, mtp):
            plan = _plan(
                off.base_url,
                mtp.base_url,
                requests_per_cell=12,
                repeats=1,
                cells=[{"max_tokens": 24}],
                workload={"source": "spec_bench", "path": "sample"},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    off_row, mtp_row = result.rows
    names = ["math_reasoning", "mt_bench", "qa", "rag", "summarization", "translation"]
    assert [c.name for c in mtp_row.categories] == names
    mt = next(c for c in mtp_row.categories if c.name == "mt_bench")
    assert mt.n_requests == 4  # two two-turn items
    assert all(c.accepted_token_ratio is not None for c in mtp_row.categories)
    assert all(c.accepted_token_ratio is None for c in off_row.categories)
    assert [t.name for t in mtp_row.turns] == ["turn 1", "turn 2"]
    assert mtp_row.turns[1].n_requests == 2 and mtp_row.n_requests == 14
    assert mtp_row.turns[1].ttft_ms is not None and mtp_row.turns[1].tpot_ms is not None
    # the two-turn item was measured per turn, each turn its own record
    turns = [
        (r["route"], r["turn"])
        for r in read_records(results)
        if r["record"] == "measurement" and r["item"] == "spec_bench-1"
    ]
    assert sorted(turns) == [("mtp", 0), ("mtp", 1), ("off", 0), ("off", 1)]
    # exact parity compared every turn of the conversations
    mtp_parity = result.parity[("mtp", mtp_row.reasoning_mode)]
    assert mtp_parity.exact is not None
    compared = {c.prompt_id for c in mtp_parity.exact.prompts if c.match}
    assert {"conv:spec_bench-1#1", "conv:spec_bench-1#2", "conv:spec_bench-2#2"} <= compared
    text = Scorecard.from_results(results).to_text()
    assert "Per category" in text and "Per turn" in text
    assert any("turn 2" in ln and "mtp" in ln for ln in text.splitlines())
    assert any("mt_bench" in ln and "mtp" in ln for ln in text.splitlines())
    assert load_results(results).rows == result.rows


def test_a_128k_cell_of_ten_token_prompts_is_refused_before_any_request(
    tmp_path: Path,
) -> None:
    results = tmp_path / "run.jsonl"

    async def main() -> tuple[Exception, int, int]:
        async with off_and_mtp(cost=FAST_COSTS) as (off, mtp):
            plan = _plan(
                off.base_url,
                mtp.base_url,
                cells=[{"context_bucket": "128k"}],
                workload={
                    "prompts": ["What is 3 × 4?", "Count from 1 to 9."],
                    "tokenizer": "endpoint",
                },
            )
            with pytest.raises(WorkloadLengthError) as info:
                await run_plan(plan, gate=LiveGate(), results_path=results)
            return info.value, off.counters.requests, mtp.counters.requests

    err, off_requests, mtp_requests = anyio.run(main)
    assert (off_requests, mtp_requests) == (0, 0)
    assert "prompt-1 (14 tokens)" in str(err) and "prompt-2 (18 tokens)" in str(err)
    assert "128k" in str(err)
    assert not results.exists() or results.read_bytes() == b""


def test_dialect_field_is_used_for_the_tokenize_shape() -> None:
    # llama.cpp routes count with {"content": ...}; the embedded engine answers both
    async def main() -> int:
        async with EmbeddedEngine(EngineConfig(cost=FAST_COSTS)) as e:
            from deepseekbench import EndpointTokenCounter, EngineRoute

            gate = LiveGate()
            async with gate.client() as client:
                route = EngineRoute(base_url=e.base_url, model="m", dialect=Dialect.llamacpp)
                (n,) = await EndpointTokenCounter(route, gate=gate, client=client).count(["abc"])
                return n

    assert anyio.run(main) == 3


def test_dry_run_refuses_short_prompts_in_a_long_bucket_without_any_connection() -> None:
    from deepseekbench import dry_run

    plan = _plan(
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:10/v1",
        cells=[{"context_bucket": "128k"}],
    )
    with pytest.raises(WorkloadLengthError, match="arith-add-17-25"):
        dry_run(plan, gate=LiveGate())
    ok = _plan("http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1")
    assert len(dry_run(ok, gate=LiveGate()).rows) == 2


def test_outputs_without_usage_are_counted_by_the_tokenizer_and_never_credited() -> None:
    from deepseekbench import FaultConfig, RefusalReason

    quiet = FaultConfig(missing_usage=True)

    async def main() -> Any:
        async with off_and_mtp(cost=FAST_COSTS, faults=quiet) as (off, mtp):
            plan = _plan(
                off.base_url,
                mtp.base_url,
                requests_per_cell=5,
                cells=[{"max_tokens": 40}],
                workload={"prompts": ["Count from 1 to 9."], "tokenizer": "endpoint"},
            )
            return await run_plan(plan, gate=LiveGate())

    result = anyio.run(main)
    for req in result.measurements:
        m = req.measurement
        assert m.completion_tokens is None and m.tokens_estimated
        assert m.tokens_estimated_by is not None and m.tokens_estimated_by.startswith("endpoint:")
        # the engine's tokenizer is one token per character; every route decodes
        # off's natural answer (output_length "pinned", the default), not the cap
        assert m.text == "1 2 3 4 5 6 7 8 9"
        assert m.estimated_completion_tokens == len(m.text) == 17
        if req.route == "mtp":  # several tokens per chunk: chunks would under-count
            assert len(m.chunk_arrival_ms) < 17
    assert all(r.tokens_estimated for r in result.rows)
    (line,) = Scorecard.from_run(result).refused
    assert line.verdict is not None and RefusalReason.tokens_estimated in line.verdict.reasons


def test_a_resumed_run_sends_only_the_missing_turns(tmp_path: Path) -> None:
    results = tmp_path / "run.jsonl"

    async def run(engines: tuple[EmbeddedEngine, EmbeddedEngine]) -> Any:
        off, mtp = engines
        plan = _plan(
            off.base_url,
            mtp.base_url,
            requests_per_cell=2,
            repeats=1,
            cells=[{"max_tokens": 16}],
            workload={"source": "spec_bench", "path": "sample", "categories": ["mt_bench"]},
        )
        return await run_plan(plan, gate=LiveGate(), results_path=results)

    async def main() -> tuple[int, int, Any]:
        async with off_and_mtp(cost=FAST_COSTS) as (off, mtp):
            await run((off, mtp))
            # drop the mtp route's second turn of spec_bench-2 (as if the run had stopped)
            kept = [
                line
                for line in results.read_bytes().splitlines()
                if not (
                    (r := orjson.loads(line))["record"] == "measurement"
                    and r["route"] == "mtp"
                    and r["item"] == "spec_bench-2"
                    and r["turn"] == 1
                )
            ]
            results.write_bytes(b"\n".join(kept) + b"\n")
            before = (off.counters.requests, mtp.counters.requests)
            result = await run((off, mtp))
            return off.counters.requests - before[0], mtp.counters.requests - before[1], result

    off_sent, mtp_sent, result = anyio.run(main)
    assert (off_sent, mtp_sent) == (0, 1)
    mtp_row = result.rows[1]
    assert mtp_row.n_requests == 4 and [t.n_requests for t in mtp_row.turns] == [2, 2]


def test_multi_turn_on_a_worker_pool_is_refused_before_any_request() -> None:
    from deepseekbench import PlanError

    async def main() -> tuple[int, int]:
        async with off_and_mtp(cost=FAST_COSTS) as (off, mtp):
            plan = _plan(
                off.base_url,
                mtp.base_url,
                workers=2,
                workload={"source": "spec_bench", "path": "sample", "categories": ["mt_bench"]},
            )
            with pytest.raises(PlanError, match="spec_bench-1, spec_bench-2"):
                await run_plan(plan, gate=LiveGate())
            return off.counters.requests, mtp.counters.requests

    assert anyio.run(main) == (0, 0)
