"""The effective-temperature diagnosis: it recovers the temperature the tokens were drawn
at, names each fault's kind, catches a witness that ignores the temperature, and never
moves a verdict.

The draws are the seeded simulations of ``tests/analysis/_samplers.py`` (a synthetic
target of 48 tokens, ``off``'s top-20 reported), scored through :func:`witness`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from deepseekbench import (
    EffectiveTemperature,
    QualityParity,
    RouteWitness,
    SamplingSpec,
    WitnessResult,
    fit_effective_temperature,
    witness,
    witness_verdict,
)
from tests.analysis import _samplers as sim

ASKED = 0.8
N = 2000  # informative positions per fit


def _fit(
    draw_t: float,
    asked: float,
    seed: int,
    *,
    n: int = N,
    sampler: Callable[[sim.Target], np.ndarray] | None = None,
) -> WitnessResult:
    """The witness (with its fit) on ``n`` tokens drawn at ``draw_t`` (or by ``sampler``
    at the asked temperature), scored against ``off``'s law at ``asked``."""
    tg = sim.make_target(seed, n, draw_t if sampler is None else asked)
    law = tg.p() if sampler is None else sampler(tg)
    tokens = sim.draw(law, np.random.default_rng(seed + 1))
    spec = SamplingSpec(temperature=asked)
    return witness(sim.positions(tg, tokens), spec, top_k=sim.K, alpha=0.05, seed=seed)


def _t(r: WitnessResult) -> EffectiveTemperature:
    assert r.effective_temperature is not None
    return r.effective_temperature


def _near(fit: EffectiveTemperature, t: float, widths: float = 2.0) -> bool:
    """``t`` within ``widths`` half-widths of the fit on the log scale (the 95 % interval
    itself misses 1 time in 20 by design; two half-widths, about 4 standard errors, miss
    with negligible probability)."""
    assert fit.requested is not None
    half = (math.log(fit.ratio_high) - math.log(fit.ratio_low)) / 2
    return abs(math.log(fit.requested * fit.ratio / t)) <= widths * half


def _covers(fit: EffectiveTemperature, t: float) -> bool:
    assert fit.requested is not None
    return fit.requested * fit.ratio_low <= t <= fit.requested * fit.ratio_high


@pytest.mark.parametrize(
    ("draw_t", "kind"),
    [
        (ASKED, "a correct sampler"),
        (ASKED**2, "the temperature applied twice"),
        (0.3, "a sampler too cold"),
        (1.0, "the temperature ignored"),
    ],
)
def test_the_fit_recovers_the_temperature_the_tokens_were_drawn_at(
    draw_t: float, kind: str
) -> None:
    for seed in range(3):
        fit = _t(_fit(draw_t, ASKED, 100 + seed))
        assert fit.requested == ASKED and fit.temperature is not None
        assert _near(fit, draw_t), (kind, fit.words())
        assert fit.ratio_low <= fit.ratio <= fit.ratio_high
        assert fit.tokens > 0.5 * N  # the outside-the-top-k tokens carry no fit
        if draw_t != ASKED:  # the departure is named: the asked temperature is outside
            assert not _covers(fit, ASKED), (kind, fit.words())


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    draw_t=st.floats(0.3, 1.5),
    asked=st.sampled_from((0.5, 0.8, 1.0)),
)
def test_the_fit_lies_within_a_few_of_its_own_widths_of_the_truth(
    seed: int, draw_t: float, asked: float
) -> None:
    """The 95 % interval misses 5 % of the time by design; four half-widths on the log
    scale (a normal deviation of about 8) are missed with negligible probability, while a
    fit that ignored the data (or the temperature) is off by far more."""
    fit = _t(_fit(draw_t, asked, seed, n=1000))
    assert _near(fit, draw_t, widths=4), fit.words()


def test_each_fault_is_named_by_its_kind() -> None:
    argmax = _t(_fit(0, ASKED, 7, sampler=sim.argmax_at_t))
    hot = _t(_fit(0, ASKED, 7, sampler=sim.draft_ignores_temperature))
    correct = _t(_fit(0, ASKED, 7, sampler=lambda tg: tg.p()))
    assert argmax.ratio_high < 0.25, argmax.words()  # argmax acceptance: towards 0
    assert hot.ratio_low > 1.0, hot.words()  # a draft at T=1 mixes in a hotter law
    assert _near(correct, ASKED), correct.words()


def test_a_witness_that_ignores_the_temperature_is_caught() -> None:
    """Correct draws at 0.7, scored as if the request had asked 1.0 (a witness blind to
    the temperature): the fit says 0.7 and leaves 1.0 outside its interval."""
    fit = _t(_fit(0.7, 1.0, 11))
    assert _near(fit, 0.7) and not _covers(fit, 1.0), fit.words()


def test_the_diagnosis_never_moves_the_verdict() -> None:
    for r in (_fit(ASKED, ASKED, 3), _fit(ASKED**2, ASKED, 3)):
        bare = r.model_copy(update={"effective_temperature": None})
        with_fit = witness_verdict(RouteWitness(r, None, 40, N), 100)
        without = witness_verdict(RouteWitness(bare, None, 40, N), 100)
        assert with_fit[0] is without[0]
        assert with_fit[1] == f"{without[1]}; {_t(r).words()}"
        assert "tokens fit T≈" in with_fit[1] and "where the request asked 0.80" in with_fit[1]
    assert without[0] is QualityParity.differs  # the T² draws are refused by the witness


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31), scale=st.floats(0.2, 5.0))
def test_rescaling_the_log_weights_rescales_the_ratio(seed: int, scale: float) -> None:
    """Log-weights ``c·h`` are the law at ``T/c``: the fitted ratio scales by ``c``."""
    rng = np.random.default_rng(seed)
    gaps = [np.concatenate([[0.0], -np.sort(rng.exponential(2.0, 9))]) for _ in range(60)]
    chosen = [int(rng.integers(0, 4)) for _ in gaps]
    base = fit_effective_temperature(gaps, chosen, 0.8)
    scaled = fit_effective_temperature([scale * g for g in gaps], chosen, 0.8)
    assert base is not None and scaled is not None
    if not (base.at_bound or scaled.at_bound):
        assert scaled.ratio == pytest.approx(base.ratio * scale, rel=1e-6)


def test_several_temperatures_state_the_ratio_only() -> None:
    fit = fit_effective_temperature([np.array([0.0, -1.0, -2.0])] * 30, [0] * 20 + [1] * 10, None)
    assert fit is not None and fit.temperature is None
    assert "x the requested temperatures" in fit.words()


def test_bad_input_is_a_typed_error_and_no_information_is_none() -> None:
    g = [np.array([0.0, -1.0])]
    with pytest.raises(ValueError, match="one entry per position"):
        fit_effective_temperature(g, [0, 1], 0.8)
    with pytest.raises(ValueError, match="outside"):
        fit_effective_temperature(g, [2], 0.8)
    with pytest.raises(ValueError, match="weight 0"):
        fit_effective_temperature([np.array([0.0, -np.inf])], [1], 0.8)
    with pytest.raises(ValueError, match="level"):
        fit_effective_temperature(g, [0], 0.8, level=1.0)
    assert fit_effective_temperature([], [], 0.8) is None
    assert fit_effective_temperature([np.array([0.0]), np.array([0.0, 0.0])], [0, 1], 0.8) is None
    with pytest.raises(ValidationError):
        EffectiveTemperature(ratio=0, ratio_low=1, ratio_high=1, tokens=1)
