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
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deepseekbench import compare_speedup
from deepseekbench._analysis import _prompt_bootstrap
from deepseekbench._analysis._compare_figures import FIGURES, Group, bootstrap_change
from deepseekbench._analysis._prompt_bootstrap import (
    MIN_PROMPTS,
    combine_log_intervals,
    prompt_indices,
    prompt_ratio_ci,
)
from tests.test_foundation import make_row
from tests.test_properties import BROKEN_SETTINGS, PROPERTY_SETTINGS

PROMPTS = [f"prompt-{i}" for i in range(8)]
SPEEDUP = [1.3, 1.4, 1.5, 1.6, 1.8, 2.0, 2.2, 2.4]  # per prompt: how much the draft helps
TOKENS = [10, 10, 12, 15, 40, 60, 64, 64]  # output tokens per prompt
OFF_TPOT = [8.0 + 0.2 * i for i in range(8)]  # ms/token per prompt
JITTER = (0.999, 1.0, 1.001)  # three rounds, nearly identical

PerPrompt = dict[str, dict[int, float]]


def _workload(prompts: list[str] | None = None) -> tuple[PerPrompt, PerPrompt]:
    """Per prompt, its off and speculative TPOT (ms) in each of three rounds."""
    names = prompts or PROMPTS
    off = {p: {r: OFF_TPOT[i % 8] * j for r, j in enumerate(JITTER)} for i, p in enumerate(names)}
    spec = {
        p: {r: OFF_TPOT[i % 8] / SPEEDUP[i % 8] * j for r, j in enumerate(JITTER)}
        for i, p in enumerate(names)
    }
    return off, spec


def _token_weighted(off: PerPrompt, spec: PerPrompt) -> float:
    """Total decode time over total tokens, off over speculative (every round counted)."""
    t = {p: TOKENS[i % 8] for i, p in enumerate(off)}
    num = sum(v * t[p] for p, by in off.items() for v in by.values())
    den = sum(v * t[p] for p, by in spec.items() for v in by.values())
    return num / den


def _rows(off: PerPrompt, spec: PerPrompt) -> tuple[Any, Any]:
    b = float(np.median([v for by in off.values() for v in by.values()]))
    c = float(np.median([v for by in spec.values() for v in by.values()]))
    n = sum(len(by) for by in off.values())
    return make_row(tpot_ms=b, n_requests=n), make_row(speculative="mtp", tpot_ms=c, n_requests=n)


def _rounds(by_prompt: PerPrompt) -> dict[int, float]:
    return {r: float(np.median([by[r] for by in by_prompt.values()])) for r in range(3)}


def test_the_interval_holds_the_figure_and_the_token_weighted_pooling() -> None:
    off, spec = _workload()
    base, cand = _rows(off, spec)
    pooled = _token_weighted(off, spec)
    rounds = (_rounds(off), _rounds(spec))
    rounds_only = compare_speedup(base, cand, rounds=rounds)
    assert rounds_only.rounds == 3 and rounds_only.ci_high is not None
    assert rounds_only.ci_high < pooled  # repeat noise only: another pooling falls outside
    verdict = compare_speedup(base, cand, rounds=rounds, prompt_samples=(off, spec))
    assert verdict.printed and verdict.prompts == 8 and verdict.rounds == 3
    assert verdict.speedup == rounds_only.speedup  # the figure is the rounds' own
    assert verdict.ci_low is not None and verdict.ci_high is not None and verdict.speedup
    assert rounds_only.ci_low is not None
    assert verdict.ci_low <= rounds_only.ci_low and rounds_only.ci_high <= verdict.ci_high
    assert verdict.ci_low <= pooled <= verdict.ci_high
    assert str(verdict).endswith("over 8 prompts)")


def test_one_round_the_interval_over_prompts_holds_the_rows_figure() -> None:
    off, spec = _workload()
    one = ({p: {0: by[0]} for p, by in off.items()}, {p: {0: by[0]} for p, by in spec.items()})
    base, cand = _rows(*one)
    verdict = compare_speedup(base, cand, prompt_samples=one)
    assert verdict.printed and verdict.prompts == 8 and verdict.rounds is None
    assert verdict.speedup == pytest.approx(base.tpot_ms / cand.tpot_ms)
    assert verdict.ci_low is not None and verdict.ci_high is not None and verdict.speedup
    assert verdict.ci_low <= verdict.speedup <= verdict.ci_high
    assert verdict.ci_low <= _token_weighted(*one) <= verdict.ci_high


def test_more_prompts_of_the_same_kind_narrow_the_interval_and_never_flip_it() -> None:
    off, spec = _workload()
    few = prompt_ratio_ci(off, spec, point=1.7, seed=1)
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
    picks = prompt_indices([a, b], rng, 50)
    assert picks is not None
    ia, ib = picks
    names_a = np.asarray(a, dtype=object)[ia]
    names_b = np.asarray(b, dtype=object)[ib]
    assert ia.shape == (50, 10) and ib.shape == (50, 5)
    blocks = names_a.reshape(50, 5, 2)  # each drawn prompt: m = 2 of its requests in a
    assert (blocks[:, :, 0] == blocks[:, :, 1]).all()
    assert (blocks[:, :, 0] == names_b).all()  # the same prompts, in the same draw, in b
    assert "p6" not in set(names_b.ravel())
    assert len({tuple(r) for r in names_b}) > 1  # and the draws differ


