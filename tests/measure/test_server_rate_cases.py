"""Every shared stream case that carries an engine's output rate, measured through the
library (loopback replay, ``measure_streamed``) under its engine's dialect: the count
check (the engine's rate × the span it divides by, against usage) finds no mismatch in
the engine's own figures, and the same case with the rate altered by 10 % either way is
flagged ``server_clock_count_mismatch``, per engine (more than 10 % where 10 % is within
the count slack of a short case: 1 token + 2 % of 10 tokens is 12 %).

Rates looked for: vLLM ``metrics.tokens_per_second``, llama.cpp
``timings.predicted_per_second``. A case carrying another engine's rate key fails here
until its dialect states a span (or the key is added below)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from deepseekbench import Dialect, EngineRoute, LiveGate, ServerClockFault, measure_streamed
from deepseekbench._analysis._clock_witness import count_check_skipped, request_faults
from tests._replay import Script, Write, replay_server
from tests.measure.test_cases_sse import cases_dir

pytestmark = pytest.mark.shared_cases  # every test here reads ../shared/cases

MISMATCH = ServerClockFault.server_clock_count_mismatch
COUNT_SLACK = (1, 0.02)  # 1 token + 2 %, as docs/measurement.md states it
# the engine's block, its rate key, the dialect that reads it
RATES: dict[str, tuple[str, Dialect]] = {
    "metrics": ("tokens_per_second", Dialect.vllm),
    "timings": ("predicted_per_second", Dialect.llamacpp),
}
RATE_WORD = re.compile(r"per_second|toks_per_s|throughput")
NOT_OUTPUT = {"timings.prompt_per_second"}  # llama.cpp's prompt-processing rate


def _bodies(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON bodies of the case's ``data:`` lines."""
    text = Script.from_case(case).body().decode("utf-8", "replace")
    out = []
    for line in text.replace("\r", "\n").split("\n"):
        if line.startswith("data: {"):
            try:
                out.append(json.loads(line[len("data: ") :]))
            except ValueError:
                continue  # a malformed-event case: no rate to read
    return out


def _rate_keys(value: Any, prefix: str = "") -> set[str]:
    """Dotted paths of every rate-like key in ``value``."""
    if isinstance(value, list):
        return set().union(*(_rate_keys(v, prefix) for v in value))
    if not isinstance(value, dict):
        return set()
    found = {prefix + k for k in value if RATE_WORD.search(k)}
    return found.union(*(_rate_keys(v, f"{prefix}{k}.") for k, v in value.items()))


def _case_rates(case: dict[str, Any]) -> set[str]:
    return set().union(*(_rate_keys(b) for b in _bodies(case))) - NOT_OUTPUT


def _rate_cases() -> list[Any]:
    files = sorted((cases_dir() / "sse").glob("*.json")) + sorted(
        (cases_dir() / "requests").glob("*.json")
    )
    found = [p for p in files if _case_rates(json.loads(p.read_text(encoding="utf-8")))]
    return [pytest.param(p, id=p.stem) for p in found] or [pytest.param(None, id="no-cases")]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _engine_of(case: dict[str, Any]) -> Dialect:
    """The dialect whose rate the case carries; fails on a rate no dialect spans here."""
    known = {f"{block}.{key}": dialect for block, (key, dialect) in RATES.items()}
    rates = _case_rates(case)
    assert rates <= set(known), f"rates {rates - set(known)}: give their dialect a span"
    engines = {known[r] for r in rates}
    assert len(engines) == 1, engines
    return engines.pop()


def _script(case: dict[str, Any], factor: float) -> Script:
    """The case's writes, each engine output rate multiplied by ``factor``."""
    writes = []
    for w in case["writes"]:
        assert "text" in w, "a rate case written as text"
        out = []
        for line in w["text"].split("\n"):
            if line.startswith("data: {"):
                body = json.loads(line[len("data: ") :])
                for block, (key, _) in RATES.items():
                    if isinstance(body.get(block), dict) and key in body[block]:
                        body[block][key] *= factor
                line = "data: " + json.dumps(body)
            out.append(line)
        writes.append(Write(float(w["delay_ms"]), "\n".join(out).encode("utf-8")))
    return Script(status=int(case["status"]), headers=dict(case["headers"]), writes=tuple(writes))


async def _faults(case: dict[str, Any], dialect: Dialect, factor: float) -> Any:
    request = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    async with replay_server(_script(case, factor)) as server:
        route = EngineRoute(base_url=server.base_url, model="dsv4-test", dialect=dialect)
        m = await measure_streamed(request, route=route, gate=LiveGate())
    assert m.error is None and m.server_toks_per_s is not None, m.error
    assert m.server_rate_span is not None and count_check_skipped(m) is None
    return request_faults(m)


@pytest.mark.anyio
@pytest.mark.parametrize("path", _rate_cases())
async def test_each_engines_own_rate_is_consistent_and_an_altered_one_is_flagged(
    path: Path | None,
) -> None:
    if path is None:
        pytest.skip(f"no shared case with a server rate under {cases_dir()}")
    case = json.loads(await anyio.Path(path).read_text(encoding="utf-8"))
    dialect = _engine_of(case)
    assert MISMATCH not in await _faults(case, dialect, 1.0)
    n = int(case["expect"]["completion_tokens"])
    # 10 %, or more where 10 % is within the count slack (1 token + 2 %: 12 % of 10 tokens)
    off = max(0.10, 1.5 * (COUNT_SLACK[0] + COUNT_SLACK[1] * n) / n)
    for factor in (1 - off, 1 + off):
        assert MISMATCH in await _faults(case, dialect, factor), factor
    # and within the slack it is no mismatch: the slack is not wider than stated
    within = 0.5 * (COUNT_SLACK[0] + COUNT_SLACK[1] * n) / n
    assert MISMATCH not in await _faults(case, dialect, 1 + within)


def test_the_rate_cases_cover_vllm_and_llamacpp() -> None:
    paths = [p.values[0] for p in _rate_cases()]
    if paths == [None]:
        pytest.skip(f"no shared cases under {cases_dir()}")
    engines = {_engine_of(json.loads(p.read_text(encoding="utf-8"))) for p in paths}
    assert engines == {Dialect.vllm, Dialect.llamacpp}
