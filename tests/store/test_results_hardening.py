"""Results that survive anything.

Runs go to replay servers on 127.0.0.1 (``tests/_replay.py``); the CLI runs
in-process with the servers in a background event loop (a blocking portal).
"""

from __future__ import annotations

import csv
import io
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from anyio.from_thread import start_blocking_portal
from pydantic import ValidationError

from deepseekbench import (
    SCHEMA_VERSION,
    BenchmarkPlan,
    LiveGate,
    ResultsFormatError,
    ResultsInUseError,
    Row,
    RowFormatError,
    load_results,
    read_rows,
    run_plan,
    write_rows,
)
from deepseekbench._cli._exits import EXIT_ERRORS, EXIT_OK, EXIT_USAGE
from deepseekbench._cli._main import main
from deepseekbench._store._results import ResultsWriter
from tests._replay import RecordedRequest, Script, replay_server
from tests.test_foundation import make_row

ROOT = Path(__file__).resolve().parents[2]
N = 3  # measured requests per route


def _ok(_: RecordedRequest) -> Script:
    chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    return Script.sse(["data: " + orjson.dumps(chunk).decode() + "\n\n", "data: [DONE]\n\n"])


def _unavailable(_: RecordedRequest) -> Script:
    return Script(status=503, headers={"content-type": "application/json"})


class Switch:
    """A server script that answers 503 until ``up`` is set (a server not started yet)."""

    def __init__(self) -> None:
        self.up = False

    def __call__(self, request: RecordedRequest) -> Script:
        return _ok(request) if self.up else _unavailable(request)


def _plan_data(off_url: str, mtp_url: str) -> dict[str, Any]:
    return {
        "model": "m",
        "routes": [
            {"label": "off", "speculative": "off", "base_url": off_url},
            {"label": "mtp", "speculative": "mtp", "base_url": mtp_url},
        ],
        "requests_per_cell": N,
        "warmup_per_cell": 0,
        "parity": {"prompts": ["p"], "tasks": "none"},
        # these runs record what misbehaving or absent servers do to requests: the
        # reachability probe would stop them first (tests/test_fresh_user_trial.py)
        "probe_routes": False,
    }


@contextmanager
def servers(
    off: Callable[[RecordedRequest], Script] = _ok, mtp: Callable[[RecordedRequest], Script] = _ok
) -> Iterator[dict[str, Any]]:
    """Two replay servers in a background loop; yields the data of a plan for them."""
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(replay_server(off)) as s_off,
        portal.wrap_async_context_manager(replay_server(mtp)) as s_mtp,
    ):
        yield _plan_data(s_off.base_url, s_mtp.base_url)


def _plan_file(tmp_path: Path, data: dict[str, Any]) -> Path:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    return p


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(ln) for ln in path.read_bytes().splitlines() if ln.strip()]


