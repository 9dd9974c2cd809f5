"""Speculative-decoding acceptance: one engine-neutral record and the helpers to fill it.

Each engine's reader lives in its adapter (``deepseekbench/_dialects/``); this
module holds what they share.

Definitions (used for every engine; see ``docs/measurement.md``):

* ``accepted_token_ratio`` = accepted draft tokens / drafted tokens (the
  "acceptance rate"; draft tokens only, the bonus token is not counted).
* ``acceptance_length`` = 1 + accepted draft tokens / verify steps (tokens
  emitted per target-model verify step, bonus token included). Where the steps
  are not reported, the engine's own mean acceptance length is used if it
  reports one (vLLM ``mean_acceptance_length``, SGLang ``spec_accept_length``,
  both defined the same way by the engines).

* ``acceptance_by_position`` = for draft position k = 1 .. depth, the fraction
  of verify steps whose k-th draft token was accepted (a draft token is
  accepted only if every earlier one was, so the fractions never rise with k).
  Same definition as vLLM's ``vllm:spec_decode_num_accepted_tokens_per_pos``
  divided by ``vllm:spec_decode_num_drafts`` (vLLM ``v1/spec_decode/metrics.py``),
  and as SGLang's per-request ``spec_correct_drafts_histogram`` (steps by
  number of correct drafts; position k = steps with >= k correct / steps).

Unknown is ``None``, never 0. OpenAI Predicted Outputs counts
(``accepted_prediction_tokens``) are another statistic and never read here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._axes import AcceptanceScope, Dialect

__all__ = [
    "AcceptanceRecord",
    "dense_histogram",
    "positions_from_histogram",
    "positions_from_steps",
]


def _count(value: Any) -> int | None:
    """A non-negative integer count, or ``None`` for anything else (bool, NaN, negative)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def _real(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


class AcceptanceRecord(BaseModel):
    """Engine-neutral speculative acceptance figures for a request or a server window.

    Counts are in tokens (``verify_steps`` in steps); ``None`` = not reported.
    Build it with :meth:`from_counts`, which derives the two ratios. Definitions
    of ``accepted_token_ratio`` and ``acceptance_length``: this module's docstring
    and ``docs/measurement.md``.

    Raises:
        pydantic.ValidationError: on direct construction, a negative count, a ratio
            outside [0, 1], an acceptance length below 1, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    draft_tokens: int | None = Field(default=None, ge=0, description="Drafted tokens (tokens).")
    accepted_tokens: int | None = Field(
        default=None, ge=0, description="Accepted draft tokens (tokens), bonus token excluded."
    )
    verify_steps: int | None = Field(
        default=None, ge=0, description="Target-model verify steps (steps)."
    )
    accepted_token_ratio: float | None = Field(
        default=None, ge=0.0, le=1.0, description="accepted_tokens / draft_tokens (ratio)."
    )
    acceptance_length: float | None = Field(
        default=None,
        ge=1.0,
        description="1 + accepted_tokens / verify_steps (tokens per verify step), "
        "or the engine's own mean acceptance length where steps are unknown.",
    )
    acceptance_by_position: tuple[float, ...] | None = Field(
        default=None,
        description="Per draft position k = 1, 2, ...: the fraction of verify steps whose "
        "k-th draft token was accepted (ratio, position 1 first).",
    )
    spec_tokens: int | None = Field(
        default=None, ge=1, description="Speculative depth: draft tokens per verify step."
    )
    engine: Dialect = Field(description="Dialect whose wire format the figures came from.")
    source: str = Field(description="Where they were read, e.g. 'metrics.speculative_decoding'.")
    scope: AcceptanceScope = Field(default=AcceptanceScope.per_request)

    @classmethod
    def from_counts(
        cls,
        *,
        engine: Dialect,
        source: str,
        draft_tokens: Any = None,
        accepted_tokens: Any = None,
        verify_steps: Any = None,
        reported_ratio: Any = None,
        reported_length: Any = None,
        scope: AcceptanceScope = AcceptanceScope.per_request,
        by_position: tuple[float, ...] | None = None,
        spec_tokens: Any = None,
    ) -> AcceptanceRecord:
        """Build a record from raw wire values, deriving the ratio and length.

        Raw values that are not non-negative integers (counts) or finite numbers
        (reported figures) count as unknown. Counts win over reported figures; a
        reported figure is used only when the counts cannot give it and it is in
        range (ratio in [0, 1], length >= 1). ``accepted > drafted`` makes the
        ratio unknown. ``by_position`` is kept only when every fraction is in
        [0, 1] and they never rise with the position; ``spec_tokens`` only when it
        is a count >= 1. Never raises on wire data.
        """
        drafted = _count(draft_tokens)
        accepted = _count(accepted_tokens)
        steps = _count(verify_steps)
        ratio: float | None = None
        if drafted is not None and accepted is not None:
            if drafted > 0 and accepted <= drafted:
                ratio = accepted / drafted
        else:
            r = _real(reported_ratio)
            if r is not None and 0.0 <= r <= 1.0 and drafted != 0:
                ratio = r
        length: float | None = None
        if steps is not None and accepted is not None:
            if steps > 0:
                length = 1.0 + accepted / steps
        else:
            rl = _real(reported_length)
            if rl is not None and rl >= 1.0 and steps != 0:
                length = rl
        depth = _count(spec_tokens)
        return cls(
            draft_tokens=drafted,
            accepted_tokens=accepted,
            verify_steps=steps,
            accepted_token_ratio=ratio,
            acceptance_length=length,
            acceptance_by_position=_valid_positions(by_position),
            spec_tokens=depth if depth else None,
            engine=engine,
            source=source,
            scope=scope,
        )

    @property
    def known(self) -> bool:
        """True when at least one figure is known."""
        return any(
            v is not None
            for v in (
                self.draft_tokens,
                self.accepted_tokens,
                self.verify_steps,
                self.accepted_token_ratio,
                self.acceptance_length,
            )
        )


def _valid_positions(fractions: tuple[float, ...] | None) -> tuple[float, ...] | None:
    """The fractions if each is finite in [0, 1] and none rises with k, else ``None``."""
    if not fractions:
        return None
    if any(not (math.isfinite(f) and 0.0 <= f <= 1.0) for f in fractions):
        return None
    if any(b > a + 1e-12 for a, b in itertools.pairwise(fractions)):
        return None
    return tuple(float(f) for f in fractions)


def _counts(value: Any) -> list[int] | None:
    """A list of non-negative integer counts, or ``None``."""
    if not isinstance(value, list):
        return None
    out = [_count(v) for v in value]
    return None if any(v is None for v in out) else [v for v in out if v is not None]


def dense_histogram(value: Any, length: int | None = None) -> list[int] | None:
    """A histogram of counts as a dense list, from a list or a sparse JSON object.

    ``value``: ``[h0, h1, ...]``, or ``{"j": h_j, ...}`` keyed by the bucket index
    (missing buckets are 0; vLLM's per-request ``acceptance_histogram``, as in
    ai-dynamo/aiperf's vLLM adapter). ``length``: the dense length wanted (buckets
    0 .. length - 1; a shorter list or object is padded with 0). ``None`` for
    anything else: a key that is not a non-negative integer, a count that is not
    one, or a bucket at or past ``length``.
    """
    if isinstance(value, Mapping):
        buckets: dict[int, int] = {}
        for key, raw in value.items():
            index = _count(int(key)) if isinstance(key, str) and key.isdigit() else None
            count = _count(raw)
            if index is None or count is None:
                return None
            buckets[index] = count
        size = max(buckets, default=-1) + 1
        dense = [buckets.get(j, 0) for j in range(size)]
    else:
        found = _counts(value)
        if found is None:
            return None
        dense = found
    if length is None:
        return dense
    if len(dense) > length:
        return None
    return dense + [0] * (length - len(dense))


def positions_from_steps(
    accepted_per_step: Any, drafted_per_step: Any, depth: int | None
) -> tuple[float, ...] | None:
    """Per-position acceptance from per-step accepted/drafted counts (vLLM ``per_step_*``).

    Position k's fraction = steps that accepted at least k draft tokens / steps
    (an accepted draft token has all earlier ones accepted). ``depth`` (the
    speculative depth, else the most drafted in a step) sets how many positions.
    ``None`` when the lists are missing, differ in length, are empty, or a step
    accepted more than it drafted.
    """
    accepted = _counts(accepted_per_step)
    drafted = _counts(drafted_per_step)
    if not accepted or drafted is None or len(drafted) != len(accepted):
        return None
    if any(a > d for a, d in zip(accepted, drafted, strict=True)):
        return None
    k_max = depth or max(drafted)
    if k_max < 1:
        return None
    steps = len(accepted)
    return tuple(sum(1 for a in accepted if a >= k) / steps for k in range(1, k_max + 1))


def positions_from_histogram(histogram: Any) -> tuple[float, ...] | None:
    """Per-position acceptance from ``histogram[j]`` = steps that accepted j draft tokens.

    Position k's fraction = sum of ``histogram[j]`` for j >= k over all steps;
    positions 1 .. len(histogram) - 1. ``None`` for an empty or invalid histogram.
    """
    hist = _counts(histogram)
    if not hist or len(hist) < 2:
        return None
    steps = sum(hist)
    if steps == 0:
        return None
    return tuple(sum(hist[k:]) / steps for k in range(1, len(hist)))


def _first(mapping: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = mapping.get(key)
        if value is not None:
            return value
    return None


def _choices(chunk: Mapping[str, Any]) -> Sequence[Any]:
    choices = chunk.get("choices")
    return choices if isinstance(choices, list) else ()


def _choice_block(chunk: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """``key`` from the first choice (index 0 preferred) that carries it as an object."""
    found: Mapping[str, Any] | None = None
    for choice in _choices(chunk):
        if isinstance(choice, Mapping):
            block = choice.get(key)
            if isinstance(block, Mapping):
                if choice.get("index", 0) == 0:
                    return block
                found = found or block
    return found
