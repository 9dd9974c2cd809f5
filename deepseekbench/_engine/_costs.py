"""The reference engine's cost model: how long each step is made to take.

This is a *model*, paid with real waiting (``anyio.sleep``), chosen so the
embedded engine has the shape of a GPU serving engine on a CPU-only machine. It
is not a measurement of, or a claim about, any real engine. Shape:

* prefill costs ``prefill_ms_per_token`` per prompt token of the sequences
  admitted in the step (chunked prefill: new sequences join a running step);
* the target pass is a roofline (Williams, Waterman & Patterson, 2009,
  "Roofline: an insightful visual performance model", CACM 52(4)): it takes the
  longer of a *memory* time and a *compute* time.

  - memory: reading the weights once per pass, ``target_step_ms`` for a batch of
    one, plus ``k · verify_token_ms`` for ``k`` draft tokens verified in the same
    pass, times ``B ** batch_exponent`` for ``B`` sequences in the step
    (continuous batching: sublinear, 0 ≤ exponent < 1);
  - compute: ``compute_ms_per_token`` for every token position the pass scores,
    ``B · (k + 1)`` of them — each sequence's ``k`` draft tokens plus one.

  Small batches are memory-bound, so verifying drafts is nearly free; past the
  knee ``B · (k + 1) · compute_ms_per_token = memory time`` the pass is
  compute-bound and every drafted token costs as much as a real one, rejected or
  not — so speculation's gain shrinks with the batch and turns into a loss;
* a model-based draft adds ``k · draft_step_ms · B ** batch_exponent`` (a small
  head: memory-bound); prompt lookup drafts for free;
* the **verify-delay fault** ``verify_delay_ms`` (off by default) adds a fixed delay
  to every step that verifies at least one draft token, outside the roofline: the
  "unexplained per-block overhead" users find by hand (llama.cpp issue #25908: ~20 ms
  per block at 0.9 acceptance). :meth:`CostModel.step_costs`, the closed form a
  prediction reads, leaves it out, so a witness
  (:func:`~deepseekbench.witness_step_costs`) must find it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CostModel(BaseModel):
    """Step costs of the embedded engine in milliseconds (a model; see module docs).

    One step of ``B`` sequences verifying ``k`` draft tokens each costs
    ``max((target_step_ms + k·verify_token_ms)·B^batch_exponent,
    compute_ms_per_token·B·(k+1)) + k·draft_step_ms·B^batch_exponent
    + prefill_ms_per_token·prefill_tokens`` (ms), plus ``verify_delay_ms`` when
    ``k ≥ 1`` (a fault, 0 by default). Defaults make a correct ``mtp``
    (k = 1, ≈0.8 acceptance) about 1.6× faster in TPOT than ``off`` up to about
    8 concurrent sequences, and slower than ``off`` at 32 (docs/engine.md).

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
        default=0.35,
        ge=0,
        lt=1,
        description="Memory-bound step cost grows as batch_size ** batch_exponent.",
    )
    compute_ms_per_token: float = Field(
        default=1.5,
        ge=0,
        description="Compute-bound target cost per token position scored in a pass "
        "(ms/token); 0 = never compute-bound.",
    )
    verify_delay_ms: float = Field(
        default=0.0,
        ge=0,
        description="Fault: a fixed delay added to every verify step (a step checking at "
        "least one draft token), outside the cost model's closed form (ms).",
    )

    def target_ms(self, batch_size: float, draft_tokens: int) -> float:
        """The target pass alone (ms): the longer of its memory and compute times.

        ``batch_size``: sequences in the step (≥ 1; a mean batch may be fractional);
        ``draft_tokens``: the most draft tokens any sequence verified in it (tokens).
        """
        b = max(batch_size, 1)
        per_pass = self.target_step_ms + draft_tokens * self.verify_token_ms
        memory = per_pass * b**self.batch_exponent
        compute = self.compute_ms_per_token * b * (draft_tokens + 1)
        return float(max(memory, compute))

    def step_ms(
        self, batch_size: int, draft_tokens: int, prefill_tokens: int, *, model_draft: bool
    ) -> float:
        """Cost of one step (ms).

        ``batch_size``: sequences in the step (≥ 1); ``draft_tokens``: the most
        draft tokens any sequence verified in it; ``prefill_tokens``: prompt tokens
        of newly admitted sequences; ``model_draft``: drafts came from a model head
        (``False`` for prompt lookup).
        """
        cost = self.target_ms(batch_size, draft_tokens)
        if model_draft:
            scale: float = float(max(batch_size, 1)) ** self.batch_exponent
            cost += draft_tokens * self.draft_step_ms * scale
        if draft_tokens > 0:
            cost += self.verify_delay_ms  # the fault: outside the closed form
        return cost + self.prefill_ms_per_token * prefill_tokens

    def step_costs(
        self, batch_size: float, draft_tokens: int, *, model_draft: bool
    ) -> tuple[float, float]:
        """The closed form's ``(verify step, decode step)`` at ``batch_size`` sequences
        (a mean batch may be fractional) (ms): one step verifying ``draft_tokens`` draft
        tokens per sequence, and one step of ``off`` (no draft), neither with prefill
        nor the ``verify_delay_ms`` fault. What a prediction of the speedup reads
        (:class:`~deepseekbench.StepCosts`); the fault is what its witness must find.
        """
        verify = self.target_ms(batch_size, draft_tokens)
        if model_draft:
            verify += (
                draft_tokens
                * self.draft_step_ms
                * float(max(batch_size, 1)) ** (self.batch_exponent)
            )
        return verify, self.target_ms(batch_size, 0)


FAST_COSTS = CostModel(
    prefill_ms_per_token=0.0,
    target_step_ms=0.2,
    verify_token_ms=0.0,
    draft_step_ms=0.0,
    batch_exponent=0.0,
    compute_ms_per_token=0.0,
)
"""A near-free cost model for tests where timing is not the point (≈0.2 ms/step)."""
