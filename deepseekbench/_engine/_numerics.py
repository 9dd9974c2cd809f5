"""The embedded engine's numerics mode and its served log-probabilities.

Real GPU engines verify k draft tokens in one target pass over k + 1 query tokens,
while plain decoding runs the target on one; the two computations round differently,
and where the target's top two tokens are nearly tied the argmax may flip (vLLM RFC
#54506). The numerics mode reproduces exactly that, deterministically:

- **Near-ties in the model.** Past :data:`NEAR_TIE_MIN_CONTEXT` characters of model
  context (near-ties are a long-output effect; the short parity answers never meet
  one), at a hashed share of positions (``crc32`` of the model context; one in
  :data:`NEAR_TIE_EVERY`), the target's runner-up is lifted to within
  a margin of the top-1: margin = ``(h mod 1000 + 1) / 1000 × NEAR_TIE_MAX_NATS``
  (0 < margin ≤ :data:`NEAR_TIE_MAX_NATS` nats; a runner-up already closer keeps its
  own, smaller margin). The top-1 is unchanged, so ``off``
  decodes exactly what it decodes without the mode.
- **Verify rounds differently.** A verify pass (a draft token's check and the bonus
  token) adds :data:`VERIFY_PERTURBATION_NATS` (> :data:`NEAR_TIE_MAX_NATS`) to the
  runner-up's logit at those positions only, so speculative decoding flips exactly
  the near-ties and nothing else: every divergence it causes is a ``near_tie`` with a
  margin ≤ :data:`NEAR_TIE_MAX_NATS` (0.03 nats, under the default τ of 0.05).

Log-probabilities are served in OpenAI chat's format (``choices[].logprobs.content[]``
with ``token``, ``logprob``, ``bytes`` and ``top_logprobs[]``), one entry per generated
character (the engine's token), from the target distribution in use (natural log).
Prompt log-probabilities (teacher forcing) are served in vLLM's format (a top-level
``prompt_logprobs`` list, :func:`prompt_logprobs`), computed as one pass over the prompt
and the forced output: the verify shape, so in numerics mode the forced output's
near-ties carry the verify perturbation (:meth:`NumericsLM.verify_target`), and
scoring ``off``'s own greedy output in one pass ranks its near-tie tokens second.
All served logprobs are raw (before temperature), as vLLM's ``raw_logprobs``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

from deepseekbench._engine._model import EOS_CH, Dist, ReferenceLM
from deepseekbench._engine._tokenizer import TOKENIZER

__all__ = [
    "NEAR_TIE_EVERY",
    "NEAR_TIE_MAX_NATS",
    "NEAR_TIE_MIN_CONTEXT",
    "VERIFY_PERTURBATION_NATS",
    "NumericsLM",
    "chat_logprobs",
    "prompt_logprobs",
]

NEAR_TIE_EVERY: Final[int] = 512
"""One model context in this many (by ``crc32``) carries a near-tie in numerics mode."""

NEAR_TIE_MIN_CONTEXT: Final[int] = 128
"""Model contexts shorter than this (characters: prompt and output) carry no near-tie."""

NEAR_TIE_MAX_NATS: Final[float] = 0.03
"""Largest top-1 minus top-2 margin of a numerics-mode near-tie (nats)."""

VERIFY_PERTURBATION_NATS: Final[float] = 0.04
"""What a multi-token verify pass adds to the runner-up's logit at a near-tie (nats)."""

MAX_TOP_LOGPROBS: Final[int] = 20
"""The most ``top_logprobs`` a request may ask for (OpenAI's limit)."""


def _hash(ctx: str) -> int:
    return zlib.crc32(ctx.encode("utf-8"))


def _ranked(dist: Dist) -> list[tuple[str, float]]:
    """``dist`` most probable first; ties go to the smallest code point (as ``argmax``)."""
    return sorted(dist.items(), key=lambda kv: (-kv[1], ord(kv[0])))


