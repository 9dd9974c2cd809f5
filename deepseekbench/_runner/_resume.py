"""Resume: what an earlier run of the same plan recorded, and what is left to send.

Holds :func:`open_store` (step 2 of a run: lock the results file, index what it
holds, :class:`Previous`), :func:`pending` (the schedule's blocks less what the file
already holds) and :func:`to_send` (the requests a block's items will send).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, Phase, WorkItem
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._store._results import ResultsState, ResultsStore
from deepseekbench._store._writer import parity_pid

__all__ = ["Previous", "open_store", "pending", "to_send"]


def _turns(item: WorkItem) -> int:
    return len(item.workload.turns) if item.workload is not None else 1


def _recorded(state: ResultsState, block: Block, item: WorkItem) -> list[StreamMeasurement]:
    """The turns of ``item`` an earlier run recorded, in order, up to the first gap
    (measured requests; a parity conversation's complete outputs as measurements)."""
    out: list[StreamMeasurement] = []
    for t in range(_turns(item)):
        if block.phase is Phase.measure:
            assert block.load is not None
            m = state.measurements.get((block.route, block.cell, block.load.key, item.index, t))
        else:
            o = state.outputs.get(
                (block.route, block.reasoning_mode.value, block.parity_pass, parity_pid(item, t))
            )
            m = StreamMeasurement(text=o.text) if o is not None and o.complete else None
        if m is None:
            break
        out.append(m)
    return out


def _remaining(state: ResultsState, block: Block, item: WorkItem) -> WorkItem | None:
    """``item`` with the turns already recorded attached (``done``), or ``None`` when
    nothing is left to send (every turn recorded, or an errored turn ended it)."""
    done = _recorded(state, block, item)
    if len(done) == _turns(item) or any(m.error is not None for m in done):
        return None
    return dataclasses.replace(item, done=tuple(done)) if done else item


def pending(
    blocks: Iterable[Block], state: ResultsState
) -> list[tuple[Block, tuple[WorkItem, ...]]]:
    """The blocks with requests still to make, each with those requests.

    A route's warm-ups move to its first block with work at each cell and load
    point, so a resumed run still warms the route up before measuring it.
    """
    out: list[tuple[Block, tuple[WorkItem, ...]]] = []
    warmups: dict[tuple[str, str, str], tuple[Any, ...]] = {}
    for block in blocks:
        todo = tuple(r for it in block.items if (r := _remaining(state, block, it)) is not None)
        wkey = (block.route, block.cell, block.load.key if block.load else "")
        if block.warmup:
            warmups[wkey] = block.warmup
        if not todo:
            continue
        warm = warmups.pop(wkey, ())
        out.append((dataclasses.replace(block, warmup=warm), todo))
    return out


def to_send(items: Iterable[WorkItem]) -> int:
    """Requests the items will send: every turn not yet recorded."""
    return sum(_turns(it) - len(it.done) for it in items)


def _resumed(state: ResultsState) -> int:
    calibrated = sum(1 for m in state.calibration.values() if m.error is None)
    return (
        len(state.measurements) + sum(1 for o in state.outputs.values() if o.complete) + calibrated
    )


@dataclass(frozen=True, slots=True)
class Previous:
    """What the results file held of this plan when the run opened it."""

    retried: int  # errored measurements dropped, to be measured again
    resumed: int  # measured requests, complete parity and calibration outputs kept
    kept: int  # measured requests kept
    started_at: str | None  # the plan's first run_start in the file


def open_store(
    plan: BenchmarkPlan, path: Path | None, retry_errors: bool
) -> tuple[ResultsStore, Previous]:
    """Step 2: lock the results file (a second run is refused before reading), then
    index what an earlier run of the same plan recorded.

    Raises:
        ResultsInUseError, ResultsFormatError, OSError: see :func:`~deepseekbench.run_plan`.
    """
    store = ResultsStore.open(path, plan)
    retried = store.drop_errored() if retry_errors else 0
    state = store.state
    kept = len(state.measurements)
    return store, Previous(retried, _resumed(state), kept, store.started_at)
