"""The results store: an append-only JSONL file of a run's records, and reading it back.

Every record is one JSON line with a ``"record"`` kind, written and flushed as
it arrives: ``run_start`` (the plan), ``measurement`` (one measured request,
the full :class:`~deepseekbench.StreamMeasurement`), ``parity_output`` (one
parity request's output), ``server_metrics`` (a server-wide acceptance
delta), then ``parity``, ``row`` and ``run_end`` (and ``run_note``: a note the
caller adds after the run). Records carry the plan's hash. A crash or Ctrl-C
loses nothing already written: a torn final line (of any size) is dropped when
the file is reopened, and a complete final record missing only its newline is
kept. :class:`ResultsState` indexes one plan's records for resume (the latest
record of a key wins) and for the analysis that rebuilds rows from them.

Integrity: every record written carries ``digest``, chaining it to the record
before it (:mod:`deepseekbench._store._chain`); reading verifies the chain and
notes duplicated measurement records and records of a plan with no
``run_start`` (:func:`integrity_of`, :attr:`StoredRun.integrity`); a record's
``round`` outside the plan's rounds is an error naming its line.

Safety: a writer holds an exclusive lock (``flock``) on the file for the whole
run, so a second run on the same file is refused (:class:`ResultsInUseError`);
only regular files are read or written (``/dev/zero`` is refused, not read
forever); one record may be at most :data:`MAX_RECORD_BYTES`; a failed write
(a full disk) raises :class:`ResultsWriteError` naming the file. Reading is
strict: an unknown record kind, a missing plan hash, an unknown route or cell,
or a non-integer index is an error naming its line.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None  # type: ignore[assignment]

import orjson
from pydantic import ValidationError

from deepseekbench._errors import (
    ResultsFormatError,
    ResultsInUseError,
    ResultsWriteError,
)
from deepseekbench._plan._launch_spec import RECORDED_PLAN
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._store._chain import (
    DIGEST_FIELD,
    IntegrityProblem,
    ResultsIntegrity,
    chain_digest,
    check_chain,
)
from deepseekbench._store._reading import (
    MAX_RECORD_BYTES,
    UnfinishedRunWarning,
    check_one_file,
    check_regular,
    read_results_lines,
    results_file_path,
    unfinished_run_message,
)
from deepseekbench._store._records import (
    CalibrationRecord,
    DivergenceMarginRecord,
    EngineDeterminismRecord,
    MeasurementRecord,
    OffProfileRecord,
    ParityEntry,
    ParityOutputRecord,
    Record,
    RunNoteRecord,
    RunStartRecord,
    SearchProbeRecord,
    ServerCacheRecord,
    ServerMetricsRecord,
    WitnessScoreRecord,
    WorkersRecord,
    parse_record,
    record_json,
)
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Arrival
from deepseekbench._types._cache import CacheWindow
from deepseekbench._types._determinism import EngineDeterminism
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._margin import DivergenceMargin
from deepseekbench._types._noise import OffProfile
from deepseekbench._types._parity import ParityOutput
from deepseekbench._types._scored import ScoredOutput

__all__ = [
    "MAX_RECORD_BYTES",
    "RECORD_KINDS",
    "MeasureInfo",
    "MeasureKey",
    "ProfileStoreKey",
    "ResultsFormatError",
    "ResultsInUseError",
    "ResultsRun",
    "ResultsState",
    "ResultsStore",
    "ResultsWriteError",
    "ResultsWriter",
    "StoredRun",
    "integrity_of",
    "list_runs",
    "read_numbered_records",
    "read_records",
    "read_stored_run",
    "runs_of",
    "state_from",
]


RECORD_KINDS = frozenset(
    {
        "run_start",
        "measurement",
        "parity_output",
        "server_metrics",
        "parity",
        "row",
        "run_end",
        "run_note",
        "workers",
        "workload",
        "server_cache",
        "divergence_margin",
        "off_profile",
        "witness_score",
        "engine_determinism",
        "search_probe",
        "calibration",
    }
)
"""Every record kind a results file may hold."""

_BLOCK = 1 << 16


def _last_newline_end(fh: IO[bytes], size: int) -> int:
    """The offset just after the file's last newline (0 when there is none)."""
    end = size
    while end > 0:
        start = max(0, end - _BLOCK)
        fh.seek(start)
        cut = fh.read(end - start).rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


