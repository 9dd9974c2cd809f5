"""The analysis stage alone: rows, parity and window figures from a saved results file.

Records are written here by hand (no server), the way the runner writes them,
so every figure below is checked against numbers the test chose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from deepseekbench import (
    Arrival,
    BenchmarkPlan,
    ParityOutput,
    QualityParity,
    Scorecard,
    StreamMeasurement,
    load_results,
)
from deepseekbench._store._records import (
    MeasurementRecord,
    ParityOutputRecord,
    Record,
    RunStartRecord,
    record_json,
)
from tests._helpers import plan_of

PARITY_PROMPTS = ["a", "b"]


def _plan(**over: Any) -> BenchmarkPlan:
    routes = [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")]
    defaults = {
        "requests_per_cell": 6,
        "repeats": 3,
        "arrival": {"concurrency": [1, 8]},
        "parity": {"tasks": "none", "prompts": PARITY_PROMPTS},
    }
    return plan_of(routes, defaults, over)


SPEC_COUNTS: dict[str, Any] = {"draft_tokens": 9, "accepted_tokens": 6}
"""A speculative server's per-request counters: a row without any is refused
(``speculative_counters_missing``), so a test of the speed verdict's arithmetic gives them."""


def _m(text: str, *, start_ms: float, e2e_ms: float, tokens: int = 10, **kw: Any) -> dict[str, Any]:
    ttft = kw.pop("ttft_ms", 5.0)
    return StreamMeasurement(
        text=text,
        completion_tokens=tokens,
        tokens_estimated=False,
        ttft_ms=ttft,
        e2e_ms=e2e_ms,
        tpot_ms=(e2e_ms - ttft) / (tokens - 1),
        output_toks_per_s=tokens / (e2e_ms / 1000),
        start_perf_ns=int(start_ms * 1e6),
        **kw,
    ).model_dump(mode="json")


class Records:
    """A results file written through the record models (as the runner writes it)."""

    def __init__(self, plan: BenchmarkPlan) -> None:
        self.plan = plan
        self.h = plan.plan_hash()
        self.lines: list[Record] = [
            RunStartRecord(plan_hash=self.h, run_id="r1", plan=plan.model_dump(mode="json"))
        ]

    def parity_set(self) -> None:
        for route, passes in (("off", (1, 2)), ("mtp", (1,))):
            for p in passes:
                for i, text in enumerate(PARITY_PROMPTS):
                    pid = f"prompt-{i + 1}"
                    self.lines.append(
                        ParityOutputRecord(
                            plan_hash=self.h,
                            route=route,
                            reasoning_mode="non_think",
                            parity_pass=p,
                            prompt_id=pid,
                            output=ParityOutput(prompt_id=pid, text=f"answer {text}"),
                        )
                    )

    def measure(
        self, route: str, load: str, index: int, m: dict[str, Any], queue_ms: float | None = None
    ) -> None:
        self.lines.append(
            MeasurementRecord(
                plan_hash=self.h,
                run_id="r1",
                route=route,
                cell="1k/256/non_think",
                load=load,
                round=index % self.plan.rounds,
                index=index,
                queue_ms=queue_ms,
                measurement=StreamMeasurement.model_validate(m),
            )
        )

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(orjson.dumps(record_json(x)) + b"\n" for x in self.lines))
        return path


def _fill(rec: Records, *, diverge_at: str | None = None, slow_mtp: float = 0.5) -> None:
    """Every request of both routes at both loads; mtp answers ``x`` wrongly at one load."""
    rec.parity_set()
    for load in ("closed:c=1", "closed:c=8"):
        for i in range(6):
            slot = i // 3
            base_start = 1000.0 * i
            rec.measure("off", load, i, _m(f"out {slot}", start_ms=base_start, e2e_ms=100.0))
            text = f"out {slot}" if (load != diverge_at or i != 4) else f"out {slot}!"
            rec.measure("mtp", load, i, _m(text, start_ms=base_start, e2e_ms=100.0 * slow_mtp))


