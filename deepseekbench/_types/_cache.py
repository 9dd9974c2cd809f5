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


def _max(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def combine_cache_windows(windows: Sequence[CacheWindow]) -> CacheWindow | None:
    """One window for a row's windows (one per round): counts summed when every
    window has them (the hit rate then hits / queries), else the last known
    gauge hit rate; peaks the largest; ``None`` for no window."""
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
    return CacheWindow(
        engine=last.engine,
        source=last.source,
        prefix_cache_queries=q,
        prefix_cache_hits=h,
        prefix_cache_hit_rate=rate,
        kv_cache_usage_peak=_max([w.kv_cache_usage_peak for w in windows]),
        queue_depth_peak=_max([w.queue_depth_peak for w in windows]),
        scrapes=sum(w.scrapes for w in windows),
    )
