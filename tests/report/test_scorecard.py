"""The scorecard never shows an unearned speedup, in any rendering."""

from __future__ import annotations

import csv
import io
import re
import sys
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

import deepseekbench._analysis._lines as lines_mod
from deepseekbench import (
    AcceptanceScope,
    MissingExtraError,
    QualityParity,
    Row,
    Scorecard,
    Speculative,
    bootstrap_speedup_ci,
    compare_speedup,
)
from deepseekbench._report._scorecard import ParityDetail, line_key
from tests._helpers import make_row
from tests.strategies import creditable_pairs

FIGURE = re.compile(r"\d(?:\.\d+)?×")


@st.composite
def judged_pairs(draw: st.DrawFn) -> tuple[Row, Row, dict[str, list[float]]]:
    """An off/speculative pair of one cell, any parity on each side, optional samples."""
    base, cand = draw(creditable_pairs())
    base = base.model_copy(
        update={
            "route_label": "base",
            "parity_detail": None,
            "quality_parity": draw(st.sampled_from(QualityParity)),
        }
    )
    cand = cand.model_copy(
        update={
            "route_label": "cand",
            "parity_detail": None,
            "quality_parity": draw(st.sampled_from(QualityParity)),
        }
    )
    samples: dict[str, list[float]] = {}
    if draw(st.booleans()):
        x = st.floats(min_value=0.1, max_value=100.0)
        samples[line_key(base)] = draw(st.lists(x, min_size=2, max_size=6))
        samples[line_key(cand)] = draw(st.lists(x, min_size=2, max_size=6))
    return base, cand, samples


def renderings(card: Scorecard) -> dict[str, str]:
    return {
        "text": card.to_text(),
        "markdown": card.to_markdown(),
        "json": card.to_json(),
        "csv": card.to_csv(),
        "html": card._repr_html_(),
        "str": str(card),
        "repr": repr(card),
    }


def unearned_speedup_shown(pair: tuple[Row, Row, dict[str, list[float]]]) -> bool:
    """True when any rendering shows a speedup for a pair not verified on both sides."""
    base, cand, samples = pair
    card = Scorecard.from_rows([base, cand], samples=samples, n_resamples=50)
    both = (base.quality_parity, cand.quality_parity) == (QualityParity.verified,) * 2
    if both:
        return False
    out = renderings(card)
    line = card.lines[1]
    if line.printed or re.search(r"\d", line.speedup_text):
        return True
    if any(FIGURE.search(out[k]) for k in ("text", "markdown", "html", "str")):
        return True
    js = orjson.loads(out["json"])["lines"][1]
    if js["speedup"] is not None or (js["verdict"] or {}).get("speedup") is not None:
        return True
    rec = list(csv.DictReader(io.StringIO(out["csv"])))[1]
    return any(rec[k] for k in ("speedup", "ci95_low", "ci95_high"))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(judged_pairs())
def test_no_rendering_shows_a_speedup_without_parity_on_both_sides(
    pair: tuple[Row, Row, dict[str, list[float]]],
) -> None:
    assert not unearned_speedup_shown(pair)
    base, cand, samples = pair
    if (base.quality_parity, cand.quality_parity) == (QualityParity.verified,) * 2:
        # the control: an earned speedup is shown, so the check above can see one
        card = Scorecard.from_rows([base, cand], samples=samples, n_resamples=50)
        v = card.lines[1].verdict
        if v is not None and v.inconclusive:  # an interval spanning 1 credits nothing
            assert "no significant difference (" in card.to_text()
        else:
            assert card.lines[1].printed and FIGURE.search(card.to_text())


def test_the_property_fails_against_a_scorecard_that_ignores_parity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def ignores_parity(baseline: Row, candidate: Row, **kw: Any) -> Any:
        v = QualityParity.verified
        return compare_speedup(
            baseline.model_copy(update={"quality_parity": v}),
            candidate.model_copy(update={"quality_parity": v}),
            **kw,
        )

    monkeypatch.setattr(lines_mod, "compare_speedup", ignores_parity)
    counterexample = find(
        judged_pairs(), unearned_speedup_shown, settings=settings(max_examples=500, deadline=None)
    )
    assert (counterexample[0].quality_parity, counterexample[1].quality_parity) != (
        QualityParity.verified,
        QualityParity.verified,
    )