def test_rows_carry_the_load_and_the_window_figures(tmp_path: Path) -> None:
    rec = Records(_plan())
    _fill(rec)
    result = load_results(rec.write(tmp_path / "r.jsonl"))
    assert [(r.route_label, r.concurrency, r.arrival) for r in result.rows] == [
        ("off", 1, Arrival.closed),
        ("mtp", 1, Arrival.closed),
        ("off", 8, Arrival.closed),
        ("mtp", 8, Arrival.closed),
    ]
    off = result.rows[0]
    assert off.rounds == 3 and off.request_rate_per_s is None
    # each round: 2 requests sent 3000 ms apart (indices r and r+3), each 100 ms long:
    # a window of 3.1 s per round, 9.3 s in all; 6 requests x 10 tokens
    assert off.output_throughput_toks_per_s == pytest.approx(60 / 9.3)
    assert off.request_throughput_per_s == pytest.approx(6 / 9.3)
    assert off.goodput_req_per_s is None and off.slo_attainment is None
    assert not off.schedule_lagged


def test_a_divergence_under_load_makes_only_that_row_differ(tmp_path: Path) -> None:
    rec = Records(_plan())
    _fill(rec, diverge_at="closed:c=8")
    result = load_results(rec.write(tmp_path / "r.jsonl"))
    rows = {(r.route_label, r.concurrency): r for r in result.rows}
    assert rows[("mtp", 1)].quality_parity is QualityParity.verified
    bad = rows[("mtp", 8)]
    assert bad.quality_parity is QualityParity.differs  # although the parity set passed
    assert "measured traffic: 1 of 6 requests diverge" in (bad.parity_detail or "")
    assert "parity set: exact: bit-exact on 2 of 2" in (bad.parity_detail or "")
    card = Scorecard.from_run(result)
    line = next(ln for ln in card.lines if ln.route == "mtp" and ln.load == "c=8")
    assert not line.credited
    assert line.first_divergence is not None
    assert line.first_divergence.startswith("measured traffic, request-4: text differs at char 5")


def test_off_differing_from_itself_between_rounds_is_not_blamed_on_the_candidate(
    tmp_path: Path,
) -> None:
    rec = Records(_plan(arrival={"concurrency": 4}))
    rec.parity_set()
    for i in range(6):
        # off's round 1 (index 4: slot 1) answers differently from its round 0
        off_text = "out 1?" if i == 4 else f"out {i // 3}"
        rec.measure("off", "closed:c=4", i, _m(off_text, start_ms=1000.0 * i, e2e_ms=100.0))
        rec.measure("mtp", "closed:c=4", i, _m(f"out {i // 3}", start_ms=1000.0 * i, e2e_ms=50.0))
    result = load_results(rec.write(tmp_path / "r.jsonl"))
    off, mtp = result.rows
    assert off.quality_parity is QualityParity.unknown
    assert "baseline nondeterministic under load" in (off.parity_detail or "")
    assert mtp.quality_parity is QualityParity.unknown  # never differs on an unsteady baseline


@pytest.mark.parametrize("witness", [False, True])
def test_above_temperature_zero_rows_say_they_rely_on_task_parity(
    tmp_path: Path, witness: bool
) -> None:
    parity = {"tasks": "none", "prompts": PARITY_PROMPTS, "witness": witness}
    rec = Records(_plan(temperature=0.7, arrival={"concurrency": 1}, parity=parity))
    rec.parity_set()
    for i in range(6):
        rec.measure("off", "closed:c=1", i, _m("x", start_ms=1000.0 * i, e2e_ms=100.0))
        rec.measure("mtp", "closed:c=1", i, _m("y", start_ms=1000.0 * i, e2e_ms=50.0))
    mtp = load_results(rec.write(tmp_path / "r.jsonl")).rows[1]
    judged = "the distribution witness judges it" if witness else "the row relies on task parity"
    assert f"sampled at temperature 0.7: {judged}" in (mtp.parity_detail or "")
    if witness:  # no output was scored: the distribution is not shown, so not verified
        assert mtp.quality_parity is QualityParity.unknown
        assert "distribution witness: no sampled output was scored" in (mtp.parity_detail or "")
    else:  # the witness off: sampled outputs are not compared
        assert mtp.quality_parity is QualityParity.verified


