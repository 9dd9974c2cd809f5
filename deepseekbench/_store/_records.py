"""The records of a results file: one frozen pydantic model per kind, one union.

Every line of a results file is one of these, told apart by its ``"record"``
field (:data:`Record`, a discriminated union). They are written by
:meth:`~deepseekbench._store._results.ResultsStore.append` and read back by
:func:`parse_record`; nothing else builds a record's JSON by hand.

Compatibility: every field a file written before these models (commit 8900197)
lacks has a default, and the fields of those files are exactly the fields
here, so old files read (``tests/data/results_v0``); unknown fields are refused
(``extra="forbid"``), so a typo in a hand-edited file is an error naming its
line. Fields added since (``parity_set`` on ``run_start``) are ignored by older
readers, which look up fields by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter

from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import parity_ids, parity_prompts
from deepseekbench._plan._tasks import Task
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._store._chain import without_digest
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._cache import CacheWindow
from deepseekbench._types._determinism import EngineDeterminism
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._margin import DivergenceMargin
from deepseekbench._types._noise import OffProfile
from deepseekbench._types._parity import ParityOutput
from deepseekbench._types._row import Row
from deepseekbench._types._scored import ScoredOutput

__all__ = [
    "RECORD_ADAPTER",
    "CalibrationRecord",
    "DivergenceMarginRecord",
    "EngineDeterminismRecord",
    "MeasurementRecord",
    "OffProfileRecord",
    "ParityEntry",
    "ParityOutputRecord",
    "ParityRecord",
    "Record",
    "RowRecord",
    "RunEndRecord",
    "RunNoteRecord",
    "RunStartRecord",
    "SearchProbeRecord",
    "ServerCacheRecord",
    "ServerMetricsRecord",
    "WitnessScoreRecord",
    "WorkersRecord",
    "WorkloadEntry",
    "WorkloadRecord",
    "parity_entries",
    "parse_record",
    "record_json",
]

_CONFIG = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

_Count = Annotated[int, Field(strict=True, ge=0)]
"""A non-negative integer, strictly (``1.5``, ``"3"`` and ``true`` are refused)."""


class _Base(BaseModel):
    """Fields every record carries: the plan's hash and the run (process) id."""

    model_config = _CONFIG

    plan_hash: str = Field(min_length=1, description="BenchmarkPlan.plan_hash() of the run")
    run_id: str = Field(default="", description="the process that wrote it (12 hex digits)")


class ParityEntry(BaseModel):
    """One output of the parity set: its prompt id, the prompt text, and its task
    (grader and expected answer) when it is one; what the analysis grades against."""

    model_config = _CONFIG

    prompt_id: str
    text: str
    task: Task | None = None


def parity_entries(plan: BenchmarkPlan, tasks: Sequence[Task]) -> tuple[ParityEntry, ...]:
    """The parity set of ``plan`` with task set ``tasks``, one entry per parity output
    (a conversation's turns one each), as ``run_start`` records it.

    Raises:
        PlanError: a task id collides with a parity prompt id; as
            ``BenchmarkPlan.workload_items`` (the parity conversations).
    """
    return tuple(
        ParityEntry(prompt_id=pid, text=text, task=task)
        for pid, text, task in parity_ids(parity_prompts(plan, tasks))
    )


class RunStartRecord(_Base):
    """A run (or a resume) started: the plan, and what analysis needs from its files.

    ``parity_set`` is ``None`` in files written before results stood alone; the
    analysis then reads the plan's task and dataset files again."""

    record: Literal["run_start"] = "run_start"
    started_at: str = Field(default="?", description="ISO 8601, UTC")
    resumed: int = Field(default=0, ge=0, description="requests kept from the file")
    plan: dict[str, Any]
    model_capability: dict[str, Any] | None = None
    parity_set: tuple[ParityEntry, ...] | None = None
    library_version: str | None = Field(
        default=None, description="the deepseekbench version that wrote it"
    )
    # what was launched per route label ([routes.launch]); None: nothing
    launched: dict[str, LaunchRecord] | None = None
    command: str | None = Field(
        default=None,
        description="the CLI command that wrote it (run, demo); None: the library, or a "
        "file written before it was recorded",
    )


