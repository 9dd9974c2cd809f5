"""The prompt is the sampling unit of a speedup's interval, and of compare's.

A workload of 8 prompts × 3 repeats on a deterministic engine: the prompts differ in
how much the draft helps, the repeats barely differ. An interval over paired rounds
sees only the repeats and is narrow; another fair pooling of the same requests (the
token-weighted TPOT) then falls outside it. The paired cluster bootstrap over
prompts covers the choice of prompts: it holds both figures; and compare, drawing the
same prompts for both runs, judges a rerun on the same prompts as the same.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from deepseekbench import SpeedupMetric, compare_speedup
from deepseekbench._analysis._compare_figures import FIGURES, Group, bootstrap_change
from deepseekbench._analysis._prompt_bootstrap import (
    MIN_PROMPTS,
    prompt_indices,
    prompt_ratio_ci,
)
from tests.test_foundation import make_row
from tests.test_properties import BROKEN_SETTINGS, PROPERTY_SETTINGS

PROMPTS = [f"prompt-{i}" for i in range(8)]
SPEEDUP = [1.3, 1.4, 1.5, 1.6, 1.8, 2.0, 2.2, 2.4]  # per prompt: how much the draft helps
TOKENS = [10, 10, 12, 15, 40, 60, 64, 64]  # output tokens per prompt
OFF_TPOT = [8.0 + 0.2 * i for i in range(8)]  # ms/token per prompt
JITTER = (0.999, 1.0, 1.001)  # three repeats, nearly identical


def _workload(
    prompts: list[str] | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per prompt, its off and speculative TPOT (ms) over three repeats."""
    names = prompts or PROMPTS
    off = {p: [OFF_TPOT[i % 8] * j for j in JITTER] for i, p in enumerate(names)}
    spec = {p: [OFF_TPOT[i % 8] / SPEEDUP[i % 8] * j for j in JITTER] for i, p in enumerate(names)}
    return off, spec


def _token_weighted(off: dict[str, list[float]], spec: dict[str, list[float]]) -> float:
    """Total decode time over total tokens, off over speculative (each repeat counted)."""
    t = {p: TOKENS[i % 8] for i, p in enumerate(off)}
    num = sum(v * t[p] for p, vs in off.items() for v in vs)
    den = sum(v * t[p] for p, vs in spec.items() for v in vs)
    return num / den


def _rows(off: dict[str, list[float]], spec: dict[str, list[float]]) -> tuple[object, object]:
    b = float(np.median([v for vs in off.values() for v in vs]))
    c = float(np.median([v for vs in spec.values() for v in vs]))
    n = sum(len(vs) for vs in off.values())
    return make_row(tpot_ms=b, n_requests=n), make_row(speculative="mtp", tpot_ms=c, n_requests=n)


def _rounds(by_prompt: dict[str, list[float]]) -> dict[int, float]:
    return {r: float(np.median([vs[r] for vs in by_prompt.values()])) for r in range(3)}


def test_the_interval_over_prompts_holds_the_figure_and_the_token_weighted_pooling() -> None:
    off, spec = _workload()
    base, cand = _rows(off, spec)
    pooled = _token_weighted(off, spec)
    rounds_only = compare_speedup(base, cand, rounds=(_rounds(off), _rounds(spec)))
    assert rounds_only.rounds == 3 and rounds_only.ci_high is not None
    assert rounds_only.ci_high < pooled  # repeat noise only: another pooling falls outside
    verdict = compare_speedup(base, cand, rounds=(_rounds(off), _rounds(spec)), prompt_samples=(off, spec))
    assert verdict.printed and verdict.prompts == 8 and verdict.rounds is None
    assert verdict.ci_low is not None and verdict.ci_high is not None and verdict.speedup
    assert verdict.ci_low <= verdict.speedup <= verdict.ci_high
    assert verdict.ci_low <= pooled <= verdict.ci_high
    assert verdict.speedup == pytest.approx(base.tpot_ms / cand.tpot_ms)  # type: ignore[attr-defined]
    assert str(verdict).endswith("over 8 prompts)")


def test_more_prompts_of_the_same_kind_narrow_the_interval_and_never_flip_it() -> None:
    off, spec = _workload()
    few = prompt_ratio_ci(off, spec, point=1.0 / 1.0 * 1.7, seed=1)
    off4, spec4 = _workload([f"p{i}" for i in range(32)])
    many = prompt_ratio_ci(off4, spec4, point=1.7, seed=1)
    assert few is not None and many is not None
    assert few[0] > 1 and many[0] > 1  # a gain both times
    assert many[1] - many[0] < few[1] - few[0]
    assert (few[2], many[2]) == (8, 32)


def test_too_few_prompts_or_unnamed_requests_fall_back() -> None:
    off, spec = _workload(PROMPTS[: MIN_PROMPTS - 1])
    assert prompt_ratio_ci(off, spec, point=1.5) is None
    rng = np.random.default_rng(0)
    assert prompt_indices([["a", None, "b"]], rng, 10) is None
    base, cand = _rows(off, spec)
    verdict = compare_speedup(base, cand, prompt_samples=(off, spec))
    assert verdict.prompts is None and verdict.point_estimate


