"""Where a speedup comes from: acceptance length ÷ step-cost ratio, and the drafter's break-even.

A speculative route emits, per verify step, ``L`` tokens (the acceptance length,
bonus token included: ``1 + accepted / verify steps``), and a verify step costs
``r`` times ``off``'s decode step at the same load (the step-cost ratio). Its
decode speedup over ``off`` (by TPOT) is then

    speedup = L / r

so a route that stops paying under load either accepts less (``L`` fell: the
drafter) or pays more per step (``r`` grew: the engine's verify step under
batching). Definitions used here (``docs/scorecard.md``, "Where the speedup
comes from"):

* ``decode_step_ms`` = ``off``'s median TPOT at that load (ms): ``off`` emits one
  token per decode step, so its time per output token is its time per step;
* ``verify_step_ms`` = ``step_cost_ratio × decode_step_ms`` (ms): the candidate's
  time per verify step. With the rows' medians (no paired rounds) it is the
  candidate's median TPOT × ``L`` (a verify step emits ``L`` tokens);
* ``step_cost_ratio`` = ``L / speedup`` (dimensionless), ``speedup`` being the
  credited TPOT figure of :func:`~deepseekbench.compare_speedup`, so the parts
  multiply back to exactly the figure printed;
* the **break-even acceptance length** at a load is the step-cost ratio itself
  (``L = r`` gives speedup 1); the **break-even acceptance rate** at depth ``k``
  is the per-position acceptance ``a`` with ``(1 - a^(k+1)) / (1 - a) = r``: the
  expected tokens per verify step when each of ``k`` draft tokens is accepted
  with probability ``a`` independently of the others, given that every earlier
  one was (Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers
  via Speculative Decoding", ICML, eq. 1), solved by bisection.

Only a printed TPOT verdict is decomposed (a credited speedup, or a verified,
significant slowdown: :attr:`~deepseekbench.SpeedupVerdict.printed`): ``L`` and ``r``
together give the figure back, so a refused line shows neither (no figure leaks through).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._analysis._prompt_bootstrap import prompt_indices
from deepseekbench._analysis._speedup import SpeedupMetric, SpeedupVerdict, compare_speedup
from deepseekbench._types._clock import Clock
from deepseekbench._types._row import Row

__all__ = [
    "Factor",
    "SpeedupDecomposition",
    "break_even_acceptance_rate",
    "decompose_speedup",
    "expected_acceptance_length",
    "factor_moved",
    "printed_ratio",
    "rate_words",
    "which_factor_moved",
]

Factor = Literal["acceptance", "step_cost", "both", "neither"]
"""Which factor of ``speedup = L / r`` moved between two decompositions."""

_Z95 = 1.959963984540054


def expected_acceptance_length(rate: float, depth: int) -> float:
    """Expected tokens per verify step, ``(1 - a^(k+1)) / (1 - a)`` (``k + 1`` at
    ``a = 1``), for per-position acceptance rate ``a`` = ``rate`` in [0, 1] and
    depth ``k`` = ``depth`` draft tokens per step (Leviathan, Kalman & Matias 2023,
    eq. 1: i.i.d. acceptance per position, the bonus token included).

    Raises:
        ValueError: ``rate`` outside [0, 1] or ``depth`` below 1.
    """
    if not 0.0 <= rate <= 1.0 or depth < 1:
        raise ValueError("rate must be in [0, 1] and depth >= 1")
    if rate == 1.0:
        return float(depth + 1)
    return float((1.0 - rate ** (depth + 1)) / (1.0 - rate))


def break_even_acceptance_rate(length: float, depth: int) -> float | None:
    """The per-position acceptance rate at which a depth-``depth`` drafter emits
    ``length`` tokens per verify step: the inverse of :func:`expected_acceptance_length`
    (bisection to 1e-9; dimensionless, in [0, 1]).

    ``0.0`` when ``length <= 1`` (any drafter reaches it); ``None`` when ``length``
    exceeds ``depth + 1`` (unreachable at this depth: even a drafter that is always
    right emits ``depth + 1`` tokens a step).

    Raises:
        ValueError: ``depth`` below 1 or ``length`` not finite.
    """
    if depth < 1 or not math.isfinite(length):
        raise ValueError("depth must be >= 1 and length finite")
    if length <= 1.0:
        return 0.0
    if length > depth + 1:
        return None
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if expected_acceptance_length(mid, depth) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def printed_ratio(speedup: float, length: float, digits: int = 2) -> tuple[str, int]:
    """The step-cost ratio as printed beside a speedup and an acceptance length each
    printed to ``digits`` decimals, so that the printed length ÷ the printed ratio
    rounds back to the printed speedup (``docs/scorecard.md``, "Where the speedup comes
    from": the printed parts always divide back to the figure printed). The unrounded
    ``length / speedup`` to the fewest decimals (``digits`` to ``digits + 2``) that
    divide back; when none does (the length's own rounding moves the quotient), the
    printed length ÷ the printed speedup, to the fewest decimals (up to 8) that do —
    it then differs from the unrounded ratio by no more than the two printed figures'
    rounding. Returns ``(text, decimals)``, e.g. ``("1.76", 2)`` for a speedup 1.6745
    and a length 2.936 printed 1.67 and 2.94 (the unrounded ratio 1.753, printed 1.75
    or 1.753, gives 2.94 ÷ 1.75 = 1.68). Falls back to ``length / speedup`` at
    ``digits`` decimals when the speedup prints as 0. Dimensionless.

    Raises:
        ValueError: ``speedup`` or ``length`` not finite and > 0, or ``digits`` below 0.
    """
    if not (math.isfinite(speedup) and speedup > 0 and math.isfinite(length) and length > 0):
        raise ValueError("speedup and length must be finite and > 0")
    if digits < 0:
        raise ValueError("digits must be >= 0")
    s_text, l_p = f"{speedup:.{digits}f}", float(f"{length:.{digits}f}")
    s_p = float(s_text)
    if s_p <= 0 or l_p <= 0:
        return f"{length / speedup:.{digits}f}", digits
    tries = [(length / speedup, d) for d in range(digits, digits + 3)]
    tries += [(l_p / s_p, d) for d in range(digits, 9)]
    for value, d in tries:
        r_p = float(f"{value:.{d}f}")
        if r_p > 0 and f"{l_p / r_p:.{digits}f}" == s_text:
            return f"{value:.{d}f}", d
    return f"{l_p / s_p:.8f}", 8


def rate_words(
    break_even_length: float,
    acceptance_length: float,
    depth: int | None,
    *,
    below_one_shown: bool = False,
) -> str:
    """The break-even per-position rate beside the route's own, in words (no figure
    stands for "any drafter"): "break-even 0.69 vs own 0.85 per position at depth 3",
    "break-even below 1 (any drafter pays); own 0.85 per position at depth 3",
    "break-even unreachable at depth 3 (at most 4); own 0.85 per position" or
    "depth unknown". A break-even length at or below 1 is called "below 1 (any drafter
    pays)" only with ``below_one_shown`` (the step-cost ratio's whole 95 % interval is
    below 1, as :meth:`SpeedupDecomposition.target_text` requires); otherwise it reads
    "break-even not shown below 1 (the step-cost interval includes 1)", since a point
    estimate alone concludes nothing. Both rates are i.i.d.-equivalent: the ``a`` solving
    ``(1 - a^(k+1)) / (1 - a) = length`` (:func:`break_even_acceptance_rate`;
    Leviathan, Kalman & Matias 2023, eq. 1) for the break-even length and for the
    measured acceptance length (tokens per verify step).

    Raises:
        ValueError: a length not finite.
    """
    if depth is None:
        return "depth unknown"
    own = break_even_acceptance_rate(acceptance_length, depth)
    own_text = f"own {own:.2f} per position" if own is not None else "own unknown"
    if break_even_length <= 1.0:
        if not below_one_shown:
            return (
                "break-even not shown below 1 (the step-cost interval includes 1); "
                f"{own_text} at depth {depth}"
            )
        return f"break-even below 1 (any drafter pays); {own_text} at depth {depth}"
    need = break_even_acceptance_rate(break_even_length, depth)
    if need is None:
        return f"break-even unreachable at depth {depth} (at most {depth + 1}); {own_text}"
    need_text = f"{need:.2f}" if need >= 0.005 else "below 0.01"  # never a bare "0.00"
    return f"break-even {need_text} vs {own_text} at depth {depth}"


class SpeedupDecomposition(BaseModel):
    """A credited TPOT speedup as acceptance length ÷ step-cost ratio (module docs).

    Attributes:
        speedup: the credited figure (dimensionless, times faster);
            ``speedup_ci``: its 95 % interval, as the verdict carries it.
        acceptance_length: the candidate row's ``L`` (tokens per verify step, bonus
            included); ``acceptance_length_ci``: 95 % percentile bootstrap of the
            mean of its per-request lengths, scaled to ``L`` (``None`` without
            per-request lengths): a cluster bootstrap over prompts when the requests
            name their prompt (``acceptance_prompts``: how many prompts were
            resampled), else over the requests as if independent (``None``);
            ``acceptance_prompts_named``: how many distinct prompts the requests name
            (``None`` when some request names none), so a reader can tell "fewer than
            :data:`~deepseekbench._analysis._prompt_bootstrap.MIN_PROMPTS` prompts" from
            "no prompt ids" (not serialised).
        step_cost_ratio: ``r = L / speedup``, the verify step over ``off``'s
            decode step; ``step_cost_ratio_ci``: 95 % interval from the two
            intervals above on the log scale (delta method, their half-widths added
            in quadrature: conservative, as ``L`` and the speedup rise together over
            a route's requests). ``None`` when either interval is unknown.
        decode_step_ms: ``off``'s time per decode step (its median TPOT, ms; the
            engine's own TPOT on the server clock).
        verify_step_ms: the candidate's time per verify step, ``r × decode_step_ms``
            (ms); ``verify_step_ms_ci`` its interval (from ``step_cost_ratio_ci``).
        depth: draft tokens per verify step (``Row.spec_tokens``), ``None`` unknown.
        break_even_length: the acceptance length at which the speedup is 1 (``= r``).
        break_even_rate: the per-position acceptance rate reaching it at ``depth``
            (:func:`break_even_acceptance_rate`); ``None`` when the depth is unknown
            or the length is unreachable at it (``break_even_reachable`` False).
        clock: the clock the speedup was judged on.

    Raises:
        pydantic.ValidationError: a figure not finite or not > 0, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    speedup: float = Field(gt=0, description="credited TPOT speedup, times faster")
    speedup_ci: tuple[float, float] | None = None
    acceptance_length: float = Field(ge=1, description="tokens per verify step")
    acceptance_length_ci: tuple[float, float] | None = None
    acceptance_prompts: int | None = Field(default=None, ge=1)
    acceptance_prompts_named: int | None = Field(
        default=None,
        ge=0,
        exclude=True,
        description="distinct prompts the requests name (None: some request names none); "
        "below MIN_PROMPTS the interval resamples the requests (not serialised)",
    )
    step_cost_ratio: float = Field(gt=0, description="verify step / off's decode step")
    step_cost_ratio_ci: tuple[float, float] | None = None
    decode_step_ms: float = Field(gt=0, description="off's time per decode step, ms")
    verify_step_ms: float = Field(gt=0, description="candidate's time per verify step, ms")
    verify_step_ms_ci: tuple[float, float] | None = None
    depth: int | None = Field(default=None, ge=1, description="draft tokens per verify step")
    break_even_length: float = Field(gt=0, description="acceptance length for speedup 1")
    break_even_rate: float | None = Field(default=None, ge=0, le=1)
    break_even_reachable: bool = True
    clock: Clock = Clock.client

    @property
    def pays(self) -> bool:
        """True when the measured acceptance length is above the break-even one."""
        return self.acceptance_length > self.break_even_length

    @property
    def own_rate(self) -> float | None:
        """The route's own i.i.d.-equivalent per-position acceptance rate: the ``a``
        with ``(1 - a^(k+1)) / (1 - a) = acceptance_length`` at ``depth``
        (:func:`break_even_acceptance_rate`, dimensionless); ``None`` when the depth
        is unknown."""
        if self.depth is None:
            return None
        return break_even_acceptance_rate(self.acceptance_length, self.depth)

    @property
    def ratio_text(self) -> str:
        """The step-cost ratio as printed: :func:`printed_ratio` of the speedup and the
        acceptance length (both printed to 2 decimals), so the printed parts divide
        back to the printed speedup."""
        return printed_ratio(self.speedup, self.acceptance_length)[0]

    @property
    def ratio_decimals(self) -> int:
        """How many decimals :attr:`ratio_text` has (2 or more)."""
        return printed_ratio(self.speedup, self.acceptance_length)[1]

    @property
    def below_one_shown(self) -> bool:
        """True when the step-cost ratio's whole 95 % interval is below 1 (the verify step
        shown cheaper than ``off``'s decode step); ``False`` without an interval."""
        ci = self.step_cost_ratio_ci
        return ci is not None and ci[1] < 1.0

    def rate_text(self) -> str:
        """:func:`rate_words` for this decomposition, a break-even below 1 called so only
        when :attr:`below_one_shown`."""
        return rate_words(
            self.break_even_length,
            self.acceptance_length,
            self.depth,
            below_one_shown=self.below_one_shown,
        )

    def target_text(self) -> str:
        """The drafter's target in words, e.g. "a depth-3 head must reach acceptance
        length 3.74 (break-even 0.93 vs own 0.85 per position at depth 3); this one
        reaches 3.00", or "any depth-3 head pays here: break-even acceptance length
        0.90 (0.85–0.95), below 1 (the verify step is cheaper than off's decode step);
        this one reaches 3.00".

        A firm conclusion about the step cost's side of 1 is drawn only from its 95 %
        interval (:attr:`step_cost_ratio_ci`): "cheaper than off's decode step" only when
        the whole interval is below 1. When the interval includes 1, or there is none,
        the sentence gives the break-even length with its interval and says the verify
        step is not shown to cost less or more than off's decode step; the per-position
        rate is then given only for a break-even length above 1."""
        head = f"a depth-{self.depth} head" if self.depth is not None else "a head"
        reach = f"this one reaches {self.acceptance_length:.2f}"
        ci = self.step_cost_ratio_ci
        if ci is not None and ci[1] < 1.0 and self.break_even_length < 1.0:
            return (
                f"any {head[2:]} pays here: break-even acceptance length "
                f"{self.ratio_text}{_ci(ci, self.ratio_decimals)}, below 1 (the verify step is "
                f"cheaper than off's decode step); {reach}"
            )
        if ci is None or ci[0] <= 1.0:
            side = (
                f"its 95% interval {ci[0]:.{self.ratio_decimals}f}–"
                f"{ci[1]:.{self.ratio_decimals}f} includes 1"
                if ci is not None
                else "a point estimate without an interval"
            )
            words = (
                f"; {rate_words(self.break_even_length, self.acceptance_length, self.depth)}"
                if self.break_even_length > 1.0
                else ""
            )
            return (
                f"{head} must reach acceptance length {self.ratio_text} ({side}: the verify "
                f"step is not shown to cost more or less than off's decode step{words}); "
                f"{reach}"
            )
        words = rate_words(self.break_even_length, self.acceptance_length, self.depth)
        return f"{head} must reach acceptance length {self.ratio_text} ({words}); {reach}"

    def text(self) -> str:
        """The decomposition in one line, e.g. "1.68× = acceptance length 2.94
        (2.90–2.98) ÷ step-cost ratio 1.75 (1.70–1.80): verify step 15.1 ms vs off's
        8.63 ms" (off's step is its median TPOT, printed as the scorecard's TPOT column)."""
        return (
            f"{self.speedup:.2f}× = acceptance length {self.acceptance_length:.2f}"
            f"{_ci(self.acceptance_length_ci)} ÷ step-cost ratio {self.ratio_text}"
            f"{_ci(self.step_cost_ratio_ci, self.ratio_decimals)}: verify step "
            f"{self.verify_step_ms:.1f} ms vs off's {self.decode_step_ms:.2f} ms"
        )


def _ci(ci: tuple[float, float] | None, decimals: int = 2) -> str:
    return f" ({ci[0]:.{decimals}f}–{ci[1]:.{decimals}f})" if ci is not None else ""


def mean_ci(
    values: Sequence[float], *, n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float] | None:
    """95 % percentile-bootstrap interval of the mean of ``values`` (their unit),
    numpy's seeded generator; ``None`` with fewer than 2 finite values."""
    xs = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if len(xs) < 2:
        return None
    rng = np.random.default_rng(seed)
    means = xs[rng.integers(0, len(xs), size=(n_resamples, len(xs)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _log_half_width(ci: tuple[float, float] | None) -> float | None:
    if ci is None or not (ci[0] > 0 and ci[1] > 0):
        return None
    return (math.log(ci[1]) - math.log(ci[0])) / 2


def decompose_speedup(
    baseline: Row,
    candidate: Row,
    *,
    verdict: SpeedupVerdict | None = None,
    acceptance_samples: Sequence[float] | None = None,
    acceptance_prompts: Sequence[str | None] | None = None,
    n_resamples: int = 2000,
    seed: int = 0,
) -> SpeedupDecomposition | None:
    """``candidate``'s credited TPOT speedup over ``baseline`` as acceptance length ÷
    step-cost ratio, with the break-even acceptance (module docs for every definition).

    Args:
        baseline: the ``off`` row at the same cell and load.
        candidate: the speculative row.
        verdict: their :func:`~deepseekbench.compare_speedup` verdict (by
            ``tpot_ms``); judged here from the rows alone when not given.
        acceptance_samples: the candidate's per-request acceptance lengths (tokens
            per verify step), for ``acceptance_length_ci``. Without it and a
            ``verdict`` carrying an interval the decomposition has no interval, and a
            :func:`~deepseekbench.witness_step_costs` of it is not judged; a
            scorecard line's ``decomposition`` carries both.
        acceptance_prompts: the prompt (workload item id) of each of
            ``acceptance_samples`` (same length). When every request names one and
            :data:`~deepseekbench._analysis._prompt_bootstrap.MIN_PROMPTS` or more
            are named, the interval resamples prompts, then each drawn prompt's
            requests (``_prompt_bootstrap.prompt_indices``: the prompt is the
            sampling unit, repeats nested in it); otherwise the requests are
            resampled as if independent. Either way the values are put in a fixed
            order first, so the same values give the same interval whatever order
            the requests completed in.
        n_resamples, seed: of the acceptance-length bootstrap.

    Returns:
        The :class:`SpeedupDecomposition`, or ``None`` when there is nothing to
        decompose: the verdict credits no figure, is not by ``tpot_ms``, or the
        candidate row has no acceptance length or the baseline no TPOT.

    Raises:
        ValueError: ``n_resamples`` below 1.
    """
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    if verdict is None:
        verdict = compare_speedup(baseline, candidate, metric=SpeedupMetric.tpot_ms)
    length = candidate.acceptance_length
    decode = baseline.server_tpot_ms if verdict.clock is Clock.server else baseline.tpot_ms
    if (
        not verdict.printed
        or verdict.speedup is None
        or verdict.metric is not SpeedupMetric.tpot_ms
        or length is None
        or decode is None
        or not decode > 0
    ):
        return None
    speedup = verdict.speedup
    s_ci = (
        (verdict.ci_low, verdict.ci_high)
        if verdict.ci_low is not None and verdict.ci_high is not None
        else None
    )
    l_ci, n_prompts = _scaled_ci(acceptance_samples, acceptance_prompts, length, n_resamples, seed)
    ratio = length / speedup
    r_ci = _ratio_ci(ratio, l_ci, s_ci)
    depth = candidate.spec_tokens
    rate = break_even_acceptance_rate(ratio, depth) if depth is not None else None
    return SpeedupDecomposition(
        speedup=speedup,
        speedup_ci=s_ci,
        acceptance_length=length,
        acceptance_length_ci=l_ci,
        acceptance_prompts=n_prompts,
        acceptance_prompts_named=_named_prompts(acceptance_samples, acceptance_prompts),
        step_cost_ratio=ratio,
        step_cost_ratio_ci=r_ci,
        decode_step_ms=decode,
        verify_step_ms=ratio * decode,
        verify_step_ms_ci=(r_ci[0] * decode, r_ci[1] * decode) if r_ci is not None else None,
        depth=depth,
        break_even_length=ratio,
        break_even_rate=rate,
        break_even_reachable=depth is None or ratio <= depth + 1,
        clock=verdict.clock,
    )


def _named_prompts(
    samples: Sequence[float] | None, prompts: Sequence[str | None] | None
) -> int | None:
    """Distinct prompts named by the requests behind ``samples``; ``None`` when there are
    no samples or some request names no prompt."""
    if not samples or prompts is None or len(prompts) != len(samples):
        return None
    if any(p is None for p in prompts):
        return None
    return len(set(prompts))


def _scaled_ci(
    samples: Sequence[float] | None,
    prompts: Sequence[str | None] | None,
    length: float,
    n_resamples: int,
    seed: int,
) -> tuple[tuple[float, float] | None, int | None]:
    """The per-request mean's bootstrap interval, scaled to the row's pooled ``length``,
    and how many prompts it resampled (``None``: the requests, as if independent).
    Over prompts the statistic is the mean of the drawn prompts' drawn requests, each
    prompt weighted alike, scaled by the same mean of the data."""
    if not samples:
        return None, None
    if prompts is None or len(prompts) != len(samples):
        prompts = [None] * len(samples)
    # a fixed order: the same values give the same resamples whatever the completion order
    pairs = sorted(
        (
            (p, float(x))
            for x, p in zip(samples, prompts, strict=True)
            if math.isfinite(x) and x >= 1
        ),
        key=lambda px: (px[0] is None, px[0] or "", px[1]),
    )
    xs = np.asarray([x for _, x in pairs], dtype=float)
    ids = [p for p, _ in pairs]
    rng = np.random.default_rng(seed)
    picks = prompt_indices([ids], rng, n_resamples) if len(xs) >= 2 else None
    if picks is not None:
        low, high = np.percentile(xs[picks[0]].mean(axis=1), [2.5, 97.5])
        groups: dict[str | None, list[float]] = {}
        for p, x in pairs:
            groups.setdefault(p, []).append(x)
        center = float(np.mean([np.mean(g) for g in groups.values()]))
        n_prompts: int | None = len(groups)
    else:
        ci = mean_ci(xs.tolist(), n_resamples=n_resamples, seed=seed)
        if ci is None:
            return None, None
        (low, high), center, n_prompts = ci, float(xs.mean()), None
    scaled = (max(1.0, float(low) / center * length), max(1.0, float(high) / center * length))
    return scaled, n_prompts


def _ratio_ci(
    ratio: float, l_ci: tuple[float, float] | None, s_ci: tuple[float, float] | None
) -> tuple[float, float] | None:
    """``r = L / S`` on the log scale: half-widths of ``log L`` and ``log S`` in quadrature."""
    hl, hs = _log_half_width(l_ci), _log_half_width(s_ci)
    if hl is None or hs is None:
        return None
    h = math.hypot(hl, hs)
    return ratio * math.exp(-h), ratio * math.exp(h)


def factor_moved(
    before: float,
    after: float,
    ci_before: tuple[float, float] | None,
    ci_after: tuple[float, float] | None,
    *,
    tolerance: float = 0.05,
) -> bool:
    """True when a factor changed between two decompositions: their 95 % intervals do
    not overlap, or (either interval unknown) the figures differ by more than
    ``tolerance`` (relative, default 5 %)."""
    if ci_before is not None and ci_after is not None:
        return ci_before[1] < ci_after[0] or ci_after[1] < ci_before[0]
    return abs(after - before) > tolerance * max(abs(before), abs(after))


def which_factor_moved(before: SpeedupDecomposition, after: SpeedupDecomposition) -> Factor:
    """Which factor of ``speedup = L / r`` changed from ``before`` to ``after`` (two
    loads, or two runs of a route): ``acceptance`` (``L`` moved, ``r`` did not),
    ``step_cost``, ``both`` or ``neither`` (:func:`factor_moved` on each)."""
    acc = factor_moved(
        before.acceptance_length,
        after.acceptance_length,
        before.acceptance_length_ci,
        after.acceptance_length_ci,
    )
    cost = factor_moved(
        before.step_cost_ratio,
        after.step_cost_ratio,
        before.step_cost_ratio_ci,
        after.step_cost_ratio_ci,
    )
    if acc and cost:
        return "both"
    return "acceptance" if acc else "step_cost" if cost else "neither"


def moved_text(before: SpeedupDecomposition, after: SpeedupDecomposition) -> str:
    """Which factor moved, in words: "acceptance unchanged 2.94; the verify step grew
    1.75× → 3.82× of off's step" (the scorecard's sentence between two loads)."""
    la, lb = before.acceptance_length, after.acceptance_length
    ra, rb = before.step_cost_ratio, after.step_cost_ratio
    moved = which_factor_moved(before, after)
    if moved in ("acceptance", "both"):
        acc = f"acceptance {'fell' if lb < la else 'rose'} {la:.2f} → {lb:.2f}"
    elif abs(lb - la) < 0.005:
        acc = f"acceptance unchanged {lb:.2f}"
    else:
        acc = f"acceptance unchanged ({la:.2f} → {lb:.2f}, within its intervals)"
    steps = f"{before.ratio_text}× → {after.ratio_text}× of off's step"
    if moved in ("step_cost", "both"):
        cost = f"the verify step {'grew' if rb > ra else 'shrank'} {steps}"
    else:
        cost = f"the verify step unchanged ({steps}, within its intervals)"
    return f"{acc}; {cost}"
