"""Margins at a divergence: was it a near-tie floating point may flip, or a decisive error?

The margin follow-up: a speculative route's output that differs from ``off``'s is explained by
``off``'s own log-probabilities at the first differing token, read from a follow-up
request to ``off`` only (same prompt, seed, temperature 0, with ``logprobs`` and
``top_logprobs``; never to the speculative route, since some vLLM releases turn
speculation off for a request that asks for logprobs, vLLM #34497).

Definitions (all log-probabilities natural-log, so differences are in **nats**):

- **margin**: ``off``'s top-1 logprob minus its top-2 logprob at the divergence
  position (nats, >= 0).
- **candidate rank**: 1-based rank of the speculative route's token in ``off``'s
  top-k at that position; ``None`` when the token is outside the top-k.
- :class:`DivergenceKind`: ``near_tie`` (the candidate's token ranks 1 or 2 in
  ``off``'s top-k and the margin is at most τ), ``decisive`` (margin above τ, or the
  candidate's token outside ``off``'s top-k), ``unexplained`` (no margin obtainable:
  the engine serves no logprobs, or the follow-up failed or could not be aligned).
  Rank 1 occurs when ``off``'s follow-up itself picked the candidate's token (``off``
  flipped between its measured run and the follow-up): the same near-tie seen from
  the other side, still bounded by the margin.

Margins never guess. :func:`parse_chat_logprobs` checks the answer before any
margin is read, and an answer that fails is ``unexplained`` with the failure named
(:attr:`ChatLogprobs.problem`): logprobs that cannot be (positive, NaN, ±inf,
``top_logprobs`` not most likely first as sent), a truncated distribution (top-1 at
0.0, every alternative at or below :data:`FLOOR_NATS`: post-sampling logprobs), and
tokens that do not spell the answer's own text (``message.content``, or the reasoning
then the content, which locates the content's first token). A ``null`` alternative is
dropped alone; a run of U+FFFD tokens (partial UTF-8 shown as the replacement
character) spells one whole span of non-ASCII characters.

Alignment is by tokens, not characters: the follow-up's content tokens are placed on
its content's bytes, and the first byte where the candidate's text differs names the
token holding it (:func:`align_divergence`), over the UTF-8 bytes of each token when
the engine sends them (``bytes``), else its string.
The wire format read is OpenAI chat completions' ``choices[].logprobs.content[]``
(``token``, ``logprob``, ``top_logprobs[]``, optional ``bytes``), which vLLM, SGLang
and llama.cpp's ``/v1/chat/completions`` all serve. llama.cpp's server (tools/server,
``completion_token_output``) adds ``id`` and ``bytes`` to every entry and truncates
``token`` at the last complete UTF-8 character, so a token holding part of a
multi-byte character has ``token == ""`` and only its ``bytes`` place it: the walk by
bytes is what keeps such a token from looking like a divergence. llama.cpp writes a
probability of 0 as the lowest float (about -3.4e38 nats) rather than ``-inf``, and
gives a token its speculative route accepted from a draft ``logprob`` 0 with no
``top_logprobs``; ``off`` is the only route asked, so that never reaches a margin.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, overload

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._axes import _ClosedEnum

__all__ = [
    "DEFAULT_TAU_NATS",
    "FLOOR_NATS",
    "REPRODUCED_NOTE",
    "ChatLogprobs",
    "DivergenceKind",
    "DivergenceMargin",
    "PositionLogprobs",
    "TauSource",
    "TopLogprob",
    "align_divergence",
    "classify_divergence",
    "logprob_problem",
    "no_margin",
    "parse_chat_logprobs",
]

DEFAULT_TAU_NATS = 0.05
"""Default near-tie bound τ (nats) when ``off`` never flipped against itself.

