"""The response's Content-Type and Content-Encoding read in one pass: exactly httpx's."""

from __future__ import annotations

import httpx
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench._measure._measure import _content_headers

# repeated names in any case, values with commas, spaces, UTF-8 and Latin-1 bytes
_names = st.sampled_from(
    [b"Content-Type", b"content-type", b"Content-Encoding", b"CONTENT-ENCODING", b"Server"]
)
_values = st.lists(
    st.sampled_from([b"gzip", b" br", b",", b" ", b"text/event-stream", b"\xc3\xa9", b"\xe9"]),
    max_size=4,
).map(b"".join)
_encodings = st.sampled_from([None, "ascii", "utf-8", "iso-8859-1", "latin-1"])


@given(st.lists(st.tuples(_names, _values), max_size=6), _encodings)
def test_content_headers_match_httpx(raw: list[tuple[bytes, bytes]], encoding: str | None) -> None:
    headers, expected = httpx.Headers(raw), httpx.Headers(raw)
    if encoding is not None:
        headers.encoding = expected.encoding = encoding
    try:
        want = (
            expected.get("content-type", ""),
            expected.get_list("content-encoding", split_commas=True),
        )
    except UnicodeDecodeError:
        return  # httpx itself cannot decode these under that encoding
    assert _content_headers(headers) == want
