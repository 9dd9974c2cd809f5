"""Properties of the incremental WHATWG event-stream decoder (deepseekbench._measure._sse)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st

from deepseekbench._measure._sse import SSEDecoder, SSEEvent

# Field values: any text without line-end characters (NUL allowed in data).
_value = st.text(
    alphabet=st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]),
    max_size=12,
)


@dataclass(frozen=True)
class _Ev:
    data: tuple[str, ...]
    event: str | None
    id: str | None
    comment: str | None


_events = st.lists(
    st.builds(
        _Ev,
        data=st.lists(_value, min_size=1, max_size=3).map(tuple),
        event=st.none() | _value.filter(lambda s: s != ""),
        id=st.none() | _value.filter(lambda s: "\0" not in s),
        comment=st.none() | _value,
    ),
    max_size=6,
)


def _encode(events: list[_Ev], eol: str, no_space: bool) -> tuple[bytes, list[int]]:
    """The stream bytes and, per event, the offset of its dispatching line end."""

    def field(name: str, value: str) -> str:
        # without the space, a value that itself starts with a space would lose it
        sep = ":" if no_space and not value.startswith(" ") else ": "
        return f"{name}{sep}{value}"

    out = b""
    ends: list[int] = []
    for ev in events:
        lines: list[str] = []
        if ev.comment is not None:
            lines.append(":" + ev.comment)
        if ev.event is not None:
            lines.append(field("event", ev.event))
        if ev.id is not None:
            lines.append(field("id", ev.id))
        lines += [field("data", d) for d in ev.data]
        out += "".join(line + eol for line in lines).encode()
        ends.append(len(out))
        out += eol.encode()
    return out, ends


def _feed(decoder: SSEDecoder, body: bytes, cuts: list[int]) -> list[SSEEvent]:
    events: list[SSEEvent] = []
    bounds = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        events += decoder.feed(body[a:b], i)
    return events


def _chunk_index(bounds: list[int], offset: int) -> int:
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        if a <= offset < b:
            return i
    raise AssertionError("offset outside body")


@given(
    events=_events,
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
    no_space=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
    byte_by_byte=st.booleans(),
)
@example(
    events=[_Ev(("é€😀", "x"), None, None, None)],
    eol="\r\n",
    no_space=False,
    cuts=[],
    byte_by_byte=True,
)
def test_any_framing_any_split_gives_the_events(
    events: list[_Ev], eol: str, no_space: bool, cuts: list[int], byte_by_byte: bool
) -> None:
    body, ends = _encode(events, eol, no_space)
    if byte_by_byte:
        cuts = list(range(len(body)))
    decoder = SSEDecoder()
    got = _feed(decoder, body, cuts)
    assert not decoder.pending
    assert [e.data for e in got] == ["\n".join(ev.data) for ev in events]
    assert [e.event for e in got] == [ev.event or "message" for ev in events]
    last_id = ""
    bounds = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    for ev, out, end in zip(events, got, ends, strict=True):
        last_id = ev.id if ev.id is not None else last_id
        assert out.id == last_id
        # stamped with the read that held the blank line's first line-end byte
        assert out.arrival_ns == _chunk_index(bounds, end)


def test_comment_only_block_after_id_is_no_event() -> None:
    d = SSEDecoder()
    evs = d.feed(b"id: 1\ndata: a\n\n: ping\n\nid: 2\n\n", 0)
    assert [(e.data, e.id) for e in evs] == [("a", "1")]


def test_empty_data_dispatches_empty_event_and_bom_is_dropped() -> None:
    d = SSEDecoder()
    evs = d.feed(b"\xef\xbb", 0) + d.feed(b"\xbfdata:\n\ndata\n\n", 1)
    assert [e.data for e in evs] == ["", ""]


def test_retry_and_unknown_fields() -> None:
    d = SSEDecoder()
    evs = d.feed(b"retry: 12x\nfoo: 1\ndata: a\n\nretry: 40\ndata: b\n\n", 0)
    assert [(e.data, e.retry) for e in evs] == [("a", None), ("b", 40)]


def test_pending_partial_event() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: {", 0) == []
    assert d.pending
    d2 = SSEDecoder()
    d2.feed(b"data: x\n\n: trailing comment", 0)
    assert not d2.pending


def test_crlf_split_across_reads_is_one_line_end() -> None:
    d = SSEDecoder()
    evs = (
        d.feed(b"data: a\r", 0) + d.feed(b"\ndata: b\r", 1) + d.feed(b"\n\r", 2) + d.feed(b"\n", 3)
    )
    assert [(e.data, e.arrival_ns) for e in evs] == [("a\nb", 2)]