def test_pairs_within_a_cell_shows_interval_notes_and_missing_baselines() -> None:
    off = make_row()
    good = make_row(
        speculative="mtp",
        route_label="mtp",
        tpot_ms=5.0,
        accepted_token_ratio=0.8,
        acceptance_length=1.8,
        acceptance_scope="server_wide",
    )
    bad = make_row(
        speculative="mtp",
        route_label="bad",
        tpot_ms=4.0,
        quality_parity="differs",
        parity_detail="exact: 1 of 2 prompts diverge",
    )
    orphan = make_row(speculative="mtp", route_label="orphan", reasoning_mode="think_high")
    samples = {
        line_key(off): [9.0, 10.0, 11.0, 10.0, 10.5],
        line_key(good): [5.0, 4.8, 5.2, 5.0, 5.1],
    }
    details = {
        line_key(bad): ParityDetail(
            first_divergence="p1: text differs at char 3", task_flips=("t1: pass→fail",)
        )
    }
    card = Scorecard.from_rows([off, good, bad, orphan], samples=samples, details=details)
    lines = {ln.route: ln for ln in card.lines}
    v = lines["mtp"].verdict
    assert v is not None and v.printed and v.speedup == pytest.approx(2.0)
    assert v.ci_low is not None and v.ci_high is not None and v.ci_low <= 2.0 <= v.ci_high
    assert (
        not lines["bad"].credited and "candidate_parity_not_verified" in lines["bad"].speedup_text
    )
    assert lines["orphan"].verdict is None and "no off baseline" in lines["orphan"].speedup_text
    assert [ln.route for ln in card.credited] == ["mtp"]
    text = card.to_text()
    assert "first divergence: p1: text differs at char 3" in text and "t1: pass→fail" in text
    assert "0.80*" in text and "server-wide" in text
    md = card.to_markdown()
    assert md.count("\n|") >= 5 and "2.00×" in md
    recs = list(csv.DictReader(io.StringIO(card.to_csv())))
    assert (
        recs[1]["speedup"]
        and not recs[2]["speedup"]
        and recs[3]["refusal_reasons"] == "no_off_baseline"
    )
    assert orjson.loads(card.to_json())["lines"][2]["speedup"] is None
    assert card.render("csv") == card.to_csv()
    with pytest.raises(ValueError):
        card.render("yaml")
    assert "<table>" in card._repr_html_()
    assert lines["mtp"].acceptance_scope is AcceptanceScope.server_wide


def test_bootstrap_is_reproducible_and_needs_samples() -> None:
    b, c = [10.0, 11.0, 9.0, 10.5], [5.0, 5.5, 4.5, 5.2]
    assert bootstrap_speedup_ci(b, c) == bootstrap_speedup_ci(b, c)
    assert bootstrap_speedup_ci([1.0], c) is None
    low_high = bootstrap_speedup_ci([100.0, 90.0], [150.0, 160.0], metric="output_toks_per_s")
    assert low_high is not None and low_high[0] > 1


def test_to_pandas_without_pandas_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingExtraError, match=r"deepseekbench\[pandas\]"):
        Scorecard.from_rows([make_row()]).to_pandas()


def test_off_line_is_the_baseline() -> None:
    card = Scorecard.from_rows(
        [make_row(quality_parity="unknown", parity_detail="baseline nondeterministic")]
    )
    assert card.lines[0].speculative is Speculative.off and card.lines[0].speedup_text == "baseline"
    assert "baseline nondeterministic" in card.to_text()


def test_docs_explain_every_refusal_reason() -> None:
    from pathlib import Path

    from deepseekbench import RefusalReason

    doc = (Path(__file__).resolve().parents[2] / "docs" / "scorecard.md").read_text("utf-8")
    missing = [r.value for r in RefusalReason if r.value not in doc]
    assert not missing


