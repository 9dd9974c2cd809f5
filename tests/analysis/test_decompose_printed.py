"""The decomposition as printed: the acceptance length's interval resamples prompts when
the requests name theirs, the same values give the same interval whatever their order, and
the printed parts divide back to the printed speedup."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import Row, Scorecard, SpeedupVerdict, compare_speedup, decompose_speedup
from deepseekbench._analysis._decompose import printed_ratio
from deepseekbench._analysis._lines import line_key
from deepseekbench._report._decomposition import decomposition_cells
from tests._helpers import make_row

MTP = {"speculative": "mtp", "route_label": "mtp", "spec_tokens": 3}
# the demo's shape: 8 prompts × 3 identical repeats (a deterministic engine)
PROMPTS = [f"p{i}" for i in range(8)]
VALUES = [2.3, 2.6, 2.8, 2.9, 3.0, 3.1, 3.3, 3.5]
SAMPLES = [v for v in VALUES for _ in range(3)]
IDS = [p for p in PROMPTS for _ in range(3)]


def _rows() -> tuple[Row, Row, SpeedupVerdict]:
    off = make_row(tpot_ms=10.0)
    mtp = make_row(**MTP, tpot_ms=6.0, acceptance_length=2.94)
    verdict = compare_speedup(
        off, mtp, samples=([10.0, 10.2, 9.8, 10.1, 9.9], [6.0, 6.1, 5.9, 6.05, 5.95])
    )
    return off, mtp, verdict


def _width(ci: tuple[float, float] | None) -> float:
    assert ci is not None
    return ci[1] - ci[0]


def test_the_acceptance_interval_resamples_prompts_not_repeats() -> None:
    off, mtp, verdict = _rows()
    by_prompt = decompose_speedup(
        off, mtp, verdict=verdict, acceptance_samples=SAMPLES, acceptance_prompts=IDS
    )
    by_request = decompose_speedup(off, mtp, verdict=verdict, acceptance_samples=SAMPLES)
    assert by_prompt is not None and by_request is not None
    assert by_prompt.acceptance_prompts == 8 and by_request.acceptance_prompts is None
    # 24 requests that are 8 prompts × 3 copies carry the information of 8: the
    # interval over prompts is about √3 wider than one treating them as independent
    assert _width(by_prompt.acceptance_length_ci) > 1.4 * _width(by_request.acceptance_length_ci)
    # and it carries into the step-cost ratio's interval
    assert _width(by_prompt.step_cost_ratio_ci) > _width(by_request.step_cost_ratio_ci)


def test_too_few_prompts_fall_back_to_the_requests_and_the_scorecard_says_so() -> None:
    off, mtp, verdict = _rows()
    few = decompose_speedup(
        off, mtp, verdict=verdict, acceptance_samples=SAMPLES[:12], acceptance_prompts=IDS[:12]
    )
    assert few is not None and few.acceptance_prompts is None  # 4 prompts < MIN_PROMPTS
    assert few.acceptance_length_ci is not None
    rows = [off, mtp]
    acc = {line_key(mtp): SAMPLES}
    bare = Scorecard.from_rows(rows, acceptance=acc).to_text()
    named = Scorecard.from_rows(
        rows, acceptance=acc, acceptance_prompts={line_key(mtp): IDS}
    ).to_text()
    assert "acceptance-length intervals without prompt ids" in bare
    assert "acceptance-length intervals without prompt ids" not in named
    # 4 named prompts, below the minimum: the note names that reason, not missing ids
    four = Scorecard.from_rows(
        rows, acceptance={line_key(mtp): SAMPLES[:12]}, acceptance_prompts={line_key(mtp): IDS[:12]}
    ).to_text()
    assert "acceptance-length intervals without prompt ids" not in four
    assert "acceptance-length intervals over fewer than 5 prompts (4 named)" in four


@given(st.randoms(use_true_random=False), st.booleans())
def test_the_same_values_give_the_same_interval_in_any_order(
    rnd: random.Random, with_prompts: bool
) -> None:
    off, mtp, verdict = _rows()
    order = list(range(len(SAMPLES)))
    rnd.shuffle(order)

    def ci(idx: list[int]) -> tuple[float, float] | None:
        d = decompose_speedup(
            off,
            mtp,
            verdict=verdict,
            acceptance_samples=[SAMPLES[i] for i in idx],
            acceptance_prompts=[IDS[i] for i in idx] if with_prompts else None,
        )
        assert d is not None
        return d.acceptance_length_ci

    assert ci(order) == ci(list(range(len(SAMPLES))))


_FIG = st.floats(min_value=0.05, max_value=20.0, allow_nan=False)


@given(speedup=_FIG, length=st.floats(min_value=1.0, max_value=9.0))
def test_the_printed_parts_divide_back_to_the_printed_speedup(
    speedup: float, length: float
) -> None:
    off = make_row(tpot_ms=10.0)
    mtp = make_row(**MTP, tpot_ms=10.0 / speedup, acceptance_length=length)
    d = decompose_speedup(off, mtp)
    if d is None:  # a speedup of 1 within noise is not credited: nothing printed
        return
    line = next(ln for ln in Scorecard.from_rows([off, mtp]).lines if ln.decomposition)
    cells = decomposition_cells([line])[0]
    s_text, l_text, r_text = cells[3].rstrip("×"), cells[4].split()[0], cells[5].split()[0]
    assert f"{float(l_text) / float(r_text):.2f}" == s_text
    # the one-line text divides back too
    assert f"{float(l_text) / float(printed_ratio(d.speedup, length)[0]):.2f}" == s_text


def test_the_demo_figures_divide_back() -> None:
    """The fresh user's case: 1.67× beside 2.94 printed a ratio of 1.75 (÷ → 1.68)."""
    speedup, length = 1.6745, 2.936  # unrounded ratio 1.753: it prints 1.75
    assert f"{length / speedup:.2f}" == "1.75" and f"{2.94 / 1.75:.2f}" == "1.68"
    text, decimals = printed_ratio(speedup, length)
    assert f"{2.94 / float(text):.2f}" == "1.67" and decimals >= 2
