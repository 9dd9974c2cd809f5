"""A results file says when it was edited: the digest chain over its records,
duplicated measurement records, records of no run, and rounds outside the plan.

A hand edit that duplicated one measurement record moved a TTFT p99 from 11.7 to
81,001 ms with ``n`` unchanged, and nothing said so; these tests hold that every
such edit is named by line, in every report format, and credits no speedup.
"""

from __future__ import annotations

import io
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deepseekbench import (
    LiveGate,
    RefusalReason,
    ResultsFormatError,
    ResultsIntegrityWarning,
    Scorecard,
    Speculative,
    SpeedupMetric,
    compare_speedup,
    load_results,
    run_plan,
)
from deepseekbench._analysis._capacity import _refusal
from deepseekbench._cli._main import main as cli_main
from deepseekbench._store._chain import DIGEST_FIELD, check_chain
from deepseekbench._store._records import RunEndRecord
from deepseekbench._store._results import ResultsWriter, read_numbered_records
from tests._helpers import COSTS, off_and_mtp, plan_of

Lines = list[bytes]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run's results file (off and mtp, 2 rounds of 6 requests)."""
    path = tmp_path_factory.mktemp("integrity") / "run.jsonl"

    async def main() -> None:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            plan = plan_of(
                [("off", "off", off.base_url), ("mtp", "mtp", mtp.base_url)],
                {
                    "requests_per_cell": 6,
                    "warmup_per_cell": 0,
                    "repeats": 2,
                    "parity": {"max_tokens": 24},
                    "cells": [{"context_bucket": "1k", "output_target": "256", "max_tokens": 16}],
                },
                {},
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the coverage warning of 16 smoke items
                await run_plan(plan, gate=LiveGate(), results_path=path)

    anyio.run(main)
    return path


def _lines(path: Path) -> Lines:
    return path.read_bytes().splitlines(keepends=True)


def _write(tmp_path: Path, lines: Lines) -> Path:
    out = tmp_path / "edited.jsonl"
    out.write_bytes(b"".join(lines))
    return out


def _kind_lines(lines: Lines, kind: str) -> list[int]:
    """0-based positions of the records of ``kind``."""
    return [k for k, line in enumerate(lines) if orjson.loads(line)["record"] == kind]


def _edit_ttft(line: bytes, ttft_ms: float) -> bytes:
    obj = orjson.loads(line)
    obj["measurement"]["ttft_ms"] = ttft_ms
    return orjson.dumps(obj) + b"\n"


def _unchained(lines: Lines) -> Lines:
    """The file as written before digest chains: no record carries a digest."""
    out = []
    for line in lines:
        obj = orjson.loads(line)
        obj.pop(DIGEST_FIELD)
        out.append(orjson.dumps(obj) + b"\n")
    return out


def _load_tampered(path: Path) -> Any:
    with pytest.warns(ResultsIntegrityWarning) as caught:
        result = load_results(path)
    assert str(path) in str(caught[0].message)
    return result


def test_every_record_of_a_run_is_chained_and_the_file_verifies(clean: Path) -> None:
    lines = _lines(clean)
    assert all(isinstance(orjson.loads(x).get(DIGEST_FIELD), str) for x in lines)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsIntegrityWarning)
        result = load_results(clean)
    assert result.integrity is not None and result.integrity.status == "verified"
    assert result.integrity.chained == len(lines) and not result.results_tampered
    assert result.meta is not None and result.meta.results_integrity is None
    assert "Results file:" not in Scorecard.from_run(result).to_text()


_EDITS: dict[str, Callable[[Lines, int], tuple[Lines, int]]] = {
    # (edited lines, the 1-based line the break is reported at)
    "edited": lambda ls, k: ([*ls[:k], _edit_ttft(ls[k], 81_001.0), *ls[k + 1 :]], k + 1),
    "deleted": lambda ls, k: ([*ls[:k], *ls[k + 1 :]], k + 1),
    "duplicated": lambda ls, k: ([*ls[: k + 1], ls[k], *ls[k + 1 :]], k + 2),
    "moved": lambda ls, k: ([*ls[:k], ls[k + 1], ls[k], *ls[k + 2 :]], k + 1),
    "inserted": lambda ls, k: ([*ls[:k], _unchained([ls[k]])[0], *ls[k:]], k + 1),
}


