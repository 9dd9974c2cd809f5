"""The CLI: demo, run (dry run, gate refusal, errors, interrupt), report, exit codes."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from deepseekbench import Row
from deepseekbench._cli._demo import DEMO_CONCURRENCY
from deepseekbench._cli._exits import EXIT_ERRORS, EXIT_GATE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from deepseekbench._cli._main import main
from tests._helpers import ROOT, SPEED_JUDGED, DemoRun, run_cli, speed_judged


def test_demo_credits_mtp_refuses_the_mistuned_one_and_report_rerenders(
    demo_run: DemoRun, tmp_path: Path
) -> None:
    assert demo_run.returncode == EXIT_OK, demo_run.stderr
    out = demo_run.stdout
    mtp = next(ln for ln in out.splitlines() if re.search(r"\smtp\s+mtp\s", ln))
    bad = next(ln for ln in out.splitlines() if re.search(r"\smtp-mistuned\s+mtp\s", ln))
    # parity is judged strictly; the speed is credited, or (a busy machine) a clock refusal
    assert " verified " in mtp and SPEED_JUDGED.search(mtp), mtp
    assert "refused: candidate_parity_not_verified" in bad and "×" not in bad
    assert "first divergence:" in out and "task flips (" in out
    written = list(demo_run.folder.glob("deepseekbench-demo-*.jsonl"))
    assert len(written) == 1 and f"results: {written[0]}" in demo_run.stderr
    assert "results:" not in out and not out.endswith("\n\n")
    report = run_cli("report", str(written[0]), cwd=tmp_path)
    assert report.returncode == EXIT_OK
    assert report.stdout == out  # byte for byte, trailing newlines included
    assert "runs;" not in report.stderr  # one run: no notice
    assert "did not finish" not in report.stderr
    cut = tmp_path / "cut.jsonl"  # the same run without its run_end: an unfinished run
    records = written[0].read_text(encoding="utf-8").splitlines(keepends=True)
    cut.write_text(
        "".join(r for r in records if json.loads(r)["record"] != "run_end"), encoding="utf-8"
    )
    partial = run_cli("report", str(cut), cwd=tmp_path)
    assert partial.returncode == EXIT_OK and "did not finish" in partial.stderr
    as_json = run_cli("report", str(written[0]), "--format", "json", cwd=tmp_path)
    # the sweep: every route at every load, one line each (keyed by route and load)
    lines = {(ln["route"], ln["load_level"]): ln for ln in json.loads(as_json.stdout)["lines"]}
    loads = [float(c) for c in DEMO_CONCURRENCY]
    assert sorted(lines) == sorted((r, c) for r in ("off", "mtp", "mtp-mistuned") for c in loads)
    for c in loads:  # mtp's parity verified and its speed judged; the mis-tuned one refused
        assert lines["mtp", c]["quality_parity"] == "verified" and speed_judged(lines["mtp", c])
        assert lines["mtp-mistuned", c]["speedup"] is None
        assert "candidate_parity_not_verified" in lines["mtp-mistuned", c]["verdict"]["reasons"]

    # mtp's gain shrinks with load, on the engine's own clock (TPOT ratio mtp/off: ≈0.52
    # alone, ≈1.3 at 8; 0.56 and 1.15 beside two CPU burners)
    def tpot_ratio(c: float) -> float:
        return float(lines["mtp", c]["server_tpot_ms"] / lines["off", c]["server_tpot_ms"])

    assert tpot_ratio(max(loads)) > 1.3 * tpot_ratio(min(loads))
    assert re.search(r"^crossover: mtp @ 1k/256/non_think: ", out, re.MULTILINE)
    png = tmp_path / "demo.png"
    plotted = run_cli(
        "report", str(written[0]), "--plot", str(png), "--format", "html", cwd=tmp_path
    )
    assert plotted.returncode == EXIT_OK and f"plot: {png}" in plotted.stderr
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert plotted.stdout.startswith("<!DOCTYPE html>")
    assert "data:image/png;base64," in plotted.stdout
    unwritable = run_cli(
        "report", str(written[0]), "--plot", str(tmp_path / "x.bogus"), cwd=tmp_path
    )
    assert unwritable.returncode == EXIT_USAGE and "cannot write" in unwritable.stderr


def _plan_file(tmp_path: Path, urls: list[str], **extra: Any) -> Path:
    routes = [
        {"label": f"r{i}", "speculative": "off" if i == 0 else "mtp", "base_url": u}
        for i, u in enumerate(urls)
    ]
    data: dict[str, Any] = {"model": "deepseekbench-ref", "routes": routes, **extra}
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def no_connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records (and blocks) any attempt to open a connection."""
    calls: list[str] = []

    async def transport(self: Any, request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        raise AssertionError("a connection was attempted")

    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        calls.append(repr(address))
        real_connect(self, address)

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", transport)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.delenv("DEEPSEEKBENCH_API_KEY", raising=False)
    monkeypatch.delenv("DEEPSEEKBENCH_SPEND", raising=False)
    return calls


def test_dry_run_opens_no_connection_and_reports_gate_refusals(
    tmp_path: Path, no_connections: list[str]
) -> None:
    port = _free_port()  # nothing listens here
    plan = _plan_file(tmp_path, [f"http://127.0.0.1:{port}/v1", "https://api.example.com/v1"])
    out, err = io.StringIO(), io.StringIO()
    rc = main(["run", str(plan), "--dry-run", "--format", "json"], stdout=out, stderr=err)
    assert rc == EXIT_GATE
    rows = [Row.model_validate(r) for r in json.loads(out.getvalue())["rows"]]
    assert len(rows) == 2
    assert all(r.quality_parity.value == "unknown" and r.n_requests == 0 for r in rows)
    assert all(r.tpot_ms is None and not r.is_complete for r in rows)
    assert "api.example.com" in err.getvalue() and "no connection opened" in err.getvalue()
    assert no_connections == []
    loopback = _plan_file(
        tmp_path, [f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{port}/mtp/v1"]
    )
    rows_out = tmp_path / "rows.jsonl"
    rc = main(
        ["run", str(loopback), "--dry-run", "--results", str(rows_out)],
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert rc == EXIT_OK and len(rows_out.read_text().splitlines()) == 2
    assert no_connections == []


def test_gate_refusal_sends_nothing(tmp_path: Path, no_connections: list[str]) -> None:
    plan = _plan_file(tmp_path, ["http://127.0.0.1:9/v1", "https://api.example.com/v1"])
    results = tmp_path / "r.jsonl"
    err = io.StringIO()
    rc = main(["run", str(plan), "--results", str(results)], stdout=io.StringIO(), stderr=err)
    assert rc == EXIT_GATE and "api.example.com" in err.getvalue()
    assert no_connections == [] and not results.exists()


def test_invalid_plan_prints_one_line_per_distinct_problem(tmp_path: Path) -> None:
    routes = [
        {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
        {"label": "a", "speculative": "medusa", "base_url": "http://127.0.0.1:2/v1"},
        {"label": "b", "speculative": "medusa", "base_url": "http://127.0.0.1:3/v1"},
    ]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"model": "m", "routes": routes}), encoding="utf-8")
    err = io.StringIO()
    assert main(["run", str(plan)], stdout=io.StringIO(), stderr=err) == EXIT_USAGE
    lines = err.getvalue().splitlines()
    assert lines[0] == f"deepseekbench: {plan}: invalid plan (1 error):"
    allowed = "allowed: 'off', 'mtp', 'dspark', 'eagle3', 'draft', 'ngram'"
    # the same bad value in two routes is one problem naming both (fresh-user trial)
    assert lines[1:] == [
        f"  routes[1,2].speculative (routes 'a', 'b'): 'medusa' is not a valid Speculative; "
        f"{allowed}"
    ]
    assert "errors.pydantic.dev" not in err.getvalue()


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "m"\nroutes = []\n', encoding="utf-8")
    quiet = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    assert main(["run", str(bad)], **quiet) == EXIT_USAGE
    assert main(["run", str(tmp_path / "absent.toml")], **quiet) == EXIT_USAGE
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"not": "a record"}\n', encoding="utf-8")
    assert main(["report", str(junk)], **quiet) == EXIT_USAGE
    assert main(["report", str(tmp_path / "absent.jsonl")], **quiet) == EXIT_USAGE
    assert main([], **quiet) == EXIT_USAGE
    assert main(["bogus"], **quiet) == EXIT_USAGE


