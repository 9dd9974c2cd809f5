"""``compare A B``: formats, the plot, attribution from a results file, and the exit code.

The results files are the recorded demo run (tests/data/render/demo.jsonl) and
deterministic edits of it, re-chained so that they read as untouched files.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from deepseekbench import compare_runs
from deepseekbench._cli._exits import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from deepseekbench._cli._main import main
from deepseekbench._report._compare import render_comparison
from deepseekbench._store._chain import DIGEST_FIELD, chain_digest, without_digest
from tests._helpers import ROOT

DEMO = ROOT / "tests" / "data" / "render" / "demo.jsonl"
Edit = Callable[[dict[str, Any]], dict[str, Any]]


def rewritten(src: Path, dst: Path, edit: Edit) -> Path:
    """``src``'s records passed through ``edit`` and written to ``dst`` with a fresh
    digest chain (a file the writer could have written)."""
    previous = ""
    out: list[bytes] = []
    for line in src.read_bytes().splitlines():
        if not line.strip():
            continue
        obj = edit(without_digest(orjson.loads(line)))
        previous = chain_digest(previous, obj)
        out.append(orjson.dumps({**obj, DIGEST_FIELD: previous}))
    dst.write_bytes(b"\n".join(out) + b"\n")
    return dst


def _launched(flags: dict[str, list[str]]) -> Edit:
    """Record a launch per route (the embedded engine's argv plus ``flags[route]``)."""

    def edit(rec: dict[str, Any]) -> dict[str, Any]:
        if rec.get("record") != "run_start":
            return rec
        launched = {
            label: {
                "engine": "embedded",
                "command": ["python", "-m", "deepseekbench", "serve", "--port", "4000", *extra],
                "version": "deepseekbench 0.1.0",
                "spec_config": {} if label == "off" else {"method": "mtp", "depth": 3},
            }
            for label, extra in flags.items()
        }
        return {**rec, "launched": launched}

    return edit


def _slower(route: str, factor: float) -> Edit:
    """``route``'s decode (client TPOT and the engine's own ITL) ``factor`` times slower."""

    def edit(rec: dict[str, Any]) -> dict[str, Any]:
        if rec.get("record") != "measurement" or rec.get("route") != route:
            return rec
        m = dict(rec["measurement"])
        for name in ("tpot_ms", "server_mean_itl_ms"):
            if m.get(name) is not None:
                m[name] = m[name] * factor
        return {**rec, "measurement": m}

    return edit


ROUTES = ("off", "mtp", "mtp-mistuned")


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A: the demo with launch records; B: the same, mtp's verify cost flag raised and
    its decode 1.6 times slower."""
    base = {r: ["--verify-token-ms", "0.4"] for r in ROUTES}
    a = rewritten(DEMO, tmp_path / "a.jsonl", _launched(base))
    slow = {**base, "mtp": ["--verify-token-ms", "0.9"]}
    launched, slower = _launched(slow), _slower("mtp", 1.6)
    b = rewritten(DEMO, tmp_path / "b.jsonl", lambda r: slower(launched(r)))
    return a, b


def _main(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_file_against_itself_exits_0_with_no_change(pair: tuple[Path, Path]) -> None:
    a, _ = pair
    code, out, err = _main("compare", str(a), str(a))
    assert code == EXIT_OK, err
    assert "changed significantly" not in out
    assert "no significant change on any" in out
    assert "recorded differences: none" in out


def test_slower_verify_names_the_flag_and_exits_4(pair: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = pair
    plot = tmp_path / "changed.png"
    code, out, err = _main("compare", str(a), str(b), "--plot", str(plot))
    assert code == EXIT_REGRESSION, err
    assert "launch flag --verify-token-ms (mtp): 0.4 → 0.9" in out
    assert "speedup fell" in out and "acceptance rate unchanged" in out
    assert "regression" in err and plot.stat().st_size > 0
    cmp = compare_runs(a, b)
    assert [(f.kind, f.name, f.route) for f in cmp.factors] == [
        ("launch flag", "--verify-token-ms", "mtp")
    ]
    changed = {(ln.route, f.figure) for ln, f in cmp.changed()}
    assert changed and all(route == "mtp" for route, _ in changed)
    assert {fig for _, fig in changed} <= {"speedup", "tpot_p50_ms", "tpot_p99_ms"}


def test_threshold_above_the_change_exits_0(pair: tuple[Path, Path]) -> None:
    a, b = pair
    code, _, err = _main("compare", str(a), str(b), "--fail-on-regression", "90%")
    assert code == EXIT_OK, err


def test_formats_carry_the_same_verdicts(pair: tuple[Path, Path]) -> None:
    a, b = pair
    cmp = compare_runs(a, b)
    data = json.loads(render_comparison(cmp, "json", threshold=0.05))
    assert data["judged"] == cmp.judged and data["summary"] == cmp.summary
    assert data["regressions"] == cmp.regressions(0.05)
    assert [f["name"] for f in data["factors"]] == ["--verify-token-ms"]
    md = render_comparison(cmp, "markdown")
    assert md.startswith("# Run comparison") and "| figure | A | B | interval | verdict |" in md
    page = render_comparison(cmp, "html")
    assert page.startswith("<!DOCTYPE html>") and "data:image/png;base64," in page
    assert "--verify-token-ms" in render_comparison(cmp, "text")
    with pytest.raises(ValueError, match="unknown format"):
        render_comparison(cmp, "csv")


def test_unreadable_file_and_bad_flags_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    code, _, err = _main("compare", str(DEMO), str(missing))
    assert code == EXIT_USAGE and "missing.jsonl" in err
    code, _, _ = _main("compare", str(DEMO), str(DEMO), "--fail-on-regression", "lots")
    assert code == EXIT_USAGE
    code, _, _ = _main("compare", str(DEMO), str(DEMO), "--alpha", "2")
    assert code == EXIT_USAGE


def _second_run_without_cache_hits(rec: dict[str, Any]) -> dict[str, Any]:
    """The demo's records as another plan's run (hash ``d00d…``) whose prefix cache missed."""
    out = {**rec, "plan_hash": "d00d00d00d00d00d"}
    if rec.get("record") == "run_start":
        out["plan"] = {**rec["plan"], "results": "second.jsonl"}
    if rec.get("record") == "server_cache":
        out["cache"] = {**rec["cache"], "prefix_cache_hits": 0, "prefix_cache_hit_rate": 0.0}
    return out


def test_two_runs_of_one_file_are_each_read_from_their_own_records(tmp_path: Path) -> None:
    """A file holding two runs: ``--run-a``/``--run-b`` compare them, each run's windows
    (prefix-cache hits per round) read from its own records, not the file's last run."""
    first = DEMO.read_bytes()
    second = rewritten(DEMO, tmp_path / "second.jsonl", _second_run_without_cache_hits)
    both = tmp_path / "both.jsonl"
    both.write_bytes(first + second.read_bytes())
    both = rewritten(both, tmp_path / "both-chained.jsonl", lambda r: r)
    code, out, err = _main(
        "compare", str(both), str(both), "--run-a", "c4fda41f", "--run-b", "d00d",
        "--format", "json",
    )  # fmt: skip
    assert code == EXIT_REGRESSION, err
    data = json.loads(out)
    changed = {
        (ln["route"], f["figure"])
        for ln in data["lines"]
        for f in ln["figures"]
        if f["status"] == "changed"
    }
    assert changed == {("off", "prefix_cache_hit_rate"), ("mtp", "prefix_cache_hit_rate")}
    assert [f["name"] for f in data["factors"]] == []  # the results path is not a factor
