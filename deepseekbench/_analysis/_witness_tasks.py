"""Which sampled outputs the distribution witness asks ``off`` to score (pure).

Above temperature 0 every route's sampled outputs are scored by ``off`` in one pass
(teacher forcing; :mod:`deepseekbench._execute._teacher_force`), ``off``'s own included
(the control). The outputs are the parity set's task outputs when
``parity.task_temperature`` > 0 (source ``parity``) and the measured single-turn traffic
when the plan's ``temperature`` > 0 (source ``traffic``): the traffic is what users'
settings sample, the tasks are a small fixed set. Left out: failed requests, outputs
with reasoning text (the scoring forces the content only, whose distribution depends on
the reasoning), requests decoded past EOS or with a minimum length (the engine masks
EOS there, so the sampled law is not ``off``'s), later turns of conversations, and a
second output sampled with a seed already taken (rounds send each workload item again
with its seed; a seed shared by different prompts gives them the same uniforms position
by position): only the first output of each seed is an independent draw. Above
temperature 0 the schedule seeds each prompt apart
(:func:`~deepseekbench._plan._schedule.sampled_seed`).

Each output carries the token ids its route sampled where the engine streamed them
(``return_token_ids``; :attr:`~deepseekbench._dialects.EngineDialect.token_id_controls`):
``off`` then scores those ids, not the re-tokenized text.

Bounded per route by ``parity.witness_max_requests`` and ``parity.witness_max_tokens``
(the output tokens scored; usage's ``completion_tokens``, else the characters as an
upper bound), outputs taken in schedule order; the whole run costs at most the routes
times those bounds. An output already scored in the results file (a
``witness_score`` record) is not asked again, and counts against the bounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import zip_longest

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, Phase
from deepseekbench._records._follow_up import FollowUp
from deepseekbench._store._results import ResultsState
from deepseekbench._types._request import ChatRequest

__all__ = ["follow_up_key", "witness_tasks"]


def follow_up_key(f: FollowUp) -> tuple[str, str, str, str | None, str | None, str]:
    """The results-file key of ``f``'s score (as ``ResultsState.witness_scores``)."""
    return (f.candidate, f.source, f.reasoning_mode, f.cell, f.load, f.prompt_id)


def _sampled(request: ChatRequest) -> bool:
    """True when ``request`` samples ``off``'s law as is (no EOS masking)."""
    extra = request.extra_body or {}
    forced = request.reach_max_tokens or extra.get("ignore_eos") or extra.get("min_tokens")
    return (request.temperature or 0.0) > 0 and not forced


def _parity(plan: BenchmarkPlan, state: ResultsState, blocks: list[Block]) -> Iterator[FollowUp]:
    for b in blocks:
        if b.phase is Phase.measure or b.parity_pass != 1:
            continue
        mode = b.reasoning_mode.value
        for it in b.items:
            o = state.outputs.get((b.route, mode, 1, it.prompt_id))
            if o is None or not o.complete or o.reasoning_text or not _sampled(it.request):
                continue
            ids = o.token_ids
            yield FollowUp(
                it.prompt_id, b.route, it.request, o.text, "parity", mode, candidate_ids=ids
            )


def _traffic(plan: BenchmarkPlan, state: ResultsState, blocks: list[Block]) -> Iterator[FollowUp]:
    for b in blocks:
        if b.phase is not Phase.measure or b.load is None:
            continue
        for it in b.items:
            if it.workload is not None and len(it.workload.turns) != 1:
                continue
            m = state.measurements.get((b.route, b.cell, b.load.key, it.index, 0))
            if m is None or m.error is not None or m.reasoning_text or not _sampled(it.request):
                continue
            pid = f"request-{it.index}"
            ids = tuple(m.token_ids) if m.token_ids is not None else None
            yield FollowUp(
                pid, b.route, it.request, m.text, "traffic", "", b.cell, b.load.key,
                candidate_ids=ids,
            )  # fmt: skip


def _tokens(f: FollowUp, state: ResultsState) -> int:
    """Output tokens the score covers: the sampled ids when the engine returned them,
    else the measurement's ``completion_tokens`` when recorded, else the characters
    (an upper bound for any tokenizer)."""
    if f.candidate_ids is not None:
        return len(f.candidate_ids)
    if f.source == "traffic" and f.cell is not None:
        idx = int(f.prompt_id.removeprefix("request-"))
        m = state.measurements.get((f.candidate, f.cell, f.load, idx, 0))
        if m is not None and m.completion_tokens is not None:
            return m.completion_tokens
    return len(f.candidate_text)


def _in_turn(found: Iterable[FollowUp]) -> list[FollowUp]:
    """One output of each route in turn (routes in first-seen order; the cost is asked of
    ``off`` in that order, so every route's share arrives together), one per seed and
    route: a repeated seed replays the engine's random stream (a round repeating an item,
    or one seed for every prompt), so those outputs are not independent draws."""
    by_route: dict[str, list[FollowUp]] = {}
    seen: set[tuple[str, str]] = set()
    for f in found:
        key = (f.candidate, f"seed {f.request.seed}")
        if key in seen:
            continue
        seen.add(key)
        by_route.setdefault(f.candidate, []).append(f)
    return [f for group in zip_longest(*by_route.values()) for f in group if f is not None]


def witness_tasks(
    plan: BenchmarkPlan, state: ResultsState, blocks: Iterable[Block]
) -> list[FollowUp]:
    """The outputs still to score, within the bounds (module docstring); ``blocks``
    is the run's whole schedule. Empty when ``parity.witness`` is off or nothing was
    sampled."""
    p = plan.parity
    if not p.witness:
        return []
    bl = list(blocks)
    found: list[FollowUp] = []
    if p.task_temperature > 0:
        found += _parity(plan, state, bl)
    if plan.temperature > 0:
        found += _traffic(plan, state, bl)
    asked: dict[str, int] = {}
    tokens: dict[str, int] = {}
    out: list[FollowUp] = []
    for f in _in_turn(found):
        cost = _tokens(f, state)
        n, t = asked.get(f.candidate, 0), tokens.get(f.candidate, 0)
        if n + 1 > p.witness_max_requests or t + cost > p.witness_max_tokens:
            continue
        asked[f.candidate], tokens[f.candidate] = n + 1, t + cost
        if follow_up_key(f) not in state.witness_scores:
            out.append(f)
    return out
