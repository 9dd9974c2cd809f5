"""The draft/verify loop: one decode step of one sequence, with or without speculation.

A *step* is one target forward pass. Without speculation it yields one token.
With speculation a cheap proposer drafts up to ``k`` tokens, the target scores
all ``k + 1`` positions in the same pass, the longest agreeing prefix is kept and
one more token comes from the target (the correction at the first mismatch, or
the *bonus* token when every draft token was accepted). This is the loop of
Leviathan et al. (2023), "Fast Inference from Transformers via Speculative
Decoding", ICML, and of MTP/EAGLE-style decoding.

Greedy (temperature 0): a draft token is accepted iff it equals the target's
argmax, so the output is identical to plain greedy decoding. Sampling
(temperature > 0): speculative sampling — accept ``x ~ q`` with probability
``min(1, p(x)/q(x))``, else resample from ``norm(max(0, p - q))`` — which keeps
the target's distribution exactly.

Sampling order (temperature > 0), as vLLM's sampler: the target's probabilities are
raised to ``1/temperature`` and renormalised, then cut to the ``top_k`` most probable
(``top_k`` ≤ 0: no cut), then to the smallest most-probable-first set whose mass reaches
``top_p`` (at least one token), then renormalised (:func:`process`); ties rank the
smaller code point first. No penalties (presence, frequency, repetition) exist. The
draft is tempered the same way, never cut. Speculative sampling uses that processed
target ``p`` and the draft's ``q``, so it keeps ``p`` exactly.

Sampler faults, each lossy, each off by default (:class:`SamplerFaults`):

- *mis-tuned draft*: a draft token is accepted whenever the target gives it
  probability ≥ ``LOOSE_ACCEPT_PROB`` (it is "plausible"), even when it is not the
  target's choice. It accepts more, so it is faster, and it changes the output of a
  share of prompts (see docs/engine.md).
- *relaxed acceptance* (TensorRT-LLM MTP ``use_relaxed_acceptance_for_thinking``): a
  draft token is accepted outright when it is among the target's ``relaxed_topk`` most
  probable tokens and its logprob is within ``relaxed_delta`` nats of the top-1's (the
  target's raw, untempered distribution); otherwise the exact rule decides.
  Greedy and sampled.
- *argmax acceptance at T > 0* (mistral.rs PR #2424): the verify pass accepts a draft
  token only when it is the target's argmax, and its correction and bonus token are the
  argmax, whatever the temperature; only plain (non-verify) steps sample.
- *draft ignores temperature* (z-lab/dflash issue #74): the draft samples its token from its
  untempered distribution ``q_1`` while the verify computes the acceptance ratio
  ``min(1, p(x)/q_T(x))`` and the residual ``max(0, p - q_T)`` with the tempered
  ``q_T`` it expects. The proposal is then not the ``q`` of the ratio, and the output is
  no longer distributed as ``p`` (rejection sampling is exact for any proposal only
  when the ratio uses the proposal actually sampled from).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from deepseekbench._engine._model import EOS_CH, Dist
from deepseekbench._types._axes import Speculative

LOOSE_ACCEPT_PROB: Final[float] = 0.15
"""Mis-tuned verify: accept a draft token whose target probability is at least this."""

DEFAULT_DEPTH: Final[dict[Speculative, int]] = {
    Speculative.off: 0,
    Speculative.mtp: 1,
    Speculative.dspark: 4,
    Speculative.eagle3: 3,
    Speculative.draft: 3,
    Speculative.ngram: 3,
}
"""Default draft depth ``k`` (tokens drafted per verify step) for each method."""

HEAD_ORDER: Final[dict[Speculative, int]] = {
    Speculative.mtp: 5,
    Speculative.dspark: 5,
    Speculative.eagle3: 4,
    Speculative.draft: 3,
}
"""Context length (chars) of each method's draft head; ``ngram`` looks up the prompt."""

