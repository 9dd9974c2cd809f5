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

Alignment is by tokens, not characters: the follow-up's ``logprobs.content[]``
tokens are walked along the candidate's text (:func:`align_divergence`), over the
UTF-8 bytes of each token when the engine sends them (``bytes``), else its string.
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

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._axes import _ClosedEnum

__all__ = [
    "DEFAULT_TAU_NATS",
    "DivergenceKind",
    "DivergenceMargin",
    "PositionLogprobs",
    "TauSource",
    "TopLogprob",
    "align_divergence",
    "classify_divergence",
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
        """Top-1 minus top-2 logprob (nats); ``None`` with fewer than two alternatives."""
        if len(self.top) < 2:
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


def parse_chat_logprobs(body: Mapping[str, Any]) -> tuple[PositionLogprobs, ...] | None:
    """``choices[0].logprobs.content[]`` of an OpenAI chat completion (non-streamed),
    as :class:`PositionLogprobs`; ``None`` when the response carries no logprobs.

    Reads ``token``, ``logprob``, ``top_logprobs[]`` and, where sent (OpenAI, vLLM,
    llama.cpp), each token's UTF-8 ``bytes``; other keys (llama.cpp's ``id``) are
    ignored. Entries without a ``top_logprobs`` list fall back to the emitted token
    alone (then the margin is ``None``). Malformed entries give ``None`` (never a guess)."""
    try:
        content = body["choices"][0]["logprobs"]["content"]
        if not isinstance(content, list):
            return None
        out = []
        for e in content:
            top = tuple(
                TopLogprob(
                    token=str(t["token"]), logprob=float(t["logprob"]), token_bytes=_token_bytes(t)
                )
                for t in (e.get("top_logprobs") or ())
            )
            top = tuple(sorted(top, key=lambda t: -t.logprob))
            out.append(
                PositionLogprobs(
                    token=str(e["token"]),
                    logprob=float(e["logprob"]),
                    top=top,
                    token_bytes=_token_bytes(e),
                )
            )
        return tuple(out)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None


_END_TOKEN = re.compile(r"^(|<\|?[^<>\s]{1,40}\|?>)$")
"""An end-of-sequence alternative: empty (the engine hides it) or a special token such
as ``<|end▁of▁sentence|>`` or ``</s>``."""


def _rank(top: Sequence[TopLogprob], rest: bytes) -> tuple[int | None, TopLogprob | None]:
    """The alternative that continues ``rest`` (longest token wins), with its rank; when
    ``rest`` is empty (the candidate ended there), the end-of-sequence alternative."""
    best: tuple[int | None, TopLogprob | None] = (None, None)
    if not rest:
        return next(((i + 1, t) for i, t in enumerate(top) if _END_TOKEN.match(t.token)), best)
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

    Walks the follow-up's tokens, as UTF-8 bytes (each token's ``bytes`` when the engine
    sent them, else its string encoded), while each continues ``candidate_text``'s
    bytes; the first one that does not is the divergence: its margin, and the rank of
    the alternative in ``off``'s top-k that does continue the candidate's text. When
    the follow-up reproduces ``candidate_text`` entirely (``off`` flipped between its
    measured run and the follow-up), the divergence cannot be located here:
    ``unexplained``.

    Returns:
        A classified :class:`DivergenceMargin` (``unexplained`` with a ``note`` when
        it cannot be aligned).

    Raises:
        ValueError: ``tau_nats`` negative.
    """
    base: dict[str, Any] = {
        "prompt_id": prompt_id,
        "candidate": candidate,
        "tau_nats": tau_nats,
        "source": source,
    }
    text = candidate_text.encode()
    at = 0
    for i, pos in enumerate(positions):
        rest = text[at:]
        if not rest and not pos.piece:
            break  # off ended (an end token shown empty) where the candidate ended
        if pos.piece and rest.startswith(pos.piece):
            at += len(pos.piece)
            continue
        rank, alt = _rank(pos.top, rest)
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
            note="" if margin is not None else "fewer than two top_logprobs",
        )
    note = (
        "off's follow-up reproduced the candidate"
        if at == len(text)
        else ("off's follow-up ended before the divergence")
    )
    return DivergenceMargin(**base, note=note)


def no_margin(
    prompt_id: str, *, candidate: str, tau_nats: float, note: str, source: str = "parity"
) -> DivergenceMargin:
    """An ``unexplained`` divergence: no logprobs obtainable (``note`` says why)."""
    return DivergenceMargin(
        prompt_id=prompt_id, candidate=candidate, tau_nats=tau_nats, note=note, source=source
    )
