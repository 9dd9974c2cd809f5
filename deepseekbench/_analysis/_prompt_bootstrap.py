"""The prompt as the sampling unit: a paired cluster bootstrap over prompts.

A speedup (or a change between two runs) is a claim about a workload: had other
prompts of the same kind been drawn, the figure would differ, and by more than a
repeat of the same prompts would show (prompts differ in how much a draft can
guess). Repeats are nested in prompts. So every interval over per-request values
that knows each request's prompt (the workload item id) is made by resampling
prompts, two-stage (Davison & Hinkley 1997, §3.8, a cluster bootstrap; Field & Welsh
2007 for its consistency when the clusters are the units sampled):

1. draw the prompts with replacement — the **same** draw for every group compared
   (the ``off`` line and the speculative line, and in a comparison of two runs each
   run's lines too): the groups are paired on the prompt, so what is common to a
   prompt (its length, how easy it is to draft) cancels out of the ratio;
2. within each drawn prompt, draw its requests (repeats) with replacement, as many as
   the group's largest prompt holds — one uniform draw shared by the groups, so a
   prompt with as many requests on each side draws the same repeat (the same round)
   on each — so repeat noise is covered too.

Only the prompts every group measured enter (a prompt missing from one group cannot
pair); with fewer than :data:`MIN_PROMPTS` of them, the caller falls back to its
repeat-noise interval and says so.

Two users, one account. The scorecard's speedup (:func:`~deepseekbench.compare_speedup`,
:func:`prompt_ratio_ci`) resamples the prompts of its own figure — the paired rounds'
geometric mean, the rounds kept so a drift between them weighs on both routes as in the
figure — and combines that interval with the rounds' own Student-t interval
(:func:`combine_log_intervals`): it answers "how much faster on this kind of
workload". ``compare``'s intervals (:func:`~deepseekbench.compare_runs`, through
:func:`prompt_indices`) draw the same prompts for every line of both runs: they answer
"did the change between the runs move this figure, on the prompts both ran". Both
take the prompt as the unit and pair on it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["MIN_PROMPTS", "combine_log_intervals", "prompt_indices", "prompt_ratio_ci"]

MIN_PROMPTS = 5
"""Fewest prompts shared by every group before the prompt is the sampling unit: a
bootstrap over fewer distinct clusters has too few distinct resamples to trust."""


def _common(prompts: Sequence[Sequence[str | None]]) -> list[str] | None:
    """The prompts every group measured (sorted), or ``None`` when a group lacks a
    request's prompt or fewer than :data:`MIN_PROMPTS` are shared."""
    sets: list[set[str]] = []
    for g in prompts:
        if not g or any(p is None for p in g):
            return None
        sets.append({p for p in g if p is not None})
    if not sets:
        return None
    common = sorted(set.intersection(*sets))
    return common if len(common) >= MIN_PROMPTS else None


def prompt_indices(prompts: Sequence[Sequence[str | None]], rng: Any, n: int) -> list[Any] | None:
    """``n`` paired two-stage resamples of each group's request indices.

    ``prompts``: per group, the prompt (workload item id) of each of its requests.
    Returns, per group, an ``(n, P × m)`` integer array (``P`` shared prompts, ``m``
    the group's most requests on one prompt) whose row ``i`` is resample ``i``: the
    same ``P`` prompts drawn for every group, then ``m`` of each drawn prompt's own
    requests. ``None`` when a request has no prompt or fewer than
    :data:`MIN_PROMPTS` prompts are shared by every group. Raises nothing.
    """
    common = _common(prompts)
    if common is None:
        return None
    n_prompts = len(common)
    pick = rng.integers(0, n_prompts, size=(n, n_prompts))
    tables = []
    for g in prompts:
        ids = np.asarray(g, dtype=object)
        members = [np.flatnonzero(ids == p) for p in common]
        counts = np.asarray([len(x) for x in members])
        table = np.zeros((n_prompts, int(counts.max())), dtype=np.int64)
        for j, x in enumerate(members):
            table[j, : len(x)] = x
        tables.append((table, counts))
    # one uniform draw for every group: equal counts draw the same repeat (the same
    # round, requests being in round order) of the same prompt on every side
    u = rng.random((n, n_prompts, max(t.shape[1] for t, _ in tables)))
    out = []
    for table, counts in tables:
        m = table.shape[1]
        within = np.floor(u[..., :m] * counts[pick][..., None]).astype(np.int64)
        out.append(table[pick[..., None], within].reshape(n, n_prompts * m))
    return out


