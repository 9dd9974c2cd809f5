"""A given output scored by ``off`` in one forward pass (teacher forcing).

Teacher forcing feeds an output's tokens to the target as part of the prompt and reads
the target's distribution at every position in one forward pass: the shape of a
speculative verify pass (k + 1 query tokens at once), not of one-token decode. The wire
is vLLM's chat completion ``prompt_logprobs`` (``docs/rows-and-gate.md``, "Teacher
forcing"); :mod:`deepseekbench._execute._teacher_force` sends it and builds these records.

All log-probabilities are natural-log (**nats**, <= 0).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._margin import TopLogprob

__all__ = ["LogprobsKind", "ScoredBy", "ScoredOutput", "ScoredPosition"]

LogprobsKind = Literal["raw", "processed", "unknown"]
"""Whether served logprobs are the model's own (``raw``: before temperature, top-k,
top-p and penalties; vLLM ``--logprobs-mode raw_logprobs``), after those (``processed``),
or not known (``unknown``)."""

ScoredBy = Literal["token_ids", "text"]
"""How an output's positions were found: ``token_ids``, ``off`` scored the token ids the
route sampled (the engine returned them; positions align by construction), or ``text``,
``off`` scored the output's text re-tokenized (a sampled non-canonical tokenization then
shifts positions)."""

_CONFIG = ConfigDict(frozen=True, extra="forbid")


class ScoredPosition(BaseModel):
    """``off``'s distribution at one position of a forced output.

    ``token`` / ``token_bytes``: the forced token as the engine tokenized the text (its
    UTF-8 bytes; the bytes of all positions concatenated spell the output exactly).
    ``logprob``: its raw model logprob (nats, <= 0). ``rank``: its 1-based rank in the
    full distribution when the engine says (vLLM's ``rank``), else ``None``. ``top``: the
    top-k alternatives (nats), most likely first (the forced token among them when it
    ranks within k). ``token_id`` / ``top_ids``: the forced token's id and the
    alternatives' ids in ``top``'s order, where the engine keyed them by id (vLLM's
    ``prompt_logprobs`` does); the witness then matches the token to its category by id,
    not by bytes (distinct tokens can decode to the same bytes, e.g. U+FFFD pieces).
    """

    model_config = _CONFIG

    token: str
    token_bytes: bytes
    logprob: float = Field(le=0.0)
    rank: int | None = Field(default=None, ge=1)
    top: tuple[TopLogprob, ...] = ()
    token_id: int | None = None
    top_ids: tuple[int, ...] | None = None

    @property
    def margin_nats(self) -> float | None:
        """Top-1 minus top-2 logprob (nats, >= 0), ``None`` with fewer than two alternatives."""
        if len(self.top) < 2:
            return None
        return self.top[0].logprob - self.top[1].logprob


class ScoredOutput(BaseModel):
    """One output scored in one pass: one :class:`ScoredPosition` per output token, in order.

    ``note``: why positions are missing or partial (``""`` when complete). ``top_k``: the
    alternatives asked per position. ``logprobs_kind``: see :data:`LogprobsKind`.
    ``scored_by``: see :data:`ScoredBy`.
    """

    model_config = _CONFIG

    positions: tuple[ScoredPosition, ...]
    note: str = ""
    top_k: int = Field(ge=0)
    logprobs_kind: LogprobsKind
    scored_by: ScoredBy = "text"

    @property
    def text_bytes(self) -> bytes:
        """The forced tokens' bytes concatenated (UTF-8; the scored output's text)."""
        return b"".join(p.token_bytes for p in self.positions)
