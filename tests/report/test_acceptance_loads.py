"""The "Acceptance per request" section prints a route's figures once when they are
the same at every load, and per load when any differs."""

from __future__ import annotations

from pathlib import Path

from deepseekbench import Scorecard
from deepseekbench._report._acceptance import SAME_AT_EVERY_LOAD, acceptance_cells
from tests.test_foundation import make_row

DEMO = Path(__file__).resolve().parent.parent / "data" / "render" / "demo.jsonl"


def _rows(p50_at: dict[int, float]) -> list[object]:
    out: list[object] = []
    for c, p50 in p50_at.items():
        out.append(make_row(concurrency=c))
        out.append(
            make_row(
                speculative="mtp",
                concurrency=c,
                tpot_ms=10.0,
                acceptance_length_p10=2.0,
                acceptance_length_p50=p50,
                acceptance_length_p90=3.5,
            )
        )
    return out


def test_figures_equal_at_every_load_print_once() -> None:
    card = Scorecard.from_rows(_rows({1: 3.0, 2: 3.0, 8: 3.0}))  # type: ignore[arg-type]
    cells = acceptance_cells(card.lines)
    assert len(cells) == 1 and cells[0][1] == SAME_AT_EVERY_LOAD
    assert cells[0][4] == "2.00 / 3.00 / 3.50"
    assert f"{SAME_AT_EVERY_LOAD}  mtp" in card.to_text()


def test_figures_that_differ_print_per_load() -> None:
    card = Scorecard.from_rows(_rows({1: 3.0, 2: 3.0, 8: 2.9}))  # type: ignore[arg-type]
    cells = acceptance_cells(card.lines)
    assert [c[1] for c in cells] == ["c=1", "c=2", "c=8"]


def test_one_load_keeps_its_own_load() -> None:
    card = Scorecard.from_rows(_rows({4: 3.0}))  # type: ignore[arg-type]
    assert [c[1] for c in acceptance_cells(card.lines)] == ["c=4"]


def test_the_saved_demo_prints_each_route_once() -> None:
    cells = acceptance_cells(Scorecard.from_results(DEMO).lines)
    routes = [c[2] for c in cells]
    assert len(routes) == len(set(routes))