def prompt_ratio_ci(
    baseline: Mapping[str, Mapping[int, float]],
    candidate: Mapping[str, Mapping[int, float]],
    *,
    invert: bool = False,
    point: float,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, int] | None:
    """95 % paired cluster-bootstrap interval over prompts of the paired-rounds speedup.

    ``baseline``/``candidate``: per prompt (workload item id), its value per round (ms,
    or tokens/s; the median of its requests in that round). The statistic mirrors the
    scorecard's figure: per round, the median over the prompts of the baseline over
    that of the candidate (``candidate / baseline`` with ``invert``), and the geometric
    mean over the rounds — with one round, the ratio of medians. The prompts both sides
    measured are drawn with replacement, the same draw for both sides and every round
    (``n_resamples`` draws from a generator seeded with ``seed``; percentile method,
    Efron & Tibshirani 1993, ch. 13); the rounds are kept, so a drift between rounds
    weighs on both sides as in the figure. The interval is widened to hold ``point``
    (the figure printed beside it) if the percentiles miss it. Dimensionless.

    Returns:
        ``(low, high, prompts)``, or ``None`` with fewer than :data:`MIN_PROMPTS` shared
        prompts with a positive, finite value in a shared round, or a degenerate interval.
    """
    common = sorted(set(baseline) & set(candidate))
    rounds = sorted(
        {r for p in common for r in baseline[p]} & {r for p in common for r in candidate[p]}
    )
    vb, vc = _matrix(baseline, common, rounds), _matrix(candidate, common, rounds)
    keep = [i for i in range(len(common)) if np.isfinite(vb[i]).any() and np.isfinite(vc[i]).any()]
    if len(keep) < MIN_PROMPTS:
        return None
    vb, vc = vb[keep], vc[keep]
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(keep), size=(n_resamples, len(keep)))
    with warnings.catch_warnings():  # a round no drawn prompt measured: nan, left out
        warnings.simplefilter("ignore", RuntimeWarning)
        mb = np.nanmedian(vb[pick], axis=1)
        mc = np.nanmedian(vc[pick], axis=1)
        logs = np.log(mc / mb) if invert else np.log(mb / mc)
        stat = np.exp(np.nanmean(logs, axis=1))
    stat = stat[np.isfinite(stat)]
    if len(stat) < n_resamples // 2:
        return None
    low, high = (float(v) for v in np.percentile(stat, [2.5, 97.5]))
    low, high = min(low, point), max(high, point)
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        return None
    return low, high, len(keep)


def _matrix(
    values: Mapping[str, Mapping[int, float]], prompts: list[str], rounds: list[int]
) -> Any:
    """``(prompts, rounds)`` values; ``nan`` where missing, not positive or not finite."""
    out = np.full((len(prompts), len(rounds)), np.nan)
    for i, p in enumerate(prompts):
        for j, r in enumerate(rounds):
            v = values[p].get(r)
            if v is not None and math.isfinite(v) and v > 0:
                out[i, j] = v
    return out


def combine_log_intervals(point: float, *intervals: tuple[float, float]) -> tuple[float, float]:
    """One interval around ``point`` from intervals of independent sources of variation
    (e.g. the choice of prompts, and the rounds' repeat noise and drift), each holding
    ``point``: on the log scale, each side's distance from ``point`` is the root sum of
    squares of the intervals' distances on that side (the combined standard uncertainty
    of independent components, JCGM 100:2008 "GUM" §5.1). Dimensionless; raises nothing."""
    lp = math.log(point)
    below = math.sqrt(sum((lp - math.log(lo)) ** 2 for lo, _ in intervals))
    above = math.sqrt(sum((math.log(hi) - lp) ** 2 for _, hi in intervals))
    return math.exp(lp - below), math.exp(lp + above)
