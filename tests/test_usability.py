"""What fresh users tripped on: verdict truthiness, notebook use, results."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    EmbeddedEngine,
    LiveGate,
    MissingExtraError,
    RunResult,
    UnknownKeyError,
    compare_speedup,
    run_plan,
)
from tests._replay import Script, replay_server
from tests.test_foundation import make_row


# -- item 18: truthiness of a verdict means "credited" -----------------------------------
def test_a_refused_verdict_is_falsy_and_a_credited_one_truthy() -> None:
    base = make_row()
    refused = compare_speedup(base, make_row(speculative="mtp", quality_parity="differs"))
    cand = make_row(speculative="mtp", tpot_ms=10.0)
    rounds = ({0: 20.0, 1: 20.1, 2: 19.9}, {0: 10.0, 1: 10.1, 2: 9.9})
    credited = compare_speedup(base, cand, rounds=rounds)
    point = compare_speedup(base, cand)  # no interval: a point estimate, not credited
    assert not refused.printed and not refused and bool(refused) is False
    assert credited.printed and credited and bool(credited) is True
    assert point.printed and point.point_estimate and bool(point) is False
    taken = [v for v in (refused, credited, point) if v]
    assert taken == [credited]


# -- item 20: EmbeddedEngine across notebook cells (separate event-loop entries) ---------
async def _health(base_url: str) -> int:
    async with LiveGate().client() as client:
        r = await client.get(base_url.removesuffix("/v1") + "/health")
        return r.status_code


@pytest.mark.parametrize("close_backend", ["asyncio", "trio"])
def test_embedded_engine_start_and_aclose_in_separate_cells(close_backend: str) -> None:
    engine = EmbeddedEngine()
    anyio.run(engine.start)  # cell 1
    try:
        url = engine.base_url
        assert anyio.run(_health, url) == 200  # cell 2: another event loop entirely
        assert engine.counters is not None
    finally:
        anyio.run(engine.aclose, backend=close_backend)  # cell 3

    async def refused() -> None:
        with pytest.raises(httpx.ConnectError):
            await _health(url)

    anyio.run(refused)
    anyio.run(engine.aclose)  # closing twice is harmless


def test_embedded_engine_start_twice_and_aclose_inside_a_block_are_refused() -> None:
    async def go() -> None:
        engine = await EmbeddedEngine().start()
        try:
            with pytest.raises(RuntimeError, match="already running"):
                await engine.start()
        finally:
            await engine.aclose()
        async with EmbeddedEngine() as inner:
            with pytest.raises(RuntimeError, match="async with"):
                await inner.aclose()

    anyio.run(go)


def _sse_reply(_: Any) -> Script:
    chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    return Script.sse(["data: " + orjson.dumps(chunk).decode() + "\n\n", "data: [DONE]\n\n"])


def _small_run(tmp_path: Path) -> RunResult:
    async def go() -> RunResult:
        async with replay_server(_sse_reply) as off, replay_server(_sse_reply) as mtp:
            plan = BenchmarkPlan.model_validate(
                {
                    "model": "m",
                    "routes": [
                        {"label": "off", "speculative": "off", "base_url": off.base_url},
                        {"label": "mtp", "speculative": "mtp", "base_url": mtp.base_url},
                    ],
                    "requests_per_cell": 3,
                    "warmup_per_cell": 0,
                    "parity": {"prompts": ["p"], "tasks": "none"},
                }
            )
            return await run_plan(plan, gate=LiveGate(), results_path=tmp_path / "r.jsonl")

    return anyio.run(go)


def test_run_result_repr_is_short_and_samples_names_known_routes(tmp_path: Path) -> None:
    result = _small_run(tmp_path)
    text = repr(result)
    assert len(text) < 400 and text.startswith("RunResult(") and "routes=[off, mtp]" in text
    assert "measurements=6" in text and "errors=0" in text
    cell = result.plan.cells[0].cell_id
    assert len(result.samples("mtp", cell, "e2e_ms")) == 3
    with pytest.raises(KeyError, match=r"known route labels: \['off', 'mtp'\]"):
        result.samples("mpt", cell)
    with pytest.raises(KeyError, match="known cells"):
        result.samples("mtp", "1k/265/non_think")
    with pytest.raises(AttributeError, match="tpot"):
        result.samples("mtp", cell, "tpot")


def test_every_result_accessor_refuses_an_unknown_key_by_name(tmp_path: Path) -> None:
    result = _small_run(tmp_path)
    cell = result.plan.cells[0].cell_id
    load = result.row_keys[0][2]
    assert result.samples("mtp", cell, "e2e_ms", load=load)  # the known key still answers
    calls: dict[str, Callable[..., object]] = {
        "samples": result.samples,
        "row_requests": result.row_requests,
        "round_values": result.round_values,
    }
    assert issubclass(UnknownKeyError, KeyError)  # `except KeyError` still catches it
    for name, call in calls.items():
        for kind, keys in (
            ("load", {"route": "mtp", "cell": cell, "load": "c=7"}),
            ("route", {"route": "mpt", "cell": cell, "load": load}),
            ("cell", {"route": "mtp", "cell": "nope", "load": load}),
        ):
            with pytest.raises(UnknownKeyError) as info:
                call(**keys)
            err: UnknownKeyError = info.value
            assert err.kind == kind, name
            assert repr(keys[kind]) in str(err) and err.known, name
            assert all(k in str(err) for k in err.known), name


def test_per_request_records_and_dataframe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _small_run(tmp_path)
    records = result.request_records()
    assert len(records) == 6 and {r["route"] for r in records} == {"off", "mtp"}
    first = records[0]
    assert first["error_kind"] is None and first["finish_reason"] == "stop"
    assert first["e2e_ms"] == result.measurements[0].measurement.e2e_ms

    monkeypatch.setitem(sys.modules, "pandas", None)  # not installed
    with pytest.raises(MissingExtraError, match="pandas"):
        result.requests_to_pandas()

    calls: list[tuple[Any, list[str]]] = []

    class FakeDataFrame:
        @staticmethod
        def from_records(recs: Any, columns: list[str]) -> str:
            calls.append((recs, columns))
            return "frame"

    fake = types.ModuleType("pandas")
    fake.DataFrame = FakeDataFrame  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pandas", fake)
    assert result.requests_to_pandas() == "frame"
    recs, columns = calls[0]
    assert recs == records and columns[:4] == ["route", "cell", "load", "index"]
    assert set(columns) == set(records[0])


def test_the_printed_short_load_reads_as_its_key(tmp_path: Path) -> None:
    """The scorecard prints ``c=1``; every accessor takes it for ``closed:c=1`` where one
    key reads so, and answers exactly as the full key does."""
    result = _small_run(tmp_path)
    cell = result.plan.cells[0].cell_id
    load = result.row_keys[0][2]
    short = load.split(":", 1)[-1]
    assert short != load  # the key carries its arrival kind; the short form does not
    assert result.check_keys("mtp", cell, short) == load
    assert result.samples("mtp", cell, "e2e_ms", short) == result.samples(
        "mtp", cell, "e2e_ms", load
    )
    assert result.round_values("mtp", cell, "e2e_ms", short) == result.round_values(
        "mtp", cell, "e2e_ms", load
    )
    assert len(result.row_requests("mtp", cell, short).requests) == 3
    with pytest.raises(UnknownKeyError, match="known load keys"):
        result.row_requests("mtp", cell, "c=7")


def test_a_row_passed_for_a_key_is_named_by_its_type_shortly(tmp_path: Path) -> None:
    result = _small_run(tmp_path)
    row = result.rows[0]
    with pytest.raises(UnknownKeyError) as info:
        result.round_values(row, "x")  # type: ignore[arg-type]
    text = str(info.value)
    assert "not a Row" in text and "row_keys" in text and "speedup_evidence" in text
    assert len(text) < 400 and repr(row)[:40] not in text
