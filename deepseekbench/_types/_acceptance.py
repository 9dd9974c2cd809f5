"""Speculative-decoding acceptance: one engine-neutral record, one adapter per engine.

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._axes import AcceptanceScope, Dialect

__all__ = [
    "AcceptanceRecord",
    "acceptance_from_llamacpp",
    "acceptance_from_sglang",
    "acceptance_from_vllm",
    "positions_from_histogram",
    "positions_from_steps",
    "read_acceptance",
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


def _vllm_positions(stats: Mapping[str, Any]) -> tuple[float, ...] | None:
    """Per-position acceptance from the per-step lists, else the histogram.

    Either is used only when it agrees with the request's own counts (steps and
    accepted tokens), so a figure is never taken from a partial list.
    """
    steps = _count(_first(stats, "num_spec_steps", "num_drafts"))
    accepted = _count(_first(stats, "num_accepted_draft_tokens", "num_accepted_tokens"))
    depth = _count(stats.get("num_spec_tokens")) or None
    per_step = _counts(stats.get("per_step_accepted"))
    if per_step is not None and len(per_step) == steps and sum(per_step) == accepted:
        found = positions_from_steps(per_step, stats.get("per_step_drafted"), depth)
        if found is not None:
            return found
    hist = _counts(stats.get("acceptance_histogram"))
    if (
        hist is not None
        and sum(hist) == steps
        and sum(j * h for j, h in enumerate(hist)) == accepted
        and (depth is None or len(hist) == depth + 1)
    ):
        return positions_from_histogram(hist)
    return None


def _vllm_record(stats: Mapping[str, Any], source: str) -> AcceptanceRecord | None:
    record = AcceptanceRecord.from_counts(
        engine=Dialect.vllm,
        source=source,
        draft_tokens=stats.get("num_draft_tokens"),
        accepted_tokens=_first(stats, "num_accepted_draft_tokens", "num_accepted_tokens"),
        verify_steps=_first(stats, "num_spec_steps", "num_drafts"),
        reported_ratio=stats.get("draft_acceptance_rate"),
        reported_length=stats.get("mean_acceptance_length"),
        by_position=_vllm_positions(stats),
        spec_tokens=stats.get("num_spec_tokens"),
    )
    return record if record.known else None


def acceptance_from_vllm(chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
    """Read vLLM per-request speculative stats from one parsed chunk or response.

    Places: ``metrics.speculative_decoding`` (top level, on the final usage
    chunk; vLLM ``--enable-per-request-metrics``) and the older per-choice
    ``choices[i].speculative_decoding_stats``. Fields: ``num_draft_tokens``,
    ``num_accepted_draft_tokens``, ``num_spec_steps``, ``draft_acceptance_rate``,
    ``mean_acceptance_length``, ``num_spec_tokens`` (depth); per-position
    acceptance from ``per_step_accepted``/``per_step_drafted`` (``--per-request-
    spec-decode-metrics detailed``) or ``acceptance_histogram``, each only when
    it agrees with the counts. Returns ``None`` when the chunk carries none.
    """
    metrics = chunk.get("metrics")
    if isinstance(metrics, Mapping):
        stats = metrics.get("speculative_decoding")
        if isinstance(stats, Mapping):
            return _vllm_record(stats, "metrics.speculative_decoding")
    stats = _choice_block(chunk, "speculative_decoding_stats")
    if stats is not None:
        return _vllm_record(stats, "choices[].speculative_decoding_stats")
    return None


_SGLANG_ACCEPTED = (
    "spec_num_correct_drafts",
    "spec_accepted_drafts",
    "spec_accept_token_num",
    "spec_accepted_tokens",
)
_SGLANG_PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
_SGLANG_RATE = ("spec_accept_rate", "spec_acceptance_rate")


def _sglang_record(meta: Mapping[str, Any], source: str) -> AcceptanceRecord | None:
    if not any(str(k).startswith("spec_") for k in meta):
        return None
    steps = _count(meta.get("spec_verify_ct"))
    if steps == 0:
        # SGLang fills spec_accept_rate / spec_accept_length with 0 when nothing was
        # verified (tokenizer_manager._calculate_spec_decoding_metrics): that 0 means
        # "no speculation", not a measured zero.
        return None
    record = AcceptanceRecord.from_counts(
        engine=Dialect.sglang,
        source=source,
        draft_tokens=_first(meta, *_SGLANG_PROPOSED),
        accepted_tokens=_first(meta, *_SGLANG_ACCEPTED),
        verify_steps=meta.get("spec_verify_ct"),
        reported_ratio=_first(meta, *_SGLANG_RATE),
        reported_length=meta.get("spec_accept_length"),
        by_position=_sglang_positions(meta),
    )
    return record if record.known else None


_LENGTH_TOLERANCE = 0.01
"""How far (tokens/step) a histogram's mean may sit from a reported ``spec_accept_length``."""


def _histogram_fits(
    hist: list[int], steps: int | None, accepted: int | None, length: float | None
) -> bool:
    """Whether ``hist`` (steps by correct drafts) agrees with every figure reported
    beside it, and at least one was reported to check it against."""
    total = sum(hist)
    correct = sum(j * h for j, h in enumerate(hist))
    checks = []
    if steps is not None:
        checks.append(total == steps)
    if accepted is not None:
        checks.append(correct == accepted)
    if length is not None and total > 0:
        checks.append(abs(1.0 + correct / total - length) <= _LENGTH_TOLERANCE)
    return bool(checks) and all(checks)


