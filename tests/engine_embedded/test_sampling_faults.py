"""The embedded engine's sampler: exact speculative sampling, and three lossy faults.

The check: the first token of one verify step, drawn ``N`` times with independent seeds,
against the processed target ``p`` (temperature, then top-k, then top-p) at that context,
by Pearson's chi-square (``scipy.stats.chisquare``; categories expected below 5 pooled
into one "other"). Leviathan et al. (2023), Theorem 1: speculative sampling emits tokens
distributed exactly as ``p``, so the correct sampler is never rejected at α = 1e-4 (each
example is seeded, so a run is reproducible); each fault is rejected at p < 1e-6, which
shows the same check does fail on a lossy sampler.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from deepseekbench import EmbeddedEngine, EngineConfig, Speculative, reference_tasks
from deepseekbench._engine._model import EOS_CH, Dist, context_of, reference_lm
from deepseekbench._engine._speculative import Decoder, SamplerFaults, process, ranked
from tests.engine_embedded.test_server import FREE

ALPHA = 1e-4
"""False-refusal rate of the exactness check per example."""


def first_tokens(
    ctx: str, faults: SamplerFaults, n: int, *, temperature: float = 0.7,
    method: Speculative = Speculative.mtp, k: int = 3, top_k: int = 0, top_p: float = 1.0,
    seed: int = 0,
) -> Counter[str]:  # fmt: skip
    """The first token of one verify step from ``ctx``, ``n`` independent draws."""
    out: Counter[str] = Counter()
    lm = reference_lm()
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        d = Decoder(
            lm, method, k, temperature=temperature, rng=rng, faults=faults, top_k=top_k,
            top_p=top_p,
        )  # fmt: skip
        out[d.step(ctx, k + 1).tokens[0]] += 1
    return out


def chi_square_p(counts: Counter[str], p: Dist) -> float:
    """Pearson's chi-square p-value of ``counts`` against ``p`` (pooling small cells)."""
    n = sum(counts.values())
    obs: list[float] = []
    exp: list[float] = []
    rest_obs, rest_exp = 0.0, 0.0
    for ch, q in ranked(p):
        if q * n >= 5:
            obs.append(counts.get(ch, 0))
            exp.append(q * n)
        else:
            rest_obs += counts.get(ch, 0)
            rest_exp += q * n
    rest_obs += sum(v for ch, v in counts.items() if ch not in p)
    if rest_obs or rest_exp:
        obs.append(rest_obs)
        exp.append(max(rest_exp, 1e-12))  # a token p never gives: a huge statistic
    if len(obs) < 2:
        return 1.0 if rest_obs == 0 else 0.0
    return float(stats.chisquare(obs, exp).pvalue)


