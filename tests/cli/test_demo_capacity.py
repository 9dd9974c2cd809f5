"""Capacity under SLO, first of all: ``demo --capacity``.

Engines launched from the plan (``off``, mtp at depths 1, 2 and 4, the mis-tuned mtp),
a concurrency sweep, ``[slo]`` and ``[search]``: the scorecard names the best depth per
load, each route's capacity with its bracket and the credited capacity ratios, and
refuses the mis-tuned route throughout; the results file re-renders byte for byte,
writes the per-load choice as JSON and draws the capacity panel.

The speed verdicts asserted have wide margins on a shared 2-core machine: alone, depth 4
is about 1.2× faster than depth 2 (acceptance length 3.4 against 2.4 on a cheap draft
head); ``off`` holds the 20 ms TPOT SLO at 1 stream (about 14 ms) and misses it at 3
(about 23 ms), where the depths meet it (10 to 12 ms). Which shallower depth wins at 5
streams, and whether depth 4 saturates at 3, sit near their thresholds and are not
asserted. A verdict the library withholds because this machine's client could not time
well (``client_starved``, ``clock_disagreement``) is the library working, and
is accepted in place of the figure.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
from pathlib import Path
from typing import Any

from deepseekbench import Scorecard, load_results
from deepseekbench._cli._demo import (
    DEMO_CAPACITY_CONCURRENCY,
    DEMO_CAPACITY_DEPTHS,
    demo_capacity_plan,
)
from deepseekbench._cli._exits import EXIT_OK, EXIT_USAGE
from deepseekbench._cli._main import main
from tests._helpers import run_cli, speed_judged

DEPTHS = [f"mtp-k{k}" for k in DEMO_CAPACITY_DEPTHS]
CLIENT_HEALTH = {"client_starved", "clock_disagreement"}


def _client_health_only(reasons: str) -> bool:
    """True when every refusal reason named in ``reasons`` is about the client's timing."""
    named = set(re.findall(r"[a-z_]+_[a-z_]+", reasons))
    return bool(named) and named <= CLIENT_HEALTH


def test_the_plan_launches_a_depth_grid_under_an_slo_search() -> None:
    plan = demo_capacity_plan()
    assert [r.label for r in plan.routes] == ["off", *DEPTHS, "mtp-mistuned"]
    assert all(r.launch is not None and r.launch.engine == "embedded" for r in plan.routes)
    assert [r.spec_tokens for r in plan.routes[1:4]] == list(DEMO_CAPACITY_DEPTHS)
    assert plan.slo is not None and plan.slo.tpot_ms is not None
    search = plan.effective_search
    assert search is not None and search.max_level == max(DEMO_CAPACITY_CONCURRENCY)
    assert plan.requests_per_cell // plan.repeats == max(DEMO_CAPACITY_CONCURRENCY)


def _report_json(results: Path) -> Any:
    out, err = io.StringIO(), io.StringIO()
    assert main(["report", str(results), "--format", "json"], stdout=out, stderr=err) == 0
    return json.loads(out.getvalue())


