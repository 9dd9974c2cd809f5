"""TPOT's decode window when the final token (EOS or a stop id) is counted by usage
but never streamed as text: seen on real vLLM as 2.97 ms client TPOT against the
engine's 17.71 ms on a 3-token answer. The chunks are fed with chosen arrival
times, so nothing here depends on the machine's speed."""

from __future__ import annotations

from typing import Any

import pytest

from deepseekbench import Dialect, EngineRoute, StreamMeasurement
from deepseekbench._measure._accumulator import StreamAccumulator

MS = 1_000_000  # ns


def _chunk(content: str | None, finish: str | None = None, usage: int | None = None) -> Any:
    delta = {"content": content} if content is not None else {}
    chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
    return chunk


def _measure(frames: list[tuple[float, Any]]) -> StreamMeasurement:
    acc = StreamAccumulator(Dialect.vllm, start_ns=0)
    for at_ms, chunk in frames:
        acc.on_chunk(chunk, int(at_ms * MS))
    return acc.measurement(EngineRoute(base_url="http://127.0.0.1:1/v1", model="m"))


def test_an_unstreamed_eos_is_timed_by_its_finish_chunk() -> None:
    """vLLM, 3 tokens: 'Hi' (prefill), '!' one step later, EOS one more step later,
    streamed as an empty delta with finish_reason; usage counts all 3. Each step is
    17.7 ms, so TPOT is 17.7 ms: the old window (last text chunk) gave half of it."""
    m = _measure(
        [
            (10.0, _chunk("Hi")),
            (27.7, _chunk("!")),
            (45.4, _chunk("", "stop")),
            (45.5, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}),
        ]
    )
    assert m.completion_tokens == 3 and m.e2e_ms == pytest.approx(27.7)
    assert m.finish_ms == pytest.approx(45.4)
    assert m.tpot_tokens == 3
    assert m.tpot_ms == pytest.approx(17.7)


def test_a_finish_on_the_last_token_chunk_keeps_the_window() -> None:
    m = _measure([(10.0, _chunk("a")), (20.0, _chunk("b")), (30.0, _chunk("c", "length", 3))])
    assert m.finish_ms == pytest.approx(30.0) and m.tpot_ms == pytest.approx(10.0)


def test_tokens_never_streamed_nor_timed_are_left_out_of_the_denominator() -> None:
    """Continuous usage says 2 tokens were streamed by the last text chunk, the final
    usage says 3, and no later chunk timed the third: 2 tokens over the window."""
    m = _measure(
        [
            (10.0, _chunk("Hi", usage=1)),
            (27.7, _chunk("!", "stop", usage=2)),
            (27.8, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}),
        ]
    )
    assert m.completion_tokens == 3
    assert m.tpot_tokens == 2
    assert m.tpot_ms == pytest.approx(17.7)


def test_a_later_finish_with_every_counted_token_streamed_keeps_the_window() -> None:
    """One token a chunk and usage counts no more than the chunks: the finish chunk
    carries no counted token (an engine that does not count its EOS), so it does not
    stretch the window."""
    m = _measure(
        [(10.0, _chunk("a")), (20.0, _chunk("b")), (40.0, _chunk("", "stop")), (40.1, _usage(2))]
    )
    assert m.tpot_tokens == 2 and m.tpot_ms == pytest.approx(10.0)


def _usage(n: int) -> Any:
    return {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}}
