"""The store's writer: each thing a run learns becomes its typed record, appended to the store.

Holds :class:`Recorder` (one per run: the ``run_start`` and ``workload`` records,
every finished request as a ``measurement``, ``calibration`` or ``parity_output``
record, the per-block server windows, the capacity search's probes, the run's
``parity``, ``row`` and ``run_end`` records), :func:`record_run_notes` (the notes a
caller adds after the run) and :func:`parity_pid` (the prompt id a parity output is
recorded under). The store writes and indexes each record in one
call: the runner never touches the index.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, Phase, WorkItem, conversation_pid
from deepseekbench._plan._search import Probe
from deepseekbench._plan._sources import PlanSources
from deepseekbench._plan._workload import WorkloadItem
from deepseekbench._records._follow_up import FollowUp, ProfileFollowUp
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._store._records import (
    CalibrationRecord,
    DivergenceMarginRecord,
    EngineDeterminismRecord,
    MeasurementRecord,
    OffProfileRecord,
    ParityEntry,
    ParityOutputRecord,
    ParityRecord,
    RowRecord,
    RunEndRecord,
    RunNoteRecord,
    RunStartRecord,
    SearchProbeRecord,
    ServerCacheRecord,
    ServerMetricsRecord,
    WitnessScoreRecord,
    WorkersRecord,
    WorkloadEntry,
    WorkloadRecord,
)
from deepseekbench._store._results import MarginKey, ResultsStore
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._cache import CacheWindow
from deepseekbench._types._determinism import EngineDeterminism
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._margin import DivergenceMargin
from deepseekbench._types._noise import OffProfile
from deepseekbench._types._parity import ParityOutput
from deepseekbench._types._row import Row
from deepseekbench._types._scored import ScoredOutput
from deepseekbench._version import __version__

__all__ = ["Recorder", "parity_pid", "record_run_notes", "recording_command"]

_COMMAND: ContextVar[str | None] = ContextVar("deepseekbench_command", default=None)
"""The CLI command running (``run``, ``demo``), recorded in ``run_start``."""


@contextmanager
def recording_command(name: str) -> Iterator[None]:
    """Within this block, ``run_start`` records name ``name`` as the command that wrote
    them (``RunStartRecord.command``), so an unfinished run's resume hint names it."""
    token = _COMMAND.set(name)
    try:
        yield
    finally:
        _COMMAND.reset(token)


def parity_pid(item: WorkItem, turn: int) -> str:
    """The parity prompt id of ``turn`` of a parity item (its own id when single-turn)."""
    if item.workload is not None and len(item.workload.turns) > 1:
        return conversation_pid(item.workload.id, turn)
    return item.prompt_id


