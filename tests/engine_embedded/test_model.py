"""The generated corpus, tokenizer, reference tasks and trained model."""

from __future__ import annotations

from collections import Counter

import pytest

from deepseekbench import all_reference_tasks, reference_tasks
from deepseekbench._engine._model import CATEGORIES, corpus, greedy_answer, reference_lm
from deepseekbench._engine._tokenizer import EOS, TOKENIZER, UNK


def test_tokenizer_round_trips_every_corpus_line() -> None:
    for line in corpus():
        text = f"{line.question}\n{line.answer}"
        ids = TOKENIZER.encode(text)
        assert UNK not in ids and EOS not in ids
        assert TOKENIZER.decode(ids) == text
        assert len(ids) == TOKENIZER.count(text)


def test_tokenizer_maps_unknown_characters_to_unk() -> None:
    assert TOKENIZER.encode("é") == [UNK]
    assert TOKENIZER.decode([EOS, *TOKENIZER.encode("ab"), UNK]) == "ab?"
    assert TOKENIZER.vocab_size == 2 + 1 + 95 + 3


def test_corpus_questions_are_unique_and_cover_every_category() -> None:
    lines = corpus()
    assert len({ln.question for ln in lines}) == len(lines)
    counts = Counter(ln.category for ln in lines)
    assert set(counts) == set(CATEGORIES)
    assert min(counts.values()) >= 60
    assert any("×" in ln.answer for ln in lines) and any("→" in ln.answer for ln in lines)


def test_greedy_decoding_answers_every_generated_task() -> None:
    wrong = [t for t in all_reference_tasks() if greedy_answer(t.prompt) != t.answer]
    assert wrong == []


def test_target_distributions_are_normalised() -> None:
    lm = reference_lm()
    for ctx in ("\x00What is 12 + 3", "\x00Count from 4 to 9.\n4 5", "zzz", ""):
        assert sum(lm.target(ctx).values()) == pytest.approx(1.0)
        for order in (1, 3, 6):
            assert sum(lm.draft(order, ctx).values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="draft order"):
        lm.draft(0, "abc")


def test_reference_tasks_are_deterministic_distinct_and_balanced() -> None:
    a = reference_tasks(40, seed=3)
    assert a == reference_tasks(40, seed=3)
    assert a != reference_tasks(40, seed=4)
    assert len({t.prompt for t in a}) == 40
    assert Counter(t.category for t in a) == dict.fromkeys(CATEGORIES, 10)
    assert reference_tasks(0) == []
    with pytest.raises(ValueError, match="n must be"):
        reference_tasks(len(all_reference_tasks()) + 1)
    with pytest.raises(ValueError, match="n must be"):
        reference_tasks(-1)
