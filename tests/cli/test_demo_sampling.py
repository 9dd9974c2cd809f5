"""``demo --sampling`` runs at temperature 0.7 and shows every sampler fault refused:
argmax acceptance, a draft that ignores the temperature and wide relaxed acceptance by the
distribution witness itself, default relaxed acceptance by the temperature-0 parity set;
``off`` and the exact mtp verified on their informative tokens."""

from __future__ import annotations

from pathlib import Path

from deepseekbench._cli._demo import DEMO_SAMPLING_FAULTS
from tests._helpers import run_cli


def _verdicts(stdout: str) -> dict[str, str]:
    """``route: verdict: note`` lines the scenario prints after its scorecard."""
    labels = ("off", "mtp", *DEMO_SAMPLING_FAULTS)
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        head, _, rest = line.partition(": ")
        if head in labels and rest.split(":")[0] in ("verified", "differs", "unknown"):
            out[head] = rest
    return out


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
    if "witness rejects" not in got["mtp-relaxed"]:
        assert got["mtp-relaxed"].endswith("by its exact or task parity, not by the witness)")
