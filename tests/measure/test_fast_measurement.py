"""The measurement built without validation equals the validated one.

``StreamAccumulator.measurement`` builds the :class:`StreamMeasurement` with
``model_construct`` (no pydantic validation on the hot path). Every value it passes
must therefore already be what validation would give: the same object, field for
field, and with the same type at each leaf (``True`` where an int belongs, or ``3.0`` where the
model says ``int``, would compare equal in Python but not in JSON). Random streams:
chunks whose leaves are replaced by random JSON scalars, seeded by the real chunks
of the shared SSE cases (vLLM metrics, SGLang meta_info, llama.cpp timings) where
they are present, and by a generic chunk shape always.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepseekbench import Dialect, EngineRoute, ErrorKind
from deepseekbench._measure._accumulator import StreamAccumulator

_CASES = Path(__file__).resolve().parents[2].parent / "shared" / "cases" / "sse"


def _case_chunks() -> list[dict[str, Any]]:
    """The JSON chunk objects of the shared SSE cases (none when they are absent)."""
    out: list[dict[str, Any]] = []
    for path in sorted(_CASES.glob("*.json")) if _CASES.is_dir() else []:
        case = json.loads(path.read_text(encoding="utf-8"))
        text = "".join(w.get("text", "") for w in case.get("writes", []))
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    obj = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    return out


_GENERIC: list[dict[str, Any]] = [
    {
        "choices": [
            {"index": 0, "delta": {"content": "a"}, "finish_reason": None, "token_ids": [1, 2]}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    },
    {
        "choices": [{"index": 0, "delta": {"reasoning_content": "r"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 4,
            "completion_tokens_details": {"reasoning_tokens": 1, "accepted_prediction_tokens": 1},
        },
    },
    {"choices": [{"index": 0, "delta": {"content": "b"}, "token_ids": [3]}]},
]
_CASE_CHUNKS = _case_chunks()
_SEEDS = (
    st.sampled_from(_GENERIC) | st.sampled_from(_CASE_CHUNKS)
    if _CASE_CHUNKS
    else st.sampled_from(_GENERIC)
)

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
)


def _mutate(value: Any, draw: st.DrawFn) -> Any:
    """``value`` with some of its scalar leaves (and list items) replaced by random ones."""
    if isinstance(value, dict):
        return {k: _mutate(v, draw) for k, v in value.items()}
    if isinstance(value, list):
        items = [_mutate(v, draw) for v in value]
        if draw(st.integers(0, 9)) == 0:
            items.append(draw(_SCALARS))
        return items
    return draw(_SCALARS) if draw(st.integers(0, 3)) == 0 else value


@st.composite
def _stream(draw: st.DrawFn) -> tuple[Dialect, list[tuple[int, dict[str, Any]]], bool]:
    n = draw(st.integers(0, 6))
    frames: list[tuple[int, dict[str, Any]]] = []
    at = 1_000_000
    for _ in range(n):
        seed = draw(_SEEDS)
        at += draw(st.integers(0, 50_000_000))
        frames.append((at, _mutate(seed, draw)))
    return draw(st.sampled_from(list(Dialect))), frames, draw(st.booleans())


def _typed(value: Any) -> Any:
    """``value`` with each leaf as (its type's name, its repr): ``True`` is not ``1``,
    ``3.0`` is not ``3`` (what JSON would tell apart; a lone surrogate, which a stream may
    carry, cannot be JSON-dumped, so the comparison is made here)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_typed(v) for v in value]
    return type(value).__name__, repr(value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_stream(), st.integers(1, 8) | st.none())
def test_fast_measurement_equals_the_validated_one(
    stream: tuple[Dialect, list[tuple[int, dict[str, Any]]], bool], served: int | None
) -> None:
    dialect, frames, failed = stream
    route = EngineRoute(
        base_url="http://127.0.0.1:1/v1", model="m", dialect=dialect, served_spec_tokens=served
    )
    acc = StreamAccumulator(dialect, start_ns=1_000_000, adapter=route.adapter)
    for at, chunk in frames:
        acc.on_chunk(chunk, at)
    if failed:
        acc.fail(ErrorKind.truncated, "cut")
        acc.pool_wait_ns, acc.send_wait_ns = 5, 7
    fast = acc.measurement(route)
    slow = acc.validated_measurement(route)
    assert fast == slow
    assert _typed(fast.model_dump()) == _typed(slow.model_dump())
    assert fast.model_fields_set == slow.model_fields_set