def _write_lines(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def _results(tmp_path: Path) -> tuple[Path, Path]:
    """A complete results file of a small run, and its plan file."""
    results = tmp_path / "r.jsonl"
    with servers() as data:
        plan = _plan_file(tmp_path, data)
        code, _, err = _cli("run", str(plan), "--results", str(results))
    assert code == EXIT_OK, err
    return results, plan


# -- item 7: a dry run never destroys a results file --------------------------------------
def test_dry_run_refuses_to_overwrite_a_results_file(tmp_path: Path) -> None:
    results, plan = _results(tmp_path)
    before = results.read_bytes()
    code, _, err = _cli("run", str(plan), "--dry-run", "--results", str(results))
    assert code == EXIT_USAGE and "holds results" in err and "--results" in err
    assert results.read_bytes() == before
    rows = tmp_path / "rows.jsonl"  # rows of an earlier dry run may be replaced
    assert _cli("run", str(plan), "--dry-run", "--results", str(rows))[0] == EXIT_OK
    assert _cli("run", str(plan), "--dry-run", "--results", str(rows))[0] == EXIT_OK
    assert len(read_rows(rows)) == 2


# -- item 21 (part): --dry-run honours --format ------------------------------------------
def test_dry_run_honours_format(tmp_path: Path) -> None:
    plan = _plan_file(tmp_path, _plan_data("http://127.0.0.1:9/v1", "http://127.0.0.1:7/v1"))
    code, text, _ = _cli("run", str(plan), "--dry-run")
    assert code == EXIT_OK and text.split()[:5] == ["route", "speculative", "cell", "load", "gate"]
    assert "off" in text and "admitted" in text and "{" not in text
    md = _cli("run", str(plan), "--dry-run", "--format", "markdown")[1]
    assert md.startswith("| route | speculative | cell | load | gate |\n|---|")
    table = list(
        csv.DictReader(io.StringIO(_cli("run", str(plan), "--dry-run", "--format", "csv")[1]))
    )
    assert [r["route"] for r in table] == ["off", "mtp"] and table[0]["cell"] == "1k/256/non_think"
    data = json.loads(_cli("run", str(plan), "--dry-run", "--format", "json")[1])
    assert len(data["rows"]) == 2 and data["refusals"] == {"off": None, "mtp": None}


# -- item 8: torn tails of any size; a whole last record without its newline -------------
def test_a_torn_last_record_over_64_kib_is_cut_on_resume(tmp_path: Path) -> None:
    results, plan = _results(tmp_path)
    with results.open("ab") as fh:
        fh.write(b'{"record": "measurement", "text": "' + b"x" * (200 * 1024))  # torn mid-write
    code, _, err = _cli("run", str(plan), "--results", str(results))
    assert code == EXIT_OK, err
    assert _cli("report", str(results))[0] == EXIT_OK
    assert all(b"xxxx" not in ln for ln in results.read_bytes().splitlines())


def test_a_whole_last_record_missing_its_newline_is_kept(tmp_path: Path) -> None:
    results, plan = _results(tmp_path)
    records = _lines(results)
    last_measurement = max(i for i, r in enumerate(records) if r["record"] == "measurement")
    kept = records[: last_measurement + 1]
    _write_lines(results, kept)
    results.write_bytes(results.read_bytes().rstrip(b"\n"))  # the crash came just before "\n"
    code, _, err = _cli("run", str(plan), "--results", str(results))
    # the servers are gone: the kept measurement is not asked again, the others fail
    after = _lines(results)
    assert after[: len(kept)] == kept  # the record survived, now with its newline
    assert results.read_bytes().count(orjson.dumps(kept[-1])) == 1
    result = load_results(results)
    key = (kept[-1]["route"], kept[-1]["cell"], kept[-1]["index"])
    found = [m for m in result.measurements if (m.route, m.cell, m.index) == key]
    assert len(found) == 1 and found[0].measurement.error is None
    assert code in (EXIT_OK, EXIT_ERRORS), err


# -- item 9: one writer per results file ----------------------------------------------
def test_a_second_writer_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    results, plan = _results(tmp_path)
    before = results.read_bytes()
    holder = ResultsWriter(results)  # another run, still writing
    try:
        with servers() as data:

            async def go() -> None:
                with pytest.raises(ResultsInUseError, match="in use by another run"):
                    await run_plan(
                        BenchmarkPlan.model_validate(data), gate=LiveGate(), results_path=results
                    )

            anyio.run(go)
        code, _, err = _cli("run", str(plan), "--results", str(results))
        assert code == EXIT_USAGE and "in use by another run" in err
    finally:
        holder.close()
    assert results.read_bytes() == before
    assert _cli("report", str(results))[0] == EXIT_OK  # free again once the holder is done


# -- item 10: devices are refused, a full disk fails clearly ------------------------------
def _limited(*args: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limits,
        check=False,
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero and /dev/full")
def test_devices_are_refused_not_read_forever(tmp_path: Path) -> None:
    proc = _limited("-m", "deepseekbench", "report", "/dev/zero")
    assert proc.returncode == EXIT_USAGE and "not a regular file" in proc.stderr, proc.stderr
    plan = _plan_file(tmp_path, _plan_data("http://127.0.0.1:9/v1", "http://127.0.0.1:7/v1"))
    proc = _limited("-m", "deepseekbench", "run", str(plan), "--results", "/dev/full")
    assert proc.returncode == EXIT_USAGE and "not a regular file" in proc.stderr, proc.stderr
    proc = _limited("-m", "deepseekbench", "run", "/dev/zero")
    assert proc.returncode == EXIT_USAGE and "not a regular file" in proc.stderr, proc.stderr
    code, _, err = _cli("run", str(plan), "--dry-run", "--results", "/dev/zero")
    assert code == EXIT_USAGE and "never overwrites" in err


FULL_DISK = """\
import sys, anyio
from deepseekbench import BenchmarkPlan, LiveGate, ResultsWriteError, run_plan
from tests._replay import replay_server
from tests.store.test_results_hardening import _ok, _plan_data

async def main() -> int:
    async with replay_server(_ok) as off, replay_server(_ok) as mtp:
        plan = BenchmarkPlan.model_validate(_plan_data(off.base_url, mtp.base_url))
        try:
            await run_plan(plan, gate=LiveGate(), results_path=sys.argv[1])
        except ResultsWriteError as exc:
            print("ResultsWriteError:", exc)
            return 2
    return 0

sys.exit(anyio.run(main))
"""


def test_a_full_disk_stops_the_run_with_a_clear_error(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    proc = _limited("-c", FULL_DISK, str(results), fsize=6000)  # the disk fills mid-run
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "ResultsWriteError: cannot write to results file" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert results.stat().st_size <= 6000
    assert all(isinstance(r, dict) for r in _lines(results))  # no torn record left behind


# -- item 11: strict reading names the line --------------------------------------------
@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda r: r.update(index=1.5), "'index': Input should be a valid integer"),
        (lambda r: r.update(index=99999), "index 99999 is outside the plan's"),
        (lambda r: r.update(index=-1), "'index': Input should be greater than or equal to 0"),
        (lambda r: r.update(turn=-5), "'turn': Input should be greater than or equal to 0"),
        (lambda r: r.update(load="c=999"), "load 'c=999' is not in the plan"),
        (lambda r: r.update(index="3"), "'index': Input should be a valid integer"),
        (lambda r: r.update(surprise=1), "'surprise': Extra inputs are not permitted"),
        (lambda r: r.update(route="typo"), "route 'typo' is not in the plan"),
        (lambda r: r.update(cell="8k/256/non_think"), "cell '8k/256/non_think' is not in"),
        (lambda r: r.update(record="measurment"), "unknown record kind 'measurment'"),
        (lambda r: r.update(plan_hash=None), "has no plan_hash"),
    ],
)
def test_hand_edited_records_are_refused_naming_the_line(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], problem: str
) -> None:
    results, _ = _results(tmp_path)
    records = _lines(results)
    target = next(i for i, r in enumerate(records) if r["record"] == "measurement")
    edit(records[target])
    _write_lines(results, records)
    with pytest.raises(ResultsFormatError) as info:
        load_results(results)
    assert f"line {target + 1}" in str(info.value) and problem in str(info.value)
    assert info.value.line_number == target + 1
    code, _, err = _cli("report", str(results))
    assert code == EXIT_USAGE and f"line {target + 1}" in err