def _speedup_groups(off: PerPrompt, spec: PerPrompt) -> list[Group]:
    out = []
    for side in (off, spec):
        cells = [(p, r, v) for p, by in side.items() for r, v in by.items()]
        values = np.asarray([[v] for _, _, v in cells])
        out.append(
            Group(values, np.asarray([r for _, r, _ in cells]), tuple(p for p, _, _ in cells))
        )
    return out


def test_compare_pairs_the_runs_on_the_prompt() -> None:
    """Run B reruns run A's prompts: the speedup B/A interval is narrow around 1, as
    the scorecard's own interval would judge B against A; without prompts (each run's
    requests resampled on their own) the same data give a far wider interval."""
    fig = next(f for f in FIGURES if f.name == "speedup")
    off, spec = _workload()
    spec_b = {p: {r: v * 1.002 for r, v in by.items()} for p, by in spec.items()}
    a, b = _speedup_groups(off, spec), _speedup_groups(off, spec_b)
    paired = bootstrap_change(fig, a, b, level=0.05, seed=0)
    unnamed = [Group(g.values, g.rounds) for g in a], [Group(g.values, g.rounds) for g in b]
    apart = bootstrap_change(fig, *unnamed, level=0.05, seed=0)
    assert paired is not None and apart is not None
    assert paired[0] <= 1 / 1.002 <= paired[1]  # B/A of the figure: off / spec_b over off / spec
    assert paired[1] - paired[0] < (apart[1] - apart[0]) / 5


# --- the interval holds the figure printed beside it --------------------------------
per_prompt = st.lists(st.floats(min_value=0.5, max_value=50.0), min_size=MIN_PROMPTS, max_size=9)


def check_holds_its_figure(cfg: settings = PROPERTY_SETTINGS) -> None:
    """Whatever the evidence says, a printed interval holds the figure printed beside it
    (here the rows' own medians, drawn apart from the per-prompt values)."""

    @cfg
    @given(b=per_prompt, c=per_prompt, row_b=st.floats(1.0, 50.0), row_c=st.floats(1.0, 50.0))
    @example(b=[10.0] * 5, c=[5.0] * 5, row_b=10.0, row_c=9.0)  # the rows say 1.11×
    def prop(b: list[float], c: list[float], row_b: float, row_c: float) -> None:
        n = min(len(b), len(c))
        off = {f"p{i}": {0: b[i]} for i in range(n)}
        spec = {f"p{i}": {0: c[i]} for i in range(n)}
        base = make_row(tpot_ms=row_b)
        cand = make_row(speculative="mtp", tpot_ms=row_c)
        v = compare_speedup(base, cand, prompt_samples=(off, spec), n_resamples=200)
        if v.ci_low is not None and v.ci_high is not None and v.speedup is not None:
            assert v.ci_low <= v.speedup <= v.ci_high

    prop()


def test_the_interval_always_holds_the_printed_figure() -> None:
    check_holds_its_figure()


def test_the_property_catches_an_interval_that_misses_its_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broken on purpose: the percentiles alone, not widened to the figure (a ``nan``
    point leaves ``min``/``max`` at the percentiles)."""
    real = _prompt_bootstrap.prompt_ratio_ci

    def unguarded(*args: Any, **kw: Any) -> Any:
        return real(*args, **{**kw, "point": math.nan})

    monkeypatch.setattr(_prompt_bootstrap, "prompt_ratio_ci", unguarded)
    with pytest.raises(AssertionError):
        check_holds_its_figure(BROKEN_SETTINGS)


def check_combined_holds_each(combine: Any, cfg: settings = PROPERTY_SETTINGS) -> None:
    """The combined interval holds each source's interval: a drift the rounds' interval
    cannot rule out (it holds 1) is never credited once the prompts are added."""
    side = st.floats(min_value=0.0, max_value=2.0)

    @cfg
    @given(point=st.floats(0.2, 5.0), a=st.tuples(side, side), b=st.tuples(side, side))
    def prop(point: float, a: tuple[float, float], b: tuple[float, float]) -> None:
        ia = (point * math.exp(-a[0]), point * math.exp(a[1]))
        ib = (point * math.exp(-b[0]), point * math.exp(b[1]))
        lo, hi = combine(point, ia, ib)
        for x, y in (ia, ib):
            assert lo <= x * (1 + 1e-12) and y <= hi * (1 + 1e-12)

    prop()


def test_the_combined_interval_holds_each_sources_interval() -> None:
    check_combined_holds_each(combine_log_intervals)


def test_the_property_catches_a_combination_narrower_than_a_source() -> None:
    def narrowest(point: float, *iv: tuple[float, float]) -> tuple[float, float]:
        return max(lo for lo, _ in iv), min(hi for _, hi in iv)

    with pytest.raises(AssertionError):
        check_combined_holds_each(narrowest, BROKEN_SETTINGS)
