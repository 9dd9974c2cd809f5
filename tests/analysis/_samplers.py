"""Pure simulated samplers for the distribution witness's property tests.

A synthetic target: per position, raw logits over a small vocabulary (normal, scale
``SCALE``), reported as the RAW top-``K`` logprobs (the tail is real). The engine
samples ``softmax(logits / T)``, then top-k, then top-p (vLLM's order and rule). A draft
model is the target's logits plus noise. Each sampler returns, per position, the law of
the token it emits: one step of speculative sampling (Leviathan et al. 2023, Chen et
al. 2023) with the draft drawn from ``r`` while the acceptance believes it was ``q``:
``P(x) = r(x)·a(x) + (1 - Σ_y r(y)·a(y))·norm(max(0, p - q))(x)`` with
``a(x) = min(1, p(x)/q(x))``; exact (``P = p``) when ``r = q`` and ``a`` is the standard rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from deepseekbench._types._margin import TopLogprob

VOCAB = 48
K = 20
SCALE = 3.0
DRAFT_NOISE = 1.0
RELAXED_TOP_N = 3
RELAXED_DELTA_NATS = 2.0
NEAR_CERTAIN_BOOST = 15.0
"""Raw logit added to the top token at a near-certain position (nats): its tempered
top-1 probability is then above 0.9999 at T <= 1, as at most positions of a real model."""


@dataclass(frozen=True)
class Pos:
    """A teacher-forced position (the witness's ``WitnessPosition`` shape)."""

    token: str
    token_bytes: bytes | None
    top: tuple[TopLogprob, ...]


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax."""
    m = x.max(axis=-1, keepdims=True)
    return np.asarray(x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def truncate(logits: np.ndarray, t: float, top_k: int | None, top_p: float) -> np.ndarray:
    """Rows of ``softmax(logits/t)`` cut by top-k then top-p (vLLM's rule), renormalised."""
    p = np.exp(log_softmax(logits / t))
    if top_k:
        kth = -np.sort(-logits, axis=-1)[:, top_k - 1 : top_k]
        p = np.where(logits >= kth, p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    if top_p < 1:
        order = np.argsort(-p, axis=-1)
        sp = np.take_along_axis(p, order, axis=-1)
        before = np.cumsum(sp, axis=-1) - sp
        keep_sorted = before < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    return np.asarray(p)


@dataclass(frozen=True)
class Target:
    """``n`` positions of the synthetic target and its draft model."""

    logits: np.ndarray
    draft_logits: np.ndarray
    t: float
    top_k: int | None
    top_p: float

    def p(self) -> np.ndarray:
        return truncate(self.logits, self.t, self.top_k, self.top_p)

    def q(self, t: float | None = None) -> np.ndarray:
        return truncate(self.draft_logits, t or self.t, self.top_k, self.top_p)


def make_target(
    seed: int,
    n: int,
    t: float,
    top_k: int | None = None,
    top_p: float = 1.0,
    *,
    certain: float = 0.0,
) -> Target:
    """A seeded synthetic target of ``n`` positions; a share ``certain`` of them (drawn
    at random) near-certain: the top token's logit raised by ``NEAR_CERTAIN_BOOST``
    (the draft, the target's logits plus noise, follows)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=SCALE, size=(n, VOCAB))
    boost = rng.random(n) < certain
    logits[np.arange(n), logits.argmax(axis=-1)] += np.where(boost, NEAR_CERTAIN_BOOST, 0.0)
    draft = logits + rng.normal(scale=DRAFT_NOISE, size=(n, VOCAB))
    return Target(logits, draft, t, top_k, top_p)


def make_flat_target(
    seed: int, n: int, t: float, *, vocab: int = 200, scale: float = 1.0
) -> Target:
    """A near-flat seeded target (a large vocabulary, small logit spread: ``off``'s
    top-``K`` leaves most of the mass, and the tail's tempered mass unknown, outside),
    as on a randomly initialised model; no near-certain positions."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=scale, size=(n, vocab))
    draft = logits + rng.normal(scale=DRAFT_NOISE * scale, size=(n, vocab))
    return Target(logits, draft, t, None, 1.0)


def _spec_law(p: np.ndarray, q: np.ndarray, r: np.ndarray, accept: np.ndarray) -> np.ndarray:
    """Output law of one speculative step (module docstring); ``accept`` is ``a(x)``."""
    taken = r * accept
    resid = np.maximum(p - q, 0.0)
    norm = resid.sum(axis=-1, keepdims=True)
    resid = np.where(norm > 0, resid / np.where(norm > 0, norm, 1.0), p)
    return np.asarray(taken + (1 - taken.sum(axis=-1, keepdims=True)) * resid)


def _ratio(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``min(1, p/q)``; where ``q`` is 0, 1 if ``p`` is positive else 0."""
    fallback = (p > 0).astype(float)
    return np.asarray(np.minimum(1.0, np.divide(p, q, out=fallback, where=q > 0)))


def correct(tg: Target) -> np.ndarray:
    """Correct speculative sampling: the draft drawn from ``q_T``, standard acceptance."""
    p, q = tg.p(), tg.q()
    return _spec_law(p, q, q, _ratio(p, q))


def argmax_at_t(tg: Target) -> np.ndarray:
    """Argmax acceptance at T > 0: the verifier emits the target's argmax every time."""
    p = tg.p()
    out = np.zeros_like(p)
    out[np.arange(len(p)), p.argmax(axis=-1)] = 1.0
    return out


def draft_ignores_temperature(tg: Target) -> np.ndarray:
    """The draft samples at temperature 1 while the acceptance uses ``q_T``."""
    p, q = tg.p(), tg.q()
    return _spec_law(p, q, tg.q(1.0), _ratio(p, q))


def relaxed(tg: Target) -> np.ndarray:
    """Relaxed acceptance: a draft token in the target's top-N and within δ nats of its
    top-1 is accepted outright; others by the standard rule."""
    p, q = tg.p(), tg.q()
    ranks = np.argsort(np.argsort(-p, axis=-1), axis=-1)
    with np.errstate(divide="ignore"):
        lp = np.log(p)
    near = (ranks < RELAXED_TOP_N) & (lp >= lp.max(axis=-1, keepdims=True) - RELAXED_DELTA_NATS)
    return _spec_law(p, q, q, np.asarray(np.where(near, 1.0, _ratio(p, q))))


SAMPLERS: dict[str, Callable[[Target], np.ndarray]] = {
    "argmax_at_t": argmax_at_t,
    "draft_ignores_temperature": draft_ignores_temperature,
    "relaxed": relaxed,
}


def draw(law: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token id per row of ``law`` (inverse CDF)."""
    u = rng.random((len(law), 1))
    return np.asarray(np.minimum((np.cumsum(law, axis=-1) < u).sum(axis=-1), law.shape[1] - 1))


def positions(tg: Target, tokens: np.ndarray) -> list[Pos]:
    """Teacher-forced positions: the RAW top-``K`` logprobs and the drawn token."""
    raw = log_softmax(tg.logits)
    order = np.argsort(-raw, axis=-1)[:, :K]
    out: list[Pos] = []
    for i, tok in enumerate(tokens):
        top = tuple(
            TopLogprob.model_construct(token=f"t{j}", logprob=float(raw[i, j]), token_bytes=None)
            for j in order[i]
        )
        out.append(Pos(token=f"t{int(tok)}", token_bytes=None, top=top))
    return out


def tv(a: np.ndarray, b: np.ndarray) -> float:
    """Mean total variation per position."""
    return float(0.5 * np.abs(a - b).sum(axis=-1).mean())


def pit_cdf_distance(law: np.ndarray, p: np.ndarray, grid: int = 2001) -> float:
    """``sup_u |G(u) - u|`` for the PITs of tokens drawn from ``law`` against ``p``
    (categories most likely first, as the witness orders them), averaged over positions."""
    order = np.argsort(-p, axis=-1)
    ps = np.take_along_axis(p, order, axis=-1)
    ls = np.take_along_axis(law, order, axis=-1)
    edges = np.concatenate([np.zeros((len(p), 1)), np.cumsum(ps, axis=-1)], axis=-1)
    gedges = np.concatenate([np.zeros((len(p), 1)), np.cumsum(ls, axis=-1)], axis=-1)
    u = np.linspace(0, 1, grid)
    g = np.mean([np.interp(u, edges[i], gedges[i]) for i in range(len(p))], axis=0)
    return float(np.abs(g - u).max())