def test_the_order_is_temperature_then_top_k_then_top_p() -> None:
    dist = {"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05}
    assert process(dist, 1.0, top_k=2) == pytest.approx({"a": 0.625, "b": 0.375})
    assert process(dist, 1.0, top_p=0.5) == {"a": 1.0}
    # tempering first flattens dist, so the same top-p keeps three tokens, not two
    hot = process(dist, 2.0, top_p=0.8)
    assert set(hot) == {"a", "b", "c"} and set(process(dist, 1.0, top_p=0.8)) == {"a", "b"}
    assert set(process(dist, 2.0, top_k=3, top_p=0.99)) == {"a", "b", "c"}
    assert sum(process(dist, 0.5).values()) == pytest.approx(1.0)


_CONTEXTS = [
    context_of(t.prompt) + t.answer[:cut] for t in reference_tasks(12, seed=4) for cut in (0, 3)
]


@settings(max_examples=6)
@given(
    ctx=st.sampled_from(_CONTEXTS),
    temperature=st.sampled_from([0.5, 0.7, 1.0, 1.5]),
    method=st.sampled_from([Speculative.mtp, Speculative.eagle3, Speculative.draft]),
    k=st.integers(1, 4),
    cut=st.sampled_from([(0, 1.0), (3, 1.0), (0, 0.9)]),
    seed=st.integers(0, 10_000),
)
def test_correct_speculative_sampling_draws_exactly_from_the_processed_target(
    ctx: str, temperature: float, method: Speculative, k: int, cut: tuple[int, float], seed: int
) -> None:
    top_k, top_p = cut
    counts = first_tokens(
        ctx, SamplerFaults(), 1200, temperature=temperature, method=method, k=k,
        top_k=top_k, top_p=top_p, seed=seed,
    )  # fmt: skip
    p = process(reference_lm().target(ctx), temperature, top_k, top_p)
    assert chi_square_p(counts, p) >= ALPHA, (counts, p)


@pytest.mark.parametrize(
    ("faults", "prompt"),
    [
        (SamplerFaults(relaxed_topk=3, relaxed_delta=1.0), "Count from 28 to 42."),
        (SamplerFaults(argmax_acceptance=True), "Count from 28 to 42."),
        (SamplerFaults(draft_ignores_temperature=True), "Reverse the word minuzu."),
    ],
    ids=["relaxed", "argmax", "draft-ignores-temperature"],
)
def test_each_lossy_sampler_is_rejected_by_the_same_check(
    faults: SamplerFaults, prompt: str
) -> None:
    ctx = context_of(prompt)
    p = process(reference_lm().target(ctx), 0.7)
    assert chi_square_p(first_tokens(ctx, SamplerFaults(), 2000), p) >= ALPHA
    assert chi_square_p(first_tokens(ctx, faults, 2000), p) < 1e-6


def _greedy(prompt: str, faults: SamplerFaults, n: int = 60) -> str:
    lm = reference_lm()
    d = Decoder(lm, Speculative.mtp, 3, temperature=0, rng=random.Random(0), faults=faults)
    ctx, out = context_of(prompt), ""
    while len(out) < n:
        for t in d.step(ctx + out, n - len(out)).tokens:
            if t == EOS_CH:
                return out
            out += t
    return out


def test_relaxed_acceptance_changes_greedy_answers_only_within_its_top_k_and_delta() -> None:
    lm = reference_lm()
    relaxed = SamplerFaults(relaxed_topk=3, relaxed_delta=1.0)
    changed = 0
    for t in reference_tasks(40, seed=2):
        exact, loose = _greedy(t.prompt, SamplerFaults()), _greedy(t.prompt, relaxed)
        assert exact == t.answer
        if loose == exact:
            continue
        changed += 1
        pairs = zip(exact + EOS_CH, loose + EOS_CH, strict=False)
        i = next(i for i, (a, b) in enumerate(pairs) if a != b)
        dist = lm.target(context_of(t.prompt) + exact[:i])
        top = ranked(dist)[:3]
        token = loose[i] if i < len(loose) else EOS_CH
        assert token in dict(top) and math.log(top[0][1] / dist[token]) <= 1.0
    assert changed >= 4  # measured: 21 of 100 reference tasks at these settings
    assert all(
        _greedy(t.prompt, SamplerFaults(relaxed_topk=3, relaxed_delta=0.0)) == t.answer
        for t in reference_tasks(10, seed=2)
    )  # delta 0 accepts only the top-1: lossless


def test_the_engine_config_carries_the_faults() -> None:
    c = EngineConfig(relaxed_acceptance=True, relaxed_topk=5, argmax_acceptance=True)
    f = c.sampler_faults
    assert (f.relaxed_topk, f.relaxed_delta, f.argmax_acceptance) == (5, 1.0, True)
    assert EngineConfig(relaxed_topk=5).sampler_faults.relaxed_topk == 0  # off unless switched
    assert EngineConfig(draft_ignores_temperature=True).sampler_faults.draft_ignores_temperature


@pytest.mark.anyio
async def test_a_relaxed_engine_serves_other_greedy_answers_over_http() -> None:
    import httpx

    prompts = [t.prompt for t in reference_tasks(30, seed=2)]
    texts: dict[bool, list[str]] = {}
    for relaxed in (False, True):
        config = EngineConfig(
            cost=FREE, speculative=Speculative.mtp, draft_depth=3, relaxed_acceptance=relaxed
        )
        async with EmbeddedEngine(config) as engine, httpx.AsyncClient(timeout=30) as client:
            texts[relaxed] = []
            for prompt in prompts:
                r = await client.post(
                    f"{engine.base_url}/chat/completions",
                    json={"messages": [{"role": "user", "content": prompt}], "temperature": 0},
                )
                texts[relaxed].append(r.json()["choices"][0]["message"]["content"])
    assert texts[False] == [t.answer for t in reference_tasks(30, seed=2)]
    assert texts[True] != texts[False]
