"""First use loads only what it uses: a structural check, never a timed one.

Reading a results file, comparing two of its rows and printing the scorecard (from the
library, or ``python -m deepseekbench report``) must not import scipy (about 1 CPU-s),
the embedded engine, or the code that sends requests; ``benchmarks/bench_first_use.py``
measures what first use costs. Each case runs in a fresh interpreter and lists what
ended up in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "tests" / "data" / "render" / "demo.jsonl"
NUMERICS = ROOT / "tests" / "data" / "render" / "numerics.jsonl"

HEAVY = (
    "scipy",
    "deepseekbench._engine",
    "deepseekbench._launch",
    "deepseekbench._execute",
    "deepseekbench._measure",
    "deepseekbench._runner",
)
"""Module prefixes first use must not import."""

_REPORT = """
import json, sys
from deepseekbench._cli._main import main
main(sys.argv[1:], stdout=open("/dev/null", "w"))
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

_LIBRARY = """
import json, sys
import deepseekbench as dsb
run = dsb.load_results(sys.argv[1])
verdicts = [dsb.compare_speedup(run.rows[0], row, result=run) for row in run.rows[1:]]
dsb.Scorecard.from_run(run).to_text()
print(sum(v.ci_low is not None for v in verdicts), file=sys.stderr)  # intervals computed
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules(*argv: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", *argv], capture_output=True, text=True, env=env, check=True
    )
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


def _modules_and_intervals(*argv: str) -> tuple[list[str], int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", *argv], capture_output=True, text=True, env=env, check=True
    )
    *_, count, modules = done.stderr.strip().splitlines()
    return json.loads(modules), int(count)


def _heavy(loaded: list[str]) -> list[str]:
    return [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize("results", [DEMO, NUMERICS], ids=["demo", "numerics"])
def test_reading_comparing_and_printing_imports_nothing_heavy(results: Path) -> None:
    loaded, intervals = _modules_and_intervals(_LIBRARY, str(results))
    assert "deepseekbench._analysis._analysis" in loaded  # the case did run
    assert results != DEMO or intervals > 0  # the speedup interval was computed too
    assert _heavy(loaded) == []


@pytest.mark.parametrize(
    "argv", [["report", str(DEMO)], ["--help"], ["--version"]], ids=["report", "help", "version"]
)
def test_the_cli_imports_only_the_command_it_runs(argv: list[str]) -> None:
    loaded = _modules(_REPORT, *argv)
    assert _heavy(loaded) == []
    assert "deepseekbench._cli._demo" not in loaded  # another command's module
    if argv[0] == "report":
        assert "deepseekbench._report._scorecard" in loaded


def test_serve_still_loads_its_engine_when_asked() -> None:
    loaded = _modules(_REPORT, "serve", "--help")
    assert "deepseekbench._engine" in loaded
