"""The distribution witness: are a route's sampled tokens draws from ``off``'s distribution?

At temperature > 0 two correct samplers give different texts, so parity cannot compare
outputs; it can compare *laws*. For every token a route sampled, ``off`` scores the
route's own prefix in one pass (teacher forcing, ``_types/_scored.py``) and reports its
RAW top-k log-probabilities (nats, before temperature) at that position (on the token
ids the route sampled where its engine returned them: ``_execute/_teacher_force_ids.py``).
The witness rebuilds the distribution the engine samples from (temperature, then top-k,
then top-p: the order vLLM's sampler and the embedded engine apply;
:func:`sampling_order_reason` says where an engine's order is unknown).

**Conditional on the top-k set.** The tempered mass beyond the top-k is unknown (below),
and on a near-flat model it is most of the mass at every position. So the witness
conditions on the event "the sampled token is in ``off``'s top-k set ``S``": given the
prefix and the event, a correct sampler's token is a draw from the truncated tempered
law restricted to ``S`` and renormalised (``q``), which the top-k determines exactly.
A token inside gets the **randomised PIT** of its rank under ``q`` (probability
integral transform for a discrete distribution, Czado, Gneiting & Held 2009, Biometrics
65(4)): with the categories ordered most likely first, ``Q(c-) + V·q(c)`` with ``V ~
U(0,1)`` from a seeded RNG. Each is U(0,1) given the past and the event, so the inside
PITs are iid U(0,1) (Rosenblatt 1952, Ann. Math. Stat. 23(3), applied to the
conditional laws), tested for uniformity with the one-sample Kolmogorov-Smirnov test
(``scipy.stats``: ``kstest`` for the statistic, ``kstwo``, the exact two-sided null
law after Simard & L'Ecuyer 2011, J. Stat. Softw. 39(11), for the p-value). The share
that fell outside ``S`` is its own check (:func:`_outside`), only over the positions
whose outside probability is known within ``tail_tolerance``.

**Selection (informative tokens).** Where ``off`` is near-certain the PIT is uniform
whatever the sampler (a position with one likely token cannot show a distortion), and
such positions dilute the KS test. So positions are selected by a *predictable* rule: a
position is tested only when its tempered, truncated top-1 probability within the top-k
set (the conditional law the PIT uses, a function of ``off``'s distribution at the
position, which the prefix determines) is at most ``max_top1``
(:data:`DEFAULT_WITNESS_MAX_TOP1`). The rule never reads the sampled token or the PIT's
uniform, so under a correct sampler the selected PITs are still iid U(0,1): a sequence
of iid variables sampled at indices chosen by a rule that sees only the past is again
iid with the same law (the optional-skipping theorem: Doob 1953, *Stochastic Processes*,
Thm III.5.2; Halmos 1939, Ann. Math. Stat. 10(4)), applied to the Rosenblatt transform's
iid PITs. A rule that reads the sampled token (say, "keep the positions where it is not
the top-1") is not predictable and breaks this. ``tokens_tested`` counts the selected
tokens only; the others are excluded with that reason, and the power statement is about
the selected.

**Four tests, each at α/4 (Bonferroni).** On the inside tokens: the KS test on the
selected PITs (any shift of the PIT law); the rank-bin Wald chi-square
(:func:`_rank_chi2`); and the log-score z test (``_witness_temperature.log_score_test``):
the sampled tokens' summed raw log-probability against its conditional null mean and exact null
variance, the score test for a change of temperature (a draft that ignores the
temperature leaves the output too hot, argmax acceptance too cold). On every kept
token: the outside-share check. The two weighted tests do not dilute where ``off`` is
near-certain (those positions add ~0 to their deviation and variance), so the
selection mainly serves the KS test.

**The unknown tail.** Above temperature 0 the tempered mass of the tokens outside the
top-k is not determined by the raw top-k: with raw tail mass ``R = 1 - Σ exp(l_i)`` and
every tail token at most as likely as the k-th (raw probability ``q_k``), its tempered
weight (``x^(1/T)`` summed, in the scale of the top-k weights) lies in
``[0, R·q_k^(1/T-1)]`` for ``T <= 1`` (``x^(1/T) <= x·q_k^(1/T-1)``; spreading the tail
over many tokens drives it to 0). For ``T > 1`` the lower end is ``R·q_k^(1/T-1)`` and
the upper end needs the vocabulary size ``V``: ``(V-k)^(1-1/T)·R^(1/T)`` (Jensen);
without ``V`` it is unbounded. The conditional tests never need it; it bounds the
outside probability (a position enters the outside check only when that interval is
narrower than ``tail_tolerance``), and a position is excluded (never guessed) when a
top-k or top-p boundary falls within ``slack`` of a tie or depends on the unknown
tail. Exclusion depends only on ``off``'s distribution at the position, never on the
sampled token.

**Power** (:func:`detectable_distance`): the smallest PIT-CDF distance
``Δ = sup_u |G(u) - u|`` (``G`` the inside PITs' law under the alternative, taken iid)
that the test rejects with probability >= ``power`` at level α with ``n`` inside
tokens: ``Δ = c_α(n) + ε``, with ``c_α(n)`` the KS critical value (``kstwo.isf``) and
``ε = sqrt(ln(2/(1-power))/(2n))`` the Dvoretzky-Kiefer-Wolfowitz band (Massart 1990,
Ann. Probab. 18(3)): with probability >= ``power`` the empirical CDF lies within ``ε``
of ``G``, so the statistic exceeds ``Δ - ε >= c_α``. A distortion that moves mass
towards more likely tokens within the set (argmax acceptance, a draft that ignores
the temperature, relaxed acceptance) has ``Δ`` equal to its total variation per token
of the conditional law, so ``Δ`` is also the smallest such distortion caught.

**The end of the output.** The scored text ends before the end-of-sequence token that
stopped it, and no position of it holds one: every scored position is one where the
sampler did *not* stop. So each position is tested against the law given "not the
end": the end-of-sequence tokens (:data:`STOP_PIECES`, as engines decode them) are taken
out of the categories after temperature and truncation, and the rest renormalised (the
token given "not EOS" is a draw from that law under a correct sampler); a sampled
end-of-sequence token (scored on the ids) is excluded with that reason. An EOS outside
the top-k stays in the tail (one more reason for a large k).
Outputs cut by ``max_tokens`` need nothing: a stop by count selects no token.

A token outside the truncated support (top-k or top-p cut it, with no doubt left by
``slack``) cannot come from a correct sampler; it is counted in ``outside_support``
and the witness rejects.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from scipy import optimize, stats
else:  # scipy (about 1 CPU-s to import) loads at the first witness test, not with the rows

    class _OnFirstUse:
        def __init__(self, name: str) -> None:
            self._name = name

        def __getattr__(self, attr: str) -> Any:
            return getattr(importlib.import_module(self._name), attr)

    optimize, stats = _OnFirstUse("scipy.optimize"), _OnFirstUse("scipy.stats")

from deepseekbench._analysis._witness_temperature import (
    EffectiveTemperature,
    fit_effective_temperature,
    log_score_test,
)
from deepseekbench._types._margin import TopLogprob

__all__ = [
    "DEFAULT_WITNESS_MAX_TOP1",
    "DEFAULT_WITNESS_POWER",
    "RANK_BINS",
    "STOP_PIECES",
    "TESTS",
    "SamplingSpec",
    "WitnessExclusion",
    "WitnessPosition",
    "WitnessResult",
    "detectable_distance",
    "detectable_rank_shift",
    "detectable_score_shift",
    "min_tokens_for",
    "near_certain_reason",
    "sampling_order_reason",
    "score_positions",
    "witness",
    "witness_groups",
]

DEFAULT_WITNESS_POWER = 0.9
"""Power at which a witness states the distortion it could have detected."""

DEFAULT_WITNESS_MAX_TOP1 = 0.999
"""The selection rule's default bound: a position whose tempered top-1 probability
exceeds it is left out (its PIT is uniform whatever the sampler; module docstring)."""

MIN_BIN_EXPECTED = 5.0
"""Fewest tokens a rank-bin group of the chi-square must expect (tokens): rarer bins are
merged with their neighbours first (Cochran's rule)."""

TESTS = 4
"""Tests the witness combines by Bonferroni (KS, rank-bin chi-square, log-score on the
tokens inside ``off``'s top-k set; the outside-share check), each at ``alpha / TESTS``."""

RANK_BINS = (1, 2, 3, 4, 7)
"""First 1-based rank of each rank bin of the chi-square within the top-k set: ranks 1,
2, 3, 4-6, 7-k (bins past ``k`` dropped)."""

STOP_PIECES: frozenset[bytes] = frozenset(
    piece.encode()
    for piece in (
        "",  # the embedded engine's end-of-sequence (and any token that spells nothing)
        "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek V3/R1/V4
        "</s>",
        "<|endoftext|>",
        "<|im_end|>",
        "<|eot_id|>",
        "<|end_of_text|>",
    )
)
"""End-of-sequence tokens as engines decode them: the scored text never holds them."""

_CONFIG = ConfigDict(frozen=True, extra="forbid")
_RAW_SUM_SLACK = 1e-3  # top-k raw masses may sum past 1 by float rounding only


class WitnessPosition(Protocol):
    """One teacher-forced position as the witness reads it (``ScoredPosition`` fits).

    ``token``/``token_bytes``: the sampled (forced) token; ``top``: ``off``'s RAW top-k
    alternatives at the position (logprobs in nats, before temperature).
    """

    @property
    def token(self) -> str: ...

    @property
    def token_bytes(self) -> bytes | None: ...

    @property
    def top(self) -> Sequence[TopLogprob]: ...


class SamplingSpec(BaseModel):
    """The sampling parameters as the engine applies them: temperature, then top-k, then top-p.

    Attributes:
        temperature: > 0 (0 is greedy: parity there is exact acceptance, not this witness).
        top_p: nucleus mass in (0, 1]; 1 disables it. vLLM's rule: a token is kept when
            the tempered mass of the tokens ranked above it is below ``top_p``.
        top_k: engine-side top-k truncation (tokens); ``None`` or 0 disables it.
        vocab_size: tokens in the vocabulary; needed only above temperature 1 (bounds
            the tail's tempered mass).

    Raises:
        pydantic.ValidationError: a value out of range.
    """

    model_config = _CONFIG

    temperature: float = Field(gt=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    vocab_size: int | None = Field(default=None, ge=1)


class WitnessExclusion(BaseModel):
    """Positions left out of the test, by reason (tokens)."""

    model_config = _CONFIG

    reason: str
    tokens: int = Field(ge=1)


class WitnessResult(BaseModel):
    """The witness's verdict material for one route's tokens (frozen).

    Attributes:
        test: the tests' names: on the tokens inside ``off``'s top-k set, the KS test
            on their conditional randomised PITs, the rank-bin Wald chi-square and the
            log-score z test; on every kept token, the outside-share check; each at
            ``alpha/4`` (Bonferroni).
        statistic: the KS statistic ``D``.
        ks_p_value / chi2_p_value / score_p_value: each test's p-value;
            chi2_statistic, chi2_df: the chi-square's statistic and degrees of freedom;
            score_statistic: the log-score ``z`` (negative: the tokens are less likely
            than ``off``'s law expects, a sampler too hot).
        outside_topk: kept tokens that fell outside ``off``'s top-k set (tokens);
            outside_checked: the kept positions whose outside probability is known
            within the tail tolerance, where the share is checked; of those,
            outside_checked_count fell outside against outside_expected expected
            (tokens); outside_p_value: that check's p-value.
        p_value: the combined (Bonferroni) p-value ``min(1, 4·min(p_ks, p_chi2,
            p_score, p_outside))``; 1.0 when nothing was tested.
        alpha: the level the verdict uses.
        tokens_tested: the selected (informative) tokens inside ``off``'s top-k set,
            which the three conditional tests saw (tokens); tokens_excluded: the
            positions left out, ``exclusions`` says why (the near-certain positions the
            selection rule leaves out among them).
        outside_support: tokens the truncated target gives probability 0.
        max_top1: the selection rule's bound on the tempered top-1 probability.
        detectable_distance: the PIT-CDF distance over the tested tokens (= total
            variation per tested token for mass moved towards likelier tokens) the KS
            test catches with probability ``power``.
        detectable_rank_shift: the per-token rank-bin shift (Mahalanobis) caught with
            probability ``power`` (``inf`` when nothing was tested).
        detectable_score_shift: the per-token log-score shift (in null standard
            deviations) caught with probability ``power`` (``inf`` when nothing was
            tested).
        power: the power those figures are stated at.
        effective_temperature: the temperature the tested tokens fit best, a diagnosis
            that never changes the verdict (``_witness_temperature``); ``None`` when
            no tested position carries information.
    """

    model_config = _CONFIG

    test: str = (
        "ks_conditional_pit+rank_bin_chi2+log_score_z on the top-k set, outside_share (Bonferroni)"
    )
    statistic: float = Field(ge=0)
    ks_p_value: float = Field(ge=0, le=1)
    chi2_statistic: float = Field(ge=0)
    chi2_df: int = Field(ge=0)
    chi2_p_value: float = Field(ge=0, le=1)
    score_statistic: float = 0.0
    score_p_value: float = Field(default=1.0, ge=0, le=1)
    outside_topk: int = Field(default=0, ge=0)
    outside_checked: int = Field(default=0, ge=0)
    outside_checked_count: int = Field(default=0, ge=0)
    outside_expected: float = Field(default=0.0, ge=0)
    outside_p_value: float = Field(default=1.0, ge=0, le=1)
    p_value: float = Field(ge=0, le=1)
    alpha: float = Field(gt=0, lt=1)
    tokens_tested: int = Field(ge=0)
    tokens_excluded: int = Field(ge=0)
    exclusions: tuple[WitnessExclusion, ...] = ()
    outside_support: int = Field(default=0, ge=0)
    max_top1: float = Field(default=1.0, gt=0, le=1)
    detectable_distance: float = Field(ge=0, le=1)
    detectable_rank_shift: float = Field(ge=0)
    detectable_score_shift: float = Field(default=math.inf, ge=0)
    power: float = Field(default=DEFAULT_WITNESS_POWER, gt=0, lt=1)
    effective_temperature: EffectiveTemperature | None = None

    @property
    def rejects(self) -> bool:
        """True when the tokens are shown not to be draws from the target (p < α, or a
        token outside the truncated support)."""
        return self.outside_support > 0 or (self.tokens_tested > 0 and self.p_value < self.alpha)


def sampling_order_reason(
    engine: str, *, top_p: float = 1.0, top_k: int | None = None, min_p: float = 0.0
) -> str | None:
    """``None`` when the witness knows how ``engine`` applies these parameters, else why not.

    Temperature alone needs no order. With truncation: the embedded engine serves no
    top-k/top-p (it samples the tempered distribution: ``_engine/_speculative.py``); vLLM
    applies temperature, then top-k, then top-p (``vllm/v1/sample/sampler.py`` and
    ``ops/topk_topp_sampler.py``). SGLang, TensorRT-LLM and llama.cpp are not claimed
    (llama.cpp's default sampler chain truncates with top_k 40, top_p 0.95 and min_p
    0.05 before the temperature unless the request overrides them, so even a plain
    temperature request is truncated there). ``min_p`` is never modelled.
    """
    name = engine.lower()
    if name in ("llamacpp", "llama.cpp", "llama_cpp"):
        return (
            "llama.cpp's server applies its default top-k/top-p/min-p chain before the "
            "temperature; the witness does not model that order"
        )
    if min_p > 0:
        return "min-p truncation is not modelled by the witness"
    truncated = top_p < 1 or bool(top_k)
    if not truncated or name in ("vllm", "embedded"):
        return None
    return f"{engine} applies top-k/top-p in an order the witness does not know"


def _tail_bounds(
    logps: np.ndarray, spec: SamplingSpec, *, complete: bool
) -> tuple[float, float] | str:
    """The tail's tempered weight interval in units of ``exp(l_1/T)`` (see the module
    docstring). ``complete``: the engine listed fewer than k alternatives, so it listed
    every token of positive probability (the tail is empty once the masses sum to 1)."""
    raw_sum = float(np.exp(logps).sum())
    if raw_sum > 1 + _RAW_SUM_SLACK:
        return "top-k masses sum above 1 (not raw logprobs)"
    rest = max(0.0, 1.0 - raw_sum)
    if complete:
        if rest > _RAW_SUM_SLACK:
            return "fewer than top_k alternatives, and mass missing"
        return (0.0, 0.0)
    if rest == 0.0:
        return (0.0, 0.0)
    inv_t = 1.0 / spec.temperature
    packed = rest * math.exp((inv_t - 1) * float(logps[-1]) - inv_t * float(logps[0]))
    if spec.temperature == 1:
        return (rest / math.exp(float(logps[0])), rest / math.exp(float(logps[0])))
    if spec.temperature < 1:
        return (0.0, packed)
    if spec.vocab_size is None:
        return "temperature above 1 needs the vocabulary size to bound the tail"
    spread_tokens = max(1, spec.vocab_size - len(logps))
    spread = spread_tokens ** (1 - inv_t) * rest**inv_t * math.exp(-inv_t * float(logps[0]))
    return (packed, max(packed, spread))


def _apply_top_k(
    w: np.ndarray, tail: tuple[float, float], logps: np.ndarray, k: int | None, slack: float
) -> tuple[np.ndarray, tuple[float, float]] | str:
    """Engine top-k: cut the weights below the k-th; the tail stays only when k exceeds
    the reported top-k (then at most ``k - K`` tail tokens, each no heavier than the K-th)."""
    if not k:
        return w, tail
    n = len(w)
    if k < n:
        if logps[k - 1] - logps[k] <= slack:
            return "engine top-k boundary within slack of a tie"
        out = w.copy()
        out[k:] = 0.0
        return out, (0.0, 0.0)
    if k == n:
        return w, (0.0, 0.0)
    return w, (0.0, min(tail[1], (k - n) * float(w[-1])))


def _apply_top_p(
    w: np.ndarray, tail: tuple[float, float], p: float, slack: float
) -> tuple[np.ndarray, tuple[float, float]] | str:
    """vLLM's top-p at both ends of the tail interval; excluded when they disagree or
    a boundary is within ``slack`` (the kept set must not depend on what is unknown)."""
    if p >= 1:
        return w, tail
    kept: list[np.ndarray] = []
    reach: list[bool] = []
    for t in tail:
        total = float(w.sum()) + t
        before = (np.cumsum(w) - w) / total
        if np.any(np.abs(before[w > 0] - p) <= slack):
            return "top-p boundary within slack"
        kept.append(before < p)
        head = float(w.sum()) / total
        if abs(head - p) <= slack:
            return "top-p boundary within slack"
        reach.append(head < p)
    if not np.array_equal(kept[0], kept[1]) or reach[0] != reach[1]:
        return "top-p boundary depends on the unknown tail mass"
    out = np.where(kept[0], w, 0.0)
    return out, ((0.0, tail[1]) if reach[0] else (0.0, 0.0))


def _piece(pos: WitnessPosition) -> bytes:
    """The forced token's UTF-8 bytes."""
    return pos.token_bytes if pos.token_bytes is not None else pos.token.encode()


def _ranked(pos: WitnessPosition, k: int) -> tuple[list[TopLogprob], list[int] | None]:
    """The top-``k`` alternatives most likely first, with their ids when the position
    carries them (``top_ids``, aligned with ``top``), else ``None``."""
    ids = getattr(pos, "top_ids", None)
    alts = list(pos.top)
    if ids is not None and len(ids) == len(alts) and getattr(pos, "token_id", None) is not None:
        pairs = sorted(zip(alts, ids, strict=True), key=lambda t: -t[0].logprob)[:k]
        return [a for a, _ in pairs], [int(i) for _, i in pairs]
    return sorted(alts, key=lambda a: -a.logprob)[:k], None


def _category(pos: WitnessPosition, top: Sequence[TopLogprob], ids: list[int] | None) -> int:
    """Index of the sampled token among ``top`` (by id when known, else by UTF-8
    bytes), ``len(top)`` when it is outside off's top-k set."""
    if ids is not None:
        tid = getattr(pos, "token_id", None)
        return ids.index(tid) if tid in ids else len(top)
    piece = _piece(pos)
    for i, alt in enumerate(top):
        if alt.piece == piece:
            return i
    return len(top)


class _Scored(NamedTuple):
    """One kept position. ``inside``: the sampled token is in ``off``'s top-k set; then
    its conditional PIT, the conditional rank-bin law, the token's bin and the log-score
    (the token's score, its conditional null mean and variance, nats); else those are
    unused. ``out_p``/``out_half``: the probability of falling outside the set
    (midpoint and half-width), ``None`` where the tail leaves it unknown."""

    inside: bool
    pit: float
    bins: np.ndarray
    token_bin: int
    score: float
    score_mean: float
    score_var: float
    out_p: float | None
    out_half: float
    gaps: np.ndarray = np.zeros(0)  # tempered log-weights vs the top-1 (-inf: removed)
    cat: int = -1


def _rank_bins(law: np.ndarray, k: int) -> np.ndarray:
    """``law`` (the top-k categories) summed over :data:`RANK_BINS` ranks."""
    starts = [s - 1 for s in RANK_BINS if s <= k]
    ends = [*starts[1:], k]
    return np.array([float(law[a:b].sum()) for a, b in zip(starts, ends, strict=True)])


def _token_bin(cat: int) -> int:
    """The rank bin of category ``cat`` (0-based rank within the top-k)."""
    return sum(1 for s in RANK_BINS if s - 1 <= cat) - 1


def near_certain_reason(max_top1: float) -> str:
    """The exclusion reason of a position the selection rule leaves out (``max_top1``:
    the bound on the tempered top-1 probability)."""
    return f"off near-certain (tempered top-1 probability above {max_top1:g})"


def _truncated(
    logps: np.ndarray, spec: SamplingSpec, complete: bool, slack: float
) -> tuple[np.ndarray, tuple[float, float]] | str:
    """The top-k set's tempered, truncated weights (units of ``exp(l_1/T)``) and the
    tail's weight interval after truncation, or why the truncation is not known."""
    bounds = _tail_bounds(logps, spec, complete=complete)
    if isinstance(bounds, str):
        if spec.temperature <= 1 or spec.vocab_size is not None:
            return bounds
        bounds = (0.0, math.inf)  # T > 1, no vocabulary size: the tail is unbounded
    w = np.exp((logps - logps[0]) / spec.temperature)
    cut = _apply_top_k(w, bounds, logps, spec.top_k, slack)
    if isinstance(cut, str):
        return cut
    if spec.top_p < 1 and math.isinf(cut[1][1]):
        return "top-p boundary depends on the unknown tail mass"
    return _apply_top_p(*cut, spec.top_p, slack)


def _one_position(
    pos: WitnessPosition,
    spec: SamplingSpec,
    k: int,
    v: float,
    slack: float,
    tol: float,
    max_top1: float = 1.0,
) -> _Scored | str:
    """The kept position's figures, or why it is excluded; "outside support" when the
    truncated target gives the token probability 0 (checked before the selection: a
    forbidden token refuses wherever it falls). The PIT, rank bins and log-score are
    conditional on the top-k set (module docstring), so the tail never widens them."""
    if _piece(pos) in STOP_PIECES:
        return "the forced token is an end-of-sequence token"
    top, ids = _ranked(pos, k)
    if not top:
        return "no alternatives at the position"
    logps = np.array([a.logprob for a in top], dtype=float)
    if not np.all(np.isfinite(logps)):
        return "non-finite logprob in the top-k"
    got = _truncated(logps, spec, len(top) < k, slack)
    if isinstance(got, str):
        return got
    w, (lo, hi) = got
    w = np.where([a.piece in STOP_PIECES for a in top], 0.0, w)  # given "not the end"
    total = float(w.sum())
    cat = _category(pos, top, ids)
    inside = cat < len(top)
    if (inside and w[cat] == 0.0) or (not inside and hi == 0.0):
        return "outside support"
    if total <= 0.0:
        return "no top-k token in the support given not the end"
    q = w / total
    if float(q.max()) > max_top1:
        return near_certain_reason(max_top1)
    out_lo = lo / (total + lo)
    out_hi = 1.0 if math.isinf(hi) else hi / (total + hi)
    known = out_hi - out_lo <= tol
    out_p, out_half = ((out_lo + out_hi) / 2, (out_hi - out_lo) / 2) if known else (None, 0.0)
    if not inside:
        return _Scored(False, math.nan, np.zeros(0), -1, 0.0, 0.0, 0.0, out_p, out_half)
    g = logps - logps[0]
    mean = float(q @ g)
    return _Scored(
        inside=True,
        pit=float(q[:cat].sum() + v * q[cat]),
        bins=_rank_bins(q, k),
        token_bin=_token_bin(cat),
        score=float(g[cat]),
        score_mean=mean,
        score_var=float(q @ (g - mean) ** 2),
        out_p=out_p,
        out_half=out_half,
        gaps=np.where(w > 0, g / spec.temperature, -np.inf),
        cat=cat,
    )


def score_positions(
    positions: Sequence[WitnessPosition],
    spec: SamplingSpec,
    *,
    top_k: int,
    rng: np.random.Generator,
    slack: float = 1e-4,
    tail_tolerance: float = 0.01,
    max_top1: float = 1.0,
) -> tuple[list[_Scored], dict[str, int]]:
    """The kept positions' figures in order, and the excluded positions counted by reason.

    One ``V ~ U(0,1)`` is drawn from ``rng`` per position, kept or not, so a position's
    PIT does not depend on which others were excluded. ``top_k``: alternatives per
    position used as categories (the k asked; an engine that appends the forced token
    to its top-k list adds no category, and a position with fewer is excluded).
    ``max_top1``: the selection rule (module docstring); 1 keeps every position.
    """
    kept: list[_Scored] = []
    excluded: dict[str, int] = {}
    for pos in positions:
        v = float(rng.uniform())
        got = _one_position(pos, spec, top_k, v, slack, tail_tolerance, max_top1)
        if isinstance(got, str):
            excluded[got] = excluded.get(got, 0) + 1
        else:
            kept.append(got)
    return kept, excluded


def detectable_distance(
    n: int, alpha: float, *, power: float = DEFAULT_WITNESS_POWER, tail_slack: float = 0.0
) -> float:
    """The PIT-CDF distance the KS test at level ``alpha`` catches with probability >=
    ``power`` with ``n`` tokens: ``kstwo.isf(alpha, n) + tail_slack +
    sqrt(ln(2/(1-power))/(2n))`` (module docstring), capped at 1; 1.0 when ``n`` is 0.

    Raises:
        ValueError: ``alpha`` or ``power`` outside (0, 1), or ``n`` negative.
    """
    _check_levels(alpha, power)
    if n < 0:
        raise ValueError("n must be >= 0")
    if n == 0:
        return 1.0
    crit = float(stats.kstwo.isf(alpha, n))
    dkw = math.sqrt(math.log(2 / (1 - power)) / (2 * n))
    return min(1.0, crit + tail_slack + dkw)


def detectable_rank_shift(
    n: int, df: int, alpha: float, *, power: float = DEFAULT_WITNESS_POWER
) -> float:
    """The per-token rank-bin shift ``sqrt(λ)`` (Mahalanobis, in units of one token's
    multinomial spread) the Wald chi-square at level ``alpha`` with ``df`` degrees of
    freedom catches with probability ``power`` over ``n`` tokens: the noncentral
    chi-square ``ncx2(df, n·λ)`` exceeds ``chi2.isf(alpha, df)`` with probability
    ``power`` (the test's asymptotic law; Moore 1977). ``inf`` when ``n`` or ``df`` is 0.

    Raises:
        ValueError: ``alpha`` or ``power`` outside (0, 1), or ``n``/``df`` negative.
    """
    _check_levels(alpha, power)
    if n < 0 or df < 0:
        raise ValueError("n and df must be >= 0")
    if n == 0 or df == 0:
        return math.inf
    crit = float(stats.chi2.isf(alpha, df))

    def gap(nc: float) -> float:
        return float(stats.ncx2.sf(crit, df, nc)) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2
    return math.sqrt(float(optimize.brentq(gap, 1e-9, hi, xtol=1e-9)) / n)


def detectable_score_shift(n: int, alpha: float, *, power: float = DEFAULT_WITNESS_POWER) -> float:
    """The per-token log-score shift (the mean of ``g_t(x_t) - E_t g_t`` over the
    root-mean-square null standard deviation, unitless) the two-sided z test at level
    ``alpha`` catches with probability >= ``power`` over ``n`` tokens:
    ``(Φ⁻¹(1 - α/2) + Φ⁻¹(power)) / sqrt(n)`` (the normal shift alternative; the far
    tail's share is neglected, so the power is slightly above ``power``). ``inf`` when
    ``n`` is 0.

    Raises:
        ValueError: ``alpha`` or ``power`` outside (0, 1), or ``n`` negative.
    """
    _check_levels(alpha, power)
    if n < 0:
        raise ValueError("n must be >= 0")
    if n == 0:
        return math.inf
    return float(stats.norm.isf(alpha / 2) + stats.norm.ppf(power)) / math.sqrt(n)


def min_tokens_for(distance: float, alpha: float, *, power: float = DEFAULT_WITNESS_POWER) -> int:
    """The fewest tokens at which :func:`detectable_distance` is at most ``distance``.

    Raises:
        ValueError: ``distance`` outside (0, 1), or ``alpha``/``power`` outside (0, 1).
    """
    if not 0 < distance < 1:
        raise ValueError("distance must be in (0, 1)")
    lo, hi = 1, 2
    while detectable_distance(hi, alpha, power=power) > distance:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if detectable_distance(mid, alpha, power=power) <= distance:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _check_levels(alpha: float, power: float) -> None:
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError("alpha and power must be in (0, 1)")


def _ks(kept: Sequence[_Scored]) -> tuple[float, float]:
    """(statistic, p-value) of the KS test on the conditional PITs (exact: no tail)."""
    if not kept:
        return 0.0, 1.0
    d = float(stats.kstest([s.pit for s in kept], "uniform").statistic)
    return d, float(np.clip(stats.kstwo.sf(d, len(kept)), 0.0, 1.0))


def _poisson_binomial(ps: np.ndarray) -> np.ndarray:
    """The law of a sum of independent Bernoulli(``ps``) counts (pmf over 0..n)."""
    pmf = np.ones(1)
    for p in ps:
        pmf = np.convolve(pmf, [1.0 - float(p), float(p)])
    return pmf


def _outside(kept: Sequence[_Scored]) -> tuple[int, int, float, float]:
    """(tokens outside the top-k set, positions checked, expected count, p-value) of
    the outside-share check over the kept positions whose outside probability is known
    within the tail tolerance: the count against the Poisson-binomial law of those
    probabilities, conservative at both ends (the upper tail under the interval's upper
    ends, the lower tail under its lower ends); two-sided."""
    known = [s for s in kept if s.out_p is not None]
    if not known:
        return 0, 0, 0.0, 1.0
    mid = np.array([cast(float, s.out_p) for s in known])
    half = np.array([s.out_half for s in known])
    count = sum(1 for s in known if not s.inside)
    upper = float(_poisson_binomial(np.minimum(1.0, mid + half))[count:].sum())
    lower = float(_poisson_binomial(np.maximum(0.0, mid - half))[: count + 1].sum())
    return count, len(known), float(mid.sum()), float(min(1.0, 2 * min(upper, lower)))


def _merged_bins(expected: np.ndarray) -> np.ndarray:
    """Group index of each rank bin: from the rarest (last) bin, neighbours merged until
    each group expects at least :data:`MIN_BIN_EXPECTED` tokens (Cochran 1954, Biometrics
    10(4)); a short remainder joins the group before it. Reads the null expectations
    only, never the counts, so the grouping does not depend on the sampled tokens."""
    group = np.zeros(len(expected), dtype=int)
    g, acc = 0, 0.0
    for i in range(len(expected) - 1, -1, -1):
        group[i] = g
        acc += float(expected[i])
        if acc >= MIN_BIN_EXPECTED:
            g, acc = g + 1, 0.0
    if acc > 0 and g > 0:  # the most likely bins fell short: join the group after them
        group[group == g] = g - 1
    return np.asarray(group.max() - group)


def _rank_chi2(kept: Sequence[_Scored]) -> tuple[float, float, int]:
    """(statistic, p-value, df) of the Wald chi-square on the rank-bin counts.

    Counts ``N`` and their null mean ``E = Σ p_t`` and covariance ``Σ (diag p_t - p_t p_tᵀ)``
    (a sum of independent one-draw multinomials; the sequential case by the martingale
    CLT); ``X = dᵀ C⁺ d`` with ``d = N - E``, ``df`` the rank of ``C``; ``p_t`` is the
    conditional rank-bin law on the top-k set (exact). Bins expecting few tokens are merged
    first (:func:`_merged_bins`): the chi-square law is a poor guide to a count whose
    mean is below a few tokens, and refuses a correct sampler too often there.
    """
    if not kept:
        return 0.0, 1.0, 0
    fine = np.array([s.bins for s in kept])
    group = _merged_bins(fine.sum(axis=0))
    merge = np.zeros((fine.shape[1], int(group.max()) + 1))
    merge[np.arange(fine.shape[1]), group] = 1.0
    probs = fine @ merge
    tokens = group[[s.token_bin for s in kept]]
    counts = np.bincount(tokens, minlength=probs.shape[1]).astype(float)
    cov = np.diag(probs.sum(axis=0)) - probs.T @ probs
    df = int(np.linalg.matrix_rank(cov, tol=1e-9))
    if df == 0:
        return 0.0, 1.0, 0
    dev = counts - probs.sum(axis=0)
    x = float(dev @ np.linalg.pinv(cov, rcond=1e-9, hermitian=True) @ dev)
    return x, float(stats.chi2.sf(x, df)), df


def witness(
    positions: Sequence[WitnessPosition],
    spec: SamplingSpec,
    *,
    top_k: int,
    alpha: float,
    seed: int,
    power: float = DEFAULT_WITNESS_POWER,
    slack: float = 1e-4,
    tail_tolerance: float = 0.01,
    max_top1: float = DEFAULT_WITNESS_MAX_TOP1,
) -> WitnessResult:
    """Test that ``positions``' tokens are draws from the tempered, truncated target.

    Args:
        positions: every sampled token of a route's outputs, each with ``off``'s RAW
            top-k at its prefix, outputs concatenated in a fixed order.
        spec: the sampling parameters, applied temperature → top-k → top-p.
        top_k: alternatives per position used as categories (tokens).
        alpha: the level; seed: the PIT randomisation's seed (same inputs, same result).
        power: the power the detectable figures are stated at.
        slack: numerical slack on truncation boundaries (probability / nats).
        tail_tolerance: the widest interval of the outside-the-set probability with
            which a position enters the outside-share check.
        max_top1: the selection rule: positions whose tempered top-1 probability
            exceeds it are left out (module docstring); 1 keeps them all.

    Returns:
        :class:`WitnessResult` (module docstring: the four tests, exclusions, power).

    Raises:
        ValueError: ``top_k`` < 1, ``alpha``/``power`` outside (0, 1), or
            ``max_top1`` outside (0, 1].
    """
    return witness_groups(
        [(spec, positions)],
        top_k=top_k,
        alpha=alpha,
        seed=seed,
        power=power,
        slack=slack,
        tail_tolerance=tail_tolerance,
        max_top1=max_top1,
    )


def witness_groups(
    groups: Sequence[tuple[SamplingSpec, Sequence[WitnessPosition]]],
    *,
    top_k: int,
    alpha: float,
    seed: int,
    power: float = DEFAULT_WITNESS_POWER,
    slack: float = 1e-4,
    tail_tolerance: float = 0.01,
    max_top1: float = DEFAULT_WITNESS_MAX_TOP1,
) -> WitnessResult:
    """:func:`witness` over outputs sampled with different parameters: each group's
    positions are scored with its own :class:`SamplingSpec` (one seeded RNG across the
    groups, in order) and the PITs tested together (each is U(0,1) under its own law).

    Raises:
        ValueError: ``top_k`` < 1, ``alpha``/``power`` outside (0, 1), or
            ``max_top1`` outside (0, 1].
    """
    if top_k < 1:
        raise ValueError("top_k must be >= 1")
    if not 0 < max_top1 <= 1:
        raise ValueError("max_top1 must be in (0, 1]")
    _check_levels(alpha, power)
    rng = np.random.default_rng(seed)
    kept: list[_Scored] = []
    excluded: dict[str, int] = {}
    for spec, positions in groups:
        got, why = score_positions(
            positions,
            spec,
            top_k=top_k,
            rng=rng,
            slack=slack,
            tail_tolerance=tail_tolerance,
            max_top1=max_top1,
        )
        kept += got
        for reason, count in why.items():
            excluded[reason] = excluded.get(reason, 0) + count
    temps = {spec.temperature for spec, _ in groups}
    return _result(kept, excluded, alpha, power, max_top1, temps.pop() if len(temps) == 1 else None)


def _result(
    kept: Sequence[_Scored],
    excluded: dict[str, int],
    alpha: float,
    power: float,
    bound: float,
    requested: float | None = None,
) -> WitnessResult:
    """The four tests, combined by Bonferroni, and the power figures: the three on the
    tokens inside ``off``'s top-k set (conditional), the outside-share check on all."""
    outside = excluded.pop("outside support", 0)
    inside = [s for s in kept if s.inside]
    d, p_ks = _ks(inside)
    x, p_chi, df = _rank_chi2(inside)
    z, p_z = log_score_test(
        sum(s.score - s.score_mean for s in inside), sum(s.score_var for s in inside)
    )
    out, checked, expected, p_out = _outside(kept)
    n = len(inside)
    level = alpha / TESTS
    return WitnessResult(
        statistic=d,
        ks_p_value=p_ks,
        chi2_statistic=x,
        chi2_df=df,
        chi2_p_value=p_chi,
        score_statistic=z,
        score_p_value=p_z,
        outside_topk=len(kept) - n,
        outside_checked=checked,
        outside_checked_count=out,
        outside_expected=expected,
        outside_p_value=p_out,
        p_value=min(1.0, TESTS * min(p_ks, p_chi, p_z, p_out)),
        alpha=alpha,
        tokens_tested=n,
        tokens_excluded=sum(excluded.values()) + outside,
        exclusions=tuple(WitnessExclusion(reason=r, tokens=c) for r, c in sorted(excluded.items())),
        outside_support=outside,
        max_top1=bound,
        detectable_distance=detectable_distance(n, level, power=power),
        detectable_rank_shift=detectable_rank_shift(n, df, level, power=power),
        detectable_score_shift=detectable_score_shift(n, level, power=power),
        power=power,
        effective_temperature=fit_effective_temperature(
            [s.gaps for s in inside], [s.cat for s in inside], requested
        ),
    )
