"""Margins that never guess: the kinds of logprob wire a follow-up may get.

One class per test group (the shared cases in ../shared/cases/logprobs/ are samples of
these): tokens that must spell the answer's own text (content, or reasoning then
content), U+FFFD tokens standing for partial UTF-8, a ``null`` alternative, a
truncated (post-sampling) distribution, and logprobs that cannot be. Properties
(Hypothesis) generate answers of each kind and check that a margin is either the true
fork's or ``unexplained``, never another.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import DivergenceKind
from deepseekbench._types._margin import (
    DivergenceMargin,
    align_divergence,
    parse_chat_logprobs,
)

TAU = 0.05
FFFD = "\ufffd"


def entry(piece: bytes, alts: list[tuple[bytes, float | None]]) -> dict[str, Any]:
    """One ``logprobs.content[]`` entry whose token is ``piece`` (sent as a string and
    its bytes, as vLLM does: a partial character decoded to U+FFFD)."""
    shown = piece.decode("utf-8", errors="replace")
    tops = []
    for a, lp in alts:
        alt = a.decode("utf-8", errors="replace")
        tops.append({"token": alt, "logprob": lp, "bytes": list(alt.encode())})
    lp = alts[0][1]
    return {"token": shown, "logprob": lp, "bytes": list(shown.encode()), "top_logprobs": tops}


def answer(entries: list[dict[str, Any]], content: str | None, **message: str) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content, **message}
    return {"choices": [{"index": 0, "message": msg, "logprobs": {"content": entries}}]}


def simple(tokens: list[str], fork: int, margin: float = 0.02) -> list[dict[str, Any]]:
    """ASCII tokens; at ``fork`` the runner-up ``"Z"`` trails by ``margin`` nats."""
    out = []
    for i, t in enumerate(tokens):
        second = (b"Z", -0.7 - margin) if i == fork else (b"#", -6.0)
        out.append(entry(t.encode(), [(t.encode(), -0.7), second, (b"%", -8.0)]))
    return out


def explain(body: dict[str, Any], text: str) -> DivergenceMargin:
    pos = parse_chat_logprobs(body)
    assert pos is not None
    return align_divergence(pos, text, prompt_id="p", candidate="mtp", tau_nats=TAU)


# -- spell-check: the tokens must spell the follow-up's own text ---------------------


def test_tokens_that_do_not_spell_the_content_are_unexplained() -> None:
    body = answer(simple(["The", " answer", " is", " 42"], 3), "The answer is 42.")
    m = explain(body, "The answer is 4Z")
    assert m.kind is DivergenceKind.unexplained and m.margin_nats is None
    assert "do not spell" in m.note


def test_no_message_content_is_unexplained() -> None:
    body = answer(simple(["a", "b"], 1), None)
    assert "no message.content" in explain(body, "aZ").note


def test_reasoning_then_content_locates_the_content_start() -> None:
    think = [entry(b"<think>", [(b"<think>", -0.01), (b"I", -5.0)])]
    reasoning = simple(["I", " think", "\n", "."], 99)  # a newline token is no marker
    close = [entry(b"</think>", [(b"</think>", -0.01), (b"\n", -5.0)])]
    gap = [entry(b"\n\n", [(b"\n\n", -0.01), (b"\n", -5.0)])]
    content = simple(["Yes", " it", " is"], 1)
    body = answer(
        think + reasoning + close + gap + content, "Yes it is", reasoning_content="I think\n."
    )
    pos = parse_chat_logprobs(body)
    assert pos is not None and pos.content_start == 7 and not pos.problem
    m = explain(body, "YesZ is")
    assert (m.kind, m.token_index, m.candidate_rank) == (DivergenceKind.near_tie, 8, 2)
    assert m.margin_nats == pytest.approx(0.02)
    # the same tokens with reasoning that does not match them: never a guess
    wrong = answer(think + reasoning + close + gap + content, "Yes it is", reasoning="Hmm.")
    assert "do not spell" in explain(wrong, "YesZ is").note


def test_trailing_end_tokens_are_not_content() -> None:
    eos = entry(b"<|end_of_sentence|>", [(b"<|end_of_sentence|>", -0.01), (b"!", -0.03)])
    body = answer([*simple(["Hi", "."], 99), eos], "Hi.")
    m = explain(body, "Hi.!")
    assert (m.token_index, m.kind, m.candidate_rank) == (2, DivergenceKind.near_tie, 2)


# -- U+FFFD tokens for partial UTF-8 ------------------------------------------------

PIECES = st.lists(
    st.one_of(
        st.sampled_from(["a", "b", " ", "x", "yz", "."]),
        st.sampled_from(["é", "😊", "中文", "ß", "🎉🎉"]),
    ),
    min_size=2,
    max_size=12,
)


@st.composite
def fffd_answers(draw: st.DrawFn) -> tuple[dict[str, Any], str, int]:
    """An answer whose text mixes ASCII and non-ASCII characters, cut into byte tokens
    at arbitrary points (partial characters shown as U+FFFD, as vLLM sends them), and a
    candidate that forks at one token, to ``"Z"`` (its runner-up, 0.02 nats)."""
    text = "".join(draw(PIECES)).encode()
    cuts = sorted(draw(st.sets(st.integers(1, len(text) - 1), max_size=len(text) - 1)))
    edges = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(edges)]
    starts = [i for i, a in enumerate(edges[:-1]) if not 0x80 <= text[a] < 0xC0]
    fork = draw(st.sampled_from(starts))  # a token starting on a character boundary
    entries = []
    for i, piece in enumerate(pieces):
        second = (b"Z", -0.72) if i == fork else (b"#", -6.0)
        entries.append(entry(piece, [(piece, -0.7), second]))
    body = answer(entries, text.decode())
    candidate = (text[: edges[fork]] + b"Z").decode("utf-8", errors="strict")
    return body, candidate, fork


@given(fffd_answers())
def test_fffd_tokens_never_make_a_false_fork(case: tuple[dict[str, Any], str, int]) -> None:
    body, candidate, fork = case
    m = explain(body, candidate)
    if m.kind is DivergenceKind.unexplained:
        assert m.margin_nats is None and m.note
    else:
        assert (m.token_index, m.candidate_rank, m.kind) == (fork, 2, DivergenceKind.near_tie)
        assert m.margin_nats == pytest.approx(0.02)


def test_the_emoji_case_resyncs_to_the_real_fork() -> None:
    emoji = "😊".encode()
    pieces = [b"Sure", b" ", emoji[:2], emoji[2:], b" here", b" it"]
    entries = [entry(p, [(p, -0.1), (b"#", -6.0)]) for p in pieces[:-1]]
    entries.append(entry(b" it", [(b" it", -0.4), (b" you", -0.43)]))
    m = explain(answer(entries, "Sure 😊 here it"), "Sure 😊 here you")
    assert (m.token_index, m.kind, m.candidate_token) == (5, DivergenceKind.near_tie, " you")


def test_a_fork_inside_a_split_character_is_unexplained() -> None:
    emoji = "😊".encode()
    entries = [entry(p, [(p, -0.1), (b"#", -6.0)]) for p in (b"a", emoji[:2], emoji[2:])]
    m = explain(answer(entries, "a😊"), "a😂")
    assert m.kind is DivergenceKind.unexplained and "U+FFFD" in m.note


# -- a null alternative drops that alternative, not the answer -----------------------


@given(st.lists(st.booleans(), min_size=4, max_size=4), st.integers(0, 3))
def test_null_alternatives_drop_only_themselves(nulls: list[bool], fork: int) -> None:
    tokens = ["Option", " A", " is", " fine"]
    plain = simple(tokens, fork)
    with_nulls = simple(tokens, fork)
    for e, add in zip(with_nulls, nulls, strict=True):
        if add:
            e["top_logprobs"].append({"token": "</s>", "logprob": None, "bytes": list(b"</s>")})
    cand = "".join(tokens[:fork]) + "Z"
    want, got = (
        explain(answer(plain, "Option A is fine"), cand),
        explain(answer(with_nulls, "Option A is fine"), cand),
    )
    assert got == want and got.kind is DivergenceKind.near_tie


def test_a_null_before_a_number_or_for_the_emitted_token_is_unexplained() -> None:
    e = simple(["a", "b"], 1)
    e[0]["top_logprobs"].insert(1, {"token": "q", "logprob": None})
    assert "out of order" in explain(answer(e, "ab"), "aZ").note
    e = simple(["a", "b"], 1)
    e[1]["logprob"] = None
    assert "logprob is null" in explain(answer(e, "ab"), "aZ").note


# -- a truncated (post-sampling) distribution gives no margin ------------------------


@pytest.mark.parametrize("floor", [-3.4028234663852886e38, -9999.0, -1e4])
def test_truncated_distribution_gives_no_margin(floor: float) -> None:
    tokens = ["Hello", "!", " How", " can"]
    entries = [
        entry(t.encode(), [(t.encode(), 0.0), (b"#", floor), (b"!", floor), (b"$", floor)])
        for t in tokens
    ]
    m = explain(answer(entries, "Hello! How can"), "Hello! How may")
    assert m.kind is DivergenceKind.unexplained and m.margin_nats is None
    assert "truncated" in m.note


def test_a_confident_real_distribution_keeps_its_margin() -> None:
    entries = [entry(b"a", [(b"a", 0.0), (b"Z", -20.0), (b"#", -3.4e38)])]
    m = explain(answer(entries, "a"), "Z")
    assert m.kind is DivergenceKind.decisive and m.margin_nats == pytest.approx(20.0)


# -- logprobs that cannot be make the answer unexplained, named ----------------------

BAD = st.one_of(
    st.floats(min_value=1e-3, max_value=1e308),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


@given(BAD, st.integers(0, 3), st.integers(-1, 2), st.integers(0, 3))
def test_impossible_logprobs_never_give_a_margin(
    bad: float, where: int, slot: int, fork: int
) -> None:
    tokens = ["w", "x", "y", "z"]
    entries = simple(tokens, fork)
    if slot < 0:
        entries[where]["logprob"] = bad
    else:
        entries[where]["top_logprobs"][slot]["logprob"] = bad
    m = explain(answer(entries, "wxyz"), "".join(tokens[:fork]) + "Z")
    assert m.kind is DivergenceKind.unexplained and m.margin_nats is None
    assert "impossible" in m.note and f"position {where}" in m.note


@given(st.integers(0, 3), st.integers(0, 3))
def test_top_k_out_of_order_as_sent_is_unexplained(where: int, fork: int) -> None:
    entries = simple(["w", "x", "y", "z"], fork)
    entries[where]["top_logprobs"].reverse()
    m = explain(answer(entries, "wxyz"), "".join(["w", "x", "y", "z"][:fork]) + "Z")
    assert m.kind is DivergenceKind.unexplained and "out of order" in m.note
