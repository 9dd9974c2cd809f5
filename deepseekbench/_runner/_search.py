"""The capacity search's driver: the runner's side of the ``[search]`` loop.

Holds :class:`SearchDriver`, what :class:`~deepseekbench._execute._search.SearchLoop`
needs from a run: probes rebuilt from the store's records, a level's blocks sent,
each level's ``search_probe`` records written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from deepseekbench._analysis._analysis import build_result
from deepseekbench._analysis._capacity import route_probes
from deepseekbench._execute._prepare import PreparedWorkload
from deepseekbench._execute._search import SearchLoop
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, Phase, WorkItem, build_schedule
from deepseekbench._plan._search import Probe, passed
from deepseekbench._runner._preflight import Checked
from deepseekbench._runner._progress import Progress
from deepseekbench._runner._resume import pending, to_send
from deepseekbench._store._results import ResultsStore
from deepseekbench._store._writer import Recorder
from deepseekbench._types._load import LoadPoint

__all__ = ["SearchDriver", "SendFn"]

SendFn = Callable[[Block, tuple[WorkItem, ...]], Awaitable[None]]
"""Sends one block's items through the run's executor, each recorded as it arrives."""


class SearchDriver:
    """What :class:`~deepseekbench._execute._search.SearchLoop` needs from a run:
    probes rebuilt from the store, a level's blocks sent, probe records written."""

    def __init__(
        self,
        plan: BenchmarkPlan,
        run: Checked,
        store: ResultsStore,
        recorder: Recorder,
        prog: Progress,
        send: SendFn,
        prepared: PreparedWorkload,
    ) -> None:
        self.plan, self.run, self.store, self.recorder = plan, run, store, recorder
        self.prog, self.send, self.prepared = prog, send, prepared

    def loop(self) -> SearchLoop:
        """The search loop, resuming from the levels the store holds announced."""
        announced = tuple(self.store.state.search_loads.values())
        return SearchLoop(self.plan, self.observe, self.measure, self.record, announced)

    def observe(self) -> dict[str, list[Probe]]:
        """Per route, its probes, rebuilt from the store's records."""
        result = build_result(
            self.plan, self.store.state, results_path=None, resumed=0, complete=False,
            parity_set=self.run.parity_set,
        )  # fmt: skip
        return route_probes(result.rows)

    async def measure(self, load: LoadPoint) -> None:
        """Send every route's blocks at the search level ``load`` (less what the file holds)."""
        arrival = self.plan.arrival.model_copy(
            update={"concurrency": load.concurrency}
            if load.rate_per_s is None
            else {"rate_per_s": load.rate_per_s}
        )
        at_level = self.plan.model_copy(update={"arrival": arrival})
        blocks = build_schedule(at_level, self.run.sources.prompts, [], items=self.prepared.cells)
        work = pending([b for b in blocks if b.phase is Phase.measure], self.store.state)
        self.prog.total += sum(to_send(items) + len(b.warmup) for b, items in work)
        for block, items in work:
            await self.send(block, items)

    def record(self, load: LoadPoint, probes: Mapping[str, Sequence[Probe]]) -> None:
        """One ``search_probe`` record per route at the level ``load``, with its verdict."""
        search = self.plan.effective_search
        assert search is not None
        for route in self.plan.routes:
            ps = sorted(probes.get(route.label, ()), key=lambda p: p.level)
            probe = next((p for p in ps if p.level == load.level), None)
            ok = probe is not None and passed(probe, ps, search)
            self.recorder.search_probe(route.label, load, probe, passed=ok)
