"""Which divergences and which ``off`` outputs the forensics step asks ``off`` about (pure).

Divergences (:func:`follow_ups`), from a run's records and its schedule: every
parity-set prompt where a speculative route's output differs from ``off``'s (pass 1),
every prompt where ``off``'s determinism control (pass 2) differs from pass 1 (a
self-flip: ``off`` is the candidate), and every single-turn measured request of a
speculative route whose output differs from ``off``'s request of the same cell, load
point and index (temperature 0 only, as :mod:`deepseekbench._analysis._traffic`). An
output is compared as reasoning text then content (as
:class:`~deepseekbench._types._parity.ExactAcceptance` compares both): a divergence only
inside the reasoning is still a divergence. A divergence already explained in the
results file (a ``divergence_margin`` record) is not asked again. Multi-turn
conversations' later turns are not followed up (their margin stays ``None``).

Profiles (:func:`profile_follow_ups`): ``off``'s compared outputs (parity pass 1 per
reasoning mode; measured traffic per cell and load point), those some route diverged
from first, at most ``parity.profile_outputs`` per group; an output already profiled
(an ``off_profile`` record) is not asked again.
"""

from __future__ import annotations

from collections.abc import Iterable

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, Phase
from deepseekbench._records._follow_up import FollowUp, ProfileFollowUp
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._store._results import MarginKey, ResultsState
from deepseekbench._types._margin import DivergenceMargin
from deepseekbench._types._parity import ParityOutput
from deepseekbench._types._request import ChatRequest

__all__ = [
    "VERIFY_SHAPE_NOTE",
    "compared_text",
    "follow_ups",
    "profile_follow_ups",
    "shown_directly",
]

VERIFY_SHAPE_NOTE = "verify shape shown directly: off's one-pass top-1 here is the route's token"
"""What a margin record's ``note`` says when ``off``'s one-pass score (teacher forcing)
ranks the diverging route's token first at the fork."""


def compared_text(o: ParityOutput | StreamMeasurement) -> str:
    """What parity compares of an output, as one text: its reasoning text, then its
    content (the follow-up's logprobs cover both, reasoning first)."""
    return (o.reasoning_text or "") + o.text


def _parity_requests(blocks: Iterable[Block], off: str) -> dict[tuple[str, str], ChatRequest]:
    """``off``'s first-pass parity requests by (reasoning mode, prompt id)."""
    return {
        (b.reasoning_mode.value, it.prompt_id): it.request
        for b in blocks
        if b.phase is not Phase.measure and b.route == off and b.parity_pass == 1
        for it in b.items
        if it.workload is None or len(it.workload.turns) == 1
    }


def _traffic_requests(blocks: Iterable[Block], off: str) -> dict[tuple[str, str, int], ChatRequest]:
    """``off``'s measured single-turn requests by (cell, load key, index)."""
    return {
        (b.cell, b.load.key, it.index): it.request
        for b in blocks
        if b.phase is Phase.measure and b.route == off and b.load is not None
        for it in b.items
        if it.workload is None or len(it.workload.turns) == 1
    }


def _parity_follow_ups(
    plan: BenchmarkPlan, state: ResultsState, blocks: list[Block]
) -> list[FollowUp]:
    off = plan.off_route.label
    out: list[FollowUp] = []
    for (mode, pid), request in _parity_requests(blocks, off).items():
        base = state.outputs.get((off, mode, 1, pid))
        if base is None or not base.complete:
            continue
        sides = [(r.label, 1) for r in plan.speculative_routes] + [(off, 2)]
        for label, ppass in sides:
            o = state.outputs.get((label, mode, ppass, pid))
            if o is None or not o.complete or compared_text(o) == compared_text(base):
                continue
            if (label, "parity", mode, None, None, pid) in state.margins:
                continue
            cand, other = compared_text(o), compared_text(base)
            out.append(FollowUp(pid, label, request, cand, "parity", mode, other_text=other))
    return out