def test_goodput_and_slo_attainment_follow_the_limits(tmp_path: Path) -> None:
    rec = Records(_plan(arrival={"concurrency": 1}, slo={"e2e_ms": 120.0, "ttft_ms": 50.0}))
    rec.parity_set()
    e2e = [100.0, 110.0, 130.0, 90.0, 200.0, 100.0]  # 2 miss the E2E limit
    for i, e in enumerate(e2e):
        rec.measure("off", "closed:c=1", i, _m(f"out {i // 3}", start_ms=1000.0 * i, e2e_ms=e))
        ttft = 60.0 if i == 0 else 5.0  # 1 more misses the TTFT limit
        rec.measure(
            "mtp", "closed:c=1", i, _m(f"out {i // 3}", start_ms=1000.0 * i, e2e_ms=e, ttft_ms=ttft)
        )
    off, mtp = load_results(rec.write(tmp_path / "r.jsonl")).rows
    assert off.slo_attainment == pytest.approx(4 / 6)
    assert mtp.slo_attainment == pytest.approx(3 / 6)
    # windows per round (r, r+3): 3000 + e2e of the later request
    window_s = (3000 + 90 + 3000 + 200 + 3000 + 100) / 1000
    assert off.goodput_req_per_s == pytest.approx(4 / window_s)
    assert mtp.goodput_req_per_s == pytest.approx(3 / window_s)


def test_an_open_loop_that_lagged_is_flagged(tmp_path: Path) -> None:
    plan = _plan(arrival={"mode": "rate", "rate_per_s": 4.0, "concurrency": 2, "max_lag_ms": 50})
    rec = Records(plan)
    rec.parity_set()
    load = plan.load_points[0].key
    for i in range(6):
        m = _m(f"out {i // 3}", start_ms=1000.0 * i, e2e_ms=100.0)
        rec.measure("off", load, i, m, queue_ms=1.0)
        rec.measure("mtp", load, i, m, queue_ms=400.0 if i % 2 else 2.0)
    result = load_results(rec.write(tmp_path / "r.jsonl"))
    off, mtp = result.rows
    assert off.request_rate_per_s == 4.0 and off.arrival is Arrival.poisson
    assert not off.schedule_lagged and mtp.schedule_lagged
    text = Scorecard.from_run(result).to_text()
    assert "4/s!" in text and "the open-loop schedule lagged" in text


def test_client_health_is_per_route_cell_and_load_point(tmp_path: Path) -> None:
    """client_saturated: any measured request of that (route, cell, load point) lagged
    past client_lag_threshold_ms; client_pool_wait_ms: the longest wait among them."""
    rec = Records(_plan(client_lag_threshold_ms=20.0))
    rec.parity_set()
    for load in ("closed:c=1", "closed:c=8"):
        for i in range(6):
            for route in ("off", "mtp"):
                lag = 35.0 if (route, load, i) == ("mtp", "closed:c=8", 5) else 19.0
                wait = 7.0 if (route, load, i) == ("off", "closed:c=8", 2) else 0.5
                m = _m(
                    f"out {i // 3}",
                    start_ms=1000.0 * i,
                    e2e_ms=100.0,
                    client_lag_ms=lag,
                    pool_wait_ms=wait,
                )
                rec.measure(route, load, i, m)
    result = load_results(rec.write(tmp_path / "r.jsonl"))
    rows = {(r.route_label, r.concurrency): r for r in result.rows}
    assert {k for k, r in rows.items() if r.client_saturated} == {("mtp", 8)}
    assert {k: r.client_pool_wait_ms for k, r in rows.items()} == {
        ("off", 1): 0.5,
        ("mtp", 1): 0.5,
        ("off", 8): 7.0,
        ("mtp", 8): 0.5,
    }
    text = Scorecard.from_run(result).to_text()
    assert "client lagged" in text and "(1 of 4 rows)" in text  # the one-line client diagnosis
    assert text.count("client lagged") == 1


