"""Members of each stream fault kind beyond the shared samples (and the SSE line-size bound).

Most members are folded through the measurement's own layers without a socket
(decoder -> accumulator -> measurement, the same calls ``_read_stream`` makes),
each under several framings; one member per kind also goes over a real loopback
socket with ``measure_streamed``.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from deepseekbench import (
    Dialect,
    EngineRoute,
    LiveGate,
    StreamLimits,
    StreamMeasurement,
    measure_streamed,
)
from deepseekbench._measure._accumulator import StreamAccumulator
from deepseekbench._measure._sse import SSEDecoder
from tests._replay import Script, Write, replay_server

ROUTE = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m")
FRAMINGS = ["lf", "crlf", "cr", "split3", "bytewise"]


def chunk(
    content: str | None = None, *, finish: str | None = None, index: int = 0, **kw: Any
) -> str:
    delta: dict[str, Any] = {} if content is None else {"content": content}
    obj: dict[str, Any] = {
        "object": "chat.completion.chunk",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }
    obj.update(kw)
    return "data: " + orjson.dumps(obj).decode() + "\n\n"


def raw(obj_text: str) -> str:
    return "data: " + obj_text + "\n\n"


def usage(n: int) -> str:
    return raw(
        orjson.dumps(
            {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": n}}
        ).decode()
    )


DONE = "data: [DONE]\n\n"
GOOD = [chunk("Hel"), chunk("lo", finish="stop"), usage(2)]


def _framed(body: bytes, framing: str) -> list[bytes]:
    if framing == "crlf":
        body = body.replace(b"\n", b"\r\n")
    elif framing == "cr":
        body = body.replace(b"\n", b"\r")
    if framing == "split3":
        return [body[i : i + 3] for i in range(0, len(body), 3)]
    if framing == "bytewise":
        return [body[i : i + 1] for i in range(len(body))]
    return [body]


def fold(
    frames: list[str], framing: str = "lf", *, limits: StreamLimits | None = None
) -> StreamMeasurement:
    """Decode and fold ``frames`` the way ``_read_stream`` does, without a socket."""
    acc = StreamAccumulator(Dialect.auto, 0, limits)
    decoder = acc.decoder()
    body = "".join(frames).encode("utf-8")
    clock = itertools.count(1_000_000, 1_000_000)
    for read in _framed(body, framing):
        for event in decoder.feed(read, next(clock)):
            acc.on_event(event)
            if acc.done:
                return acc.measurement(ROUTE)
    acc.end_of_stream(decoder)
    return acc.measurement(ROUTE)


def kind(m: StreamMeasurement) -> str | None:
    return m.error.kind.value if m.error is not None else None


# -- the end of a stream ---------------------------------------------------------


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize(
    "done",
    [
        "data: [DONE] \n\n",
        "data:  [DONE]\n\n",
        "data: \t[DONE]\t\n\n",
        "data: [DONE]\t \t\n\n",
        "data: [DONE]\n",  # the block never terminated
        "data: [DONE]",  # not even the line
        "data: [DONE] \n",
    ],
)
def test_done_sentinel_variants_end_a_complete_stream(done: str, framing: str) -> None:
    m = fold([*GOOD, done], framing)
    assert (kind(m), m.done, m.text, m.completion_tokens) == (None, True, "Hello", 2), m.errors


@pytest.mark.parametrize("framing", FRAMINGS)
def test_an_unterminated_json_event_at_the_end_is_still_truncated(framing: str) -> None:
    m = fold([chunk("Hel"), 'data: {"choices": [{"index": 0, "delta": {"content": "lo"}'], framing)
    assert kind(m) == "truncated" and m.text == "Hel"


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize(
    "frames",
    [
        [DONE],
        [": ping\n\n", DONE],
        [chunk(""), DONE],  # role/empty frame only
        [usage(0), "data: [DONE] \n"],
    ],
)
def test_done_after_nothing_is_not_a_success(frames: list[str], framing: str) -> None:
    m = fold(frames, framing)
    assert kind(m) == "truncated" and m.done and m.finish_reason is None


# -- errors in shapes the reader did not expect -----------------------------------


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize(
    "frames",
    [
        ['error: {"message": "boom", "code": 500}\n\n', DONE],
        ["error: plain text failure\n\n", DONE],
        [' error : {"message": "padded"}\n\n', DONE],
        ["ERROR: shouted\n\n", DONE],
        [chunk("Hi"), 'error: {"message": "mid-stream"}\n\n', DONE],
        [chunk("Hi", error={"message": "error beside choices"}), DONE],
        [
            raw('{"choices": [{"index": 0, "delta": {}, "error": {"message": "in a choice"}}]}'),
            DONE,
        ],
        [raw('{"choices": [{"index": 0, "delta": {"error": "in a delta"}}]}'), DONE],
        [raw('{"object": "error", "message": "older vLLM shape", "code": 400}'), DONE],
        ['event: error\ndata: {"message": "typed event"}\n\n', DONE],
    ],
)
def test_error_objects_anywhere_are_server_error_events(frames: list[str], framing: str) -> None:
    m = fold(frames, framing)
    assert kind(m) == "server_error_event", m.errors


@pytest.mark.parametrize("framing", FRAMINGS)
def test_null_error_fields_are_no_error(framing: str) -> None:
    m = fold(
        [chunk("Hel", error=None), chunk("lo", finish="stop", error={}), usage(2), DONE], framing
    )
    assert kind(m) is None and m.text == "Hello"


# -- types looser than expected -----------------------------------------------------


NULLISH = [
    '{"choices": null}',
    '{"choices": [null]}',
    '{"choices": [{"index": 0, "delta": null, "finish_reason": null}]}',
    '{"choices": [{"index": 0, "delta": {"content": null, "tool_calls": null, '
    '"reasoning_content": null}}]}',
    '{"choices": [{"index": 0, "delta": {}, "token_ids": null, "logprobs": null}]}',
    '{"choices": [], "usage": null}',
    '{"choices": [], "metrics": null, "sglext": null, "meta_info": null, "timings": null}',
    '{"choices": [], "metrics": {"speculative_decoding": null}, '
    '"sglext": {"spec_tokens_details": null}}',
    '{"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": null, '
    '"completion_tokens_details": null}}',
]


@pytest.mark.parametrize("framing", ["lf", "split3"])
@pytest.mark.parametrize("nullish", NULLISH)
def test_null_where_a_list_or_object_is_usual_is_not_invalid(nullish: str, framing: str) -> None:
    m = fold([chunk("Hel"), raw(nullish), chunk("lo", finish="stop"), usage(2), DONE], framing)
    assert kind(m) is None, m.errors
    assert m.text == "Hello" and m.completion_tokens == 2


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize(
    ("pieces", "text"),
    [
        (["\\ud83d", "\\ude00"], "\U0001f600"),  # the sample's kind: one emoji, two chunks
        (["a\\ud83c", "\\udf89b", "\\ud83d", "\\udc4d"], "a\U0001f389b\U0001f44d"),
        (["\\ud83d\\ude00"], "\U0001f600"),  # a pair in one chunk (orjson reads it)
        (["x\\ud83d", "y"], "x\ufffdy"),  # a lone half never paired: replaced, not kept
        (["\\ude00", "z"], "\ufffdz"),
    ],
)
def test_surrogate_halves_across_chunks_are_joined(
    pieces: list[str], text: str, framing: str
) -> None:
    frames = [raw('{"choices": [{"index": 0, "delta": {"content": "' + p + '"}}]}') for p in pieces]
    m = fold([*frames, chunk(finish="stop"), usage(len(pieces)), DONE], framing)
    assert kind(m) is None, m.errors
    assert m.text == text
    m.model_dump_json()  # storable: no lone surrogate left in the text


def test_surrogates_in_reasoning_too_and_nan_stays_invalid() -> None:
    frames = [
        raw('{"choices": [{"index": 0, "delta": {"reasoning_content": "\\ud83d"}}]}'),
        raw('{"choices": [{"index": 0, "delta": {"reasoning_content": "\\ude00"}}]}'),
        raw('{"choices": [], "usage": {"completion_tokens": NaN}}'),
        chunk("ok", finish="stop"),
        DONE,
    ]
    m = fold(frames)
    assert m.reasoning_text == "\U0001f600"
    assert kind(m) == "invalid_event"  # NaN is not JSON, whichever parser reads it


# -- lines the decoder ignores ----------------------------------------------------------


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize(
    "padded",
    [" data :", "data :", " data:", "Data:", "DATA:", "data\t:", "\ufeffdata:", "dat a:"],
)
def test_padded_field_names_are_dropped_but_counted(padded: str, framing: str) -> None:
    hidden = padded + ' {"choices": [{"index": 0, "delta": {"content": "lo"}}]}\n\n'
    m = fold([chunk("Hel"), hidden, chunk("!", finish="stop"), usage(3), DONE], framing)
    assert m.text == "Hel!"  # the spec drops the line ...
    assert m.sse_ignored_lines == 1  # ... and the measurement shows it did


@pytest.mark.parametrize("framing", FRAMINGS)
def test_known_fields_and_comments_are_not_counted(framing: str) -> None:
    frames = [": keep-alive\n\n", "id: 3\nevent: message\nretry: 10\n", *GOOD, DONE]
    m = fold(frames, framing)
    assert m.sse_ignored_lines == 0 and kind(m) is None


def test_bad_retry_and_nul_id_are_counted() -> None:
    m = fold(["retry: soon\nid: a\x00b\n", *GOOD, DONE])
    assert m.sse_ignored_lines == 2 and kind(m) is None


# -- mixed scopes: n > 1 ---------------------------------------------------------------


def _interleaved(n: int, per_choice: int, *, ids: bool = False) -> list[str]:
    frames = []
    for step in range(per_choice):
        for index in range(n):
            extra: dict[str, Any] = {}
            obj = {
                "choices": [
                    {"index": index, "delta": {"content": f"{index}{step}"}, "finish_reason": None}
                ]
            }
            if ids:
                obj["choices"][0]["token_ids"] = [100 + step, 200 + step]
            obj.update(extra)
            frames.append(raw(orjson.dumps(obj).decode()))
    frames += [chunk(finish="stop", index=i) for i in range(n)]
    return [*frames, usage(n * per_choice * (2 if ids else 1)), DONE]


@pytest.mark.parametrize("n", [2, 3, 5])
def test_n_choices_time_choice_zero_by_its_own_tokens(n: int) -> None:
    m = fold(_interleaved(n, 4))
    assert m.text == "00010203" and m.choices_seen == n
    assert m.completion_tokens == 4 * n and not m.tokens_estimated  # usage: every choice
    assert m.choice_tokens == 4 and m.choice_tokens_estimated  # choice 0: its 4 chunks
    assert m.tpot_ms is not None and m.ttft_ms is not None and m.e2e_ms is not None
    # never choice 0's span over all choices' tokens
    assert m.tpot_ms == pytest.approx((m.e2e_ms - m.ttft_ms) / (4 - 1))
    assert m.output_toks_per_s == pytest.approx(4 / (m.e2e_ms / 1000))
    assert m.tokens_per_chunk is None  # continuous usage would count every choice


def test_n_choices_with_token_ids_are_exact() -> None:
    m = fold(_interleaved(3, 4, ids=True))
    assert m.choice_tokens == 8 and not m.choice_tokens_estimated
    assert m.tpot_ms == pytest.approx(((m.e2e_ms or 0) - (m.ttft_ms or 0)) / 7)


def test_one_choice_keeps_the_usage_count() -> None:
    m = fold([*GOOD, DONE])
    assert m.choices_seen == 1 and m.choice_tokens is None
    assert m.tpot_ms == pytest.approx(((m.e2e_ms or 0) - (m.ttft_ms or 0)) / 1)


# -- size bounds (the SSE line-size bound) -------------------------------------------------------


@pytest.mark.parametrize("framing", ["lf", "split3", "crlf"])
def test_an_oversized_line_is_a_recorded_error_and_reading_goes_on(framing: str) -> None:
    limits = StreamLimits(max_line_bytes=256, max_event_bytes=1024)
    big = raw('{"choices": [{"index": 0, "delta": {"content": "' + "x" * 400 + '"}}]}')
    m = fold(
        [chunk("Hel"), big, chunk("lo", finish="stop"), usage(3), DONE], framing, limits=limits
    )
    assert kind(m) == "invalid_event" and "max_line_bytes=256" in (
        m.error.message if m.error else ""
    )
    assert m.text == "Hello" and m.done


@pytest.mark.parametrize("framing", ["lf", "split3"])
def test_an_oversized_event_of_many_lines_is_dropped(framing: str) -> None:
    limits = StreamLimits(max_line_bytes=1000, max_event_bytes=200)
    many = "".join("data: " + "y" * 50 + "\n" for _ in range(10)) + "\n"
    m = fold(
        [chunk("Hel"), many, chunk("lo", finish="stop"), usage(3), DONE], framing, limits=limits
    )
    assert kind(m) == "invalid_event" and "max_event_bytes=200" in (
        m.error.message if m.error else ""
    )
    assert m.text == "Hello"


def test_an_endless_line_keeps_memory_bounded() -> None:
    reports: list[str] = []
    d = SSEDecoder(max_line_bytes=1000, on_oversized=reports.append)
    d.feed(b"data: ", 0)
    for i in range(2000):  # 2 MB without a line end, in 1 KB reads
        assert d.feed(b"z" * 1024, i) == []
        assert d._part_len <= 1000
    assert len(reports) == 1 and d.oversized_events == 1
    assert d.feed(b"\n\ndata: ok\n\n", 9) == [("message", "ok", "", None, 9)]


def test_a_long_line_in_many_reads_is_joined_once() -> None:
    """Linear time: the kept parts are only appended to until the line ends."""
    d = SSEDecoder()
    d.feed(b"data: ", 0)
    for i in range(500):
        d.feed(b"a" * 100, i)
        assert len(d._part) == i + 2  # one new part per read, never a re-copied buffer
    (event,) = d.feed(b"\n\n", 1)
    assert event.data == "a" * 50_000 and not d._part


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        SSEDecoder(max_line_bytes=0)
    with pytest.raises(ValueError):
        StreamLimits(max_event_bytes=0)


# -- over a real socket, one member per kind --------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("frames", "want"),
    [
        ([*GOOD, "data: \t[DONE]\r\n"], None),
        (['error: {"message": "x"}\n\n', DONE], "server_error_event"),
        ([chunk("Hel"), " data : " + chunk("lo")[6:], chunk(finish="stop"), usage(2), DONE], None),
        (
            [chunk("Hel"), raw('{"choices": null}'), chunk("lo", finish="stop"), usage(2), DONE],
            None,
        ),
    ],
)
async def test_kinds_over_a_socket(frames: list[str], want: str | None) -> None:
    async with replay_server(Script.sse(frames)) as server:
        route = EngineRoute(base_url=server.base_url, model="m")
        m = await measure_streamed(
            {"messages": [{"role": "user", "content": "x"}]}, route=route, gate=LiveGate()
        )
    assert kind(m) == want, m.errors


@pytest.mark.anyio
async def test_an_endless_data_line_is_recorded_not_raised() -> None:
    """The SSE line-size bound: 4 MB in one line against a 64 KiB bound, then a normal stream."""
    writes = [Write(0, b"data: ")] + [Write(0, b"q" * 65536) for _ in range(64)]
    writes += [Write(0, f"\n\n{chunk('ok', finish='stop')}{usage(1)}{DONE}".encode())]
    async with replay_server(Script(writes=tuple(writes))) as server:
        route = EngineRoute(base_url=server.base_url, model="m")
        m = await measure_streamed(
            {"messages": [{"role": "user", "content": "x"}]},
            route=route,
            gate=LiveGate(),
            limits=StreamLimits(max_line_bytes=65536),
        )
    assert kind(m) == "invalid_event" and m.text == "ok" and m.done
