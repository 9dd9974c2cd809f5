"""llama.cpp's chat logprobs read into margins.

llama-server's ``/v1/chat/completions`` answers ``logprobs: true, top_logprobs: k`` with
OpenAI's ``choices[0].logprobs.content[]``, plus ``id`` and ``bytes`` on every entry and
alternative; ``token`` is cut at the last complete UTF-8 character (a token holding
part of one is ``""``), a probability of 0 is written as the lowest float, and a token
a speculative route accepted from a draft has ``logprob`` 0 and no alternatives
(tools/server ``completion_token_output``). The bodies below have that shape (the
first was captured from llama-server 11434 serving tests/engine's generated model).
"""

from __future__ import annotations

from typing import Any

import pytest

from deepseekbench import DivergenceKind
from deepseekbench._types._margin import align_divergence, parse_chat_logprobs

TAU = 0.05
LOWEST = -3.4028234663852886e38  # float's lowest, llama.cpp's log(0)


def entry(token: str, logprob: float, top: dict[str, float]) -> dict[str, Any]:
    """One llama.cpp content entry; ``top`` maps alternatives (token strings) to logprobs."""
    piece = token.encode()
    alts = [
        {"id": 100 + i, "token": t, "bytes": list(t.encode()), "logprob": lp}
        for i, (t, lp) in enumerate(top.items())
    ]
    return {
        "id": 7,
        "token": token,
        "bytes": list(piece),
        "logprob": logprob,
        "top_logprobs": alts,
    }


def body(*entries: dict[str, Any]) -> dict[str, Any]:
    """A chat answer whose ``message.content`` is what its tokens' bytes spell."""
    raw = [e["bytes"] if isinstance(e["bytes"], list) else [] for e in entries]
    ok = [b for b in raw if all(isinstance(x, int) and 0 <= x < 256 for x in b)]
    text = b"".join(bytes(b) for b in ok)  # malformed bytes spell nothing
    return {
        "choices": [
            {
                "finish_reason": "length",
                "index": 0,
                "message": {"role": "assistant", "content": text.decode(errors="replace")},
                "logprobs": {"content": list(entries)},
            }
        ]
    }


def partial(piece: bytes, logprob: float) -> dict[str, Any]:
    """A byte token holding part of a character: llama.cpp sends ``token: ""``."""
    return {
        "id": 3,
        "token": "",
        "bytes": list(piece),
        "logprob": logprob,
        "top_logprobs": [
            {"id": 3, "token": "", "bytes": list(piece), "logprob": logprob},
            {"id": 9, "token": "x", "bytes": [120], "logprob": -6.0},
        ],
    }


def test_captured_llamacpp_body_gives_the_margin_at_the_divergence() -> None:
    # off said " moon world black", the mis-tuned draft " moon world whit..."
    b = body(
        entry(" moon", -1.29, {" moon": -1.29, " we": -1.72, "h": -2.12}),
        entry(" world", -0.51, {" world": -0.51, " milk": -2.64, " bird": -3.06}),
        entry(" black", -1.52, {" black": -1.52, " whit": -2.21, "y": -2.67}),
    )
    pos = parse_chat_logprobs(b)
    assert pos is not None and pos[2].token_bytes == b" black"
    m = align_divergence(pos, " moon world whit blac", prompt_id="p", candidate="mis", tau_nats=TAU)
    assert (m.token_index, m.off_token, m.candidate_token) == (2, " black", " whit")
    assert m.margin_nats == pytest.approx(0.69)
    assert (m.candidate_rank, m.kind) == (2, DivergenceKind.decisive)


