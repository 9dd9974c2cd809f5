"""First use: CPU seconds of whole fresh processes, from interpreter start to exit.

A user's first contact is a fresh process: ``import deepseekbench``, read a results
file, compare two rows, print the scorecard; or ``python -m deepseekbench report``.
What that costs is mostly imports. This script runs each case ``--runs`` times as a
new Python process and reads the CPU time it used (user + system, from
``resource.getrusage(RUSAGE_CHILDREN)`` before and after the child, so the whole
process counts: interpreter start, imports, work, exit). It prints min/median/max
per case and the load average (1 / 5 / 15 min) beside them: CPU seconds, not wall
time, so a busy machine inflates them less, but not to nothing (caches, frequency).

Cases (``--results`` defaults to a copy of ``tests/data/results_v0/results.jsonl``, 57 KB,
with its plan's task and dataset files beside it; ``report-demo`` reads the demo's
``tests/data/render/demo.jsonl``, 230 KB):

* ``import``: ``import deepseekbench``;
* ``analyse``: ``load_results`` + ``compare_speedup(rows[0], rows[1], result=run)`` (the
  interval the scorecard prints) + ``Scorecard.from_run(...).to_text()``;
* ``report``: ``python -m deepseekbench report RESULTS``;
* ``report-demo``: the same on the demo's results.

Target: ``analyse`` and ``report`` at most 1 CPU-s each (median).

Run: ``python benchmarks/bench_first_use.py [--runs 5] [--results PATH]``; exit 0 = met.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
V0 = ROOT / "tests" / "data" / "results_v0"
V0_WRITTEN_AT = "/tmp/dsb-fixture-v0"  # where its plan's files were when it was written
DEMO = ROOT / "tests" / "data" / "render" / "demo.jsonl"
TARGET_CPU_S = 1.0

_ANALYSE = """
import sys
import deepseekbench as d
run = d.load_results(sys.argv[1])
print(d.compare_speedup(run.rows[0], run.rows[1], result=run))
d.Scorecard.from_run(run).to_text()
"""


def _cases(results: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "import": [py, "-c", "import deepseekbench"],
        "analyse": [py, "-c", _ANALYSE, str(results)],
        "report": [py, "-m", "deepseekbench", "report", str(results)],
        "report-demo": [py, "-m", "deepseekbench", "report", str(DEMO)],
    }


def _small_file(into: Path) -> Path:
    """The 57 KB fixture, its plan's task and dataset files moved beside it."""
    for name in ("tasks.jsonl", "data.jsonl"):
        (into / name).write_bytes((V0 / name).read_bytes())
    text = (V0 / "results.jsonl").read_text(encoding="utf-8")
    out = into / "results.jsonl"
    out.write_text(text.replace(V0_WRITTEN_AT, str(into)), encoding="utf-8")
    return out


def _cpu_s(argv: list[str]) -> float:
    """CPU seconds (user + system) of one fresh process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        return _measure_all(args.results or _small_file(Path(tmp)), args.runs)


def _measure_all(results: Path, runs: int) -> int:
    met = True
    for name, argv in _cases(results).items():
        _cpu_s(argv)  # one warm-up: the bytecode cache and the page cache
        xs = [_cpu_s(argv) for _ in range(runs)]
        load = os.getloadavg()
        med = statistics.median(xs)
        print(
            f"{name:8s} CPU s: min {min(xs):.3f} / median {med:.3f} / max {max(xs):.3f} "
            f"({runs} fresh processes; load {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f})"
        )
        if name != "import" and med > TARGET_CPU_S:
            met = False
    print(("MET" if met else "MISSED") + f": analyse and report <= {TARGET_CPU_S} CPU-s (median)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
