"""The witness on a near-flat target: conditional on ``off``'s top-k set.

On a near-flat model (a large vocabulary, a small logit spread, as on a randomly
initialised model) ``off``'s top-20 leaves most of the mass outside, and above
temperature 0 the tail's tempered mass is unknown: an unconditional PIT would have to
leave every position out. The witness conditions on the event "the sampled token is in
``off``'s top-k set" and tests the PIT of its rank within the renormalised top-k law
(valid whatever the tail holds); the share outside is checked only where its mass is
known (nowhere here). The property tests: a correct sampler accepted at the stated rate
over seeds, each fault refused with power >= 0.9 at the documented sample, and a
witness that ignores the temperature refuses the correct sampler.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from deepseekbench._analysis._witness import SamplingSpec, WitnessResult, witness
from tests.analysis import _samplers as sim

ALPHA = 0.05
FLAT_POSITIONS = 3000
"""The documented near-flat sample: positions scored (about 1400 fall inside the top-20
set at T = 0.7, the tokens the conditional tests see)."""
SPEC = SamplingSpec(temperature=0.7)


def _run(
    sampler: Callable[[sim.Target], np.ndarray], seed: int, n: int, seen: float = 0.7
) -> WitnessResult:
    tg = sim.make_flat_target(seed, n, SPEC.temperature)
    tokens = sim.draw(sampler(tg), np.random.default_rng(seed))
    spec = SPEC.model_copy(update={"temperature": seen})
    return witness(sim.positions(tg, tokens), spec, top_k=sim.K, alpha=ALPHA, seed=77 + seed)


def test_every_position_is_tested_inside_the_set_and_none_outside() -> None:
    r = _run(sim.correct, 1, 1000)
    assert r.tokens_excluded == 0 and r.outside_checked == 0  # the tail mass is unknown
    assert r.tokens_tested + r.outside_topk == 1000
    assert 0.3 < r.tokens_tested / 1000 < 0.6  # the top-20's share of a flat law


def test_a_correct_sampler_is_refused_at_most_at_rate_alpha() -> None:
    seeds = 30
    refused = sum(_run(sim.correct, 4000 + s, 1000).rejects for s in range(seeds))
    assert stats.binomtest(refused, seeds, ALPHA, alternative="greater").pvalue > 1e-3, refused


@pytest.mark.parametrize("fault", sorted(sim.SAMPLERS))
def test_each_fault_is_refused_with_power_at_the_documented_sample(fault: str) -> None:
    results = [_run(sim.SAMPLERS[fault], 800 + s, FLAT_POSITIONS) for s in range(10)]
    assert sum(r.rejects for r in results) >= 9, [r.p_value for r in results]


def test_a_witness_that_ignores_the_temperature_refuses_the_correct_sampler() -> None:
    blind = [_run(sim.correct, 900 + s, 2000, seen=1.0) for s in range(5)]
    assert all(r.rejects for r in blind), [r.p_value for r in blind]
