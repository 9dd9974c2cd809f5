"""Workload sources: loaders (with malformed files), length distributions, synthetic
prompts sized by a tokenizer, and the context-bucket checks."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from deepseekbench import (
    ContextBucket,
    InputLength,
    PlanError,
    WorkloadFormatError,
    WorkloadItem,
    WorkloadLengthError,
    check_bucket,
    load_jsonl,
    load_sharegpt,
    load_spec_bench,
    synthetic_items,
)
from deepseekbench._plan._workload import check_bucket_bytes, generated_text, sample_path
from tests._fakes import CharCounter

pytestmark = pytest.mark.anyio

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BROKEN = settings(PROPERTY, phases=[Phase.explicit, Phase.generate], database=None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- shipped samples -----------------------------------------------------------


def test_spec_bench_sample_has_categories_and_two_turn_items() -> None:
    items = load_spec_bench(sample_path("spec_bench"))
    cats = {i.category for i in items}
    assert cats == {"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"}
    two = [i for i in items if len(i.turns) == 2]
    assert two and all(i.category == "mt_bench" for i in two)
    assert items[0].id == "spec_bench-1" and items[0].source.endswith("sample_spec_bench.jsonl:1")


def test_sharegpt_sample_keeps_human_turns_only() -> None:
    items = load_sharegpt(sample_path("sharegpt"))
    assert [i.id for i in items] == ["conv-1", "conv-2", "conv-3"]
    assert items[0].turns == (
        "Complete the Python function square(x).",
        "Complete the Python function double(n).",
    )
    assert items[1].turns == ("Count from 20 to 28.",)
    assert items[2].category == "arithmetic" and items[0].category is None
    assert items[1].source.endswith(":11 (entry 1)")


def test_generic_jsonl_sample() -> None:
    items = load_jsonl(sample_path("jsonl"))
    assert {i.category for i in items} == {"code", "counting", "arithmetic", "chat"}
    assert items[-1].turns == ("What is 3 × 4?", "Count from 1 to 9.")


# --- malformed files: typed error naming file and line --------------------------


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


GOOD_SB = '{"question_id": 1, "category": "qa", "turns": ["a?"]}\n'


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        (GOOD_SB + "{not json\n", 2, "not JSON"),
        (GOOD_SB + "[1, 2]\n", 2, "JSON object"),
        (GOOD_SB + '{"category": "qa", "turns": ["b"]}\n', 2, "question_id"),
        (GOOD_SB + '{"question_id": true, "category": "qa", "turns": ["b"]}\n', 2, "question_id"),
        (GOOD_SB + '{"question_id": 2, "turns": ["b"]}\n', 2, "'category' is missing"),
        (GOOD_SB + '{"question_id": 2, "category": "qa", "turns": []}\n', 2, "'turns'"),
        (GOOD_SB + '{"question_id": 2, "category": "qa", "turns": [3]}\n', 2, "'turns'"),
        (GOOD_SB + "\n" + GOOD_SB, 3, "repeats line 1"),
        ("\n\n", 0, "no items"),
    ],
)
def test_spec_bench_malformed(tmp_path: Path, text: str, line: int, needle: str) -> None:
    p = write(tmp_path, "question.jsonl", text)
    with pytest.raises(WorkloadFormatError, match=needle) as info:
        load_spec_bench(p)
    assert info.value.line_number == line
    assert info.value.path == str(p)
    assert str(p) in str(info.value)
    if line:
        assert f"{p}:{line}" in str(info.value)
    assert isinstance(info.value, PlanError)


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ('{"prompt": "a"}\n{"prompt": ""}\n', 2, "non-empty string"),
        ('{"prompt": "a", "turns": ["b"]}\n', 1, "exactly one"),
        ('{"category": "x"}\n', 1, "exactly one"),
        ('{"prompt": "a", "category": 3}\n', 1, "'category'"),
        ('{"prompt": "a", "id": 5}\n', 1, "'id'"),
        ('{"prompt": "a", "id": "x"}\n{"prompt": "b", "id": "x"}\n', 2, "repeats"),
        ('"just a string"\n', 1, "JSON object"),
    ],
)
def test_generic_jsonl_malformed(tmp_path: Path, text: str, line: int, needle: str) -> None:
    p = write(tmp_path, "w.jsonl", text)
    with pytest.raises(WorkloadFormatError, match=needle) as info:
        load_jsonl(p)
    assert info.value.line_number == line and f"{p}:{line}" in str(info.value)


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ('[\n  {"id": "a",\n   "conversations": [}\n]', 3, "not JSON"),
        ("{}", 0, "non-empty JSON list"),
        ("[]", 0, "non-empty JSON list"),
        (
            '[\n {"id": "a", "conversations": [{"from": "human", "value": "q"}]},\n 7\n]',
            3,
            "not an object",
        ),
        ('[\n {"id": "a"}\n]', 2, "'conversations'"),
        (
            '[\n {"id": "q\\"[,", "conversations": [{"from": "human", "value": "x"}]},\n'
            ' {"id": "b"}\n]',
            3,
            "'conversations'",
        ),
        ('[\n {"conversations": [{"from": "human"}]}\n]', 2, "'from' and 'value'"),
        ('[\n {"conversations": [{"from": "robot", "value": "x"}]}\n]', 2, "is not one of"),
        ('[\n {"conversations": [{"from": "gpt", "value": "x"}]}\n]', 2, "no human turn"),
        ('[\n {"id": 1, "conversations": [{"from": "human", "value": "x"}]}\n]', 2, "'id'"),
        (
            '[\n {"id": "a", "conversations": [{"from": "human", "value": "x"}]},\n'
            ' {"id": "a", "conversations": [{"from": "human", "value": "y"}]}\n]',
            3,
            "repeats",
        ),
    ],
)
def test_sharegpt_malformed(tmp_path: Path, text: str, line: int, needle: str) -> None:
    p = write(tmp_path, "sharegpt.json", text)
    with pytest.raises(WorkloadFormatError, match=needle) as info:
        load_sharegpt(p)
    assert info.value.line_number == line
    assert str(p) in str(info.value)


def test_unreadable_file_is_a_workload_error(tmp_path: Path) -> None:
    for loader in (load_sharegpt, load_spec_bench, load_jsonl):
        with pytest.raises(WorkloadFormatError, match="cannot read"):
            loader(tmp_path / "absent")
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(WorkloadFormatError, match="not UTF-8 text"):
        load_jsonl(bad)


# --- length distributions ------------------------------------------------------


def test_fixed_uniform_normal_draws() -> None:
    assert InputLength(tokens=100).draw(3) == [100, 100, 100]
    u = InputLength(distribution="uniform", tokens=1000, range_ratio=0.2, seed=3).draw(500)
    assert min(u) >= 800 and max(u) <= 1200 and len(set(u)) > 100
    assert u == InputLength(distribution="uniform", tokens=1000, range_ratio=0.2, seed=3).draw(500)
    assert u != InputLength(distribution="uniform", tokens=1000, range_ratio=0.2, seed=4).draw(500)
    n = InputLength(distribution="normal", tokens=1000, spread=0.1).draw(2000)
    mean = sum(n) / len(n)
    assert 980 < mean < 1020 and min(n) >= 1
    sd = (sum((x - mean) ** 2 for x in n) / len(n)) ** 0.5
    assert 80 < sd < 120


@given(
    tokens=st.integers(1, 10_000),
    spread=st.floats(0, 1),
    seed=st.integers(0, 2**32),
)
def test_normal_draws_are_at_least_one(tokens: int, spread: float, seed: int) -> None:
    length = InputLength(distribution="normal", tokens=tokens, spread=spread, seed=seed)
    assert all(x >= 1 for x in length.draw(20))


@pytest.mark.parametrize(
    "kw",
    [
        {"tokens": 0},
        {"tokens": 10, "range_ratio": 1.0, "distribution": "uniform"},
        {"tokens": 10, "range_ratio": 0.1},
        {"tokens": 10, "spread": 0.1, "distribution": "uniform"},
        {"tokens": 10, "spread": -0.1, "distribution": "normal"},
        {"tokens": 10, "distribution": "zipf"},
    ],
)
def test_input_length_validation(kw: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        InputLength.model_validate(kw)


# --- synthetic prompts -----------------------------------------------------------


def test_generated_text_is_seeded_and_sized() -> None:
    a = generated_text(7, 500)
    assert a == generated_text(7, 500) and a != generated_text(8, 500)
    assert len(a.split()) == 500
    assert generated_text(7, 0) == ""
    with pytest.raises(ValueError):
        generated_text(7, -1)


async def test_synthetic_prompts_hit_their_targets_with_a_char_tokenizer() -> None:
    counter = CharCounter()
    length = InputLength(distribution="uniform", tokens=2000, range_ratio=0.5, seed=1)
    items = await synthetic_items(counter, length, 6)
    targets = length.draw(6)
    assert len({i.turns[0] for i in items}) == 6
    for item, target in zip(items, targets, strict=True):
        assert item.prompt_tokens == len(item.turns[0])
        # at most one word (≤ 3 syllables + punctuation/space) below the target
        assert target - 16 <= item.prompt_tokens <= target
        assert item.category == "synthetic" and item.source == "synthetic"


async def test_synthetic_32k_prompts_within_the_32k_bucket() -> None:
    items = await synthetic_items(CharCounter(), InputLength(tokens=30_000), 2)
    check_bucket(
        "32k/256/non_think", ContextBucket.k32, [(i.id, i.prompt_tokens or 0) for i in items]
    )


async def test_synthetic_prompts_with_a_real_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import BPE
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.trainers import BpeTrainer

    from deepseekbench import HFTokenizerCounter

    tok = Tokenizer(BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.train_from_iterator(
        [generated_text(s, 300) for s in range(20)],
        BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]),
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    counter = HFTokenizerCounter(tmp_path)
    items = await synthetic_items(counter, InputLength(tokens=500, seed=2), 3)
    counts = await counter.count([i.turns[0] for i in items])
    assert counts == [i.prompt_tokens for i in items]
    assert all(490 <= c <= 500 for c in counts)


async def test_synthetic_rejects_nonpositive_n() -> None:
    with pytest.raises(ValueError):
        await synthetic_items(CharCounter(), InputLength(tokens=5), 0)


# --- buckets -------------------------------------------------------------------------


def test_bucket_ranges_tile_the_token_line() -> None:
    buckets = list(ContextBucket)
    assert buckets[0].min_prompt_tokens == 1
    for lower, upper in itertools.pairwise(buckets):
        assert upper.min_prompt_tokens == lower.max_prompt_tokens + 1
    assert ContextBucket.for_tokens(10) is ContextBucket.k1
    assert ContextBucket.for_tokens(1025) is ContextBucket.k8
    assert ContextBucket.for_tokens(131_072) is ContextBucket.k128
    assert ContextBucket.for_tokens(0) is None
    assert ContextBucket.for_tokens(2**21) is None


def test_check_bucket_names_every_prompt_outside() -> None:
    lengths = [(f"p{i}", 10 + i) for i in range(12)] + [("ok", 40_000)]
    with pytest.raises(WorkloadLengthError) as info:
        check_bucket("128k/256/non_think", ContextBucket.k128, lengths)
    err = info.value
    assert err.cell == "128k/256/non_think"
    assert [pid for pid, _ in err.prompts] == [f"p{i}" for i in range(12)]
    assert "p0 (10 tokens)" in str(err) and "and 2 more" in str(err)
    assert "32769..131072" in str(err)
    check_bucket("1k", ContextBucket.k1, [("a", 1), ("b", 1024)])
    with pytest.raises(WorkloadLengthError, match="b \\(1025 tokens\\)"):
        check_bucket("1k", ContextBucket.k1, [("a", 1), ("b", 1025)])


def test_byte_check_refuses_ten_token_prompts_in_a_128k_cell() -> None:
    items = [WorkloadItem(id="tiny", turns=("What is 3 × 4?",))]
    with pytest.raises(WorkloadLengthError, match="tiny") as info:
        check_bucket_bytes("128k/256/non_think", ContextBucket.k128, items)
    assert info.value.prompts == (("tiny", len("What is 3 × 4?".encode())),)
    check_bucket_bytes("1k", ContextBucket.k1, items)
    big = [WorkloadItem(id="big", turns=("x" * 40_000,))]
    check_bucket_bytes("128k", ContextBucket.k128, big)


# --- any file content: items or a WorkloadFormatError, nothing else ------------------

LOADERS = {"sharegpt": load_sharegpt, "spec_bench": load_spec_bench, "jsonl": load_jsonl}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "question_id",
                    "category",
                    "turns",
                    "prompt",
                    "conversations",
                    "from",
                    "value",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def check_loader_property(loader: Any, cfg: settings = PROPERTY) -> None:
    import json
    import tempfile

    @cfg
    @given(
        lines=st.lists(json_values.map(json.dumps) | st.text(max_size=12), max_size=4),
        as_array=st.booleans(),
    )
    def prop(lines: list[str], as_array: bool) -> None:
        text = ("[" + ",".join(lines) + "]") if as_array else "\n".join(lines)
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "w"
            p.write_text(text, encoding="utf-8")
            try:
                items = loader(p)
            except WorkloadFormatError as exc:
                assert str(p) in str(exc)
                return
            assert items and all(isinstance(i, WorkloadItem) for i in items)

    prop()


def broken_jsonl(path: Path) -> tuple[WorkloadItem, ...]:
    """Reads lines with no checks at all: malformed input escapes as other errors."""
    import json

    return tuple(
        WorkloadItem(id=str(n), turns=(json.loads(line)["prompt"],))
        for n, line in enumerate(Path(path).read_text().splitlines())
    )


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_any_content_gives_items_or_a_workload_format_error(name: str) -> None:
    check_loader_property(LOADERS[name])


def test_loader_property_catches_a_loader_that_lets_other_errors_escape() -> None:
    with pytest.raises(Exception) as info:
        check_loader_property(broken_jsonl, BROKEN)
    assert not isinstance(info.value, WorkloadFormatError)
