"""Decoded reasoning: the engine's reasoning text as something the model decodes.

By default the engine streams a fixed reasoning text, one token per step
(:func:`deepseekbench._engine._server.reasoning_text`). With
``EngineConfig.decoded_reasoning`` the same text is *decoded*: :class:`ReasoningLM` is
a target that has learnt it exactly, built as the answer's target is (an exact
continuation with weight ``LAMBDA_EXACT`` > 0.5 interpolated with the corpus n-gram,
:mod:`deepseekbench._engine._model`), so greedy decoding, plain or speculative and
exact, reproduces the fixed text and then ends; the draft heads are the corpus n-grams.
A lossy verify (relaxed acceptance with ``relaxed_scope="reasoning"``, TensorRT-LLM's
``use_relaxed_acceptance_for_thinking``) then changes the reasoning and nothing else:
the answer's model context never includes the reasoning.
"""

from __future__ import annotations

from typing import Final

from deepseekbench._engine._model import EOS_CH, LAMBDA_EXACT, Dist, ReferenceLM, argmax

__all__ = ["REASONING_PREFIX", "ReasoningLM", "reasoning_cap"]

REASONING_PREFIX: Final[str] = f"{EOS_CH}<think>"
"""The model context the reasoning starts from (the reasoning so far follows it)."""


def reasoning_cap(text: str) -> int:
    """Most reasoning tokens decoded (twice the fixed text: a lossy verify that leaves
    the learnt text may never end it), tokens."""
    return 2 * len(text) + 1


class ReasoningLM:
    """The target and draft heads of the reasoning phase for one fixed ``text``.

    ``target(ctx)``: at a context ``REASONING_PREFIX + done`` where ``done`` is a prefix
    of ``text``, the next character of ``text`` (end-of-sequence after it) with weight
    ``LAMBDA_EXACT`` plus ``1 - LAMBDA_EXACT`` of the corpus n-gram; elsewhere the
    n-gram alone. ``draft(order, ctx)``: the corpus n-gram of ``order`` characters.
    Distributions sum to 1; nothing raises on any context.
    """

    def __init__(self, base: ReferenceLM, text: str) -> None:
        self.base = base
        self.text = text

    def target(self, ctx: str) -> Dist:
        """The reasoning target at ``ctx`` (class docstring)."""
        backoff = self.base.target(ctx)
        done = ctx[len(REASONING_PREFIX) :]
        if not ctx.startswith(REASONING_PREFIX) or not self.text.startswith(done):
            return backoff
        nxt = self.text[len(done)] if len(done) < len(self.text) else EOS_CH
        out = {ch: (1.0 - LAMBDA_EXACT) * p for ch, p in backoff.items()}
        out[nxt] = out.get(nxt, 0.0) + LAMBDA_EXACT
        return out

    def target_argmax(self, ctx: str) -> str:
        """Greedy reasoning token (the learnt text's next character while on it)."""
        return argmax(self.target(ctx))

    def draft(self, order: int, ctx: str) -> Dist:
        """The corpus draft head of ``order`` characters (raises ``ValueError`` out of 1..6)."""
        return self.base.draft(order, ctx)

    def draft_argmax(self, order: int, ctx: str) -> str:
        """The draft head's greedy token."""
        return argmax(self.draft(order, ctx))
