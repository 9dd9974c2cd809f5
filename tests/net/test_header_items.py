"""The aiohttp transport's header list: what ``httpx.Headers.items()`` gives, built
with one encoding lookup (the per-request cost of the measuring client)."""

from __future__ import annotations

import httpx
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench._net._transport import _header_items

_NAMES = st.sampled_from([b"Host", b"accept", b"X-A", b"x-a", b"X-a", b"Authorization"])
_VALUES = st.one_of(
    st.binary(min_size=0, max_size=8).filter(lambda b: b"\r" not in b and b"\n" not in b),
    st.text(max_size=8).map(lambda t: t.encode("utf-8")),
)


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=8))
def test_header_items_are_httpx_items(pairs: list[tuple[bytes, bytes]]) -> None:
    """Any names (repeated, in any case) and any bytes as values (ASCII, UTF-8 or
    other): the same pairs in the same order as ``Headers.items()``."""
    headers = httpx.Headers(pairs)
    assert _header_items(headers) == list(headers.items())