EOS_SUBSTITUTE: Final[str] = "\n"
"""What an end-of-sequence token is emitted as where it is ordinary (forced length:
``ignore_eos`` / below ``min_tokens``): a line break, in the text and the context."""

NGRAM_MAX_MATCH: Final[int] = 4
"""Longest suffix (chars) the n-gram proposer looks up in the prompt."""


class LanguageModel(Protocol):
    """What a decoder reads of a model (:class:`~deepseekbench._engine._model.ReferenceLM`,
    :class:`~deepseekbench._engine._reasoning.ReasoningLM`): target and draft
    distributions over characters and their greedy tokens."""

    def target(self, ctx: str) -> Dist:
        """The target's next-token distribution at ``ctx``."""
        ...

    def target_argmax(self, ctx: str) -> str:
        """The target's greedy token at ``ctx``."""
        ...

    def draft(self, order: int, ctx: str) -> Dist:
        """A draft head of ``order`` context characters at ``ctx``."""
        ...

    def draft_argmax(self, order: int, ctx: str) -> str:
        """That draft head's greedy token at ``ctx``."""
        ...


@dataclass(frozen=True, slots=True)
class SamplerFaults:
    """The lossy verify faults of one decoder (module docstring); all off by default.

    ``mistuned``: accept a draft token with target probability ≥ ``LOOSE_ACCEPT_PROB``.
    ``relaxed_topk``: relaxed acceptance's top-k (tokens; 0 = off); ``relaxed_delta``:
    its bound below the top-1 logprob (nats). ``argmax_acceptance``: verify by the
    target's argmax at temperature > 0. ``draft_ignores_temperature``: the draft samples
    at temperature 1 while the verify assumes its tempered distribution.
    """

    mistuned: bool = False
    relaxed_topk: int = 0
    relaxed_delta: float = 0.0
    argmax_acceptance: bool = False
    draft_ignores_temperature: bool = False


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one verify step produced for one sequence.

    ``tokens``: emitted characters in order (the last may be ``EOS_CH``);
    ``drafted``: draft tokens proposed (0 for a plain step); ``accepted``: draft
    tokens the verify step kept (0 ≤ accepted ≤ drafted).
    """

    tokens: tuple[str, ...]
    drafted: int
    accepted: int


def _temper(dist: Dist, temperature: float) -> Dist:
    """``dist`` raised to ``1/temperature`` and renormalised (temperature > 0)."""
    powered = {ch: p ** (1.0 / temperature) for ch, p in dist.items() if p > 0.0}
    total = sum(powered.values())
    return {ch: p / total for ch, p in powered.items()}


def ranked(dist: Dist) -> list[tuple[str, float]]:
    """``dist`` most probable first; ties rank the smaller code point first."""
    return sorted(dist.items(), key=lambda kv: (-kv[1], ord(kv[0])))


def process(dist: Dist, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Dist:
    """The sampling distribution: ``dist`` tempered (``temperature`` > 0), then cut to the
    ``top_k`` most probable (``top_k`` ≤ 0: no cut), then to the smallest most-probable-
    first prefix whose mass reaches ``top_p`` (0 < ``top_p`` ≤ 1; at least one token),
    renormalised. The embedded engine's order (module docstring); no penalties."""
    kept = ranked(_temper(dist, temperature))
    if top_k > 0:
        kept = kept[:top_k]
    if top_p < 1.0:
        total = sum(p for _, p in kept)
        mass, cut = 0.0, len(kept)
        for i, (_, p) in enumerate(kept):
            mass += p / total
            if mass >= top_p:
                cut = i + 1
                break
        kept = kept[:cut]
    total = sum(p for _, p in kept)
    return {ch: p / total for ch, p in kept}


def _sample(dist: Dist, rng: random.Random) -> str:
    items = sorted(dist.items())
    r = rng.random() * sum(p for _, p in items)
    acc = 0.0
    for ch, p in items:
        acc += p
        if r < acc:
            return ch
    return items[-1][0]


