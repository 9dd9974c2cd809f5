"""Forensics: ``off``'s log-probabilities at every divergence and over every compared
output, asked of ``off`` only, one request at a time.

After measurement, two kinds of follow-up go to the ``off`` route, each the same chat
request (prompt, seed, temperature 0), non-streamed, with ``logprobs: true`` and
``top_logprobs`` (:data:`TOP_LOGPROBS`):

- **Divergence follow-ups** (:func:`explain_divergences`): each divergence found (a
  speculative route against ``off`` on the parity set or the measured traffic, and
  ``off`` against itself); the answer's ``choices[0].logprobs.content[]`` is aligned,
  token by token, with the diverging output (:func:`~deepseekbench._types._margin.
  align_divergence`). **Attribution**: when ``off``'s alone answer reproduces the
  candidate's text and not ``off``'s own measured output, ``off``'s measured output is
  the one that flipped (under batching, say): the fork is located against ``off``'s
  text and the margin names ``off`` as the route that emitted the token (its
  ``candidate``), so the analysis charges it to ``off``, never to the candidate.
- **Profile follow-ups** (:func:`profile_off_outputs`): each compared ``off`` output
  (bounded by ``parity.profile_outputs``), giving ``off``'s margins at every position
  (:class:`~deepseekbench._types._noise.OffProfile`: the near-tie opportunities) and,
  where the engine scores a given output in one forward pass (teacher forcing, the
  verify shape: ``score``), the decode-vs-one-pass margin shifts that measure τ.

Every follow-up runs alone (one in flight), so a margin never depends on how
follow-ups happened to batch (on vLLM's CPU build one prompt's margin read 0.0086 nats
batched and 0.983 alone). The speculative route is never asked: some vLLM releases turn
speculation off for a request that asks for logprobs (vLLM #34497), and the measured
requests never carry a logprobs request. Each answer is read whole within the route's
``timeout_s`` (a total deadline) and a size cap (:func:`~deepseekbench._net._bounded.
read_bounded`). An engine that serves no logprobs, an HTTP error, a transport failure,
an answer past the deadline or over the cap gives an ``unexplained`` margin (or a profile with a
``note``) that says why, never a guess.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import httpx
import orjson

from deepseekbench._errors import LiveGateError
from deepseekbench._net._bounded import BoundedReadError, read_bounded
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._follow_up import FollowUp, ProfileFollowUp
from deepseekbench._types._margin import (
    DEFAULT_TAU_NATS,
    REPRODUCED_NOTE,
    ChatLogprobs,
    DivergenceMargin,
    PositionLogprobs,
    align_divergence,
    classify_divergence,
    no_margin,
    parse_chat_logprobs,
)
from deepseekbench._types._noise import PROFILE_MARGIN_CAP_NATS, OffProfile, OnePassFlip
from deepseekbench._types._request import ChatRequest
from deepseekbench._types._scored import ScoredOutput, ScoredPosition

__all__ = [
    "SCORE_MAX_BYTES",
    "TOP_LOGPROBS",
    "OnePassScorer",
    "explain_divergences",
    "follow_up_body",
    "off_profile",
    "one_pass_scorer",
    "profile_off_outputs",
]

TOP_LOGPROBS: Final[int] = 5
"""Alternatives asked per position (OpenAI allows up to 20; llama.cpp ``n_probs``)."""


SCORE_MAX_BYTES: Final[int] = 64 << 20
"""Largest one-pass scoring answer read (bytes, 64 MiB): past it the scoring is a
recorded reason, never a crash (:func:`~deepseekbench._execute._teacher_force.score_output`)."""

OnePassScorer = Callable[[ChatRequest, str], Awaitable[ScoredOutput | str]]
"""Scores a given output of a request on ``off`` in one forward pass (teacher forcing:
the verify shape); returns the scored positions (RAW top-k per position, most likely
first) or the recorded reason it could not."""


def follow_up_body(route: EngineRoute, request: ChatRequest) -> dict[str, object]:
    """The follow-up's JSON body: ``route.build_body(request)`` with temperature 0,
    non-streamed, and ``logprobs``/``top_logprobs`` added."""
    body = route.build_body(request.model_copy(update={"temperature": 0.0}))
    body.pop("stream_options", None)
    body.update({"stream": False, "logprobs": True, "top_logprobs": TOP_LOGPROBS})
    return body


async def _ask(
    request: ChatRequest,
    off: EngineRoute,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float,
) -> ChatLogprobs | str:
    """``off``'s logprobs for ``request`` (one follow-up, read and checked by
    :func:`~deepseekbench._types._margin.parse_chat_logprobs`), or why there are none."""
    headers = {**off.request_headers(), "accept": "application/json"}
    try:
        r = await read_bounded(
            client,
            "POST",
            off.chat_url,
            deadline_s=timeout_s,
            content=orjson.dumps(follow_up_body(off, request)),
            headers=headers,
        )
    except LiveGateError as exc:  # e.g. max_requests spent by the measurement: keep the run
        return f"gate refused the follow-up: {exc}"
    if isinstance(r, BoundedReadError):
        return f"follow-up failed: {r.reason}: {r}"
    if r.status_code != 200:
        return f"follow-up HTTP {r.status_code}"
    try:
        data = r.json()
    except ValueError:
        return "follow-up answered no JSON"
    usage = data.get("usage") if isinstance(data, dict) else None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        gate.charge_output_tokens(max(0, usage["completion_tokens"]))
    positions = parse_chat_logprobs(data) if isinstance(data, dict) else None
    return "engine served no logprobs" if positions is None else positions


async def _explain(
    f: FollowUp,
    off: EngineRoute,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float,
    off_label: str,
) -> DivergenceMargin:
    common: dict[str, Any] = {
        "candidate": f.candidate,
        "tau_nats": DEFAULT_TAU_NATS,
        "source": f.source,
    }
    positions = await _ask(f.request, off, gate, client, timeout_s)
    if isinstance(positions, str):
        return no_margin(f.prompt_id, note=positions, **common)
    m = align_divergence(positions, f.candidate_text, prompt_id=f.prompt_id, **common)
    reproduced = m.note == REPRODUCED_NOTE
    if reproduced and f.other_text is not None and f.other_text != f.candidate_text:
        # off's alone follow-up took the candidate's path: off's measured output is the one
        # that flipped; the token at the fork was emitted by off
        common["candidate"] = off_label
        m = align_divergence(positions, f.other_text, prompt_id=f.prompt_id, **common)
    body = follow_up_body(off, f.request)
    if "ignore_eos" in body or "min_tokens" in body:
        m = _past_hidden_end(m, positions)
    return m


def _past_hidden_end(
    m: DivergenceMargin, positions: Sequence[PositionLogprobs]
) -> DivergenceMargin:
    """A forced output (``ignore_eos``/``min_tokens``) that left ``off`` where ``off``'s
    runner-up is end-of-sequence shows what followed the hidden end token, not the token:
    the route's token there is the end token (its rank and logprob)."""
    if m.margin_nats is None or m.candidate_rank is not None or m.token_index is None:
        return m
    top = positions[m.token_index].top if m.token_index < len(positions) else ()
    end = next(((i + 1, t) for i, t in enumerate(top[:2]) if _is_end(t.token)), None)
    if end is None:
        return m
    kind = classify_divergence(m.margin_nats, end[0], m.tau_nats)
    return m.model_copy(
        update={
            "candidate_rank": end[0],
            "candidate_logprob": end[1].logprob,
            "candidate_token": "<end>",
            "kind": kind,
            "note": "the route decoded past a hidden end-of-sequence token (forced length)",
        }
    )


