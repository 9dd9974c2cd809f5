"""Mooncake trace replay (arrival times and shared blocks)."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from deepseekbench import (
    Dialect,
    LiveGate,
    TracePlan,
    WorkloadCoverageWarning,
    WorkloadFormatError,
    dry_run,
    load_mooncake,
    run_plan,
)
from deepseekbench._engine import _server as engine_server
from deepseekbench._plan._trace import MAX_TRACE_SPAN_MS, trace_items, trace_offsets_s
from deepseekbench._plan._workload import MAX_CONTEXT_TOKENS
from tests._fakes import CharCounter
from tests._helpers import COSTS, off_and_mtp, plan_of

B = 64  # tokens (characters) per hash id
SLACK = 16  # at most one generated word below a target, in characters
GAPS_MS = (0, 40, 40, 120, 10, 90, 0, 60, 30, 150, 20, 20, 80, 45, 5, 110, 60, 30, 70, 90)
IDS: tuple[tuple[int, ...], ...] = (
    (1, 2, 3), (1, 2, 4), (1, 5), (6, 7), (1, 2, 3, 8), (9,), (6, 7, 10), (1, 2), (11, 12),
    (1, 5, 13), (6,), (14, 15, 16), (1, 2, 3, 8, 17), (11,), (18, 19), (1,), (6, 7, 10, 20),
    (21, 22), (1, 2, 4, 23), (9, 24),
)  # fmt: skip


def _lines() -> list[dict[str, Any]]:
    times = list(itertools.accumulate(GAPS_MS))
    return [
        {
            "timestamp": t,
            "input_length": len(ids) * B - 5,
            "output_length": 24,
            "hash_ids": list(ids),
        }
        for t, ids in zip(times, IDS, strict=True)
    ]


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    return path


def _common(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _leading(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return sum(1 for _ in itertools.takewhile(lambda p: p[0] == p[1], zip(a, b, strict=False)))


def _check_shared_blocks(prompts: dict[int, str]) -> None:
    """Prompts of records with k leading ids in common share k blocks of text, not k + 1."""
    for i, j in itertools.combinations(range(len(IDS)), 2):
        k = _leading(IDS[i], IDS[j])
        common = _common(prompts[i], prompts[j])
        assert common >= k * (B - SLACK), (i, j, k, common)
        if k < min(len(IDS[i]), len(IDS[j])):
            assert common < (k + 1) * (B + 1), (i, j, k, common)


def test_load_mooncake_reads_and_refuses(tmp_path: Path) -> None:
    records = load_mooncake(_write(tmp_path / "t.jsonl", _lines()))
    assert len(records) == 20 and records[3].timestamp_ms == 200 and records[3].hash_ids == (6, 7)
    bad: list[dict[str, Any]] = [
        {"timestamp": -1, "input_length": 5, "output_length": 1},
        {"timestamp": 0, "input_length": 0, "output_length": 1},
        {"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]},
        {"timestamp": 0, "input_length": 2, "output_length": 1, "hash_ids": [1, 2, 3]},
    ]
    for k, line in enumerate(bad):
        with pytest.raises(WorkloadFormatError, match=r"t\d.jsonl:1"):
            load_mooncake(_write(tmp_path / f"t{k}.jsonl", [line]))
    back = [
        {"timestamp": 10, "input_length": 5, "output_length": 1},
        {"timestamp": 5, "input_length": 5, "output_length": 1},
    ]
    with pytest.raises(WorkloadFormatError, match=":2: timestamp"):
        load_mooncake(_write(tmp_path / "back.jsonl", back))


def test_items_share_exactly_their_common_blocks_and_are_token_true(tmp_path: Path) -> None:
    plan = TracePlan(path="t.jsonl", block_tokens=B, speedup=2)
    records = load_mooncake(_write(tmp_path / "t.jsonl", _lines()))
    items = anyio.run(trace_items, CharCounter(), records, plan)
    for item, rec in zip(items, records, strict=True):
        assert item.arrival_ms == rec.timestamp_ms and item.output_tokens == (24,)
        assert item.prompt_tokens == len(item.turns[0])
        assert rec.input_length - SLACK <= len(item.turns[0]) <= rec.input_length
    _check_shared_blocks({k: item.turns[0] for k, item in enumerate(items)})
    offsets = trace_offsets_s([(i, 0) for i in items], period_ms=0.0, speedup=2)
    assert offsets is not None
    assert offsets[3] == pytest.approx(0.1) and offsets[-1] == pytest.approx(sum(GAPS_MS) / 2000)


def test_a_20_line_trace_replays_with_its_timestamps_and_its_shared_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _write(tmp_path / "trace.jsonl", _lines())
    sent: list[str] = []
    render = engine_server.render_prompt

    def recording(messages: Any, **options: Any) -> str:
        sent.append(messages[-1].content)
        return render(messages, **options)

    monkeypatch.setattr(engine_server, "render_prompt", recording)

    async def main() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = plan_of(
                [
                    ("off", "off", off.base_url, Dialect.vllm),
                    ("mtp", "mtp", mtp.base_url, Dialect.vllm),
                ],
                {
                    "requests_per_cell": 20,
                    "repeats": 1,
                    "warmup_per_cell": 0,
                    "arrival": {"mode": "concurrency", "concurrency": 20},
                    "parity": {"tasks": "none", "prompts": ["Count from 5 to 12."]},
                    "workload": {
                        "source": "synthetic",
                        "tokenizer": "endpoint",
                        "trace": {"path": str(trace), "speedup": 2, "block_tokens": B},
                        # the trace's output lengths as caps, with no calibration pass
                        # on off (its requests would add each prompt a third time)
                        "output_length": "natural",
                    },
                },
                {},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=None)

    result = anyio.run(main)
    expected = [t / 2000.0 for t in itertools.accumulate(GAPS_MS)]  # s, at speedup 2
    for label in ("off", "mtp"):
        mine = sorted((m for m in result.measurements if m.route == label), key=lambda m: m.index)
        assert [m.item for m in mine] == [f"trace-{k + 1}" for k in range(20)]
        starts = [m.measurement.start_perf_ns or 0 for m in mine]
        assert all(starts)
        # each request's send start (the client asks the pool for a connection): the
        # clock starts at the body write (the client-clock checks), after the waits for a connection
        # and for the client's own loop to write, both recorded apart
        handed = [
            s - 1e6 * ((m.measurement.pool_wait_ms or 0.0) + (m.measurement.send_wait_ms or 0.0))
            for s, m in zip(starts, mine, strict=True)
        ]
        sent_s = [(h - handed[0]) / 1e9 for h in handed]
        # each request went out at its due time plus the schedule lag the runner recorded
        # for it (queue_ms: the client's own delay up to that send start, which a busy
        # machine makes large; a CI run saw 330 ms): late is allowed, unrecorded is not,
        # and the due times are the trace's
        assert all(m.queue_ms is not None for m in mine), label
        lag = [(m.queue_ms or 0.0) / 1000.0 for m in mine]  # s
        for k, (got, due) in enumerate(zip(sent_s, expected, strict=True)):
            assert abs(got - (due + lag[k] - lag[0])) <= 0.02, (label, k, got, due, lag[k])
        row = next(r for r in result.rows if r.route_label == label)
        # the row says when the schedule was not kept (p90 lag past arrival.max_lag_ms,
        # 100 ms), and only a client short of CPU (its own event-loop self-check) may
        # explain it: on an idle machine a replay that sends late fails here
        late = sum(x > 0.1 for x in lag)  # of 20: p90 is past 100 ms with 3 or more
        assert row.schedule_lagged if late >= 3 else (late > 0 or not row.schedule_lagged), lag
        assert not row.schedule_lagged or row.client_saturated, (label, lag)
        assert (row.trace, row.trace_speedup) == (str(trace), 2.0)
    # the prompts the engine received are exactly the trace's items, on both routes,
    # and records with k leading hash ids in common got k shared blocks of text
    plan = TracePlan(path=str(trace), speedup=2, block_tokens=B)
    items = anyio.run(trace_items, CharCounter(), load_mooncake(trace), plan)
    prompts = [i.turns[0] for i in items]
    assert sorted(p for p in sent if "Count from" not in p) == sorted(prompts * 2)
    _check_shared_blocks(dict(enumerate(prompts)))


def _trace_plan(trace: Path, **over: Any) -> Any:
    return plan_of(
        [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")],
        {
            "parity": {"tasks": "none", "prompts": ["Count from 5 to 12."]},
            "workload": {
                "source": "synthetic",
                "tokenizer": "endpoint",
                "trace": {"path": str(trace)},
            },
        },
        over,
    )


@pytest.mark.parametrize(
    "line,named",
    [
        ({"timestamp": 1e18, "input_length": 5, "output_length": 1}, "MAX_TRACE_SPAN_MS"),
        ({"timestamp": MAX_TRACE_SPAN_MS + 1, "input_length": 5, "output_length": 1}, "24 h"),
        ({"timestamp": 10, "input_length": 10**12, "output_length": 1}, "'input_length'"),
        ({"timestamp": 10, "input_length": 5, "output_length": 10**12}, "'output_length'"),
        (
            {"timestamp": 10, "input_length": MAX_CONTEXT_TOKENS + 1, "output_length": 1},
            "MAX_CONTEXT_TOKENS",
        ),
    ],
)
def test_the_dry_run_refuses_a_trace_past_its_bounds(
    tmp_path: Path, line: dict[str, Any], named: str
) -> None:
    first = {"timestamp": 0, "input_length": 5, "output_length": 1}
    plan = _trace_plan(_write(tmp_path / "t.jsonl", [first, line]))
    with pytest.raises(WorkloadFormatError, match=named) as info:
        dry_run(plan, gate=LiveGate())
    assert info.value.line_number == 2 and "t.jsonl:2" in str(info.value)


def test_a_trace_at_its_bounds_passes_the_dry_run(tmp_path: Path) -> None:
    lines: list[dict[str, Any]] = [
        {"timestamp": 5, "input_length": MAX_CONTEXT_TOKENS, "output_length": MAX_CONTEXT_TOKENS},
        {"timestamp": 5 + MAX_TRACE_SPAN_MS, "input_length": 1, "output_length": 1},
    ]
    plan = _trace_plan(_write(tmp_path / "t.jsonl", lines), requests_per_cell=6, repeats=3)
    assert dry_run(plan, gate=LiveGate()).plan_hash == plan.plan_hash()


def test_coverage_counts_a_traces_lines_not_n_prompts(tmp_path: Path) -> None:
    """A 20-line trace with 4 requests per cell sends 4 of its 20 items; the default
    ``n_prompts`` (8) says nothing about it."""
    plan = _trace_plan(_write(tmp_path / "t.jsonl", _lines()), requests_per_cell=4, repeats=1)
    with pytest.warns(WorkloadCoverageWarning, match="20 items, 4 will be sent"):
        dry = dry_run(plan, gate=LiveGate())
    assert any("raise requests_per_cell to 20" in w for w in dry.warnings)
    full = plan.model_copy(update={"requests_per_cell": 20})
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkloadCoverageWarning)
        assert dry_run(full, gate=LiveGate()).warnings == ()


def test_coverage_counts_shared_prefix_items_not_n_prompts() -> None:
    plan = plan_of(
        [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")],
        {
            "requests_per_cell": 8,
            "repeats": 1,
            "parity": {"tasks": "none", "prompts": ["Count from 5 to 12."]},
            "workload": {
                "source": "synthetic",
                "tokenizer": "endpoint",
                "shared_prefix": {
                    "groups": 3,
                    "prefix_tokens": 64,
                    "suffixes": 4,
                    "suffix_tokens": 16,
                },
            },
        },
        {},
    )
    with pytest.warns(WorkloadCoverageWarning, match="12 items, 8 will be sent"):
        plan.validate_sources()
