"""``CacheWindow``: the server's side of one ``/metrics`` window.

Beside the speculation counters, a window records what speculation may cost the
rest of the server: the prefix-cache hit rate (prompt tokens found in the cache /
prompt tokens looked up), the peak KV-cache usage (fraction of the KV pool in
use) and the peak queue depth (requests waiting to be scheduled). Engine names
are listed in ``deepseekbench._dialects`` (``CacheSet``); the window is built by
``deepseekbench._measure._cache_metrics``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._axes import Dialect

__all__ = ["CacheWindow", "combine_cache_windows"]


class CacheWindow(BaseModel):
    """Prefix-cache hit rate, KV-cache usage peak and queue-depth peak over a window.

    Attributes:
        engine: whose families were read.
        source: the family set read (e.g. ``prometheus:vllm:prefix_cache_*``).
        prefix_cache_queries / prefix_cache_hits: window deltas of the engine's
            counters (tokens; vLLM); ``None`` where it exports none.
        prefix_cache_hit_rate: hits / queries over the window (0..1), or the
            engine's own hit-rate gauge at the window's end (SGLang); ``None``
            when unknown (no family, nothing looked up, a restart).
        kv_cache_usage_peak: the largest KV-cache usage seen (fraction 0..1)
            over the window's scrapes (before, during, after).
        queue_depth_peak: the largest number of waiting requests seen over the
            same scrapes (requests).
        scrapes: how many scrapes the peaks were taken over.
        engine_steps: engine steps (iterations) the server ran in the window
            (steps; vLLM ``vllm:iteration_tokens_total`` count, llama.cpp
            ``llamacpp:n_decode_total``); ``None`` where not exported.
        engine_batch_mean: mean sequences decoded per engine step over the window
            (sequences; docs/engines.md, "Engine steps", for each engine's
            derivation); ``None`` where not exported or not derivable.
        steps_source: the families the two figures were read from.

    A peak is a lower bound: a spike between two scrapes is not seen.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    engine: Dialect
    source: str
    prefix_cache_queries: int | None = Field(default=None, ge=0, description="tokens")
    prefix_cache_hits: int | None = Field(default=None, ge=0, description="tokens")
    prefix_cache_hit_rate: float | None = Field(default=None, ge=0, le=1, description="0..1")
    kv_cache_usage_peak: float | None = Field(default=None, ge=0, description="fraction 0..1")
    queue_depth_peak: float | None = Field(default=None, ge=0, description="requests")
    scrapes: int = Field(default=0, ge=0, description="scrapes behind the peaks")
    engine_steps: int | None = Field(default=None, ge=0, description="engine steps")
    engine_batch_mean: float | None = Field(default=None, gt=0, description="sequences/step")
    steps_source: str | None = None


def _max(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def combine_cache_windows(windows: Sequence[CacheWindow]) -> CacheWindow | None:
    """One window for a row's windows (one per round): counts summed when every
    window has them (the hit rate then hits / queries), else the last known
    gauge hit rate; peaks the largest; engine steps summed and the batch
    step-weighted when every window has them, else ``None``; ``None`` for no window."""
    if not windows:
        return None
    last = windows[-1]
    queries = [w.prefix_cache_queries for w in windows]
    hits = [w.prefix_cache_hits for w in windows]
    rate: float | None
    q: int | None
    h: int | None
    if all(x is not None for x in queries) and all(x is not None for x in hits):
        q = sum(x for x in queries if x is not None)
        h = sum(x for x in hits if x is not None)
        rate = h / q if q > 0 else None
    else:
        q = h = None
        known = [w.prefix_cache_hit_rate for w in windows if w.prefix_cache_hit_rate is not None]
        rate = known[-1] if known else None
    steps, batch = _steps(windows)
    return CacheWindow(
        engine=last.engine,
        source=last.source,
        prefix_cache_queries=q,
        prefix_cache_hits=h,
        prefix_cache_hit_rate=rate,
        kv_cache_usage_peak=_max([w.kv_cache_usage_peak for w in windows]),
        queue_depth_peak=_max([w.queue_depth_peak for w in windows]),
        scrapes=sum(w.scrapes for w in windows),
        engine_steps=steps,
        engine_batch_mean=batch,
        steps_source=last.steps_source if steps is not None else None,
    )


def _steps(windows: Sequence[CacheWindow]) -> tuple[int | None, float | None]:
    """Engine steps summed and the batch step-weighted over the windows, only when
    every window has them (never a figure from part of the row)."""
    steps = [w.engine_steps for w in windows]
    if any(s is None for s in steps):
        return None, None
    total = sum(s for s in steps if s is not None)
    batch: float | None = None
    if total > 0 and all(w.engine_batch_mean is not None or w.engine_steps == 0 for w in windows):
        weighted = sum((w.engine_batch_mean or 0.0) * (w.engine_steps or 0) for w in windows)
        batch = weighted / total if weighted > 0 else None
    return total, batch