class Decoder:
    """Decodes one sequence step by step with ``method`` and draft depth ``k``.

    ``temperature`` 0 means greedy; ``rng`` drives sampling (seeded per request);
    ``top_k`` / ``top_p`` cut the sampling distribution (:func:`process`).
    ``mistuned`` turns on the mis-tuned verify fault, ``faults`` any of the lossy
    verify faults (:class:`SamplerFaults`). ``verify_argmax`` is the greedy
    choice of a verify pass (a draft token's check and the bonus token); default the
    target's argmax, the numerics mode's flips near-ties
    (:mod:`deepseekbench._engine._numerics`). Raises ``ValueError`` for a negative
    ``k`` or ``temperature``.
    """

    def __init__(
        self,
        lm: LanguageModel,
        method: Speculative,
        k: int,
        *,
        temperature: float,
        rng: random.Random,
        mistuned: bool = False,
        verify_argmax: Callable[[str], str] | None = None,
        top_k: int = 0,
        top_p: float = 1.0,
        faults: SamplerFaults | None = None,
    ) -> None:
        if k < 0 or temperature < 0:
            raise ValueError("draft depth and temperature must be non-negative")
        self._lm = lm
        self._method = method
        self._k = 0 if method is Speculative.off else k
        self._temperature = temperature
        self._rng = rng
        self._faults = faults or SamplerFaults()
        self._mistuned = mistuned or self._faults.mistuned
        self._verify_argmax = verify_argmax or lm.target_argmax
        self._top_k = top_k
        self._top_p = top_p

    @property
    def depth(self) -> int:
        """Draft tokens proposed per verify step at most (tokens)."""
        return self._k

    def step(self, ctx: str, budget: int, ordinary_eos: int = 0) -> StepOutcome:
        """One verify step from model context ``ctx``, emitting at most ``budget`` tokens.

        ``ordinary_eos``: an end-of-sequence token at one of the step's first that many
        positions (tokens) is an ordinary token, as under vLLM's ``ignore_eos`` /
        ``min_tokens``: it is emitted (and enters the context) as ``EOS_SUBSTITUTE``,
        drafted past, accepted, and followed by the step's next token or bonus token, so
        the step emits ``1 + accepted`` tokens. At a later position an end-of-sequence
        ends the step (and the sequence) without a bonus token.
        """
        k = min(self._k, budget - 1)
        if k <= 0:
            return StepOutcome((_emitted(self._next(ctx), 0, ordinary_eos),), 0, 0)
        drafts, qs = self._propose(ctx, k, ordinary_eos)
        if not drafts:
            return StepOutcome((_emitted(self._next(ctx), 0, ordinary_eos),), 0, 0)
        out: list[str] = []
        cur = ctx
        for i, (d, q) in enumerate(zip(drafts, qs, strict=True)):
            verdict = self._verify(d, cur, q)
            if verdict is None:
                tok = _emitted(d, i, ordinary_eos)
                out.append(tok)
                cur += tok
                if tok == EOS_CH:  # a real end of sequence: no bonus token
                    return StepOutcome(tuple(out), len(drafts), len(out))
                continue
            out.append(_emitted(verdict, i, ordinary_eos))
            return StepOutcome(tuple(out), len(drafts), len(out) - 1)
        bonus = self._next(cur, verify=True)
        out.append(_emitted(bonus, len(drafts), ordinary_eos))
        return StepOutcome(tuple(out), len(drafts), len(drafts))

    # -- internals ------------------------------------------------------------

    def _target(self, ctx: str) -> Dist:
        p = self._lm.target(ctx)
        if self._temperature == 0:
            return p
        return process(p, self._temperature, self._top_k, self._top_p)

    def _next(self, ctx: str, *, verify: bool = False) -> str:
        """One token from the target at ``ctx`` (argmax, or a sample); ``verify``: the
        token comes from a verify pass (the bonus token)."""
        if self._temperature == 0 or (verify and self._faults.argmax_acceptance):
            return self._verify_argmax(ctx) if verify else self._lm.target_argmax(ctx)
        return _sample(self._target(ctx), self._rng)

    def _propose(self, ctx: str, k: int, ordinary_eos: int) -> tuple[list[str], list[Dist]]:
        """Up to ``k`` draft tokens and the draft distribution each was taken from; an
        end-of-sequence draft at a position below ``ordinary_eos`` is drafted past
        (its context continues with ``EOS_SUBSTITUTE``), elsewhere drafting stops."""
        if self._method is Speculative.ngram:
            looked_up = _prompt_lookup(ctx, k)
            return looked_up, [{d: 1.0} for d in looked_up]
        order = HEAD_ORDER[self._method]
        drafts: list[str] = []
        qs: list[Dist] = []
        cur = ctx
        for _ in range(k):
            if self._temperature > 0:
                raw = self._lm.draft(order, cur)
                q = _temper(raw, self._temperature)
                # the fault: the draft samples untempered; the verify still expects q
                d = _sample(raw if self._faults.draft_ignores_temperature else q, self._rng)
            else:
                q = {}
                d = self._lm.draft_argmax(order, cur)
            drafts.append(d)
            qs.append(q)
            tok = _emitted(d, len(drafts) - 1, ordinary_eos)
            if tok == EOS_CH:
                break
            cur += tok
        return drafts, qs

    def _verify(self, d: str, ctx: str, q: Dist) -> str | None:
        """``None`` when draft token ``d`` is accepted at ``ctx``, else the replacement.

        ``q`` is the draft distribution ``d`` was sampled from (unused when greedy).
        """
        if self._relaxed_accepts(d, ctx):
            return None
        if self._faults.argmax_acceptance and self._temperature > 0:
            t = self._verify_argmax(ctx)
            return None if t == d else t
        if self._temperature == 0 and not self._mistuned:
            t = self._verify_argmax(ctx)
            return None if t == d else t
        p = self._target(ctx)
        pd = p.get(d, 0.0)
        if self._mistuned and pd >= LOOSE_ACCEPT_PROB:
            return None
        if self._temperature == 0:
            t = self._lm.target_argmax(ctx)
            return None if t == d else t
        qd = q.get(d, 0.0)
        if qd > 0 and self._rng.random() < min(1.0, pd / qd):
            return None
        residual = {ch: pp - q.get(ch, 0.0) for ch, pp in p.items() if pp > q.get(ch, 0.0)}
        return _sample(residual if residual else p, self._rng)

    def _relaxed_accepts(self, d: str, ctx: str) -> bool:
        """Relaxed acceptance: ``d`` among the raw target's ``relaxed_topk`` and within
        ``relaxed_delta`` nats of its top-1 (module docstring); ``False`` when off."""
        f = self._faults
        if f.relaxed_topk <= 0:
            return False
        raw = self._lm.target(ctx)
        top = ranked(raw)[: f.relaxed_topk]
        pd = raw.get(d, 0.0)
        return any(ch == d for ch, _ in top) and math.log(top[0][1] / pd) <= f.relaxed_delta


def _emitted(tok: str, position: int, ordinary_eos: int) -> str:
    """``tok`` as emitted at the step's ``position``: ``EOS_SUBSTITUTE`` for an
    end-of-sequence at a position below ``ordinary_eos`` (forced length), else itself."""
    return EOS_SUBSTITUTE if tok == EOS_CH and position < ordinary_eos else tok


def _prompt_lookup(ctx: str, k: int) -> list[str]:
    """Prompt-lookup drafting: continue the latest earlier match of the context's suffix.

    Tries suffixes of ``NGRAM_MAX_MATCH`` down to 1 characters; returns up to
    ``k`` characters that followed the most recent earlier occurrence, or ``[]``.
    """
    for n in range(min(NGRAM_MAX_MATCH, len(ctx) - 1), 0, -1):
        suffix = ctx[-n:]
        pos = ctx.rfind(suffix, 0, len(ctx) - 1)
        if pos >= 0:
            follow = ctx[pos + n : pos + n + k]
            if follow:
                return list(follow)
    return []
