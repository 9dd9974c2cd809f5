"""Which divergences the forensics step asks ``off`` about (pure).

From a run's records and its schedule: every parity-set prompt where a speculative
route's output differs from ``off``'s (pass 1), every prompt where ``off``'s determinism
control (pass 2) differs from pass 1 (a self-flip: ``off`` is the candidate), and every
single-turn measured request of a speculative route whose text differs from ``off``'s
request of the same cell, load point and index (temperature 0 only, as
:mod:`deepseekbench._analysis._traffic`). A divergence already explained in the results
file (a ``divergence_margin`` record) is not asked again. Multi-turn conversations'
later turns are not followed up (their margin stays ``None``).
"""

from __future__ import annotations

from collections.abc import Iterable

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, Phase
from deepseekbench._records._follow_up import FollowUp
from deepseekbench._store._results import ResultsState
from deepseekbench._types._request import ChatRequest

__all__ = ["follow_ups"]


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
            if o is None or not o.complete or o.text == base.text:
                continue
            if (label, "parity", mode, None, None, pid) in state.margins:
                continue
            out.append(FollowUp(pid, label, request, o.text, "parity", mode, other_text=base.text))
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
        if base is None or base.error is not None or request is None or base.text == m.text:
            continue
        pid = f"request-{index}"
        if (label, "traffic", "", cell, load, pid) in state.margins:
            continue
        out.append(FollowUp(pid, label, request, m.text, "traffic", "", cell, load, base.text))
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
