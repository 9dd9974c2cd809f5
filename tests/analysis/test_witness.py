"""The distribution witness: a correct sampler passes at the stated rate, the faults do not.

The samplers are the pure simulations of ``tests/analysis/_samplers.py`` (a synthetic
target with a real tail beyond the reported top-k; a share of near-certain positions, as
in a real model, which the witness's predictable selection leaves out). Each sampler
draws its tokens from a seed the witness never sees; the witness's PIT seed is separate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy import stats

from deepseekbench._analysis._witness import (
    DEFAULT_WITNESS_MAX_TOP1,
    SamplingSpec,
    WitnessResult,
    detectable_distance,
    detectable_rank_shift,
    detectable_score_shift,
    min_tokens_for,
    near_certain_reason,
    sampling_order_reason,
    witness,
)
from deepseekbench._plan._sections import ParityPlan
from deepseekbench._types._margin import TopLogprob
from tests.analysis import _samplers as sim

ALPHA = 0.05
DOC_TOKENS = 2000  # the documented sample: informative (selected) tokens
CERTAIN = 0.6  # share of near-certain positions (about the embedded model's at T = 0.7)
WITNESS_SEED = 1_000_003


def _run(
    sampler: Callable[[sim.Target], np.ndarray],
    seed: int,
    n: int,
    spec: SamplingSpec,
    *,
    witness_temperature: float | None = None,
    certain: float = CERTAIN,
    keep: Callable[[sim.Pos], bool] | None = None,
) -> WitnessResult:
    """The witness on ``n`` informative positions (``n / (1 - certain)`` in all);
    ``keep``: a selection applied instead of the witness's own (the broken-selection
    test)."""
    total = round(n / (1 - certain))
    tg = sim.make_target(seed, total, spec.temperature, spec.top_k, spec.top_p, certain=certain)
    tokens = sim.draw(sampler(tg), np.random.default_rng(seed))
    seen = spec
    if witness_temperature is not None:
        seen = spec.model_copy(update={"temperature": witness_temperature})
    positions = [p for p in sim.positions(tg, tokens) if keep is None or keep(p)]
    bound = 1.0 if keep is not None else DEFAULT_WITNESS_MAX_TOP1  # ``keep`` replaces it
    return witness(
        positions, seen, top_k=sim.K, alpha=ALPHA, seed=WITNESS_SEED + seed, max_top1=bound
    )


def _refusals(results: list[WitnessResult]) -> int:
    return sum(r.rejects for r in results)


specs = st.builds(
    SamplingSpec,
    temperature=st.sampled_from((0.4, 0.7, 1.0)),
    top_k=st.sampled_from((None, 5, 10, 30)),
    top_p=st.sampled_from((1.0, 0.95, 0.8)),
)


def _quiet(refused: int, seeds: int, rate: float = ALPHA) -> bool:
    """One-sided binomial test of "refusal rate <= rate"; 0.001 keeps the test quiet."""
    return bool(stats.binomtest(refused, seeds, rate, alternative="greater").pvalue > 1e-3)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(spec=specs, base=st.integers(0, 10_000), certain=st.sampled_from((0.0, 0.3, 0.6)))
def test_a_correct_sampler_is_refused_at_most_at_rate_alpha(
    spec: SamplingSpec, base: int, certain: float
) -> None:
    seeds = 40
    results = [_run(sim.correct, base + s, 300, spec, certain=certain) for s in range(seeds)]
    assert _quiet(_refusals(results), seeds), _refusals(results)
    assert all(r.tokens_tested > 0 for r in results)


def test_the_false_refusal_rate_pooled_over_many_seeds() -> None:
    spec = SamplingSpec(temperature=0.7, top_p=0.95)
    results = [_run(sim.correct, 5000 + s, 200, spec) for s in range(200)]
    refused = _refusals(results)
    upper = stats.binomtest(refused, 200).proportion_ci(0.99).high
    assert refused / 200 <= ALPHA + 0.03 and upper > 0, refused
    # each of the four tests alone at its Bonferroni share alpha/4
    for name in ("ks_p_value", "chi2_p_value", "score_p_value", "outside_p_value"):
        alone = sum(getattr(r, name) < ALPHA / 4 for r in results)
        assert _quiet(alone, 200, ALPHA / 4), (name, alone)
    assert sum(r.outside_checked for r in results) > 0  # the outside share was checked


def test_the_selection_leaves_out_near_certain_positions_only() -> None:
    spec = SamplingSpec(temperature=0.7)
    r = _run(sim.correct, 11, 400, spec)
    near = {e.reason: e.tokens for e in r.exclusions}[near_certain_reason(r.max_top1)]
    assert r.max_top1 == DEFAULT_WITNESS_MAX_TOP1 == ParityPlan().witness_max_top1
    assert 0.5 < near / (near + r.tokens_tested) < 0.7  # the simulated share, 0.6
    tg = sim.make_target(11, 1000, 0.7, certain=CERTAIN)
    tokens = sim.draw(sim.correct(tg), np.random.default_rng(11))
    every = witness(sim.positions(tg, tokens), spec, top_k=sim.K, alpha=ALPHA, seed=1, max_top1=1.0)
    assert every.max_top1 == 1.0 and every.tokens_tested > 900
    assert all(not e.reason.startswith("off near-certain") for e in every.exclusions)


def _sampled_token_not_likely(pos: sim.Pos) -> bool:
    """A broken selection: the bound read on the SAMPLED token's probability (raw, 0.5)
    instead of the top-1's, so it reads the draw and is not predictable."""
    got = next((a.logprob for a in pos.top if a.token == pos.token), -math.inf)
    return math.exp(got) <= 0.5


