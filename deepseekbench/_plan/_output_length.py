"""Output length: how long each measured answer is, and why.

Acceptance depends on the text decoded, so a benchmark of speculative decoding
must decode the text the model would write. Two settings decide it:

* :data:`OutputLengthMode` (``workload.output_length``): ``pinned`` (default) —
  a calibration pass on the ``off`` route records each prompt's natural length
  (to EOS, under the cap) and every route then decodes exactly that many tokens
  (``max_tokens`` = the natural length, plus the dialect's pinned controls:
  ``min_tokens`` one below it, so every earlier end is masked and the natural
  one, which vLLM counts as a token, is not; every route does the same work and
  none decodes past the model's own end); ``natural`` — stop at EOS under the cap; ``forced`` —
  decode to the cap past EOS (the old ``reach_max_tokens = true``): allowed,
  but rows then carry ``tokens_past_eos`` and the scorecard says "acceptance
  measured on text past EOS". AIPerf's SPEED-Bench guide advises against
  ``ignore_eos`` for acceptance measurements; ai-dynamo/dynamo #12918 reports a
  correct MTP change nearly rejected on such traffic.
* :class:`OutputLength` (``workload.output_tokens``): the cap per item, drawn
  from a distribution (fixed, uniform, normal, lognormal, or the dataset's
  reference answers), as vLLM's ``random`` dataset draws ``output_len`` with a
  ``range_ratio`` and ShareGPT benchmarks take the recorded answer's length.

Draws use ``random.Random`` seeded from the plan seed and the cell, so every
route of a cell gets the same caps, and a plan reproduces them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepseekbench._plan._workload import MAX_CONTEXT_TOKENS, WorkloadItem

__all__ = [
    "OutputLength",
    "OutputLengthMode",
    "with_output_tokens",
]

OutputLengthMode = Literal["pinned", "natural", "forced"]
"""``workload.output_length``: see the module docstring."""


class OutputLength(BaseModel):
    """A distribution of output caps (``max_tokens`` per item, tokens).

    * ``fixed``: every item ``tokens``;
    * ``uniform``: integers uniform in ``[tokens·(1 − range_ratio),
      tokens·(1 + range_ratio)]`` (vLLM ``random`` dataset's ``range_ratio``);
    * ``normal``: ``round(N(tokens, (spread·tokens)²))``;
    * ``lognormal``: a lognormal with mean ``tokens`` and standard deviation
      ``spread·tokens`` (``σ² = ln(1 + spread²)``, ``μ = ln(tokens) − σ²/2``),
      the long right tail of chat answers;
    * ``dataset``: each item's reference answer, counted with the plan's
      tokenizer (ShareGPT ``gpt`` turns, a JSONL ``"reference"``); items without
      one get ``tokens``.

    Every draw is clipped to ``[1, cell max_tokens]``. ``seed`` (default: the
    plan's ``seed``) seeds ``random.Random`` together with the cell's position,
    so the same plan draws the same caps for every route.

    Raises:
        pydantic.ValidationError: ``tokens`` below 1, ``range_ratio`` outside
            [0, 1), ``spread`` outside [0, 4], a ratio/spread given for a
            distribution that does not use it, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    distribution: Literal["fixed", "uniform", "normal", "lognormal", "dataset"] = "fixed"
    tokens: int = Field(
        ge=1, le=MAX_CONTEXT_TOKENS, description="target (mean) output length, tokens"
    )
    range_ratio: float = Field(default=0.0, ge=0.0, lt=1.0, description="uniform half-width / mean")
    spread: float = Field(default=0.0, ge=0.0, le=4.0, description="std / mean (normal, lognormal)")
    seed: int | None = Field(default=None, description="None: the plan's seed")

    @model_validator(mode="after")
    def _fits(self) -> OutputLength:
        if self.range_ratio and self.distribution != "uniform":
            raise ValueError("range_ratio is only used with distribution='uniform'")
        if self.spread and self.distribution not in ("normal", "lognormal"):
            raise ValueError("spread is only used with distribution='normal' or 'lognormal'")
        return self

    def draw(self, n: int, *, seed: int, cap: int) -> list[int]:
        """``n`` caps (tokens, each in ``[1, cap]``), reproducible from ``seed``.

        ``dataset`` draws ``tokens`` for each (see :func:`with_output_tokens`).

        Raises:
            ValueError: ``n`` negative or ``cap`` below 1.
        """
        if n < 0 or cap < 1:
            raise ValueError("n must be >= 0 and cap >= 1")
        rng = random.Random(seed)
        mean = self.tokens
        if self.distribution in ("fixed", "dataset"):
            raw = [float(mean)] * n
        elif self.distribution == "uniform":
            lo, hi = mean * (1 - self.range_ratio), mean * (1 + self.range_ratio)
            raw = [float(rng.randint(max(1, round(lo)), max(1, round(hi)))) for _ in range(n)]
        elif self.distribution == "normal":
            raw = [rng.gauss(mean, self.spread * mean) for _ in range(n)]
        else:
            sigma2 = math.log1p(self.spread**2)
            mu = math.log(mean) - sigma2 / 2
            raw = [rng.lognormvariate(mu, math.sqrt(sigma2)) for _ in range(n)]
        return [min(cap, max(1, round(x))) for x in raw]


def draw_seed(plan_seed: int, length: OutputLength, cell_index: int) -> int:
    """The seed of a cell's draws: the distribution's own seed (else the plan's),
    mixed with the cell's position so cells draw independently."""
    base = length.seed if length.seed is not None else plan_seed
    return base * 1_000_003 + 7919 * cell_index + 23


def with_output_tokens(
    items: Sequence[WorkloadItem],
    length: OutputLength,
    *,
    seed: int,
    cap: int,
    reference_tokens: Sequence[int | None] | None = None,
) -> tuple[WorkloadItem, ...]:
    """``items`` with ``output_tokens`` set to one drawn cap each (tokens, ≤ ``cap``).

    Args:
        items: a cell's items, in order (the ``i``-th draw goes to item ``i``).
        length: the distribution.
        seed: from :func:`draw_seed`.
        cap: the cell's ``max_tokens`` (tokens).
        reference_tokens: per item, its reference answer's token count
            (``dataset`` only; ``None`` entries fall back to ``length.tokens``).

    Raises:
        ValueError: ``reference_tokens`` given with another length than ``items``.
    """
    draws = length.draw(len(items), seed=seed, cap=cap)
    if length.distribution == "dataset" and reference_tokens is not None:
        if len(reference_tokens) != len(items):
            raise ValueError("reference_tokens must have one entry per item")
        draws = [
            d if ref is None else min(cap, max(1, ref))
            for d, ref in zip(draws, reference_tokens, strict=True)
        ]
    return tuple(
        item.model_copy(update={"output_tokens": (d,)})
        for item, d in zip(items, draws, strict=True)
    )
