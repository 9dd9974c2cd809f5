"""Anytime-valid sequential verdicts: the confidence sequence of the paired speedup.

The simulation runs 1,000 seeded streams of per-round log speedups (deterministic, no
timing): under the null (equal-cost routes) the sequence, looked at after every round,
credits at most ``alpha`` of them, while stopping at the first look whose fixed-horizon
Student-t interval (``paired_speedup_ci``) excludes 1 credits far more; under a true 2×
the median number of rounds to a decision is below the demo's fixed ``repeats`` (3).

The per-round noise is the demo's: its three rounds of ``mtp`` against ``off`` at
concurrency 1 give log ratios 0.500, 0.536, 0.517 (sd 0.018); the streams use 0.02.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deepseekbench._analysis._sequential import (
    DEFAULT_ALPHA,
    RoundEvidence,
    SpeedupSequence,
    StopReason,
    line_stop,
    log_ratio_e_value,
    round_log_ratios,
    rounds_to_decision,
    sequential_verdict,
    speedup_confidence_sequence,
)
from deepseekbench._analysis._speedup import paired_speedup_ci
from tests.test_properties import BROKEN_SETTINGS, PROPERTY_SETTINGS

STREAMS = 1000
CAP = 20
ROUND_SD = 0.02  # per-round log-ratio sd, the demo's (see the module docstring)
DEMO_REPEATS = 3
SEED = 34

Rule = Callable[..., StopReason | None]


def _fixed_interval_excludes_one(xs: np.ndarray) -> bool:
    """Today's fixed-horizon interval (paired_speedup_ci) read at this look."""
    ones = dict.fromkeys(range(len(xs)), 1.0)
    cand = {i: math.exp(float(x)) for i, x in enumerate(xs)}
    res = paired_speedup_ci(ones, cand, metric="output_toks_per_s")
    return res is not None and not (res[1] <= 1.0 <= res[2])


def _peeking_credits(stream: np.ndarray) -> bool:
    return any(_fixed_interval_excludes_one(stream[:k]) for k in range(2, len(stream) + 1))


def test_null_streams_false_credit_within_alpha_where_peeking_exceeds_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rng = np.random.default_rng(SEED)
    streams = rng.normal(0.0, ROUND_SD, size=(STREAMS, CAP))
    sequential = sum(
        rounds_to_decision(s, delta=0.03, min_rounds=2, cap=CAP)[1] is StopReason.credited
        for s in streams
    )
    peeking = sum(_peeking_credits(s) for s in streams)
    with capsys.disabled():
        print(
            f"\n{STREAMS} null streams, up to {CAP} rounds, alpha {DEFAULT_ALPHA}: "
            f"false credit {sequential / STREAMS:.3f} under continuous monitoring of the "
            f"confidence sequence; {peeking / STREAMS:.3f} stopping at the first look "
            "whose fixed-horizon t interval excludes 1"
        )
    assert sequential / STREAMS <= DEFAULT_ALPHA
    assert peeking / STREAMS > DEFAULT_ALPHA


