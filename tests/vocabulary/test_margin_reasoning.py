"""A thinking output compared as reasoning text then content: the fork is placed on the
follow-up's reasoning tokens or its content tokens, whichever the text leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from deepseekbench._types._margin import DivergenceKind, align_divergence, parse_chat_logprobs

CASE = (
    Path(__file__).resolve().parents[2].parent
    / "shared/cases/logprobs/01-sglang-logprobs-cover-reasoning-tokens.json"
)


def _entry(token: str, alts: list[tuple[str, float]]) -> dict[str, Any]:
    top = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in alts]
    return {
        "token": token,
        "logprob": alts[0][1],
        "bytes": list(token.encode()),
        "top_logprobs": top,
    }


def _body() -> dict[str, Any]:
    """SGLang's shape: ``<think>``, reasoning tokens, ``</think>``, content tokens."""
    content = [
        _entry("<think>", [("<think>", -0.001), ("A", -7.0)]),
        _entry("I think", [("I think", -0.01), ("So", -6.0)]),
        _entry(" six", [(" six", -0.68), (" 6", -0.71)]),  # a near-tie in the reasoning
        _entry(" sevens", [(" sevens", -0.01), (" eights", -5.0)]),
        _entry("</think>", [("</think>", -0.001), (".", -8.0)]),
        _entry("\n", [("\n", -0.01), (" ", -5.0)]),
        _entry("Yes", [("Yes", -0.2), ("No", -3.0)]),  # a decisive place in the content
        _entry(".", [(".", -0.01), ("!", -6.0)]),
    ]
    message = {"role": "assistant", "content": "Yes.", "reasoning_content": "I think six sevens"}
    return {"choices": [{"index": 0, "message": message, "logprobs": {"content": content}}]}


def _align(text: str) -> Any:
    chat = parse_chat_logprobs(_body())
    assert chat is not None and not chat.problem, chat and chat.problem
    return align_divergence(chat, text, prompt_id="p", candidate="mtp", tau_nats=0.05)


def test_a_fork_inside_the_reasoning_is_placed_on_the_reasoning_token() -> None:
    m = _align("I think 6 sevensYes.")  # reasoning "I think 6 sevens", content "Yes."
    assert m.token_index == 2 and m.candidate_rank == 2 and m.kind is DivergenceKind.near_tie
    assert m.margin_nats is not None and abs(m.margin_nats - 0.03) < 1e-9


def test_a_fork_in_the_content_after_equal_reasoning_is_placed_in_the_content() -> None:
    m = _align("I think six sevensNo.")
    assert m.token_index == 6 and m.candidate_rank == 2 and m.kind is DivergenceKind.decisive


def test_content_alone_still_aligns_on_the_content() -> None:
    m = _align("Yes!")
    assert m.token_index == 7 and m.candidate_token == "!"


def test_a_text_leaving_both_readings_at_its_first_byte_is_unexplained() -> None:
    m = _align("No.")
    assert m.kind is DivergenceKind.unexplained and "at once" in m.note


def test_a_reasoning_fork_without_reasoning_tokens_is_unexplained() -> None:
    body = _body()
    body["choices"][0]["logprobs"]["content"] = body["choices"][0]["logprobs"]["content"][6:]
    chat = parse_chat_logprobs(body)
    assert chat is not None and not chat.problem
    m = align_divergence(
        chat, "I think 6 sevensYes.", prompt_id="p", candidate="mtp", tau_nats=0.05
    )
    assert m.kind is DivergenceKind.unexplained and "reasoning" in m.note


@pytest.mark.shared_cases
def test_the_shared_case_compared_as_reasoning_then_content_gives_its_answer() -> None:
    case = orjson.loads(CASE.read_bytes())
    chat = parse_chat_logprobs(case["follow_up"]["body"])
    assert chat is not None and not chat.problem
    reasoning = case["follow_up"]["body"]["choices"][0]["message"]["reasoning_content"]
    m = align_divergence(
        chat, reasoning + case["candidate_text"], prompt_id="p", candidate="mtp", tau_nats=0.05
    )
    want = case["expect"]
    assert m.kind.value == want["kind"] and m.candidate_rank == want["candidate_rank"]
    assert m.off_token == want["off_token"] and m.candidate_token == want["candidate_token"]
