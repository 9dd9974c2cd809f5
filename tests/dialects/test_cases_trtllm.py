"""TensorRT-LLM (``trtllm-serve``) cases, replayed like the shared ones.

The cases under ``tests/cases/trtllm/`` are written from TensorRT-LLM's
documented wire format and source (each names its source; none is a capture):
``sse/`` streams go through ``measure_streamed`` over a loopback socket on
asyncio and trio with every ``expect`` field asserted (the checks of
``tests/measure/test_cases_sse.py``), ``metrics/`` scrapes through ``parse_metrics`` and
``metrics_delta``. What a GPU run must still confirm is in ``docs/engines.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deepseekbench import ChatRequest, Dialect, EngineRoute, ReasoningMode, dialect_for
from deepseekbench._dialects.trtllm import acceptance_from_trtllm
from tests._replay import Script
from tests.measure.test_cases_sse import _assert_expect, _assert_extra, _measure, check_metrics_case

CASES = Path(__file__).resolve().parent.parent / "cases" / "trtllm"
SSE = [pytest.param(p, id=p.stem) for p in sorted((CASES / "sse").glob("*.json"))]
METRICS = [pytest.param(p, id=p.stem) for p in sorted((CASES / "metrics").glob("*.json"))]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return case


def test_the_cases_are_there() -> None:
    assert len(SSE) >= 4 and len(METRICS) >= 3


@pytest.mark.anyio
@pytest.mark.parametrize("path", SSE)
async def test_trtllm_case(path: Path) -> None:
    case = _load(path)
    m, sent = await _measure(case, Script.from_case(case))
    _assert_expect(m, case["expect"], timing=True)
    _assert_extra(m, sent, case.get("extra", {}), timing=True)
    if m.acceptance is not None:
        assert m.acceptance.engine is Dialect.trtllm
        assert m.acceptance.source == "choices[].avg_decoded_tokens_per_iter"


@pytest.mark.anyio
@pytest.mark.parametrize("path", METRICS)
async def test_trtllm_metrics_case(path: Path) -> None:
    record = await check_metrics_case(_load(path))
    assert record is None or record.engine is Dialect.trtllm


def test_trtllm_request_body() -> None:
    route = EngineRoute(
        base_url="http://127.0.0.1:1/v1", model="m", dialect="trtllm", continuous_usage=True
    )
    req = ChatRequest(
        messages=({"role": "user", "content": "x"},),
        max_tokens=64,
        reach_max_tokens=True,
        reasoning_mode=ReasoningMode.think_max,
    )
    body = route.build_body(req)
    assert body["ignore_eos"] is True and body["min_tokens"] == 64
    assert body["chat_template_kwargs"] == {"thinking": True, "reasoning_effort": "max"}
    # TensorRT-LLM's top-level reasoning_effort refuses "max"; nothing unconfirmed is sent
    assert "reasoning_effort" not in body and "return_spec_tokens_details" not in body
    assert body["stream_options"] == {"include_usage": True}
    assert dialect_for(Dialect.trtllm).depth_paths == ()


@pytest.mark.parametrize(
    ("value", "want"),
    [(2.6, 2.6), (1.0, 1.0), (0.99, None), (float("nan"), None), ("2.0", None), (True, None)],
)
def test_avg_decoded_tokens_per_iter_values(value: Any, want: float | None) -> None:
    chunk = {"choices": [{"index": 0, "delta": {}, "avg_decoded_tokens_per_iter": value}]}
    record = acceptance_from_trtllm(chunk)
    if want is None:
        assert record is None
    else:
        assert record is not None and record.acceptance_length == pytest.approx(want)
        assert record.accepted_token_ratio is None and record.draft_tokens is None


def test_choice_zero_wins() -> None:
    chunk = {
        "choices": [
            {"index": 1, "delta": {}, "avg_decoded_tokens_per_iter": 3.0},
            {"index": 0, "delta": {}, "avg_decoded_tokens_per_iter": 2.0},
        ]
    }
    record = acceptance_from_trtllm(chunk)
    assert record is not None and record.acceptance_length == 2.0
    assert acceptance_from_trtllm({"choices": [{"index": 0, "delta": {}}]}) is None
    assert acceptance_from_trtllm({"choices": None}) is None
    usage_only = {
        "choices": [],
        "usage": {"completion_tokens": 9, "avg_decoded_tokens_per_iter": 3},
    }
    record = acceptance_from_trtllm(usage_only)
    assert record is not None and record.acceptance_length == 3.0