def _is_layout(pos: PositionLogprobs) -> bool:
    """A special marker token or a whitespace-only token."""
    return _is_end(pos.token) or not pos.piece.strip()


def _is_end(token: str) -> bool:
    """An end-of-sequence alternative as served: empty (hidden) or a special ``<...>``."""
    return token == "" or (token.startswith("<") and token.endswith(">") and " " not in token)


async def explain_divergences(
    follow_ups: Sequence[FollowUp],
    *,
    off: EngineRoute,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float,
    off_label: str | None = None,
) -> list[tuple[FollowUp, DivergenceMargin]]:
    """Ask ``off`` once per follow-up, one at a time, and explain each.

    A follow-up the gate refuses (a spent ``max_requests`` budget, say) is not sent
    and gives margin ``None`` with the gate's reason: what was measured is kept.
    ``off_label`` names ``off`` in a margin it is charged with (default ``off.label``).

    Returns:
        ``(follow-up, margin)`` pairs in ``follow_ups`` order, margins classified against
        :data:`~deepseekbench._types._margin.DEFAULT_TAU_NATS` (the analysis
        reclassifies them against the run's τ).
    """
    name = off_label or off.label or "off"
    return [(f, await _explain(f, off, gate, client, timeout_s, name)) for f in follow_ups]


