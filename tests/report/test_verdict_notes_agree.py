"""Scorecard notes that must agree with the lines they annotate: a line whose ``off`` ran
fewer rounds says so on the line, the sequential stopping note says why it differs from a
scorecard verdict, and the 'over N prompts' intervals have one footnote that says why such
an interval can sit lopsided around its figure."""

from __future__ import annotations

from deepseekbench import Scorecard, SpeedupMetric, SpeedupVerdict
from deepseekbench._analysis._lines import ScorecardLine
from deepseekbench._analysis._sequential import LineStop, SpeedupSequence, StopReason
from deepseekbench._analysis._stopping import StoppingReport
from deepseekbench._report._notes import scorecard_notes
from tests._helpers import make_row

MTP = {"speculative": "mtp", "route_label": "mtp", "spec_tokens": 2}


def test_a_line_whose_baseline_ran_fewer_rounds_is_marked_on_that_line() -> None:
    base = make_row(rounds=1)
    cand = make_row(**MTP, tpot_ms=5.0, rounds=3)
    card = Scorecard.from_rows([base, cand])
    line = card.lines[1]
    assert line.baseline_rounds == 1
    assert line.speedup_text.endswith(" [off ran 1 of 3 rounds]")
    assert "[off ran 1 of 3 rounds]" in card.to_text()
    same = Scorecard.from_rows([make_row(rounds=3), cand]).lines[1]
    assert "off ran" not in same.speedup_text


def _line(verdict: SpeedupVerdict) -> ScorecardLine:
    return ScorecardLine(row=make_row(**MTP, tpot_ms=5.0), baseline="off", verdict=verdict)


def test_the_over_n_prompts_intervals_have_one_footnote_that_explains_a_lopsided_interval() -> None:
    m = SpeedupMetric.tpot_ms
    with_rounds = SpeedupVerdict(
        metric=m, printed=True, speedup=0.75, ci_low=0.54, ci_high=0.77, rounds=3, prompts=8
    )
    one_round = SpeedupVerdict(
        metric=m, printed=True, speedup=1.9, ci_low=1.43, ci_high=1.94, prompts=5
    )
    notes = scorecard_notes([_line(with_rounds), _line(one_round)], None)
    marked = [n for n in notes if n.startswith("speedups marked 'over N prompts'")]
    assert len(marked) == 1, notes
    assert "with rounds" in marked[0] and "in one round" in marked[0]
    assert "lopsided around the figure" in marked[0]
    only = scorecard_notes([_line(one_round)], None)
    (note,) = [n for n in only if n.startswith("speedups marked")]
    assert "with rounds" not in note and "lopsided" in note


def test_the_stopping_note_says_why_it_differs_from_the_scorecard() -> None:
    key = ("mtp-k4", "1k/256/non_think", "closed:c=5")
    label = "mtp-k4 @ 1k/256/non_think (c=5)"
    seq = SpeedupSequence(3, 1.22, 1.16, 1.28, 0.05)
    report = StoppingReport(
        lines={key: LineStop(3, 3, StopReason.credited, seq)}, labels={key: label}
    )
    (plain, _) = report.notes()
    (told, _) = report.notes(inconclusive={label})
    assert "stopped: credited (sequence 1.16–1.28)" in plain and "scorecard" not in plain
    assert told.startswith(plain)
    assert "the scorecard reads no significant difference" in told
    assert "choice of prompts" in told
