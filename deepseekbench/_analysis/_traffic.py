"""Parity of the measured traffic (pure): each measured request against ``off``'s.

At temperature 0 a speculative route's measured request ``i`` must return
exactly what the ``off`` route returned for request ``i`` of the same cell and
load point (same prompt, same round). The ``off`` route's own rounds, which
repeat the same prompts, are the determinism control. Definitions:
``docs/measurement.md`` ("Parity of the measured traffic").
"""

from __future__ import annotations

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._store._results import MeasureInfo
from deepseekbench._types._parity import (
    DeterminismControl,
    ExactAcceptance,
    ParityOutput,
    ParityResult,
)

__all__ = ["Indexed", "traffic_control", "traffic_parity"]

Indexed = dict[tuple[int, int], tuple[StreamMeasurement, MeasureInfo]]
"""One row's measured requests by ``(request index, conversation turn)``."""


def _request_id(prefix: str, i: int, turn: int) -> str:
    """``request-3``, or ``request-3#2`` for a conversation's second turn."""
    return f"{prefix}-{i}" + (f"#{turn + 1}" if turn else "")


def _outputs(requests: Indexed) -> dict[str, ParityOutput]:
    """The successful requests' outputs, keyed ``request-<index>`` (``#<turn>`` after)."""
    return {
        _request_id("request", i, t): ParityOutput.from_measurement(_request_id("request", i, t), m)
        for (i, t), (m, _) in requests.items()
        if m.error is None
    }


def traffic_control(plan: BenchmarkPlan, off: Indexed) -> DeterminismControl:
    """The ``off`` route's rounds against each other: the same prompt slot in round 0
    and in every later round must give the same output (temperature 0)."""
    checker = ExactAcceptance()
    by_round: dict[int, dict[str, ParityOutput]] = {}
    for (i, t), (m, info) in off.items():
        if m.error is None:
            slot = _request_id("slot", i // plan.rounds, t)
            by_round.setdefault(info.round, {})[slot] = ParityOutput.from_measurement(slot, m)
    first = by_round.get(0, {})
    divergences = []
    n = 0
    for r, outs in sorted(by_round.items()):
        if r == 0:
            continue
        ids = [pid for pid in outs if pid in first]
        c = checker.control(first, outs, ids)
        divergences += list(c.divergences)
        n += c.n_prompts
    deterministic = False if divergences else (True if n else None)
    return DeterminismControl(
        deterministic=deterministic, n_prompts=n, divergences=tuple(divergences)
    )


def traffic_parity(plan: BenchmarkPlan, off: Indexed, cand: Indexed) -> ParityResult:
    """Each measured request of ``cand`` against ``off``'s of the same index (same
    prompt, cell, load point and round); pairs where either side errored are skipped."""
    base, other = _outputs(off), _outputs(cand)
    order = {_request_id("request", i, t): (i, t) for i, t in cand}
    ids = sorted((pid for pid in other if pid in base), key=lambda p: order[p])
    return ExactAcceptance().compare(
        base, other, control=traffic_control(plan, off), prompt_ids=ids
    )
