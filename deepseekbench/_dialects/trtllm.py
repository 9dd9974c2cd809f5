"""TensorRT-LLM (``trtllm-serve``): OpenAI-compatible, a main engine for DeepSeek MTP.

Sources (TensorRT-LLM, read through the project's search tool; see ``docs/engines.md``):
``tensorrt_llm/serve/openai_protocol.py`` (request and stream shapes),
``tensorrt_llm/metrics/collector.py`` (the Prometheus families),
``tests/unittest/.../test_collector.py`` (iteration-stats sample).

* Request: ``chat_template_kwargs`` reasoning controls (as vLLM; TensorRT-LLM's own
  top-level ``reasoning_effort`` takes only ``low``/``medium``/``high``, so ``max``
  is never sent there); ``ignore_eos`` + ``min_tokens`` (sampling fields of its
  ``ChatCompletionRequest``). Nothing else is sent: no reporting extra is needed,
  and ``continuous_usage_stats`` is not sent (not confirmed for every release).
* Response: ``choices[i].avg_decoded_tokens_per_iter`` — the request's decoded
  tokens per engine iteration, i.e. tokens emitted per target-model verify step
  with the bonus token (the acceptance length); TensorRT-LLM's own eval reads it
  the same way. No drafted/accepted counts per request: the
  acceptance rate of a request stays unknown (``None``). The first iteration
  (prefill) emits one token, so on short outputs the figure sits slightly below
  the decode-only acceptance length.
* ``/metrics`` (Prometheus; the iteration counters need ``enable_iter_perf_stats:
  true`` in the ``--extra_llm_api_options`` YAML):
  ``trtllm_spec_decode_num_draft_tokens_total`` and
  ``trtllm_spec_decode_num_accepted_tokens_total`` (iteration stats), else the
  per-request ``trtllm_spec_decode_drafted_tokens_total`` /
  ``trtllm_spec_decode_accepted_tokens_total``. No verify-step counter: the
  window gives the acceptance rate, its acceptance length stays unknown.
* Spec config (``--extra_llm_api_options`` YAML): ``speculative_config:
  {decoding_type: MTP, num_nextn_predict_layers: N}`` (draft tokens per verify
  step = N); no JSON endpoint reports it, so no served-depth check is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from deepseekbench._dialects._base import (
    CounterSet,
    EngineDialect,
    ignore_eos_min_tokens,
    min_tokens_before_end,
)
from deepseekbench._dialects._counters import prometheus_sets
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect

__all__ = ["DIALECT", "TrtllmDialect", "acceptance_from_trtllm"]

_FIELD = "avg_decoded_tokens_per_iter"


def _choice_value(chunk: Mapping[str, Any]) -> Any:
    """``avg_decoded_tokens_per_iter`` of the first choice (index 0 preferred) that has it."""
    found: Any = None
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, Mapping) and choice.get(_FIELD) is not None:
            if choice.get("index", 0) == 0:
                return choice[_FIELD]
            found = choice[_FIELD] if found is None else found
    return found


def acceptance_from_trtllm(chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
    """Read TensorRT-LLM's per-request ``avg_decoded_tokens_per_iter`` from one chunk.

    Place: ``choices[i].avg_decoded_tokens_per_iter`` (index 0 preferred) of a
    streamed chunk or a whole response, else ``usage.avg_decoded_tokens_per_iter``
    (where one benchmark client reads it; unconfirmed). The value (tokens per verify step,
    bonus token included) becomes ``acceptance_length``; drafted, accepted,
    verify steps and the acceptance rate stay ``None`` (not reported per
    request). A value below 1, not finite, or not a number gives ``None``.
    Never raises on wire data.
    """
    value = _choice_value(chunk)
    if value is None:
        usage = chunk.get("usage")
        value = usage.get(_FIELD) if isinstance(usage, Mapping) else None
    if value is None:
        return None
    record = AcceptanceRecord.from_counts(
        engine=Dialect.trtllm,
        source=f"choices[].{_FIELD}",
        reported_length=value,
    )
    return record if record.known else None


class TrtllmDialect(EngineDialect):
    """TensorRT-LLM's wire extras (module docstring)."""

    name: ClassVar[str] = "trtllm"
    teacher_forcing_refusal: ClassVar[str] = (
        "TensorRT-LLM's chat prompt logprobs are not confirmed by this library"
    )
    spec_keys: ClassVar[frozenset[str]] = frozenset({"usage"})
    choice_spec_keys: ClassVar[frozenset[str]] = frozenset({_FIELD})
    counter_sets: ClassVar[tuple[CounterSet, ...]] = prometheus_sets(Dialect.trtllm)

    def eos_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """``ignore_eos: true`` and ``min_tokens: max_tokens`` (when given)."""
        return ignore_eos_min_tokens(max_tokens)

    def pinned_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """:func:`~deepseekbench._dialects._base.min_tokens_before_end`."""
        return min_tokens_before_end(max_tokens)

    def read_acceptance(self, chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
        """:func:`acceptance_from_trtllm`."""
        return acceptance_from_trtllm(chunk)


DIALECT = TrtllmDialect()
