"""The results store: an append-only JSONL file of a run's records, and reading it back.

Every record is one JSON line with a ``"record"`` kind, written and flushed as
it arrives: ``run_start`` (the plan), ``measurement`` (one measured request,
the full :class:`~deepseekbench.StreamMeasurement`), ``parity_output`` (one
parity request's output), ``server_metrics`` (a server-wide acceptance
delta), then ``parity``, ``row`` and ``run_end``. Records carry the plan's
hash. A crash or Ctrl-C loses nothing already written; a torn final line is
dropped. :class:`ResultsState` indexes one plan's records for resume (the
latest record of a key wins) and for the analysis that rebuilds rows from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
from pydantic import ValidationError

from deepseekbench._acceptance import AcceptanceRecord
from deepseekbench._errors import DeepseekBenchError
from deepseekbench._measure import StreamMeasurement
from deepseekbench._parity import ParityOutput
from deepseekbench._plan import BenchmarkPlan

__all__ = [
    "MeasureInfo",
    "MeasureKey",
    "ResultsFormatError",
    "ResultsRun",
    "ResultsState",
    "ResultsWriter",
    "StoredRun",
    "list_runs",
    "read_records",
    "read_stored_run",
    "runs_of",
    "state_from",
]


class ResultsFormatError(DeepseekBenchError):
    """A results JSONL file cannot be read back (carries the 1-based ``line_number``)."""

    def __init__(self, message: str, *, line_number: int = 0) -> None:
        super().__init__(message)
        self.line_number = line_number


class ResultsWriter:
    """Appends JSON records, one a line, flushed after each."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fh: IO[bytes] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = path.open("a+b")
            # drop a torn final line (a crash mid-write): it was never a record
            self._fh.seek(0, 2)
            size = self._fh.tell()
            if size:
                self._fh.seek(max(0, size - 65536))
                tail = self._fh.read()
                if not tail.endswith(b"\n"):
                    cut = tail.rfind(b"\n")
                    keep = size - len(tail) + cut + 1 if cut >= 0 else (0 if size <= 65536 else -1)
                    if keep >= 0:
                        self._fh.truncate(keep)
            self._fh.seek(0, 2)

    def write(self, record: Mapping[str, Any]) -> None:
        if self._fh is not None:
            self._fh.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a results file; a torn last line (crash mid-write) is ignored.

    Raises:
        ResultsFormatError: a line other than the last is not a JSON object.
    """
    records: list[dict[str, Any]] = []
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultsFormatError(f"cannot read results file {path}: {exc}") from exc
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if number == len(lines):  # torn final line: the crash came mid-write
                continue
            raise ResultsFormatError(
                f"{path}: line {number} is not JSON", line_number=number
            ) from exc
        if not isinstance(obj, dict) or "record" not in obj:
            raise ResultsFormatError(
                f"{path}: line {number} is not a results record", line_number=number
            )
        records.append(obj)
    return records


MeasureKey = tuple[str, str, str | None, int, int]
"""``(route, cell, load key, index, turn)`` of a measured request (turn 0-based;
0 for a single-turn item and in files written before conversations)."""


@dataclass(frozen=True, slots=True)
class MeasureInfo:
    """What a measurement record holds beside the measurement.

    Attributes:
        round: the round it ran in (0-based).
        queue_ms: open loop: actual send − scheduled send (ms); ``None`` closed loop.
        run_id: the run (process) that measured it: send times compare only within one.
        item, category: the workload item's id and dataset category, when recorded.
    """

    round: int
    queue_ms: float | None
    run_id: str
    item: str | None = None
    category: str | None = None


@dataclass(slots=True)
class ResultsState:
    """Records of one plan, indexed for resume and row building.

    Keys: a measurement is ``(route, cell, load key, index, turn)`` (load key
    :attr:`~deepseekbench.LoadPoint.key`, ``None`` in files written before load
    sweeps); a parity output ``(route, reasoning mode, pass, prompt id)``; a
    ``/metrics`` window ``(route, cell, load key, round)``.
    """

    measurements: dict[MeasureKey, StreamMeasurement] = field(default_factory=dict)
    order: list[MeasureKey] = field(default_factory=list)
    info: dict[MeasureKey, MeasureInfo] = field(default_factory=dict)
    outputs: dict[tuple[str, str, int, str], ParityOutput] = field(default_factory=dict)
    server: dict[tuple[str, str, str | None, int], AcceptanceRecord] = field(default_factory=dict)

    def add(self, rec: Mapping[str, Any]) -> None:
        """Index one record (the latest record of a key wins).

        Raises:
            KeyError, TypeError, ValueError, pydantic.ValidationError: a malformed record.
        """
        kind = rec.get("record")
        if kind == "measurement":
            key = (
                str(rec["route"]),
                str(rec["cell"]),
                _load_key(rec),
                int(rec["index"]),
                int(rec.get("turn", 0)),
            )
            if key not in self.measurements:
                self.order.append(key)
            self.measurements[key] = StreamMeasurement.model_validate(rec["measurement"])
            queue = rec.get("queue_ms")
            item, category = rec.get("item"), rec.get("category")
            self.info[key] = MeasureInfo(
                round=int(rec.get("round", 0)),
                queue_ms=float(queue) if queue is not None else None,
                run_id=str(rec.get("run_id", "")),
                item=item if isinstance(item, str) else None,
                category=category if isinstance(category, str) else None,
            )
        elif kind == "parity_output":
            pkey = (
                str(rec["route"]),
                str(rec["reasoning_mode"]),
                int(rec["pass"]),
                str(rec["prompt_id"]),
            )
            self.outputs[pkey] = ParityOutput.model_validate(rec["output"])
        elif kind == "server_metrics":
            skey = (str(rec["route"]), str(rec["cell"]), _load_key(rec), int(rec.get("round", 0)))
            self.server[skey] = AcceptanceRecord.model_validate(rec["acceptance"])


def _load_key(rec: Mapping[str, Any]) -> str | None:
    load = rec.get("load")
    return None if load is None else str(load)


def state_from(records: Iterable[Mapping[str, Any]], plan_hash: str, path: Path) -> ResultsState:
    state = ResultsState()
    for number, rec in enumerate(records, start=1):
        if rec.get("plan_hash") != plan_hash:
            continue
        try:
            state.add(rec)
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise ResultsFormatError(
                f"{path}: record {number} ({rec.get('record')!r}) is malformed: {exc}",
                line_number=0,
            ) from exc
    return state


@dataclass(frozen=True, slots=True)
class ResultsRun:
    """One plan run in a results file (all its ``run_start`` records share ``plan_hash``).

    ``started_at``: the first ``run_start``'s time (ISO 8601, UTC); ``resumes``:
    how many later ``run_start`` records resumed it.
    """

    plan_hash: str
    started_at: str
    resumes: int


def runs_of(starts: Sequence[Mapping[str, Any]]) -> tuple[ResultsRun, ...]:
    """The plan runs of ``run_start`` records, ordered by each plan's latest start."""
    first: dict[str, Mapping[str, Any]] = {}
    count: dict[str, int] = {}
    order: list[str] = []
    for rec in starts:
        h = str(rec.get("plan_hash", ""))
        first.setdefault(h, rec)
        count[h] = count.get(h, 0) + 1
        if h in order:
            order.remove(h)
        order.append(h)
    return tuple(
        ResultsRun(
            plan_hash=h, started_at=str(first[h].get("started_at", "?")), resumes=count[h] - 1
        )
        for h in order
    )