def _traffic_follow_ups(
    plan: BenchmarkPlan, state: ResultsState, blocks: list[Block]
) -> list[FollowUp]:
    off = plan.off_route.label
    spec = {r.label for r in plan.speculative_routes}
    sent = _traffic_requests(blocks, off)
    out: list[FollowUp] = []
    for (label, cell, load, index, turn), m in state.measurements.items():
        if label not in spec or turn != 0 or m.error is not None or load is None:
            continue
        base = state.measurements.get((off, cell, load, index, 0))
        request = sent.get((cell, load, index))
        if base is None or base.error is not None or request is None:
            continue
        cand, other = compared_text(m), compared_text(base)
        pid = f"request-{index}"
        if cand == other or (label, "traffic", "", cell, load, pid) in state.margins:
            continue
        out.append(FollowUp(pid, label, request, cand, "traffic", "", cell, load, other))
    return out


def follow_ups(plan: BenchmarkPlan, state: ResultsState, blocks: Iterable[Block]) -> list[FollowUp]:
    """Every divergence of the run still to explain (see the module docstring);
    ``blocks`` is the run's whole schedule (what each request was)."""
    if not plan.parity.forensics:
        return []
    bl = list(blocks)
    out = _parity_follow_ups(plan, state, bl)
    if plan.temperature == 0:
        out += _traffic_follow_ups(plan, state, bl)
    return out


def _bounded(
    items: list[tuple[bool, ProfileFollowUp]], state: ResultsState, limit: int
) -> list[ProfileFollowUp]:
    """Diverged outputs first (stable), at most ``limit``, less those already profiled."""
    items.sort(key=lambda x: not x[0])
    out = []
    for _, f in items[:limit]:
        if (f.source, f.reasoning_mode, f.cell, f.load, f.prompt_id) not in state.profiles:
            out.append(f)
    return out


def _diverged(state: ResultsState, f: ProfileFollowUp) -> bool:
    """Some route diverged from this ``off`` output (a margin record names it)."""
    where = (f.source, f.reasoning_mode, f.cell, f.load, f.prompt_id)
    return any(k[1:] == where for k in state.margins)


def profile_follow_ups(
    plan: BenchmarkPlan, state: ResultsState, blocks: Iterable[Block]
) -> list[ProfileFollowUp]:
    """Every compared ``off`` output still to profile (see the module docstring);
    ``blocks`` is the run's whole schedule. Read after the divergence follow-ups are
    recorded: an output with a margin record (some route diverged from it) goes first."""
    if not plan.parity.forensics or plan.parity.profile_outputs == 0:
        return []
    off, bl, limit = plan.off_route.label, list(blocks), plan.parity.profile_outputs
    groups: dict[tuple[str, str | None, str | None], list[tuple[bool, ProfileFollowUp]]] = {}
    for (mode, pid), request in _parity_requests(bl, off).items():
        base = state.outputs.get((off, mode, 1, pid))
        if base is not None and base.complete:
            f = ProfileFollowUp(pid, request, compared_text(base), "parity", mode)
            groups.setdefault(("parity", mode, None), []).append((_diverged(state, f), f))
    if plan.temperature == 0:
        sent = _traffic_requests(bl, off)
        for (label, cell, load, index, turn), m in state.measurements.items():
            if label != off or turn != 0 or m.error is not None or load is None:
                continue
            sent_request = sent.get((cell, load, index))
            if sent_request is None:
                continue
            pid = f"request-{index}"
            f = ProfileFollowUp(pid, sent_request, compared_text(m), "traffic", "", cell, load)
            groups.setdefault(("traffic", cell, load), []).append((_diverged(state, f), f))
    return [f for items in groups.values() for f in _bounded(items, state, limit)]


def shown_directly(state: ResultsState) -> list[tuple[MarginKey, DivergenceMargin]]:
    """Margins whose fork ``off``'s one-pass score ranks the route's token first (the
    verify shape, shown directly) and whose record does not say so yet: each with
    :data:`VERIFY_SHAPE_NOTE` added to its note, to be recorded again (the latest wins)."""
    out = []
    for key, m in state.margins.items():
        prof = state.profiles.get((key[1], key[2], key[3], key[4], key[5]))
        if prof is None or m.token_index is None or VERIFY_SHAPE_NOTE in m.note:
            continue
        top1 = prof.one_pass_top1(m.token_index)
        if top1 is not None and top1 == m.candidate_token:
            note = f"{m.note}; {VERIFY_SHAPE_NOTE}" if m.note else VERIFY_SHAPE_NOTE
            out.append((key, m.model_copy(update={"note": note})))
    return out
