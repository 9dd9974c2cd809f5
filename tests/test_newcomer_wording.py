"""What a newcomer reads in a scorecard says what was measured and how.

A trace replay says so (not ``c=4``); with ``clock = "server"`` the main TPOT column
is the engine's, and its head and the title say so; every client flag in the
``client`` column has a note; a ``*`` footnote marker and its footnote come together,
in text, Markdown and HTML.
"""

from __future__ import annotations

import html
import re

from deepseekbench import Row, Scorecard
from tests._helpers import make_row

MTP = {"speculative": "mtp", "route_label": "mtp"}


def _replay(**kw: object) -> list[Row]:
    trace = {"trace": "traces/mooncake.jsonl", "trace_speedup": 2.0, "concurrency": 4, **kw}
    return [make_row(**trace), make_row(**MTP, tpot_ms=5.0, **trace)]


def test_a_trace_replay_says_it_is_one_in_text_and_html() -> None:
    card = Scorecard.from_rows(_replay())
    text, page = card.to_text(), html.unescape(card.to_html(plots=False))
    for shown in (text, page):
        assert "trace×2 c≤4" in shown and "c=4" not in shown
    assert [ln.load_phrase for ln in card.lines] == ["trace replay ×2, at most 4 in flight"] * 2
    plain = Scorecard.from_rows(_replay(trace_speedup=1.0))
    assert "trace c≤4" in plain.to_text()
    closed = Scorecard.from_rows(_replay(trace=None, trace_speedup=None))
    assert " c=4 " in closed.to_text() and "trace" not in closed.to_text()


def _main_table(text: str) -> list[list[str]]:
    """The scorecard's first table, split into cells (two spaces or more apart)."""
    body = text.split("\n\n", 1)[0].splitlines()
    start = next(i for i, ln in enumerate(body) if ln.startswith("cell"))
    return [re.split(r"\s{2,}", ln.strip()) for ln in body[start:] if not ln.startswith("---")]


def test_the_server_clock_shows_its_own_tpot_in_the_main_column() -> None:
    rows = [
        make_row(server_tpot_ms=10.0),
        make_row(**MTP, tpot_ms=0.66, server_tpot_ms=3.8),
    ]
    server = Scorecard.from_rows(rows, clock="server")
    text = server.to_text()
    assert text.startswith("Scorecard (speedup by tpot_ms on the server clock;")
    head, off, mtp = _main_table(text)
    tpot = head.index("TPOT ms (server)")
    assert (off[tpot], mtp[tpot]) == ("10.00", "3.80")
    assert "2.63× by tpot_ms (server clock)" in mtp[-1]
    assert "| TPOT ms (server) |" in server.to_markdown()
    assert "TPOT ms (server)" in server._repr_html_()
    client = Scorecard.from_rows(rows)  # the default clock: the client's TPOT, plain head
    head, _, mtp = _main_table(client.to_text())
    assert "TPOT ms (server)" not in head and mtp[head.index("TPOT ms")] == "0.66"


def test_every_client_flag_shown_has_a_note() -> None:
    starved = {"client_starved": True, "client_saturated": True}
    lagged = {"client_saturated": True, "client_cpu_share": 0.05, "client_stall_ms": 120.0}
    rows = [
        make_row(**lagged),
        make_row(**MTP, tpot_ms=5.0, **lagged),
        make_row(route_label="off2", concurrency=2, **starved),
        make_row(**MTP | {"route_label": "mtp2"}, tpot_ms=5.0, concurrency=2, **starved),
    ]
    card = Scorecard.from_rows(rows)
    assert [ln.client_flag for ln in card.lines] == ["lagged", "lagged", "starved", "starved"]
    text = card.to_text()
    assert "client starved: read token chunks in bursts" in text
    assert "client lagged at 5% CPU, its loop stalled up to 120 ms (2 of 4 rows)" in text


def _footnoted(card: Scorecard) -> dict[str, tuple[bool, bool]]:
    """Per rendering: (a ``*`` marker in the table, the ``*`` footnote in the notes)."""
    md = card.to_markdown()
    page = html.unescape(card._repr_html_())
    return {
        "text": ("0.80*" in card.to_text(), "\n* acceptance is" in card.to_text()),
        "markdown": ("0.80\\*" in md, "\n- \\* acceptance is" in md),
        "html": ("0.80*" in page, "<li>* acceptance is" in page),
    }


def test_a_footnote_marker_and_its_footnote_come_together() -> None:
    off = make_row()
    shown = make_row(**MTP, tpot_ms=5.0, accepted_token_ratio=0.8, acceptance_scope="server_wide")
    card = Scorecard.from_rows([off, shown])
    assert _footnoted(card) == dict.fromkeys(("text", "markdown", "html"), (True, True))
    # server-wide scope but no acceptance figure to mark: no marker, so no footnote
    unmarked = make_row(**MTP, tpot_ms=5.0, acceptance_scope="server_wide")
    bare = Scorecard.from_rows([off, unmarked])
    assert _footnoted(bare) == dict.fromkeys(("text", "markdown", "html"), (False, False))
    assert "server-wide" not in bare.to_text()
