"""The results store: an append-only JSONL file of a run's records, and reading it back.

Every record is one JSON line with a ``"record"`` kind, written and flushed as
it arrives: ``run_start`` (the plan), ``measurement`` (one measured request,
the full :class:`~deepseekbench.StreamMeasurement`), ``parity_output`` (one
parity request's output), ``server_metrics`` (a server-wide acceptance
delta), then ``parity``, ``row`` and ``run_end``. Records carry the plan's
hash. A crash or Ctrl-C loses nothing already written: a torn final line (of
any size) is dropped when the file is reopened, and a complete final record
missing only its newline is kept. :class:`ResultsState` indexes one plan's
records for resume (the latest record of a key wins) and for the analysis
that rebuilds rows from them.

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
import stat
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
from deepseekbench._measure._measure import StreamMeasurement
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._parity import ParityOutput

__all__ = [
    "MAX_RECORD_BYTES",
    "RECORD_KINDS",
    "MeasureInfo",
    "MeasureKey",
    "ResultsFormatError",
    "ResultsInUseError",
    "ResultsRun",
    "ResultsState",
    "ResultsWriteError",
    "ResultsWriter",
    "StoredRun",
    "list_runs",
    "read_numbered_records",
    "read_records",
    "read_stored_run",
    "runs_of",
    "state_from",
]


MAX_RECORD_BYTES = 1 << 30
"""Largest record (one JSON line) a results file may hold, in bytes (1 GiB)."""

RECORD_KINDS = frozenset(
    {
        "run_start",
        "measurement",
        "parity_output",
        "server_metrics",
        "parity",
        "row",
        "run_end",
        "workers",
        "workload",
    }
)
"""Every record kind a results file may hold."""

_BLOCK = 1 << 16


def _check_regular(path: Path) -> None:
    """Refuse an existing path that is not a regular file (a device, FIFO, folder).

    Raises:
        ResultsFormatError: ``path`` exists and is not a regular file.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ResultsFormatError(f"cannot read results file {path}: {exc}") from exc
    if not stat.S_ISREG(mode):
        raise ResultsFormatError(
            f"results file {path} is not a regular file (a device, pipe or folder): "
            f"choose a file path"
        )


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


def _is_record(line: bytes) -> bool:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and "record" in obj


class ResultsWriter:
    """Appends JSON records, one a line, flushed after each, under an exclusive lock.

    Opening takes the lock (refusing a second writer), then repairs the tail a
    crash may have left: a torn final line of any size is cut off; a complete
    final record missing only its newline gets the newline (it is kept).

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
        if path is not None:
            _check_regular(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fh = path.open("a+b")
            try:
                self._lock(fh, path)
                self._repair_tail(fh)
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
        fh.seek(0, os.SEEK_END)

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record and flush it.

        Raises:
            ResultsWriteError: the write failed (e.g. no space left on the device).
        """
        if self.error is not None:
            raise self.error
        if self._fh is None:
            return
        data = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
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
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_numbered_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for every record of a results file.

    A final line without its newline is kept when it is a whole record and
    ignored when torn (a crash mid-write). Only regular files are read, line
    by line, each at most :data:`MAX_RECORD_BYTES`.

    Raises:
        ResultsFormatError: the file is unreadable or not a regular file, a line
            is too long, or a line other than a torn last one is not a JSON
            record object with a ``record`` field.
    """
    _check_regular(path)
    out: list[tuple[int, dict[str, Any]]] = []
    try:
        with path.open("rb") as fh:
            number = 0
            while line := fh.readline(MAX_RECORD_BYTES + 1):
                number += 1
                if len(line) > MAX_RECORD_BYTES:
                    raise ResultsFormatError(
                        f"{path}: line {number} is longer than {MAX_RECORD_BYTES} bytes",
                        line_number=number,
                    )
                rec = _parse_line(path, number, line, last=not line.endswith(b"\n"))
                if rec is not None:
                    out.append((number, rec))
    except OSError as exc:
        raise ResultsFormatError(f"cannot read results file {path}: {exc}") from exc
    return out


def _parse_line(path: Path, number: int, line: bytes, *, last: bool) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        if last:  # torn final line: the crash came mid-write
            return None
        raise ResultsFormatError(f"{path}: line {number} is not JSON", line_number=number) from exc
    if not isinstance(obj, dict) or "record" not in obj:
        raise ResultsFormatError(
            f"{path}: line {number} is not a results record", line_number=number
        )
    return obj


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a results file (see :func:`read_numbered_records`).

    Raises:
        ResultsFormatError: as :func:`read_numbered_records`.
    """
    return [rec for _, rec in read_numbered_records(path)]


