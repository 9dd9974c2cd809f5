"""Divergence margins, their classification, and the within-noise verdict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from deepseekbench import (
    DivergenceKind,
    DivergenceMargin,
    OffProfile,
    QualityParity,
    TauEstimate,
    TauSource,
    classify_divergence,
    within_noise_verdict,
)
from deepseekbench._analysis import _divergence as div_mod
from deepseekbench._types import _margin as margin_mod
from deepseekbench._types._margin import (
    PositionLogprobs,
    TopLogprob,
    align_divergence,
    no_margin,
    parse_chat_logprobs,
)

TAU = 0.05
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BROKEN = settings(SETTINGS, phases=[Phase.explicit, Phase.generate], database=None)


def positions(
    off_text: str, at: int, cand_tok: str, margin: float, rank: int | None
) -> tuple[PositionLogprobs, ...]:
    """``off``'s follow-up: one char per token; at ``at`` the candidate's token ranks
    ``rank`` (``None``: outside the top-4) and off's top-1 leads by ``margin`` nats."""
    out = []
    for i, ch in enumerate(off_text):
        top: tuple[TopLogprob, ...]
        if i != at:
            top = (TopLogprob(token=ch, logprob=-0.01), TopLogprob(token="~", logprob=-5.0))
        else:
            others = [t for t in "wxyz" if t not in (ch, cand_tok)]
            toks = [ch, *others[:3]]
            if rank is not None:
                toks.insert(rank - 1, cand_tok)
                if rank == 1:  # the candidate leads: off's token runs second
                    toks.remove(ch)
                    toks.insert(1, ch)
            lps = [-0.5 - margin * (j > 0) - 0.5 * max(0, j - 1) for j in range(len(toks))]
            top = tuple(TopLogprob(token=t, logprob=lp) for t, lp in zip(toks, lps, strict=False))
        out.append(PositionLogprobs(token=ch, logprob=top[0].logprob, top=top[:4]))
    return tuple(out)


@st.composite
def divergence(draw: st.DrawFn, kind: str) -> tuple[tuple[PositionLogprobs, ...], str, str]:
    """A diverging (follow-up, candidate text) pair of the given true kind."""
    off_text = draw(st.text(alphabet="abcdefg", min_size=2, max_size=12))
    at = draw(st.integers(0, len(off_text) - 1))
    cand_tok = draw(st.sampled_from([c for c in "pqrs"]))
    cand_text = off_text[:at] + cand_tok + off_text[at + 1 :]
    if kind == "near_tie":
        margin = draw(st.floats(0.0, TAU * 0.99))  # float rounding of -0.5 - m
        rank: int | None = 2
    elif kind == "decisive_margin":  # the candidate's token is the runner-up, far behind
        margin = draw(st.floats(TAU * 1.01, 20.0))
        rank = 2
    else:  # decisive_rank: outside off's top-k, whatever the margin
        margin = draw(st.floats(0.0, 20.0))
        rank = None
    return positions(off_text, at, cand_tok, margin, rank), cand_text, kind


def explain(case: tuple[tuple[PositionLogprobs, ...], str, str], pid: str) -> DivergenceMargin:
    pos, cand_text, _ = case
    return align_divergence(pos, cand_text, prompt_id=pid, candidate="mtp", tau_nats=TAU)


Case = tuple[list[DivergenceMargin], int, dict[tuple[str, str], OffProfile], bool]


def _profile_of(m: DivergenceMargin) -> OffProfile:
    """off's profile of the output ``m`` diverged from: its margin at the fork."""
    i = m.token_index or 0
    return OffProfile(n_tokens=i + 4, margins=((i, m.margin_nats or 0.0),))


