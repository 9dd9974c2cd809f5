"""The verify pass's noise model: generated engines judged at 8, 48 and 256 requests.

A correct engine flips only at near-ties of ``off``'s own outputs (opportunities), however
often ``off`` flips against itself (0 included): it is verified at every sample size. A
route that flips at a position ``off`` was confident about, or more often than its
opportunities allow, is not. The same property fails against a rate test of the
candidate's flips against ``off``'s self-flips (one-sided Fisher), the rule this model
replaces: a deterministic ``off`` makes a correct engine ``differs`` as the sample grows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from scipy.stats import fisher_exact

from deepseekbench import (
    DEFAULT_TAU_NATS,
    DivergenceKind,
    DivergenceMargin,
    OffProfile,
    QualityParity,
    TauEstimate,
    TauSource,
    lossy_rate_bound,
    measure_tau,
    within_noise_verdict,
)
from deepseekbench._analysis._divergence import (
    DEFAULT_LOSSY_RATE,
    TAU_MIN_SAMPLE,
    TAU_QUANTILE,
    comparisons_needed,
)

TAU = 0.05
PARITY_PROMPTS = 16
SIZES = (8, 48, 256)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BROKEN = settings(SETTINGS, phases=[Phase.generate], database=None, max_examples=200)


@dataclass(frozen=True)
class Engine:
    """A generated pair: ``off``'s profiles, the candidate's divergences, ``off``'s self-flips."""

    margins: list[DivergenceMargin]
    n_compared: int
    profiles: dict[tuple[str, str], OffProfile]
    off_self_flips: int
    off_compared: int


@dataclass(frozen=True)
class Params:
    seed: int
    near_tie_density: float  # near-tie positions per token of off's outputs
    flip_share: float  # share of opportunities the candidate flips at
    off_flip_rate: float  # off's self-flip rate (anything, 0 included)
    kind: str  # "correct", "confident" or "excess"


def params(kind: str) -> st.SearchStrategy[Params]:
    return st.builds(
        Params,
        seed=st.integers(0, 2**32 - 1),
        near_tie_density=st.floats(0.0, 0.05),
        flip_share=st.floats(0.0, 1.0),
        off_flip_rate=st.sampled_from([0.0, 0.0, 0.01, 0.1, 0.5]),
        kind=st.just(kind),
    )


def _flip(pid: str, source: str, at: int, margin: float) -> DivergenceMargin:
    kind = DivergenceKind.near_tie if margin <= TAU else DivergenceKind.decisive
    return DivergenceMargin(
        prompt_id=pid, source=source, candidate="mtp", token_index=at, off_token="a",
        candidate_token="b", margin_nats=margin, candidate_rank=2, top_k=5, kind=kind,
        tau_nats=TAU,
    )  # fmt: skip


def _output(rng: random.Random, p: Params) -> tuple[int, list[tuple[int, float]]]:
    """One off output: its length (tokens) and its margins ≤ 1 nat (near-ties ≤ τ)."""
    n = rng.randint(8, 256)
    ties = [(i, rng.uniform(0.0, TAU)) for i in range(n) if rng.random() < p.near_tie_density]
    confident = [(i, rng.uniform(TAU * 1.5, 1.0)) for i in range(n) if rng.random() < 0.05]
    merged = dict(confident) | dict(ties)
    return n, sorted(merged.items())