@pytest.mark.parametrize("edit", sorted(_EDITS))
def test_an_edit_is_named_by_line_and_credits_no_speedup(
    clean: Path, tmp_path: Path, edit: str
) -> None:
    lines = _lines(clean)
    k = _kind_lines(lines, "measurement")[3]
    edited, line = _EDITS[edit](lines, k)
    result = _load_tampered(_write(tmp_path, edited))
    assert result.integrity is not None and result.integrity.status == "tampered"
    first = result.integrity.problems[0]
    assert (first.line, first.kind) == (line, "chain_break"), result.integrity.problems
    card = Scorecard.from_run(result)
    spec = [ln for ln in card.lines if ln.speculative is not Speculative.off]
    assert spec and all(
        ln.verdict is not None and ln.verdict.reasons == (RefusalReason.results_tampered,)
        for ln in spec
    )
    categories = [c for ln in spec for c in ln.categories if c.verdict is not None]
    assert categories and all(
        c.verdict is not None and c.verdict.reasons == (RefusalReason.results_tampered,)
        for c in categories
    )  # the per-category table (the smoke tasks' categories) credits nothing either
    off_row = next(r for r in result.rows if r.speculative is Speculative.off)
    mtp_row = next(r for r in result.rows if r.speculative is not Speculative.off)
    verdict = compare_speedup(off_row, mtp_row, result=result)
    assert not verdict and verdict.reasons == (RefusalReason.results_tampered,)
    assert "results_tampered" in (_refusal(result, "off", "mtp", SpeedupMetric.tpot_ms) or "")
    said = f"line {line}: "
    for fmt in ("text", "markdown", "html", "json", "csv"):
        out = card.render(fmt)
        assert "TAMPERED results file" in out and said in out, fmt


def test_a_duplicated_measurement_is_named_without_the_chain(clean: Path, tmp_path: Path) -> None:
    """The reported case: a second copy of one measurement, its TTFT 81,001 ms, in a
    file with no digests; ``n`` is unchanged, so only the duplicate check can tell."""
    lines = _unchained(_lines(clean))
    k = _kind_lines(lines, "measurement")[2]
    edited = [*lines, _edit_ttft(lines[k], 81_001.0)]
    result = _load_tampered(_write(tmp_path, edited))
    assert result.integrity is not None
    (problem,) = result.integrity.problems
    assert problem.kind == "duplicate_measurement" and problem.line == len(edited)
    assert f"first on line {k + 1}" in problem.detail
    assert "a second record of measured request" in problem.detail
    assert "Results file: TAMPERED" in Scorecard.from_run(result).to_text()


def test_a_file_without_digests_loads_with_the_unverified_note(clean: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsIntegrityWarning)
        result = load_results(_write(tmp_path, _unchained(_lines(clean))))
    assert result.integrity is not None and result.integrity.status == "unverified"
    assert not result.results_tampered
    card = Scorecard.from_run(result)
    for fmt in ("text", "markdown", "html", "json", "csv"):
        assert "unverified file (no digest chain)" in card.render(fmt), fmt


def test_records_of_a_plan_with_no_run_start_are_named(clean: Path, tmp_path: Path) -> None:
    lines = _unchained(_lines(clean))
    k = _kind_lines(lines, "measurement")[0]
    obj = orjson.loads(lines[k])
    obj["plan_hash"] = "0123456789abcdef"
    edited = [*lines[:k], orjson.dumps(obj) + b"\n", *lines[k + 1 :]]
    result = _load_tampered(_write(tmp_path, edited))
    assert result.integrity is not None
    assert [(p.line, p.kind) for p in result.integrity.problems] == [(k + 1, "orphan_record")]
    assert "has no run_start" in result.integrity.problems[0].detail