@st.composite
def scenario(draw: st.DrawFn) -> Case:
    """Near-ties at off's opportunities, plus (maybe) one decisive or unexplained divergence;
    enough comparisons for the verdict's power. Returns (margins, n, profiles, expect_verified)."""
    n = draw(st.integers(24, 96))
    k = draw(st.integers(0, n // 4))
    margins = [explain(draw(divergence("near_tie")), f"p{i}") for i in range(k)]
    bad = draw(st.sampled_from(["none", "decisive_margin", "decisive_rank", "unexplained"]))
    if bad == "unexplained":
        margins.append(no_margin("px", candidate="mtp", tau_nats=TAU, note="no logprobs"))
    elif bad != "none":
        margins.append(explain(draw(divergence(bad)), "px"))
    profiles = {("parity", m.prompt_id): _profile_of(m) for m in margins}
    profiles[("parity", "quiet")] = OffProfile(n_tokens=9)
    return margins, n, profiles, bad == "none"


def verdict_is_right(case: Case) -> bool:
    margins, n, profiles, expect_verified = case
    tau = TauEstimate(tau_nats=TAU, source=TauSource.plan)
    v = within_noise_verdict(margins, n, profiles, alpha=0.05, tau=tau)
    return (v.parity is QualityParity.verified) == expect_verified


@SETTINGS
@given(scenario())
def test_near_ties_at_opportunities_verify_and_any_decisive_or_unexplained_does_not(
    case: Case,
) -> None:
    assert verdict_is_right(case)


@SETTINGS
@given(st.sampled_from(["near_tie", "decisive_margin", "decisive_rank"]).flatmap(divergence))
def test_alignment_recovers_the_kind_and_the_margin(
    case: tuple[tuple[PositionLogprobs, ...], str, str],
) -> None:
    m = explain(case, "p")
    assert m.kind.value == ("near_tie" if case[2] == "near_tie" else "decisive")
    assert m.margin_nats is not None and m.margin_nats >= 0


def ignores_margin(margin: float | None, rank: int | None, tau: float) -> DivergenceKind:
    """A broken classifier: any runner-up is a near-tie, however far behind."""
    if margin is None:
        return DivergenceKind.unexplained
    return DivergenceKind.near_tie if rank is not None and rank <= 2 else DivergenceKind.decisive


def test_the_property_fails_against_a_classifier_that_ignores_the_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(margin_mod, "classify_divergence", ignores_margin)
    monkeypatch.setattr(div_mod, "_opportunity_check", lambda ms, ps, tau: (None, 1, len(ms)))
    counterexample = find(scenario(), lambda c: not verdict_is_right(c), settings=BROKEN)
    assert any(m.margin_nats is not None and m.margin_nats > TAU for m in counterexample[0])


def test_the_property_fails_against_a_verdict_that_ignores_kinds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real: Callable[..., Any] = div_mod.count_divergences
    monkeypatch.setattr(
        div_mod, "count_divergences", lambda ms: real([m for m in ms if m.kind.value == "near_tie"])
    )
    find(scenario(), lambda c: not verdict_is_right(c), settings=BROKEN)


def test_classify_edges() -> None:
    assert classify_divergence(None, 2, TAU) is DivergenceKind.unexplained
    assert classify_divergence(TAU, 2, TAU) is DivergenceKind.near_tie
    assert classify_divergence(TAU + 1e-9, 2, TAU) is DivergenceKind.decisive
    assert classify_divergence(0.0, None, TAU) is DivergenceKind.decisive
    assert classify_divergence(0.0, 3, TAU) is DivergenceKind.decisive
    assert classify_divergence(0.01, 1, TAU) is DivergenceKind.near_tie
    with pytest.raises(ValueError, match="tau"):
        classify_divergence(0.0, 2, -1.0)


def test_parse_openai_chat_logprobs() -> None:
    body = {
        "choices": [
            {
                "logprobs": {
                    "content": [
                        {
                            "token": "a",
                            "logprob": -0.1,
                            "bytes": [97],
                            "top_logprobs": [
                                {"token": "a", "logprob": -0.1},
                                {"token": "b", "logprob": -2.5},
                            ],
                        }
                    ]
                },
                "message": {"role": "assistant", "content": "a"},
            }
        ]
    }
    pos = parse_chat_logprobs(body)
    assert pos is not None and pos[0].top[0].token == "a" and not pos.problem
    assert pos[0].margin_nats == pytest.approx(2.4)
    entry = body["choices"][0]["logprobs"]["content"][0]  # type: ignore[index]
    entry[
        "top_logprobs"
    ].reverse()  # as sent, most likely first is a must: out of order is impossible
    pos = parse_chat_logprobs(body)
    assert pos is not None and "out of order" in pos.problem
    assert parse_chat_logprobs({"choices": [{"logprobs": None}]}) is None
    assert parse_chat_logprobs({"choices": []}) is None


def test_follow_up_that_reproduces_the_candidate_is_unexplained() -> None:
    pos = positions("abc", 1, "q", 0.01, 2)
    m = align_divergence(pos, "abc", prompt_id="p", candidate="mtp", tau_nats=TAU)
    assert m.kind is DivergenceKind.unexplained and "reproduced" in m.note
    assert "unexplained" in m.describe()


def test_describe_decisive() -> None:
    pos = positions("abcd", 2, "q", 4.2, None)
    m = align_divergence(pos, "abqd", prompt_id="prompt-7", candidate="mtp", tau_nats=TAU)
    assert m.kind is DivergenceKind.decisive and m.token_index == 2
    assert "margin 4.200 nats" in m.describe() and "out-of-top-k" in m.describe()
    assert m.reclassified(10.0).kind is DivergenceKind.decisive  # outside top-k stays


def test_a_candidate_that_ends_at_off_s_runner_up_end_token() -> None:
    top = (TopLogprob(token=" ", logprob=-0.69), TopLogprob(token="", logprob=-0.70))
    pos = (
        PositionLogprobs(
            token="a",
            logprob=-0.01,
            top=(TopLogprob(token="a", logprob=-0.01), TopLogprob(token="b", logprob=-6.0)),
        ),
        PositionLogprobs(token=" ", logprob=-0.69, top=top),
    )
    m = align_divergence(pos, "a", prompt_id="p", candidate="mtp", tau_nats=TAU)
    assert m.kind is DivergenceKind.near_tie and m.candidate_token == "<end>"
    assert m.candidate_rank == 2 and m.token_index == 1
