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
   the group's largest prompt holds, so repeat noise is covered too.

Only the prompts every group measured enter (a prompt missing from one group cannot
pair); with fewer than :data:`MIN_PROMPTS` of them, the caller falls back to its
repeat-noise interval and says so. The scorecard's speedup interval
(:func:`~deepseekbench.compare_speedup`) and ``compare``'s intervals
(:func:`~deepseekbench.compare_runs`) both draw their indices here, so the two cover
the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["MIN_PROMPTS", "prompt_indices", "prompt_ratio_ci"]

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


def prompt_indices(
    prompts: Sequence[Sequence[str | None]], rng: Any, n: int
) -> list[Any] | None:
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
    out = []
    for g in prompts:
        ids = np.asarray(g, dtype=object)
        members = [np.flatnonzero(ids == p) for p in common]
        counts = np.asarray([len(x) for x in members])
        m = int(counts.max())
        table = np.zeros((n_prompts, m), dtype=np.int64)
        for j, x in enumerate(members):
            table[j, : len(x)] = x
        within = np.floor(rng.random((n, n_prompts, m)) * counts[pick][..., None]).astype(np.int64)
        out.append(table[pick[..., None], within].reshape(n, n_prompts * m))
    return out


def prompt_ratio_ci(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    *,
    invert: bool = False,
    point: float,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, int] | None:
    """95 % paired cluster-bootstrap interval over prompts of a ratio of medians.

    ``baseline``/``candidate``: per prompt (workload item id), that prompt's
    per-request values (ms, or tokens/s), repeats included. The statistic is
    ``median(baseline) / median(candidate)`` over the resampled requests
    (``candidate / baseline`` with ``invert``), dimensionless; resampling as
    :func:`prompt_indices`, ``n_resamples`` draws from a generator seeded with
    ``seed`` (percentile method, Efron & Tibshirani 1993, ch. 13). The interval is
    widened to hold ``point`` (the figure printed beside it) if the percentiles miss
    it, so an interval never contradicts its own figure.

    Returns:
        ``(low, high, prompts)``, or ``None`` with fewer than :data:`MIN_PROMPTS`
        prompts with a positive, finite value on both sides, or a degenerate interval.
    """
    b_ids, b_vals = _flat(baseline)
    c_ids, c_vals = _flat(candidate)
    rng = np.random.default_rng(seed)
    picks = prompt_indices((b_ids, c_ids), rng, n_resamples)
    if picks is None:
        return None
    mb = np.median(b_vals[picks[0]], axis=1)
    mc = np.median(c_vals[picks[1]], axis=1)
    ratio = mc / mb if invert else mb / mc
    low, high = (float(v) for v in np.percentile(ratio, [2.5, 97.5]))
    low, high = min(low, point), max(high, point)
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        return None
    n_prompts = len(set(b_ids) & set(c_ids))
    return low, high, n_prompts


def _flat(by_prompt: Mapping[str, Sequence[float]]) -> tuple[list[str | None], Any]:
    """The positive, finite values and each one's prompt, in prompt order."""
    ids: list[str | None] = []
    values: list[float] = []
    for prompt, xs in by_prompt.items():
        for x in xs:
            if math.isfinite(x) and x > 0:
                ids.append(prompt)
                values.append(float(x))
    return ids, np.asarray(values, dtype=float)
