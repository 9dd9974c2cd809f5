"""End to end: a small plan against the embedded engine over loopback."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from deepseekbench import (
    AcceptanceScope,
    BenchmarkPlan,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    LiveGate,
    ProgressEvent,
    QualityParity,
    RefusalReason,
    Scorecard,
    Speculative,
    load_results,
    run_plan,
)
from tests._helpers import COSTS, off_and_mtp, off_mtp_and_mistuned, plan_of, read_records

PLAN: dict[str, Any] = {
    "requests_per_cell": 5,
    "warmup_per_cell": 0,
    "arrival": {"mode": "concurrency", "concurrency": 2},
    "parity": {"concurrency": 8, "max_tokens": 64},
}


def _plan(routes: list[tuple[str, str, str, Dialect]], **over: Any) -> BenchmarkPlan:
    return plan_of(routes, PLAN, over)


def test_verdicts_credit_correct_mtp_and_refuse_the_mistuned_one(tmp_path: Path) -> None:
    results = tmp_path / "run.jsonl"

    async def main() -> Any:
        async with (
            off_mtp_and_mistuned(cost=COSTS) as (off, mtp, bad),
            EmbeddedEngine(
                EngineConfig(speculative=Speculative.mtp, dialect=Dialect.openai, cost=COSTS)
            ) as quiet,
        ):
            plan = _plan(
                [
                    ("off", "off", off.base_url, Dialect.vllm),
                    ("mtp", "mtp", mtp.base_url, Dialect.vllm),
                    ("mtp-mistuned", "mtp", bad.base_url, Dialect.vllm),
                    ("mtp-openai", "mtp", quiet.base_url, Dialect.openai),
                ]
            )
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    rows = {r.route_label: r for r in result.rows}
    assert rows["off"].quality_parity is QualityParity.verified
    assert rows["mtp"].quality_parity is QualityParity.verified
    assert rows["mtp-mistuned"].quality_parity is QualityParity.differs
    assert all(r.is_complete and r.n_errors == 0 for r in rows.values())
    # per-request acceptance where the dialect reports it, server-wide otherwise
    assert rows["mtp"].acceptance_scope is AcceptanceScope.per_request
    assert rows["mtp"].accepted_token_ratio is not None
    assert 0 < rows["mtp"].accepted_token_ratio < 1
    assert rows["mtp-openai"].acceptance_scope is AcceptanceScope.server_wide
    assert rows["mtp-openai"].accepted_token_ratio is not None
    # per-position acceptance: vLLM per-step lists per request, the Prometheus
    # per-position window where requests report nothing; fractions of the verify
    # steps, so they add up to acceptance length - 1
    for label in ("mtp", "mtp-openai"):
        row = rows[label]
        by_pos = row.acceptance_by_position
        assert by_pos is not None and row.acceptance_length is not None, label
        assert all(a >= b for a, b in itertools.pairwise(by_pos))
        assert sum(by_pos) == pytest.approx(row.acceptance_length - 1), label
    assert rows["mtp"].spec_tokens == len(rows["mtp"].acceptance_by_position or ())
    assert rows["mtp"].acceptance_source == "metrics.speculative_decoding"
    assert rows["mtp-openai"].acceptance_source == "prometheus:vllm:spec_decode_*"
    assert rows["off"].acceptance_by_position is None and rows["off"].spec_tokens is None
    assert rows["mtp"].server_ttft_ms is not None and rows["mtp"].sse_ignored_lines == 0
    assert len(result.measurements) == 4 * 5

    card = Scorecard.from_run(result)
    lines = {ln.route: ln for ln in card.lines}
    for label in ("mtp", "mtp-openai"):
        # earned on every condition; with 5 requests over 3 rounds on a busy machine the
        # interval may include 1, which the significance rule reports as no significant difference
        v = lines[label].verdict
        assert v is not None and (v.printed or v.inconclusive), lines[label].speedup_text
    assert "mtp @ " in card.to_text() and "acceptance by draft position 1.." in card.to_text()
    bad_line = lines["mtp-mistuned"]
    assert not bad_line.credited and bad_line.verdict is not None
    assert RefusalReason.candidate_parity_not_verified in bad_line.verdict.reasons
    assert bad_line.first_divergence is not None and bad_line.task_flips
    rp = result.parity[("mtp-mistuned", rows["off"].reasoning_mode)]
    assert rp.tasks is not None and rp.tasks.flips and rp.exact is not None
    assert rp.exact.n_diverged >= len(rp.tasks.flips)

    # the file holds every measurement, the parity outputs and the final rows
    kinds = Counter(r["record"] for r in read_records(results))
    assert kinds["measurement"] == 20 and kinds["row"] == 4 and kinds["run_end"] == 1
    assert kinds["parity_output"] == 16 * 5  # 16 smoke tasks x (4 routes + off control)
    # and report rebuilds the same rows and the same scorecard from it
    again = load_results(results)
    assert again.rows == result.rows
    assert Scorecard.from_run(again).to_text() == card.to_text()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_cancelled_run_keeps_its_measurements_and_a_rerun_resumes(
    tmp_path: Path, backend: str
) -> None:
    results = tmp_path / "resume.jsonl"
    stop_after = 12

    async def main() -> tuple[int, Any, list[ProgressEvent]]:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = _plan(
                [
                    ("off", "off", off.base_url, Dialect.vllm),
                    ("mtp", "mtp", mtp.base_url, Dialect.vllm),
                ],
                requests_per_cell=6,
                parity={"tasks": "none", "prompts": ["Count from 5 to 12.", "What is 7 × 8?"]},
            )
            with anyio.CancelScope() as scope:

                def stop(ev: ProgressEvent) -> None:
                    if ev.done >= stop_after:
                        scope.cancel()

                await run_plan(plan, gate=LiveGate(), results_path=results, progress=stop)
            assert scope.cancelled_caught
            kept = len(read_records(results))
            events: list[ProgressEvent] = []
            result = await run_plan(
                plan, gate=LiveGate(), results_path=results, progress=events.append
            )
            return kept, result, events

    kept, result, events = anyio.run(main, backend=backend)
    # full work: 2 routes x 6 measured + 2 prompts x (2 routes + control) = 18 requests,
    # plus the calibration pass on off (natural-length decode): the 2 workload items measured = 20
    assert kept >= 1 + stop_after  # run_start + everything finished before the cancel
    assert result.resumed >= stop_after
    assert events[0].total == 20 - result.resumed
    records = read_records(results)
    measured = [
        (r["route"], r["cell"], r["index"]) for r in records if r["record"] == "measurement"
    ]
    assert len(measured) == len(set(measured)) == 12  # nothing measured twice
    outputs = [
        (r["route"], r["pass"], r["prompt_id"]) for r in records if r["record"] == "parity_output"
    ]
    assert len(outputs) == len(set(outputs)) == 6
    assert result.complete and len(result.measurements) == 12
    assert {r.route_label: r.quality_parity for r in result.rows} == {
        "off": QualityParity.verified,
        "mtp": QualityParity.verified,
    }


def test_torn_last_line_is_dropped_on_resume(tmp_path: Path) -> None:
    results = tmp_path / "torn.jsonl"

    async def main() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = _plan(
                [
                    ("off", "off", off.base_url, Dialect.vllm),
                    ("mtp", "mtp", mtp.base_url, Dialect.vllm),
                ],
                parity={"tasks": "none", "prompts": ["What is 7 × 8?"]},
            )
            await run_plan(plan, gate=LiveGate(), results_path=results)
            with results.open("ab") as fh:
                fh.write(b'{"record": "measurement", "plan_ha')  # a crash mid-write
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    # 10 measured, 3 parity outputs, and (natural-length decode) the 2 items' calibration outputs
    assert result.resumed == 10 + 3 + 2 and result.complete
    records = read_records(results)  # every line parses again
    assert sum(r["record"] == "run_end" for r in records) == 2
