"""The reference engine's cost model: how long each step is made to take.

This is a *model*, paid with real waiting (``anyio.sleep``), chosen so the
embedded engine has the shape of a GPU serving engine on a CPU-only machine. It
is not a measurement of, or a claim about, any real engine. Shape:

* prefill costs ``prefill_ms_per_token`` per prompt token of the sequences
  admitted in the step (chunked prefill: new sequences join a running step);
* one decode step for a batch of one costs ``target_step_ms``; verifying ``k``
  draft tokens in the same pass adds ``k · verify_token_ms`` (≈ one target step
  when ``verify_token_ms ≪ target_step_ms``); a model-based draft adds
  ``k · draft_step_ms`` (prompt lookup drafts for free);
* continuous batching: ``B`` concurrent sequences share one step whose cost is
  multiplied by ``B ** batch_exponent`` (sublinear, 0 ≤ exponent < 1).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CostModel(BaseModel):
    """Step costs of the embedded engine in milliseconds (a model; see module docs).

    Defaults make a correct ``mtp`` (k = 1, ≈0.8 acceptance) about 1.6× faster in
    TPOT than ``off``.

    Raises:
        pydantic.ValidationError: a negative cost, a ``batch_exponent`` outside
            [0, 1), or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefill_ms_per_token: float = Field(
        default=0.05, ge=0, description="Prefill cost per prompt token (ms/token)."
    )
    target_step_ms: float = Field(
        default=8.0, ge=0, description="One target forward pass, batch of one, one position (ms)."
    )
    verify_token_ms: float = Field(
        default=0.4,
        ge=0,
        description="Extra target cost per draft token verified in a pass (ms/token).",
    )
    draft_step_ms: float = Field(
        default=0.6,
        ge=0,
        description="One draft-head forward pass, batch of one (ms per draft token).",
    )
    batch_exponent: float = Field(
        default=0.35, ge=0, lt=1, description="Step cost grows as batch_size ** batch_exponent."
    )

    def step_ms(
        self, batch_size: int, draft_tokens: int, prefill_tokens: int, *, model_draft: bool
    ) -> float:
        """Cost of one step (ms).

        ``batch_size``: sequences in the step (≥ 1); ``draft_tokens``: the most
        draft tokens any sequence verified in it; ``prefill_tokens``: prompt tokens
        of newly admitted sequences; ``model_draft``: drafts came from a model head
        (``False`` for prompt lookup).
        """
        per_pass = self.target_step_ms + draft_tokens * self.verify_token_ms
        if model_draft:
            per_pass += draft_tokens * self.draft_step_ms
        scale: float = float(max(batch_size, 1)) ** self.batch_exponent
        return per_pass * scale + self.prefill_ms_per_token * prefill_tokens


FAST_COSTS = CostModel(
    prefill_ms_per_token=0.0,
    target_step_ms=0.2,
    verify_token_ms=0.0,
    draft_step_ms=0.0,
    batch_exponent=0.0,
)
"""A near-free cost model for tests where timing is not the point (≈0.2 ms/step)."""
