"""Replay every shared case (../shared/cases/sse/*.json) over a real loopback socket.

Each case is served write by write with its delays, measured with
``measure_streamed`` on asyncio and trio, and every ``expect`` field asserted.
The cases are samples of fault kinds, so each one is also replayed re-framed:
with CRLF and CR-only line ends, and re-split into small reads, and must give
the same non-timing results.

Where the cases are: ``$DEEPSEEKBENCH_CASES`` or ``<repo>/../shared/cases``.
Missing cases fail under ``CI=true`` and skip elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from deepseekbench._axes import Dialect
from deepseekbench._gate import LiveGate
from deepseekbench._measure import StreamMeasurement, measure_streamed
from deepseekbench._route import EngineRoute
from tests._replay import Script, Write, replay_server

REPO_ROOT = Path(__file__).resolve().parents[1]


def cases_dir() -> Path:
    env = os.environ.get("DEEPSEEKBENCH_CASES")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "cases"


def _case_files() -> list[Path]:
    base = cases_dir()
    sse = base / "sse"
    return sorted((sse if sse.is_dir() else base).glob("*.json"))


CASE_FILES = _case_files()
CASE_PARAMS = [pytest.param(p, id=p.stem) for p in CASE_FILES] or [
    pytest.param(None, id="shared-cases-missing")
]

KNOWN_EXPECT = {
    "text",
    "reasoning_text",
    "completion_tokens",
    "tokens_estimated",
    "ttft_ms_range",
    "e2e_ms_range",
    "finish_reason",
    "error_kind",
    "http_status",
    "accepted_token_ratio",
    "acceptance_length",
    "draft_tokens",
    "accepted_tokens",
}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _load(path: Path | None) -> dict[str, Any]:
    if path is None:
        where = cases_dir()
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"shared SSE cases not found under {where}/sse (set DEEPSEEKBENCH_CASES)")
        pytest.skip(f"shared SSE cases not found under {where}/sse")
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return case


async def _measure(script: Script) -> StreamMeasurement:
    async with replay_server(script) as server:
        route = EngineRoute(base_url=server.base_url, model="dsv4-test", dialect=Dialect.auto)
        m = await measure_streamed(
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16},
            route=route,
            gate=LiveGate(),
        )
        assert server.connections == 1
        return m


def _assert_expect(m: StreamMeasurement, expect: dict[str, Any], *, timing: bool) -> None:
    unknown = set(expect) - KNOWN_EXPECT
    assert not unknown, f"case has expect fields this test does not check: {unknown}"
    assert m.text == expect["text"]
    assert m.reasoning_text == expect["reasoning_text"]
    assert m.completion_tokens == expect["completion_tokens"]
    assert m.tokens_estimated is expect["tokens_estimated"]
    assert m.finish_reason == expect["finish_reason"]
    assert m.http_status == expect["http_status"]
    kind = m.error.kind.value if m.error is not None else None
    assert kind == expect["error_kind"], m.errors
    for name in ("draft_tokens", "accepted_tokens"):
        assert getattr(m, name) == expect[name], name
    for name in ("accepted_token_ratio", "acceptance_length"):
        want = expect[name]
        got = getattr(m, name)
        if want is None:
            assert got is None, name
        else:
            assert got == pytest.approx(want), name
    if timing:
        for name, got in (("ttft_ms_range", m.ttft_ms), ("e2e_ms_range", m.e2e_ms)):
            rng = expect[name]
            if rng is not None:
                assert got is not None, name
                low, high = rng
                assert low <= got <= high, f"{name}: {got:.1f} ms not in [{low}, {high}]"


@pytest.mark.anyio
@pytest.mark.parametrize("path", CASE_PARAMS)
async def test_shared_case(path: Path | None) -> None:
    case = _load(path)
    m = await _measure(Script.from_case(case))
    _assert_expect(m, case["expect"], timing=True)


def _reframed(case: dict[str, Any], variant: str) -> Script:
    """The case's body with other line ends, or re-split into 7-byte reads, no delays."""
    script = Script.from_case(case)
    body = script.body()
    if variant == "crlf":
        body = body.replace(b"\n", b"\r\n")
    elif variant == "cr":
        body = body.replace(b"\n", b"\r")
    if variant == "split7":
        writes = tuple(Write(0.0, body[i : i + 7]) for i in range(0, len(body), 7))
    else:
        writes = (Write(0.0, body),)
    return Script(status=script.status, headers=script.headers, writes=writes)


@pytest.mark.anyio
@pytest.mark.parametrize("variant", ["crlf", "cr", "split7"])
@pytest.mark.parametrize("path", CASE_PARAMS)
async def test_shared_case_reframed(path: Path | None, variant: str) -> None:
    case = _load(path)
    m = await _measure(_reframed(case, variant))
    _assert_expect(m, case["expect"], timing=False)
