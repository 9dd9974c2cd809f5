"""The parity set's verdict per route and reasoning mode (pure).

Holds :class:`RouteParity` (one route's parity for one reasoning mode: exact
acceptance and task parity against ``off``, or ``off``'s determinism control) and
:func:`build_parity`, which judges it from the outputs a run recorded for its
parity set (:mod:`deepseekbench._types._parity`, :mod:`deepseekbench._plan._tasks`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import reasoning_modes
from deepseekbench._plan._tasks import TaskParityResult, task_parity
from deepseekbench._store._records import ParityEntry
from deepseekbench._store._results import ResultsState
from deepseekbench._types._axes import QualityParity, ReasoningMode, Speculative
from deepseekbench._types._parity import (
    DeterminismControl,
    ExactAcceptance,
    ParityOutput,
    ParityResult,
    baseline_parity,
    row_parity,
)

__all__ = ["RouteParity", "build_parity"]


class RouteParity(BaseModel):
    """Parity of one route for one reasoning mode.

    ``exact`` / ``tasks`` are set on speculative routes; ``control`` on ``off``.
    ``parity`` and ``reason`` are what the route's rows carry.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    route: str
    speculative: Speculative
    reasoning_mode: ReasoningMode
    parity: QualityParity
    reason: str
    exact: ParityResult | None = None
    tasks: TaskParityResult | None = None
    control: DeterminismControl | None = None

    @property
    def first_divergence(self) -> str | None:
        """The first divergence described in one line, or ``None``."""
        if self.exact is not None and self.exact.first_divergence is not None:
            return self.exact.first_divergence.describe("off", self.route)
        if self.control is not None and self.control.divergences:
            return "off vs off: " + self.control.divergences[0].describe("run 1", "run 2")
        return None

    @property
    def task_flips(self) -> tuple[str, ...]:
        """Every pass → fail task flip described in one line."""
        if self.tasks is None:
            return ()
        return tuple(f.describe("off", self.route) for f in self.tasks.flips)


def build_parity(
    plan: BenchmarkPlan, state: ResultsState, parity_set: Sequence[ParityEntry]
) -> dict[tuple[str, ReasoningMode], RouteParity]:
    """Each route's parity per reasoning mode from the run's recorded parity set:
    ``off`` against itself (its determinism control), every speculative route
    against ``off`` (exact acceptance, and task parity where the set has tasks)."""
    ids = [(e.prompt_id, e.text, e.task) for e in parity_set]
    tasks = tuple(e.task for e in parity_set if e.task is not None)
    det_ids = [pid for pid, _, t in ids if t is None or plan.parity.task_temperature == 0]
    checker = ExactAcceptance()
    off = plan.off_route
    out: dict[tuple[str, ReasoningMode], RouteParity] = {}
    for mode in reasoning_modes(plan):

        def outputs(label: str, run: int, mode: ReasoningMode = mode) -> dict[str, ParityOutput]:
            return {
                pid: o
                for pid, _, _ in ids
                if (o := state.outputs.get((label, mode.value, run, pid))) is not None
            }

        base = outputs(off.label, 1)
        control: DeterminismControl | None = None
        if plan.parity.determinism_control:
            control = checker.control(base, outputs(off.label, 2), det_ids)
        p, reason = baseline_parity(base, control, det_ids)
        out[(off.label, mode)] = RouteParity(
            route=off.label,
            speculative=off.speculative,
            reasoning_mode=mode,
            parity=p,
            reason=reason,
            control=control,
        )
        for route in plan.speculative_routes:
            cand = outputs(route.label, 1)
            exact = checker.compare(base, cand, control=control, prompt_ids=det_ids)
            tp: TaskParityResult | None = None
            if tasks:
                tp = task_parity(
                    tasks,
                    base,
                    cand,
                    mode=plan.parity.task_mode,
                    tolerance=plan.parity.tolerance,
                    alpha=plan.parity.alpha,
                )
            p, reason = row_parity(exact, tp)
            out[(route.label, mode)] = RouteParity(
                route=route.label,
                speculative=route.speculative,
                reasoning_mode=mode,
                parity=p,
                reason=reason,
                exact=exact,
                tasks=tp,
            )
    return out