class NumericsLM:
    """The target of ``base`` with numerics-mode near-ties, and its verify-pass argmax.

    ``target(ctx) -> Dist`` (sums to 1), ``target_argmax(ctx)`` (one-token decode: the
    top-1, unchanged from ``base``), ``verify_argmax(ctx)`` (the runner-up at a
    near-tie, else the top-1), ``near_tie_margin(ctx)`` (nats, or ``None``).
    """

    def __init__(self, base: ReferenceLM) -> None:
        self.base = base
        self.target = lru_cache(maxsize=100_000)(self._target)

    def near_tie_margin(self, ctx: str) -> float | None:
        """The margin (nats) of the near-tie at ``ctx``, or ``None`` when there is none."""
        h = _hash(ctx)
        if len(ctx) < NEAR_TIE_MIN_CONTEXT or h % NEAR_TIE_EVERY:
            return None
        if len(self.base.target(ctx)) < 2:
            return None
        return ((h // NEAR_TIE_EVERY) % 1000 + 1) / 1000 * NEAR_TIE_MAX_NATS

    def _target(self, ctx: str) -> Dist:
        dist = self.base.target(ctx)
        margin = self.near_tie_margin(ctx)
        if margin is None:
            return dist
        ranked = _ranked(dist)
        lifted = dict(dist)
        # only ever raised: a runner-up already closer than ``margin`` stays where it is
        # (lowering it could hand rank 2 to the third token)
        lifted[ranked[1][0]] = max(ranked[1][1], ranked[0][1] * math.exp(-margin))
        total = sum(lifted.values())
        return {ch: p / total for ch, p in lifted.items()}

    def verify_target(self, ctx: str) -> Dist:
        """The target as a verify pass computes it: at a near-tie the runner-up's logit
        raised by :data:`VERIFY_PERTURBATION_NATS` (renormalised; it then ranks first,
        the token :meth:`verify_argmax` picks), elsewhere :meth:`target` unchanged."""
        dist = self.target(ctx)
        if self.near_tie_margin(ctx) is None:
            return dist
        runner_up = _ranked(dist)[1][0]
        lifted = dict(dist)
        lifted[runner_up] *= math.exp(VERIFY_PERTURBATION_NATS)
        total = sum(lifted.values())
        return {ch: p / total for ch, p in lifted.items()}

    def target_argmax(self, ctx: str) -> str:
        """One-token decode's choice: ``base``'s argmax (the near-tie keeps its top-1)."""
        return self.base.target_argmax(ctx)

    def verify_argmax(self, ctx: str) -> str:
        """A verify pass's choice: the runner-up at a near-tie (its logit raised by
        :data:`VERIFY_PERTURBATION_NATS`), else the top-1."""
        if self.near_tie_margin(ctx) is None:
            return self.base.target_argmax(ctx)
        return _ranked(self.target(ctx))[1][0]


def _entry(ch: str, lp: float) -> dict[str, Any]:
    shown = "" if ch == EOS_CH else ch
    return {"token": shown, "logprob": lp, "bytes": list(shown.encode("utf-8"))}


def chat_logprobs(dist_of: Any, ctx: str, text: str, top_logprobs: int) -> dict[str, Any]:
    """OpenAI chat ``logprobs`` for ``text`` generated after model context ``ctx``:
    ``{"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}``, one entry per
    character, logprobs in nats; ``dist_of(ctx) -> Dist`` is the target in use.

    Raises:
        ValueError: ``top_logprobs`` outside 0..:data:`MAX_TOP_LOGPROBS`.
    """
    if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top_logprobs must be in 0..{MAX_TOP_LOGPROBS}")
    content = []
    for i, ch in enumerate(text):
        dist: Dist = dist_of(ctx + text[:i])
        p = dist.get(ch, 0.0)
        entry = _entry(ch, math.log(p) if p > 0 else -9999.0)
        entry["top_logprobs"] = [
            _entry(c, math.log(q)) for c, q in _ranked(dist)[:top_logprobs] if q > 0
        ]
        content.append(entry)
    return {"content": content}


_FLOOR_LOGPROB: Final[float] = -9999.0
"""What vLLM serves for a probability of 0 (``clamp_prompt_logprobs``), nats."""


def _prompt_entry(dist: Dist, ch: str, top_k: int) -> dict[str, Any]:
    """vLLM's ``{token_id: {logprob, rank, decoded_token}}`` for prompt token ``ch``: the
    forced token first (its 1-based rank in the whole distribution), then the top-k."""
    ranked = [(c, q) for c, q in _ranked(dist) if q > 0]
    place = next((i for i, (c, _) in enumerate(ranked) if c == ch), None)
    p = dist.get(ch, 0.0)
    forced_key, forced_shown = (str(TOKENIZER.encode(ch)[0]), ch) if ch != EOS_CH else ("0", "")
    entry = {
        forced_key: {
            "logprob": math.log(p) if p > 0 else _FLOOR_LOGPROB,
            "rank": place + 1 if place is not None else len(ranked) + 1,
            "decoded_token": forced_shown,
        }
    }
    for i, (c, q) in enumerate(ranked[:top_k]):
        key, shown = (str(TOKENIZER.encode(c)[0]), c) if c != EOS_CH else ("0", "")
        entry.setdefault(key, {"logprob": math.log(q), "rank": i + 1, "decoded_token": shown})
    return entry


def prompt_logprobs(
    prompt: str,
    *,
    forced_from: int,
    model_ctx: str,
    template_dist: Callable[[str], Dist],
    forced_dist: Callable[[str], Dist],
    top_k: int,
) -> list[dict[str, Any] | None]:
    """vLLM's top-level ``prompt_logprobs`` for ``prompt`` (one entry per character, the
    first ``None``), all positions in one pass: positions before ``forced_from`` (the
    chat template and the messages) from ``template_dist(prompt[:i])``, the forced output
    ``prompt[forced_from:]`` from ``forced_dist(model_ctx + prompt[forced_from:i])``
    (the model context it continues; the verify shape). Logprobs in nats, raw; a
    probability of 0 reads ``-9999.0`` as vLLM clamps it.

    Raises:
        ValueError: ``top_k`` outside 0..:data:`MAX_TOP_LOGPROBS`.
    """
    if not 0 <= top_k <= MAX_TOP_LOGPROBS:
        raise ValueError(f"prompt_logprobs must be in 0..{MAX_TOP_LOGPROBS}")
    out: list[dict[str, Any] | None] = [None]
    for i in range(1, len(prompt)):
        if i < forced_from:
            dist = template_dist(prompt[:i])
        else:
            dist = forced_dist(model_ctx + prompt[forced_from:i])
        out.append(_prompt_entry(dist, prompt[i], top_k))
    return out
