"""Natural-length decode: honest output length, output-length draws, coverage.

Done-when: on the embedded engine a default plan measures no token past EOS
(each measured output is compared with the ``off`` route's natural output of
the same prompt, asked for separately here with natural EOS); ``forced`` shows
``tokens_past_eos`` on the row and the scorecard note.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepseekbench import (
    BenchmarkPlan,
    CalibrationError,
    LiveGate,
    OutputLength,
    PlanError,
    Scorecard,
    StreamMeasurement,
    WorkloadCoverageWarning,
    dry_run,
    load_jsonl,
    load_results,
    load_sharegpt,
    run_plan,
)
from deepseekbench._analysis._output_length import tokens_past_eos
from deepseekbench._engine import FAST_COSTS
from deepseekbench._plan._coverage import workload_coverage
from deepseekbench._plan._output_length import with_output_tokens
from deepseekbench._plan._schedule import measure_slot
from deepseekbench._plan._workload import sample_path
from tests._helpers import off_and_mtp, plan_of, read_records

PROMPTS = [
    "What is 3 × 4?",
    "Name a prime number.",
    "What colour is the sky?",
    "Say hello.",
]
PLAN: dict[str, Any] = {
    "requests_per_cell": 4,
    "repeats": 1,
    "warmup_per_cell": 0,
    "cells": [{"max_tokens": 96}],
    "arrival": {"mode": "concurrency", "concurrency": 2},
    "parity": {"tasks": "none", "prompts": ["What is 3 × 4?"], "max_tokens": 32},
}


def _plan(off: str, mtp: str, **over: Any) -> BenchmarkPlan:
    workload = {"prompts": PROMPTS, **over.pop("workload", {})}
    return plan_of([("off", "off", off), ("mtp", "mtp", mtp)], PLAN, {"workload": workload, **over})


async def _natural(base_url: str, prompt: str, cap: int) -> str:
    """The off engine's own answer to ``prompt``, stopped at EOS under ``cap`` (greedy)."""
    body = {
        "model": "deepseekbench-ref",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": cap,
        "temperature": 0,
        "seed": 0,
    }
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{base_url}/chat/completions", json=body)
        r.raise_for_status()
        return str(r.json()["choices"][0]["message"]["content"])


def _run(
    tmp_path: Path, engine: dict[str, Any] | None = None, **over: Any
) -> tuple[Any, dict[str, str], Path]:
    results = tmp_path / "run.jsonl"

    async def main() -> tuple[Any, dict[str, str]]:
        async with off_and_mtp(cost=FAST_COSTS, **(engine or {})) as (off, mtp):
            plan = _plan(off.base_url, mtp.base_url, **over)
            result = await run_plan(plan, gate=LiveGate(), results_path=results)
            natural = {p: await _natural(off.base_url, p, 96) for p in PROMPTS}
            return result, natural

    result, natural = anyio.run(main)
    return result, natural, results


def test_the_embedded_engine_ends_answers_at_varying_lengths_below_the_cap(tmp_path: Path) -> None:
    async def main() -> list[str]:
        async with off_and_mtp(cost=FAST_COSTS) as (off, _):
            return [await _natural(off.base_url, p, 96) for p in PROMPTS]

    lengths = [len(t) for t in anyio.run(main)]
    assert all(0 < n < 96 for n in lengths), lengths  # one character a token
    assert len(set(lengths)) > 1, lengths