def _shifts(
    positions: Sequence[PositionLogprobs], scored: Sequence[ScoredPosition], n: int
) -> tuple[tuple[float, ...], tuple[OnePassFlip, ...]]:
    """Decode-vs-one-pass margin shifts (nats) over the first ``n`` aligned positions,
    and the positions whose one-pass top-1 differs from the decode's."""
    shifts: list[float] = []
    flips: list[OnePassFlip] = []
    for i, (d, s) in enumerate(zip(positions[:n], scored[:n], strict=False)):
        if d.piece != s.token_bytes or len(d.top) < 2 or not s.top:
            break  # tokenizations part: nothing after can be paired
        one = {t.piece: t.logprob for t in s.top}
        a, b = d.top[0], d.top[1]
        if a.piece in one and b.piece in one:
            shifts.append(abs((a.logprob - b.logprob) - (one[a.piece] - one[b.piece])))
        if s.top[0].piece != a.piece:
            shown = s.top[0].piece.decode("utf-8", errors="backslashreplace")
            flips.append(OnePassFlip(index=i, token=shown, decode_margin_nats=d.margin_nats))
    return tuple(shifts), tuple(flips)


def off_profile(positions: Sequence[PositionLogprobs], off_text: str) -> OffProfile:
    """``off``'s margins along its measured output ``off_text``, from its alone
    follow-up's ``positions``: every position that spells the text (margins up to
    :data:`~deepseekbench._types._noise.PROFILE_MARGIN_CAP_NATS`), and the fork when
    the follow-up leaves it (``off`` flipped between the two runs). In a thinking
    answer, reasoning markers and the whitespace around them, which the compared text
    (reasoning then content) does not hold, are passed over."""
    text = off_text.encode()
    at = n = 0
    margins: list[tuple[int, float]] = []
    thinking = isinstance(positions, ChatLogprobs) and bool(positions.reasoning)
    for i, pos in enumerate(positions):
        rest = text[at:]
        if not rest:
            break
        m = pos.margin_nats
        if thinking and not rest.startswith(pos.piece) and _is_layout(pos):
            continue  # a reasoning marker (<think>, </think>) or the layout around it
        if not (pos.piece and rest.startswith(pos.piece)):
            return OffProfile(
                n_tokens=i, margins=tuple(margins), reproduced=False, fork_index=i,
                fork_margin_nats=m,
            )  # fmt: skip
        if m is not None and m <= PROFILE_MARGIN_CAP_NATS:
            margins.append((i, m))
        at += len(pos.piece)
        n = i + 1
    return OffProfile(n_tokens=n, margins=tuple(margins), reproduced=at == len(text))


async def _profile(
    f: ProfileFollowUp,
    off: EngineRoute,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float,
    score: OnePassScorer | None,
) -> OffProfile:
    positions = await _ask(f.request, off, gate, client, timeout_s)
    if isinstance(positions, str):
        return OffProfile(note=positions)
    if positions.problem:
        return OffProfile(note=positions.problem)
    prof = off_profile(positions, f.off_text)
    if score is None:
        from deepseekbench._execute._teacher_force import teacher_force_reason

        why = teacher_force_reason(off) or "no one-pass scoring asked"
        return prof.model_copy(update={"one_pass_note": why})
    scored = await score(f.request, f.off_text)
    if isinstance(scored, str):
        return prof.model_copy(update={"one_pass_note": scored})
    shifts, flips = _shifts(positions, scored.positions, prof.n_tokens)
    return prof.model_copy(update={"shifts_nats": shifts, "one_pass": flips})


def one_pass_scorer(
    off: EngineRoute, gate: LiveGate, client: httpx.AsyncClient, timeout_s: float
) -> OnePassScorer | None:
    """The engine's one-pass scoring of a given output on ``off`` (teacher forcing,
    :func:`~deepseekbench._execute._teacher_force.score_output`: ``TOP_LOGPROBS``
    alternatives, the route's deadline ``timeout_s``, :data:`SCORE_MAX_BYTES`), or ``None``
    where the engine cannot score in one pass
    (:func:`~deepseekbench._execute._teacher_force.teacher_force_reason`)."""
    from deepseekbench._execute._teacher_force import score_output, teacher_force_reason

    if teacher_force_reason(off) is not None:
        return None

    async def score(request: ChatRequest, text: str) -> ScoredOutput | str:
        return await score_output(
            off, request, text, top_k=TOP_LOGPROBS, client=client, gate=gate,
            timeout_s=timeout_s, max_bytes=SCORE_MAX_BYTES,
        )  # fmt: skip

    return score


async def profile_off_outputs(
    follow_ups: Sequence[ProfileFollowUp],
    *,
    off: EngineRoute,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float,
    score: OnePassScorer | None = None,
) -> list[tuple[ProfileFollowUp, OffProfile]]:
    """Profile each compared ``off`` output, one follow-up at a time (never batched),
    and score it in one pass with ``score`` where given (the engine's teacher forcing;
    ``None``: the engine cannot, and the profile says so).

    Returns:
        ``(follow-up, profile)`` pairs in ``follow_ups`` order; a failed follow-up gives
        a profile whose ``note`` says why (never raises on server misbehaviour).
    """
    return [(f, await _profile(f, off, gate, client, timeout_s, score)) for f in follow_ups]
