"""A sampled output that off re-tokenized into fewer tokens (a non-canonical tokenization:
the route sampled pieces the tokenizer would merge) is left out of the witness, since its
scored positions are not the sampled ones; a stopped output's end token is no gap."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from deepseekbench._analysis._witness_rows import _retokenized


def _state(completion_tokens: int | None) -> Any:
    m = SimpleNamespace(completion_tokens=completion_tokens)
    return SimpleNamespace(measurements={("mtp", "cell", "c=1", 3, 0): m})


KEY = ("mtp", "traffic", "", "cell", "c=1", "request-3")


CASES = [(40, False), (41, False), (42, True), (60, True)]


@pytest.mark.parametrize(("sampled", "left_out"), CASES)
def test_more_sampled_tokens_than_scored_ones_leave_the_output_out(
    sampled: int, left_out: bool
) -> None:
    why = _retokenized(_state(sampled), KEY, 40)
    assert bool(why) is left_out
    if left_out:
        assert "non-canonical tokenization" in why


def test_nothing_to_compare_keeps_the_output() -> None:
    assert _retokenized(_state(None), KEY, 40) == ""
    assert _retokenized(_state(90), ("mtp", "parity", "", None, None, "p1"), 40) == ""
