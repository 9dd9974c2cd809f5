"""The one-line client diagnosis: one line per run on the client's health, and a flag column in
every rendering (text, markdown, HTML, CSV, JSON, pandas)."""

from __future__ import annotations

import csv
import io
from typing import Any

import orjson
import pytest

from deepseekbench import Scorecard
from deepseekbench._report._client_diagnosis import client_flag, run_diagnosis
from tests._helpers import make_row

STARVED: dict[str, Any] = {
    "client_saturated": True,
    "client_starved": True,
    "n_client_starved": 5,
    "client_cpu_share": 0.05,
    "client_core_wait_share": 0.42,
    "client_stall_ms": 534.0,
    "client_cores": 2,
    "client_load_1m": 5.1,
}
BUSY: dict[str, Any] = {"client_saturated": True, "client_cpu_share": 0.97}


def _card(**flags: Any) -> Scorecard:
    rows = [make_row(**flags)]
    for label in ("mtp", "ngram", "draft"):
        rows.append(make_row(speculative=label, route_label=label, tpot_ms=5.0, **flags))
    return Scorecard.from_rows(rows)


def test_a_starved_run_gets_one_line_and_a_flag_per_line() -> None:
    card = _card(**STARVED)
    text = card.to_text()
    line = (
        "client starved: read token chunks in bursts, waited for a CPU core 42% of the time "
        "(2 cores, load 5.1), its loop stalled up to 534 ms (4 of 4 rows); run the client "
        "on another host or pin it"
    )
    assert text.count("client starved") == 1 and line in text
    assert "add workers" not in text  # more workers would add contention
    header = next(ln for ln in text.splitlines() if ln.startswith("cell"))
    assert header.split()[-2:] == ["client", "speedup"]
    assert text.count(" starved ") >= 4  # the column, one per line
    assert "| client | speedup |" in card.to_markdown()
    assert "<th>client</th>" in card._repr_html_() and "<td>starved</td>" in card._repr_html_()
    recs = list(csv.DictReader(io.StringIO(card.to_csv())))
    assert [r["client_flag"] for r in recs] == ["starved"] * 4
    assert recs[1]["client_core_wait_share"] == "0.42" and recs[1]["n_client_starved"] == "5"
    js = orjson.loads(card.to_json())["lines"]
    assert [ln["client_flag"] for ln in js] == ["starved"] * 4
    # and the TPOT speedups are refused for it
    assert all("client_starved" in r["refusal_reasons"] for r in recs[1:])


def test_a_saturated_client_is_told_to_add_workers_once() -> None:
    text = _card(**BUSY).to_text()
    assert text.count("client saturated: 97% CPU (4 of 4 rows); add workers") == 1


def test_a_healthy_run_shows_no_flag() -> None:
    card = _card()
    text = card.to_text()
    assert "client" not in text.splitlines()[1]  # no column
    assert not any(ln.startswith("client ") for ln in text.splitlines())
    assert run_diagnosis(card.lines) is None
    assert [r["client_flag"] for r in card.to_records()] == [""] * 4


def test_the_pandas_frame_has_the_flag() -> None:
    pytest.importorskip("pandas")
    frame = _card(**STARVED).to_pandas()
    assert list(frame["client_flag"]) == ["starved"] * 4


def test_the_flag_names_the_cause() -> None:
    assert client_flag(make_row(**STARVED)) == "starved"
    assert client_flag(make_row(**BUSY)) == "saturated"
    lagged = make_row(client_saturated=True, client_cpu_share=0.1, client_core_wait_share=0.0)
    assert client_flag(lagged) == "lagged"
    # waiting for a core without bursts: its own word, never the refusal's
    waited = make_row(client_saturated=True, client_cpu_share=0.1, client_core_wait_share=0.4)
    assert client_flag(waited) == "waited" and not waited.client_starved
    note = run_diagnosis([waited])
    assert note is not None and note.startswith("client waited: waited for a CPU core 40%")
    assert "TPOT stands" in note
    # "starved" is the refusal's word: any row read in bursts, even a busy one
    busy_bursts = make_row(**{**BUSY, "client_starved": True})
    assert client_flag(busy_bursts) == "starved"
    assert client_flag(make_row()) == ""
    # the worst cause wins the run's one line
    lines = [make_row(**BUSY), make_row(**STARVED)]
    text = run_diagnosis(lines)
    assert text is not None and text.startswith("client starved:")
