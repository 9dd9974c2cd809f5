"""The server's side of a window: prefix-cache hit rate, KV-cache and queue peaks.

Speculation can cost the rest of the server what it saves in decode: vLLM's MTP
drops prefix-cache hits to 0 on hybrid models (vllm-project/vllm #54360, #22230),
and a longer verify step holds KV blocks longer. A window's ``/metrics`` scrapes
(:mod:`deepseekbench._measure._server_metrics`) therefore also read each engine's
cache and queue families (:class:`~deepseekbench._dialects.CacheSet`):

* hit rate: the window delta of a hit counter over a query counter (vLLM V1
  ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``, tokens; llama.cpp
  ``llamacpp:prompt_tokens_cached`` over itself plus ``llamacpp:prompt_tokens``), counted
  as the speculation counters are (label sets summed, parallel-rank copies once,
  a restart or a series in one scrape only gives no count); else the engine's
  own recent hit-rate gauge at the window's end (SGLang ``sglang:cache_hit_rate``);
* KV-cache usage peak: the largest value of the usage gauge (vLLM
  ``vllm:kv_cache_usage_perc``, older ``vllm:gpu_cache_usage_perc``; SGLang
  ``sglang:token_usage``; llama.cpp ``llamacpp:kv_cache_usage_ratio``) over the
  window's scrapes, the largest label set (the fullest data-parallel rank);
* queue-depth peak: the largest number of waiting requests (vLLM
  ``vllm:num_requests_waiting``, SGLang ``sglang:num_queue_reqs``, llama.cpp
  ``llamacpp:requests_deferred``) over the same scrapes, summed over
  data-parallel label sets, copies once.

* engine steps (the batch the engine ran): the window delta of the engine's step
  counter (vLLM ``vllm:iteration_tokens_total_count``, one observation per engine
  step; llama.cpp ``llamacpp:n_decode_total``, ``llama_decode()`` calls of the
  server loop), and the mean sequences decoded per step: vLLM, the histogram's
  ``_sum`` (each step's prompt tokens plus generated tokens, ``vllm/v1/metrics/
  loggers.py``) less the prompt tokens computed (``vllm:prompt_tokens`` less
  ``vllm:prompt_tokens_cached`` where exported: vLLM's histogram counts computed prompt
  tokens, its prompt counter all of them) gives the generated tokens, less the accepted draft tokens
  (``vllm:spec_decode_num_accepted_tokens``, 0 without the family) the sequences
  that produced a token, over the steps (a sequence produces one token plus its
  accepted drafts a step, its prefill's step included); llama.cpp, the busy slots summed
  over the window's decode calls (``llamacpp:n_busy_slots_per_decode``, a mean
  since start, times ``n_decode_total``, at each end) over the calls. ``None``
  where a family is not exported, the counters moved inconsistently (a restart),
  or the derivation gives no positive figure: never an estimate.

The scrapes are the window's opening and closing ones plus those
:func:`while_sampling` takes while the window's requests run (every ``interval_s``,
only when the opening scrape holds a KV or queue gauge): a peak is the largest
value seen, a lower bound of the true peak.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
import httpx

from deepseekbench._dialects import CacheSet
from deepseekbench._errors import LiveGateError
from deepseekbench._measure._server_metrics import (
    MetricsSnapshot,
    _counter_sets,
    _delta,
    _Inconsistent,
    _merge_copies,
    _optional_delta,
    _restarted,
    cache_sets,
    scrape_metrics,
)
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._types._axes import Dialect
from deepseekbench._types._cache import CacheWindow

__all__ = ["SAMPLE_INTERVAL_S", "cache_window", "while_sampling"]

_log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 0.5
"""Seconds between the scrapes taken while a window's requests run (KV and queue peaks)."""


def _pick(before: MetricsSnapshot, after: MetricsSnapshot) -> tuple[Dialect, CacheSet] | None:
    """The first set whose counters either scrape holds, else the first with a gauge
    (sets of one engine share gauges: the counters tell its versions apart)."""
    sets = cache_sets()
    for counters in (True, False):
        for engine, cs in sets:
            names = cs.counters if counters else cs.gauges
            if any(n in after.series or n in before.series for n in names):
                return engine, cs
    return None


