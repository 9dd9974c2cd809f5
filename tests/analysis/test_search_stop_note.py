"""The sequential stopping note of a ``[search]`` level stopped early: its misses are
counted out of the requests measured, and it says how many the plan had and how many
were skipped ("3 of 15 requests missed the SLO" read as if all 15 had been measured)."""

from __future__ import annotations

from deepseekbench import StreamMeasurement
from deepseekbench._analysis._rowstats import RowRequests
from deepseekbench._analysis._stopping import _search_notes, level_failed
from deepseekbench._store._results import MeasureInfo
from tests._helpers import plan_of

ROUTES = [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")]


def _level(tpots: list[float]) -> RowRequests:
    """One round's requests at a level (round 0), TPOT in ms; the SLO is 20 ms."""
    info = MeasureInfo(0, None, "run")
    return RowRequests(
        tuple((StreamMeasurement(tpot_ms=t), info) for t in tpots), {"tpot_ms": 20.0}
    )


def test_a_failed_level_counts_its_misses_out_of_the_requests_measured() -> None:
    plan = plan_of(
        ROUTES,
        {"requests_per_cell": 15, "warmup_per_cell": 0, "repeats": 3},
        {"slo": {"tpot_ms": 20.0}, "search": {"target": 0.9, "start": 2, "max_level": 3},
         "stopping": {"mode": "sequential"}},
    )  # fmt: skip
    key = ("off", "1k/256/non_think", "closed:c=3")
    reqs = _level([30.0, 30.0, 30.0, 10.0, 10.0])  # round 0 of 3: 5 of the 15 planned
    assert level_failed(plan, reqs)  # at most 12 of 15 can meet it: below 0.9
    notes, saved, _ = _search_notes(plan, {key: reqs}, {key: "off @ 1k/256/non_think (c=3)"})
    assert notes == [
        "off @ 1k/256/non_think (c=3): rounds 1 of 3, stopped: level failed (3 of the 5 "
        "requests measured missed the SLO, so at most 12 of the 15 planned could meet it, "
        "below the 0.9 target: its other 10 were skipped)"
    ]
    assert saved == 10
