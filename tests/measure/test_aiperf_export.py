"""AIPerf's per-request export turned into chunk arrival times (``benchmarks/_aiperf_export.py``).

The fragment ``tests/data/aiperf_profile_export_fragment.jsonl`` is a trimmed real export:
``aiperf profile`` 0.13, ``--streaming --concurrency 4 --request-count 6
--warmup-request-count 2 --output-tokens-mean 8`` against the embedded engine (one warm-up
and three profiled records kept, only the metrics the parser reads plus ``request_latency``
and ``decode_duration``, which it does not, as independent checks). No timing: every input
is a recorded number.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _aiperf_export import AIPerfRequest, aiperf_requests

FRAGMENT = Path(__file__).resolve().parents[1] / "data" / "aiperf_profile_export_fragment.jsonl"
LINES = FRAGMENT.read_bytes().splitlines()
RECORDS = [orjson.loads(line) for line in LINES]
PROFILED = [r for r in RECORDS if r["metadata"]["benchmark_phase"] == "profiling"]


def _ms(record: dict[str, object], name: str) -> float:
    metrics = record["metrics"]
    assert isinstance(metrics, dict)
    value = metrics[name]["value"]
    assert metrics[name]["unit"] == "ms"
    return float(value)


def test_fragment_skips_warmup_and_keeps_ids() -> None:
    got = aiperf_requests(LINES, 0)
    assert [r.request_id for r in got] == [r["metadata"]["x_request_id"] for r in PROFILED]
    assert len(got) == 3 < len(RECORDS)


def test_fragment_chunks_end_at_aiperf_request_latency() -> None:
    """Start + TTFT + every inter-chunk gap lands on AIPerf's own request latency (its
    last response), and the decode span equals its ``decode_duration``: a field the parser
    never reads agrees with what it rebuilt (to 1 us)."""
    for request, record in zip(aiperf_requests(LINES, 0), PROFILED, strict=True):
        assert request.call_ns == record["metadata"]["request_start_ns"]
        assert len(request.chunk_ns) == 8  # --output-tokens-mean 8: one content chunk each
        latency_ms = (request.chunk_ns[-1] - request.call_ns) / 1e6
        assert latency_ms == pytest.approx(_ms(record, "request_latency"), abs=1e-3)
        decode_ms = (request.chunk_ns[-1] - request.chunk_ns[0]) / 1e6
        assert decode_ms == pytest.approx(_ms(record, "decode_duration"), abs=1e-3)
        ttft_ms = (request.chunk_ns[0] - request.call_ns) / 1e6
        assert ttft_ms == pytest.approx(_ms(record, "time_to_first_token"), abs=1e-3)
        setup = sum(
            _ms(record, k)
            for k in ("http_req_blocked", "http_req_dns_lookup", "http_req_connecting")
        )
        assert (request.connection_ns - request.call_ns) / 1e6 == pytest.approx(setup, abs=1e-3)


@given(st.integers(min_value=-(10**18), max_value=10**18))
def test_offset_moves_every_time_alike(offset: int) -> None:
    """The wall-to-perf offset shifts absolute times only: gaps are unchanged."""
    base, moved = aiperf_requests(LINES, 0), aiperf_requests(LINES, offset)
    for a, b in zip(base, moved, strict=True):
        assert b.call_ns == a.call_ns - offset
        assert b.connection_ns == a.connection_ns - offset
        assert [t - b.call_ns for t in b.chunk_ns] == [t - a.call_ns for t in a.chunk_ns]


def _line(metrics: dict[str, object]) -> bytes:
    meta = {"x_request_id": "r", "request_start_ns": 10_000_000, "benchmark_phase": "profiling"}
    return orjson.dumps({"metadata": meta, "metrics": metrics})


def test_units_and_a_failed_request() -> None:
    in_us = _line(
        {
            "time_to_first_token": {"value": 2500.0, "unit": "us"},
            "inter_chunk_latency": {"value": [1000.0, 500.0], "unit": "us"},
            "http_req_connecting": {"value": 0.25, "unit": "ms"},
        }
    )
    assert aiperf_requests([in_us, b""], 1_000_000) == [
        AIPerfRequest("r", 9_000_000, 9_250_000, [11_500_000, 12_500_000, 13_000_000])
    ]
    failed = _line({"http_req_connecting": {"value": 1.0, "unit": "ms"}})
    assert aiperf_requests([failed], 0) == [AIPerfRequest("r", 10_000_000, 11_000_000, [])]