def test_rows_of_another_schema_version_and_nan_rows_are_refused(tmp_path: Path) -> None:
    p = tmp_path / "rows.jsonl"
    line = orjson.loads(make_row().to_json_line())
    line["schema_version"] = SCHEMA_VERSION + 1
    p.write_bytes(orjson.dumps(line) + b"\n")
    unsupported = rf"line 1 .*schema_version {SCHEMA_VERSION + 1} is not supported"
    with pytest.raises(RowFormatError, match=unsupported):
        read_rows(p)
    nan_row = make_row().model_copy(update={"tpot_ms": float("nan")})
    with pytest.raises(ValidationError, match="tpot_ms"):
        write_rows(tmp_path / "nan.jsonl", [nan_row])
    assert isinstance(Row.model_validate(orjson.loads(make_row().to_json_line())), Row)


# -- item 16: errored measurements are retried on resume ---------------------------------
def test_errored_measurements_are_retried_on_resume_and_can_be_kept(tmp_path: Path) -> None:
    switch = Switch()
    results = tmp_path / "r.jsonl"
    kept = tmp_path / "kept.jsonl"
    with servers(off=switch, mtp=switch) as data:
        # errored *measurements* are the subject: with the default "pinned" a down off
        # route stops the run at its calibration pass instead (test_output_length.py)
        data["workload"] = {**data.get("workload", {}), "output_length": "natural"}
        plan = _plan_file(tmp_path, data)
        for path in (results, kept):  # the servers are not ready yet
            code, _, err = _cli("run", str(plan), "--results", str(path))
            assert code == EXIT_ERRORS, err
        switch.up = True
        code, _, err = _cli("run", str(plan), "--results", str(results))
        assert code == EXIT_OK, err
        assert f"{2 * N} errored measurement(s) of the earlier run were measured again" in err
        assert "--no-retry-errors" in err
        code, _, err = _cli("run", str(plan), "--results", str(kept), "--no-retry-errors")
        assert code == EXIT_ERRORS and "were kept (--no-retry-errors)" in err
    retried = load_results(results)
    assert retried.n_errors == 0 and len(retried.measurements) == 2 * N
    assert all(r.n_errors == 0 and r.n_requests == N for r in retried.rows)
    assert load_results(kept).n_errors == 2 * N


# -- item 17: the CLI says why requests failed ----------------------------------------
def test_error_summary_per_route_after_run_and_in_report(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    with servers(mtp=_unavailable) as data:
        plan = _plan_file(tmp_path, data)
        code, out, err = _cli("run", str(plan), "--results", str(results))
    assert code == EXIT_ERRORS
    summary = err[err.index("request errors by route") :]
    assert f"mtp: http_status × {N}: HTTP 503" in summary and "off:" not in summary
    assert "request errors" not in out  # stdout stays the scorecard
    code, _, report_err = _cli("report", str(results))
    assert code == EXIT_OK and f"mtp: http_status × {N}: HTTP 503" in report_err


def test_a_dry_runs_rows_given_as_results_say_what_they_are(tmp_path: Path) -> None:
    """A dry run writes rows to ``--results``; a real run pointed at that file next is
    refused (nothing is overwritten) with a message naming what the file holds."""
    plan = _plan_file(tmp_path, _plan_data("http://127.0.0.1:9/v1", "http://127.0.0.1:7/v1"))
    out = tmp_path / "dr.jsonl"
    code, _, _ = _cli("run", str(plan), "--dry-run", "--results", str(out))
    assert code == EXIT_OK and out.read_bytes()
    before = out.read_bytes()
    code, _, err = _cli("run", str(plan), "--results", str(out), "--no-probe")
    assert code == 2 and "holds rows (a dry run's --results output" in err, err
    assert "Traceback" not in err and out.read_bytes() == before
