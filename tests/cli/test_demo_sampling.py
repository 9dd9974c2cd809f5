"""``demo --sampling`` runs at temperature 0.7 and shows every sampler fault refused:
argmax acceptance, a draft that ignores the temperature and wide relaxed acceptance by the
distribution witness itself, default relaxed acceptance by the temperature-0 parity set;
``off`` and the exact mtp verified on their informative tokens."""

from __future__ import annotations

import re
from pathlib import Path

from deepseekbench._cli._demo import DEMO_SAMPLING_FAULTS, SAMPLING_TTFT_NOTE
from tests._helpers import run_cli


def _verdicts(stdout: str) -> dict[str, str]:
    """``verdict: witness note`` per route: the parity column of the scorecard's table and
    the route's distribution-witness note (``route: distribution witness ...``)."""
    labels = ("off", "mtp", *DEMO_SAMPLING_FAULTS)
    parity: dict[str, str] = {}
    notes: dict[str, str] = {}
    for line in stdout.splitlines():
        cols = line.split()
        if len(cols) > 4 and cols[0].startswith("1k/") and cols[2] in labels:
            parity.setdefault(cols[2], cols[4])
        head, _, rest = line.partition(": ")
        if head in labels and rest.startswith("distribution witness"):
            notes[head] = rest
    return {label: f"{parity[label]}: {notes[label]}" for label in notes if label in parity}


def test_demo_sampling_refuses_every_fault(tmp_path: Path) -> None:
    proc = run_cli(
        "demo", "--sampling", "--results", str(tmp_path / "r.jsonl"), cwd=tmp_path, timeout=600
    )
    got = _verdicts(proc.stdout)
    assert set(got) == {"off", "mtp", *DEMO_SAMPLING_FAULTS}, proc.stdout[-2000:]
    for label in ("off", "mtp"):
        assert got[label].startswith("verified: distribution witness accepts"), got[label]
        assert "informative tokens tested" in got[label]
    for label in ("mtp-argmax", "mtp-colddraft", "mtp-relaxedwide"):
        assert got[label].startswith("differs: distribution witness rejects"), got[label]
    assert got["mtp-relaxed"].startswith("differs:"), got["mtp-relaxed"]
    if "witness rejects" not in got["mtp-relaxed"]:  # differs by its exact or task parity
        assert re.search(r"mtp-relaxed @ .*parity differs — exact: \d+ of \d+ prompts", proc.stdout)
    # each route's witness paragraph once (not again in its parity note, nor after the card)
    assert proc.stdout.count("informative tokens tested") == len(got), proc.stdout[-3000:]
    # the demo's own plan trips no library warning; its one round is said in one line
    assert "Warning" not in proc.stderr and "under-measured" not in proc.stdout, proc.stderr
    assert "one round (each prompt sent once, for the witness)" in proc.stderr
    # the TTFT explanation is a scorecard note (written with ×), not only a stderr line
    assert SAMPLING_TTFT_NOTE in proc.stdout and SAMPLING_TTFT_NOTE not in proc.stderr
    # kept in the results file: `report` on it prints the run's notes, the TTFT note once
    report = run_cli("report", str(tmp_path / "r.jsonl"), cwd=tmp_path)
    assert report.stdout.count(SAMPLING_TTFT_NOTE) == 1, report.stdout[-3000:]
    assert report.stdout == proc.stdout  # the same scorecard, every note included
