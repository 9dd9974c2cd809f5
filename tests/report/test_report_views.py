"""What a new user looks for in every rendering: the load of the
per-category and per-turn lines, HTML with those tables, p90/p99 beside the medians,
and the engine's own TTFT and queueing time."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import numpy as np
import orjson
import pytest

from deepseekbench import Dispersion, Scorecard, SliceStats
from deepseekbench._analysis._stats import percentiles
from tests._helpers import make_row

TTFT = [10.0, 11.0, 12.0, 13.0, 50.0, 14.0, 15.0, 90.0]
TPOT = [2.0, 2.5, 3.0, 3.5, 9.0, 4.0, 4.5, 5.0]
ITL = [1.0, 1.5, 2.0, 30.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]
E2E = [100.0, 110.0, 120.0, 400.0, 130.0, 140.0, 150.0, 160.0]


def _slice(name: str, ttft: float, tpot: float) -> SliceStats:
    return SliceStats(
        name=name, n_requests=4, ttft_ms=ttft, tpot_ms=tpot, e2e_ms=100.0, output_toks_per_s=10.0,
        accepted_token_ratio=0.5, acceptance_length=2.0,
    )  # fmt: skip


def _card(server: bool = True) -> Scorecard:
    disp = Dispersion(
        ttft_ms=percentiles(TTFT), tpot_ms=percentiles(TPOT), itl_ms=percentiles(ITL),
        e2e_ms=percentiles(E2E),
    )  # fmt: skip
    load: dict[str, Any] = {"arrival": "closed", "concurrency": 8}
    extra: dict[str, Any] = {"server_ttft_ms": 7.25, "server_queue_ms": 0.75} if server else {}
    cats = (_slice("qa", 10.0, 4.0), _slice("code", 10.0, 4.0))
    turns = (_slice("turn 1", 10.0, 4.0), _slice("turn 2", 20.0, 4.0))
    off = make_row(**load, categories=cats, turns=turns, dispersion=disp, **extra)
    mtp = make_row(
        **load, speculative="mtp", route_label="mtp", tpot_ms=5.0,
        categories=(_slice("qa", 10.0, 2.0), _slice("code", 10.0, 2.0)), turns=turns,
        dispersion=disp, **extra,
    )  # fmt: skip
    return Scorecard.from_rows([off, mtp])


def test_category_and_turn_tables_carry_the_load_in_text_markdown_and_html() -> None:
    card = _card()
    text = card.to_text()
    cat_head = next(ln for ln in text.splitlines() if "category" in ln and "route" in ln)
    assert cat_head.split()[:4] == ["cell", "load", "route", "category"]
    qa = next(ln for ln in text.splitlines() if " qa " in f" {ln} " and "mtp" in ln)
    assert qa.split()[1] == "c=8"
    turn = next(ln for ln in text.splitlines() if "turn 2" in ln and "mtp" in ln)
    assert turn.split()[1] == "c=8"
    md = card.to_markdown()
    assert "| cell | load | route | category |" in md and "| cell | load | route | turn |" in md
    page = card._repr_html_()
    assert "<th>category</th>" in page and "<th>turn</th>" in page
    assert "<td>qa</td>" in page and "<td>turn 2</td>" in page and page.count("<td>c=8</td>") >= 6
    assert "Per category" in card.to_html(plots=False)


def test_p90_p99_follow_numpy_linear_in_every_format() -> None:
    card = _card()
    want = {
        name: [float(v) for v in np.percentile(xs, [50, 90, 99])]
        for name, xs in {"ttft": TTFT, "tpot": TPOT, "itl": ITL, "e2e": E2E}.items()
    }
    text = card.to_text()
    assert "p50/p90/p99" in text and "numpy linear interpolation" in text
    ttft_text = " / ".join(f"{v:.1f}" for v in want["ttft"])
    itl_text = " / ".join(f"{v:.2f}" for v in want["itl"])
    for rendering in (text, card.to_markdown(), card._repr_html_()):
        assert ttft_text in rendering and itl_text in rendering
    rec = next(csv.DictReader(io.StringIO(card.to_csv())))
    for name, (_p50, p90, p99) in want.items():
        assert float(rec[f"{name}_p90_ms"]) == pytest.approx(p90)
        assert float(rec[f"{name}_p99_ms"]) == pytest.approx(p99)
    assert float(rec["itl_p50_ms"]) == pytest.approx(want["itl"][0])
    line = orjson.loads(card.to_json())["lines"][0]
    assert line["dispersion"]["tpot_ms"]["p99"] == pytest.approx(want["tpot"][2])
    assert line["dispersion"]["e2e_ms"]["p90"] == pytest.approx(want["e2e"][1])


def test_server_ttft_and_queue_sit_beside_the_clients_ttft() -> None:
    card = _card()
    text = card.to_text()
    head = next(ln for ln in text.splitlines() if "server TTFT ms" in ln)
    assert re.search(r"TTFT ms p50/p90/p99\s+server TTFT ms\s+server queue ms\s+TPOT", head)
    assert "7.2" in text and "0.8" in text  # 7.25 and 0.75 at one decimal
    for rendering in (card.to_markdown(), card._repr_html_()):
        assert "server TTFT ms" in rendering and "server queue ms" in rendering
    rec = next(csv.DictReader(io.StringIO(card.to_csv())))
    assert float(rec["server_ttft_ms"]) == 7.25 and float(rec["server_queue_ms"]) == 0.75
    line = orjson.loads(card.to_json())["lines"][1]
    assert line["server_ttft_ms"] == 7.25 and line["server_queue_ms"] == 0.75
    assert "server TTFT ms" not in _card(server=False).to_text()  # no engine figures: no column


def test_pandas_has_the_percentile_and_server_columns() -> None:
    pytest.importorskip("pandas")
    df = _card().to_pandas()
    for col in ("ttft_p90_ms", "tpot_p99_ms", "itl_p50_ms", "e2e_p99_ms", "server_queue_ms"):
        assert col in df.columns and df[col].notna().all()
