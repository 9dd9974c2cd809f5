"""The workload stage: items per cell, counted and checked before any request; and
multi-turn conversations that carry each route's own answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deepseekbench import (
    BenchmarkPlan,
    ChatRequest,
    PlanError,
    StreamMeasurement,
    WorkloadFormatError,
    WorkloadItem,
    WorkloadLengthError,
)
from deepseekbench._execute._prepare import converse, default_input_length, prepare_workload
from tests._fakes import CharCounter

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def plan(cells: list[dict[str, Any]], **workload: Any) -> BenchmarkPlan:
    return BenchmarkPlan.model_validate(
        {
            "model": "m",
            "routes": [
                {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
                {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
            ],
            "cells": cells,
            "workload": workload,
        }
    )


async def test_synthetic_32k_cell_is_generated_within_its_bucket() -> None:
    p = plan(
        [{"context_bucket": "32k"}, {"context_bucket": "1k"}],
        source="synthetic",
        tokenizer="endpoint",
        n_prompts=2,
        input_length={"distribution": "uniform", "tokens": 20_000, "range_ratio": 0.1},
    )
    with pytest.raises(WorkloadLengthError, match="1k/256/non_think"):
        # the same 20k-token prompts cannot be a 1k cell
        await prepare_workload(p, counter=CharCounter())
    p = plan(
        [{"context_bucket": "32k"}],
        source="synthetic",
        tokenizer="endpoint",
        n_prompts=3,
        input_length={"distribution": "uniform", "tokens": 20_000, "range_ratio": 0.1},
    )
    prepared = await prepare_workload(p, counter=CharCounter())
    items = prepared.cells["32k/256/non_think"]
    assert len(items) == 3 and prepared.tokenizer == "chars"
    assert all(18_000 - 16 <= (i.prompt_tokens or 0) <= 22_000 for i in items)
    assert prepared.item("32k/256/non_think", 4) is items[1]


async def test_synthetic_default_length_is_three_quarters_of_the_bucket() -> None:
    p = plan([{"context_bucket": "8k"}], source="synthetic", tokenizer="endpoint", n_prompts=1)
    assert default_input_length(p.cells[0]).tokens == 6144
    prepared = await prepare_workload(p, counter=CharCounter())
    (item,) = prepared.cells["8k/256/non_think"]
    assert 6144 - 16 <= (item.prompt_tokens or 0) <= 6144


async def test_128k_cell_fed_short_prompts_is_refused_naming_them() -> None:
    p = plan([{"context_bucket": "128k"}])
    counter = CharCounter()
    with pytest.raises(WorkloadLengthError) as info:
        await prepare_workload(p, counter=counter)
    assert info.value.cell == "128k/256/non_think"
    assert "arith-add-17-25" in str(info.value)
    assert len(info.value.prompts) == 16
    # without a tokenizer the byte bound still refuses them
    with pytest.raises(WorkloadLengthError, match="arith-add-17-25"):
        await prepare_workload(p, counter=None)


async def test_counts_are_reused_across_cells_and_recorded_on_items() -> None:
    p = plan(
        [
            {"context_bucket": "1k", "output_target": "256"},
            {"context_bucket": "1k", "output_target": "1k"},
        ],
        source="spec_bench",
        path="sample",
        categories=["qa", "rag"],
        tokenizer="endpoint",
    )
    counter = CharCounter()
    prepared = await prepare_workload(p, counter=counter)
    items = prepared.cells["1k/1k/non_think"]
    assert {i.category for i in items} == {"qa", "rag"} and len(items) == 4
    assert all(i.prompt_tokens == len(i.turns[0]) for i in items)
    assert counter.texts == 4


def test_plan_reads_dataset_files_at_validation(tmp_path: Path) -> None:
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question_id": 1, "category": "qa", "turns": "no"}\n')
    p = plan([{}], source="spec_bench", path=str(bad))
    with pytest.raises(WorkloadFormatError, match=r"q\.jsonl:1"):
        p.validate_sources()
    p = plan([{}], source="spec_bench", path="sample", categories=["nope"])
    with pytest.raises(WorkloadFormatError, match="no item of categories"):
        p.validate_sources()
    sources = plan([{}], source="sharegpt", path="sample").validate_sources()
    assert sources.items is not None and sources.items[0].id == "conv-1"


@pytest.mark.parametrize(
    ("workload", "needle"),
    [
        ({"source": "spec_bench"}, "needs a path"),
        ({"path": "x.jsonl"}, "path and categories"),
        ({"source": "jsonl", "path": "x", "input_length": {"tokens": 5}}, "input_length"),
        ({"source": "synthetic"}, "needs a tokenizer"),
        ({"source": "jsonl", "path": "x", "prompts": ["a"]}, "prompts and prompts_file"),
        ({"source": "csv"}, "source"),
    ],
)
def test_workload_plan_validation(workload: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlanError, match=needle):
        BenchmarkPlan.from_mapping(
            {
                "model": "m",
                "routes": [
                    {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
                    {"label": "m", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
                ],
                "workload": workload,
            }
        )


async def test_each_turn_carries_this_routes_own_earlier_answers() -> None:
    sent: list[tuple[dict[str, Any], ...]] = []

    def request_for(messages: tuple[dict[str, Any], ...]) -> ChatRequest:
        return ChatRequest(messages=messages, max_tokens=8)

    async def send(req: ChatRequest) -> StreamMeasurement:
        sent.append(req.messages)
        return StreamMeasurement(text=f"answer {len(sent)}")

    item = WorkloadItem(id="c", turns=("first?", "second?", "third?"))
    out = await converse(item, request_for, send)
    assert [m.text for m in out] == ["answer 1", "answer 2", "answer 3"]
    assert sent[2] == (
        {"role": "user", "content": "first?"},
        {"role": "assistant", "content": "answer 1"},
        {"role": "user", "content": "second?"},
        {"role": "assistant", "content": "answer 2"},
        {"role": "user", "content": "third?"},
    )


async def test_an_errored_turn_ends_the_conversation_and_resume_reuses_answers() -> None:
    from deepseekbench import ErrorKind, StreamError

    calls: list[tuple[dict[str, Any], ...]] = []

    async def failing(req: ChatRequest) -> StreamMeasurement:
        calls.append(req.messages)
        return StreamMeasurement(error=StreamError(kind=ErrorKind.timeout, message="t"))

    item = WorkloadItem(id="c", turns=("a", "b"))
    out = await converse(item, lambda m: ChatRequest(messages=m), failing)
    assert len(out) == 1 and len(calls) == 1
    calls.clear()
    done = [StreamMeasurement(text="earlier")]
    out = await converse(item, lambda m: ChatRequest(messages=m), failing, done=done)
    assert len(out) == 1 and calls[0][1] == {"role": "assistant", "content": "earlier"}


def test_every_workload_example_in_docs_plan_md_is_a_valid_plan() -> None:
    import re
    import tomllib

    text = (Path(__file__).resolve().parents[2] / "docs" / "plan.md").read_text()
    section = text[text.index("## `[workload]`") : text.index("## `[parity]`")]
    blocks = re.findall(r"```toml\n(.*?)```", section, re.DOTALL)
    blocks = [re.sub(r"^  ", "", b, flags=re.MULTILINE) for b in blocks]
    sources = set()
    for block in blocks:
        workload = tomllib.loads(block)["workload"]
        if workload.get("path") not in (None, "sample"):
            continue  # a user's own file: the format is what is shown
        p = plan([{}], **workload)
        sources.add(p.workload.source)
        if "trace" in workload:
            continue  # a user's own trace file, read (and bounded) by validate_sources
        p.validate_sources()
    assert sources == {"default", "sharegpt", "spec_bench", "synthetic", "speed_bench"}
    # the six sources, the output-length example, shared prefixes and a trace
    assert len(blocks) == 9


def test_no_route_is_forced_past_eos_when_one_route_cannot_be() -> None:
    p = plan([{}])
    assert p.reach_max_tokens  # auto dialects take ignore_eos / min_tokens
    routes = [r.model_dump() for r in p.routes]
    routes[1]["dialect"] = "openai"
    mixed = BenchmarkPlan.model_validate({**p.model_dump(), "routes": routes})
    assert not mixed.reach_max_tokens
    off = BenchmarkPlan.model_validate({**p.model_dump(), "workload": {"output_length": "natural"}})
    assert not off.reach_max_tokens