def engine(p: Params, n_requests: int) -> Engine:
    """The generated pair at ``n_requests`` measured requests (plus the parity set)."""
    rng = random.Random(p.seed)
    margins: list[DivergenceMargin] = []
    profiles: dict[tuple[str, str], OffProfile] = {}
    for j in range(PARITY_PROMPTS + n_requests):
        source, pid = ("parity", f"p{j}") if j < PARITY_PROMPTS else ("traffic", f"request-{j}")
        n, ms = _output(rng, p)
        profiles[(source, pid)] = OffProfile(n_tokens=n, margins=tuple(ms))
        ties = [(i, m) for i, m in ms if m <= TAU]
        if ties and rng.random() < p.flip_share:  # a correct engine: the first near-tie flips
            margins.append(_flip(pid, source, *ties[0]))
    if p.kind == "confident":  # one flip where off was confident (margin above τ)
        i = len(margins) % PARITY_PROMPTS
        margins = [m for m in margins if m.prompt_id != f"p{i}"]
        margins.append(_flip(f"p{i}", "parity", 3, rng.uniform(TAU * 1.5, 2.0)))
    elif p.kind == "excess":  # a near-tie margin (a batched read) where off's alone run had none
        margins = [m for m in margins if m.prompt_id != "p0"]
        profiles[("parity", "p0")] = OffProfile(n_tokens=64, margins=((5, 0.9),))
        margins.append(_flip("p0", "parity", 5, TAU / 2))
    n = PARITY_PROMPTS + n_requests
    off_flips = round(p.off_flip_rate * n)
    return Engine(margins, n, profiles, off_flips, n)


def judged(e: Engine) -> QualityParity:
    tau = TauEstimate(tau_nats=TAU, source=TauSource.plan)
    return within_noise_verdict(e.margins, e.n_compared, e.profiles, alpha=0.05, tau=tau).parity


def fisher_rate_rule(e: Engine) -> QualityParity:
    """The replaced rule: the candidate's divergence rate against off's self-divergence
    rate (one-sided Fisher at 0.05), after every divergence a near-tie."""
    if any(m.kind is not DivergenceKind.near_tie for m in e.margins):
        return QualityParity.differs
    table = [
        [len(e.margins), e.n_compared - len(e.margins)],
        [e.off_self_flips, e.off_compared - e.off_self_flips],
    ]
    _, pv = fisher_exact(table, alternative="greater")
    return QualityParity.differs if pv < 0.05 else QualityParity.verified


def right(p: Params, rule: object = judged) -> bool:
    """The property at every sample size: correct → verified; else → not verified."""
    fn = judged if rule is judged else fisher_rate_rule
    for n in SIZES:
        got = fn(engine(p, n))
        if (got is QualityParity.verified) != (p.kind == "correct"):
            return False
    return True


@SETTINGS
@given(params("correct"))
def test_a_correct_engine_is_verified_at_8_48_and_256_requests(p: Params) -> None:
    assert right(p)


@SETTINGS
@given(st.sampled_from(["confident", "excess"]).flatmap(params))
def test_flips_at_confident_positions_or_beyond_the_opportunities_never_verify(
    p: Params,
) -> None:
    assert right(p)


def test_the_property_fails_against_the_fisher_rate_rule() -> None:
    bad = find(params("correct"), lambda p: not right(p, fisher_rate_rule), settings=BROKEN)
    sizes = [n for n in SIZES if fisher_rate_rule(engine(bad, n)) is QualityParity.differs]
    assert sizes and all(judged(engine(bad, n)) is QualityParity.verified for n in SIZES)


def test_more_data_never_flips_a_correct_deterministic_pair() -> None:
    """The measured case: every near-tie flips (numerics mode), off never flips."""
    p = Params(seed=7, near_tie_density=0.01, flip_share=1.0, off_flip_rate=0.0, kind="correct")
    assert [judged(engine(p, n)) for n in SIZES] == [QualityParity.verified] * 3
    assert fisher_rate_rule(engine(p, 256)) is QualityParity.differs


# --- power ------------------------------------------------------------------------


def test_clopper_pearson_bound_for_zero_events() -> None:
    for n in (1, 16, 24, 256):
        assert lossy_rate_bound(n, 0, 0.05) == pytest.approx(1 - 0.05 ** (1 / n))
    assert lossy_rate_bound(10, 10, 0.05) == 1.0
    assert 0.1 < lossy_rate_bound(100, 5, 0.05) < 0.12  # 5 of 100: upper 95% bound ~0.10
    with pytest.raises(ValueError):
        lossy_rate_bound(3, 4, 0.05)
    assert comparisons_needed(DEFAULT_LOSSY_RATE, 0.05) == 23


