"""vLLM (``vllm serve``): the OpenAI-compatible server with vLLM's extensions.

* Request: ``chat_template_kwargs`` reasoning controls; ``ignore_eos`` +
  ``min_tokens`` (sampling extensions of its chat endpoint);
  ``stream_options.continuous_usage_stats``.
* Response: per-request speculative stats (``metrics.speculative_decoding``,
  ``--enable-per-request-metrics``; older ``choices[i].speculative_decoding_stats``)
  and per-request times in ``metrics`` (``time_to_first_token_ms``,
  ``queue_time_ms``, ``generation_time_ms``, ``mean_itl_ms``, ``tokens_per_second``).
* ``/metrics``: ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``,
  ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos``
  (vLLM ``v1/spec_decode/metrics.py``); the cache and queue (the cache window):
  ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` (counters of prompt
  tokens, V1; older ``vllm:gpu_prefix_cache_queries`` / ``..._hits``),
  ``vllm:kv_cache_usage_perc`` (older ``vllm:gpu_cache_usage_perc``; a fraction,
  1 = 100%), ``vllm:num_requests_waiting`` (vLLM ``v1/metrics/loggers.py``;
  docs "Production Metrics").
* Sampled requests ask ``return_token_ids: true`` (per-choice ``token_ids`` per chunk).
* ``POST /tokenize``: ``{"model", "prompt", "add_special_tokens": false}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from deepseekbench._dialects._base import (
    CacheSet,
    CounterSet,
    EngineDialect,
    ignore_eos_min_tokens,
    min_tokens_before_end,
)
from deepseekbench._dialects._counters import CounterKind, first_count, prometheus_sets
from deepseekbench._types._acceptance import (
    AcceptanceRecord,
    _choice_block,
    _count,
    _counts,
    dense_histogram,
    positions_from_histogram,
    positions_from_steps,
)
from deepseekbench._types._axes import Dialect
from deepseekbench._types._clock import ServerRateSpan

__all__ = ["DIALECT", "VllmDialect", "acceptance_from_vllm"]

_STEPS = "vllm:iteration_tokens_total"
"""vLLM's engine steps: the histogram ``vllm:iteration_tokens_total`` ("number of
tokens per engine_step", ``vllm/v1/metrics/loggers.py``), one observation per step."""


def _vllm_positions(stats: Mapping[str, Any]) -> tuple[float, ...] | None:
    """Per-position acceptance from the per-step lists, else the histogram.

    Either is used only when it agrees with the request's own counts (steps and
    accepted tokens), so a figure is never taken from a partial list.
    """
    steps = _count(first_count(stats, Dialect.vllm, CounterKind.verify_steps))
    accepted = _count(first_count(stats, Dialect.vllm, CounterKind.accepted_tokens))
    depth = _count(stats.get("num_spec_tokens")) or None
    per_step = _counts(stats.get("per_step_accepted"))
    if per_step is not None and len(per_step) == steps and sum(per_step) == accepted:
        found = positions_from_steps(per_step, stats.get("per_step_drafted"), depth)
        if found is not None:
            return found
    # a dense list, or (newer vLLM) a sparse object keyed by accepted count
    hist = dense_histogram(stats.get("acceptance_histogram"), depth + 1 if depth else None)
    if (
        hist is not None
        and sum(hist) == steps
        and sum(j * h for j, h in enumerate(hist)) == accepted
    ):
        return positions_from_histogram(hist)
    return None


def _vllm_record(stats: Mapping[str, Any], source: str) -> AcceptanceRecord | None:
    record = AcceptanceRecord.from_counts(
        engine=Dialect.vllm,
        source=source,
        draft_tokens=first_count(stats, Dialect.vllm, CounterKind.draft_tokens),
        accepted_tokens=first_count(stats, Dialect.vllm, CounterKind.accepted_tokens),
        verify_steps=first_count(stats, Dialect.vllm, CounterKind.verify_steps),
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


class VllmDialect(EngineDialect):
    """vLLM's wire extras (module docstring)."""

    name: ClassVar[str] = "vllm"
    # chat completions' prompt_logprobs with continue_final_message (vLLM
    # entrypoints/openai chat serving); raw under the default --logprobs-mode raw_logprobs
    teacher_forcing: ClassVar[str | None] = "vllm_prompt_logprobs"
    prompt_logprobs_kind: ClassVar[str] = "raw"
    continuous_usage: ClassVar[bool] = True
    spec_keys: ClassVar[frozenset[str]] = frozenset({"metrics"})
    choice_spec_keys: ClassVar[frozenset[str]] = frozenset({"speculative_decoding_stats"})
    counter_sets: ClassVar[tuple[CounterSet, ...]] = prometheus_sets(Dialect.vllm)
    server_rate_span: ClassVar[ServerRateSpan | None] = ServerRateSpan.ttft_and_generation
    server_rate_source: ClassVar[str] = (
        "vLLM 0.32 metrics.tokens_per_second = completion tokens / "
        "(time_to_first_token_ms + generation_time_ms): shared case "
        "sse/21-vllm-0.32-ngram-per-request-metrics, 128 / (871.34 + 80.69) ms = 134.45"
    )
    cache_sets: ClassVar[tuple[CacheSet, ...]] = (  # the cache window and engine steps
        CacheSet(
            source="prometheus:vllm:prefix_cache_*",
            queries="vllm:prefix_cache_queries",
            hits="vllm:prefix_cache_hits",
            kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            queue="vllm:num_requests_waiting",
            steps=f"{_STEPS}_count",
            step_tokens=f"{_STEPS}_sum",
            prompt_tokens="vllm:prompt_tokens",
            cached_prompt_tokens="vllm:prompt_tokens_cached",
        ),
        CacheSet(
            source="prometheus:vllm:gpu_prefix_cache_*",
            queries="vllm:gpu_prefix_cache_queries",
            hits="vllm:gpu_prefix_cache_hits",
            kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            queue="vllm:num_requests_waiting",
            steps=f"{_STEPS}_count",
            step_tokens=f"{_STEPS}_sum",
            prompt_tokens="vllm:prompt_tokens",
            cached_prompt_tokens="vllm:prompt_tokens_cached",
        ),
    )

    def eos_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """``ignore_eos: true`` and ``min_tokens: max_tokens`` (when given)."""
        return ignore_eos_min_tokens(max_tokens)

    def pinned_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """:func:`~deepseekbench._dialects._base.min_tokens_before_end`."""
        return min_tokens_before_end(max_tokens)

    def token_id_controls(self) -> dict[str, Any]:
        """``return_token_ids: true``: per-choice ``token_ids`` in every streamed chunk
        and ``prompt_token_ids`` on the answer (vLLM ``entrypoints/openai`` serving)."""
        return {"return_token_ids": True}

    def read_acceptance(self, chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
        """:func:`acceptance_from_vllm`."""
        return acceptance_from_vllm(chunk)

    def server_times(self, chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """vLLM's per-request ``metrics`` object: TTFT, queue, generation and mean
        ITL (ms) and output rate (tokens/s, over TTFT + generation time:
        :attr:`server_rate_span`)."""
        m = chunk.get("metrics")
        if not isinstance(m, Mapping):
            return None
        return {
            "server_ttft_ms": m.get("time_to_first_token_ms"),
            "server_queue_ms": m.get("queue_time_ms"),
            "server_generation_ms": m.get("generation_time_ms"),
            "server_mean_itl_ms": m.get("mean_itl_ms"),
            "server_toks_per_s": m.get("tokens_per_second"),
        }


DIALECT = VllmDialect()