class Recorder:
    """Turns each finished request into its typed record and appends it to the store
    (which writes and indexes it: the runner never touches the index)."""

    def __init__(
        self, store: ResultsStore, plan_hash: str, run_id: str, speculative: Mapping[str, str]
    ) -> None:
        self.store = store
        self.base: dict[str, Any] = {"plan_hash": plan_hash, "run_id": run_id}
        self.speculative = speculative  # route label -> speculative value

    def sent(
        self,
        block: Block,
        item: WorkItem | None,
        measurement: StreamMeasurement,
        *,
        turn: int = 0,
        queue_ms: float | None = None,
    ) -> None:
        """One finished request of ``block`` (``item`` ``None``: a warm-up, not recorded)."""
        if item is None:  # a warm-up: measured, not recorded
            return
        if block.phase is Phase.measure:
            self._measurement(block, item, measurement, turn, queue_ms)
        elif block.phase is Phase.calibrate:
            self._calibration(block, item, measurement, turn)
        else:
            self._parity_output(block, item, measurement, turn)

    def _calibration(
        self, block: Block, item: WorkItem, measurement: StreamMeasurement, turn: int
    ) -> None:
        """One calibration output on ``off`` (natural length, resumable)."""
        assert item.workload is not None
        w = item.workload
        self.store.append(
            CalibrationRecord(
                **self.base,
                route=block.route,
                cell=block.cell,
                item=w.id,
                turn=turn,
                max_tokens=w.output_target(turn) or item.request.max_tokens or 1,
                measurement=measurement,
            )
        )

    def _measurement(
        self,
        block: Block,
        item: WorkItem,
        measurement: StreamMeasurement,
        turn: int,
        queue_ms: float | None,
    ) -> None:
        assert block.load is not None
        w = item.workload
        self.store.append(
            MeasurementRecord(
                **self.base,
                route=block.route,
                speculative=self.speculative[block.route],
                cell=block.cell,
                load=block.load.key,
                round=block.round,
                index=item.index,
                turn=turn,
                item=w.id if w is not None else None,
                category=w.category if w is not None else None,
                queue_ms=queue_ms,
                measurement=measurement,
            )
        )

    def _parity_output(
        self, block: Block, item: WorkItem, measurement: StreamMeasurement, turn: int
    ) -> None:
        pid = parity_pid(item, turn)
        self.store.append(
            ParityOutputRecord(
                **self.base,
                route=block.route,
                reasoning_mode=block.reasoning_mode.value,
                parity_pass=block.parity_pass,
                prompt_id=pid,
                output=ParityOutput.from_measurement(pid, measurement),
            )
        )

    def start(
        self,
        plan: BenchmarkPlan,
        started_at: str,
        resumed: int,
        sources: PlanSources,
        workload: tuple[str | None, Mapping[str, Sequence[WorkloadItem]]],
        parity_set: tuple[ParityEntry, ...],
        launched: Mapping[str, LaunchRecord] | None = None,
    ) -> None:
        """The ``run_start`` record (the plan and its parity set: what the analysis
        needs) and the ``workload`` manifest (``workload``: the tokenizer's name and,
        per cell, the items measured; recorded as each item's id, category, turn count
        and counted prompt tokens)."""
        cap = sources.capability
        self.store.append(
            RunStartRecord(
                **self.base,
                started_at=started_at,
                resumed=resumed,
                plan=plan.model_dump(mode="json"),
                model_capability=cap.model_dump(mode="json") if cap else None,
                parity_set=parity_set,
                library_version=__version__,
                launched=dict(launched) if launched else None,
                command=_COMMAND.get(),
            )
        )
        tokenizer, items_by_cell = workload
        cells = {
            cid: tuple(
                WorkloadEntry(
                    id=i.id, category=i.category, turns=len(i.turns), prompt_tokens=i.prompt_tokens
                )
                for i in items
            )
            for cid, items in items_by_cell.items()
        }
        self.store.append(WorkloadRecord(**self.base, tokenizer=tokenizer, cells=cells))

    def window(self, block: Block, delta: AcceptanceRecord) -> None:
        """One ``server_metrics`` record: the block's speculative counter window."""
        assert block.load is not None
        self.store.append(
            ServerMetricsRecord(
                **self.base,
                route=block.route,
                cell=block.cell,
                load=block.load.key,
                round=block.round,
                acceptance=delta,
            )
        )

    def cache(self, block: Block, window: CacheWindow) -> None:
        """One ``server_cache`` record per scraped block."""
        assert block.load is not None
        self.store.append(
            ServerCacheRecord(
                **self.base,
                route=block.route,
                cell=block.cell,
                load=block.load.key,
                round=block.round,
                cache=window,
            )
        )

    def workers(
        self,
        block: Block,
        *,
        workers: int,
        window_ns: tuple[int, int],
        deaths: tuple[dict[str, Any], ...],
        clock_offsets_ns: tuple[int, ...],
        basis: str | None = None,
    ) -> None:
        """One ``workers`` record per block sent by several workers: the window
        edges (``window_ns``: start and end, CLOCK_MONOTONIC ns; Ray: mapped from
        wall-clock time), the workers that died, each Ray actor's clock offset
        estimate (ns), and ``basis``: why that many workers (``workers = "auto"``)."""
        self.store.append(
            WorkersRecord(
                **self.base,
                route=block.route,
                phase=block.phase.value,
                cell=block.cell,
                load=block.load.key if block.load is not None else None,
                round=block.round,
                workers=workers,
                window_start_ns=window_ns[0],
                window_end_ns=window_ns[1],
                deaths=deaths,
                clock_offsets_ns=clock_offsets_ns,
                basis=basis,
            )
        )

    def determinism(self, modes: Mapping[str, EngineDeterminism]) -> None:
        """Each route's engine deterministic mode, as read before measuring."""
        for route, mode in modes.items():
            self.store.append(EngineDeterminismRecord(**self.base, route=route, determinism=mode))

    def margin(self, f: FollowUp, margin: DivergenceMargin) -> None:
        """One divergence explained by ``off``'s logprobs."""
        self.store.append(
            DivergenceMarginRecord(
                **self.base,
                route=f.candidate,
                source=f.source,
                reasoning_mode=f.reasoning_mode,
                cell=f.cell,
                load=f.load,
                prompt_id=f.prompt_id,
                margin=margin,
            )
        )

    def margin_at(self, key: MarginKey, margin: DivergenceMargin) -> None:
        """A margin recorded again at ``key`` (its note completed; the latest wins)."""
        route, source, mode, cell, load, pid = key
        self.store.append(
            DivergenceMarginRecord(
                **self.base, route=route, source=source, reasoning_mode=mode, cell=cell,
                load=load, prompt_id=pid, margin=margin,
            )
        )  # fmt: skip

    def witness_score(self, f: FollowUp, scored: ScoredOutput | str) -> None:
        """One sampled output scored by ``off`` in one pass, or the reason it was not."""
        self.store.append(
            WitnessScoreRecord(
                **self.base,
                route=f.candidate,
                source=f.source,
                reasoning_mode=f.reasoning_mode,
                cell=f.cell,
                load=f.load,
                prompt_id=f.prompt_id,
                scored=scored if isinstance(scored, ScoredOutput) else None,
                reason=scored if isinstance(scored, str) else None,
            )
        )

    def profile(self, f: ProfileFollowUp, profile: OffProfile) -> None:
        """``off``'s margins over one whole compared output."""
        self.store.append(
            OffProfileRecord(
                **self.base,
                source=f.source,
                reasoning_mode=f.reasoning_mode,
                cell=f.cell,
                load=f.load,
                prompt_id=f.prompt_id,
                profile=profile,
            )
        )

    def search_probe(
        self, route: str, load: LoadPoint, probe: Probe | None, *, passed: bool
    ) -> None:
        """One ``search_probe`` record: ``route`` at the search level ``load``,
        with what its ``probe`` measured there (``None``: nothing yet) and the verdict."""
        self.store.append(
            SearchProbeRecord(
                **self.base,
                route=route,
                load=load.key,
                arrival=load.arrival.value,
                concurrency=load.concurrency,
                rate_per_s=load.rate_per_s,
                level=load.level,
                slo_attainment=probe.attainment if probe else None,
                n_requests=probe.n if probe else 0,
                request_throughput_per_s=probe.throughput if probe else None,
                passed=passed,
            )
        )

    def finish(
        self,
        parity: Iterable[Mapping[str, Any]],
        rows: Iterable[Row],
        *,
        finished_at: str,
        n_requests: int,
        n_errors: int,
    ) -> None:
        """The run's end: one ``parity`` record per route parity (``parity``: each as
        its JSON dump, with ``route`` and ``reasoning_mode``), one ``row`` record per
        row, then ``run_end``."""
        for dump in parity:
            self.store.append(
                ParityRecord(
                    **self.base,
                    route=dump["route"],
                    reasoning_mode=dump["reasoning_mode"],
                    parity=dict(dump),
                )
            )
        for row in rows:
            self.store.append(RowRecord(**self.base, row=row))
        self.store.append(
            RunEndRecord(
                **self.base, finished_at=finished_at, n_requests=n_requests, n_errors=n_errors
            )
        )


def record_run_notes(path: Path, plan: BenchmarkPlan, notes: Sequence[str]) -> tuple[str, ...]:
    """Append each of ``notes`` (a demo scenario's explanation of its scorecard) to the
    results file ``path`` of a finished run of ``plan`` as a ``run_note`` record, once:
    a note the file already holds for this plan (a rerun of the scenario) is not
    written again. ``report`` and :func:`~deepseekbench.load_results` read them back
    (``RunResult.run_notes``), so the scorecard rebuilt from the file prints the notes
    the run printed. Returns every note the file now holds for the plan, in order.

    Raises:
        ValueError: a note is empty (``pydantic.ValidationError``).
        ResultsInUseError: another run holds the file.
        ResultsFormatError: the file cannot be read back.
        ResultsWriteError: the write failed.
    """
    store = ResultsStore.open(path, plan)
    try:
        plan_hash, run_id = plan.plan_hash(), uuid.uuid4().hex[:12]
        for note in notes:
            if note not in store.state.notes:
                store.append(RunNoteRecord(plan_hash=plan_hash, run_id=run_id, note=note))
        return tuple(store.state.notes)
    finally:
        store.close()
