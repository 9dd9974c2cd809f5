"""One source of truth for every ratio a run shows: each format (text, Markdown, HTML,
JSON) and each plot title, label and annotation renders the verdict's own printable
form — a credited figure, a one-sided bound, or a refusal — so no rendering can carry
a ratio the text refuses (a capacity ratio printed ``≥ 1.67×`` in the text was
``5.00×`` in the plot's title and ``"ratio": 5.0`` in the JSON)."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from deepseekbench import CapacityReport, RouteCapacity, Scorecard, Speculative
from deepseekbench._analysis._capacity import capacity_ratio
from deepseekbench._report._scorecard import line_key
from tests._helpers import make_row

matplotlib = pytest.importorskip("matplotlib")  # in the test extra; skip cleanly without it

# A ratio as any rendering shows it: "1.67×", "≥ 1.67×", a range "1.33–6.00×", or an
# interval "(95% CI 1.83–1.97)" / "no significant difference (0.94–1.07)".
RATIO = re.compile(r"(\d+\.\d+)\s*×|(\d+\.\d+)\s*–\s*(\d+\.\d+)")


def _cap(route: str, low: float | None, high: float | None, spec: str = "mtp") -> RouteCapacity:
    return RouteCapacity(
        route=route, speculative=Speculative(spec), capacity=low, low=low, high=high,
        attainment=1.0, ci_low=0.7, ci_high=1.0, n=10, stop=None, saturated=(), probes=(),
    )  # fmt: skip


def _report(off: RouteCapacity, others: list[tuple[RouteCapacity, str | None]]) -> CapacityReport:
    return CapacityReport(
        target=0.9,
        unit="streams",
        routes=(off, *(c for c, _ in others)),
        ratios=tuple(capacity_ratio(off, c, refusal) for c, refusal in others),
        slo=(("tpot_ms", 20.0),),
    )


# off capacity 2 in [2, 6): a route with no upper end (lower bound 10/6), one closed
# bracket apart from off's (credited), one overlapping (refused), one refused by the gate
LOWER = _report(
    _cap("off", 2, 6, "off"),
    [
        (_cap("mtp-k1", 10, None), None),
        (_cap("mtp-k2", 8, 12), None),
        (_cap("mtp-k4", 4, 8), None),
        (_cap("mtp-mistuned", 12, None), "at load 2: candidate_parity_not_verified"),
    ],
)
# off met the SLO at every level (capacity 8, no upper end): an upper bound 4/8, and a
# bracket [6, 10) that overlaps off's (refused)
UPPER = _report(
    _cap("off", 8, None, "off"), [(_cap("mtp", 2, 4), None), (_cap("mtp-k4", 6, 10), None)]
)


def _card(capacity: CapacityReport) -> Scorecard:
    """Credited (paired rounds), inconclusive (interval includes 1) and refused (parity)
    speedup lines, with ``capacity`` as the run's capacity report."""
    load: dict[str, Any] = {"arrival": "closed", "concurrency": 1, "n_requests": 12}
    rows = [
        make_row(**load),
        make_row(**load, speculative="mtp", route_label="mtp-k1", tpot_ms=5.0),
        make_row(**load, speculative="mtp", route_label="mtp-k2", tpot_ms=9.5),
        make_row(
            **load, speculative="mtp", route_label="mtp-mistuned", tpot_ms=4.0,
            quality_parity="differs",
        ),
    ]  # fmt: skip
    per_round = [
        {0: 10.0, 1: 10.2, 2: 9.8},
        {0: 5.0, 1: 5.2, 2: 4.9},
        {0: 8.0, 1: 12.0, 2: 9.5},
        {0: 4.0, 1: 4.1, 2: 3.9},
    ]
    rounds = {line_key(r): x for r, x in zip(rows, per_round, strict=True)}
    card = Scorecard.from_rows(rows, rounds=rounds)
    card.capacity = capacity
    return card


def _ratios(text: str) -> set[str]:
    """Every number ``text`` shows as a ratio (figure, bound, range or interval end)."""
    out: set[str] = set()
    for m in RATIO.finditer(text):
        out |= {g for g in m.groups() if g is not None}
    return out


def _figure_texts(card: Scorecard) -> str:
    """Every title, axis label, annotation and legend entry of the scorecard's Figure."""
    fig = card.plot()
    texts = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        texts += [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            texts += [t.get_text() for t in legend.get_texts()]
    return "\n".join(texts)


def _json_ratios(card: Scorecard) -> set[str]:
    """The ratio figures the JSON export carries, as the text would print them."""
    data = orjson.loads(card.to_json())
    values: list[Any] = []
    for ln in data["lines"]:
        verdict = ln["verdict"] or {}
        values += [ln["speedup"], verdict.get("ci_low"), verdict.get("ci_high")]
    for r in data["capacity"]["ratios"]:
        values += [r["ratio"], r["low"], r["high"]]
    shown = {f"{v:.2f}" for v in values if v is not None}
    texts = [ln["speedup_text"] for ln in data["lines"]]
    texts += [r.get("text", "") for r in data["capacity"]["ratios"]]
    return shown | _ratios("\n".join(texts))


@pytest.mark.parametrize("capacity", [LOWER, UPPER], ids=["lower_bound", "upper_bound"])
def test_every_rendering_shows_only_ratios_the_text_prints(capacity: CapacityReport) -> None:
    card = _card(capacity)
    text = card.to_text()
    printed = _ratios(text)
    renderings = {
        "markdown": _ratios(card.to_markdown()),
        "html": _ratios(card.to_html(plots=False)),
        "json": _json_ratios(card),
        "plot": _ratios(_figure_texts(card)),
    }
    for name, shown in renderings.items():
        assert shown <= printed, (name, sorted(shown - printed), text)
    # the run holds a credited, an inconclusive and a refused speedup, and credited,
    # one-sided and refused capacity ratios: each says so in the text
    assert re.search(r"\d\.\d\d× by tpot_ms \(95% CI ", text)
    assert "no significant difference (" in text and "refused: candidate_parity" in text
    assert "capacity: refused (" in text
    assert ("capacity ≥ 1.67×" in text) if capacity is LOWER else ("capacity ≤ 0.50×" in text)


def test_a_one_sided_capacity_claim_carries_its_bound_and_no_figure() -> None:
    ratios = {r.route: r for r in LOWER.ratios + UPPER.ratios}
    k1, k2, k4 = ratios["mtp-k1"], ratios["mtp-k2"], ratios["mtp-k4"]
    assert (k1.credited, k1.ratio, k1.bound, k1.figure) == (True, None, "lower", "≥ 1.67×")
    assert (k2.ratio, k2.bound, k2.figure) == (4.0, None, "4.00×")
    assert not k4.credited and k4.figure == "refused" and k4.bound is None
    up = ratios["mtp"]
    assert (up.credited, up.ratio, up.bound, up.figure) == (True, None, "upper", "≤ 0.50×")
    exported = {r["route"]: r for r in LOWER.to_dict()["ratios"]}
    assert exported["mtp-k1"]["ratio"] is None and exported["mtp-k1"]["bound"] == "lower"
    assert exported["mtp-k1"]["text"] == "≥ 1.67×"