def test_a_character_split_over_byte_tokens_is_not_a_divergence() -> None:
    # "é" (C3 A9) arrives as two byte tokens whose strings llama.cpp truncates to ""
    b = body(
        entry("caf", -0.1, {"caf": -0.1, "cab": -3.0}),
        partial(b"\xc3", -0.2),
        partial(b"\xa9", -0.01),
        entry(" noir", -0.40, {" noir": -0.40, " blanc": -0.42}),
    )
    pos = parse_chat_logprobs(b)
    assert pos is not None
    m = align_divergence(pos, "café blanc", prompt_id="p", candidate="mtp", tau_nats=TAU)
    assert m.token_index == 3 and m.candidate_token == " blanc"
    assert m.margin_nats == pytest.approx(0.02)
    assert m.kind is DivergenceKind.near_tie


def test_a_divergence_inside_a_character_shows_its_bytes() -> None:
    b = body(
        entry("caf", -0.1, {"caf": -0.1, "cab": -3.0}),
        partial(b"\xc3", -0.2),
        partial(b"\xa9", -0.01),
    )
    pos = parse_chat_logprobs(b)
    assert pos is not None
    m = align_divergence(pos, "cafè", prompt_id="p", candidate="mtp", tau_nats=TAU)
    assert m.token_index == 2 and m.off_token == "\\xa9"
    assert m.kind is DivergenceKind.decisive and m.candidate_rank is None


def test_log_of_zero_as_the_runner_up_gives_no_margin() -> None:
    # top-1 0.0 and the rest at the lowest float: a truncated (post-sampling) answer
    b = body(entry("a", 0.0, {"a": 0.0, "b": LOWEST}))
    pos = parse_chat_logprobs(b)
    assert pos is not None and "truncated" in pos.problem
    m = align_divergence(pos, "b", prompt_id="p", candidate="mtp", tau_nats=TAU)
    assert m.margin_nats is None and m.kind is DivergenceKind.unexplained
    assert "truncated" in m.note


def test_log_of_zero_below_a_real_runner_up_keeps_the_margin() -> None:
    b = body(entry("a", -0.01, {"a": -0.01, "b": -4.61, "c": LOWEST}))
    pos = parse_chat_logprobs(b)
    assert pos is not None and not pos.problem
    m = align_divergence(pos, "b", prompt_id="p", candidate="mtp", tau_nats=TAU)
    assert m.margin_nats == pytest.approx(4.6) and m.kind is DivergenceKind.decisive


def test_a_draft_accepted_token_has_no_alternatives_and_no_margin() -> None:
    # what llama.cpp returns for a speculative route's accepted draft tokens: never a margin
    b = body({"id": 5, "token": "a", "bytes": [97], "logprob": 0.0, "top_logprobs": []})
    pos = parse_chat_logprobs(b)
    assert pos is not None and pos[0].margin_nats is None
    m = align_divergence(pos, "b", prompt_id="p", candidate="mtp", tau_nats=TAU)
    assert m.margin_nats is None and m.kind is DivergenceKind.unexplained


def test_off_ending_where_the_candidate_ends_is_not_a_divergence() -> None:
    eos = {"id": 2, "token": "", "bytes": [], "logprob": -0.1, "top_logprobs": []}
    pos = parse_chat_logprobs(body(entry("ab", -0.1, {"ab": -0.1, "a": -4.0}), eos))
    assert pos is not None
    m = align_divergence(pos, "ab", prompt_id="p", candidate="mtp", tau_nats=TAU)
    assert m.kind is DivergenceKind.unexplained and "reproduced" in m.note


@pytest.mark.parametrize("raw", [[256], ["a"], 5])
def test_malformed_bytes_give_no_logprobs(raw: object) -> None:
    b = body({"token": "a", "bytes": raw, "logprob": -0.1, "top_logprobs": []})
    assert parse_chat_logprobs(b) is None


def test_null_bytes_fall_back_to_the_token_string() -> None:
    b = body({"token": "a", "bytes": None, "logprob": -0.1, "top_logprobs": []})
    pos = parse_chat_logprobs(b)
    assert pos is not None and pos[0].token_bytes is None and pos[0].piece == b"a"
