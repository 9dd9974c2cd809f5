"""The aiohttp path's header list is exactly what ``httpx.Headers.items()`` gives."""

from __future__ import annotations

import httpx
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench._net._transport import _header_items

# header names and values as bytes: ASCII mostly, with some UTF-8 and Latin-1 bytes, and
# repeated names in any case (so joining and the encoding fallback are both exercised)
_names = st.sampled_from([b"Host", b"host", b"Content-Length", b"X-A", b"x-a", b"X-\xc3\xa9"])
_values = st.binary(max_size=8).filter(lambda v: b"\r" not in v and b"\n" not in v)


@given(st.lists(st.tuples(_names, _values), max_size=8))
def test_header_items_match_httpx(raw: list[tuple[bytes, bytes]]) -> None:
    headers = httpx.Headers(raw)
    mine = list(_header_items(headers))
    assert mine == list(httpx.Headers(raw).items())


_encodings = st.sampled_from(["ascii", "latin-1", "utf-8"])


@given(st.lists(st.tuples(_names, _values), max_size=8), _encodings)
def test_header_items_keep_a_set_encoding(raw: list[tuple[bytes, bytes]], encoding: str) -> None:
    headers = httpx.Headers(raw)
    headers.encoding = encoding
    expected = httpx.Headers(raw)
    expected.encoding = encoding
    try:
        want = list(expected.items())
    except UnicodeDecodeError:
        return  # httpx itself cannot decode these under that encoding
    assert list(_header_items(headers)) == want
