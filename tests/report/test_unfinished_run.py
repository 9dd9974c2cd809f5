"""An unfinished run's scorecard (a results file without its run_end record): the header
says the run did not finish, and a refusal the unfinished state may have caused is
marked on its line with one footnote; a finished run's output is unchanged (the render
goldens, tests/report/test_report_formats.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepseekbench import Scorecard, UnfinishedRunWarning
from deepseekbench._analysis._lines import UNFINISHED_MARK, unfinished_reasons
from deepseekbench._analysis._speedup import RefusalReason as R
from deepseekbench._report._formats import FORMAT_NAMES
from deepseekbench._types._parity import BASELINE_NONDETERMINISTIC
from tests._helpers import make_row

DEMO = Path(__file__).parent.parent / "data" / "render" / "demo.jsonl"


def _records() -> list[str]:
    return DEMO.read_text(encoding="utf-8").splitlines(keepends=True)


def _stopped_before(tmp_path: Path, load: str) -> Path:
    """The demo's results file cut at its first measurement of ``load``: the earlier loads
    fully measured, off's determinism control (run after every measurement) never run."""
    records = _records()
    cut = next(i for i, r in enumerate(records) if json.loads(r).get("load") == load)
    path = tmp_path / "stopped.jsonl"
    path.write_text("".join(records[:cut]), encoding="utf-8")
    return path


def _without_run_end(tmp_path: Path) -> Path:
    """Every record of the demo but its run_end: all measured and checked, not closed."""
    path = tmp_path / "no_end.jsonl"
    kept = [r for r in _records() if json.loads(r)["record"] != "run_end"]
    path.write_text("".join(kept), encoding="utf-8")
    return path


def _card(path: Path) -> Scorecard:
    with pytest.warns(UnfinishedRunWarning):
        return Scorecard.from_results(path)


def _line(card: Scorecard, route: str, load: str) -> str:
    return next(ln.speedup_text for ln in card.lines if ln.route == route and ln.load == load)


def test_a_stopped_run_says_so_in_its_header_and_on_each_refusal_it_may_have_caused(
    tmp_path: Path,
) -> None:
    card = _card(_stopped_before(tmp_path, "closed:c=8"))
    text = card.render("text").splitlines()
    assert text[2].startswith("Unfinished run: the results file has no run_end record")
    # c=1 was fully measured: its refusal is parity never checked, marked on the line
    assert _line(card, "mtp", "c=1") == f"refused: baseline_parity_not_verified{UNFINISHED_MARK}"
    # a mismatch seen is a finding, not the unfinished run's doing: unmarked
    assert _line(card, "mtp-mistuned", "c=1") == (
        f"refused: baseline_parity_not_verified{UNFINISHED_MARK}, candidate_parity_not_verified"
    )
    # c=8 was never measured: every missing-measurement reason is marked
    c8 = _line(card, "mtp", "c=8")
    assert f"baseline_too_few_requests{UNFINISHED_MARK}" in c8
    assert f"speculative_counters_missing{UNFINISHED_MARK}" in c8
    footnotes = [ln for ln in text if ln.startswith(f"{UNFINISHED_MARK} the run did not finish")]
    assert len(footnotes) == 1  # one footnote for every mark
    assert "the run stopped before checking it" in footnotes[0]
    assert "before measuring it all" in footnotes[0]
    # no verdict changes: the marks are wording only
    assert all(not ln.credited for ln in card.lines)


def test_every_format_carries_the_unfinished_header(tmp_path: Path) -> None:
    card = _card(_stopped_before(tmp_path, "closed:c=8"))
    header = "Unfinished run: the results file has no run_end record"
    for name in FORMAT_NAMES:
        if name != "html":  # the page draws the plots too: its fragment is the same
            assert header in card.render(name), name
    assert f"<p><strong>{header}" in card._repr_html_()
    assert json.loads(card.render("json"))["unfinished"].startswith(header)
    assert card.to_records()[0]["results_integrity"].startswith(header)


def test_an_unclosed_but_fully_checked_run_marks_nothing_it_did_not_cause(
    tmp_path: Path,
) -> None:
    finished = Scorecard.from_results(DEMO)
    card = _card(_without_run_end(tmp_path))
    assert card.render("text").splitlines()[2] == (
        "Unfinished run: the results file has no run_end record (stopped, crashed or still "
        "going), so the rows hold only what was measured"
    )
    assert [ln.speedup_text for ln in card.lines] == [ln.speedup_text for ln in finished.lines]
    assert UNFINISHED_MARK not in card.render("text")


def test_a_finished_run_has_no_unfinished_header_or_mark() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnfinishedRunWarning)
        card = Scorecard.from_results(DEMO)
    for out in [card.render(n) for n in FORMAT_NAMES if n != "html"] + [card._repr_html_()]:
        assert "Unfinished run" not in out and UNFINISHED_MARK not in out


def test_only_missing_checks_and_measurements_are_marked() -> None:
    off = make_row(quality_parity="unknown", parity_detail="determinism control incomplete")
    shaky = make_row(
        quality_parity="unknown",
        parity_detail=f"{BASELINE_NONDETERMINISTIC}: off differed from itself on 2 of 8 prompts",
    )
    mtp = make_row(speculative="mtp", route_label="mtp", quality_parity="differs", n_requests=1)
    card = Scorecard.from_rows([off, mtp], run_unfinished=True)
    v = card.lines[1].verdict
    assert v is not None
    marked = unfinished_reasons(off, mtp, v)
    assert R.baseline_parity_not_verified in marked  # never checked to its end
    assert R.candidate_parity_not_verified in v.reasons  # seen to differ: a finding
    assert R.candidate_parity_not_verified not in marked
    # off seen to differ from itself is measured, whether or not the run finished
    assert R.baseline_parity_not_verified not in unfinished_reasons(shaky, mtp, v)
    assert card.lines[1].unfinished_reasons == marked
    assert Scorecard.from_rows([off, mtp]).lines[1].unfinished_reasons == ()


@given(
    base_parity=st.sampled_from(["verified", "unknown"]),
    cand_parity=st.sampled_from(["verified", "unknown", "differs"]),
    base_n=st.integers(min_value=0, max_value=8),
    cand_n=st.integers(min_value=0, max_value=8),
)
@settings(max_examples=60, deadline=None)
def test_marks_never_change_a_verdict_and_never_mark_a_finding(
    base_parity: str, cand_parity: str, base_n: int, cand_n: int
) -> None:
    """Whatever the rows: an unfinished run's lines carry the finished run's verdicts, its
    marks are a subset of each verdict's reasons, and a mismatch seen (``differs``) is
    never marked."""
    off = make_row(quality_parity=base_parity, n_requests=base_n)
    mtp = make_row(
        speculative="mtp", route_label="mtp", quality_parity=cand_parity, n_requests=cand_n,
        accepted_token_ratio=0.5, acceptance_length=2.0, tpot_ms=5.0,
    )  # fmt: skip
    done = Scorecard.from_rows([off, mtp]).lines[1]
    cut = Scorecard.from_rows([off, mtp], run_unfinished=True).lines[1]
    assert cut.verdict == done.verdict and done.unfinished_reasons == ()
    assert cut.verdict is not None
    assert set(cut.unfinished_reasons) <= set(cut.verdict.reasons)
    if cand_parity == "differs":
        assert R.candidate_parity_not_verified not in cut.unfinished_reasons
    if base_parity == "unknown":
        assert R.baseline_parity_not_verified in cut.unfinished_reasons
    assert (UNFINISHED_MARK in cut.speedup_text) == bool(cut.unfinished_reasons)