def _int_field(rec: Mapping[str, Any], name: str) -> int:
    value = rec[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name!r} must be an integer, got {value!r}")
    return value


def _str_field(rec: Mapping[str, Any], name: str) -> str:
    value = rec[name]
    if not isinstance(value, str):
        raise ValueError(f"{name!r} must be a string, got {value!r}")
    return value


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

    With ``plan`` set, :meth:`add` refuses a route label or cell id the plan
    does not have.

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
    plan: BenchmarkPlan | None = None

    def _check_route(self, label: str) -> None:
        if self.plan is not None and label not in {r.label for r in self.plan.routes}:
            known = [r.label for r in self.plan.routes]
            raise ValueError(f"route {label!r} is not in the plan (routes: {known})")

    def _check_cell(self, cell: str) -> None:
        if self.plan is not None and cell not in {c.cell_id for c in self.plan.cells}:
            known = [c.cell_id for c in self.plan.cells]
            raise ValueError(f"cell {cell!r} is not in the plan (cells: {known})")

    def add(self, rec: Mapping[str, Any]) -> None:
        """Index one record (the latest record of a key wins).

        Raises:
            KeyError: a required field is missing.
            ValueError: a field has the wrong type, or names a route or cell
                outside the plan.
            pydantic.ValidationError: the payload is not a valid model.
        """
        kind = rec.get("record")
        if kind == "measurement":
            key = (
                _str_field(rec, "route"),
                _str_field(rec, "cell"),
                _load_key(rec),
                _int_field(rec, "index"),
                _int_field(rec, "turn") if "turn" in rec else 0,
            )
            self._check_route(key[0])
            self._check_cell(key[1])
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
                _str_field(rec, "route"),
                _str_field(rec, "reasoning_mode"),
                _int_field(rec, "pass"),
                _str_field(rec, "prompt_id"),
            )
            self._check_route(pkey[0])
            self.outputs[pkey] = ParityOutput.model_validate(rec["output"])
        elif kind == "server_metrics":
            skey = (_str_field(rec, "route"), _str_field(rec, "cell"), _load_key(rec),
                    int(rec.get("round", 0)))  # fmt: skip
            self._check_route(skey[0])
            self._check_cell(skey[1])
            self.server[skey] = AcceptanceRecord.model_validate(rec["acceptance"])

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


def _load_key(rec: Mapping[str, Any]) -> str | None:
    load = rec.get("load")
    return None if load is None else str(load)


def _check_record(path: Path, number: int, rec: Mapping[str, Any]) -> None:
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


def state_from(
    records: Iterable[tuple[int, Mapping[str, Any]]],
    plan_hash: str,
    path: Path,
    *,
    plan: BenchmarkPlan | None = None,
) -> ResultsState:
    """Index the records of the plan ``plan_hash`` (``(line number, record)`` pairs).

    Every record is checked (known kind, a plan hash); those of this plan are
    checked against ``plan`` when given (route, cell, index).

    Raises:
        ResultsFormatError: a record is malformed; the message names its line.
    """
    state = ResultsState(plan=plan)
    for number, rec in records:
        _check_record(path, number, rec)
        if rec["plan_hash"] != plan_hash:
            continue
        try:
            state.add(rec)
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ResultsFormatError(
                f"{path}: line {number} ({rec.get('record')!r} record) is malformed: {detail}",
                line_number=number,
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
    numbered = read_numbered_records(p)
    records = [r for _, r in numbered]
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
    state = state_from(numbered, found_hash, p, plan=plan)
    complete = any(
        r.get("record") == "run_end" and r.get("plan_hash") == found_hash for r in records
    )
    return StoredRun(plan=plan, state=state, complete=complete, runs=runs)