def _kv(snapshot: MetricsSnapshot, cs: CacheSet) -> float | None:
    """The fullest label set of the first KV-usage gauge the scrape holds (fraction)."""
    for name in cs.kv_usage:
        per_label = snapshot.series.get(name)
        if per_label:
            return max(per_label.values())
    return None


def _queue(snapshot: MetricsSnapshot, cs: CacheSet) -> float | None:
    """Waiting requests summed over label sets, copies once; ``None`` if copies disagree."""
    per_label = snapshot.series.get(cs.queue) if cs.queue is not None else None
    if not per_label:
        return None
    merged = _merge_copies(per_label)
    return None if merged is None else sum(merged.values())


def _peak(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _counts(
    before: MetricsSnapshot, after: MetricsSnapshot, cs: CacheSet
) -> tuple[int, int] | None:
    """``(queries, hits)`` over the window (tokens), or ``None`` when unknown;
    queries are hits + misses for an engine that counts misses (llama.cpp)."""
    looked_up = cs.queries or cs.misses
    if looked_up is None or cs.hits is None or _restarted(before, after):
        return None
    try:
        queries, hits = _delta(before, after, looked_up), _delta(before, after, cs.hits)
        if cs.queries is None:
            queries += hits
    except _Inconsistent as exc:
        _log.warning("prefix-cache counts dropped for this window: %s", exc)
        return None
    return (queries, hits) if hits <= queries else None


def _spec_accepted(before: MetricsSnapshot, after: MetricsSnapshot, engine: Dialect) -> int:
    """Draft tokens accepted in the window (tokens; 0 where the family is not exported).

    Raises:
        _Inconsistent: see :func:`_delta`.
    """
    for e, cs in _counter_sets():
        name = cs.accepted
        if e == engine and (name in before.series or name in after.series):
            return _delta(before, after, name)
    return 0


def _engine_steps(
    before: MetricsSnapshot, after: MetricsSnapshot, engine: Dialect, cs: CacheSet
) -> tuple[int | None, float | None]:
    """``(engine steps, mean sequences decoded per step)`` over the window (module
    docstring); ``(None, None)`` where the step counter is not exported or moved
    inconsistently, the batch ``None`` where it cannot be derived."""
    if cs.steps is None or (cs.steps not in before.series and cs.steps not in after.series):
        return None, None
    if _restarted(before, after):
        return None, None
    try:
        steps = _delta(before, after, cs.steps)
        if steps == 0:
            return 0, None
        if cs.busy_per_step is not None:
            busy = _busy(before, after, cs.steps, cs.busy_per_step)
        else:
            busy = _decoding(before, after, engine, cs)
    except _Inconsistent as exc:
        _log.warning("engine steps dropped for this window: %s", exc)
        return None, None
    return steps, (busy / steps if busy is not None and busy > 0 else None)


def _decoding(
    before: MetricsSnapshot, after: MetricsSnapshot, engine: Dialect, cs: CacheSet
) -> float | None:
    """Sequence-steps that produced tokens in the window (vLLM): iteration tokens
    less prompt tokens (the generated tokens) less accepted draft tokens; ``None``
    where the histogram's sum or the prompt family is not exported.

    Raises:
        _Inconsistent: see :func:`_delta`.
    """
    if cs.step_tokens is None or cs.prompt_tokens is None:
        return None
    scheduled = _optional_delta(before, after, cs.step_tokens)
    prefill = _optional_delta(before, after, cs.prompt_tokens)
    if scheduled is None or prefill is None:
        return None
    # where the engine counts cached prompt tokens apart, its iteration tokens hold only
    # the computed ones (vLLM >= the PromptTokenStats split): take the cached ones out
    cached = (
        None
        if cs.cached_prompt_tokens is None
        else _optional_delta(before, after, cs.cached_prompt_tokens)
    )
    computed = prefill - (cached or 0)
    return float(scheduled - computed - _spec_accepted(before, after, engine))


def _busy(
    before: MetricsSnapshot, after: MetricsSnapshot, calls: str, per_call: str
) -> float | None:
    """Busy sequences summed over the window's steps from a since-start mean per step
    (llama.cpp): ``mean_after × total_after − mean_before × total_before``."""
    g_b, g_a = before.values.get(per_call), after.values.get(per_call)
    n_b, n_a = before.values.get(calls), after.values.get(calls)
    if g_b is None or g_a is None or n_b is None or n_a is None:
        return None
    return g_a * n_a - g_b * n_b


def cache_window(
    before: MetricsSnapshot, after: MetricsSnapshot, during: Sequence[MetricsSnapshot] = ()
) -> CacheWindow | None:
    """The cache window between two scrapes, with the scrapes ``during`` it.

    Args:
        before / after: the window's opening and closing scrapes.
        during: scrapes taken while its requests ran (peaks only; failed ones skipped).

    Returns:
        a :class:`~deepseekbench.CacheWindow` (hit rate 0..1, KV usage peak as a
        fraction, queue peak in requests, engine steps and the mean sequences
        decoded per step), or ``None`` when a bracketing scrape
        failed or neither holds a cache or queue family. Never raises on
        server data (module docstring for what is counted).
    """
    if before.error is not None or after.error is not None:
        return None
    picked = _pick(before, after)
    if picked is None:
        return None
    engine, cs = picked
    counts = _counts(before, after, cs)
    rate: float | None
    if counts is not None:
        rate = counts[1] / counts[0] if counts[0] > 0 else None
    else:
        rate = after.values.get(cs.hit_rate) if cs.hit_rate is not None else None
        if rate is not None and not 0.0 <= rate <= 1.0:
            rate = None
    steps, batch = _engine_steps(before, after, engine, cs)
    scrapes = [before, *(s for s in during if s.error is None), after]
    kv = _peak([_kv(s, cs) for s in scrapes])
    return CacheWindow(
        engine=engine,
        source=cs.source,
        prefix_cache_queries=counts[0] if counts is not None else None,
        prefix_cache_hits=counts[1] if counts is not None else None,
        prefix_cache_hit_rate=rate,
        kv_cache_usage_peak=kv if kv is None or kv >= 0 else None,
        queue_depth_peak=_nonneg(_peak([_queue(s, cs) for s in scrapes])),
        scrapes=len(scrapes),
        engine_steps=steps,
        engine_batch_mean=batch,
        steps_source=_steps_source(cs) if steps is not None else None,
    )


def _steps_source(cs: CacheSet) -> str:
    """The families behind a window's engine steps, in words."""
    steps = cs.steps.removesuffix("_count") if cs.steps is not None else ""
    if cs.busy_per_step is not None:
        return f"prometheus:{steps}_total + {cs.busy_per_step}"
    return f"prometheus:{steps}"  # a histogram: its _count and _sum


def _nonneg(value: float | None) -> float | None:
    return value if value is None or value >= 0 else None


def _has_gauges(snapshot: MetricsSnapshot | None) -> bool:
    if snapshot is None or snapshot.error is not None:
        return False
    names: Mapping[str, object] = snapshot.series
    return any(n in names for _, cs in cache_sets() for n in (*cs.kv_usage, cs.queue) if n)


async def while_sampling(
    body: Callable[[], Awaitable[None]],
    route: EngineRoute,
    *,
    gate: LiveGate,
    client: httpx.AsyncClient | None,
    opening: MetricsSnapshot | None,
    interval_s: float = SAMPLE_INTERVAL_S,
) -> list[MetricsSnapshot]:
    """Await ``body()`` while scraping ``route``'s ``/metrics`` every ``interval_s`` (s).

    Returns the successful scrapes taken meanwhile. Nothing is scraped when
    ``opening`` (the window's first scrape) is ``None``, failed, or holds no
    KV-usage or queue gauge. A scrape the gate refuses (a spent ``max_requests``
    budget) stops the sampling, never the run; each scrape passes the gate, so it
    counts against ``max_requests``.

    Raises:
        ValueError: ``interval_s`` not above 0.
        Exception: whatever ``body()`` raised, unchanged (not wrapped in a group).
    """
    if interval_s <= 0:
        raise ValueError("interval_s must be > 0")
    samples: list[MetricsSnapshot] = []
    if not _has_gauges(opening):
        await body()
        return samples

    async def sample() -> None:
        while True:
            await anyio.sleep(interval_s)
            try:
                snap = await scrape_metrics(route, gate=gate, client=client)
            except LiveGateError:
                return
            if snap.error is None:
                samples.append(snap)

    failed: list[Exception] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        try:
            await body()
        except Exception as exc:  # re-raised below as it came, outside the task group
            failed.append(exc)
        finally:
            tg.cancel_scope.cancel()
    if failed:
        raise failed[0]
    return samples
