"""The gate's Authorization-header test is exactly httpx's ``"authorization" in headers``."""

from __future__ import annotations

import httpx
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench._net._gate import _has_authorization

_names = st.sampled_from(
    [b"Authorization", b"authorization", b"AUTHORIZATION", b"Authorizatio", b"X-\xc3\xa9", b"Host"]
)
_values = st.sampled_from([b"Bearer k", b"", b"\xe9", b"\xc3\xa9"])
_encodings = st.sampled_from([None, "ascii", "utf-8", "iso-8859-1", "latin-1", "utf-16"])


@given(st.lists(st.tuples(_names, _values), max_size=6), _encodings)
def test_has_authorization_matches_httpx(
    raw: list[tuple[bytes, bytes]], encoding: str | None
) -> None:
    headers, expected = httpx.Headers(raw), httpx.Headers(raw)
    if encoding is not None:
        headers.encoding = expected.encoding = encoding
    try:
        want = "authorization" in expected
    except UnicodeDecodeError:
        return  # httpx itself cannot decode these under that encoding
    assert _has_authorization(headers) == want
