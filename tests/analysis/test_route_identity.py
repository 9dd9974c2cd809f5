"""The route-identity check: a route that contradicts its label is refused,
one whose engine reports no acceptance at all is flagged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from deepseekbench import (
    Dialect,
    LiveGate,
    QualityParity,
    RefusalReason,
    RouteIdentity,
    Scorecard,
    Speculative,
    StreamMeasurement,
    compare_speedup,
    load_results,
    run_plan,
)
from deepseekbench._analysis._route_identity import (
    RouteEvidence,
    judge_route_identity,
    route_evidence,
)
from tests._helpers import COSTS, make_row, off_and_mtp, plan_of

S = Speculative


def _ev(
    label: str,
    spec: Speculative,
    drafted: int | None,
    *,
    served: frozenset[int] = frozenset(),
    declared: int | None = None,
    dialect: Dialect = Dialect.vllm,
) -> RouteEvidence:
    return RouteEvidence(label, spec, dialect, drafted, served, declared)


def test_swapped_routes_are_both_refused_with_a_line_naming_both() -> None:
    out = judge_route_identity([_ev("off", S.off, 690), _ev("mtp", S.mtp, 0)])
    for label in ("off", "mtp"):
        v = out[label]
        assert v.status is RouteIdentity.refused
        assert v.detail is not None and "\n" not in v.detail
        assert "'off'" in v.detail and "'mtp'" in v.detail and "swapped" in v.detail


def test_off_that_drafts_is_refused_even_when_every_route_drafts() -> None:
    out = judge_route_identity([_ev("off", S.off, 10), _ev("mtp", S.mtp, 50)])
    assert out["off"].status is RouteIdentity.refused
    assert out["off"].detail is not None and "'mtp'" in out["off"].detail
    assert out["mtp"].status is RouteIdentity.ok


def test_a_silent_speculative_route_is_refused_when_its_engine_drafts_elsewhere() -> None:
    out = judge_route_identity(
        [_ev("off", S.off, None), _ev("mtp", S.mtp, 100), _ev("eagle", S.eagle3, None)]
    )
    assert out["mtp"].status is RouteIdentity.ok
    eagle = out["eagle"]
    assert eagle.status is RouteIdentity.refused
    assert eagle.detail is not None and "'eagle'" in eagle.detail and "'mtp'" in eagle.detail
    # another engine drafting says nothing about this one: flagged, not refused
    other = judge_route_identity(
        [
            _ev("off", S.off, None),
            _ev("mtp", S.mtp, 100, dialect=Dialect.sglang),
            _ev("eagle", S.eagle3, None, dialect=Dialect.vllm),
        ]
    )
    assert other["eagle"].status is RouteIdentity.flagged


def test_a_silent_ngram_route_is_flagged_unless_off_drafts() -> None:
    out = judge_route_identity(
        [_ev("off", S.off, None), _ev("mtp", S.mtp, 100), _ev("ng", S.ngram, 0)]
    )
    assert out["ng"].status is RouteIdentity.flagged
    assert out["ng"].detail is not None and "'ng'" in out["ng"].detail
    swapped = judge_route_identity([_ev("off", S.off, 80), _ev("ng", S.ngram, 0)])
    assert swapped["ng"].status is RouteIdentity.refused


def test_no_acceptance_anywhere_is_flagged_not_refused() -> None:
    out = judge_route_identity([_ev("off", S.off, None), _ev("mtp", S.mtp, None)])
    assert out["off"].status is RouteIdentity.ok
    assert out["mtp"].status is RouteIdentity.flagged
    assert out["mtp"].detail is not None and "'off'" in out["mtp"].detail


def test_a_served_depth_other_than_the_declared_one_is_refused() -> None:
    bad = judge_route_identity(
        [_ev("off", S.off, None), _ev("mtp", S.mtp, 40, served=frozenset({4}), declared=2)]
    )["mtp"]
    assert bad.status is RouteIdentity.refused
    assert bad.detail is not None and "spec_tokens=2" in bad.detail and "4" in bad.detail
    assert "'off'" in bad.detail and "'mtp'" in bad.detail
    same = judge_route_identity(
        [_ev("off", S.off, None), _ev("mtp", S.mtp, 40, served=frozenset({2}), declared=2)]
    )["mtp"]
    assert same.status is RouteIdentity.ok


def test_evidence_reads_requests_before_the_server_window() -> None:
    def m(**kw: Any) -> StreamMeasurement:
        return StreamMeasurement.model_construct(error=None, acceptance=None, **kw)

    ev = route_evidence(
        "mtp", S.mtp, Dialect.vllm,
        [m(draft_tokens=3, spec_tokens=2), m(draft_tokens=4, spec_tokens=2)], None, 2,
    )  # fmt: skip
    assert ev.drafted == 7 and ev.served_depths == {2}
    quiet = route_evidence("mtp", S.mtp, Dialect.vllm, [m(draft_tokens=None, spec_tokens=None)],
                           None)  # fmt: skip
    assert quiet.drafted is None and not quiet.drafts


def test_compare_speedup_refuses_a_pair_with_a_refused_row_only() -> None:
    base = make_row()
    cand = make_row(speculative="mtp", route_label="mtp", tpot_ms=5.0)
    assert compare_speedup(base, cand).printed
    for b, c in (
        (base.model_copy(update={"route_identity": RouteIdentity.refused}), cand),
        (base, cand.model_copy(update={"route_identity": RouteIdentity.refused})),
    ):
        v = compare_speedup(b, c)
        assert not v.printed and RefusalReason.route_identity_refused in v.reasons
    flagged = cand.model_copy(update={"route_identity": RouteIdentity.flagged})
    # flagged with no speculative counter at all: nothing shows it speculated
    assert compare_speedup(base, flagged).reasons == (RefusalReason.speculative_counters_missing,)
    counted = flagged.model_copy(update={"draft_tokens": 0, "accepted_tokens": 0})
    assert compare_speedup(base, counted).printed  # an ngram route that found nothing to draft


PLAN: dict[str, Any] = {
    "requests_per_cell": 5,
    "warmup_per_cell": 0,
    "arrival": {"mode": "concurrency", "concurrency": 2},
    "parity": {"concurrency": 8, "max_tokens": 48},
}


@pytest.mark.parametrize("swapped", [True, False])
def test_swapped_ports_plan_is_refused_naming_both_routes(tmp_path: Path, swapped: bool) -> None:
    """Done-when: the off and mtp ports swapped, on the embedded engine, is refused."""
    results = tmp_path / "run.jsonl"

    async def main() -> Any:
        async with off_and_mtp(cost=COSTS) as (off, mtp):
            a, b = (mtp, off) if swapped else (off, mtp)
            plan = plan_of(
                [
                    ("off", "off", a.base_url, Dialect.vllm),
                    ("mtp", "mtp", b.base_url, Dialect.vllm),
                ],
                PLAN,
                {},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    rows = {r.route_label: r for r in result.rows}
    assert rows["mtp"].quality_parity is QualityParity.verified  # parity alone cannot tell
    card = Scorecard.from_run(result)
    line = next(ln for ln in card.lines if ln.route == "mtp")
    text = card.to_text()
    if not swapped:
        assert rows["off"].route_identity is RouteIdentity.ok
        assert rows["mtp"].route_identity is RouteIdentity.ok
        assert "route identity" not in text
        return
    assert rows["off"].route_identity is RouteIdentity.refused
    assert rows["mtp"].route_identity is RouteIdentity.refused
    assert not line.credited and line.verdict is not None
    assert RefusalReason.route_identity_refused in line.verdict.reasons
    notes = [n for n in text.splitlines() if n.startswith("route identity refused")]
    assert notes and all("'off'" in n and "'mtp'" in n for n in notes)
    # the results file alone gives the same verdict
    again = Scorecard.from_run(load_results(results))
    assert again.to_text() == text