def test_a_small_sample_is_unknown_and_says_how_many_more_would_decide() -> None:
    v = within_noise_verdict([], 16, {("parity", "p"): OffProfile(n_tokens=4)}, alpha=0.05)
    assert v.parity is QualityParity.unknown
    assert "7 more prompts/requests would decide" in v.reason
    assert v.power_bound == pytest.approx(1 - 0.05 ** (1 / 16))
    ok = within_noise_verdict([], 24, {("parity", "p"): OffProfile(n_tokens=4)}, alpha=0.05)
    assert ok.parity is QualityParity.verified and "bounds a lossy route" in ok.reason


def test_near_ties_without_profiles_never_verify() -> None:
    m = _flip("p1", "parity", 2, 0.01)
    v = within_noise_verdict([m], 64, {}, alpha=0.05)
    assert v.parity is QualityParity.unknown and "not profiled" in v.reason


def test_one_pass_scoring_explains_a_divergence_above_tau() -> None:
    """The verify shape shown directly: off's one-pass top-1 is the candidate's token."""
    from deepseekbench._types._noise import OnePassFlip

    m = _flip("p1", "parity", 2, 0.2)
    shown = OffProfile(n_tokens=9, margins=((2, 0.2),), one_pass=(OnePassFlip(index=2, token="b"),))
    tau = TauEstimate(tau_nats=TAU, source=TauSource.plan)
    profiles = {("parity", "p1"): shown}
    v = within_noise_verdict([m], 64, profiles, alpha=0.05, tau=tau)
    assert v.parity is QualityParity.verified and v.shown_one_pass == 1
    plain = {("parity", "p1"): OffProfile(n_tokens=9, margins=((2, 0.2),))}
    assert within_noise_verdict([m], 64, plain, alpha=0.05, tau=tau).parity is (
        QualityParity.differs
    )


# --- τ measured -------------------------------------------------------------------


def test_tau_sources_and_one_outlier_does_not_set_it() -> None:
    assert measure_tau([], 0.2).source is TauSource.plan
    few = [OffProfile(shifts_nats=(0.0, 0.01, 0.02))]
    t = measure_tau(few, None)
    assert (t.tau_nats, t.source) == (DEFAULT_TAU_NATS, TauSource.default)
    assert "fewer than" in t.note
    shifts = tuple([0.0] * 50 + [0.01 + 0.0001 * i for i in range(200)])
    t = measure_tau([OffProfile(shifts_nats=shifts)], None, concurrent_nats=[0.98])
    assert t.source is TauSource.measured_jitter and t.sample == 201
    assert 0.02 < t.tau_nats < 0.04  # the 0.98 nats flip under batching does not set it
    assert t.sample >= TAU_MIN_SAMPLE and t.quantile == TAU_QUANTILE


# --- attribution and reasoning ----------------------------------------------------


def test_a_flip_of_off_s_own_is_charged_to_off_never_to_the_route() -> None:
    from deepseekbench._analysis._noise_rows import _split_charged

    own = _flip("request-1", "traffic", 4, 0.01)
    offs = own.model_copy(update={"prompt_id": "request-2", "candidate": "off", "margin_nats": 0.9})
    kept, charged = _split_charged([own, offs], "off", "mtp")
    assert kept == [own] and charged == 1
    assert "off emitted" in offs.describe()
    assert _split_charged([offs], "off", "off") == ([offs], 0)  # off's own row keeps them


def test_parity_compares_reasoning_text_as_well_as_content() -> None:
    from deepseekbench._analysis._follow_ups import compared_text
    from deepseekbench._types._parity import ParityOutput

    a = ParityOutput(prompt_id="p", text="42", reasoning_text="so 6 x 7")
    b = ParityOutput(prompt_id="p", text="42", reasoning_text="so 7 x 6")
    assert compared_text(a) != compared_text(b)  # a divergence only inside the reasoning
    assert compared_text(a) == "so 6 x 742"


def test_an_engine_that_cannot_score_in_one_pass_keeps_the_default_and_says_why() -> None:
    why = "llama.cpp serves no prompt logprobs"
    t = measure_tau([OffProfile(n_tokens=5, one_pass_note=why)], None)
    assert t.source is TauSource.default and why in t.describe()