class MeasurementRecord(_Base):
    """One measured request (turn ``turn`` of item ``index``)."""

    record: Literal["measurement"] = "measurement"
    route: str
    speculative: str | None = None
    cell: str
    load: str | None = Field(default=None, description="LoadPoint.key; None before sweeps")
    round: _Count = 0
    index: _Count
    turn: _Count = 0
    item: str | None = None
    category: str | None = None
    queue_ms: float | None = Field(default=None, description="actual - scheduled send (ms)")
    measurement: StreamMeasurement


class ParityOutputRecord(_Base):
    """One parity request's output."""

    record: Literal["parity_output"] = "parity_output"
    route: str
    reasoning_mode: str
    parity_pass: int = Field(
        validation_alias=AliasChoices("pass", "parity_pass"),
        serialization_alias="pass",
        ge=1,
        strict=True,
        description="1, or 2 for the off route's determinism control",
    )
    prompt_id: str
    output: ParityOutput


class ServerMetricsRecord(_Base):
    """A server-wide acceptance delta over one block's ``/metrics`` window."""

    record: Literal["server_metrics"] = "server_metrics"
    route: str
    cell: str
    load: str | None = None
    round: _Count = 0
    acceptance: AcceptanceRecord


# the server's side of a window
class ServerCacheRecord(_Base):
    """Prefix-cache hit rate, KV-cache and queue peaks over one block's ``/metrics`` window."""

    record: Literal["server_cache"] = "server_cache"
    route: str
    cell: str
    load: str | None = None
    round: _Count = 0
    cache: CacheWindow


class ParityRecord(_Base):
    """A route's parity-set verdict as the run computed it (the analysis recomputes it)."""

    record: Literal["parity"] = "parity"
    route: str
    reasoning_mode: str
    parity: dict[str, Any]


class RowRecord(_Base):
    """One row as the run computed it (the analysis recomputes it)."""

    record: Literal["row"] = "row"
    row: Row


class RunEndRecord(_Base):
    """The run finished: measured requests and how many of them errored."""

    record: Literal["run_end"] = "run_end"
    finished_at: str = "?"
    n_requests: int = Field(default=0, ge=0)
    n_errors: int = Field(default=0, ge=0)


class RunNoteRecord(_Base):
    """A note the run's caller adds about the run (a demo scenario's explanation of what
    its scorecard shows), appended after the run; ``report`` prints it with the
    scorecard's notes, as the run did. Files written before it hold none."""

    record: Literal["run_note"] = "run_note"
    note: str = Field(min_length=1, description="the note's text, one scorecard note")


class WorkersRecord(_Base):
    """A block sent by several workers: window edges (CLOCK_MONOTONIC ns; Ray: mapped
    from wall-clock time), the workers that died, each Ray actor's clock offset (ns),
    and ``basis``: why that many workers took part (``workers = "auto"``), else None."""

    record: Literal["workers"] = "workers"
    route: str
    phase: str
    cell: str
    load: str | None = None
    round: _Count = 0
    workers: int = Field(ge=1)
    window_start_ns: int
    window_end_ns: int
    deaths: tuple[dict[str, Any], ...] = ()
    clock_offsets_ns: tuple[int, ...] = ()
    basis: str | None = None


class WorkloadEntry(BaseModel):
    """One workload item of a cell: id, dataset category, turns, counted prompt tokens."""

    model_config = _CONFIG

    id: str
    category: str | None = None
    turns: int = Field(ge=1)
    prompt_tokens: int | None = Field(default=None, ge=0)


class WorkloadRecord(_Base):
    """The workload manifest: the tokenizer and each cell's items."""

    record: Literal["workload"] = "workload"
    tokenizer: str | None = None
    cells: dict[str, tuple[WorkloadEntry, ...]]


# divergence forensics
class DivergenceMarginRecord(_Base):
    """``off``'s logprobs at one divergence (the forensics step's follow-up to ``off``):
    ``route`` is the diverging route (``off`` for a self-flip), ``source`` ``parity`` or
    ``traffic``; ``cell``/``load`` locate a traffic divergence."""

    record: Literal["divergence_margin"] = "divergence_margin"
    route: str
    source: str = "parity"
    reasoning_mode: str = ""
    cell: str | None = None
    load: str | None = None
    prompt_id: str
    margin: DivergenceMargin


