"""A results file's integrity: the digest chain over its records, and what reading found.

Every record the writer appends carries ``digest``: the SHA-256 (hex) of the
previous record's digest (``""`` for the first record of a chain), a newline,
and the record's canonical JSON bytes without its ``digest`` field (orjson,
keys sorted) — :func:`chain_digest`. Each record thus vouches for every record
before it: editing a value, inserting, deleting, duplicating or reordering
records breaks the chain at the first record after the change, and
:func:`check_chain` names that line. The chain is a check against hand edits
and careless merges, not a signature: whoever rewrites the file can recompute
it. Cutting records off the end leaves a valid chain (a crash does that too);
the run then has no ``run_end`` and reads as unfinished.

Files written before digest chains have no ``digest`` fields: they read as
"unverified" (a note, not an error). A file resumed by a newer writer starts its
chain at its first new record; the records before it stay unverified.

:class:`ResultsIntegrity` gathers what reading a file found — chain breaks,
duplicated measurement records, records of a plan with no ``run_start`` — and
says it in one line (:meth:`ResultsIntegrity.describe`) for every report format.
A file with any such problem is *tampered*: the analysis credits no speedup
from it (refusal ``results_tampered``) and :func:`~deepseekbench.load_results`
warns (:class:`ResultsIntegrityWarning`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

__all__ = [
    "DIGEST_FIELD",
    "IntegrityProblem",
    "ResultsIntegrity",
    "ResultsIntegrityWarning",
    "chain_digest",
    "check_chain",
    "without_digest",
]

DIGEST_FIELD = "digest"
"""The field of a record that holds its chain digest (64 hex digits, SHA-256)."""

_NAMED_PROBLEMS = 3

ProblemKind = Literal["chain_break", "duplicate_measurement", "orphan_record"]


class ResultsIntegrityWarning(UserWarning):
    """A results file was edited after it was written (its digest chain is broken,
    a measurement record is duplicated, or records name a plan with no
    ``run_start``): the message names the lines; no speedup is credited from it."""


def without_digest(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` without its :data:`DIGEST_FIELD` (the fields the digest covers)."""
    return {k: v for k, v in record.items() if k != DIGEST_FIELD}


def chain_digest(previous: str, record: Mapping[str, Any]) -> str:
    """The digest of ``record`` (a JSON object, without its digest) chained to
    ``previous`` (the digest of the record before it, ``""`` for the first):
    SHA-256 hex of ``previous + "\\n" + orjson.dumps(record, OPT_SORT_KEYS)``.

    Raises:
        orjson.JSONEncodeError: ``record`` is not JSON-serialisable.
    """
    body = orjson.dumps(without_digest(record), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(previous.encode("ascii", "replace") + b"\n" + body).hexdigest()


@dataclass(frozen=True, slots=True)
class IntegrityProblem:
    """One thing reading found wrong with a results file.

    Attributes:
        line: the 1-based line of the record at fault.
        kind: ``chain_break`` (the record's digest does not follow from the records
            before it), ``duplicate_measurement`` (a second record of one measured
            request) or ``orphan_record`` (its ``plan_hash`` has no ``run_start``).
        detail: one sentence saying what, naming other lines involved.
    """

    line: int
    kind: ProblemKind
    detail: str

    def describe(self) -> str:
        """``line N: detail``."""
        return f"line {self.line}: {self.detail}"


@dataclass(frozen=True, slots=True)
class ResultsIntegrity:
    """What reading a results file found about its integrity (module docstring).

    Attributes:
        chained: records carrying a digest (counts).
        unchained: records before the chain started (written before digest chains).
        problems: every problem found, in line order.
    """

    chained: int
    unchained: int
    problems: tuple[IntegrityProblem, ...] = ()

    @property
    def status(self) -> Literal["verified", "unverified", "tampered"]:
        """``tampered`` with any problem; else ``unverified`` when some record has
        no digest; else ``verified``."""
        if self.problems:
            return "tampered"
        return "unverified" if self.unchained else "verified"

    @property
    def tampered(self) -> bool:
        """True when any problem was found (no speedup is credited)."""
        return bool(self.problems)

    def with_problems(self, more: Iterable[IntegrityProblem]) -> ResultsIntegrity:
        """This integrity with ``more`` problems, all in line order."""
        merged = sorted((*self.problems, *more), key=lambda p: p.line)
        return ResultsIntegrity(self.chained, self.unchained, tuple(merged))

    def describe(self) -> str | None:
        """One line for a report, ``None`` for a verified file: the problems (the
        first three, then a count), or the unverified note."""
        if self.problems:
            named = "; ".join(p.describe() for p in self.problems[:_NAMED_PROBLEMS])
            more = len(self.problems) - _NAMED_PROBLEMS
            return (
                f"TAMPERED results file, edited after it was written: {named}"
                f"{f'; and {more} more' if more > 0 else ''} — no speedup is credited"
            )
        if not self.unchained:
            return None
        if not self.chained:
            return "unverified file (no digest chain): written before results files were chained"
        return (
            f"partly unverified file: its first {self.unchained} records were written "
            f"before results files were chained (no digest); the {self.chained} after verify"
        )


def check_chain(records: Iterable[tuple[int, Mapping[str, Any]]]) -> ResultsIntegrity:
    """Verify the digest chain of ``(line number, record)`` pairs in file order.

    After a break the check continues from the stored digest, so one edited,
    inserted or deleted record is one problem, not one per later record.

    Returns:
        the counts and every ``chain_break`` (:class:`ResultsIntegrity`).
    """
    previous: str | None = None  # None: no chained record yet
    chained = unchained = 0
    problems: list[IntegrityProblem] = []
    for number, rec in records:
        digest = rec.get(DIGEST_FIELD)
        if digest is None and previous is None:
            unchained += 1
            continue
        chained += 1
        if not isinstance(digest, str):
            problems.append(
                IntegrityProblem(
                    number,
                    "chain_break",
                    "a record without a valid digest inside the chain (inserted or edited by hand)",
                )
            )
            continue
        if digest != chain_digest(previous or "", rec):
            problems.append(
                IntegrityProblem(
                    number,
                    "chain_break",
                    "digest chain broken: this record was edited, or a record before it "
                    "was inserted, deleted, duplicated or moved",
                )
            )
        previous = digest
    return ResultsIntegrity(chained, unchained, tuple(problems))