def test_demo_capacity_prints_best_depth_capacity_and_refuses_the_mistuned(
    tmp_path: Path,
) -> None:
    results = tmp_path / "capacity.jsonl"
    proc = run_cli("demo", "--capacity", "--results", str(results), cwd=tmp_path, timeout=300)
    assert proc.returncode == EXIT_OK, proc.stderr
    out = proc.stdout
    assert re.search(r"demo wall time: [\d.]+ s", proc.stderr)

    # launched from the plan: every row says how its engine was started
    result = load_results(results)
    rows = result.rows
    assert {r.route_label for r in rows} == {"off", *DEPTHS, "mtp-mistuned"}
    for r in rows:
        assert r.engine_command is not None and "--port" in r.engine_command
        if r.route_label in DEPTHS:
            assert r.spec_tokens == int(r.route_label[-1])
    # the sweep's loads and the level the search bisected to
    lo, hi = min(DEMO_CAPACITY_CONCURRENCY), max(DEMO_CAPACITY_CONCURRENCY)
    loads = sorted({r.concurrency for r in rows if r.concurrency is not None})
    assert loads[0] == lo and loads[-1] == hi and len(loads) == 3

    data = _report_json(results)
    # the best depth per load: one choice per load; alone, depth 4 wins, although it
    # accepts the smallest share of its drafts (ranked by speed, never by acceptance)
    choices = {c["concurrency"]: c for c in data["best_configs"]}
    assert sorted(choices) == loads
    alone = next(ln for ln in data["lines"] if ln["route"] == "mtp-k4" and ln["load_level"] == lo)
    if alone["verdict"]["printed"]:
        assert choices[lo]["best"] == "mtp-k4"
    else:  # withheld on this machine's client timing, not a wrong verdict
        assert _client_health_only(" ".join(alone["verdict"]["reasons"])), alone["verdict"]
    accept = {r.route_label: r.accepted_token_ratio or 0.0 for r in rows if r.concurrency == lo}
    assert accept["mtp-k4"] < accept["mtp-k2"] < accept["mtp-k1"]
    # a best depth alone; none where a busy machine refused every depth for clock reasons
    alone_depths = [ln for ln in data["lines"] if ln["route"] in DEPTHS and ln["load_level"] == lo]
    assert choices[lo]["best"] or not any(ln["verdict"]["printed"] for ln in alone_depths)
    assert all(speed_judged(ln) for ln in alone_depths), alone_depths  # never parity
    best_line = r"mtp-k\d \(score \d\.\d\d, " if choices[lo]["best"] else "none credited$"
    assert re.search(rf"^  mtp @ \S+ c=1: {best_line}", out, re.MULTILINE)
    assert all("mtp-mistuned" not in json.dumps(c) for c in choices.values())

    # the capacity per route with its bracket, and the credited ratios to off
    capacity = data["capacity"]
    caps = {c["route"]: c for c in capacity["routes"]}
    off = caps["off"]
    assert (off["capacity"], off["high"]) == (lo, loads[1])  # meets the SLO alone only
    for k in DEPTHS:
        assert caps[k]["capacity"] is not None and caps[k]["low"] == caps[k]["capacity"]
        assert caps[k]["high"] is None or caps[k]["high"] > caps[k]["capacity"]
    ratios = {r["route"]: r for r in capacity["ratios"]}
    credited = [k for k in DEPTHS if ratios[k]["refusal"] is None]
    for k in credited:
        if caps[k]["high"] is None:  # no upper end: the claim is its lower bound alone
            assert ratios[k]["ratio"] is None and ratios[k]["bound"] == "lower", ratios[k]
            assert ratios[k]["low"] == caps[k]["capacity"] / off["high"], ratios[k]
        else:
            assert ratios[k]["ratio"] == caps[k]["capacity"] / off["capacity"], ratios[k]
        assert caps[k]["capacity"] >= off["high"], caps[k]  # brackets apart: surely more
    for k in set(DEPTHS) - set(credited):
        refusal = ratios[k]["refusal"]
        if refusal.startswith("no significant difference: the brackets overlap"):
            assert caps[k]["capacity"] < off["high"], caps[k]  # e.g. both [1, 3)
        else:
            assert _client_health_only(refusal), ratios[k]
    # a depth holds the SLO at more load; a busy machine may refuse every depth for its
    # client's timing or overlapping brackets (each refusal checked above), never for parity
    if credited:
        assert max(ratios[k]["ratio"] or ratios[k]["low"] for k in credited) > 1
        assert re.search(r"^  mtp-k\d/off capacity (≥ )?\d\.\d\d× \(", out, re.MULTILINE)
    assert re.search(r"^  off: capacity 1 \[1, \d\) at \d+% \(95% CI ", out, re.MULTILINE)
    assert re.search(r"^Capacity under SLO \(tpot_ms <= \d+; ", out, re.MULTILINE)

    # the mis-tuned route: refused at every load, its capacity never credited
    bad = [ln for ln in data["lines"] if ln["route"] == "mtp-mistuned"]
    assert sorted(ln["load_level"] for ln in bad) == loads
    for ln in bad:
        assert ln["verdict"]["speedup"] is None
        assert "candidate_parity_not_verified" in ln["verdict"]["reasons"]
    assert ratios["mtp-mistuned"]["ratio"] is None
    assert "candidate_parity_not_verified" in ratios["mtp-mistuned"]["refusal"]
    assert caps["mtp-mistuned"]["unverified"] == loads
    assert "mtp-mistuned/off capacity: refused (at load 1: candidate_parity_not_verified" in out

    # the file alone: the same scorecard byte for byte, the choice as JSON, the pictures
    best = tmp_path / "best.json"
    args = ["report", str(results), "--best-config", str(best)]
    png = tmp_path / "capacity.png"
    plot = importlib.util.find_spec("matplotlib") is not None
    report = run_cli(*args, *(["--plot", str(png)] if plot else []), cwd=tmp_path)
    assert report.returncode == EXIT_OK, report.stderr
    assert report.stdout == out
    written = json.loads(best.read_text(encoding="utf-8"))
    assert {c["concurrency"]: c["best"] for c in written["choices"]} == {
        c: choices[c]["best"] for c in loads
    }
    if plot:
        from matplotlib.patches import Rectangle

        assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        fig = Scorecard.from_run(result).plot()
        cap = fig.get_axes()[-1]  # speedup vs load, [its factors,] latency, capacity
        bars = [b.get_height() for b in cap.patches if isinstance(b, Rectangle)]
        assert bars == [c["capacity"] or 0.0 for c in capacity["routes"]]  # one per route
        assert "mtp-mistuned/off refused" in cap.get_title()


def test_the_two_scenarios_are_one_at_a_time(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    argv = ["demo", "--numerics", "--capacity", "--results", str(tmp_path / "r.jsonl")]
    assert main(argv, stdout=out, stderr=err) == EXIT_USAGE
    assert "two scenarios" in err.getvalue() and not (tmp_path / "r.jsonl").exists()