def _last_digest(fh: IO[bytes]) -> str:
    """The ``digest`` of the last whole line of ``fh`` (repaired: it ends with a
    newline or is empty); ``""`` when there is none, so a resumed file written
    before digest chains starts a chain at its first new record."""
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return ""
    start = _last_newline_end(fh, size - 1)
    fh.seek(start)
    try:
        obj = orjson.loads(fh.read(min(size - start, MAX_RECORD_BYTES)))
    except orjson.JSONDecodeError:
        obj = None
    fh.seek(0, os.SEEK_END)
    digest = obj.get(DIGEST_FIELD) if isinstance(obj, dict) else None
    return digest if isinstance(digest, str) else ""


def _is_record(line: bytes) -> bool:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and "record" in obj


class ResultsWriter:
    """Appends JSON records, one a line, flushed after each, under an exclusive lock.

    Opening takes the lock (refusing a second writer), then repairs the tail a
    crash may have left: a torn final line of any size is cut off (a newline after
    it or not); a complete final record missing only its newline gets the newline
    (it is kept).
    Closing removes a file this writer created and never wrote to (a run that
    stopped before its first record, e.g. on a failed probe, leaves no empty file).

    Raises:
        ResultsInUseError: another writer holds the file's lock.
        ResultsFormatError: the path exists and is not a regular file.
        OSError: the file or its folder cannot be created.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fh: IO[bytes] | None = None
        self.error: ResultsWriteError | None = None
        """The first failed write; every later write raises it again."""
        self._created = False
        self._previous = ""
        """The digest of the file's last record (``""``: none, or written before chains)."""
        if path is not None:
            check_regular(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._created = not path.exists()
            fh = path.open("a+b")
            try:
                self._lock(fh, path)
                self._repair_tail(fh)
                self._previous = _last_digest(fh)
            except BaseException:
                fh.close()
                raise
            self._fh = fh

    @staticmethod
    def _lock(fh: IO[bytes], path: Path) -> None:
        if fcntl is None:  # pragma: no cover - not POSIX
            return
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResultsInUseError(
                f"results file {path} is in use by another run (it holds the file's lock); "
                f"wait for it to finish, or write to another file"
            ) from None

    @staticmethod
    def _repair_tail(fh: IO[bytes]) -> None:
        size = fh.seek(0, os.SEEK_END)
        keep = _last_newline_end(fh, size)
        if keep < size:
            fh.seek(keep)
            tail = fh.read(min(size - keep, MAX_RECORD_BYTES + 1))
            if size - keep <= MAX_RECORD_BYTES and _is_record(tail):
                fh.seek(0, os.SEEK_END)
                fh.write(b"\n")  # a whole record that lacked only its newline
                fh.flush()
            else:
                fh.truncate(keep)  # torn mid-write: never a record
        ResultsWriter._drop_torn_line(fh)
        fh.seek(0, os.SEEK_END)

    @staticmethod
    def _drop_torn_line(fh: IO[bytes]) -> None:
        """Cut a last line that is not JSON though a newline follows it: a torn record
        the reader drops too, so records appended after it stay readable."""
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        start = _last_newline_end(fh, size - 1)
        fh.seek(start)
        line = fh.read(min(size - start, MAX_RECORD_BYTES + 1))
        if not line.strip() or size - start > MAX_RECORD_BYTES:
            return
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            fh.truncate(start)

    def write(self, record: Record) -> None:
        """Append one record and flush it.

        Raises:
            ResultsWriteError: the write failed (e.g. no space left on the device).
        """
        if self.error is not None:
            raise self.error
        if self._fh is None:
            return
        obj = record_json(record)
        digest = chain_digest(self._previous, obj)
        data = orjson.dumps({**obj, DIGEST_FIELD: digest}, option=orjson.OPT_APPEND_NEWLINE)
        pos = self._fh.tell()
        try:
            self._fh.write(data)
            self._fh.flush()
        except OSError as exc:
            self._abandon(pos)
            self.error = ResultsWriteError(
                f"cannot write to results file {self.path}: {exc.strerror or exc}; "
                f"the records written before are kept"
            )
            raise self.error from exc
        self._previous = digest

    def _abandon(self, pos: int) -> None:
        """Drop a half-written record and stop writing (nothing buffered is retried)."""
        fh, self._fh = self._fh, None
        assert fh is not None
        fd = fh.fileno()
        with contextlib.suppress(OSError):
            os.ftruncate(fd, pos)
        with contextlib.suppress(OSError):
            os.close(fd)  # the descriptor, without flushing the failed buffer again

    def close(self) -> None:
        """Release the lock; a file this writer created and left empty is removed."""
        if self._fh is not None:
            if self._created and self.path is not None and self._fh.tell() == 0:
                with contextlib.suppress(OSError):
                    self.path.unlink()  # still under the lock: no other run wrote it
            self._fh.close()
            self._fh = None


def read_numbered_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for every record of a results file
    (:func:`~deepseekbench._store._reading.read_results_lines`: a torn last line is
    dropped, with or without its newline; a complete final record missing only its
    newline is kept).

    Raises:
        ResultsFormatError: the file is unreadable or not a regular file, a line
            is too long, or a line other than a torn last one is not a JSON
            record object with a ``record`` field.
    """
    return read_results_lines(path).records


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a results file (see :func:`read_numbered_records`).

    Raises:
        ResultsFormatError: as :func:`read_numbered_records`.
    """
    return [rec for _, rec in read_numbered_records(path)]


MeasureKey = tuple[str, str, str | None, int, int]
"""``(route, cell, load key, index, turn)`` of a measured request (turn 0-based;
0 for a single-turn item and in files written before conversations)."""
MarginKey = tuple[str, str, str, str | None, str | None, str]
"""``(route, source, reasoning mode, cell, load key, prompt id)`` of a margin."""
ProfileStoreKey = tuple[str, str, str | None, str | None, str]
"""``(source, reasoning mode, cell, load key, prompt id)`` of an ``off`` profile."""


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

    With ``plan`` set, :meth:`add` refuses a route label or cell id the plan
    does not have.

    Keys: a measurement is ``(route, cell, load key, index, turn)`` (load key
    :attr:`~deepseekbench.LoadPoint.key`, ``None`` in files written before load
    sweeps); a parity output ``(route, reasoning mode, pass, prompt id)``; a
    calibration output ``(cell, item id, turn)``; a
    ``/metrics`` window ``(route, cell, load key, round)``.
    """

    measurements: dict[MeasureKey, StreamMeasurement] = field(default_factory=dict)
    order: list[MeasureKey] = field(default_factory=list)
    info: dict[MeasureKey, MeasureInfo] = field(default_factory=dict)
    outputs: dict[tuple[str, str, int, str], ParityOutput] = field(default_factory=dict)
    server: dict[tuple[str, str, str | None, int], AcceptanceRecord] = field(default_factory=dict)
    plan: BenchmarkPlan | None = None
    # each block's cache window, keyed as ``server``
    cache: dict[tuple[str, str, str | None, int], CacheWindow] = field(default_factory=dict)
    # forensics margins by (route, source, reasoning mode, cell, load, prompt id)
    margins: dict[MarginKey, DivergenceMargin] = field(default_factory=dict)
    # off's profiles of its compared outputs by (source, reasoning mode, cell, load, prompt id)
    profiles: dict[ProfileStoreKey, OffProfile] = field(default_factory=dict)
    # witness scores (off's one-pass scoring of a sampled output, or why not), keyed alike
    witness_scores: dict[MarginKey, ScoredOutput | str] = field(default_factory=dict)
    # each route's engine deterministic mode (the latest record wins)
    determinism: dict[str, EngineDeterminism] = field(default_factory=dict)
    # the [search] levels probed, by load key, in the order first recorded
    search_loads: dict[str, LoadPoint] = field(default_factory=dict)
    # each pooled block's workers and why that many (workers = "auto"), keyed as ``server``
    workers: dict[tuple[str, str, str | None, int], tuple[int, str | None]] = field(
        default_factory=dict
    )
    # calibration outputs by (cell, item id, turn); the latest wins
    calibration: dict[tuple[str, str, int], StreamMeasurement] = field(default_factory=dict)
    # the run's notes (``run_note`` records), in order, each once
    notes: list[str] = field(default_factory=list)
    problems: list[IntegrityProblem] = field(default_factory=list)
    """Duplicated measurement records :func:`state_from` found (see ``_chain``)."""

    def _check_route(self, label: str) -> None:
        if self.plan is not None and label not in {r.label for r in self.plan.routes}:
            known = [r.label for r in self.plan.routes]
            raise ValueError(f"route {label!r} is not in the plan (routes: {known})")

    def _check_cell(self, cell: str) -> None:
        if self.plan is not None and cell not in {c.cell_id for c in self.plan.cells}:
            known = [c.cell_id for c in self.plan.cells]
            raise ValueError(f"cell {cell!r} is not in the plan (cells: {known})")

    def _check_load(self, load: str | None) -> None:
        if self.plan is not None and load is not None and not self.plan.admits_load(load):
            known = [lp.key for lp in self.plan.load_points]
            if load not in known:
                raise ValueError(f"load {load!r} is not in the plan (load points: {known})")

    def _check_round(self, round_: int) -> None:
        if self.plan is not None and round_ >= self.plan.rounds:
            raise ValueError(
                f"round {round_} is outside the plan's {self.plan.rounds} round(s) "
                f"(rounds are numbered from 0)"
            )

    def _check_index(self, index: int) -> None:
        if self.plan is not None and index >= self.plan.requests_per_cell:
            raise ValueError(
                f"index {index} is outside the plan's {self.plan.requests_per_cell} "
                f"requests per cell"
            )

    def add(self, rec: Record) -> None:
        """Index one record (the latest record of a key wins); kinds the index does
        not hold (``run_start``, ``row``, ...) are ignored.

        Raises:
            ValueError: the record names a route, cell, load point, request
                index or round outside the plan.
        """
        if isinstance(rec, MeasurementRecord):
            self._check_route(rec.route)
            self._check_cell(rec.cell)
            self._check_load(rec.load)
            self._check_index(rec.index)
            self._check_round(rec.round)
            key = (rec.route, rec.cell, rec.load, rec.index, rec.turn)
            if key not in self.measurements:
                self.order.append(key)
            self.measurements[key] = rec.measurement
            self.info[key] = MeasureInfo(
                rec.round, rec.queue_ms, rec.run_id, rec.item, rec.category
            )
        elif isinstance(rec, ParityOutputRecord):
            self._check_route(rec.route)
            pkey = (rec.route, rec.reasoning_mode, rec.parity_pass, rec.prompt_id)
            self.outputs[pkey] = rec.output
        elif isinstance(rec, ServerMetricsRecord):
            self._check_route(rec.route)
            self._check_cell(rec.cell)
            self._check_load(rec.load)
            self._check_round(rec.round)
            self.server[(rec.route, rec.cell, rec.load, rec.round)] = rec.acceptance
        elif isinstance(rec, ServerCacheRecord):
            self._check_route(rec.route)
            self._check_cell(rec.cell)
            self._check_load(rec.load)
            self._check_round(rec.round)
            self.cache[(rec.route, rec.cell, rec.load, rec.round)] = rec.cache
        elif isinstance(rec, DivergenceMarginRecord):
            self._check_route(rec.route)
            mkey = (rec.route, rec.source, rec.reasoning_mode, rec.cell, rec.load, rec.prompt_id)
            self.margins[mkey] = rec.margin
        elif isinstance(rec, OffProfileRecord):
            pk = (rec.source, rec.reasoning_mode, rec.cell, rec.load, rec.prompt_id)
            self.profiles[pk] = rec.profile
        elif isinstance(rec, WitnessScoreRecord):
            self._check_route(rec.route)
            wkey = (rec.route, rec.source, rec.reasoning_mode, rec.cell, rec.load, rec.prompt_id)
            self.witness_scores[wkey] = rec.scored if rec.scored is not None else rec.reason or ""
        elif isinstance(rec, EngineDeterminismRecord):
            self._check_route(rec.route)
            self.determinism[rec.route] = rec.determinism
        elif isinstance(rec, SearchProbeRecord):
            self._check_route(rec.route)
            self._check_load(rec.load)
            load = LoadPoint(Arrival(rec.arrival), rec.concurrency, rec.rate_per_s)
            self.search_loads.setdefault(rec.load, load)
        elif isinstance(rec, WorkersRecord) and rec.phase == "measure":
            self._check_route(rec.route)
            self.workers[(rec.route, rec.cell, rec.load, rec.round)] = (rec.workers, rec.basis)
        elif isinstance(rec, CalibrationRecord):
            self._check_route(rec.route)
            self._check_cell(rec.cell)
            self.calibration[(rec.cell, rec.item, rec.turn)] = rec.measurement
        elif isinstance(rec, RunNoteRecord) and rec.note not in self.notes:
            self.notes.append(rec.note)

    def drop_errored(self) -> int:
        """Forget every measurement that ended in an error, so a resumed run retries
        it; returns how many were dropped."""
        errored = [k for k, m in self.measurements.items() if m.error is not None]
        for key in errored:
            del self.measurements[key]
            self.info.pop(key, None)
        if errored:
            gone = set(errored)
            self.order = [k for k in self.order if k not in gone]
        return len(errored)


def _typed(path: Path, number: int, rec: Mapping[str, Any]) -> Record:
    """The typed record of line ``number``.

    Raises:
        ResultsFormatError: an unknown kind, no plan hash, or an invalid field.
    """
    kind = rec.get("record")
    if kind not in RECORD_KINDS:
        raise ResultsFormatError(
            f"{path}: line {number}: unknown record kind {kind!r} "
            f"(known: {', '.join(sorted(RECORD_KINDS))})",
            line_number=number,
        )
    if not isinstance(rec.get("plan_hash"), str) or not rec["plan_hash"]:
        raise ResultsFormatError(
            f"{path}: line {number}: the {kind!r} record has no plan_hash string",
            line_number=number,
        )
    try:
        return parse_record(rec)
    except ValidationError as exc:
        raise ResultsFormatError(
            f"{path}: line {number} ({kind!r} record) is malformed: {_problems(exc)}",
            line_number=number,
        ) from exc


def _problems(exc: ValidationError) -> str:
    """A validation error in one line: ``'index': Input should be ... (got -1)``."""
    out = []
    for err in exc.errors()[:3]:
        where = ".".join(str(part) for part in err["loc"][1:])  # [0] is the record kind
        got = "" if err["type"] == "missing" else f" (got {repr(err.get('input'))[:60]})"
        out.append(f"{where!r}: {err['msg']}{got}")
    more = exc.error_count() - len(out)
    return "; ".join(out) + (f"; and {more} more" if more > 0 else "")


def state_from(
    records: Iterable[tuple[int, Mapping[str, Any]]],
    plan_hash: str,
    path: Path,
    *,
    plan: BenchmarkPlan | None = None,
) -> ResultsState:
    """Index the records of the plan ``plan_hash`` (``(line number, record)`` pairs).

    Every record is checked (known kind, a plan hash, its fields' types and
    ranges); those of this plan are checked against ``plan`` when given (route,
    cell, load point, request index within ``requests_per_cell``).

    Raises:
        ResultsFormatError: a record is malformed; the message names its line.
    """
    state = ResultsState(plan=plan)
    lines: dict[MeasureKey, int] = {}
    for number, raw in records:
        rec = _typed(path, number, raw)
        if rec.plan_hash != plan_hash:
            continue
        if isinstance(rec, MeasurementRecord):
            _check_duplicate(state, lines, number, rec)
        try:
            state.add(rec)
        except ValueError as exc:
            raise ResultsFormatError(
                f"{path}: line {number} ({rec.record!r} record) is malformed: {exc}",
                line_number=number,
            ) from exc
    return state


def _check_duplicate(
    state: ResultsState, lines: dict[MeasureKey, int], number: int, rec: MeasurementRecord
) -> None:
    """Note a second record of one measured request in ``state.problems``, unless it
    retries an errored one (``--retry-errors``: the later record replaces it)."""
    key = (rec.route, rec.cell, rec.load, rec.index, rec.turn)
    earlier = state.measurements.get(key)
    if earlier is not None and earlier.error is None:
        state.problems.append(
            IntegrityProblem(
                number,
                "duplicate_measurement",
                f"a second record of measured request {rec.route} {rec.cell} "
                f"load {rec.load} index {rec.index} turn {rec.turn} (first on line "
                f"{lines[key]}); the later one is read",
            )
        )
    lines[key] = number


def integrity_of(
    numbered: Sequence[tuple[int, Mapping[str, Any]]], state: ResultsState
) -> ResultsIntegrity:
    """The integrity of a results file (``numbered``: all its records; ``state``:
    one plan's, indexed by :func:`state_from`): its digest chain, records of a
    plan with no ``run_start`` (read by no run), and the duplicated measurement
    records ``state`` found."""
    started = {r.get("plan_hash") for _, r in numbered if r.get("record") == "run_start"}
    orphans = [
        IntegrityProblem(
            n,
            "orphan_record",
            f"a {r.get('record')!r} record of plan {str(r.get('plan_hash'))[:16]!r}, which "
            f"has no run_start in the file (no run reads it)",
        )
        for n, r in numbered
        if r.get("record") != "run_start" and r.get("plan_hash") not in started
    ]
    return check_chain(numbered).with_problems([*orphans, *state.problems])


class ResultsStore:
    """The one writer of a run's records: each record is appended to the file and
    indexed in :attr:`state` in one call (:meth:`append`), so the file and the
    index never disagree.

    Raises:
        as :class:`ResultsWriter` (opening: in use, not a regular file, OSError).
    """

    def __init__(self, path: Path | None, state: ResultsState | None = None) -> None:
        self.writer = ResultsWriter(path)
        self.state = state if state is not None else ResultsState()
        self.started_at: str | None = None
        """The time of the plan's first ``run_start`` in the file (set by :meth:`open`)."""
        self.integrity: ResultsIntegrity | None = None
        """What :meth:`open` found of the file's integrity (``None``: in memory); the
        records this store appends keep the chain, so it stays the file's."""

    @classmethod
    def open(cls, path: Path | None, plan: BenchmarkPlan) -> ResultsStore:
        """Lock ``path`` (a second run is refused before anything is read), then index
        what earlier runs of ``plan`` recorded there (``path`` ``None``: in memory).

        Raises:
            ResultsInUseError: another run holds the file.
            ResultsFormatError: the file cannot be read back, or a record is malformed.
            OSError: the file or its folder cannot be created.
        """
        store = cls(path, ResultsState(plan=plan))
        try:
            if path is not None:
                plan_hash = plan.plan_hash()
                numbered = read_numbered_records(path)
                store.state = state_from(numbered, plan_hash, path, plan=plan)
                store.integrity = integrity_of(numbered, store.state)
                store.started_at = next(
                    (str(r.get("started_at")) for _, r in numbered
                     if r.get("record") == "run_start" and r.get("plan_hash") == plan_hash),
                    None,
                )  # fmt: skip
        except BaseException:
            store.close()
            raise
        return store

    def drop_errored(self) -> int:
        """Forget every errored measurement so a resumed run retries it (see
        :meth:`ResultsState.drop_errored`); returns how many."""
        return self.state.drop_errored()

    @property
    def path(self) -> Path | None:
        return self.writer.path

    @property
    def error(self) -> ResultsWriteError | None:
        """The first failed write (see :attr:`ResultsWriter.error`)."""
        return self.writer.error

    def append(self, record: Record) -> None:
        """Index ``record`` in :attr:`state`, then append it to the file.

        Raises:
            ValueError: the record names a route, cell, load or index outside the plan.
            ResultsWriteError: the write failed.
        """
        self.state.add(record)
        self.writer.write(record)

    def close(self) -> None:
        self.writer.close()


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
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
    """
    p = results_file_path(path, caller="list_runs")
    return runs_of([r for r in read_records(p) if r.get("record") == "run_start"])


def _stored_plan(data: Any) -> BenchmarkPlan:
    """The plan of a ``run_start`` record. A plan written before rounds existed
    (no ``repeats`` key) ran the sequential design: one round.

    Raises:
        pydantic.ValidationError: not a valid plan. TypeError: not a mapping.
    """
    if isinstance(data, dict) and "repeats" not in data:
        data = {**data, "repeats": 1}
    # a launch's secret rule is for plans to run: an older file's plan is only read
    return BenchmarkPlan.model_validate(data, context={RECORDED_PLAN: True})


@dataclass(frozen=True, slots=True)
class StoredRun:
    """One plan run read back from a results file.

    Attributes:
        plan: the plan of the run's latest ``run_start`` record.
        state: its records, indexed (:class:`ResultsState`).
        complete: True when a ``run_end`` record of this plan exists.
        runs: every plan run in the file (:func:`list_runs`).
        finished_at: the last ``run_end`` record's time (ISO 8601, UTC), if any.
        start: the run's latest ``run_start`` record; its ``parity_set`` is what
            the analysis grades against (``None`` in files written before results
            stood alone: then the plan's task and dataset files are read again).
        integrity: the file's digest chain and the problems reading found
            (:func:`integrity_of`).
        torn_line: the torn last line dropped (``None``: none was).
    """

    plan: BenchmarkPlan
    state: ResultsState
    complete: bool
    runs: tuple[ResultsRun, ...]
    start: RunStartRecord
    finished_at: str | None = None
    integrity: ResultsIntegrity = field(default_factory=lambda: ResultsIntegrity(0, 0))
    torn_line: int | None = None

    @property
    def parity_set(self) -> tuple[ParityEntry, ...] | None:
        """The recorded parity set (``None`` in files written before it was recorded)."""
        return self.start.parity_set


def read_stored_run(path: str | Path, *, plan_hash: str | None = None) -> StoredRun:
    """Read the last plan run of a results file, or the one whose hash starts with
    ``plan_hash``.

    Raises:
        ResultsFormatError: the file is unreadable, has no ``run_start`` record,
            a record is malformed, ``plan_hash`` matches no run or several, or the
            file is two results files joined (``check_one_file``).
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.

    Warns:
        UnfinishedRunWarning: the run has no ``run_end`` record (its last line may
            have been torn and dropped); the message says how to resume it.
    """
    p = results_file_path(path, caller="load_results")
    lines = read_results_lines(p)
    numbered = lines.records
    check_one_file(p, numbered)
    records = [r for _, r in numbered]
    starts = [(n, r) for n, r in numbered if r.get("record") == "run_start"]
    if not starts:
        raise ResultsFormatError(f"{p}: no run_start record (not a deepseekbench results file?)")
    runs = runs_of([r for _, r in starts])
    if plan_hash is not None:
        hashes = [r.plan_hash for r in runs if r.plan_hash.startswith(plan_hash)]
        if len(hashes) != 1:
            problem = "matches no run" if not hashes else "is ambiguous"
            listing = ", ".join(f"{r.plan_hash} (started {r.started_at})" for r in runs)
            raise ResultsFormatError(f"{p}: plan hash {plan_hash!r} {problem}; runs: {listing}")
        starts = [(n, r) for n, r in starts if r.get("plan_hash") == hashes[0]]
    number, last = starts[-1]
    try:
        plan = _stored_plan(last["plan"])
    except (KeyError, TypeError, ValidationError) as exc:
        raise ResultsFormatError(f"{p}: the run_start record has no valid plan: {exc}") from exc
    start = _typed(p, number, last)
    assert isinstance(start, RunStartRecord)
    # The hash the records carry: a plan written by an older version hashes
    # differently now that the plan has more (defaulted) keys.
    found_hash = start.plan_hash
    state = state_from(numbered, found_hash, p, plan=plan)
    ends = [r for r in records if r.get("record") == "run_end" and r.get("plan_hash") == found_hash]
    finished = str(ends[-1].get("finished_at")) if ends else None
    if not ends:
        message = unfinished_run_message(p, torn_line=lines.torn_line, command=start.command)
        warnings.warn(message, UnfinishedRunWarning, stacklevel=4)  # load_results' caller
    return StoredRun(
        plan=plan,
        state=state,
        complete=bool(ends),
        runs=runs,
        start=start,
        finished_at=finished,
        integrity=integrity_of(numbered, state),
        torn_line=lines.torn_line,
    )
