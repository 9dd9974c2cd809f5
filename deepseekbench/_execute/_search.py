"""The ``[search]`` loop: measure, judge, pick the next level, until done.

The loop owns no measurement and no judgement: the runner hands it ``observe``
(every route's probes, rebuilt from the results store's records) and ``measure``
(send every route's blocks at one load, each request recorded as it arrives).
The next level is :func:`~deepseekbench._plan._search.next_joint_level` of what
was observed, so the decisions are a pure function of the records: a resumed
run replays them, finds the levels already measured in the file (nothing is
sent again) and carries on where the last run stopped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._search import Probe, next_joint_level
from deepseekbench._types._load import LoadPoint

__all__ = ["SearchLoop"]

Observe = Callable[[], Mapping[str, Sequence[Probe]]]
"""Every route's probes so far (route label -> probes at the levels measured)."""
Measure = Callable[[LoadPoint], Awaitable[None]]
"""Measure every route at one load (records written as requests finish)."""
Record = Callable[[LoadPoint, Mapping[str, Sequence[Probe]]], None]
"""Record one level: before measuring it (no probes: the level is announced, so a
run stopped half-way still rebuilds that load's rows) and once measured."""


@dataclass(frozen=True, slots=True)
class SearchLoop:
    """The adaptive loop of one run's ``[search]``.

    Attributes:
        plan: the plan (its ``search`` is set).
        observe, measure, record: see the module docstring.
        announced: the levels an earlier run of the plan announced in the results
            file; measured first (only their missing requests are sent), so a level
            that run stopped in the middle of is completed before any new one.
    """

    plan: BenchmarkPlan
    observe: Observe
    measure: Measure
    record: Record
    announced: tuple[LoadPoint, ...] = ()

    async def run(self) -> list[float]:
        """Measure level after level until every route's search ended; returns the
        levels measured by this call, in order (concurrency or requests/s).

        Raises:
            ValueError: the plan has no ``[search]``.
            Whatever ``measure`` raises (a failed write, a cancelled run): the levels
            measured before stay in the results file.
        """
        search = self.plan.effective_search
        if search is None:
            raise ValueError("the plan has no [search]")
        closed = self.plan.arrival.mode != "rate"
        for load in self.announced:
            await self.measure(load)
            self.record(load, self.observe())
        done: list[float] = []
        for _ in range(search.max_probes):
            level = next_joint_level(search, self.observe(), closed=closed)
            if level is None or level in done:
                break
            load = self.plan.search_load(level)
            self.record(load, {})
            await self.measure(load)
            self.record(load, self.observe())
            done.append(level)
        return done