# --- load sweeps: crossover, slower routes, paired rounds ----------------------------
def test_crossover_sentence_names_the_last_paying_load() -> None:
    from deepseekbench import crossover_text

    points = [("concurrency 1", 1.6), ("concurrency 16", 1.2), ("concurrency 64", 0.91)]
    assert crossover_text("mtp", "1k/256/non_think", points) == (
        "mtp @ 1k/256/non_think: pays up to concurrency 16 (1.60× → 1.20×); "
        "at concurrency 64 it is 0.91×"
    )
    assert "pays at every credited load (1.60× at c1 → 1.20× at c2)" in crossover_text(
        "mtp", "x", [("c1", 1.6), ("c2", 1.2)]
    )
    assert "does not pay at any credited load (0.90× at c1, 0.80× at c2)" in crossover_text(
        "mtp", "x", [("c1", 0.9), ("c2", 0.8)]
    )
    # one credited load: no range from a load to itself
    assert crossover_text("m", "x", [("c1", 2.18)]) == "m @ x: pays at c1 (2.18×)"
    assert crossover_text("m", "x", [("c1", 0.8)]) == "m @ x: does not pay at c1 (0.80×)"
    assert crossover_text("m", "x", [("a", 1.1), ("b", 0.9), ("c", 1.2)]).endswith(
        "at b it is 0.90× (then 1.20× at c)"
    )


def _load_rows(tpots: dict[int, float]) -> list[Row]:
    from tests.test_foundation import make_row

    out: list[Row] = []
    for c, tpot in tpots.items():
        out.append(make_row(route_label="off", concurrency=c, arrival="closed", tpot_ms=20.0))
        out.append(
            make_row(
                route_label="mtp", speculative="mtp", concurrency=c, arrival="closed", tpot_ms=tpot
            )
        )
    return out


def test_scorecard_pairs_each_load_point_with_its_own_baseline_and_names_the_crossover() -> None:
    card = Scorecard.from_rows(_load_rows({64: 22.0, 1: 12.5, 16: 16.0}))
    lines = [ln for ln in card.lines if ln.route == "mtp"]
    assert [ln.load for ln in lines] == ["c=1", "c=16", "c=64"]  # load order, not row order
    assert [
        ln.verdict.speedup if ln.verdict is not None else None for ln in lines
    ] == pytest.approx([1.6, 1.25, 20 / 22])
    assert card.crossovers() == (
        "mtp @ 1k/256/non_think: pays up to concurrency 16 (1.60× → 1.25×); "
        "at concurrency 64 it is 0.91×",
    )
    text = card.to_text()
    assert "crossover: mtp @ 1k/256/non_think: pays up to concurrency 16" in text
    # a verified route that is slower is reported, and reported as slower
    assert "0.91× by tpot_ms — slower" in text
    slow = next(ln for ln in lines if ln.load == "c=64")
    assert slow.printed and slow.verdict is not None and slow.verdict.slower
    # printed, but a slowdown is never credited (nor truthy)
    assert not slow.credited and not slow.verdict and slow in card.slower
    assert slow not in card.credited and slow not in card.refused


def test_paired_rounds_interval_is_a_t_interval_on_log_ratios() -> None:
    import math

    from scipy.stats import t

    from deepseekbench import paired_speedup_ci

    base = {0: 10.0, 1: 12.0, 2: 11.0}
    cand = {0: 5.0, 1: 8.0, 2: 5.5, 3: 1.0}  # round 3 has no baseline: unpaired, ignored
    got = paired_speedup_ci(base, cand)
    assert got is not None
    logs = [math.log(2.0), math.log(1.5), math.log(2.0)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = float(t.ppf(0.975, 2)) * sd / math.sqrt(3)
    assert got == pytest.approx((math.exp(mean), math.exp(mean - half), math.exp(mean + half), 3))
    # higher is better: throughput per round, candidate / baseline
    thr = paired_speedup_ci(
        {0: 100.0, 1: 100.0}, {0: 150.0, 1: 150.0}, metric="output_throughput_toks_per_s"
    )
    assert thr is not None and thr[0] == pytest.approx(1.5)
    assert paired_speedup_ci({0: 1.0}, {0: 2.0}) is None  # one round: no interval