def test_a_default_plan_measures_no_token_past_eos(tmp_path: Path) -> None:
    result, natural, results = _run(tmp_path)
    assert result.plan.workload.output_length == "pinned"
    cal = [r for r in read_records(results) if r["record"] == "calibration"]
    assert sorted(r["item"] for r in cal) == [f"prompt-{k}" for k in range(1, 5)]
    assert {r["route"] for r in cal} == {"off"}
    by_item = {r["item"]: r["measurement"]["completion_tokens"] for r in cal}
    prompt_of = {f"prompt-{k + 1}": p for k, p in enumerate(PROMPTS)}
    for m in result.measurements:
        assert m.measurement.error is None
        item = m.item
        assert item is not None
        expected = natural[prompt_of[item]]
        # every route decoded exactly off's natural answer: same length, same text
        assert m.measurement.completion_tokens == by_item[item] == len(expected)
        assert m.measurement.text == expected
    for row in result.rows:
        assert row.output_length == "pinned"
        assert row.tokens_past_eos == 0.0
        assert not row.output_short
    assert "past EOS" not in Scorecard.from_run(result).to_text()
    assert load_results(results).rows == result.rows


def test_pinned_stops_at_the_natural_end_on_an_engine_that_counts_eos(tmp_path: Path) -> None:
    """vLLM counts the EOS token in ``completion_tokens``, so a pinned ``max_tokens`` (the
    natural length) includes it; ``min_tokens`` equal to it masked that EOS and every
    request decoded one token past its end while the row said ``tokens_past_eos = 0``.
    The embedded engine counting EOS (and honouring ``min_tokens`` as vLLM does) shows
    every route now ends at the natural end, with the natural text."""
    result, natural, results = _run(tmp_path, engine={"eos_counted": True})
    cal = {
        r["item"]: r["measurement"] for r in read_records(results) if r["record"] == "calibration"
    }
    prompt_of = {f"prompt-{k + 1}": p for k, p in enumerate(PROMPTS)}
    for m in result.measurements:
        assert m.item is not None and m.measurement.error is None
        expected = natural[prompt_of[m.item]]
        assert cal[m.item]["completion_tokens"] == len(expected) + 1  # the EOS is counted
        assert m.measurement.text == expected
        assert m.measurement.completion_tokens == len(expected) + 1
        assert m.measurement.finish_reason == "stop"
    assert all(row.tokens_past_eos == 0.0 for row in result.rows)


def test_text_run_on_past_the_natural_end_counts_past_eos_with_equal_counts() -> None:
    """The row's ``tokens_past_eos`` is truthful where the counts cannot tell: a masked
    EOS replaced by another token keeps the count and adds text."""
    cal = StreamMeasurement(text="12", completion_tokens=3, tokens_estimated=False)
    cal = cal.model_copy(update={"finish_reason": "stop"})
    past = cal.model_copy(update={"text": "12\n", "finish_reason": "length"})
    assert tokens_past_eos([("a", 0, past)], {("a", 0): cal}) == pytest.approx(1 / 3)
    same = cal.model_copy(update={"finish_reason": "length"})
    assert tokens_past_eos([("a", 0, same)], {("a", 0): cal}) == 0.0
    capped = cal.model_copy(update={"finish_reason": "length"})  # no natural end to pass
    assert tokens_past_eos([("a", 0, past)], {("a", 0): capped}) == 0.0