def test_a_true_2x_decides_in_fewer_rounds_than_the_fixed_repeats(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rng = np.random.default_rng(SEED)
    streams = rng.normal(math.log(2.0), ROUND_SD, size=(STREAMS, CAP))
    outcomes = [rounds_to_decision(s, delta=0.03, min_rounds=2, cap=CAP) for s in streams]
    rounds = [n for n, _, _ in outcomes]
    with capsys.disabled():
        print(
            f"\ntrue 2x, round sd {ROUND_SD}: rounds to a decision min {min(rounds)} "
            f"median {np.median(rounds):g} max {max(rounds)} (fixed repeats {DEMO_REPEATS})"
        )
    assert all(reason is StopReason.credited for _, reason, _ in outcomes)
    assert np.median(rounds) < DEMO_REPEATS
    for _, _, seq in outcomes:
        assert seq is not None and seq.low > 1.0


def test_equal_routes_with_many_rounds_end_no_meaningful_difference() -> None:
    rng = np.random.default_rng(SEED)
    n, reason, seq = rounds_to_decision(
        rng.normal(0.0, 0.005, size=60), delta=0.03, min_rounds=2, cap=60
    )
    assert reason is StopReason.no_meaningful_difference and seq is not None
    assert seq.within(0.03) and seq.contains_one and n < 60


def test_the_sequence_is_the_set_the_e_process_does_not_reject() -> None:
    rng = np.random.default_rng(SEED)
    for _ in range(200):
        xs = rng.normal(rng.normal(0, 0.3), rng.uniform(0.01, 0.5), size=rng.integers(2, 12))
        seq = speedup_confidence_sequence(xs)
        assert seq is not None
        for m in np.linspace(float(xs.min()) - 1.0, float(xs.max()) + 1.0, 41):
            e = log_ratio_e_value(xs, null=float(m))
            inside = seq.low <= math.exp(m) <= seq.high
            if abs(math.log(e * DEFAULT_ALPHA)) > 1e-6:  # not on the boundary itself
                assert inside == (e < 1.0 / DEFAULT_ALPHA)


def test_one_round_says_nothing_and_bad_input_is_refused() -> None:
    assert speedup_confidence_sequence([0.5]) is None
    assert log_ratio_e_value([0.5]) == 1.0
    assert sequential_verdict(None, delta=0.03, min_rounds=2, cap=3) is None
    with pytest.raises(ValueError, match="alpha"):
        speedup_confidence_sequence([0.1, 0.2], alpha=1.0)
    with pytest.raises(ValueError, match="prior_scale"):
        log_ratio_e_value([0.1, 0.2], prior_scale=0.0)
    with pytest.raises(ValueError, match="finite"):
        speedup_confidence_sequence([0.1, math.nan])
    with pytest.raises(ValueError, match="min_rounds"):
        sequential_verdict(None, delta=0.03, min_rounds=4, cap=3)
    with pytest.raises(ValueError, match="delta"):
        sequential_verdict(None, delta=1.5, min_rounds=2, cap=3)


def test_round_log_ratios_orient_by_metric() -> None:
    base, cand = {0: 10.0, 1: 10.0, 2: 1.0}, {0: 5.0, 1: 4.0}
    assert round_log_ratios(base, cand) == pytest.approx([math.log(2), math.log(2.5)])
    assert round_log_ratios(base, cand, metric="output_toks_per_s") == pytest.approx(
        [-math.log(2), -math.log(2.5)]
    )


# --- the property: no stopping rule ever credits while the sequence contains 1 ----------

streams_st = st.lists(
    st.floats(min_value=-1.0, max_value=1.0, allow_nan=False), min_size=2, max_size=12
)


def check_never_credits_inside(rule: Rule, cfg: settings = PROPERTY_SETTINGS) -> None:
    @cfg
    @given(
        xs=streams_st,
        delta=st.floats(min_value=0.0, max_value=0.5),
        min_rounds=st.integers(min_value=2, max_value=4),
        extra=st.integers(min_value=0, max_value=8),
        parity_ready=st.booleans(),
    )
    # a pair of rounds whose t interval excludes 1 while the sequence holds it
    @example(xs=[0.30, 0.32], delta=0.03, min_rounds=2, extra=0, parity_ready=True)
    @example(xs=[0.10, 0.12, 0.11], delta=0.03, min_rounds=2, extra=0, parity_ready=True)
    # equal routes, tight rounds: the sequence lies inside ±delta (and holds 1)
    @example(xs=[0.001, -0.001] * 6, delta=0.03, min_rounds=2, extra=8, parity_ready=True)
    def prop(
        xs: list[float], delta: float, min_rounds: int, extra: int, parity_ready: bool
    ) -> None:
        cap = min_rounds + extra
        for k in range(2, len(xs) + 1):
            seq = speedup_confidence_sequence(xs[:k])
            reason = rule(
                seq, delta=delta, min_rounds=min_rounds, cap=cap, parity_ready=parity_ready
            )
            if reason is StopReason.credited:
                assert seq is not None and not seq.contains_one
                assert log_ratio_e_value(xs[:k]) >= (1.0 / DEFAULT_ALPHA) * (1 - 1e-9)
                assert parity_ready and k >= min_rounds
            if reason is StopReason.no_meaningful_difference:
                assert seq is not None and seq.within(delta) and parity_ready
            if reason is None:
                assert k < cap

    prop()


def credits_on_the_point_estimate(seq: SpeedupSequence | None, **kw: object) -> StopReason | None:
    """A broken rule: credits once the point speedup is 5 % away from 1, whatever the
    sequence says (as reading a bare figure would)."""
    if seq is not None and abs(math.log(seq.speedup)) > math.log(1.05):
        return StopReason.credited
    return sequential_verdict(seq, **kw)  # type: ignore[arg-type]


def test_no_stopping_rule_credits_while_the_sequence_contains_one() -> None:
    check_never_credits_inside(sequential_verdict)


def test_the_property_catches_a_rule_that_credits_the_point_estimate() -> None:
    with pytest.raises(AssertionError):
        check_never_credits_inside(credits_on_the_point_estimate, BROKEN_SETTINGS)


# --- one comparison replayed from its rounds -------------------------------------------


def _evidence(values: list[float], per_round: int = 5) -> RoundEvidence:
    return RoundEvidence(dict(enumerate(values)), dict.fromkeys(range(len(values)), per_round))


def test_line_stop_credits_at_the_first_deciding_round() -> None:
    off, cand = _evidence([10.0, 10.0, 10.0, 10.0]), _evidence([5.0, 5.001, 5.0, 5.0])
    stop = line_stop(off, cand, metric="tpot_ms", delta=0.03, min_rounds=2, min_requests=5, cap=6)
    assert stop.reason is StopReason.credited and stop.decided
    assert stop.sequence is not None and stop.sequence.rounds == 2
    assert stop.text.startswith("rounds 4 of 6, stopped: credited (sequence ")


def test_line_stop_waits_for_traffic_parity_and_min_rounds() -> None:
    off, cand = _evidence([10.0, 10.0, 10.0]), _evidence([5.0, 5.001, 5.0])
    kw: dict[str, Any] = {"metric": "tpot_ms", "delta": 0.03, "cap": 6}

    def rounds_at_stop(**more: Any) -> int | None:
        stop = line_stop(off, cand, **kw, **more)
        credited = stop.reason is StopReason.credited and stop.sequence is not None
        return stop.sequence.rounds if credited and stop.sequence else None

    assert rounds_at_stop(min_rounds=2, min_requests=5) == 2
    assert rounds_at_stop(min_rounds=2, min_requests=11) == 3  # 5 + 5 requests are too few
    assert rounds_at_stop(min_rounds=2, min_requests=16) is None
    assert rounds_at_stop(min_rounds=2, min_requests=5, parity_ready=False) is None
    assert rounds_at_stop(min_rounds=3, min_requests=5) == 3


def test_line_stop_at_the_cap_is_not_decided() -> None:
    off, cand = _evidence([10.0, 10.0, 10.0]), _evidence([5.0, 15.0, 8.0])
    stop = line_stop(off, cand, metric="tpot_ms", delta=0.03, min_rounds=2, min_requests=1, cap=3)
    assert stop.reason is StopReason.cap and not stop.decided
    assert stop.sequence is not None and stop.sequence.contains_one


@PROPERTY_SETTINGS
@given(xs=st.lists(st.floats(min_value=-2.0, max_value=2.0), min_size=2, max_size=30))
def test_the_sequence_holds_the_fixed_interval(xs: list[float]) -> None:
    """The sequence is never narrower than the fixed-horizon t interval of the same
    rounds, so a comparison it credits reads as credited on the scorecard too (whose
    interval is the t one), and one it calls no meaningful difference reads as no
    significant difference."""
    seq = speedup_confidence_sequence(xs)
    ones = dict.fromkeys(range(len(xs)), 1.0)
    fixed = paired_speedup_ci(
        ones, {i: math.exp(x) for i, x in enumerate(xs)}, metric="output_toks_per_s"
    )
    assert seq is not None
    if fixed is not None:
        assert seq.low <= fixed[1] * (1 + 1e-9) and fixed[2] <= seq.high * (1 + 1e-9)
