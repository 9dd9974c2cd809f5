"""SGLang (``python -m sglang.launch_server``): OpenAI-compatible with SGLang's extensions.

* Request: ``chat_template_kwargs`` reasoning controls; ``ignore_eos`` +
  ``min_tokens``; ``return_spec_tokens_details: true`` (answered by a trailing
  ``sglext`` chunk; never ``return_meta_info``, which current SGLang refuses
  with HTTP 400 on a streamed request); ``stream_options.continuous_usage_stats``.
* Response: ``sglext.spec_tokens_details`` or (older) ``meta_info``.
* ``/metrics``: the gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``;
  the cache and queue (the cache window): ``sglang:cache_hit_rate`` (prefix-cache hit
  rate, a gauge over recent prefills), ``sglang:token_usage`` (KV-pool fraction
  in use), ``sglang:num_queue_reqs`` (waiting requests) (SGLang
  ``srt/metrics/collector.py``; docs "Production Metrics").
* Served depth: ``GET /get_server_info`` (``/server_info`` on newer releases):
  ``speculative_num_steps`` unless ``speculative_algorithm`` is unset.
* Deterministic mode: the same body's ``enable_deterministic_inference``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from deepseekbench._dialects._base import (
    CacheSet,
    EngineDialect,
    GaugeSet,
    depth,
    ignore_eos_min_tokens,
    min_tokens_before_end,
)
from deepseekbench._dialects._counters import CounterKind, request_names
from deepseekbench._types._acceptance import (
    AcceptanceRecord,
    _choice_block,
    _count,
    _counts,
    _first,
    _real,
    positions_from_histogram,
)
from deepseekbench._types._axes import Dialect

__all__ = ["DIALECT", "SglangDialect", "acceptance_from_sglang"]

_SGLANG_ACCEPTED = request_names(Dialect.sglang, CounterKind.accepted_tokens)
_SGLANG_PROPOSED = request_names(Dialect.sglang, CounterKind.draft_tokens)
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


class SglangDialect(EngineDialect):
    """SGLang's wire extras (module docstring)."""

    name: ClassVar[str] = "sglang"
    teacher_forcing_refusal: ClassVar[str] = (
        "SGLang's OpenAI chat endpoint serves no prompt logprobs, and its /generate "
        "(return_logprob, logprob_start_len, top_logprobs_num) needs the chat-templated "
        "prompt, which the client does not have"
    )
    continuous_usage: ClassVar[bool] = True
    spec_keys: ClassVar[frozenset[str]] = frozenset({"sglext", "meta_info"})
    choice_spec_keys: ClassVar[frozenset[str]] = frozenset({"meta_info"})
    gauge_sets: ClassVar[tuple[GaugeSet, ...]] = (
        GaugeSet(
            source="prometheus:sglang:spec_accept_*",
            rate="sglang:spec_accept_rate",
            length="sglang:spec_accept_length",
        ),
    )
    cache_sets: ClassVar[tuple[CacheSet, ...]] = (  # the cache window
        CacheSet(
            source="prometheus:sglang:cache_hit_rate",
            hit_rate="sglang:cache_hit_rate",
            kv_usage=("sglang:token_usage",),
            queue="sglang:num_queue_reqs",
        ),
    )
    depth_paths: ClassVar[tuple[str, ...]] = ("/get_server_info", "/server_info")
    reports_determinism: ClassVar[bool] = True  # the engine's deterministic mode

    def eos_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """``ignore_eos: true`` and ``min_tokens: max_tokens`` (when given)."""
        return ignore_eos_min_tokens(max_tokens)

    def pinned_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """:func:`~deepseekbench._dialects._base.min_tokens_before_end`."""
        return min_tokens_before_end(max_tokens)

    def report_extras(self) -> dict[str, Any]:
        """``return_spec_tokens_details: true``."""
        return {"return_spec_tokens_details": True}

    def read_acceptance(self, chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
        """:func:`acceptance_from_sglang`."""
        return acceptance_from_sglang(chunk)

    def spec_tokens_from_info(self, info: Any) -> int | None:
        """``speculative_num_steps`` of a ``/get_server_info`` body; ``None``
        when ``speculative_algorithm`` is unset/``NONE`` or the body says nothing."""
        if not isinstance(info, Mapping):
            return None
        if info.get("speculative_algorithm") in (None, "", "NONE"):
            return None
        return depth(info.get("speculative_num_steps"))

    def deterministic_from_info(self, info: Any) -> bool | None:
        """Whether deterministic mode is on: ``enable_deterministic_inference`` of a
        ``/get_server_info`` body (a ``ServerArgs`` field, ``--enable-deterministic-inference``);
        ``None`` when absent or not a boolean (releases before the flag)."""
        if not isinstance(info, Mapping):
            return None
        value = info.get("enable_deterministic_inference")
        return value if isinstance(value, bool) else None


DIALECT = SglangDialect()