class OffProfileRecord(_Base):
    """``off``'s margins over one whole compared output (the forensics step's follow-up
    sent alone; :class:`~deepseekbench._types._noise.OffProfile`): ``source`` ``parity``
    (``reasoning_mode``, ``prompt_id``) or ``traffic`` (``cell``, ``load``,
    ``request-<i>``)."""

    record: Literal["off_profile"] = "off_profile"
    source: str = "parity"
    reasoning_mode: str = ""
    cell: str | None = None
    load: str | None = None
    prompt_id: str
    profile: OffProfile


class WitnessScoreRecord(_Base):
    """One sampled output of ``route`` scored by ``off`` in one pass (the distribution
    witness's follow-up to ``off``): ``scored``, or the ``reason`` it could not be;
    keyed as :class:`DivergenceMarginRecord`. A run that resumes does not ask again."""

    record: Literal["witness_score"] = "witness_score"
    route: str
    source: str = "parity"
    reasoning_mode: str = ""
    cell: str | None = None
    load: str | None = None
    prompt_id: str
    scored: ScoredOutput | None = None
    reason: str | None = None


class EngineDeterminismRecord(_Base):
    """A route's engine deterministic mode, as read before measuring (the
    server's word, the plan's declaration, or unknown); the latest per route wins."""

    record: Literal["engine_determinism"] = "engine_determinism"
    route: str
    determinism: EngineDeterminism = EngineDeterminism()


# capacity under SLO
class SearchProbeRecord(_Base):
    """One route measured at one ``[search]`` level, as the run judged it (the
    analysis recomputes it from the measurements): which load was probed, so a
    resumed run and ``report`` rebuild that load's rows."""

    record: Literal["search_probe"] = "search_probe"
    route: str
    load: str = Field(description="LoadPoint.key of the level")
    arrival: str = Field(description="closed, poisson or gamma")
    concurrency: int = Field(ge=1, description="streams, or the open loop's in-flight cap")
    rate_per_s: float | None = Field(default=None, description="open loop rate, requests/s")
    level: float = Field(gt=0, description="concurrency (closed) or requests/s (open)")
    slo_attainment: float | None = Field(default=None, ge=0, le=1, description="fraction")
    n_requests: int = Field(default=0, ge=0)
    request_throughput_per_s: float | None = Field(default=None, description="requests/s")
    passed: bool = False


# the calibration pass
class CalibrationRecord(_Base):
    """One calibration request on the ``off`` route: turn ``turn`` of
    workload item ``item`` of ``cell``, decoded to its natural end (EOS) under
    ``max_tokens``; its output length pins what every route decodes
    (``workload.output_length = "pinned"``), or measures what lies past EOS
    (``"forced"``)."""

    record: Literal["calibration"] = "calibration"
    route: str
    cell: str
    item: str
    turn: _Count = 0
    max_tokens: int = Field(ge=1, description="the cap it was decoded under, tokens")
    measurement: StreamMeasurement


Record = Annotated[
    CalibrationRecord
    | RunStartRecord
    | MeasurementRecord
    | ParityOutputRecord
    | ServerMetricsRecord
    | ParityRecord
    | RowRecord
    | RunEndRecord
    | RunNoteRecord
    | WorkersRecord
    | WorkloadRecord
    | ServerCacheRecord
    | DivergenceMarginRecord
    | OffProfileRecord
    | WitnessScoreRecord
    | EngineDeterminismRecord
    | SearchProbeRecord,
    Field(discriminator="record"),
]
"""Any results record, told apart by its ``record`` field."""

RECORD_ADAPTER: TypeAdapter[Record] = TypeAdapter(Record)


def parse_record(data: Any) -> Record:
    """The record of one parsed JSON line; its chain ``digest`` (the file's, not the
    record's: :mod:`deepseekbench._store._chain`) is not a field and is set aside.

    Raises:
        pydantic.ValidationError: an unknown kind, a missing or unknown field, or
            a field of the wrong type or range (a negative index or turn).
    """
    if isinstance(data, Mapping):
        data = without_digest(data)
    return RECORD_ADAPTER.validate_python(data)


def record_json(record: Record) -> dict[str, Any]:
    """The JSON object of ``record`` as written (``pass`` under its file name)."""
    return record.model_dump(mode="json", by_alias=True)
