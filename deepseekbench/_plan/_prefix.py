"""Shared-prefix workloads: groups of prompts that open with the same text.

Production DeepSeek traffic shares system prompts and conversation history, and
leans on the engine's prefix cache; speculation can silently disable that cache
(vllm-project/vllm #54360). :class:`SharedPrefix` describes ``groups`` groups,
each with one shared prefix of ``prefix_tokens`` tokens followed by
``suffixes`` unique suffixes of ``suffix_tokens`` tokens (the shape of SGLang's
``generated-shared-prefix`` dataset and GuideLLM's ``prefix_tokens``/``prefix_count``
options, written here); ``turns`` > 1 makes each item a conversation whose later
user turns (``suffix_tokens`` each) are sent after the model's own answers, so its
history grows as a chat does (the executor's ``converse``).

Token-true as synthetic prompts are: each prefix is cut at the longest word
boundary whose count is at most ``prefix_tokens``; each first turn (prefix, a
blank line, suffix) at the longest boundary whose count is at most
``prefix_tokens + suffix_tokens``; each item carries that count in
``prompt_tokens``, checked against the cell's bucket as any workload is.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._plan._workload import MAX_CONTEXT_TOKENS, WorkloadItem, _fit, generated_text
from deepseekbench._types._tokens import TokenCounter

__all__ = ["SHARED_PREFIX_CATEGORY", "SharedPrefix", "shared_prefix_items"]

SHARED_PREFIX_CATEGORY = "shared_prefix"
"""The category every shared-prefix item carries."""

_SEP = "\n\n"


class SharedPrefix(BaseModel):
    """``groups`` × a shared prefix of ``prefix_tokens`` tokens × ``suffixes`` unique suffixes.

    Attributes:
        groups: distinct prefixes (1..1,000).
        prefix_tokens: length of each group's prefix (tokens).
        suffixes: items per group, each with its own suffix (1..10,000).
        suffix_tokens: length of each suffix and of each later turn (tokens).
        turns: user turns per item (1..32); later turns follow the route's own answers.
        seed: text seed (the same seed gives the same prompts).

    Raises:
        pydantic.ValidationError: a count or length out of range, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    groups: int = Field(ge=1, le=1_000, description="distinct shared prefixes")
    prefix_tokens: int = Field(
        ge=1, le=MAX_CONTEXT_TOKENS, description="shared prefix length, tokens"
    )
    suffixes: int = Field(ge=1, le=10_000, description="unique suffixes per group")
    suffix_tokens: int = Field(ge=1, le=MAX_CONTEXT_TOKENS, description="suffix length, tokens")
    turns: int = Field(default=1, ge=1, le=32, description="user turns per item")
    seed: int = 0

    @property
    def n_items(self) -> int:
        """Items generated: ``groups · suffixes``."""
        return self.groups * self.suffixes


async def _text_of(
    counter: TokenCounter, seed: int, target: int, head: str = ""
) -> tuple[str, int]:
    """``head`` + generated words cut at the longest boundary counting ≤ ``target`` tokens."""
    n_words = target + 16
    text = generated_text(seed, n_words)
    while (await counter.count([head + text]))[0] < target:
        n_words *= 2
        text = generated_text(seed, n_words)
    if not head:
        return await _fit(counter, text.split(" "), target)
    words = (head + text).split(" ")
    fixed = len(head.split(" ")) - 1  # the head's words, its last one joined to the text
    kept, n = await _fit(counter, words, target)
    if len(kept.split(" ")) <= fixed:  # the suffix did not fit at all: keep one word
        kept = " ".join(words[: fixed + 1])
        n = (await counter.count([kept]))[0]
    return kept, n


async def shared_prefix_items(
    counter: TokenCounter, spec: SharedPrefix
) -> tuple[WorkloadItem, ...]:
    """The items of ``spec``, groups interleaved (suffix 0 of every group, then suffix 1, …)
    so a group's prefix returns while other groups' prompts are in the cache.

    Item ids are ``prefix-g<group>-s<suffix>``; ``category`` is
    :data:`SHARED_PREFIX_CATEGORY`; ``prompt_tokens`` the first turn's count.

    Raises:
        TokenizeError, LiveGateError: as ``counter.count``.
    """
    prefixes = [
        (await _text_of(counter, spec.seed * 1_000_003 + 7_919 * g, spec.prefix_tokens))[0]
        for g in range(spec.groups)
    ]
    items: list[WorkloadItem] = []
    target = spec.prefix_tokens + spec.suffix_tokens
    for q in range(spec.suffixes):
        for g, prefix in enumerate(prefixes):
            base = (spec.seed * 1_000_003 + g) * 100_003 + q
            first, tokens = await _text_of(counter, base, target, head=prefix + _SEP)
            later = [
                (await _text_of(counter, base * 31 + t, spec.suffix_tokens))[0]
                for t in range(1, spec.turns)
            ]
            items.append(
                WorkloadItem(
                    id=f"prefix-g{g}-s{q}",
                    turns=(first, *later),
                    category=SHARED_PREFIX_CATEGORY,
                    source="synthetic:shared_prefix",
                    prompt_tokens=tokens,
                )
            )
    return tuple(items)