@contextmanager
def serve_banner(*args: str) -> Iterator[str]:
    """``python -m deepseekbench serve --port 0 ARGS``; yields its banner (first stderr line)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepseekbench", "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        yield proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def served(*args: str) -> Iterator[str]:
    """``python -m deepseekbench serve --port 0 ARGS``; yields its base URL."""
    with serve_banner(*args) as line:
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
        assert match, line
        yield match.group(1)


def test_run_with_request_errors_exits_1_and_interrupt_exits_130(tmp_path: Path) -> None:
    with (
        served("--target-step-ms", "1") as off,
        served("--speculative", "mtp", "--fault", "http_503", "--target-step-ms", "1") as bad,
    ):
        plan = _plan_file(
            tmp_path,
            [off, bad],
            requests_per_cell=5,
            warmup_per_cell=0,
            parity={"tasks": "none", "prompts": ["What is 7 × 8?"]},
        )
        proc = run_cli("run", str(plan), "--results", str(tmp_path / "e.jsonl"), cwd=tmp_path)
        assert proc.returncode == EXIT_ERRORS, proc.stderr
        assert "5 (5)" in proc.stdout  # five requests, five errors on the faulty route
        assert "r1" in proc.stdout and "refused" in proc.stdout

    with served("--target-step-ms", "40") as off, served("--speculative", "mtp") as mtp:
        plan = _plan_file(
            tmp_path,
            [off, mtp],
            requests_per_cell=40,
            warmup_per_cell=0,
            parity={"tasks": "none", "prompts": ["Count from 5 to 12."]},
        )
        results = tmp_path / "i.jsonl"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc2 = subprocess.Popen(
            [sys.executable, "-m", "deepseekbench", "run", str(plan), "--results", str(results)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if results.exists() and b'"record":"measurement"' in results.read_bytes():
                break
            time.sleep(0.05)
        proc2.send_signal(signal.SIGINT)
        _, err = proc2.communicate(timeout=180)  # a bound for a starved machine, not judged
        assert proc2.returncode == EXIT_INTERRUPTED, err
        assert "rerun" in err
        kept = [orjson.loads(x) for x in results.read_bytes().splitlines() if x.strip()]
        assert any(r["record"] == "measurement" for r in kept)
        assert not any(r["record"] == "run_end" for r in kept)


def test_report_names_the_runs_of_a_file_and_run_selects_one(tmp_path: Path) -> None:
    results = tmp_path / "two.jsonl"
    hashes = []
    with served("--target-step-ms", "1") as off, served("--speculative", "mtp") as mtp:
        for n in (2, 3):  # two plans (different requests_per_cell) into one file
            plan = _plan_file(
                tmp_path,
                [off, mtp],
                requests_per_cell=n,
                warmup_per_cell=0,
                parity={"tasks": "none", "prompts": ["Count from 5 to 12."]},
            )
            quiet = {"stdout": io.StringIO(), "stderr": io.StringIO()}
            assert main(["run", str(plan), "--results", str(results)], **quiet) == EXIT_OK
            hashes.append(json.loads(results.read_text().splitlines()[-1])["plan_hash"])
    assert hashes[0] != hashes[1]

    def report(*extra: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        rc = main(["report", str(results), "--format", "json", *extra], stdout=out, stderr=err)
        return rc, out.getvalue(), err.getvalue()

    def n_requests(out: str) -> set[int]:
        return {ln["n_requests"] for ln in json.loads(out)["lines"]}

    rc, out, err = report()
    assert rc == EXIT_OK and n_requests(out) == {3}
    assert f"{results} holds 2 runs; showing the last (plan {hashes[1]}, started " in err
    assert "pass --run HASH to choose" in err
    rc, out, err = report("--run", hashes[0][:6])
    assert rc == EXIT_OK and n_requests(out) == {2} and err == ""
    rc, out, err = report("--run", "zzzz")
    assert rc == EXIT_USAGE and "matches no run" in err and hashes[0] in err


def test_serve_banner_names_the_mistuned_draft() -> None:
    banners = []
    for extra in ([], ["--mistuned-draft"]):
        with serve_banner("--speculative", "mtp", *extra) as banner:
            banners.append(banner)
    assert "speculative=mtp" in banners[0] and "MISTUNED" not in banners[0]
    assert "MISTUNED DRAFT (lossy verify: outputs are not exact)" in banners[1]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_only_on_a_terminal() -> None:
    from deepseekbench import ProgressEvent
    from deepseekbench._cli._progress import StderrProgress

    ev = ProgressEvent(
        phase="measure mtp 1k/256/non_think", done=4, total=4, errors=1, elapsed_s=2.0
    )
    tty, pipe = _Tty(), io.StringIO()
    for stream in (tty, pipe):
        p = StderrProgress(stream)
        p(ev)
        p.close()
    shown = tty.getvalue()
    assert "4/4" in shown and "1 errors" in shown and "measure mtp" in shown
    assert "req/s" in shown or "s/req" in shown
    assert pipe.getvalue() == ""


def test_dry_run_shows_the_load_grid(tmp_path: Path, no_connections: list[str]) -> None:
    port = _free_port()
    urls = [f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{port}/mtp/v1"]
    plan = _plan_file(tmp_path, urls, arrival={"concurrency": [1, 8, 32]}, repeats=2)
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(plan), "--dry-run", "--format", "json"], stdout=out, stderr=err) == 0
    rows = [Row.model_validate(r) for r in json.loads(out.getvalue())["rows"]]
    assert [(r.route_label, r.concurrency) for r in rows] == [
        (label, c) for c in (1, 8, 32) for label in ("r0", "r1")
    ]
    assert "grid: 2 routes × 1 cell × 3 load points (concurrency 1, 8, 32) × 2 rounds" in (
        err.getvalue()
    )
    assert no_connections == []


@pytest.mark.parametrize("scenario", ["capacity", "sampling", "numerics"])
def test_other_demo_scenarios_get_their_own_file_and_leave_the_latest_copy_alone(
    scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``deepseekbench-demo.jsonl`` holds the latest *main* demo: a ``--capacity``,
    ``--sampling`` or ``--numerics`` run writes a file named for its scenario and sets
    no copy (the fresh-user trial saw ``--sampling`` leave the copy stale silently)."""
    from deepseekbench._cli import _demo
    from deepseekbench._cli._parser import build_parser

    seen: list[argparse.Namespace] = []

    async def fake(args: argparse.Namespace, out: object, err: object) -> int:
        seen.append(args)
        return 0

    for name in ("run_demo", "run_demo_capacity", "run_demo_sampling", "run_demo_numerics"):
        monkeypatch.setattr(_demo, name, fake)
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["demo", f"--{scenario}"])
    assert _demo.demo_command(args, io.StringIO(), io.StringIO()) == 0
    (got,) = seen
    assert got.latest is None
    assert got.results.name.startswith(f"deepseekbench-demo-{scenario}-")
    main_args = build_parser().parse_args(["demo"])
    seen.clear()
    assert _demo.demo_command(main_args, io.StringIO(), io.StringIO()) == 0
    assert seen[0].latest is not None and seen[0].latest.name == _demo.DEMO_LATEST
