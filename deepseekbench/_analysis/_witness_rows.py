"""The distribution witness's verdict per route and reasoning mode, and its row fields (pure).

For each route (``off`` included: its own sampled outputs are the control) the
``witness_score`` records of the results file (``off``'s one-pass scoring of the route's
sampled outputs) are tested with :func:`~deepseekbench._analysis._witness.witness_groups`
under the sampling parameters each output was sampled with (temperature, and the route's
``top_p``/``top_k`` request extras; the plan's requests set no others). The verdict
(:func:`witness_verdict`), at the plan's ``parity.alpha``:

- ``differs`` when the witness rejects (p below α, or a token outside the truncated
  support);
- ``unknown`` when it cannot judge: the engine cannot teacher-force or apply the
  parameters in a known order (the reason), no output was scored, the logprobs are not
  the raw model's, or fewer than ``parity.witness_min_tokens`` informative tokens were
  tested (the positions ``parity.witness_max_top1`` selects; then the distortion it
  could have caught is stated, and "not significant" is not "verified");
- ``verified`` otherwise, only together with the rest of parity (a row is verified when
  its other parity evidence is, and the witness accepts).

Definitions and citations: :mod:`deepseekbench._analysis._witness` and
docs/rows-and-gate.md ("Parity at temperature > 0: the distribution witness").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deepseekbench._analysis._witness import (
    SamplingSpec,
    WitnessPosition,
    WitnessResult,
    near_certain_reason,
    sampling_order_reason,
    witness_groups,
)
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._routes import RoutePlan
from deepseekbench._store._results import ResultsState
from deepseekbench._types._axes import QualityParity
from deepseekbench._types._scored import ScoredOutput

__all__ = ["RouteWitness", "apply_witness", "route_witnesses", "witness_verdict"]

WITNESS_SEED_SALT = 0x5EED
"""Mixed into the plan's parity seed for the PIT randomisation (fixed: same records,
same verdict)."""


@dataclass(frozen=True, slots=True)
class RouteWitness:
    """One route's distribution witness for one reasoning mode (frozen; built by
    :func:`route_witnesses` from a results file, read by :func:`witness_verdict`).

    Attributes:
        result: the :class:`~deepseekbench.WitnessResult` (tests, p-value, tokens
            tested, power), ``None`` when no position could be tested.
        reason: why outputs were left out or there is no result (``"; "``-joined), or
            ``None``.
        requests: scored outputs (``witness_score`` records; an output scored on its
            token ids took two HTTP requests to ``off``, one on its text one).
        scored_tokens: output tokens ``off`` scored (tokens).
        by_ids / by_text: scored outputs that took each path (the sampled token ids;
            the re-tokenized text: :data:`~deepseekbench._types._scored.ScoredBy`).
    """

    result: WitnessResult | None
    reason: str | None
    requests: int
    scored_tokens: int
    by_ids: int = 0
    by_text: int = 0


def spec_for(plan: BenchmarkPlan, route: RoutePlan, source: str) -> SamplingSpec | str:
    """The sampling parameters ``route``'s ``source`` outputs were sampled with, or why
    the witness cannot know them (an engine order it does not model)."""
    t = plan.parity.task_temperature if source == "parity" else plan.temperature
    extras = route.request_extras
    top_p = float(extras.get("top_p", 1.0) or 1.0)
    top_k_raw = extras.get("top_k")
    top_k = int(top_k_raw) if isinstance(top_k_raw, int) and top_k_raw > 0 else None
    min_p = float(extras.get("min_p", 0.0) or 0.0)
    why = sampling_order_reason(route.dialect.value, top_p=top_p, top_k=top_k, min_p=min_p)
    if why is not None:
        return why
    if t <= 0:
        return "greedy decoding (temperature 0): parity is exact acceptance there"
    return SamplingSpec(temperature=t, top_p=top_p, top_k=top_k)


def _mode_of(plan: BenchmarkPlan, source: str, mode: str, cell: str | None) -> str:
    if source == "parity" or cell is None:
        return mode
    for c in plan.cells:
        if c.cell_id == cell:
            return c.reasoning_mode.value
    return mode


def _retokenized(state: ResultsState, key: tuple[Any, ...], scored: int) -> str:
    """Why a measured output's scoring cannot stand for the tokens the route sampled: the
    engine counted more output tokens (``usage.completion_tokens``) than ``off`` scored
    beyond the one end token a stopped output adds, so ``off`` re-tokenized the text
    differently (a sampled non-canonical tokenization: merged pieces) and the scored
    positions are not the sampled ones; ``""`` when they agree or nothing says."""
    label, source, _, cell, load, pid = key
    if source != "traffic" or not str(pid).startswith("request-"):
        return ""
    m = state.measurements.get((label, cell, load, int(str(pid).removeprefix("request-")), 0))
    sampled = m.completion_tokens if m is not None else None
    if sampled is None or sampled - scored in (0, 1):
        return ""
    return (
        "outputs whose engine counted more tokens than off's re-tokenized text holds "
        "(a sampled non-canonical tokenization) left out"
    )


@dataclass(slots=True)
class _Collected:
    groups: list[tuple[SamplingSpec, list[WitnessPosition]]]
    reasons: list[str]
    requests: int = 0
    tokens: int = 0
    by_ids: int = 0
    by_text: int = 0


def _collect(plan: BenchmarkPlan, state: ResultsState, route: RoutePlan, mode: str) -> _Collected:
    """The route's scored outputs for ``mode`` grouped by source, the reasons some are
    missing, the cost (requests, tokens scored) and the outputs scored by each path."""
    groups: dict[str, list[WitnessPosition]] = {}
    reasons: list[str] = []
    requests = tokens = by_ids = by_text = 0
    for key in sorted(state.witness_scores, key=lambda k: tuple(str(x) for x in k)):
        label, source, rmode, cell, _, _ = key
        if label != route.label or _mode_of(plan, source, rmode, cell) != mode:
            continue
        got = state.witness_scores[key]
        requests += 1
        if not isinstance(got, ScoredOutput):
            reasons.append(got)
            continue
        tokens += len(got.positions)
        gap = "" if got.scored_by == "token_ids" else _retokenized(state, key, len(got.positions))
        if gap:
            reasons.append(gap)
            continue
        if got.logprobs_kind != "raw":
            reasons.append(f"off served {got.logprobs_kind} logprobs, not the model's raw ones")
            continue
        if got.scored_by == "token_ids":
            by_ids += 1
        else:
            by_text += 1
        groups.setdefault(source, []).extend(got.positions)
    out: list[tuple[SamplingSpec, list[WitnessPosition]]] = []
    for source, positions in sorted(groups.items()):
        spec = spec_for(plan, route, source)
        if isinstance(spec, str):
            reasons.append(spec)
        else:
            out.append((spec, positions))
    return _Collected(out, reasons, requests, tokens, by_ids, by_text)


def route_witnesses(
    plan: BenchmarkPlan, state: ResultsState
) -> dict[tuple[str, str], RouteWitness]:
    """Every route's witness per reasoning mode from the results file's
    ``witness_score`` records, keyed ``(route label, reasoning mode value)``; a route
    with no record has no entry. Tested at ``plan.parity.alpha`` with the plan's
    ``witness_top_k`` and ``witness_max_top1``, the PIT seeded from
    ``parity.seed`` (same records, same verdict). Raises nothing."""
    modes = {c.reasoning_mode.value for c in plan.cells} | {
        key[2] for key in state.witness_scores if key[1] == "parity"
    }
    out: dict[tuple[str, str], RouteWitness] = {}
    for route in plan.routes:
        for mode in sorted(modes):
            c = _collect(plan, state, route, mode)
            if c.requests == 0:
                continue
            result = None
            if c.groups:
                result = witness_groups(
                    c.groups,
                    top_k=plan.parity.witness_top_k,
                    alpha=plan.parity.alpha,
                    seed=plan.parity.seed ^ WITNESS_SEED_SALT,
                    max_top1=plan.parity.witness_max_top1,
                )
            reason = "; ".join(sorted(set(c.reasons))) or None
            out[(route.label, mode)] = RouteWitness(
                result, reason, c.requests, c.tokens, c.by_ids, c.by_text
            )
    return out


def _excluded(r: WitnessResult) -> str:
    """The excluded tokens in a few words: the near-certain ones, then the rest."""
    near = sum(e.tokens for e in r.exclusions if e.reason == near_certain_reason(r.max_top1))
    other = r.tokens_excluded - near
    words = f"{near} near-certain excluded (tempered top-1 above {r.max_top1:g})"
    return words + (f", {other} for other reasons" if other else "")


def _outside_words(r: WitnessResult) -> str:
    """The tokens outside ``off``'s top-k set and their check, in a few words."""
    words = f"tests conditional on off's top-k set, {r.outside_topk} tokens outside it"
    if not r.outside_checked:
        return words + " (its mass unknown: share not checked)"
    return words + (
        f" ({r.outside_checked_count} of {r.outside_checked} where its mass is known, "
        f"{r.outside_expected:.1f} expected, p={r.outside_p_value:.3g})"
    )