def list_runs(path: str | Path) -> tuple[ResultsRun, ...]:
    """The plan runs in a results file, ordered by their latest ``run_start``.

    The last one is what :func:`load_results` reads by default. A file holds
    several runs when it was reused with a different plan (a rerun resumes only
    an identical plan: same :meth:`~deepseekbench.BenchmarkPlan.plan_hash`).

    Raises:
        ResultsFormatError: the file is unreadable or a record is malformed.
    """
    return runs_of([r for r in read_records(Path(path)) if r.get("record") == "run_start"])


def _stored_plan(data: Any) -> BenchmarkPlan:
    """The plan of a ``run_start`` record. A plan written before rounds existed
    (no ``repeats`` key) ran the sequential design: one round.

    Raises:
        pydantic.ValidationError: not a valid plan. TypeError: not a mapping.
    """
    if isinstance(data, dict) and "repeats" not in data:
        data = {**data, "repeats": 1}
    return BenchmarkPlan.model_validate(data)


@dataclass(frozen=True, slots=True)
class StoredRun:
    """One plan run read back from a results file.

    Attributes:
        plan: the plan of the run's latest ``run_start`` record.
        state: its records, indexed (:class:`ResultsState`).
        complete: True when a ``run_end`` record of this plan exists.
        runs: every plan run in the file (:func:`list_runs`).
    """

    plan: BenchmarkPlan
    state: ResultsState
    complete: bool
    runs: tuple[ResultsRun, ...]


def read_stored_run(path: str | Path, *, plan_hash: str | None = None) -> StoredRun:
    """Read the last plan run of a results file, or the one whose hash starts with
    ``plan_hash``.

    Raises:
        ResultsFormatError: the file is unreadable, has no ``run_start`` record,
            a record is malformed, or ``plan_hash`` matches no run or several.
    """
    p = Path(path)
    records = read_records(p)
    starts = [r for r in records if r.get("record") == "run_start"]
    if not starts:
        raise ResultsFormatError(f"{p}: no run_start record (not a deepseekbench results file?)")
    runs = runs_of(starts)
    if plan_hash is not None:
        hashes = [r.plan_hash for r in runs if r.plan_hash.startswith(plan_hash)]
        if len(hashes) != 1:
            problem = "matches no run" if not hashes else "is ambiguous"
            listing = ", ".join(f"{r.plan_hash} (started {r.started_at})" for r in runs)
            raise ResultsFormatError(f"{p}: plan hash {plan_hash!r} {problem}; runs: {listing}")
        starts = [r for r in starts if r.get("plan_hash") == hashes[0]]
    try:
        plan = _stored_plan(starts[-1]["plan"])
    except (KeyError, TypeError, ValidationError) as exc:
        raise ResultsFormatError(f"{p}: the run_start record has no valid plan: {exc}") from exc
    # The hash the records carry: a plan written by an older version hashes
    # differently now that the plan has more (defaulted) keys.
    found_hash = str(starts[-1].get("plan_hash", plan.plan_hash()))
    state = state_from(records, found_hash, p)
    complete = any(
        r.get("record") == "run_end" and r.get("plan_hash") == found_hash for r in records
    )
    return StoredRun(plan=plan, state=state, complete=complete, runs=runs)
