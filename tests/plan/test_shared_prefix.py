"""Shared-prefix and growing multi-turn workloads."""

from __future__ import annotations

from typing import Any

import anyio
import pydantic
import pytest

from deepseekbench import Dialect, LiveGate, SharedPrefix, WorkloadPlan, run_plan
from deepseekbench._plan._prefix import SHARED_PREFIX_CATEGORY, shared_prefix_items
from tests._fakes import CharCounter
from tests._helpers import COSTS, off_and_mtp, plan_of

WORD = 16  # at most one generated word (≤ 3 syllables + punctuation/space), in characters


def _common(texts: list[str]) -> str:
    """The longest common leading text of ``texts`` (character by character)."""
    first = texts[0]
    n = 0
    while n < len(first) and all(len(t) > n and t[n] == first[n] for t in texts):
        n += 1
    return first[:n]


def test_groups_share_their_prefix_and_lengths_are_token_true() -> None:
    spec = SharedPrefix(groups=3, prefix_tokens=200, suffixes=4, suffix_tokens=50, seed=5)
    items = anyio.run(shared_prefix_items, CharCounter(), spec)
    assert len(items) == spec.n_items == 12
    assert [i.id for i in items[:4]] == [
        "prefix-g0-s0",
        "prefix-g1-s0",
        "prefix-g2-s0",
        "prefix-g0-s1",
    ]
    assert len({i.turns[0] for i in items}) == 12
    for item in items:
        assert item.category == SHARED_PREFIX_CATEGORY and len(item.turns) == 1
        assert item.prompt_tokens == len(item.turns[0])
        assert 250 - WORD <= len(item.turns[0]) <= 250
    for g in range(3):
        group = [i.turns[0] for i in items if i.id.startswith(f"prefix-g{g}-")]
        shared = _common(group)
        assert 200 - WORD <= len(shared.rstrip()) <= 200 + 2, shared
    firsts = [i.turns[0] for i in items if i.id.endswith("-s0")]
    assert len(_common(firsts)) < 50  # groups do not share their prefixes
    # the same seed gives the same prompts
    assert anyio.run(shared_prefix_items, CharCounter(), spec) == items


def test_multi_turn_items_carry_suffix_sized_later_turns() -> None:
    spec = SharedPrefix(groups=1, prefix_tokens=100, suffixes=2, suffix_tokens=40, turns=3)
    items = anyio.run(shared_prefix_items, CharCounter(), spec)
    for item in items:
        assert len(item.turns) == 3
        assert all(40 - WORD <= len(t) <= 40 for t in item.turns[1:])
    assert items[0].turns[1:] != items[1].turns[1:]


@pytest.mark.parametrize(
    "over",
    [
        {"source": "default"},
        {"source": "synthetic", "tokenizer": "endpoint", "n_prompts": 4},
        {"source": "synthetic", "tokenizer": "endpoint", "input_length": {"tokens": 10}},
    ],
)
def test_shared_prefix_is_refused_with_keys_it_replaces(over: dict[str, Any]) -> None:
    spec = {"groups": 1, "prefix_tokens": 10, "suffixes": 1, "suffix_tokens": 5}
    with pytest.raises(pydantic.ValidationError, match="shared_prefix"):
        WorkloadPlan.model_validate({**over, "shared_prefix": spec})


def _hit_rates(workload: dict[str, Any]) -> dict[str, Any]:
    async def main() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = plan_of(
                [
                    ("off", "off", off.base_url, Dialect.vllm),
                    ("mtp", "mtp", mtp.base_url, Dialect.vllm),
                ],
                {
                    "requests_per_cell": 8,
                    "repeats": 1,  # one round: a later round would resend (and hit) every prompt
                    "warmup_per_cell": 0,
                    "arrival": {"mode": "concurrency", "concurrency": 2},
                    "parity": {"tasks": "none", "prompts": ["Count from 5 to 12."]},
                    "workload": {
                        "source": "synthetic",
                        "tokenizer": "endpoint",
                        # no calibration pass: it would warm off's cache alone (docs/plan.md)
                        "output_length": "natural",
                        **workload,
                    },
                },
                {},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=None)

    result = anyio.run(main)
    return {r.route_label: r for r in result.rows}


def test_a_shared_prefix_plan_shows_the_prefix_cache_hit_rate_per_row() -> None:
    spec = {"groups": 2, "prefix_tokens": 700, "suffixes": 4, "suffix_tokens": 60}
    rows = _hit_rates({"shared_prefix": spec})
    for label in ("off", "mtp"):
        rate = rows[label].prefix_cache_hit_rate
        assert rate is not None and rate > 0.5, (label, rate)
    # the same lengths without a shared prefix: only the chat template's head is shared
    plain = _hit_rates({"input_length": {"tokens": 760}, "n_prompts": 8})
    for label in ("off", "mtp"):
        rate = plain[label].prefix_cache_hit_rate
        assert rate is not None and rate < 0.2, (label, rate)
