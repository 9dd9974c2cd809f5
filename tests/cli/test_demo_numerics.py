"""``demo --numerics`` prints both verdicts, with margins, and its wall time (under a
minute on an idle machine)."""

from __future__ import annotations

import re
from pathlib import Path

from deepseekbench._cli._exits import EXIT_OK
from tests._helpers import SPEED_JUDGED, run_cli


def _line(part: str, route: str) -> str:
    return next(ln for ln in part.splitlines() if re.search(rf"\s{route}\s+mtp\s", ln))


def test_demo_numerics_prints_both_verdicts_with_margins(tmp_path: Path) -> None:
    proc = run_cli("demo", "--numerics", "--results", str(tmp_path / "r.jsonl"), cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
    bit, noise = proc.stdout.split("== parity.exact = 'within_noise' ==")
    assert "== parity.exact = 'bit_exact' ==" in bit
    # bit_exact: the correct MTP differs at near-ties only, and says what would verify it
    assert "differs" in _line(bit, "mtp") and "×" not in _line(bit, "mtp")
    assert re.search(r"mtp @ \S+ \(c=2\): \d+ divergences, all near-ties \(largest margin", bit)
    assert "parity.exact = 'within_noise', or the engine's deterministic mode" in bit
    assert re.search(r"\[off's margin 0\.0\d\d nats\]", bit)
    # within_noise: verified at 48 requests (64 comparisons), so the speed is judged:
    # credited, or (on a machine busy enough to starve the client) a clock refusal such as
    # "no significant difference", never refused for parity; the note gives τ, the
    # opportunities, the one-pass evidence and the power; the lossy route (relaxed
    # acceptance, relaxed_delta 1 nat) is refused under both, decisively
    mtp = _line(noise, "mtp")
    assert " verified " in mtp and "refused" not in mtp, mtp
    assert SPEED_JUDGED.search(mtp), mtp
    assert re.search(r"mtp @ \S+ \(c=2\): \d+ of 64 outputs diverge, all near-ties", noise)
    assert "near-tie opportunities in" in noise and "shown by one-pass scoring" in noise
    assert re.search(r"power: 0 decisive in 64 compared outputs bounds", noise)
    for part in (bit, noise):
        bad = _line(part, "mtp-relaxed")
        assert "refused: candidate_parity_not_verified" in bad and "×" not in bad
        assert re.search(r"decisive divergence at \S+ token \d+: off's top-1 margin", part)
    # the wall time is reported (< 60 s on an idle machine), never judged: a busy one is slower
    assert re.search(r"demo wall time: [\d.]+ s", proc.stderr)
    # a fresh results file is never announced as resumed: the second pass judges the first
    # pass's records again, and says so in one line; the forced length's expected past-EOS
    # notes are one line of the demo's, not a "!" warning per route
    assert "resumed:" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    assert proc.stderr.count("judging the same measured requests") == 1, proc.stderr
    assert "acceptance measured on text past EOS" not in proc.stdout
    assert proc.stdout.count("(expected here: every route decodes") == 2