def test_a_selection_by_the_sampled_token_refuses_the_correct_sampler() -> None:
    spec = SamplingSpec(temperature=0.7)
    broken = [
        _run(sim.correct, 1300 + s, 300, spec, keep=_sampled_token_not_likely) for s in range(20)
    ]
    assert not _quiet(_refusals(broken), 20), _refusals(broken)


@pytest.mark.parametrize("fault", sorted(sim.SAMPLERS))
@pytest.mark.parametrize(
    "spec",
    [SamplingSpec(temperature=0.7), SamplingSpec(temperature=0.7, top_k=10, top_p=0.9)],
    ids=["tempered", "top-k-top-p"],
)
def test_each_fault_is_refused_with_power_at_the_documented_sample(
    fault: str, spec: SamplingSpec
) -> None:
    results = [_run(sim.SAMPLERS[fault], 700 + s, DOC_TOKENS, spec) for s in range(10)]
    assert _refusals(results) >= 9, [r.p_value for r in results]
    assert all(r.tokens_tested >= 0.75 * DOC_TOKENS for r in results)  # truncation cuts some


def test_a_witness_that_ignores_the_temperature_refuses_the_correct_sampler() -> None:
    spec = SamplingSpec(temperature=0.7)
    honest = [_run(sim.correct, 900 + s, 500, spec) for s in range(10)]
    blind = [_run(sim.correct, 900 + s, 500, spec, witness_temperature=1.0) for s in range(10)]
    assert _refusals(honest) <= 2
    assert _refusals(blind) == 10


def test_the_stated_distance_is_caught_and_shrinks_with_more_tokens() -> None:
    sizes = (100, 400, 1600, 6400)
    distances = [detectable_distance(n, ALPHA) for n in sizes]
    assert distances == sorted(distances, reverse=True)
    assert detectable_distance(0, ALPHA) == 1.0
    n = min_tokens_for(0.1, ALPHA)
    assert detectable_distance(n, ALPHA) <= 0.1 < detectable_distance(n - 1, ALPHA)
    shifts = [detectable_rank_shift(n, 5, ALPHA) for n in sizes]
    assert shifts == sorted(shifts, reverse=True)
    assert math.isinf(detectable_rank_shift(0, 5, ALPHA))
    scores = [detectable_score_shift(n, ALPHA) for n in sizes]
    assert scores == sorted(scores, reverse=True)
    assert math.isinf(detectable_score_shift(0, ALPHA))


def test_a_log_score_shift_of_the_stated_size_is_caught_with_the_stated_power() -> None:
    # alternative: per-token deviations N(s, 1) summed over n, s the stated shift
    n = 500
    shift = detectable_score_shift(n, ALPHA)
    rng = np.random.default_rng(8)
    z = [float(rng.normal(shift, 1.0, n).sum()) / math.sqrt(n) for _ in range(2000)]
    caught = np.mean(2 * stats.norm.sf(np.abs(z)) < ALPHA)
    assert 0.88 <= caught <= 0.93, caught


