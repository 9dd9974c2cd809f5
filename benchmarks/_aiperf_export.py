"""AIPerf's per-request records (``profile_export.jsonl``, AIPerf 0.13) as chunk arrival times.

Each line is one request: ``metadata`` (``x_request_id``, ``request_start_ns`` — wall clock,
``time.time_ns`` frame, the request's start — and ``benchmark_phase``) and ``metrics`` (each a
``{"value", "unit"}``): ``time_to_first_token`` (from the request start to the first content
chunk), ``inter_chunk_latency`` (a list: the gap before each later content chunk) and the
aiohttp trace phases ``http_req_blocked`` (pool wait), ``http_req_dns_lookup`` and
``http_req_connecting``. Fields read from a real export of ``aiperf profile --streaming``
against the embedded engine (the trimmed fragment in
``tests/data/aiperf_profile_export_fragment.jsonl``).

:func:`aiperf_requests` rebuilds, per profiled request, the perf_counter ns of its start ("from
the call"), of its connection being ready (start + blocked + DNS + connecting, "from the
connection") and of each content chunk's arrival (start + TTFT, then + each inter-chunk gap), so
the fidelity benchmark can score AIPerf's clock against the engine's send times exactly as it
scores its own readers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


@dataclass(frozen=True)
class AIPerfRequest:
    """One AIPerf request on the perf_counter clock (ns): its start (``call_ns``), its
    connection ready (``connection_ns``) and each content chunk's arrival (``chunk_ns``;
    empty when AIPerf recorded no first token, i.e. the request failed)."""

    request_id: str
    call_ns: int
    connection_ns: int
    chunk_ns: list[int]


def _ns(metric: Any) -> list[float]:
    """A metric's value(s) in ns (a scalar becomes a one-item list; absent -> [])."""
    if not isinstance(metric, dict) or metric.get("value") is None:
        return []
    scale = _TO_NS[metric.get("unit", "ms")]
    value = metric["value"]
    values = value if isinstance(value, list) else [value]
    return [float(v) * scale for v in values]


def aiperf_requests(lines: Iterable[str | bytes], wall_minus_perf_ns: int) -> list[AIPerfRequest]:
    """Profiled requests of an AIPerf ``profile_export.jsonl`` (warm-up records skipped).

    ``wall_minus_perf_ns``: ``time.time_ns() - time.perf_counter_ns()`` sampled on the same
    machine (the export is on the wall clock, the engine's send times on perf_counter). Any
    error in that offset shifts every absolute time alike: it moves the receive-side TTFT
    error, never the gaps (ITL, TPOT) nor the TTFT from the call.
    Chunk times are rounded to whole ns. Raises ``KeyError`` on a record without
    ``metadata.request_start_ns`` or ``metadata.x_request_id`` and ``ValueError``
    (``orjson.JSONDecodeError``) on a line that is not JSON.
    """
    out: list[AIPerfRequest] = []
    for line in lines:
        if not line.strip():
            continue
        record = orjson.loads(line)
        meta, metrics = record["metadata"], record.get("metrics", {})
        if meta.get("benchmark_phase") not in (None, "profiling"):
            continue
        start = int(meta["request_start_ns"]) - wall_minus_perf_ns
        setup = sum(
            sum(_ns(metrics.get(k)))
            for k in ("http_req_blocked", "http_req_dns_lookup", "http_req_connecting")
        )
        chunks: list[int] = []
        ttft = _ns(metrics.get("time_to_first_token"))
        if ttft:  # offsets from the start summed as floats, added to the int start last:
            since = ttft[0]  # a float near 1.8e18 ns would keep only 256 ns steps
            chunks.append(start + round(since))
            for gap in _ns(metrics.get("inter_chunk_latency")):
                since += gap
                chunks.append(start + round(since))
        out.append(AIPerfRequest(meta["x_request_id"], start, start + round(setup), chunks))
    return out