def _paths(w: RouteWitness) -> str:
    """Which path the tested outputs took, in a few words."""
    if not w.by_text:
        return f"all {w.by_ids} outputs scored on the sampled token ids"
    if not w.by_ids:
        return (
            f"all {w.by_text} outputs scored on re-tokenized text (the engine returned "
            "no sampled token ids)"
        )
    return f"{w.by_ids} outputs scored on the sampled token ids, {w.by_text} on re-tokenized text"


def witness_verdict(w: RouteWitness | None, min_tokens: int) -> tuple[QualityParity, str]:
    """The witness's own verdict for ``w`` and one line saying why (module docstring):
    ``differs`` when it rejects, ``unknown`` with no result or fewer than
    ``min_tokens`` tokens tested (the line then says what it could have caught),
    ``verified`` otherwise. The line states the tokens tested and excluded, the
    p-value, the log-score z, the detectable PIT-CDF distance and log-score shift at
    the stated power, the tokens outside ``off``'s top-k set, the scoring path, and
    the effective temperature the tokens fit (a diagnosis). Raises nothing."""
    if w is None:
        return QualityParity.unknown, "distribution witness: no sampled output was scored"
    r = w.result
    if r is None:
        return QualityParity.unknown, f"distribution witness: {w.reason or 'no positions'}"
    figures = (
        f"{r.tokens_tested} informative tokens tested ({_excluded(r)}), p={r.p_value:.3g} "
        f"(alpha {r.alpha:g}; log-score z={r.score_statistic:+.2f}); catches a PIT-CDF "
        f"distance of {r.detectable_distance:.3f} or a log-score shift of "
        f"{r.detectable_score_shift:.3f} sd per token at power {r.power:g}; "
        f"{_outside_words(r)}"
    )
    figures += f"; {_paths(w)}"
    if r.effective_temperature is not None:  # a diagnosis only: never moves the verdict
        figures += f"; {r.effective_temperature.words()}"
    if w.reason:  # outputs left out beside the tested ones: say which
        figures += f"; {w.reason}"
    if r.rejects:
        extra = f", {r.outside_support} tokens outside the support" if r.outside_support else ""
        return QualityParity.differs, f"distribution witness rejects: {figures}{extra}"
    if r.tokens_tested < min_tokens:
        return QualityParity.unknown, (
            f"distribution witness: sample too small ({figures}; "
            f"parity.witness_min_tokens is {min_tokens})"
        )
    return QualityParity.verified, f"distribution witness accepts: {figures}"


