"""False changes of ``compare`` on real runs: pairs of demo runs with identical engines.

Runs ``python -m deepseekbench demo`` ``2 × --pairs`` times (each in its own temporary
folder, ``--requests`` measured requests per route and load), compares each pair with
:func:`deepseekbench.compare_runs` at ``--alpha``, and reports per pair the figures
judged, the figures that changed significantly (each one is a false change: the
engines are the same) and the demo's wall time (min / median / max). Exits 1 when the
share of pairs with any change exceeds ``--alpha`` by more than the binomial noise of
``--pairs`` pairs allows (one pair more than ``alpha × pairs``, rounded up).

The runs share the machine with whatever else runs on it: a busy machine between two
runs is a real change of the client's conditions, and may show as one (the client-health
refusals catch a starved client; a slower machine that starves nothing is measured as
slower). Run it on a quiet machine.

    python benchmarks/bench_compare_demo.py [--pairs 10] [--requests 24] [--alpha 0.05]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deepseekbench import compare_runs


def _demo(folder: Path, requests: int) -> tuple[Path, float]:
    """One demo run in ``folder``: its results file and its wall time (s)."""
    path = folder / "demo.jsonl"
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "deepseekbench", "demo", "--results", str(path),
         "--requests", str(requests)],
        cwd=folder,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return path, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--alpha", type=float, default=0.05)
    args = ap.parse_args()
    walls: list[float] = []
    false_pairs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            paths = []
            for side in ("a", "b"):
                folder = Path(tmp) / f"{pair}{side}"
                folder.mkdir()
                path, wall = _demo(folder, args.requests)
                paths.append(path)
                walls.append(wall)
            cmp = compare_runs(paths[0], paths[1], alpha=args.alpha, seed=pair)
            changed = cmp.changed()
            false_pairs += bool(changed)
            names = ", ".join(f"{ln.route} {ln.load} {f.label} {f}" for ln, f in changed)
            print(f"pair {pair}: {cmp.judged} judged, {len(changed)} changed  {names}")
    allowed = math.ceil(args.alpha * args.pairs) + 1
    print(
        f"pairs with a false change: {false_pairs}/{args.pairs} (allowed {allowed}); demo wall "
        f"time s: min {min(walls):.1f} median {statistics.median(walls):.1f} max {max(walls):.1f}"
    )
    return 0 if false_pairs <= allowed else 1


if __name__ == "__main__":
    sys.exit(main())
