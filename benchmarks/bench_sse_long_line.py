"""SSE decoder cost of one long line fed in many reads (the SSE line-size bound).

Feeds ``--mib`` MiB of a single ``data:`` line in ``--read-kib`` KiB reads, then
its line end, to :class:`deepseekbench._measure._sse.SSEDecoder` with limits raised above
the line, and prints the CPU time and the rate (MiB per CPU-second). A decoder
that re-copies its buffer per read costs time quadratic in the line length; this
one is linear, so doubling ``--mib`` about doubles the time.

Run: ``python benchmarks/bench_sse_long_line.py [--mib 100 --read-kib 64]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deepseekbench._measure._sse import SSEDecoder


def run(mib: int, read_kib: int) -> float:
    """CPU seconds to decode one ``mib`` MiB line fed in ``read_kib`` KiB reads."""
    size = mib * 1024 * 1024
    read = b"x" * (read_kib * 1024)
    decoder = SSEDecoder(max_line_bytes=size + 64, max_event_bytes=size + 64)
    t0 = time.process_time()
    decoder.feed(b"data: ", 0)
    for i in range(size // len(read)):
        decoder.feed(read, i)
    events = decoder.feed(b"\n\n", 0)
    elapsed = time.process_time() - t0
    assert len(events) == 1 and len(events[0].data) == size // len(read) * len(read)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--read-kib", type=int, default=64)
    args = parser.parse_args()
    for mib in (args.mib // 2, args.mib):
        s = run(mib, args.read_kib)
        rate = mib / s if s > 0 else float("inf")
        print(f"{mib:5d} MiB line in {args.read_kib} KiB reads: {s:.3f} CPU s ({rate:.0f} MiB/s)")


if __name__ == "__main__":
    main()