def _fields(w: RouteWitness | None, note: str) -> dict[str, Any]:
    if w is None:
        return {"witness_note": note}
    r = w.result
    out: dict[str, Any] = {
        "witness_requests": w.requests,
        "witness_scored_tokens": w.scored_tokens,
        "witness_note": note,
    }
    if r is not None:
        out |= {
            "parity_basis": "distribution",
            "witness_test": r.test,
            "witness_statistic": r.statistic,
            "witness_p_value": r.p_value,
            "witness_tokens_tested": r.tokens_tested,
            "witness_tokens_excluded": r.tokens_excluded,
            "witness_detectable_distance": r.detectable_distance,
            "witness_power": r.power,
        }
    return out


def apply_witness(
    plan: BenchmarkPlan,
    witnesses: Mapping[tuple[str, str], RouteWitness],
    route: str,
    mode: str,
    parity: tuple[QualityParity, str],
) -> tuple[QualityParity, str, dict[str, Any]]:
    """A row's ``(parity, reason, fields)`` once the witness is joined: unchanged at
    temperature 0 (nothing sampled) or with the witness off; else ``differs`` when
    either side differs, ``verified`` only when both are, ``unknown`` otherwise."""
    sampled = plan.temperature > 0 or plan.parity.task_temperature > 0
    if not sampled or not plan.parity.witness:
        return parity[0], parity[1], {}
    w = witnesses.get((route, mode))
    verdict, note = witness_verdict(w, plan.parity.witness_min_tokens)
    before = parity[1].replace(
        "the row relies on task parity", "the distribution witness judges it"
    )
    reason = f"{before}; {note}"
    if QualityParity.differs in (parity[0], verdict):
        return QualityParity.differs, reason, _fields(w, note)
    if parity[0] is QualityParity.verified and verdict is QualityParity.verified:
        return QualityParity.verified, reason, _fields(w, note)
    return QualityParity.unknown, reason, _fields(w, note)
