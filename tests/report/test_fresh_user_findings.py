"""What a fresh user tripped on in the scorecard and the demos, each checked as a kind:
loads in load order, the witness paragraph once, intervals never printed as certain,
natural-length outputs said once, a reused results file not called resumed."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

from deepseekbench import LoadPoint, Scorecard, SpeedupMetric, SpeedupVerdict
from deepseekbench._analysis._analysis import run_loads
from deepseekbench._cli._progress import StderrProgress
from deepseekbench._runner._progress import ProgressEvent
from deepseekbench._types._axes import Arrival
from deepseekbench._types._interval import interval_text
from tests._helpers import make_row

WITNESS = (
    "distribution witness rejects: 1045 informative tokens tested (2375 near-certain "
    "excluded), p=4.36e-275 (alpha 0.05); catches a PIT-CDF distance of 0.087"
)


def _pair(c: int, **mtp: Any) -> list[Any]:
    off = make_row(concurrency=c)
    spec = make_row(concurrency=c, speculative="mtp", route_label="mtp", tpot_ms=6.0, **mtp)
    return [off, spec]


def _loads_in_table(text: str) -> list[str]:
    first = text.split("\n\n")[0]
    return [line.split()[1] for line in first.splitlines() if line.startswith("1k/")]


def test_every_scorecard_table_reads_loads_in_load_order() -> None:
    rows = [*_pair(1), *_pair(5), *_pair(3), *_pair(10)]  # c=10 sorts after c=5, not c=1
    text = Scorecard.from_rows(rows).render("text")
    assert _loads_in_table(text) == ["c=1", "c=1", "c=3", "c=3", "c=5", "c=5", "c=10", "c=10"]


def test_a_run_lists_its_probed_loads_between_the_plan_loads() -> None:
    closed = [LoadPoint(Arrival.closed, c) for c in (1, 5)]
    plan = SimpleNamespace(load_points=tuple(closed))
    probed = LoadPoint(Arrival.closed, 3)
    state = SimpleNamespace(search_loads={probed.key: probed, closed[1].key: closed[1]})
    assert [lp.concurrency for lp in run_loads(plan, state)] == [1, 3, 5]  # type: ignore[arg-type]


def test_the_witness_paragraph_is_printed_once() -> None:
    detail = f"exact: bit-exact on 16 of 16 prompts; {WITNESS}"
    off = make_row(concurrency=8, witness_note="distribution witness accepts: p=0.9")
    bad = make_row(
        concurrency=8, speculative="mtp", route_label="mtp-argmax", tpot_ms=6.0,
        quality_parity="differs", parity_detail=detail, witness_note=WITNESS,
    )  # fmt: skip
    text = Scorecard.from_rows([off, bad]).render("text")
    assert text.count("1045 informative tokens") == 1, text
    assert "distribution witness rejects (its figures in the witness note below)" in text


def test_natural_length_outputs_short_of_the_cap_are_said_once_not_warned_per_line() -> None:
    natural = {"output_length": "natural", "output_short": True, "n_output_short": 6}
    rows = [make_row(concurrency=1, **natural),
            make_row(concurrency=1, speculative="mtp", route_label="mtp", **natural)]  # fmt: skip
    text = Scorecard.from_rows(rows).render("text")
    assert "under-measured" not in text
    assert text.count('as workload.output_length = "natural" asks') == 1
    assert "12 of 16 outputs on 2 line(s)" in text
    pinned = [make_row(concurrency=1, output_length="pinned", output_short=True, n_output_short=2)]
    assert "under-measured" in Scorecard.from_rows(pinned).render("text")


def test_an_interval_of_zero_width_or_from_two_rounds_is_marked() -> None:
    assert interval_text(1.2, 1.6) == "1.20–1.60"
    assert interval_text(1.42, 1.42) == "1.42, zero width (identical values)"
    assert interval_text(1.421, 1.424) == "1.421–1.424"  # narrow, not zero: more digits
    assert interval_text(0.9981, 1.0042, spec="+.3g") == "+0.998–+1"
    assert interval_text(1.2, 1.6, rounds=2) == "1.20–1.60, from 2 rounds only"
    assert interval_text(1.2, 1.6, rounds=3) == "1.20–1.60"
    v = SpeedupVerdict(
        metric=SpeedupMetric.tpot_ms,
        printed=True,
        speedup=1.42,
        ci_low=1.42,
        ci_high=1.42,
        rounds=2,
    )
    text = str(v)
    assert "1.42–1.42" not in text
    assert "zero width (identical values), from 2 rounds only" in text


def test_a_fresh_file_reused_on_purpose_is_not_announced_as_resumed() -> None:
    event = ProgressEvent(phase="resume", done=0, total=1, errors=0, elapsed_s=0.0, kept=144)
    quiet, loud = io.StringIO(), io.StringIO()
    StderrProgress(quiet, resume_line=False)(event)
    StderrProgress(loud)(event)
    assert quiet.getvalue() == "" and "resumed: 144" in loud.getvalue()
