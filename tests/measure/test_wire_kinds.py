"""The new wire kinds beyond the shared samples (sse/24-32, requests/03, metrics/03-04).

Each kind is exercised with variations of its own over real loopback sockets (asyncio
and trio), or through the reader it lives in: abnormal finish reasons, typed content
parts, SGLang's per-request histogram (both names), usage blocks that contradict
themselves, bodies that never send an unasked field a host may refuse, per-rank
Prometheus copies, counters without ``num_drafts``, and event streams under another
content-type.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from deepseekbench import (
    ChatRequest,
    Dialect,
    EngineRoute,
    ErrorKind,
    LiveGate,
    ReasoningMode,
    StreamMeasurement,
    acceptance_from_sglang,
    measure_streamed,
    metrics_delta,
    parse_metrics,
    read_acceptance,
)
from deepseekbench._measure._accumulator import _usage_counts
from tests._replay import Script, Write, replay_server

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
REQ = {"messages": MESSAGES, "max_tokens": 32}
DONE = "data: [DONE]\n\n"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def frame(obj: dict[str, Any]) -> str:
    return "data: " + orjson.dumps(obj).decode() + "\n\n"


def delta(d: dict[str, Any], finish: str | None = None) -> str:
    return frame({"choices": [{"index": 0, "delta": d, "finish_reason": finish}]})


def usage(**u: Any) -> str:
    return frame({"choices": [], "usage": u})


async def run(script: Script, **route_kw: Any) -> StreamMeasurement:
    async with replay_server(script) as server:
        route = EngineRoute(base_url=server.base_url, model="m", **route_kw)
        return await measure_streamed(REQ, route=route, gate=LiveGate())


# -- abnormal finish reasons ----------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("reason", ["abort", "error", "cancelled", "canceled", "Aborted"])
async def test_abnormal_finish_reason_is_an_error_that_keeps_the_measurement(
    reason: str,
) -> None:
    frames = [
        delta({"content": "one,"}),
        delta({"content": " two"}),
        delta({}, finish=reason),
        usage(prompt_tokens=3, completion_tokens=4, total_tokens=7),
        DONE,
    ]
    m = await run(Script.sse(frames))
    assert m.error is not None and m.error.kind is ErrorKind.server_error_event
    assert reason in m.error.message
    assert (m.text, m.finish_reason, m.completion_tokens) == ("one, two", reason, 4)
    assert m.ttft_ms is not None and len(m.chunk_arrival_ms) == 2
    assert len(m.errors) == 1


@pytest.mark.anyio
async def test_abort_in_the_token_chunk_without_done_is_not_truncation() -> None:
    frames = [delta({"content": "cut"}), delta({"content": " off"}, finish="abort")]
    m = await run(Script.sse(frames))
    assert [e.kind for e in m.errors] == [ErrorKind.server_error_event]
    assert m.text == "cut off" and len(m.chunk_arrival_ms) == 2


@pytest.mark.anyio
@pytest.mark.parametrize("reason", ["stop", "length", "tool_calls", "content_filter", "eos"])
async def test_normal_finish_reasons_are_completions(reason: str) -> None:
    m = await run(Script.sse([delta({"content": "ok"}, finish=reason), DONE]))
    assert m.error is None, m.errors
    assert m.finish_reason == reason


# -- delta.content as typed parts -----------------------------------------------------


@pytest.mark.anyio
async def test_typed_parts_variants_are_read_and_timed_as_tokens() -> None:
    frames = [
        delta({"role": "assistant", "content": []}),  # no part: not a token
        delta({"content": [{"type": "thinking", "thinking": "plain string"}]}),
        delta({"content": [{"type": "reasoning", "text": " + reasoning part"}]}),
        delta({"content": [{"type": "image_url", "image_url": {"url": "x"}}]}),  # no text
        delta(
            {
                "content": [
                    {"type": "thinking", "thinking": [{"type": "text", "text": " done."}]},
                    {"type": "text", "text": "Hi"},
                ]
            }
        ),
        delta({"content": [{"type": "text", "text": " there"}, {"type": "text", "text": "!"}]}),
        delta({}, finish="stop"),
        usage(prompt_tokens=2, completion_tokens=9, total_tokens=11),
        DONE,
    ]
    m = await run(Script(writes=tuple(Write(20.0, f.encode()) for f in frames)))
    assert m.error is None, m.errors
    assert m.text == "Hi there!"
    assert m.reasoning_text == "plain string + reasoning part done."
    assert len(m.chunk_arrival_ms) == 4 and len(m.itl_ms) == 3
    # TTFT is the first thinking part (write 2, ~40 ms), not the first answer part
    assert m.ttft_ms is not None and m.ttft_ms < m.chunk_arrival_ms[2]


# -- SGLang per-request histogram -----------------------------------------------------

_SG = {"spec_verify_ct": 40, "spec_num_correct_drafts": 64, "spec_num_proposed_drafts": 200}
_HIST = [9, 13, 8, 6, 3, 1]
_BY_POS = (0.775, 0.45, 0.25, 0.1, 0.025)


def _sglext(**details: Any) -> dict[str, Any]:
    return {"choices": [], "sglext": {"spec_tokens_details": details}}


@pytest.mark.parametrize(
    ("details", "want"),
    [
        ({**_SG, "spec_correct_drafts_histogram": _HIST}, _BY_POS),
        # the older name, indexed by correct drafts
        ({**_SG, "spec_accept_histogram": _HIST}, _BY_POS),
        # the older name, indexed by tokens per step (bonus included): bucket 0 empty
        ({**_SG, "spec_accept_histogram": [0, *_HIST]}, _BY_POS),
        # only the mean length to check against (1 + 64 / 40 = 2.6)
        (
            {"spec_verify_ct": 40, "spec_accept_length": 2.6, "spec_accept_histogram": _HIST},
            _BY_POS,
        ),
        # a histogram that disagrees with the counts is not used; the counts stand
        ({**_SG, "spec_correct_drafts_histogram": [9, 13, 8, 6, 3, 2]}, None),
        # nothing to check it against
        ({"spec_accept_rate": 0.3, "spec_correct_drafts_histogram": _HIST}, None),
        # bucket 0 empty and only the steps known: either indexing fits, so unknown
        ({"spec_verify_ct": 40, "spec_accept_histogram": [0, 10, 30]}, None),
    ],
)
def test_sglang_histogram_gives_per_position_acceptance(
    details: dict[str, Any], want: tuple[float, ...] | None
) -> None:
    record = acceptance_from_sglang(_sglext(**details))
    assert record is not None
    if want is None:
        assert record.acceptance_by_position is None
    else:
        assert record.acceptance_by_position == pytest.approx(want)
    if "spec_num_correct_drafts" in details:
        assert (record.accepted_tokens, record.draft_tokens) == (64, 200)


def test_sglang_histogram_in_meta_info_and_under_auto() -> None:
    chunk = {"choices": [{"index": 0, "meta_info": {**_SG, "spec_accept_histogram": _HIST}}]}
    record = read_acceptance(chunk, Dialect.auto)
    assert record is not None and record.acceptance_by_position == pytest.approx(_BY_POS)


# -- usage blocks: where reasoning_tokens is, and contradictions ------------------------


@pytest.mark.parametrize(
    ("u", "completion", "reasoning", "contradiction"),
    [
        (
            {"prompt_tokens": 1, "completion_tokens": 9, "total_tokens": 10, "reasoning_tokens": 4},
            9,
            4,
            False,
        ),
        (
            {
                "prompt_tokens": 1,
                "completion_tokens": 9,
                "total_tokens": 10,
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
            9,
            5,
            False,
        ),
        # reasoning > completion, total confirms the completion: reasoning refused
        (
            {
                "prompt_tokens": 1,
                "completion_tokens": 9,
                "total_tokens": 10,
                "reasoning_tokens": 12,
            },
            9,
            None,
            True,
        ),
        # reasoning > completion and no total to settle it: both refused
        (
            {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 12}},
            None,
            None,
            True,
        ),
        # prompt + completion != total (thoughts left out of completion): both refused
        ({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 40}, None, None, True),
        (
            {
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "total_tokens": 12,
                "reasoning_tokens": 2,
            },
            None,
            None,
            True,
        ),
        # no total: nothing to contradict
        ({"prompt_tokens": 10, "completion_tokens": 5}, 5, None, False),
    ],
)
def test_usage_counts_trusted_only_when_consistent(
    u: dict[str, Any], completion: int | None, reasoning: int | None, contradiction: bool
) -> None:
    counts = _usage_counts(u)
    assert counts.completion_tokens == completion
    assert counts.reasoning_tokens == reasoning
    assert (counts.contradiction is not None) is contradiction


@pytest.mark.anyio
async def test_untrusted_completion_count_is_estimated_and_said_so() -> None:
    frames = [
        delta({"reasoning_content": "think"}),
        delta({"content": "a"}),
        delta({"content": "b"}, finish="stop"),
        usage(prompt_tokens=10, completion_tokens=2, total_tokens=50),
        DONE,
    ]
    m = await run(Script.sse(frames))
    assert m.error is None, m.errors
    assert m.completion_tokens is None and m.tokens_estimated is True
    assert m.estimated_completion_tokens == 3 and m.tokens_estimated_by == "chunks"
    assert m.usage_contradiction is not None and "total_tokens 50" in m.usage_contradiction
    assert m.usage is not None and m.usage["total_tokens"] == 50  # the raw block is kept


# -- request bodies: nothing unasked that a host may refuse ----------------------------


@pytest.mark.parametrize("dialect", list(Dialect))
def test_non_think_never_sends_reasoning_effort(dialect: Dialect) -> None:
    route = EngineRoute(base_url="http://127.0.0.1:1/v1", model="m", dialect=dialect)
    body = route.build_body(ChatRequest(messages=MESSAGES))
    assert "reasoning_effort" not in body
    assert "none" not in orjson.dumps(body).decode()


@pytest.mark.anyio
async def test_openai_dialect_sends_reasoning_effort_only_when_asked() -> None:
    seen: list[dict[str, Any]] = []

    def answer(request: Any) -> Script:
        seen.append(orjson.loads(request.body))
        return Script.sse([delta({"content": "x"}, finish="stop"), DONE])

    async with replay_server(answer) as server:
        for mode, extras in [
            (ReasoningMode.non_think, {}),
            (ReasoningMode.think_high, {}),
            (ReasoningMode.non_think, {"reasoning_effort": "none"}),  # explicit: sent
        ]:
            route = EngineRoute(
                base_url=server.base_url, model="m", dialect="openai", request_extras=extras
            )
            req = ChatRequest(messages=MESSAGES, reasoning_mode=mode)
            m = await measure_streamed(req, route=route, gate=LiveGate())
            assert m.error is None
    assert [b.get("reasoning_effort") for b in seen] == [None, "high", "none"]


# -- Prometheus: per-rank copies, data-parallel gauges, counters without num_drafts -----


def _vllm(steps: float, drafted: float, accepted: float, labels: list[str]) -> str:
    lines = []
    for name, value in (
        ("num_drafts", steps),
        ("num_draft_tokens", drafted),
        ("num_accepted_tokens", accepted),
    ):
        lines.append(f"# TYPE vllm:spec_decode_{name} counter")
        lines += [f"vllm:spec_decode_{name}_total{{{lab}}} {value}" for lab in labels]
    return "\n".join(lines) + "\n"


def _window(before: str, after: str) -> Any:
    return metrics_delta(
        parse_metrics(before, model_name="m"), parse_metrics(after, model_name="m")
    )


def test_counter_copies_on_tp_ranks_are_counted_once() -> None:
    labels = ['model_name="m",tp_rank="0"', 'model_name="m",tp_rank="1"']
    record = _window(_vllm(10, 30, 15, labels), _vllm(20, 60, 30, labels))
    assert record is not None
    assert (record.verify_steps, record.draft_tokens, record.accepted_tokens) == (10, 30, 15)


def test_data_parallel_counters_are_summed_and_their_tp_copies_not() -> None:
    labels = [f'engine="{e}",model_name="m",tp_rank="{t}"' for e in ("0", "1") for t in ("0", "1")]
    record = _window(_vllm(10, 30, 15, labels), _vllm(20, 60, 30, labels))
    assert record is not None
    assert (record.verify_steps, record.draft_tokens, record.accepted_tokens) == (20, 60, 30)


def test_counter_copies_that_disagree_give_no_record() -> None:
    labels = ['model_name="m",tp_rank="0"', 'model_name="m",tp_rank="1"']
    after = _vllm(20, 60, 30, labels).replace(
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m",tp_rank="1"} 30',
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m",tp_rank="1"} 31',
    )
    assert _window(_vllm(10, 30, 15, labels), after) is None


def _sglang_gauges(rate: dict[str, float], length: dict[str, float]) -> str:
    out = ["# TYPE sglang:spec_accept_rate gauge"]
    out += [f'sglang:spec_accept_rate{{model_name="m",{lab}}} {v}' for lab, v in rate.items()]
    out += ["# TYPE sglang:spec_accept_length gauge"]
    out += [f'sglang:spec_accept_length{{model_name="m",{lab}}} {v}' for lab, v in length.items()]
    return "\n".join(out) + "\n"


def test_sglang_gauges_of_dp_ranks_are_never_added() -> None:
    text = _sglang_gauges(
        rate={'dp_rank="0",tp_rank="0"': 0.4, 'dp_rank="1",tp_rank="0"': 0.4},
        length={'dp_rank="0",tp_rank="0"': 2.6, 'dp_rank="1",tp_rank="0"': 3.0},
    )
    record = _window(text, text)
    assert record is not None
    assert record.accepted_token_ratio == pytest.approx(0.4)  # the ranks agree: that value
    assert record.acceptance_length is None  # they differ, and no weights: unknown


def test_sglang_gauges_that_disagree_everywhere_give_no_record() -> None:
    text = _sglang_gauges(
        rate={'dp_rank="0"': 0.3, 'dp_rank="1"': 0.5},
        length={'dp_rank="0"': 2.0, 'dp_rank="1"': 2.5},
    )
    assert _window(text, text) is None


def _two_counters(drafted: float, accepted: float, prefix: str = "vllm") -> str:
    return (
        f"# TYPE {prefix}:spec_decode_num_draft_tokens counter\n"
        f'{prefix}:spec_decode_num_draft_tokens_total{{model_name="m"}} {drafted}\n'
        f"# TYPE {prefix}:spec_decode_num_accepted_tokens counter\n"
        f'{prefix}:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}\n'
    )


@pytest.mark.parametrize("prefix", ["vllm", "llamacpp"])
def test_counters_without_num_drafts_give_the_ratio_only(prefix: str) -> None:
    record = _window(_two_counters(100, 50, prefix), _two_counters(300, 110, prefix))
    assert record is not None
    assert (record.draft_tokens, record.accepted_tokens) == (200, 60)
    assert record.accepted_token_ratio == pytest.approx(0.3)
    assert record.verify_steps is None and record.acceptance_length is None
    assert record.acceptance_by_position is None


def test_num_drafts_in_one_scrape_only_gives_no_record() -> None:
    before = _two_counters(100, 50)
    after = _two_counters(300, 110) + (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{model_name="m"} 80\n'
    )
    assert _window(before, after) is None


# -- an event stream under another content-type ---------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("ctype", ["application/json", "text/plain; charset=utf-8"])
async def test_complete_event_stream_under_another_type_is_measured_and_flagged(
    ctype: str,
) -> None:
    frames = [delta({"content": "a"}), delta({"content": "b"}, finish="stop"), DONE]
    m = await run(Script.sse(frames, headers={"content-type": ctype}))
    assert m.error is None, m.errors
    assert m.text == "ab" and m.unexpected_content_type == ctype


@pytest.mark.anyio
async def test_incomplete_event_stream_under_another_type_is_truncated_and_flagged() -> None:
    m = await run(Script.sse([delta({"content": "a"})], headers={"content-type": "text/plain"}))
    assert m.error is not None and m.error.kind is ErrorKind.truncated
    assert m.text == "a" and m.unexpected_content_type == "text/plain"


@pytest.mark.anyio
async def test_a_body_that_is_no_event_stream_is_invalid_event() -> None:
    body = orjson.dumps(
        {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}]}
    )
    script = Script(headers={"content-type": "application/json"}, writes=(Write(0, body),))
    m = await run(script)
    assert [e.kind for e in m.errors] == [ErrorKind.invalid_event]
    assert "application/json" in m.errors[0].message
    assert m.unexpected_content_type == "application/json"


@pytest.mark.anyio
async def test_event_stream_type_is_not_flagged() -> None:
    m = await run(Script.sse([delta({"content": "a"}, finish="stop"), DONE]))
    assert m.error is None and m.unexpected_content_type is None
