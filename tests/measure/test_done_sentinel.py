"""The ``[DONE]`` sentinel and the keep-alive test read each event without copying it:
the same answers as stripping it (the per-event cost of the measuring client)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deepseekbench._measure._accumulator import _is_blank, _is_done

_PIECES = st.sampled_from(
    [" ", "\t", "\r", "\n", "\x0b", "\x0c", "\x1c", "\u00a0", "\u2003", "[DONE]", "D", "x", "{}"]
)


@given(st.lists(_PIECES, max_size=8).map("".join))
def test_done_and_blank_are_judged_as_after_strip(data: str) -> None:
    """Any mix of whitespace (ASCII and Unicode), the sentinel and other text."""
    assert _is_done(data) == (data.strip() == "[DONE]")
    assert _is_blank(data) == (not data.strip())
