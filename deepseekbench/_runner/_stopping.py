"""Sequential stopping in the run: which measure blocks a decided comparison skips.

With ``[stopping] mode = "sequential"`` the schedule holds ``cap`` rounds; before
each measure block the runner asks :class:`SequentialSkip` whether the block's route
is already decided at its cell and load point (the decisions of
``deepseekbench._analysis._stopping``, replayed from the records written so far, so a
resumed run rebuilds them from the results file). ``off``'s block is skipped only
once every route compared with it is decided by a verdict (a route at its cap ran
every round, and ``off``'s rounds pair with them).
"""

from __future__ import annotations

from collections.abc import Sequence

from deepseekbench._analysis._rowstats import RowRequests
from deepseekbench._analysis._stopping import (
    LineKey,
    decide_lines,
    level_failed,
    state_requests,
)
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, Phase
from deepseekbench._runner._resume import pending
from deepseekbench._store._results import ResultsState

__all__ = ["SequentialSkip"]


class SequentialSkip:
    """Whether a measure block is skipped because its comparison is decided.

    ``blocks``: the run's whole schedule (its parity blocks say whether a route's
    parity set ran); ``state``: the records, read at each question.
    """

    def __init__(self, plan: BenchmarkPlan, blocks: Sequence[Block], state: ResultsState) -> None:
        self.plan, self.state = plan, state
        self.parity = [b for b in blocks if b.phase is Phase.parity]
        self.plan_loads = {lp.key for lp in plan.load_points}

    def _parity_ready(self, route: str) -> bool:
        own = [b for b in self.parity if b.route == route]
        return not pending(own, self.state)

    def skip(self, block: Block) -> bool:
        """True when ``block`` is a measure block of a decided comparison, or of a
        ``[search]`` level its route already failed (:func:`level_failed`; single-turn
        items only); always ``False`` outside ``[stopping]`` sequential."""
        if not self.plan.sequential or block.phase is not Phase.measure or block.load is None:
            return False
        cell, load = block.cell, block.load.key
        by_route = state_requests(self.state, cell, load, self.plan.slo.limits)
        none = RowRequests((), self.plan.slo.limits)
        if load not in self.plan_loads:  # a [search] level: attainment decides it
            single = all(it.workload is None or len(it.workload.turns) == 1 for it in block.items)
            return single and level_failed(self.plan, by_route.get(block.route, none))
        lines: dict[LineKey, RowRequests] = {
            (r.label, cell, load): by_route.get(r.label, none) for r in self.plan.routes
        }
        decisions = decide_lines(self.plan, lines, self._parity_ready)
        if block.route == self.plan.off_route.label:  # needed while any route runs on
            return bool(decisions) and all(s.decided for s in decisions.values())
        stop = decisions.get((block.route, cell, load))
        return stop is not None and stop.decided