def test_pinned_requests_carry_the_natural_length_and_allow_its_eos(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    async def spy(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            seen.append(orjson.loads(request.content))

    results = tmp_path / "run.jsonl"

    async def main() -> BenchmarkPlan:
        async with off_and_mtp(cost=FAST_COSTS) as (off, mtp):
            plan = _plan(off.base_url, mtp.base_url)
            gate = LiveGate()
            async with gate.client(event_hooks={"request": [spy]}) as client:
                await run_plan(plan, gate=gate, results_path=results, client=client)
            return plan

    plan = anyio.run(main)
    # the dry run counts the calibration pass among the requests it would send
    assert dry_run(plan, gate=LiveGate()).n_requests == len(seen)
    cal = {r["item"]: r for r in read_records(results) if r["record"] == "calibration"}
    natural = {
        r["measurement"]["text"]: r["measurement"]["completion_tokens"] for r in cal.values()
    }
    calibrate = [b for b in seen if b["max_tokens"] == 96]
    measured = [b for b in seen if "min_tokens" in b]
    assert len(calibrate) == 4 and not any("min_tokens" in b for b in calibrate)
    assert len(measured) == 8  # 4 prompts × 2 routes
    assert not any("ignore_eos" in b for b in seen)
    for b in measured:
        # every earlier end masked, the natural end (the last token) allowed
        assert b["min_tokens"] == b["max_tokens"] - 1
        assert b["max_tokens"] in natural.values()


def test_forced_is_flagged_on_the_row_and_in_the_scorecard(tmp_path: Path) -> None:
    with pytest.warns(FutureWarning, match="reach_max_tokens is deprecated"):
        result, _, _ = _run(tmp_path, workload={"reach_max_tokens": True})
    assert result.plan.workload.output_length == "forced"
    for row in result.rows:
        assert row.output_length == "forced"
        assert row.tokens_past_eos is not None and row.tokens_past_eos > 0.2
    text = Scorecard.from_run(result).to_text()
    assert "! mtp @ 1k/256/non_think (c=2): acceptance measured on text past EOS (" in text
    assert "off @ 1k/256/non_think (c=2): acceptance measured" not in text


def test_natural_runs_no_calibration_and_stops_at_eos(tmp_path: Path) -> None:
    result, natural, results = _run(tmp_path, workload={"output_length": "natural"})
    assert not [r for r in read_records(results) if r["record"] == "calibration"]
    prompt_of = {f"prompt-{k + 1}": p for k, p in enumerate(PROMPTS)}
    for m in result.measurements:
        assert m.item is not None
        assert m.measurement.text == natural[prompt_of[m.item]]
    assert all(r.tokens_past_eos is None for r in result.rows)


def test_a_failed_calibration_stops_before_measuring_and_keeps_its_records(
    tmp_path: Path,
) -> None:
    results = tmp_path / "run.jsonl"

    async def main() -> Any:
        async with off_and_mtp(cost=FAST_COSTS) as (_, mtp):
            plan = _plan("http://127.0.0.1:9/v1", mtp.base_url, probe_routes=False)
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    with pytest.raises(CalibrationError) as info:
        anyio.run(main)
    assert len(info.value.items) == 4
    records = read_records(results)
    cal = [r for r in records if r["record"] == "calibration"]
    assert len(cal) == 4 and all(r["measurement"]["error"] for r in cal)
    assert not [r for r in records if r["record"] in ("measurement", "parity_output")]


def test_calibrated_items_are_not_calibrated_again_on_resume(tmp_path: Path) -> None:
    from deepseekbench._execute._calibrate import calibration_blocks
    from deepseekbench._execute._prepare import PreparedWorkload
    from deepseekbench._store._results import ResultsStore

    result, _, results = _run(tmp_path)
    store = ResultsStore.open(results, result.plan)
    try:
        state = store.state.calibration
        assert len(state) == 4
        items = result.plan.workload_items()
        assert items is not None
        cells = {c.cell_id: items for c in result.plan.cells}
        prepared = PreparedWorkload(cells=cells, tokenizer=None, counter=None)
        assert calibration_blocks(result.plan, prepared, state) == []
        first = next(iter(state))
        del state[first]
        (block,) = calibration_blocks(result.plan, prepared, state)
        assert [w.workload.id for w in block.items if w.workload] == [first[1]]
    finally:
        store.close()


# ------------------------------------------------------------- distributions --


@settings(max_examples=40, deadline=None)
@given(
    dist=st.sampled_from(["fixed", "uniform", "normal", "lognormal"]),
    tokens=st.integers(1, 4000),
    seed=st.integers(0, 2**32),
    cap=st.integers(1, 8000),
    n=st.integers(0, 50),
)
def test_draws_are_reproducible_and_within_the_cap(
    dist: str, tokens: int, seed: int, cap: int, n: int
) -> None:
    extra: dict[str, Any] = {}
    if dist == "uniform":
        extra["range_ratio"] = 0.5
    if dist in ("normal", "lognormal"):
        extra["spread"] = 0.8
    length = OutputLength.model_validate({"distribution": dist, "tokens": tokens, **extra})
    a = length.draw(n, seed=seed, cap=cap)
    assert a == length.draw(n, seed=seed, cap=cap)
    assert len(a) == n and all(1 <= x <= cap for x in a)
    if dist == "fixed":
        assert set(a) <= {min(cap, tokens)}


def test_lognormal_and_normal_draws_have_the_asked_mean() -> None:
    for dist in ("normal", "lognormal"):
        length = OutputLength.model_validate({"distribution": dist, "tokens": 200, "spread": 0.5})
        xs = length.draw(20_000, seed=1, cap=100_000)
        mean = sum(xs) / len(xs)
        assert 190 < mean < 210, (dist, mean)
    lg = OutputLength(distribution="lognormal", tokens=200, spread=1.0).draw(
        20_000, seed=1, cap=10**6
    )
    assert sorted(lg)[len(lg) // 2] < 200  # a right-skewed tail: median below mean


def test_every_route_gets_the_same_drawn_caps(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []

    async def spy(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            body = orjson.loads(request.content)
            seen.append((str(request.url.port), body["max_tokens"]))

    async def main() -> Any:
        async with off_and_mtp(cost=FAST_COSTS) as (off, mtp):
            plan = _plan(
                off.base_url,
                mtp.base_url,
                workload={
                    "output_length": "forced",
                    "output_tokens": {"distribution": "uniform", "tokens": 40, "range_ratio": 0.5},
                },
                parity={**PLAN["parity"], "determinism_control": False},
            )
            gate = LiveGate()
            async with gate.client(event_hooks={"request": [spy]}) as client:
                return await run_plan(plan, gate=gate, client=client), off, mtp

    result, off, mtp = anyio.run(main)
    by_port: dict[str, list[int]] = {}
    for port, n in seen:
        by_port.setdefault(port, []).append(n)
    off_caps = by_port[str(off.port)][-4:]  # after the parity and calibration requests
    mtp_caps = by_port[str(mtp.port)][-4:]
    assert sorted(off_caps) == sorted(mtp_caps)
    assert all(20 <= n <= 60 for n in off_caps) and len(set(off_caps)) > 1
    outputs = sorted(m.measurement.completion_tokens or 0 for m in result.measurements)
    assert outputs == sorted(off_caps + mtp_caps)  # forced: each decoded its drawn cap


def test_dataset_distribution_takes_the_reference_answers(tmp_path: Path) -> None:
    data = tmp_path / "w.jsonl"
    data.write_text(
        "\n".join(
            orjson.dumps({"prompt": p, "reference": "x" * (5 * (k + 1))}).decode()
            for k, p in enumerate(PROMPTS)
        )
    )
    items = load_jsonl(data)
    assert [len(i.references[0]) for i in items] == [5, 10, 15, 20]
    length = OutputLength(distribution="dataset", tokens=7)
    out = with_output_tokens(items, length, seed=0, cap=12, reference_tokens=[5, 10, None, 20])
    assert [i.output_tokens for i in out] == [(5,), (10,), (7,), (12,)]
    share = load_sharegpt(sample_path("sharegpt"))
    assert any(i.references for i in share)
    with pytest.raises(ValueError, match="needs reference answers"):
        BenchmarkPlan.model_validate(
            {
                **plan_of(
                    [
                        ("off", "off", "http://127.0.0.1:1/v1"),
                        ("mtp", "mtp", "http://127.0.0.1:2/v1"),
                    ],
                    PLAN,
                    {},
                ).model_dump(),
                "workload": {"output_tokens": {"distribution": "dataset", "tokens": 8}},
            }
        )


def test_output_length_refuses_unknown_modes_and_contradictions() -> None:
    base = plan_of(
        [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")], PLAN, {}
    )
    with pytest.raises(PlanError, match="output_length"):
        BenchmarkPlan.from_mapping({**base.model_dump(), "workload": {"output_length": "exact"}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(PlanError, match="contradicts output_length"):
            BenchmarkPlan.from_mapping(
                {
                    **base.model_dump(),
                    "workload": {"reach_max_tokens": True, "output_length": "natural"},
                }
            )
        old = BenchmarkPlan.from_mapping(
            {**base.model_dump(), "workload": {"reach_max_tokens": False}}
        )
    assert old.workload.output_length == "natural" and not old.reach_max_tokens


# ------------------------------------------------------------------ coverage --


def test_coverage_counts_the_items_sent() -> None:
    cov = workload_coverage(8, requests_per_cell=12, rounds=3)
    assert (cov.n_sent, cov.needed_requests, cov.complete) == (4, 24, False)
    assert cov.message().startswith("8 items, 4 will be sent")
    assert "raise requests_per_cell to 24" in cov.message()
    assert workload_coverage(8, requests_per_cell=24, rounds=3).complete


@settings(max_examples=60, deadline=None)
@given(n_items=st.integers(1, 30), rpc=st.integers(1, 120), repeats=st.integers(1, 10))
def test_coverage_matches_the_schedule(n_items: int, rpc: int, repeats: int) -> None:
    plan = plan_of(
        [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")],
        PLAN,
        {"requests_per_cell": rpc, "repeats": repeats},
    )
    # the items the schedule sends: slot ``index // rounds`` cycled over the items
    sent = {measure_slot(plan, i)[1] % n_items for i in range(rpc)}
    cov = workload_coverage(n_items, requests_per_cell=rpc, rounds=plan.rounds)
    assert cov.n_sent == len(sent)
    assert cov.complete == (len(sent) == n_items)


def test_a_plan_that_drops_items_is_warned_in_validation_and_dry_run(tmp_path: Path) -> None:
    data = tmp_path / "w.jsonl"
    data.write_text(
        "\n".join(
            orjson.dumps({"prompt": f"Question {k}?", "category": f"c{k % 4}"}).decode()
            for k in range(8)
        )
    )
    over = {
        "requests_per_cell": 12,
        "repeats": 3,
        "workload": {"source": "jsonl", "path": str(data)},
    }
    plan = plan_of(
        [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")],
        PLAN,
        over,
    )
    with pytest.warns(WorkloadCoverageWarning, match="8 items, 4 will be sent"):
        plan.validate_sources()
    with pytest.warns(WorkloadCoverageWarning):
        dry = dry_run(plan, gate=LiveGate())
    assert any("raise requests_per_cell to 24" in w for w in dry.warnings)
    strict = plan.model_copy(
        update={"workload": plan.workload.model_copy(update={"require_all_items": True})}
    )
    with pytest.raises(PlanError, match="raise requests_per_cell to 24"):
        strict.validate_sources()
    full = plan.model_copy(update={"requests_per_cell": 24})
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkloadCoverageWarning)
        assert dry_run(full, gate=LiveGate()).warnings == ()


def test_the_cli_dry_run_says_which_items_would_go_unsent(tmp_path: Path) -> None:
    import io

    from deepseekbench._cli._main import main

    data = tmp_path / "w.jsonl"
    data.write_text("\n".join(orjson.dumps({"prompt": f"Q{k}?"}).decode() for k in range(8)))
    plan = plan_of(
        [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")],
        PLAN,
        {"requests_per_cell": 12, "repeats": 3, "workload": {"source": "jsonl", "path": str(data)}},
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(path), "--dry-run"], stdout=out, stderr=err) == 0
    assert "warning: 8 items, 4 will be sent" in err.getvalue()
    assert "raise requests_per_cell to 24" in err.getvalue()


def test_the_coverage_message_counts_in_words() -> None:
    one = workload_coverage(8, requests_per_cell=1, rounds=1).message()
    assert one.startswith("8 items, 1 will be sent (1 request per cell over 1 round): ")
    many = workload_coverage(8, requests_per_cell=12, rounds=3).message()
    assert "(12 requests per cell over 3 rounds): raise requests_per_cell to 24" in many


def test_the_cli_prints_the_coverage_warning_as_one_clean_line(tmp_path: Path) -> None:
    """A run (not only the dry run) says which items go unsent in one line on stderr,
    without Python's ``path:line: Category:`` form; the library still warns by category."""
    import io

    from deepseekbench._cli._exits import EXIT_ERRORS
    from deepseekbench._cli._main import main

    data = tmp_path / "w.jsonl"
    data.write_text("\n".join(orjson.dumps({"prompt": f"Q{k}?"}).decode() for k in range(8)))
    plan = plan_of(
        [("off", "off", "http://127.0.0.1:9/v1"), ("mtp", "mtp", "http://127.0.0.1:7/v1")],
        PLAN,
        {
            "requests_per_cell": 12,
            "repeats": 3,
            "workload": {"source": "jsonl", "path": str(data)},
            "probe_routes": False,
            "timeout_s": 5,
        },
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    err = io.StringIO()
    code = main(["run", str(path), "--results", str(tmp_path / "r.jsonl")], stderr=err)
    assert code == EXIT_ERRORS  # nothing listens on port 9: the calibration pass fails
    printed = [ln for ln in err.getvalue().splitlines() if "will be sent" in ln]
    assert printed and set(printed) == {
        "deepseekbench: warning: 8 items, 4 will be sent (12 requests per cell over 3 "
        "rounds): raise requests_per_cell to 24, or keep fewer items"
    }, err.getvalue()
    with pytest.warns(WorkloadCoverageWarning, match="8 items, 4 will be sent"):
        plan.validate_sources()


def test_the_cli_exits_1_when_the_calibration_pass_fails(tmp_path: Path) -> None:
    import io

    from deepseekbench._cli._exits import EXIT_ERRORS
    from deepseekbench._cli._main import main

    plan = plan_of(
        [("off", "off", "http://127.0.0.1:9/v1"), ("mtp", "mtp", "http://127.0.0.1:8/v1")],
        PLAN,
        {"probe_routes": False, "timeout_s": 5},
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    out, err = io.StringIO(), io.StringIO()
    results = tmp_path / "r.jsonl"
    code = main(["run", str(path), "--results", str(results)], stdout=out, stderr=err)
    assert code == EXIT_ERRORS, err.getvalue()
    assert "calibration pass on 'off' did not give a natural output length" in err.getvalue()
    assert "rerun" in err.getvalue()


class _Chars:
    """A counter of one token per character (the embedded engine's tokenizer)."""

    name = "chars"

    async def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t) for t in texts]


def test_draw_outputs_counts_sharegpt_reference_answers_per_cell() -> None:
    from deepseekbench._execute._calibrate import draw_outputs
    from deepseekbench._execute._prepare import PreparedWorkload

    plan = plan_of(
        [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")],
        PLAN,
        {
            "cells": [{"max_tokens": 40}, {"max_tokens": 10, "output_target": "1k"}],
            "workload": {
                "source": "sharegpt",
                "path": "sample",
                "tokenizer": "chars.json",
                "output_tokens": {"distribution": "dataset", "tokens": 7},
            },
        },
    )
    items = plan.workload_items()
    assert items is not None
    prepared = PreparedWorkload(
        cells={c.cell_id: items for c in plan.cells}, tokenizer="chars", counter=None
    )
    drawn = anyio.run(draw_outputs, plan, prepared, _Chars())
    for cell, cap in zip(plan.cells, (40, 10), strict=True):
        for item in drawn.cells[cell.cell_id]:
            want = min(cap, len(item.references[0])) if item.references else min(cap, 7)
            assert item.output_tokens == (max(1, want),), item.id