@pytest.mark.parametrize("kind", ["measurement", "server_metrics"])
def test_a_round_outside_the_plan_is_an_error_naming_its_line(
    clean: Path, tmp_path: Path, kind: str
) -> None:
    lines = _lines(clean)
    k = _kind_lines(lines, kind)[0]
    obj = orjson.loads(lines[k])
    obj["round"] = 7
    edited = [*lines[:k], orjson.dumps(obj) + b"\n", *lines[k + 1 :]]
    with pytest.raises(ResultsFormatError, match=f"line {k + 1} .*round 7 is outside") as info:
        load_results(_write(tmp_path, edited))
    assert info.value.line_number == k + 1


def test_the_report_command_says_so_on_stderr_and_stdout(clean: Path, tmp_path: Path) -> None:
    lines = _lines(clean)
    k = _kind_lines(lines, "measurement")[1]
    path = _write(tmp_path, [*lines[:k], _edit_ttft(lines[k], 1.0), *lines[k + 1 :]])
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsIntegrityWarning)  # said once, on stderr
        assert cli_main(["report", str(path)], stdout=out, stderr=err) == 0
    assert f"line {k + 1}: digest chain broken" in err.getvalue()
    assert f"Results file: TAMPERED results file, edited after it was written: line {k + 1}" in (
        out.getvalue()
    )


def test_a_resumed_file_continues_the_chain(clean: Path, tmp_path: Path) -> None:
    """Appending to a file (what a resumed run does) chains onto its last record;
    appending to a file written before chains starts the chain there."""
    for lines, unchained in ((_lines(clean), 0), (_unchained(_lines(clean)), len(_lines(clean)))):
        path = _write(tmp_path, lines)
        writer = ResultsWriter(path)
        writer.write(RunEndRecord(plan_hash="h", n_requests=1))
        writer.close()
        writer = ResultsWriter(path)
        writer.write(RunEndRecord(plan_hash="h", n_requests=2))
        writer.close()
        integrity = check_chain(read_numbered_records(path))
        assert (integrity.unchained, integrity.problems) == (unchained, ())
        assert integrity.chained + integrity.unchained == len(lines) + 2


# ---------------------------------------------------------------- the chain's property


def _chained_file(path: Path, sessions: list[list[int]]) -> Lines:
    """Records written by one writer per session (a run, then its resumes)."""
    for session in sessions:
        writer = ResultsWriter(path)
        for n in session:
            writer.write(RunEndRecord(plan_hash="h", n_requests=n))
        writer.close()
    return _lines(path)


_MUTATIONS = ("edit", "delete", "duplicate", "swap")


@settings(deadline=None, max_examples=60)
@given(
    sessions=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=4), min_size=1, max_size=3),
    mutation=st.sampled_from(_MUTATIONS),
    where=st.integers(0, 100),
)
@example(sessions=[[1, 1, 1]], mutation="delete", where=1)  # equal records around a gap
@example(sessions=[[0], [0]], mutation="swap", where=0)  # equal records: digests still differ
def test_any_one_edit_breaks_the_chain_at_its_line(
    tmp_path_factory: pytest.TempPathFactory, sessions: list[list[int]], mutation: str, where: int
) -> None:
    path = tmp_path_factory.mktemp("chain") / "r.jsonl"
    lines = _chained_file(path, sessions)
    assert check_chain(read_numbered_records(path)).status == "verified"
    n = len(lines)
    if mutation in ("delete", "swap") and n < 2:
        return
    k = where % (n - 1) if mutation in ("delete", "swap") else where % n
    if mutation == "edit":
        obj = orjson.loads(lines[k])
        obj["n_requests"] += 1
        edited, line = [*lines[:k], orjson.dumps(obj) + b"\n", *lines[k + 1 :]], k + 1
    elif mutation == "delete":  # the last record's deletion is a crash's cut: see _chain
        edited, line = [*lines[:k], *lines[k + 1 :]], k + 1
    elif mutation == "duplicate":
        edited, line = [*lines[: k + 1], lines[k], *lines[k + 1 :]], k + 2
    else:
        edited, line = [*lines[:k], lines[k + 1], lines[k], *lines[k + 2 :]], k + 1
    path.write_bytes(b"".join(edited))
    problems = check_chain(read_numbered_records(path)).problems
    assert problems and problems[0].line == line, (mutation, k, problems)
    shutil.rmtree(path.parent)
