"""``workers = "auto"``: how many of the pool's workers send each load point.

:class:`AutoWorkers` watches a load point's warm-up requests (every route's, the
``off`` baseline's included: the runner sends them all before the load point's first
measured block, :func:`warm_ups_first`), takes the
worst warm-up's ``client_cpu_share`` (the event loop's CPU s per wall s over the
request, :class:`~deepseekbench.StreamMeasurement`) and sizes the load point with
:func:`~deepseekbench._analysis._workers_estimate.workers_from_share`, bounded to
1..the pool's workers (one per core). The number is chosen once per load point (a
cell at a load) and is the same for every route there, so the client's own overhead
is the same on the rows a speedup compares. Without a warm-up share (``warmup_per_cell
= 0``, or no warm-up measured one) the load point uses every worker.

The estimate is as good as the warm-up is like the load: warm-ups run up to the
load's concurrency, so ``warmup_per_cell`` below it measures a lighter client than
the measured block's (docs/plan.md). Such a load point is not sized from them: it
uses every worker (one per core), and the reason says so, since too few workers bias
the measurement (a saturated client) while too many only cost processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from deepseekbench._analysis._workers_estimate import workers_from_share
from deepseekbench._plan._schedule import Block, Phase, WorkItem
from deepseekbench._records._measurement import StreamMeasurement

__all__ = ["AutoWorkers", "warm_ups_first"]


def _key(block: Block) -> tuple[str, str] | None:
    if block.phase is not Phase.measure or block.load is None:
        return None
    return (block.cell, block.load.key)


@dataclass(slots=True)
class AutoWorkers:
    """Chooses each load point's workers from its warm-ups (see the module docstring).

    Attributes:
        cores: the pool's workers (one per core): the most a load point may use (>= 1).
    """

    cores: int
    _share: dict[tuple[str, str], float] = field(default_factory=dict)
    _warm: dict[tuple[str, str], int] = field(default_factory=dict)
    _light: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    _chosen: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)

    def observe(self, block: Block, measurement: StreamMeasurement) -> None:
        """Take one warm-up request of ``block`` into its load point's estimate
        (ignored once the load point's number is chosen, and outside measure blocks)."""
        key = _key(block)
        share = measurement.client_cpu_share
        if key is None or key in self._chosen or share is None:
            return
        if len(block.warmup) < block.concurrency:  # fewer streams than the load's
            self._light[key] = (len(block.warmup), block.concurrency)
        self._share[key] = max(share, self._share.get(key, 0.0))
        # the workers that sent this block's warm-ups (split_work: k -> k % active)
        sent_on = min(self.cores, block.concurrency, max(1, len(block.warmup)))
        self._warm[key] = max(sent_on, self._warm.get(key, 1))

    def choose(self, block: Block) -> tuple[int, str] | None:
        """The workers ``block`` is sent on (1..``cores``) and why, in words (e.g.
        ``"auto: 2 of 2 cores, warm-up client CPU share 0.93 (93% CPU x 1 worker /
        50% per worker)"``): its load point's choice, made on the first call for that
        load point, then kept; ``None`` outside measure blocks (parity and control
        blocks use every worker)."""
        key = _key(block)
        if key is None:
            return None
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._chosen[key] = self._decide(key)
        return chosen

    def _decide(self, key: tuple[str, str]) -> tuple[int, str]:
        share = self._share.get(key)
        if share is None:
            return (
                self.cores,
                f"auto: {self.cores} of {self.cores} cores, no warm-up client CPU share "
                "(one per core)",
            )
        light = self._light.get(key)
        if light is not None:
            return (
                self.cores,
                f"auto: {self.cores} of {self.cores} cores, warm-ups too light to size "
                f"from ({light[0]} warm-up(s) below concurrency {light[1]}: raise "
                "warmup_per_cell to the concurrency; one per core)",
            )
        est = workers_from_share(min(1.0, max(0.0, share)), self._warm[key], self.cores)
        return (
            est.workers,
            f"auto: {est.workers} of {self.cores} cores, warm-up client CPU share "
            f"{share:.2f} ({est.basis})",
        )


def warm_ups_first(
    work: Sequence[tuple[Block, tuple[WorkItem, ...]]],
) -> list[tuple[Block, tuple[WorkItem, ...]]]:
    """``work`` (the runner's blocks, each with its items still to send) with every
    load point's warm-ups moved before its first block: one warm-up-only entry
    (the block, no items) per route that has warm-ups there, in their order, then
    the load point's blocks without their warm-ups. Other blocks are unchanged.
    ``workers = "auto"`` needs every route's warm-up share before it chooses.
    """
    out: list[tuple[Block, tuple[WorkItem, ...]]] = []
    seen: set[tuple[str, str]] = set()
    for i, (block, items) in enumerate(work):
        key = _key(block)
        if key is None:
            out.append((block, items))
            continue
        if key not in seen:
            seen.add(key)
            out.extend((b, ()) for b, _ in work[i:] if _key(b) == key and b.warmup)
        out.append((dataclasses.replace(block, warmup=()), items))
    return out