def test_paired_rounds_give_the_credited_figure_and_interval(tmp_path: Path) -> None:
    rec = Records(_plan(arrival={"concurrency": 1}))
    rec.parity_set()
    for i in range(6):
        rec.measure("off", "closed:c=1", i, _m(f"out {i // 3}", start_ms=1000.0 * i, e2e_ms=95.0))
        slow = [0.5, 0.55, 0.45][i % 3]  # mtp TPOT halves, round by round
        rec.measure(
            "mtp",
            "closed:c=1",
            i,
            _m(f"out {i // 3}", start_ms=1000.0 * i, e2e_ms=5 + 90 * slow, **SPEC_COUNTS),
        )
    card = Scorecard.from_run(load_results(rec.write(tmp_path / "r.jsonl")))
    v = next(ln for ln in card.lines if ln.route == "mtp").verdict
    assert v is not None and v.printed and v.rounds == 3
    assert v.speedup == pytest.approx((2 * (1 / 0.55) * (1 / 0.45)) ** (1 / 3))
    assert v.speedup is not None and v.ci_low is not None and v.ci_high is not None
    assert v.ci_low < v.speedup < v.ci_high and v.ci_low > 1


def test_a_results_file_from_before_load_sweeps_still_reads(tmp_path: Path) -> None:
    plan = _plan(arrival={"concurrency": 2}, repeats=1)
    rec = Records(plan)
    rec.parity_set()
    for i in range(6):
        rec.measure("off", "closed:c=2", i, _m(f"out {i}", start_ms=1000.0 * i, e2e_ms=100.0))
        rec.measure("mtp", "closed:c=2", i, _m(f"out {i}", start_ms=1000.0 * i, e2e_ms=50.0))
    old_plan = plan.model_dump(mode="json")
    for key in ("repeats", "slo"):
        del old_plan[key]
    del old_plan["arrival"]["max_lag_ms"]
    lines = [record_json(x) for x in rec.lines]
    for line in lines:  # what an older version wrote: other hash, no load, no round
        line["plan_hash"] = "0ld0ld0ld0ld0ld0"
        for key in ("load", "round", "queue_ms", "turn", "item", "category", "speculative"):
            line.pop(key, None)
        if line["record"] == "run_start":
            line["plan"] = old_plan
            for key in ("parity_set", "library_version", "started_at", "resumed"):
                del line[key]
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    result = load_results(old)
    off, mtp = result.rows
    assert off.n_requests == mtp.n_requests == 6 and off.rounds == 1
    assert (off.concurrency, off.arrival) == (2, Arrival.closed)  # the load its plan recorded
    assert mtp.quality_parity is QualityParity.verified
    assert "bit-exact on 6 of 6 requests" in (mtp.parity_detail or "")


def test_window_metrics_are_compared_round_by_round_higher_being_better(tmp_path: Path) -> None:
    rec = Records(_plan(arrival={"concurrency": 1}, slo={"e2e_ms": 1000.0}))
    rec.parity_set()
    for i in range(6):
        rec.measure("off", "closed:c=1", i, _m(f"out {i // 3}", start_ms=200.0 * i, e2e_ms=100.0))
        mtp = _m(f"out {i // 3}", start_ms=100.0 * i, e2e_ms=50.0, **SPEC_COUNTS)
        rec.measure("mtp", "closed:c=1", i, mtp)
    result = load_results(rec.write(tmp_path / "r.jsonl"))
    for metric in ("output_throughput_toks_per_s", "goodput_req_per_s"):
        card = Scorecard.from_run(result, metric=metric)
        v = next(ln for ln in card.lines if ln.route == "mtp").verdict
        # every mtp block takes half the time: 2x the throughput, candidate / baseline
        assert v is not None and v.printed and v.rounds == 3, metric
        assert v.speedup == pytest.approx(2.0) and not v.slower, metric
