"""Damaged and unfinished results files: a torn last line (with or without a newline
after it) is dropped with a warning, never hiding the good records; a bad line in the
middle stays an error; two files joined are refused by name; an unfinished run warns
and its resume hint names the command that wrote the file."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from deepseekbench import ResultsFormatError, UnfinishedRunWarning, list_runs, load_results
from deepseekbench._cli._exits import EXIT_OK, EXIT_USAGE
from deepseekbench._store._results import ResultsWriter, read_records
from tests.store.test_results_hardening import _cli, _results

TORN = b'{"record": "measurement", "plan_ha'


def _without_run_end(path: Path) -> bytes:
    """The file's bytes up to (not including) its last ``run_end`` record."""
    lines = path.read_bytes().splitlines(keepends=True)
    cut = max(i for i, ln in enumerate(lines) if b'"run_end"' in ln)
    return b"".join(lines[:cut])


@pytest.mark.parametrize("after", [b"", b"\n", b"\n\n"])
def test_a_torn_last_line_is_dropped_with_a_warning_newline_or_not(
    tmp_path: Path, after: bytes
) -> None:
    results, _ = _results(tmp_path)
    good = load_results(results)
    results.write_bytes(_without_run_end(results) + TORN + after)
    n_lines = results.read_bytes().count(b"\n") + (after == b"")
    torn_line = n_lines - max(0, after.count(b"\n") - 1)
    with pytest.warns(UnfinishedRunWarning, match=rf"last line \({torn_line}\) was torn"):
        result = load_results(results)
    assert not result.complete
    assert len(result.measurements) == len(good.measurements)  # no good record lost
    code, _, err = _cli("report", str(results))
    assert code == EXIT_OK and "did not finish" in err and "torn" in err


def test_the_writer_cuts_a_torn_line_a_newline_follows(tmp_path: Path) -> None:
    """A resume after such a tail appends after the last good record, not after the
    torn line (which would then sit in the middle and make the file unreadable)."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"record": "run_start", "plan_hash": "x"}\n' + TORN + b"\n")
    ResultsWriter(path).close()
    assert path.read_bytes() == b'{"record": "run_start", "plan_hash": "x"}\n'


def test_a_line_that_is_not_json_in_the_middle_stays_an_error(tmp_path: Path) -> None:
    results, _ = _results(tmp_path)
    lines = results.read_bytes().splitlines(keepends=True)
    results.write_bytes(b"".join([*lines[:3], TORN + b"\n", *lines[3:]]))
    with pytest.raises(ResultsFormatError, match="line 4 is not JSON"):
        load_results(results)


def test_two_results_files_joined_are_refused_naming_the_second(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = _results(tmp_path / "a")
    second, _ = _results(tmp_path / "b")
    joined = tmp_path / "two.jsonl"
    joined.write_bytes(first.read_bytes() + second.read_bytes())
    n_first = len(read_records(first))
    with pytest.raises(ResultsFormatError, match="two results files joined") as info:
        load_results(joined)
    assert f"line {n_first + 1} starts a second file" in str(info.value)
    assert "TAMPERED" not in str(info.value)
    code, _, err = _cli("report", str(joined))
    assert code == EXIT_USAGE and "two results files joined" in err and "TAMPERED" not in err


def test_a_run_resumed_on_the_same_file_is_not_two_files(tmp_path: Path) -> None:
    """A second run on one file continues its digest chain: read, not refused."""
    results, plan = _results(tmp_path)
    results.write_bytes(_without_run_end(results))
    code, _, err = _cli("run", str(plan), "--results", str(results))
    assert code == EXIT_OK, err
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_results(results).complete


def test_an_unfinished_run_warns_and_names_the_run_command(tmp_path: Path) -> None:
    results, _plan = _results(tmp_path)  # written by `run`
    assert read_records(results)[0]["command"] == "run"
    results.write_bytes(_without_run_end(results))
    with (
        pytest.raises(UnfinishedRunWarning, match=r"rerun the same `run` command"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("error")
        load_results(results)
    code, _, err = _cli("report", str(results))
    assert code == EXIT_OK and "rerun the same `run` command" in err


@pytest.mark.parametrize(
    ("command", "hint"),
    [("demo", "a `demo` is not resumed"), (None, "rerun the command that wrote it")],
)
def test_the_resume_hint_follows_the_recorded_command(
    tmp_path: Path, command: str | None, hint: str
) -> None:
    import orjson

    from deepseekbench._store._chain import DIGEST_FIELD, chain_digest, without_digest

    results, _ = _results(tmp_path)
    records = read_records(_as_unfinished(results))
    previous = ""
    out = []
    for rec in records:  # re-chained, as a writer of that command (or none) wrote it
        rec = without_digest(rec)
        if rec["record"] == "run_start":
            rec.pop("command", None)
            if command is not None:
                rec["command"] = command
        previous = chain_digest(previous, rec)
        out.append(orjson.dumps({**rec, DIGEST_FIELD: previous}) + b"\n")
    results.write_bytes(b"".join(out))
    with pytest.warns(UnfinishedRunWarning, match=hint) as caught:
        result = load_results(results)
    assert not result.complete and result.integrity is not None
    assert result.integrity.status == "verified" and len(caught) == 1


def _as_unfinished(path: Path) -> Path:
    path.write_bytes(_without_run_end(path))
    return path


def test_path_of_the_wrong_type_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match=r"load_results: path must be a str or os.PathLike"):
        load_results(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"list_runs: path must be a str or os.PathLike"):
        list_runs(None)  # type: ignore[arg-type]
