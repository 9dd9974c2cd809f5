"""Reading a results file's lines: the path checked, a torn tail dropped with a warning,
two files joined into one refused.

A crash mid-write leaves the last line torn: not JSON. It is dropped with an
:class:`UnfinishedRunWarning` whether or not a newline follows it (an editor or a
later ``echo >>`` may have added one), so the good records before it stay readable and
the run reads as unfinished; a line that is not JSON *before* the last is damage, not
a crash, and an error naming it. A file that is two results files joined
(``cat a.jsonl b.jsonl``) holds a ``run_start`` whose digest chain starts afresh after
chained records: the writer never writes one (a rerun on the same file continues the
chain, :mod:`deepseekbench._store._chain`), so it is refused naming the line where the
second file starts, rather than read as a file edited by hand.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from deepseekbench._errors import ResultsFormatError
from deepseekbench._store._chain import DIGEST_FIELD, chain_digest

__all__ = [
    "MAX_RECORD_BYTES",
    "ResultsLines",
    "UnfinishedRunWarning",
    "check_one_file",
    "check_regular",
    "read_results_lines",
    "results_file_path",
    "unfinished_run_message",
]

MAX_RECORD_BYTES = 1 << 30
"""Largest record (one JSON line) a results file may hold, in bytes (1 GiB)."""


class UnfinishedRunWarning(UserWarning):
    """The run read from a results file did not finish: it has no ``run_end`` record (a
    crash, Ctrl-C, or a run still going), or its last line was torn mid-write and
    dropped. Rows hold only what was measured; a speedup refused for want of a
    measurement (e.g. ``baseline_parity_not_verified`` before parity ran) may be the
    unfinished run's doing. The message names the command that resumes it when the
    file records which wrote it."""


def results_file_path(path: object, *, caller: str) -> Path:
    """``path`` as a :class:`~pathlib.Path` (a ``str`` or ``os.PathLike``).

    Raises:
        TypeError: anything else, naming ``caller``'s argument and what it accepts.
    """
    if isinstance(path, str | os.PathLike) and not isinstance(path, bytes):
        return Path(path)
    raise TypeError(
        f"{caller}: path must be a str or os.PathLike naming a results JSONL file, "
        f"not {type(path).__name__}"
    )


def check_regular(path: Path) -> None:
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


@dataclass(frozen=True, slots=True)
class ResultsLines:
    """A results file's records and its torn tail.

    Attributes:
        records: ``(line number, record)`` for every record, in file order (1-based).
        torn_line: the line number of the torn last line that was dropped (``None``:
            none was).
    """

    records: list[tuple[int, dict[str, Any]]]
    torn_line: int | None = None


def read_results_lines(path: Path) -> ResultsLines:
    """Every record of a results file, a torn last line dropped (module docstring).

    Only regular files are read, line by line, each at most :data:`MAX_RECORD_BYTES`.

    Raises:
        ResultsFormatError: the file is unreadable or not a regular file, a line is
            too long, a line before the last is not JSON, or a JSON line is not a
            record object with a ``record`` field.
    """
    check_regular(path)
    out: list[tuple[int, dict[str, Any]]] = []
    torn: int | None = None  # a line that is not JSON: torn if nothing follows it
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
                if not line.strip():
                    continue
                if torn is not None:  # a record after it: damage, not a crash
                    raise ResultsFormatError(f"{path}: line {torn} is not JSON", line_number=torn)
                rec = _parse_line(path, number, line)
                if rec is None:
                    torn = number
                else:
                    out.append((number, rec))
    except OSError as exc:
        raise ResultsFormatError(f"cannot read results file {path}: {exc}") from exc
    return ResultsLines(out, torn)


def _parse_line(path: Path, number: int, line: bytes) -> dict[str, Any] | None:
    """The record on ``line``; ``None`` when it is not JSON (torn, if it is the last).

    Raises:
        ResultsFormatError: JSON, but not a record object with a ``record`` field.
    """
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or "record" not in obj:
        hint = ""
        if isinstance(obj, dict) and "route_label" in obj:  # a Row: a dry run's or an export
            hint = (
                ": the file holds rows (a dry run's --results output, or a row export), "
                "not a run's results; pass another --results path"
            )
        raise ResultsFormatError(
            f"{path}: line {number} is not a results record{hint}", line_number=number
        )
    return obj


def check_one_file(path: Path, records: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
    """Refuse two results files joined into one: a ``run_start`` whose digest starts a
    fresh chain after a chained record (module docstring).

    Raises:
        ResultsFormatError: naming the line where the second file starts.
    """
    chained_before = 0
    for number, rec in records:
        digest = rec.get(DIGEST_FIELD)
        if chained_before and rec.get("record") == "run_start" and digest == chain_digest("", rec):
            raise ResultsFormatError(
                f"{path} holds two results files joined into one (e.g. `cat a.jsonl "
                f"b.jsonl`): line {number} starts a second file's run (its digest chain "
                f"starts afresh); split it there (lines 1-{number - 1} and {number} on) "
                "and read each file on its own",
                line_number=number,
            )
        if isinstance(digest, str):
            chained_before = number


_RESUME = {
    "run": "rerun the same `run` command to resume it (what was measured is kept)",
    "demo": "a `demo` is not resumed (its engines listen on new ports, so its plan "
    "differs): run the demo again",
}
"""The resume hint per command that wrote the file (``RunStartRecord.command``)."""


def unfinished_run_message(path: Path, *, torn_line: int | None, command: str | None) -> str:
    """The one line an unfinished run is reported with: what is missing, what it costs,
    and how to resume (by the command that wrote the file; both when it is not
    recorded)."""
    torn = (
        f"; its last line ({torn_line}) was torn mid-write and is dropped"
        if torn_line is not None
        else ""
    )
    resume = _RESUME.get(
        command or "",
        "rerun the command that wrote it (`run PLAN` resumes it; a `demo` starts afresh)",
    )
    return (
        f"{path}: this run did not finish (no run_end record{torn}): rows hold only what "
        "was measured, and a speedup refused for a missing measurement (parity not "
        f"verified, counters missing, too few requests) may be refused for that; {resume}"
    )