def _sglang_positions(meta: Mapping[str, Any]) -> tuple[float, ...] | None:
    """Per-position acceptance from SGLang's per-request histogram, or ``None``.

    ``spec_correct_drafts_histogram[j]`` = verify steps with exactly j correct
    drafts (sgl-project/sglang PR #33518: ``sum(h)`` = ``spec_verify_ct``,
    ``sum(j * h[j])`` = ``spec_num_correct_drafts``); position k = steps with
    >= k correct / steps (:func:`positions_from_histogram`). The older name
    ``spec_accept_histogram`` (renamed, drafts only, in PR #24081) is read
    either way it may be indexed: by correct drafts, or by tokens accepted per
    step with the bonus token (bucket 0 empty, shifted down by one); the
    indexing that agrees with the reported counts is used. A histogram is
    used only when it agrees with every count reported beside it (verify
    steps, correct drafts, mean acceptance length) and at least one is
    reported; an ambiguous or disagreeing one gives ``None``.
    """
    steps = _count(meta.get("spec_verify_ct"))
    accepted = _count(_first(meta, *_SGLANG_ACCEPTED))
    length = _real(meta.get("spec_accept_length"))
    new = _counts(meta.get("spec_correct_drafts_histogram"))
    if new is not None:
        fits = _histogram_fits(new, steps, accepted, length)
        return positions_from_histogram(new) if fits else None
    old = _counts(meta.get("spec_accept_histogram"))
    if old is None:
        return None
    candidates = [old]
    if old and old[0] == 0:
        candidates.append(old[1:])  # indexed by tokens per step, bonus token included
    fitting = [h for h in candidates if _histogram_fits(h, steps, accepted, length)]
    return positions_from_histogram(fitting[0]) if len(fitting) == 1 else None


def acceptance_from_sglang(chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
    """Read SGLang per-request speculative fields from one parsed chunk or response.

    Places, first hit wins: ``sglext.spec_tokens_details`` (current SGLang; a
    trailing ``choices: []`` chunk answering ``return_spec_tokens_details: true``),
    then ``meta_info`` (older servers; ``return_meta_info``) from a choice
    (index 0 preferred) or the top level.
    Fields: ``spec_verify_ct``; accepted = ``spec_num_correct_drafts`` (aliases
    ``spec_accepted_drafts``, ``spec_accept_token_num``, ``spec_accepted_tokens``);
    drafted = ``spec_num_proposed_drafts`` (aliases ``spec_proposed_drafts``,
    ``spec_draft_token_num``); ``spec_accept_rate`` (alias
    ``spec_acceptance_rate``); ``spec_accept_length``; per-position acceptance
    from ``spec_correct_drafts_histogram`` (older ``spec_accept_histogram``),
    only where it agrees with the counts (see :func:`_sglang_positions`).
    ``spec_verify_ct == 0`` means nothing was drafted and gives ``None``.
    """
    ext = chunk.get("sglext")
    if isinstance(ext, Mapping):
        details = ext.get("spec_tokens_details")
        if isinstance(details, Mapping):
            found = _sglang_record(details, "sglext.spec_tokens_details")
            if found is not None:
                return found
    meta = _choice_block(chunk, "meta_info")
    if meta is not None:
        return _sglang_record(meta, "choices[].meta_info")
    top = chunk.get("meta_info")
    if isinstance(top, Mapping):
        return _sglang_record(top, "meta_info")
    return None


def acceptance_from_llamacpp(chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
    """Read llama.cpp server ``timings.draft_n`` / ``timings.draft_n_accepted``.

    llama.cpp reports no verify-step count, so ``acceptance_length`` stays
    ``None``. Absent ``draft_n`` (nothing was drafted) gives ``None``.
    """
    timings = chunk.get("timings")
    if not isinstance(timings, Mapping) or timings.get("draft_n") is None:
        return None
    record = AcceptanceRecord.from_counts(
        engine=Dialect.llamacpp,
        source="timings",
        draft_tokens=timings.get("draft_n"),
        accepted_tokens=timings.get("draft_n_accepted"),
    )
    return record if record.known else None


_Adapter = Callable[[Mapping[str, Any]], AcceptanceRecord | None]

_ADAPTERS: dict[Dialect, tuple[_Adapter, ...]] = {
    Dialect.vllm: (acceptance_from_vllm,),
    Dialect.sglang: (acceptance_from_sglang,),
    Dialect.llamacpp: (acceptance_from_llamacpp,),
    Dialect.openai: (),
    Dialect.deepseek: (),
    Dialect.auto: (acceptance_from_vllm, acceptance_from_sglang, acceptance_from_llamacpp),
}


def read_acceptance(chunk: Mapping[str, Any], dialect: Dialect) -> AcceptanceRecord | None:
    """Apply the adapters for ``dialect`` to one parsed chunk; first hit wins.

    ``auto`` tries vLLM, SGLang, then llama.cpp; ``openai`` and ``deepseek``
    report no acceptance. Never raises on wire data.
    """
    for adapter in _ADAPTERS[dialect]:
        record = adapter(chunk)
        if record is not None:
            return record
    return None
