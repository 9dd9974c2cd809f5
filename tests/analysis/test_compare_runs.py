"""compare_runs: verdicts per line and figure between two runs, refusals, attribution.

Every run here is generated deterministically (seeded synthetic requests): no
outcome depends on how busy the machine is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from deepseekbench._analysis._compare_figures import SideLine
from deepseekbench._analysis._compare_records import RouteRecord, RunRecords
from deepseekbench._analysis._compare_runs import RunComparison, RunSide, compare_sides
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect
from tests._helpers import make_row

LOADS = (1, 2, 8)
DEPTH = 3
STEPS = 12  # verify steps per request


@dataclass(frozen=True)
class Engines:
    """What the synthetic engines of one run do (one field per factor)."""

    tpot_off_ms: float = 10.0
    tpot_mtp_ms: float = 6.5
    ttft_ms: float = 12.0
    accept_p: float = 0.75  # chance each draft position is accepted, given the one before
    hit_rate: float = 0.8
    mtp_parity: str = "verified"
    flags: tuple[str, ...] = ("--verify-token-ms", "0.4")
    mtp_flags: tuple[str, ...] = ()
    requests: int = 24
    rounds: int = 3
    client_starved: bool = False


def _acceptance(rng: np.random.Generator, p: float) -> tuple[int, tuple[float, ...]]:
    """Accepted tokens over STEPS verify steps, and acceptance by position."""
    hits = np.zeros(DEPTH)
    for _ in range(STEPS):
        for k in range(DEPTH):
            if rng.random() >= p:
                break
            hits[k] += 1
    return int(hits.sum()), tuple(float(h / STEPS) for h in hits)


def _request(rng: np.random.Generator, e: Engines, speculative: bool, load: int) -> Any:
    tpot = (e.tpot_mtp_ms if speculative else e.tpot_off_ms) * (1 + 0.05 * load)
    fields: dict[str, Any] = {
        "ttft_ms": float(e.ttft_ms * rng.lognormal(0, 0.1)),
        "tpot_ms": float(tpot * rng.lognormal(0, 0.08)),
    }
    if speculative:
        accepted, by_position = _acceptance(rng, e.accept_p)
        fields |= {
            "draft_tokens": DEPTH * STEPS,
            "accepted_tokens": accepted,
            "acceptance_by_position": list(by_position),
            "acceptance": AcceptanceRecord.from_counts(
                engine=Dialect.vllm,
                source="usage",
                draft_tokens=DEPTH * STEPS,
                accepted_tokens=accepted,
                verify_steps=STEPS,
                by_position=by_position,
            ),
        }
    return StreamMeasurement(**fields)


def _line(rng: np.random.Generator, e: Engines, route: str, load: int) -> SideLine:
    speculative = route != "off"
    requests = tuple(_request(rng, e, speculative, load) for _ in range(e.requests))
    tpots = [m.tpot_ms for m in requests]
    row_kw: dict[str, Any] = {
        "route_label": route,
        "speculative": "mtp" if speculative else "off",
        "concurrency": load,
        "n_requests": e.requests,
        "tpot_ms": float(np.median(tpots)),
        "prefix_cache_hit_rate": e.hit_rate,
        "client_starved": e.client_starved,
        "quality_parity": e.mtp_parity if speculative else "verified",
    }
    if speculative:
        drafted = sum(m.draft_tokens or 0 for m in requests)
        accepted = sum(m.accepted_tokens or 0 for m in requests)
        by = np.mean([m.acceptance_by_position for m in requests], axis=0)
        row_kw |= {
            "accepted_token_ratio": accepted / drafted,
            "acceptance_length": 1 + accepted / (STEPS * len(requests)),
            "acceptance_by_position": tuple(float(x) for x in by),
            "draft_tokens": drafted,
            "accepted_tokens": accepted,
        }
    hits = {r: float(np.clip(e.hit_rate + rng.normal(0, 0.01), 0, 1)) for r in range(e.rounds)}
    if e.hit_rate == 0:
        hits = dict.fromkeys(range(e.rounds), 0.0)
    rounds = tuple(i % e.rounds for i in range(len(requests)))
    return SideLine(
        make_row(**row_kw), requests, {"prefix_cache_hit_rate": hits}, request_rounds=rounds
    )


def synthetic_run(seed: int, e: Engines, name: str = "run") -> RunSide:
    """Two routes (off, mtp) at three loads, requests drawn from ``e`` with ``seed``."""
    rng = np.random.default_rng(seed)
    lines = {
        (route, "1k/256/non_think", f"closed:c={load}"): _line(rng, e, route, load)
        for load in LOADS
        for route in ("off", "mtp")
    }
    argv = ("python", "-m", "deepseekbench", "serve", "--port", str(40000 + seed % 1000))
    routes = {
        "off": RouteRecord("deepseekbench 0.1.0", (*argv, *e.flags), None),
        "mtp": RouteRecord("deepseekbench 0.1.0", (*argv, *e.flags, *e.mtp_flags), "mtp k=3"),
    }
    plan = {"model": "m", "results": f"/tmp/{name}-{seed}.jsonl", "requests_per_cell": e.requests}
    return RunSide(name, lines, RunRecords("0.1.0", "m", plan, routes, 16))


def _changed(cmp: RunComparison) -> set[tuple[str, str]]:
    return {(ln.route, f.figure) for ln, f in cmp.changed()}


def _statuses(cmp: RunComparison) -> set[str]:
    return {f.status for ln in cmp.lines for f in ln.figures}


# -- identical engines: no false change -------------------------------------------


def test_identical_engines_20_repeats_stay_within_alpha() -> None:
    """Two runs of the same engines, 20 times over (fresh seeds): the share of repeats
    with any "changed significantly" stays within α (Bonferroni over the figures)."""
    alpha = 0.05
    false_runs = 0
    for repeat in range(20):
        a = synthetic_run(1000 + 2 * repeat, Engines(), "A")
        b = synthetic_run(1001 + 2 * repeat, Engines(), "B")
        cmp = compare_sides(a, b, alpha=alpha, seed=repeat)
        assert cmp.judged > 30  # every line's figures were judged, not refused
        assert not cmp.factors  # the port and the results path are not factors
        false_runs += bool(cmp.changed())
        assert not cmp.regressions(0.0) or cmp.changed()
    assert false_runs / 20 <= alpha


def test_identical_engines_every_line_no_significant_change() -> None:
    a = synthetic_run(7, Engines(), "A")
    b = synthetic_run(8, Engines(), "B")
    cmp = compare_sides(a, b)
    assert _statuses(cmp) == {"no_significant_change", "not_judged"}
    for ln in cmp.lines:  # 24 requests a line: a p99 is near the maximum, not judged
        for f in ln.figures:
            assert (f.status == "not_judged") == f.figure.endswith("p99_ms"), f
    assert {ln.route for ln in cmp.lines} == {"off", "mtp"} and len(cmp.lines) == 6
    assert all(not ln.parity.changed for ln in cmp.lines)
    assert "no significant change" in cmp.summary
    assert "recorded differences: none" in cmp.summary
    assert cmp.regressions() == []
    for ln in cmp.lines:  # every verdict states what it could have detected: its interval
        for f in ln.figures:
            if f.status == "not_judged":
                assert f.reasons and f.ci_low is None
                continue
            assert f.ci_low is not None and f.ci_high is not None
            assert f.level == pytest.approx(cmp.alpha / cmp.judged)


# -- one factor moved: that factor named, and no other ------------------------------


def test_verify_cost_names_the_flag_and_the_speed_figures_only() -> None:
    slow = Engines(tpot_mtp_ms=9.0, flags=("--verify-token-ms", "0.8"))
    cmp = compare_sides(synthetic_run(1, Engines(), "A"), synthetic_run(2, slow, "B"))
    assert [(f.kind, f.name) for f in cmp.factors] == [
        ("launch flag", "--verify-token-ms"),
        ("launch flag", "--verify-token-ms"),
    ]
    assert {f.route for f in cmp.factors} == {"off", "mtp"}
    changed = _changed(cmp)
    assert ("mtp", "speedup") in changed and ("mtp", "tpot_p50_ms") in changed
    assert {fig for _, fig in changed} <= {"speedup", "tpot_p50_ms", "tpot_p99_ms"}
    assert all(route == "mtp" for route, _ in changed)
    assert "speedup fell" in cmp.summary and "acceptance rate unchanged" in cmp.summary
    assert "--verify-token-ms" in cmp.summary and "parity unchanged" in cmp.summary
    assert any("speedup" in r for r in cmp.regressions(0.05))


def test_mistuned_draft_names_the_draft_flag_and_parity() -> None:
    """The embedded engine's mis-tuned draft is lossy: acceptance rises, outputs differ;
    parity's change is named and the route's figures are refused, not compared."""
    bad = Engines(accept_p=0.9, mtp_parity="differs", mtp_flags=("--mistuned-draft",))
    cmp = compare_sides(synthetic_run(3, Engines(), "A"), synthetic_run(4, bad, "B"))
    assert [(f.kind, f.name, f.route) for f in cmp.factors] == [
        ("launch flag", "--mistuned-draft", "mtp")
    ]
    assert {ln.route for ln in cmp.lines if ln.parity.changed} == {"mtp"}
    assert all(ln.parity.regressed for ln in cmp.lines if ln.route == "mtp")
    for ln in cmp.lines:
        if ln.route == "mtp":  # never compared as sound
            assert {f.status for f in ln.figures} == {"not_comparable"}
            assert all("parity_differs (B)" in f.reasons or "candidate_parity_not_verified (B)"
                       in f.reasons for f in ln.figures)  # fmt: skip
    assert _changed(cmp) == set()
    assert "parity changed on mtp" in cmp.summary and "--mistuned-draft" in cmp.summary
    assert any("parity" in r for r in cmp.regressions(0.05))


def test_prefix_cache_off_names_the_cache_flag_and_hit_rate() -> None:
    off = Engines(
        hit_rate=0.0, ttft_ms=18.0, flags=("--verify-token-ms", "0.4", "--no-prefix-cache")
    )
    cmp = compare_sides(synthetic_run(5, Engines(), "A"), synthetic_run(6, off, "B"))
    assert {(f.kind, f.name) for f in cmp.factors} == {("launch flag", "--no-prefix-cache")}
    changed = _changed(cmp)
    assert {fig for _, fig in changed} <= {"prefix_cache_hit_rate", "ttft_p50_ms", "ttft_p99_ms"}
    assert ("off", "prefix_cache_hit_rate") in changed and (
        "mtp",
        "prefix_cache_hit_rate",
    ) in changed
    assert "prefix-cache hit rate fell" in cmp.summary
    assert "speedup unchanged" in cmp.summary


# -- refusals ------------------------------------------------------------------------


def test_starved_client_is_not_comparable_never_sound() -> None:
    starved = Engines(client_starved=True, tpot_mtp_ms=12.0)
    cmp = compare_sides(synthetic_run(9, Engines(), "A"), synthetic_run(10, starved, "B"))
    for ln in cmp.lines:
        for name in ("tpot_p50_ms", "tpot_p99_ms"):
            f = ln.figure(name)
            assert f is not None and f.status == "not_comparable"
            assert "client_starved (B)" in f.reasons
        if ln.route == "mtp":
            sp = ln.figure("speedup")
            assert sp is not None and sp.status == "not_comparable"
    assert not any(f.figure.startswith("tpot") for _, f in cmp.changed())


def test_disagreeing_clock_is_not_comparable() -> None:
    a = synthetic_run(11, Engines(), "A")
    b = synthetic_run(12, Engines(tpot_mtp_ms=9.0), "B")
    # the engine's own clock says nothing changed: the client's change is not the engine's
    lines = {
        k: replace(v, row=v.row.model_copy(update={"server_tpot_ms": 7.0}))
        for k, v in a.lines.items()
    }
    lines_b = {
        k: replace(v, row=v.row.model_copy(update={"server_tpot_ms": 7.0}))
        for k, v in b.lines.items()
    }
    cmp = compare_sides(replace(a, lines=lines), replace(b, lines=lines_b))
    mtp = [ln for ln in cmp.lines if ln.route == "mtp"]
    for ln in mtp:
        f = ln.figure("tpot_p50_ms")
        assert f is not None and f.status == "not_comparable"
        assert "clock_disagreement" in f.reasons


def test_tampered_file_is_not_comparable() -> None:
    a = synthetic_run(13, Engines(), "A")
    b = synthetic_run(14, Engines(), "B")
    lines = {k: replace(v, tampered=True) for k, v in b.lines.items()}
    cmp = compare_sides(a, replace(b, lines=lines))
    assert _statuses(cmp) == {"not_comparable"}
    assert cmp.judged == 0


def test_lines_of_one_run_are_listed() -> None:
    a = synthetic_run(15, Engines(), "A")
    b = synthetic_run(16, Engines(), "B")
    key = ("mtp", "1k/256/non_think", "closed:c=8")
    only_a = {k: v for k, v in a.lines.items() if k != key}
    cmp = compare_sides(replace(a, lines=only_a), b)
    assert cmp.only_in_b == (" @ ".join(key),) and cmp.only_in_a == ()
    assert len(cmp.lines) == 5


def test_more_data_does_not_flip_a_right_verdict() -> None:
    """A real change found with 24 requests a line is still found with 96."""
    slow = Engines(tpot_mtp_ms=9.0)
    for n in (24, 96):
        a = synthetic_run(17, replace(Engines(), requests=n), "A")
        b = synthetic_run(18, replace(slow, requests=n), "B")
        assert ("mtp", "tpot_p50_ms") in _changed(compare_sides(a, b))


def test_alpha_out_of_range_is_refused() -> None:
    a = synthetic_run(19, Engines(), "A")
    with pytest.raises(ValueError, match="alpha"):
        compare_sides(a, a, alpha=1.0)


def _records_with(routes: Sequence[tuple[str, RouteRecord]]) -> RunRecords:
    return RunRecords("0.1.0", "m", {"model": "m"}, dict(routes), 16)


def test_engine_version_and_spec_config_are_factors() -> None:
    a = _records_with([("mtp", RouteRecord("0.31", ("vllm", "serve", "--port", "1"), "k=3"))])
    b = _records_with([("mtp", RouteRecord("0.32", ("vllm", "serve", "--port", "2"), "k=3"))])
    side_a = synthetic_run(20, Engines(), "A")
    cmp = compare_sides(replace(side_a, records=a), replace(side_a, records=b))
    assert [str(f) for f in cmp.factors] == ["engine version (mtp): 0.31 → 0.32"]
    assert "speculative config unchanged" in cmp.summary
    assert "launch command unchanged" in cmp.summary


def test_a_figure_without_per_request_steps_is_not_judged() -> None:
    """llama.cpp reports no per-request verify steps: acceptance length has no interval."""

    def strip(side: RunSide) -> RunSide:
        lines = {
            k: replace(v, requests=tuple(m.model_copy(update={"acceptance": None})
                                         for m in v.requests))
            for k, v in side.lines.items()
        }  # fmt: skip
        return replace(side, lines=lines)

    cmp = compare_sides(strip(synthetic_run(21, Engines())), strip(synthetic_run(22, Engines())))
    for ln in cmp.lines:
        if ln.route == "mtp":
            f = ln.figure("acceptance_length")
            assert f is not None and f.status == "not_judged" and f.a is not None
            rate = ln.figure("acceptance_rate")
            assert rate is not None and rate.status == "no_significant_change"


def test_a_drift_between_rounds_widens_the_interval() -> None:
    """Two-stage resampling: the same requests, but with one round twice as slow,
    give a wider TPOT interval than when the rounds are not known."""
    a, b = synthetic_run(23, Engines()), synthetic_run(24, Engines())

    def drift(side: RunSide, rounds_known: bool) -> RunSide:
        lines = {}
        for k, v in side.lines.items():
            reqs = tuple(
                m.model_copy(update={"tpot_ms": (m.tpot_ms or 0.0) * (2.0 if r == 0 else 1.0)})
                for m, r in zip(v.requests, v.request_rounds, strict=True)
            )
            lines[k] = replace(
                v, requests=reqs, request_rounds=v.request_rounds if rounds_known else ()
            )
        return replace(side, lines=lines)

    def width(known: bool) -> float:
        cmp = compare_sides(drift(a, known), drift(b, known))
        f = cmp.lines[0].figure("tpot_p50_ms")
        assert f is not None and f.ci_low is not None and f.ci_high is not None
        return f.ci_high - f.ci_low

    assert width(True) > 1.1 * width(False)


def test_p99_is_judged_from_100_requests() -> None:
    many = replace(Engines(), requests=120)
    cmp = compare_sides(synthetic_run(25, many), synthetic_run(26, many))
    assert _statuses(cmp) == {"no_significant_change"}
    slow = replace(many, tpot_mtp_ms=9.0)
    changed = _changed(compare_sides(synthetic_run(25, many), synthetic_run(26, slow)))
    assert ("mtp", "tpot_p99_ms") in changed


def test_a_launch_flag_recorded_in_the_spec_config_too_is_one_factor() -> None:
    """A launch records its engine arguments in the command and in the speculative config:
    one setting changed is one factor; another spec-config key is its own factor."""
    cmd = ("llama-server", "--port", "1", "--ctx-size")

    def rec(ctx: str, depth: int) -> RouteRecord:
        spec = f'{{"method": "draft-simple", "spec_tokens": {depth}, "ctx_size": {ctx}}}'
        return RouteRecord("llama.cpp b1", (*cmd, ctx), spec)

    side = synthetic_run(27, Engines())
    a = replace(side, records=_records_with([("draft", rec("1024", 2))]))
    b = replace(side, records=_records_with([("draft", rec("2048", 2))]))
    assert [(f.kind, f.name) for f in compare_sides(a, b).factors] == [
        ("launch flag", "--ctx-size")
    ]
    c = replace(side, records=_records_with([("draft", rec("2048", 4))]))
    assert [(f.kind, f.name, f.a, f.b) for f in compare_sides(a, c).factors] == [
        ("launch flag", "--ctx-size", "1024", "2048"),
        ("speculative config", "spec_tokens", "2", "4"),
    ]


# -- thresholds and margins: a fraction or a percent string, one parser, one default ---------


def test_a_threshold_or_margin_takes_a_percent_string_as_its_fraction() -> None:
    from deepseekbench._report._compare import render_comparison

    slow = Engines(tpot_mtp_ms=9.0, flags=("--verify-token-ms", "0.8"))
    cmp = compare_sides(synthetic_run(1, Engines(), "A"), synthetic_run(2, slow, "B"))
    assert cmp.regressions("5%") == cmp.regressions(0.05) == cmp.regressions("0.05") != []
    assert cmp.regressions("5 %") == cmp.regressions(0.05)
    assert cmp.regressions("900%") == [] and cmp.regressions(9.0) == []
    assert render_comparison(cmp, threshold="5%") == render_comparison(cmp, threshold=0.05)
    side = synthetic_run(3, Engines(), "A")
    assert compare_sides(side, side, margin="2%").margin == pytest.approx(0.02)


@pytest.mark.parametrize("bad", ["5", "five %", "-1%", True, None, float("nan"), "inf", [0.05]])
def test_a_threshold_in_no_accepted_form_is_a_typed_error_naming_the_forms(bad: object) -> None:
    from deepseekbench import FractionFormatError

    cmp = compare_sides(synthetic_run(1, Engines(), "A"), synthetic_run(2, Engines(), "B"))
    if bad == "5":  # "5" is the fraction 5 (500 %): a threshold may exceed 100 %, a margin not
        assert cmp.regressions(bad) == []
        with pytest.raises(FractionFormatError, match=r'"5%"'):
            compare_sides(synthetic_run(1, Engines(), "A"), synthetic_run(2, Engines(), "B"),
                          margin=bad)  # fmt: skip
        return
    with pytest.raises(FractionFormatError, match=r"a fraction \(0.05\) or a percent string"):
        cmp.regressions(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="margin"):  # also a ValueError
        compare_sides(synthetic_run(1, Engines(), "A"), synthetic_run(2, Engines(), "B"),
                      margin=bad)  # type: ignore[arg-type]  # fmt: skip


def test_compare_runs_and_compare_sides_share_one_default_margin() -> None:
    import inspect

    from deepseekbench import DEFAULT_MARGIN, compare_runs

    for fn in (compare_runs, compare_sides):
        assert inspect.signature(fn).parameters["margin"].default == DEFAULT_MARGIN


def test_two_unrelated_plans_summarise_their_plan_keys_as_a_count() -> None:
    from deepseekbench._analysis._compare_runs import SUMMARY_PLAN_KEYS

    side = synthetic_run(28, Engines())
    plan_a = {f"key{i:03d}": i for i in range(100)} | {"model": "m"}
    plan_b = {f"key{i:03d}": i + 1 for i in range(100)} | {"model": "m"}
    a = replace(side, records=RunRecords("0.1.0", "m", plan_a, {}, 16))
    b = replace(side, records=RunRecords("0.1.0", "m", plan_b, {}, 16))
    cmp = compare_sides(a, b)
    assert len([f for f in cmp.factors if f.kind == "plan key"]) == 100  # all kept
    assert "100 plan keys differ (key000, key001, key002, …" in cmp.summary
    assert "key003" not in cmp.summary and "--format json" in cmp.summary
    few = {"key000": 1} | {"model": "m"}
    c = replace(side, records=RunRecords("0.1.0", "m", few, {}, 16))
    small = compare_sides(a, c)
    n = len([f for f in small.factors if f.kind == "plan key"])
    assert n > SUMMARY_PLAN_KEYS and "plan keys differ" in small.summary
    d = replace(side, records=RunRecords("0.1.0", "m", plan_a | {"key000": 7}, {}, 16))
    one = compare_sides(a, d)
    assert "plan key key000: 0 → 7" in one.summary and "plan keys differ" not in one.summary


def test_a_line_refuses_a_figure_name_compare_never_judges() -> None:
    from deepseekbench import UnknownKeyError

    cmp = compare_sides(synthetic_run(1, Engines(), "A"), synthetic_run(2, Engines(), "B"))
    line = next(ln for ln in cmp.lines if ln.route == "mtp")
    assert line.figure("tpot_p50_ms") is not None and line.figure("acceptance_pos_1") is not None
    assert next(ln for ln in cmp.lines if ln.route == "off").figure("acceptance_rate") is None
    with pytest.raises(UnknownKeyError, match="tpot_p50_ms") as info:
        line.figure("tpot_p50")
    assert isinstance(info.value, KeyError) and "acceptance_pos_<k>" in str(info.value)


def test_a_change_inside_the_margin_is_named_apart_from_no_change() -> None:
    """An interval that excludes no change but reaches into the margin says so: never
    "no significant change" (the interval shows a change), never "changed significantly"."""
    from deepseekbench._report._compare import render_comparison

    many = replace(Engines(), requests=400)
    a = synthetic_run(31, many, "A")
    b = synthetic_run(32, replace(many, ttft_ms=12.0 * 1.04), "B")
    cmp = compare_sides(a, b)
    ttft = [f for ln in cmp.lines for f in ln.figures if f.figure == "ttft_p50_ms"]
    inside = [f for f in ttft if f.within_margin]
    assert inside, [f.interval_text() for f in ttft]
    for f in inside:
        assert f.status == "no_significant_change" and f.ci_low is not None
        assert f.ci_low > 1.0 and f.ci_low <= 1.05  # excludes 1, reaches into the margin
        assert f.verdict == "changed, within the 5 % margin"
        assert str(f).startswith("changed, within the 5 % margin (")
    text = render_comparison(cmp, "text")
    assert "changed, within the 5 % margin" in text
    every = sum(f.within_margin for ln in cmp.lines for f in ln.figures)
    assert f"{every} changed within the 5 % margin" in cmp.summary  # named, not counted
    plain = compare_sides(a, b, margin=0)  # no margin: the same interval is a change
    assert all(not f.within_margin for ln in plain.lines for f in ln.figures)
    still = [f for ln in cmp.lines for f in ln.figures if f.status == "no_significant_change"]
    for f in still:
        if not f.within_margin:
            assert f.ci_low is not None and f.ci_high is not None
            assert f.ci_low <= (1.0 if f.scale == "ratio" else 0.0) <= f.ci_high
            assert f.verdict == "no significant change"


def test_a_run_level_figure_repeated_on_several_lines_is_one_regression() -> None:
    """The prefix-cache hit rate is one run-level figure, repeated on each line: falling
    on 6 lines it is 1 regression naming them, not 6; a per-line figure stays per line."""
    from deepseekbench._analysis._compare_runs import (
        FigureChange,
        LineComparison,
        ParityChange,
        RunComparison,
    )
    from deepseekbench._types._axes import QualityParity

    hit = FigureChange(
        figure="prefix_cache_hit_rate", label="prefix-cache hit rate", unit="0..1",
        status="changed", a=0.8, b=0.0, scale="difference", ci_low=-0.8, ci_high=-0.8,
        higher_is_better=True,
    )  # fmt: skip
    v = QualityParity.verified

    def tpot(b: float) -> FigureChange:
        return FigureChange(
            figure="tpot_p50_ms", label="TPOT p50", unit="ms/token", status="changed",
            a=10.0, b=b, ci_low=b / 10 - 0.05, ci_high=b / 10 + 0.05,
        )  # fmt: skip

    lines = tuple(
        LineComparison(
            route=r,
            cell="1k/256/non_think",
            load=f"c={c}",
            figures=(hit, tpot(12.0 + c)),
            parity=ParityChange(a=v, b=v),
        )
        for r in ("off", "mtp")
        for c in (1, 2, 8)
    )
    cmp = RunComparison(a="A", b="B", alpha=0.05, judged=12, lines=lines)
    regress = cmp.regressions(0.0)
    hits = [r for r in regress if "prefix-cache hit rate" in r]
    assert len(hits) == 1 and hits[0].startswith("6 lines, one figure (")
    assert all(ln.name in hits[0] for ln in lines)
    assert len([r for r in regress if "TPOT p50" in r]) == 3  # c=1, 2, 8: distinct values


def test_the_summary_names_every_line_a_figure_moved_on_and_splits_rise_from_fall() -> None:
    """A figure that moved on lines of different routes names each of them, the largest
    change first ("(mtp, c=8, 2 lines)" named one route for two lines whose routes
    differ); a figure that fell on some lines and rose on another reads as two entries."""
    from deepseekbench._analysis._compare_runs import (
        SUMMARY_PLACES,
        FigureChange,
        LineComparison,
        ParityChange,
        RunComparison,
    )
    from deepseekbench._types._axes import QualityParity

    v = QualityParity.verified

    def ttft(b: float) -> FigureChange:
        return FigureChange(
            figure="ttft_p50_ms", label="TTFT p50", unit="ms", status="changed",
            a=14.0, b=b, ci_low=b / 14 - 0.02, ci_high=b / 14 + 0.02,
        )  # fmt: skip

    def line(route: str, load: str, b: float, cell: str = "1k/256/non_think") -> LineComparison:
        return LineComparison(
            route=route, cell=cell, load=f"closed:{load}", figures=(ttft(b),),
            parity=ParityChange(a=v, b=v),
        )  # fmt: skip

    lines = (line("mtp", "c=8", 12.0), line("mtp-mistuned", "c=8", 10.0), line("off", "c=1", 16))
    cmp = RunComparison(a="A", b="B", alpha=0.05, judged=3, lines=lines)
    assert "TTFT p50 fell 14 → 10 ms (mtp-mistuned, c=8, the largest of 2 lines; also mtp c=8)" in (
        cmp.summary
    )
    assert "TTFT p50 rose 14 → 16 ms (off, c=1)," in cmp.summary
    # one line stays as it read; past SUMMARY_PLACES other lines, the rest are counted
    many = tuple(line(f"mtp-k{k}", "c=2", 13.0 - 0.1 * k) for k in range(SUMMARY_PLACES + 3))
    text = RunComparison(a="A", b="B", alpha=0.05, judged=7, lines=many).summary
    assert f"the largest of {len(many)} lines; also " in text and " and 2 more)" in text
    # lines of several cells name their cell, so two loads of one name stay apart
    two = (line("mtp", "c=8", 12.0), line("mtp", "c=8", 11.0, cell="8k/256/non_think"))
    text = RunComparison(a="A", b="B", alpha=0.05, judged=2, lines=two).summary
    assert (
        "(mtp, c=8, 8k/256/non_think, the largest of 2 lines; also mtp c=8 @ 1k/256/non_think)"
        in text
    )
