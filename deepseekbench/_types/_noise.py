"""The noise model's data: ``off``'s own margins over a whole output (pure data).

A correct speculative engine may flip a token only where ``off``, the target, is nearly
indifferent: a verify pass over k+1 query tokens rounds differently from one-token decode
(vLLM RFC #54506), and the argmax flips only where the top-1 minus top-2 margin is below
that rounding shift. So the noise model counts, in ``off``'s own outputs, the positions
where it could (the near-tie *opportunities*), and measures the shift itself:

- :class:`OffProfile`: one compared ``off`` output followed up alone (concurrency 1: a
  margin never depends on batching), its margins at every position (nats, top-1 minus
  top-2 of ``off``'s decode logprobs), the decode-vs-one-pass shifts (nats) where the
  engine scored the same output in one forward pass (teacher forcing: the verify
  shape), and whether ``off``'s alone run reproduced its measured (possibly batched)
  output.

Definitions: docs/rows-and-gate.md ("Parity within noise"). Produced by
:mod:`deepseekbench._execute._forensics`, judged by :mod:`deepseekbench._analysis._divergence`.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PROFILE_MARGIN_CAP_NATS", "OffProfile", "OnePassFlip"]

PROFILE_MARGIN_CAP_NATS: Final[float] = 1.0
"""Largest margin (nats) an :class:`OffProfile` keeps position by position: τ is far
below it (the default is 0.05 nats), so a profile can be re-read against any plan τ up
to 1 nat; larger margins are only counted (``n_tokens``)."""

_CONFIG = ConfigDict(frozen=True, extra="forbid")


class OnePassFlip(BaseModel):
    """A position where ``off``'s one-pass score (teacher forcing) ranks another token
    first than its decode did: the verify shape, shown directly.

    Attributes:
        index: 0-based token position in ``off``'s output.
        token: the one-pass top-1 token (text; bytes decoded with ``\\xNN`` escapes).
        decode_margin_nats: the decode top-1 minus top-2 margin there (nats, >= 0).
    """

    model_config = _CONFIG

    index: int = Field(ge=0)
    token: str
    decode_margin_nats: float | None = Field(default=None, ge=0)


class OffProfile(BaseModel):
    """``off``'s margins over one whole compared output, from one follow-up sent alone.

    Attributes:
        n_tokens: positions of ``off``'s alone follow-up that spell its measured output
            (tokens); the whole output when ``reproduced``, else up to the fork.
        margins: ``(token index, margin nats)`` of every position whose top-1 minus
            top-2 margin is at most :data:`PROFILE_MARGIN_CAP_NATS` (in order).
        reproduced: ``off``'s alone follow-up spelled its measured output exactly
            (``False``: ``off`` itself flipped between the two, e.g. under batching).
        fork_index, fork_margin_nats: where the alone follow-up left the measured
            output, and ``off``'s margin there (nats); ``None`` when reproduced.
        shifts_nats: decode-vs-one-pass shift of the margin between the decode's top
            two tokens, at every position where the engine scored both (nats, >= 0,
            zeros included); empty when the engine cannot score in one pass.
        one_pass: positions where the one-pass top-1 differs from the decode's.
        one_pass_note: why no one-pass scoring is recorded (``""`` when it is).
        note: why no margins are recorded (``""`` when they are).
    """

    model_config = _CONFIG

    n_tokens: int = Field(default=0, ge=0)
    margins: tuple[tuple[int, float], ...] = ()
    reproduced: bool = True
    fork_index: int | None = Field(default=None, ge=0)
    fork_margin_nats: float | None = Field(default=None, ge=0)
    shifts_nats: tuple[float, ...] = ()
    one_pass: tuple[OnePassFlip, ...] = ()
    one_pass_note: str = ""
    note: str = ""

    @property
    def measured(self) -> bool:
        """Whether margins were obtained (no ``note``)."""
        return not self.note

    def opportunities(self, tau_nats: float, before: int | None = None) -> int:
        """Near-tie opportunities: positions with margin ≤ ``tau_nats`` (nats), only
        those at index ≤ ``before`` when given (the fork of a divergence)."""
        return sum(1 for i, m in self.margins if m <= tau_nats and (before is None or i <= before))

    def one_pass_top1(self, index: int | None) -> str | None:
        """The one-pass top-1 token at ``index`` when it differs from the decode's."""
        return next((f.token for f in self.one_pass if f.index == index), None)
