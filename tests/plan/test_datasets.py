"""Spec-decoding datasets: SPEED-Bench and MT-bench loaders, per-category and per-tier figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from deepseekbench import (
    Dialect,
    LiveGate,
    WorkloadFormatError,
    category_speedups,
    load_mt_bench,
    load_speed_bench,
    run_plan,
)
from deepseekbench._plan._datasets import ENTROPY_TIERS, dataset_sample_path
from tests._helpers import COSTS, off_and_mtp, plan_of, verdict_judged


def _row(qid: str, category: str, turns: list[str], **extra: Any) -> dict[str, Any]:
    return {"question_id": qid, "category": category, "turns": turns, "source": "x", **extra}


def test_speed_bench_by_category_and_by_tier() -> None:
    qual = load_speed_bench(dataset_sample_path("speed_bench"))
    assert {i.category for i in qual} == {"coding", "math", "writing"}
    assert qual[0].id == "speed_bench-q-coding-1"
    assert [len(i.turns) for i in qual if i.id == "speed_bench-q-math-2"] == [2]
    tiers = load_speed_bench(dataset_sample_path("speed_bench", by="tier"), by="tier")
    assert {i.category for i in tiers} == set(ENTROPY_TIERS)


def test_speed_bench_json_list_and_an_explicit_tier_field(tmp_path: Path) -> None:
    rows = [
        _row("a", "coding", ["Sort 3, 1, 2."], entropy_tier="low_entropy"),
        _row("b", "writing", ["Invent a bird."], entropy_tier="high_entropy"),
    ]
    path = tmp_path / "split.json"
    path.write_bytes(orjson.dumps(rows))
    assert [i.category for i in load_speed_bench(path)] == ["coding", "writing"]
    assert [i.category for i in load_speed_bench(path, by="tier")] == [
        "low_entropy",
        "high_entropy",
    ]


@pytest.mark.parametrize(
    ("row", "match"),
    [
        (_row("a", "coding", ["Placeholder: fetch the prompts"]), "placeholder"),
        ({"category": "coding", "turns": ["x"]}, "question_id"),
        (_row("a", "coding", []), "turns"),
        ({"question_id": "a", "turns": ["x"]}, "category"),
    ],
)
def test_speed_bench_refuses_bad_rows(tmp_path: Path, row: dict[str, Any], match: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(orjson.dumps(row) + b"\n")
    with pytest.raises(WorkloadFormatError, match=match):
        load_speed_bench(path)


def test_speed_bench_by_tier_refuses_a_row_without_one(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_bytes(orjson.dumps(_row("a", "coding", ["x"])) + b"\n")
    with pytest.raises(WorkloadFormatError, match=r"q.jsonl:1: no entropy tier"):
        load_speed_bench(path, by="tier")


def test_mt_bench_question_file() -> None:
    items = load_mt_bench(dataset_sample_path("mt_bench"))
    assert items[0].id == "mt_bench-81" and all(len(i.turns) == 2 for i in items)
    assert {i.category for i in items} == {"writing", "math", "coding"}


def _run(workload: dict[str, Any], n: int) -> dict[str, Any]:
    async def main() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = plan_of(
                [
                    ("off", "off", off.base_url, Dialect.vllm),
                    ("mtp", "mtp", mtp.base_url, Dialect.vllm),
                ],
                {
                    "requests_per_cell": n,
                    "repeats": 1,
                    "warmup_per_cell": 0,
                    "arrival": {"mode": "concurrency", "concurrency": 4},
                    "parity": {"tasks": "none", "prompts": ["Count from 5 to 12."]},
                    "workload": workload,
                },
                {},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=None)

    return {r.route_label: r for r in anyio.run(main).rows}


def test_per_tier_acceptance_and_speedup_on_the_embedded_engine() -> None:
    rows = _run({"source": "speed_bench", "path": "sample", "speed_bench_by": "tier"}, n=12)
    mtp = rows["mtp"]
    assert {c.name for c in mtp.categories} == set(ENTROPY_TIERS)
    for c in mtp.categories:
        assert c.n_requests == 4 and c.accepted_token_ratio is not None
    verdicts = category_speedups(rows["off"], mtp, min_requests=1)
    assert set(verdicts) == set(ENTROPY_TIERS)
    # every tier's speed is judged: credited, or (a busy machine) a clock refusal
    assert all(verdict_judged(v) for v in verdicts.values()), verdicts


def test_mt_bench_per_category_on_the_embedded_engine() -> None:
    rows = _run({"source": "mt_bench", "path": "sample"}, n=6)
    cats = {c.name: c for c in rows["mtp"].categories}
    assert set(cats) == {"writing", "math", "coding"}
    assert all(c.n_requests == 4 and c.accepted_token_ratio is not None for c in cats.values())
    assert {t.name for t in rows["mtp"].turns} == {"turn 1", "turn 2"}