def test_the_same_prompts_are_drawn_for_every_group() -> None:
    rng = np.random.default_rng(3)
    a = ["p1", "p2", "p3", "p4", "p5", "p1", "p2", "p3", "p4", "p5"]
    b = ["p5", "p4", "p3", "p2", "p1", "p6"]  # p6: measured on one side only, left out
    ia, ib = prompt_indices([a, b], rng, 50) or ([], [])
    names_a = np.asarray(a, dtype=object)[ia]
    names_b = np.asarray(b, dtype=object)[ib]
    assert ia.shape == (50, 10) and ib.shape == (50, 5)
    blocks = names_a.reshape(50, 5, 2)  # each drawn prompt: m = 2 of its requests in a
    assert (blocks[:, :, 0] == blocks[:, :, 1]).all()
    assert (blocks[:, :, 0] == names_b).all()  # the same prompts, in the same draw, in b
    assert "p6" not in set(names_b.ravel())
    assert len({tuple(r) for r in names_b}) > 1  # and the draws differ


def _speedup_groups(off: dict[str, list[float]], spec: dict[str, list[float]]) -> list[Group]:
    out = []
    for side in (off, spec):
        names = [p for p, vs in side.items() for _ in vs]
        values = np.asarray([[v] for vs in side.values() for v in vs])
        out.append(Group(values, np.asarray([r for vs in side.values() for r in range(len(vs))]), tuple(names)))
    return out


def test_compare_pairs_the_runs_on_the_prompt() -> None:
    """Run B reruns run A's prompts: the speedup B/A interval is narrow around 1, as
    the scorecard's own interval would judge B against A; without prompts (each run's
    requests resampled on their own) the same data give a far wider interval."""
    fig = next(f for f in FIGURES if f.name == "speedup")
    off, spec = _workload()
    spec_b = {p: [v * 1.002 for v in vs] for p, vs in spec.items()}
    a, b = _speedup_groups(off, spec), _speedup_groups(off, spec_b)
    paired = bootstrap_change(fig, a, b, level=0.05, seed=0)
    unnamed = [Group(g.values, g.rounds) for g in a], [Group(g.values, g.rounds) for g in b]
    apart = bootstrap_change(fig, *unnamed, level=0.05, seed=0)
    assert paired is not None and apart is not None
    assert paired[0] <= 1 / 1.002 <= paired[1]  # B/A of the figure: off / spec_b over off / spec
    assert paired[1] - paired[0] < (apart[1] - apart[0]) / 5


# --- the interval holds the figure printed beside it --------------------------------
per_prompt = st.lists(
    st.lists(st.floats(min_value=0.5, max_value=50.0), min_size=1, max_size=3),
    min_size=MIN_PROMPTS,
    max_size=9,
)


def _point(off: dict[str, list[float]], spec: dict[str, list[float]]) -> float:
    b = float(np.median([v for vs in off.values() for v in vs]))
    c = float(np.median([v for vs in spec.values() for v in vs]))
    return b / c


def unguarded(off: dict[str, list[float]], spec: dict[str, list[float]], point: float) -> object:
    """The interval without its widening: a ``nan`` point leaves min/max at the
    percentiles (the behaviour the guard exists to fix)."""
    return prompt_ratio_ci(off, spec, point=math.nan, n_resamples=400)


def guarded(off: dict[str, list[float]], spec: dict[str, list[float]], point: float) -> object:
    return prompt_ratio_ci(off, spec, point=point, n_resamples=400)


def check_holds_its_figure(ci_of: object, cfg: object = PROPERTY_SETTINGS) -> None:
    @cfg  # type: ignore[operator]
    @given(b=per_prompt, c=per_prompt)
    # prompts of unequal repeats: the percentiles alone miss the pooled figure (0.3)
    @example(
        b=[[5.0], [1.0], [20.0], [1.0, 2.0], [1.0, 5.0, 1.0]],
        c=[[20.0, 5.0, 5.0], [1.0], [2.0, 5.0], [5.0, 5.0, 1.0], [2.0, 1.0]],
    )
    def prop(b: list[list[float]], c: list[list[float]]) -> None:
        n = min(len(b), len(c))
        off = {f"p{i}": b[i] for i in range(n)}
        spec = {f"p{i}": c[i] for i in range(n)}
        point = _point(off, spec)
        ci = ci_of(off, spec, point)  # type: ignore[operator]
        if ci is not None:
            assert ci[0] <= point <= ci[1]

    prop()


def test_the_interval_always_holds_the_printed_figure() -> None:
    check_holds_its_figure(guarded)


def test_the_property_catches_an_interval_that_misses_its_figure() -> None:
    with pytest.raises(AssertionError):
        check_holds_its_figure(unguarded, BROKEN_SETTINGS)


def test_metric_direction_inverts_the_ratio() -> None:
    off, spec = _workload()
    lo, hi, _ = prompt_ratio_ci(off, spec, point=_point(off, spec)) or (0, 0, 0)
    rate_off = {p: [1000 / v for v in vs] for p, vs in off.items()}
    rate_spec = {p: [1000 / v for v in vs] for p, vs in spec.items()}
    lo2, hi2, _ = prompt_ratio_ci(rate_off, rate_spec, invert=True, point=_point(off, spec)) or (0, 0, 0)
    assert lo2 == pytest.approx(lo, rel=0.05) and hi2 == pytest.approx(hi, rel=0.05)
    assert SpeedupMetric.output_toks_per_s.higher_is_better