Justification: a bfloat16 logit carries 8 significant bits (unit roundoff
u = 2^-8 ≈ 0.0039; IEEE 754-2008 binary16 layout truncated, as in Google's
bfloat16 definition), so a reduction whose order changes between a one-token decode
and a (k+1)-token verify (vLLM RFC #54506) may move a logit of magnitude ~10 by
several ULPs; 0.05 nats is ~13 u and covers the 0.014-0.021 nats flips our vLLM CPU
probe measured (docs/engines.md, "The DeepSeek divergence") with ×2 headroom. The
plan key ``parity.tau_nats`` overrides it; calibrated τ replaces it when ``off``
flipped against itself."""

FLOOR_NATS: Final[float] = -1000.0
"""A logprob at or below this (nats) is a stand-in for probability 0, not a model's
number: llama.cpp writes log(0) as float's lowest (-3.4e38), SGLang's post-sampling
logprobs put every alternative of a greedy step there (sglang #5761), other servers use
-9999. No real runner-up sits 1000 nats below a top-1 (its probability would be
e^-1000, far below float32's smallest normal, e^-87), so a runner-up here carries no
margin, and a top-1 at 0.0 with every alternative here is a truncated distribution."""

_POSITIVE_SLACK_NATS = 1e-6
"""A logprob above this (nats) is impossible (a probability above 1); the slack
allows float32 rounding of a log-softmax near 0 (float32 epsilon 1.2e-7)."""

_FFFD = "\ufffd".encode()
_FFFD_RUN = re.compile(b"((?:" + re.escape(_FFFD) + b")+)")

_CONFIG = ConfigDict(frozen=True, extra="forbid")


class DivergenceKind(_ClosedEnum):
    """How one divergence is explained (see the module docstring)."""

    near_tie = "near_tie"
    decisive = "decisive"
    unexplained = "unexplained"


class TauSource(_ClosedEnum):
    """Where a row's τ came from: the plan key; ``measured_jitter`` (a high quantile of
    ``off``'s decode-vs-one-pass margin shifts and its flips among concurrent requests,
    :func:`~deepseekbench._analysis._divergence.measure_tau`); the default.
    ``off_self_flips`` (the largest self-flip margin) is only read from old results."""

    plan = "plan"
    measured_jitter = "measured_jitter"
    off_self_flips = "off_self_flips"
    default = "default"


class TopLogprob(BaseModel):
    """One alternative at a position: ``token`` (string), its ``logprob`` (nats, <= 0),
    and its UTF-8 ``token_bytes`` when the engine sent them (OpenAI's ``bytes``)."""

    model_config = _CONFIG

    token: str
    logprob: float
    token_bytes: bytes | None = None

    @property
    def piece(self) -> bytes:
        """The token's UTF-8 bytes: ``token_bytes`` when sent, else ``token`` encoded."""
        return self.token_bytes if self.token_bytes is not None else self.token.encode()


class PositionLogprobs(BaseModel):
    """``off``'s log-probabilities at one generated position (one entry of OpenAI chat's
    ``choices[].logprobs.content[]``): the token emitted, its logprob (nats), and the
    top-k alternatives, most likely first."""

    model_config = _CONFIG

    token: str
    logprob: float
    top: tuple[TopLogprob, ...] = ()
    token_bytes: bytes | None = None

    @property
    def piece(self) -> bytes:
        """The token's UTF-8 bytes: ``token_bytes`` when sent, else ``token`` encoded."""
        return self.token_bytes if self.token_bytes is not None else self.token.encode()

    @property
    def margin_nats(self) -> float | None:
        """Top-1 minus top-2 logprob (nats); ``None`` with fewer than two alternatives
        or a runner-up at a floor value (:data:`FLOOR_NATS`: the true runner-up is
        unknown)."""
        if len(self.top) < 2 or self.top[1].logprob <= FLOOR_NATS:
            return None
        return self.top[0].logprob - self.top[1].logprob


class DivergenceMargin(BaseModel):
    """One divergence explained by ``off``'s logprobs (a results-file record part).

    Attributes:
        prompt_id: the parity prompt id or ``request-<i>`` of the measured traffic.
        source: ``parity`` (the parity set) or ``traffic`` (measured requests).
        candidate: the route whose output diverged from ``off`` (``off`` itself for a
            self-flip of the determinism control).
        token_index: 0-based token position of the divergence in ``off``'s follow-up.
        off_token: ``off``'s top-1 token there; candidate_token: the candidate's.
        margin_nats: ``off``'s top-1 minus top-2 logprob (nats); ``None`` when no
            logprobs were obtainable.
        candidate_rank: 1-based rank of the candidate's token in ``off``'s top-k;
            ``None`` when outside it (or unknown).
        candidate_logprob: its logprob (nats), ``None`` when outside the top-k.
        top_k: how many alternatives ``off`` returned at that position.
        kind: the classification against ``tau_nats``.
        tau_nats: the τ it was classified against (nats).
        note: why a margin is missing (``unexplained``), else ``""``.
    """

    model_config = _CONFIG

    prompt_id: str
    source: str = "parity"
    candidate: str = ""
    token_index: int | None = None
    off_token: str | None = None
    candidate_token: str | None = None
    margin_nats: float | None = Field(default=None, description="top-1 minus top-2, nats")
    candidate_rank: int | None = None
    candidate_logprob: float | None = Field(default=None, description="nats")
    top_k: int = 0
    kind: DivergenceKind = DivergenceKind.unexplained
    tau_nats: float = Field(default=DEFAULT_TAU_NATS, description="nats")
    note: str = ""

    def reclassified(self, tau_nats: float) -> DivergenceMargin:
        """The same divergence classified against another τ (nats)."""
        kind = classify_divergence(self.margin_nats, self.candidate_rank, tau_nats)
        return self.model_copy(update={"kind": kind, "tau_nats": tau_nats})

    def describe(self, off_name: str = "off") -> str:
        """One line, e.g. ``p7 token 12: off's top-1 margin 4.20 nats, mtp emitted its
        rank-9 token (decisive)``."""
        where = f"{self.prompt_id} token {self.token_index}"
        if self.margin_nats is None:
            return f"{where}: no margin ({self.note or 'no logprobs'}) (unexplained)"
        rank = f"rank-{self.candidate_rank}" if self.candidate_rank else "an out-of-top-k"
        return (
            f"{where}: {off_name}'s top-1 margin {self.margin_nats:.3f} nats, "
            f"{self.candidate or 'candidate'} emitted its {rank} token {self.candidate_token!r} "
            f"({self.kind.value}, τ {self.tau_nats:.3g})"
        )


def classify_divergence(
    margin_nats: float | None, candidate_rank: int | None, tau_nats: float
) -> DivergenceKind:
    """``near_tie`` / ``decisive`` / ``unexplained`` (definitions in the module docstring).

    Args:
        margin_nats: ``off``'s top-1 minus top-2 logprob (nats) or ``None``.
        candidate_rank: the candidate token's 1-based rank in ``off``'s top-k, ``None``
            when outside it.
        tau_nats: the near-tie bound τ (nats, >= 0).

    Raises:
        ValueError: ``tau_nats`` negative.
    """
    if tau_nats < 0:
        raise ValueError("tau_nats must be >= 0")
    if margin_nats is None:
        return DivergenceKind.unexplained
    if candidate_rank is not None and candidate_rank <= 2 and margin_nats <= tau_nats:
        return DivergenceKind.near_tie
    return DivergenceKind.decisive


def _token_bytes(entry: Mapping[str, Any]) -> bytes | None:
    """An entry's ``bytes`` (a list of 0-255 ints) as :class:`bytes`; ``None`` when absent
    (an engine may send ``null``, OpenAI's spec allows it)."""
    raw = entry.get("bytes")
    if raw is None:
        return None
    if not isinstance(raw, list):  # bytes(5) would be five zero bytes
        raise TypeError("bytes is not a list")
    return bytes(raw)  # ValueError/TypeError for a non-int or an int outside 0-255


@dataclass(frozen=True, slots=True)
class _Unit:
    """Follow-up positions ``first``..``last`` (inclusive) spelling content bytes
    ``start``..``end``. One position when its bytes are known; several when U+FFFD
    tokens split a character between them (their own boundaries are unknown)."""

    first: int
    last: int
    start: int
    end: int


class ChatLogprobs(Sequence[PositionLogprobs]):
    """``off``'s follow-up read for alignment: its positions (a sequence of
    :class:`PositionLogprobs`, in the order sent) and what was checked about them.

    Attributes:
        positions: every ``logprobs.content[]`` entry, reasoning tokens included.
        content: the follow-up's ``message.content`` as UTF-8 bytes, which the
            content positions spell.
        units: the content positions' byte spans in ``content`` (see ``_Unit``).
        tail: index of the first position after the content (an end token);
            ``len(positions)`` when none follows.
        problem: why no margin may be read from this answer (impossible values,
            a truncated distribution, tokens that do not spell the text); ``""``
            when none.
        reasoning: the follow-up's reasoning text (``message.reasoning_content`` or
            ``reasoning``) as UTF-8 bytes, ``b""`` when none; its tokens, when the
            engine sends them, are the positions before :attr:`content_start`.
    """

    __slots__ = ("content", "positions", "problem", "reasoning", "tail", "units")

    def __init__(
        self,
        positions: tuple[PositionLogprobs, ...],
        *,
        content: bytes = b"",
        units: tuple[_Unit, ...] = (),
        tail: int | None = None,
        problem: str = "",
        reasoning: bytes = b"",
    ) -> None:
        self.positions = positions
        self.reasoning = reasoning
        self.content = content
        self.units = units
        self.tail = len(positions) if tail is None else tail
        self.problem = problem

    @overload
    def __getitem__(self, i: int) -> PositionLogprobs: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[PositionLogprobs, ...]: ...
    def __getitem__(self, i: int | slice) -> PositionLogprobs | tuple[PositionLogprobs, ...]:
        return self.positions[i]

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def content_start(self) -> int:
        """Index of the first content position (after reasoning tokens, if any)."""
        return self.units[0].first if self.units else self.tail


def _alternatives(entry: Mapping[str, Any], where: str) -> tuple[tuple[TopLogprob, ...], str]:
    """An entry's ``top_logprobs`` as sent, less ``null`` alternatives (a ``-inf`` the
    server could not write: impossible, so it ranks last and is dropped); a problem when
    a ``null`` comes before a number (then the order as sent is not most likely first)."""
    out: list[TopLogprob] = []
    seen_null = False
    for t in entry.get("top_logprobs") or ():
        if t["logprob"] is None:
            seen_null = True
            continue
        if seen_null:
            return (), f"{where}: top_logprobs out of order (a null before a number)"
        out.append(
            TopLogprob(
                token=str(t["token"]), logprob=float(t["logprob"]), token_bytes=_token_bytes(t)
            )
        )
    return tuple(out), ""


def _positions(content: list[Any]) -> tuple[tuple[PositionLogprobs, ...], str]:
    """Every entry as a :class:`PositionLogprobs`, and the first problem found in what
    was sent (a ``null`` for an emitted token's logprob, nulls out of order)."""
    out: list[PositionLogprobs] = []
    problem = ""
    for i, e in enumerate(content):
        top, bad = _alternatives(e, f"position {i}")
        lp = e["logprob"]
        if lp is None:
            bad = bad or f"position {i}: the emitted token's logprob is null"
        problem = problem or bad
        out.append(
            PositionLogprobs(
                token=str(e["token"]),
                logprob=float("nan") if lp is None else float(lp),
                top=top,
                token_bytes=_token_bytes(e),
            )
        )
    return tuple(out), problem


def _impossible(value: float) -> str:
    """Why a logprob (nats) cannot be one, or ``""``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    if value > _POSITIVE_SLACK_NATS:
        return f"positive ({value:.3g} nats)"
    return ""


def _truncated(pos: PositionLogprobs) -> bool:
    """The post-sampling (greedy, truncated) shape: top-1 at 0.0, every other
    alternative at or below :data:`FLOOR_NATS`."""
    top = pos.top
    return (
        len(top) >= 2
        and top[0].logprob >= -_POSITIVE_SLACK_NATS
        and all(t.logprob <= FLOOR_NATS for t in top[1:])
    )


def logprob_problem(positions: Sequence[PositionLogprobs]) -> str:
    """Why no margin may be read from these positions, or ``""``: a logprob that cannot
    be one (positive, NaN, ±inf), ``top_logprobs`` not most likely first as sent, or a
    truncated distribution (:data:`FLOOR_NATS`). The first found is named (position,
    token, value)."""
    for i, pos in enumerate(positions):
        where = f"position {i} (token {pos.token!r})"
        for value in (pos.logprob, *(t.logprob for t in pos.top)):
            why = _impossible(value)
            if why:
                return f"impossible logprob at {where}: {why}"
        lps = [t.logprob for t in pos.top]
        if any(b > a for a, b in itertools.pairwise(lps)):
            return f"impossible logprobs at {where}: top_logprobs out of order as sent"
    for i, pos in enumerate(positions):
        if _truncated(pos):
            return (
                f"truncated distribution at position {i} (token {pos.token!r}): top-1 "
                f"{pos.top[0].logprob:g}, every alternative at a floor "
                f"({pos.top[1].logprob:.3g} nats): post-sampling logprobs carry no margin"
            )
    return ""


def _wild(count: int) -> bytes:
    """The pattern for a run of ``count`` U+FFFD characters: one whole span of
    non-ASCII characters of the text (bounded by ASCII or the ends), of at least
    ``count`` bytes (each stands for one or more bytes of a partial character)."""
    return rb"(?<![\x80-\xff])([\x80-\xff]{%d,})(?![\x80-\xff])" % count


def _spell(pieces: Sequence[bytes], text: bytes, base: int = 0) -> tuple[_Unit, ...] | None:
    """The tokens' byte spans in ``text`` when their bytes, concatenated, spell ``text``
    exactly, a run of U+FFFD standing for one whole span of non-ASCII characters
    (:func:`_wild`); ``None`` when they do not. Positions are numbered from ``base``.
    Linear in the bytes: each run can end at one place only (the span's end)."""
    joined = b"".join(pieces)
    parts = _FFFD_RUN.split(joined)  # odd items: the U+FFFD runs
    pattern = b"".join(_wild(len(p) // 3) if k % 2 else re.escape(p) for k, p in enumerate(parts))
    m = re.fullmatch(pattern, text)
    if m is None:
        return None
    starts: list[int] = []  # joined offset where each part starts
    text_at: list[int] = []  # the text offset there
    wild: list[tuple[int, int]] = []  # joined spans of the U+FFFD runs
    j = t = 0
    for k, p in enumerate(parts):
        starts.append(j)
        if k % 2:
            wild.append((j, j + len(p)))
            t = m.start(len(wild))
            text_at.append(t)
            t = m.end(len(wild))
        else:
            text_at.append(t)
            t += len(p)
        j += len(p)

    def to_text(x: int) -> int:  # a unit edge: never strictly inside a run
        k = bisect.bisect_right(starts, x) - 1
        return text_at[k] + (0 if k % 2 else x - starts[k])

    return tuple(
        _Unit(u.first, u.last, to_text(u.start), to_text(u.end)) for u in _units(pieces, wild, base)
    )


def _units(pieces: Sequence[bytes], wild: list[tuple[int, int]], base: int) -> list[_Unit]:
    """The tokens as units over the joined bytes: tokens touching the same U+FFFD run
    (``wild``, joined spans in order) form one unit."""
    units: list[_Unit] = []
    touched: set[int] = set()
    j = w = 0
    for i, piece in enumerate(pieces):
        a, b = j, j + len(piece)
        j = b
        while w < len(wild) and wild[w][1] <= a:
            w += 1
        mine = set()
        for v in range(w, len(wild)):
            if wild[v][0] >= b:
                break
            mine.add(v)
        if units and mine & touched:
            last = units[-1]
            units[-1] = _Unit(last.first, base + i, last.start, b)
            touched |= mine
            continue
        units.append(_Unit(base + i, base + i, a, b))
        touched = mine
    return units


def _is_marker(piece: bytes) -> bool:
    """An empty token or a special one (``<think>``, ``</think>``, ``<|end▁of▁sentence|>``)."""
    return _END_TOKEN.fullmatch(piece.decode("utf-8", errors="replace")) is not None


def _spells_reasoning(pieces: Sequence[bytes], reasoning: bytes) -> bool:
    """The reasoning tokens, less special markers and surrounding whitespace, spell
    the reasoning text (stripped)."""
    joined = b"".join(p for p in pieces if not _is_marker(p)).strip()
    return _spell([joined], reasoning.strip()) is not None


def _locate(
    pieces: Sequence[bytes], content: bytes, reasoning: bytes | None
) -> tuple[tuple[_Unit, ...], int] | None:
    """Where the content's tokens are: ``(units, tail)`` when ``pieces[k:tail]`` spell
    ``content`` (trailing markers after ``tail``) with ``k = 0``, or, given
    ``reasoning``, with ``pieces[:k]`` spelling the reasoning; ``None`` otherwise."""
    tails = [len(pieces)]
    while tails[-1] > 0 and _is_marker(pieces[tails[-1] - 1]):
        tails.append(tails[-1] - 1)
    for tail in tails:
        units = _spell(pieces[:tail], content)
        if units is not None:
            return units, tail
    if not reasoning:
        return None
    for tail in tails:
        for k in _content_starts(pieces, tail, content):
            units = _spell(pieces[k:tail], content, base=k)
            if units is not None and _spells_reasoning(pieces[:k], reasoning):
                return units, tail
    return None


_MAX_STARTS = 16
"""At most this many content starts are tried per answer (each costs a pass over the
answer): more would let one long answer hold the run; past it, ``unexplained``."""


def _content_starts(pieces: Sequence[bytes], tail: int, content: bytes) -> list[int]:
    """Where the content may start (``k`` in ``1..tail``), likeliest first: right
    after a marker token (``</think>``), whitespace tokens after it skipped or not,
    the last marker first; then starts whose bytes fit the content exactly; then
    starts of a suffix holding U+FFFD (its length is not known), the latest first.
    Each start's first token must begin the content."""
    size = list(itertools.accumulate((len(p) for p in reversed(pieces[:tail])), initial=0))
    size.reverse()  # size[k]: bytes of pieces[k:tail]
    wild = list(itertools.accumulate((_FFFD in p for p in reversed(pieces[:tail])), max))
    wild.reverse()  # wild[k]: a U+FFFD in pieces[k:tail]

    def fits(k: int) -> bool:
        head = pieces[k] if k < tail else b""
        return not head or content.startswith(head) or _FFFD in head

    marked: list[int] = []
    for k in range(tail, 0, -1):
        if pieces[k - 1] and _is_marker(pieces[k - 1]):
            j = k
            while j < tail and pieces[j] and not pieces[j].strip():
                j += 1
            marked += [j, k] if j != k else [k]
    exact = [k for k in range(1, tail + 1) if size[k] == len(content)]
    unsized = [k for k in range(tail - 1, 0, -1) if wild[k]]
    out = list(dict.fromkeys(k for k in (*marked, *exact, *unsized) if fits(k)))
    return out[:_MAX_STARTS]


def _text_of(message: Any, key: str) -> bytes | None:
    value = message.get(key) if isinstance(message, Mapping) else None
    return value.encode() if isinstance(value, str) else None


def parse_chat_logprobs(body: Mapping[str, Any]) -> ChatLogprobs | None:
    """``choices[0].logprobs.content[]`` of an OpenAI chat completion (non-streamed),
    read and checked for alignment; ``None`` when the response carries no logprobs.

    Reads ``token``, ``logprob``, ``top_logprobs[]`` (kept in the order sent) and, where
    sent (OpenAI, vLLM, llama.cpp), each token's UTF-8 ``bytes``; other keys (llama.cpp's
    ``id``) are ignored. A ``null`` alternative is dropped (it ranks last). The answer
    is then checked, and the first failure kept as :attr:`ChatLogprobs.problem` (the
    margin is then ``unexplained`` with it as the note, never a guess):
    impossible values (:func:`logprob_problem`), then the spelling: the tokens'
    concatenated bytes must equal ``message.content`` (trailing end tokens aside), or
    the reasoning (``message.reasoning_content`` or ``reasoning``, special markers
    such as ``<think>`` aside) followed by the content, which locates the content's
    first token (SGLang #25055 puts the reasoning tokens in ``logprobs.content``). A
    run of U+FFFD tokens (bytes EF BF BD standing for partial UTF-8, ollama #13497,
    vLLM #27300) spells one whole span of non-ASCII characters of the text.

    Raises:
        Nothing on wire data: a malformed body gives ``None``.
    """
    try:
        choice = body["choices"][0]
        raw = choice["logprobs"]["content"]
        if not isinstance(raw, list):
            return None
        positions, problem = _positions(raw)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    problem = problem or logprob_problem(positions)
    if problem:
        return ChatLogprobs(positions, problem=problem)
    message = choice.get("message") if isinstance(choice, Mapping) else None
    content = _text_of(message, "content")
    if content is None:
        return ChatLogprobs(positions, problem="the follow-up has no message.content to spell")
    reasoning = _text_of(message, "reasoning_content") or _text_of(message, "reasoning")
    found = _locate([p.piece for p in positions], content, reasoning)
    if found is None:
        also = " nor reasoning + content" if reasoning else ""
        joined = sum(len(p.piece) for p in positions)
        return ChatLogprobs(
            positions,
            content=content,
            problem=(
                f"the follow-up's tokens do not spell its text (message.content{also}): "
                f"{joined} token bytes against {len(content)} content bytes"
            ),
        )
    units, tail = found
    return ChatLogprobs(
        positions, content=content, units=units, tail=tail, reasoning=reasoning or b""
    )


def _as_chat(positions: Sequence[PositionLogprobs]) -> ChatLogprobs:
    """Positions given without their answer's text: checked for values, their bytes
    taken as the text (trailing empty end tokens aside), U+FFFD read literally."""
    if isinstance(positions, ChatLogprobs):
        return positions
    pos = tuple(positions)
    problem = logprob_problem(pos)
    if problem:
        return ChatLogprobs(pos, problem=problem)
    tail = len(pos)
    while tail > 0 and not pos[tail - 1].piece:
        tail -= 1
    units, at = [], 0
    for i, p in enumerate(pos[:tail]):
        units.append(_Unit(i, i, at, at + len(p.piece)))
        at += len(p.piece)
    content = b"".join(p.piece for p in pos[:tail])
    return ChatLogprobs(pos, content=content, units=tuple(units), tail=tail)


_END_TOKEN = re.compile(r"^(|<\|?[^<>\s]{1,40}\|?>)$")
"""An end-of-sequence alternative: empty (the engine hides it) or a special token such
as ``<|end▁of▁sentence|>`` or ``</s>``."""


def _rank(top: Sequence[TopLogprob], rest: bytes) -> tuple[int | None, TopLogprob | None]:
    """The alternative that continues ``rest`` (longest token wins), with its rank; when
    ``rest`` is empty (the candidate ended there), the end-of-sequence alternative."""
    best: tuple[int | None, TopLogprob | None] = (None, None)
    if not rest:
        return next(((i + 1, t) for i, t in enumerate(top) if _END_TOKEN.fullmatch(t.token)), best)
    for i, t in enumerate(top):
        longer = best[1] is None or len(t.piece) > len(best[1].piece)
        if t.piece and rest.startswith(t.piece) and longer:
            best = (i + 1, t)
    return best


def _shown(piece: bytes, token: str) -> str:
    """A token as shown in a record: its string, or its bytes decoded (``\\xNN`` for a
    partial character) when the string was truncated (llama.cpp) or is missing."""
    if token and token.encode() == piece:
        return token
    return piece.decode("utf-8", errors="backslashreplace")


REPRODUCED_NOTE = "off's follow-up reproduced the candidate"
"""The note of a divergence ``off``'s alone follow-up does not show: it reproduced the
candidate's text (``off``'s measured output is then the one that flipped)."""


def _fork(chat: ChatLogprobs, text: bytes) -> tuple[int, bytes] | str:
    """``(position, the candidate's bytes from there)`` where ``text`` leaves the
    follow-up's content, or why it cannot be placed."""
    p = 0
    for a, b in zip(chat.content, text, strict=False):
        if a != b:
            break
        p += 1
    if p == len(chat.content):
        if p == len(text):
            return REPRODUCED_NOTE
        if chat.tail >= len(chat.positions):
            return "off's follow-up ended before the divergence"
        return chat.tail, text[p:]
    unit = next(u for u in chat.units if u.end > p)
    if unit.first != unit.last:
        return (
            f"the divergence falls inside text sent as U+FFFD tokens (partial UTF-8) at "
            f"positions {unit.first}-{unit.last}: their boundaries are unknown"
        )
    return unit.first, text[unit.start :]


def align_divergence(
    positions: Sequence[PositionLogprobs],
    candidate_text: str,
    *,
    prompt_id: str,
    candidate: str,
    tau_nats: float,
    source: str = "parity",
) -> DivergenceMargin:
    """Explain where ``candidate_text`` leaves ``off``'s follow-up, token by token.

    ``positions`` is a :class:`ChatLogprobs` from :func:`parse_chat_logprobs` (its
    content's token spans checked against its text), or plain positions (their bytes
    taken as the text). A follow-up with a problem (impossible values, a truncated
    distribution, tokens that do not spell the text) is ``unexplained``, the problem
    as the note. Otherwise the first content byte where ``candidate_text`` differs
    places the divergence at the token holding it: its margin, and the rank of the
    alternative in ``off``'s top-k that continues the candidate's text.
    ``candidate_text`` may be the content alone or the reasoning text then the content
    (how parity compares a thinking output): the reading that agrees longer with the
    follow-up is taken, and a fork inside the reasoning is placed on the reasoning
    tokens when the engine sends them (SGLang #25055), else ``unexplained``. When the
    follow-up reproduces ``candidate_text`` (``off`` flipped between its measured run
    and the follow-up), when the divergence falls inside a character split over
    U+FFFD tokens, or when the candidate's token may be an alternative sent as U+FFFD,
    the divergence cannot be placed: ``unexplained``.

    Returns:
        A classified :class:`DivergenceMargin` (``unexplained`` with a ``note`` when
        it cannot be aligned).

    Raises:
        ValueError: ``tau_nats`` negative.
    """
    if tau_nats < 0:
        raise ValueError("tau_nats must be >= 0")
    base: dict[str, Any] = {
        "prompt_id": prompt_id,
        "candidate": candidate,
        "tau_nats": tau_nats,
        "source": source,
    }
    chat = _as_chat(positions)
    if chat.problem:
        return DivergenceMargin(**base, note=chat.problem)
    fork = _fork_with_reasoning(chat, candidate_text.encode())
    if isinstance(fork, str):
        return DivergenceMargin(**base, note=fork)
    return _margin_at(chat, fork, base, tau_nats)


def _agreed(a: bytes, b: bytes) -> int:
    """Length of the common prefix of ``a`` and ``b`` (bytes)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _fork_with_reasoning(chat: ChatLogprobs, text: bytes) -> tuple[int, bytes] | str:
    """The fork of ``text`` from the follow-up, ``text`` being either the content alone
    or the reasoning text then the content (how parity compares a thinking output).
    The reading under which ``text`` agrees longer with the follow-up is taken (neither,
    when both part at the first byte: unexplained, never a guess); a fork inside the
    reasoning is placed on the reasoning tokens (:func:`_reasoning_fork`)."""
    r = chat.reasoning
    alone, after = _agreed(chat.content, text), _agreed(r + chat.content, text)
    if r and alone == after == 0:
        return "the candidate's text leaves both the reasoning and the content at once"
    if not r or alone >= after:
        return _fork(chat, text)
    p = _agreed(r, text)
    if p == len(r):
        return _fork(chat, text[len(r) :])
    return _reasoning_fork(chat, p, text[p:])


def _reasoning_fork(chat: ChatLogprobs, p: int, rest: bytes) -> tuple[int, bytes] | str:
    """``(position, the candidate's bytes from there)`` for a fork at byte ``p`` of the
    follow-up's reasoning text, ``rest`` the candidate's bytes from ``p``: the reasoning
    tokens (before :attr:`ChatLogprobs.content_start`, special markers aside) spell the
    reasoning text (checked at parse), so byte ``p`` falls in one token."""
    k = chat.content_start
    if k == 0:
        return "the divergence is in the reasoning, which the follow-up's logprobs do not cover"
    pieces = [(i, pos.piece) for i, pos in enumerate(chat.positions[:k])]
    pieces = [(i, b) for i, b in pieces if not _is_marker(b)]
    if any(_FFFD in b for _, b in pieces):
        return "the divergence is in reasoning text sent as U+FFFD tokens: boundaries unknown"
    joined = b"".join(b for _, b in pieces)
    lead = len(chat.reasoning) - len(chat.reasoning.lstrip())
    at = joined.find(chat.reasoning.strip())
    if at < 0 or p < lead:
        return (
            "the divergence is in the reasoning's leading whitespace or its tokens do not spell it"
        )
    x, start = at + p - lead, 0
    for i, b in pieces:
        if start <= x < start + len(b):
            return i, joined[start:x] + rest
        start += len(b)
    return "the divergence is at the reasoning's end (its closing marker): not placed"


def _margin_at(
    chat: ChatLogprobs, fork: tuple[int, bytes], base: dict[str, Any], tau_nats: float
) -> DivergenceMargin:
    """The divergence at follow-up position ``fork[0]``, the candidate continuing with
    ``fork[1]``: ``off``'s margin there and the rank of the candidate's token."""
    i, rest = fork
    pos = chat[i]
    rank, alt = _rank(pos.top, rest)
    above = pos.top[: rank - 1] if rank else pos.top
    if rest[:1] >= b"\x80" and any(_FFFD in t.piece for t in above):
        note = f"position {i}: the candidate's token may be an alternative sent as U+FFFD"
        return DivergenceMargin(**base, token_index=i, note=note)
    margin = pos.margin_nats
    off_top = pos.top[0] if pos.top else pos
    return DivergenceMargin(
        **base,
        token_index=i,
        off_token=_shown(off_top.piece, off_top.token),
        candidate_token=(
            (_shown(alt.piece, alt.token) or "<end>")
            if alt is not None
            else (rest[:8].decode("utf-8", errors="backslashreplace") or "<end>")
        ),
        margin_nats=margin,
        candidate_rank=rank,
        candidate_logprob=alt.logprob if alt is not None else None,
        top_k=len(pos.top),
        kind=classify_divergence(margin, rank, tau_nats),
        note="" if margin is not None else _no_margin_note(pos),
    )


def _no_margin_note(pos: PositionLogprobs) -> str:
    if len(pos.top) < 2:
        return "fewer than two top_logprobs"
    return f"the runner-up sits at a floor value ({pos.top[1].logprob:.3g} nats)"


def no_margin(
    prompt_id: str, *, candidate: str, tau_nats: float, note: str, source: str = "parity"
) -> DivergenceMargin:
    """An ``unexplained`` divergence: no logprobs obtainable (``note`` says why)."""
    return DivergenceMargin(
        prompt_id=prompt_id, candidate=candidate, tau_nats=tau_nats, note=note, source=source
    )