def test_a_pit_shift_of_the_stated_distance_is_caught_with_the_stated_power() -> None:
    # alternative: PITs with CDF G(u) = u^a, sup|G - u| = the stated distance at n tokens
    n = 500
    target = detectable_distance(n, ALPHA)
    a = 1.0
    while max(abs(u**a - u) for u in np.linspace(0, 1, 1001)) < target:
        a *= 1.02
    rng = np.random.default_rng(7)
    p_values = [stats.kstest(rng.random(n) ** (1 / a), "uniform").pvalue for _ in range(400)]
    assert np.mean(np.array(p_values) < ALPHA) >= 0.9


def _pos(token: str, logps: list[float]) -> sim.Pos:
    top = tuple(TopLogprob(token=f"t{i}", logprob=lp) for i, lp in enumerate(logps))
    return sim.Pos(token=token, token_bytes=None, top=top)


def test_exclusions_and_support() -> None:
    spec = SamplingSpec(temperature=0.7, top_k=2)
    inside = _pos("t1", [math.log(0.6), math.log(0.3), math.log(0.05)])
    cut = _pos("t2", [math.log(0.6), math.log(0.3), math.log(0.05)])
    r = witness([inside, cut], spec, top_k=3, alpha=ALPHA, seed=1)
    assert (r.tokens_tested, r.outside_support, r.rejects) == (1, 1, True)
    # above T = 1 without the vocabulary size the tail is unbounded: the token is still
    # tested inside the top-k set, and the outside share is not checked
    hot = witness([inside], SamplingSpec(temperature=1.5), top_k=3, alpha=ALPHA, seed=1)
    assert (hot.tokens_tested, hot.outside_checked) == (1, 0)
    nucleus = SamplingSpec(temperature=1.5, top_p=0.9)
    hot_p = witness([inside], nucleus, top_k=3, alpha=ALPHA, seed=1)
    assert hot_p.tokens_tested == 0 and "unknown tail" in hot_p.exclusions[0].reason
    short = witness([inside], spec, top_k=5, alpha=ALPHA, seed=1)
    assert short.tokens_tested == 0 and not short.rejects
    assert short.detectable_distance == 1.0


def test_a_complete_short_list_has_no_tail_and_the_end_is_conditioned_out() -> None:
    spec = SamplingSpec(temperature=0.7)
    full = _pos("t1", [math.log(0.5), math.log(0.3), math.log(0.2)])
    assert witness([full], spec, top_k=20, alpha=ALPHA, seed=1).tokens_tested == 1
    eos = (TopLogprob(token="", logprob=math.log(0.5)),)
    ended = sim.Pos(
        token="a", token_bytes=None, top=(*eos, TopLogprob(token="a", logprob=math.log(0.5)))
    )
    stopped = sim.Pos(token="", token_bytes=None, top=eos)
    r = witness([ended, stopped], spec, top_k=2, alpha=ALPHA, seed=1, max_top1=1.0)
    assert r.tokens_tested == 1 and r.exclusions[0].reason.startswith("the forced token is an end")
    # given "not the end", "a" is certain: the selection leaves the position out
    r = witness([ended], spec, top_k=2, alpha=ALPHA, seed=1)
    assert r.tokens_tested == 0 and r.exclusions[0].reason == near_certain_reason(0.999)


def test_the_same_inputs_give_the_same_result() -> None:
    spec = SamplingSpec(temperature=0.7)
    assert _run(sim.correct, 3, 200, spec) == _run(sim.correct, 3, 200, spec)


def test_bad_input_is_a_typed_error() -> None:
    with pytest.raises(ValidationError):
        SamplingSpec(temperature=0)
    with pytest.raises(ValidationError):
        SamplingSpec(temperature=0.7, top_p=0)
    with pytest.raises(ValueError, match="top_k"):
        witness([], SamplingSpec(temperature=0.7), top_k=0, alpha=ALPHA, seed=1)
    with pytest.raises(ValueError, match="alpha"):
        detectable_distance(10, 1.5)
    with pytest.raises(ValueError, match="max_top1"):
        witness([], SamplingSpec(temperature=0.7), top_k=5, alpha=ALPHA, seed=1, max_top1=0)


def test_the_engines_order_of_operations() -> None:
    assert sampling_order_reason("vllm", top_p=0.9, top_k=20) is None
    assert sampling_order_reason("sglang") is None
    assert sampling_order_reason("sglang", top_p=0.9) is not None
    assert sampling_order_reason("llamacpp") is not None
    assert sampling_order_reason("vllm", min_p=0.1) is not None
