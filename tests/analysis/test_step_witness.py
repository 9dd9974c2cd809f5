"""The step-cost witness as a user calls it: typed errors for bad input, and a result that
reads as sentences (figures with units, the verdict, what it could have detected)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import (
    DeepseekBenchError,
    SpeedupDecomposition,
    StepCosts,
    StepCostsError,
    witness_step_costs,
)


def _decomposition(
    speedup: float = 2.0, half: float = 0.02, length: float = 3.0
) -> SpeedupDecomposition:
    """A decomposition on off's 10 ms decode step, its intervals ``half`` wide (relative)."""
    ratio = length / speedup
    return SpeedupDecomposition(
        speedup=speedup,
        speedup_ci=(speedup * (1 - half), speedup * (1 + half)),
        acceptance_length=length,
        acceptance_length_ci=(length * (1 - half), length * (1 + half)),
        step_cost_ratio=ratio,
        step_cost_ratio_ci=(ratio * (1 - half), ratio * (1 + half)),
        decode_step_ms=10.0,
        verify_step_ms=ratio * 10.0,
        verify_step_ms_ci=(ratio * 10.0 * (1 - half), ratio * 10.0 * (1 + half)),
        depth=3,
        break_even_length=ratio,
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda: StepCosts(-1),  # type: ignore[call-arg]
        lambda: StepCosts(verify_step_ms=-1.0, decode_step_ms=10.0, source="model"),
        lambda: StepCosts(15.0, math.nan, "model"),
        lambda: StepCosts(15.0, 10.0, ""),
        lambda: StepCosts(15.0, 10.0, "model", 4),  # type: ignore[call-arg]
        lambda: StepCosts(15.0, 10.0, "model", verify_step_ms=3.0),  # type: ignore[misc]
        lambda: StepCosts(15.0, 10.0, source="model", batch=8),  # type: ignore[call-arg]
    ],
)
def test_bad_step_costs_raise_a_typed_error_naming_the_field(call: object) -> None:
    with pytest.raises(StepCostsError) as info:
        call()  # type: ignore[operator]
    assert isinstance(info.value, DeepseekBenchError) and isinstance(info.value, ValueError)
    assert "StepCosts" in str(info.value)
    assert "ValidationError" not in str(info.value) and "pydantic" not in str(info.value)


def test_step_costs_name_what_each_field_must_be() -> None:
    with pytest.raises(StepCostsError, match=r"verify_step_ms must be .*> 0 \(ms\); got -1"):
        StepCosts(-1)  # type: ignore[call-arg]
    with pytest.raises(StepCostsError, match=r"batch is not a field"):
        StepCosts(15.0, 10.0, "m", batch=8)  # type: ignore[call-arg]
    # positional and keyword build the same costs
    assert StepCosts(15.0, 10.0, "model") == StepCosts(
        verify_step_ms=15.0, decode_step_ms=10.0, source="model"
    )


def test_witnessing_nothing_raises_a_typed_error() -> None:
    costs = StepCosts(15.0, 10.0, "model")
    with pytest.raises(StepCostsError, match="None where no speedup is credited"):
        witness_step_costs(None, costs)  # type: ignore[arg-type]
    with pytest.raises(StepCostsError, match="needs StepCosts"):
        witness_step_costs(_decomposition(), (15.0, 10.0))  # type: ignore[arg-type]


def test_the_witness_reads_as_sentences_with_units_verdict_and_reach() -> None:
    # measured verify step 15 ms (3.0 / 2.0 × 10 ms); the model says 15 ms: they agree
    agree = witness_step_costs(_decomposition(), StepCosts(15.0, 10.0, "cost model"))
    text = str(agree)
    assert "=" not in text and "agrees" not in text  # not a field dump
    assert "measured 2.00× (95 % CI 1.96–2.04)" in text
    assert "predicted 2.00× (95 % CI 1.96–2.04) from cost model" in text
    assert "verify step 15.0 ms measured vs 15.0 ms predicted" in text
    assert "the parts add up" in text
    # 2 % intervals each side: about 15 × (1.02 / 0.98 − 1) = 0.6 ms is the reach
    assert agree.detectable_ms == pytest.approx(15.0 * (1.02 / 0.98 - 1))
    assert "it would have named a per-step overhead of 0.6 ms or more" in text
    alarm = str(witness_step_costs(_decomposition(), StepCosts(12.0, 10.0, "cost model")))
    assert "unexplained per-step overhead 3.0 ms (95 % CI 2.7–3.3 ms)" in alarm


@given(
    half=st.floats(min_value=0.001, max_value=0.2),
    extra_share=st.floats(min_value=0.0, max_value=1.0),
)
def test_an_overhead_past_the_stated_reach_is_named_and_one_below_it_is_not(
    half: float, extra_share: float
) -> None:
    """The reach the witness states is the one it has: a measured verify step that sits
    ``δ`` above the prediction is named exactly when ``δ`` exceeds ``detectable_ms``."""
    base = witness_step_costs(_decomposition(half=half), StepCosts(15.0, 10.0, "m"))
    reach = base.detectable_ms
    assert reach is not None  # both intervals known: judged
    delta = reach * 2 * extra_share  # from none to twice the reach
    if abs(delta - reach) < 1e-6 * reach:
        return  # on the edge: either verdict is right
    # the same acceptance, the verify step δ slower: the speedup falls as 15 / (15 + δ)
    slower = 2.0 * 15.0 / (15.0 + delta)
    w = witness_step_costs(_decomposition(speedup=slower, half=half), StepCosts(15.0, 10.0, "m"))
    assert w.agrees == (delta < reach), (delta, reach, str(w))


def test_apart_speedups_with_a_gap_interval_holding_zero_name_no_overhead() -> None:
    """The speedup intervals are apart (measured 2.00× ±2 % vs predicted 2.50× ±2 %), but
    the measured verify step's own interval (it also carries the acceptance length's) holds
    the predicted 12 ms: the two intervals disagree on whether there is a gap, so none is
    named (a gap interval of -9.0–1.1 ms was once printed as an "unexplained overhead")."""
    wide = _decomposition().model_copy(update={"verify_step_ms_ci": (3.0, 16.0)})
    w = witness_step_costs(wide, StepCosts(12.0, 10.0, "cost model"))
    assert w.agrees is None and w.undecided is not None
    assert w.unexplained_ms_ci == pytest.approx((-9.0, 4.0))
    assert "unexplained per-step overhead" not in w.text()
    assert "too uncertain to name an overhead" in w.text()
    assert "not judged: the speedups' intervals are apart" in str(w)
    # the same witness whose gap interval excludes 0 names it
    narrow = witness_step_costs(_decomposition(), StepCosts(12.0, 10.0, "cost model"))
    assert narrow.agrees is False and narrow.undecided is None
