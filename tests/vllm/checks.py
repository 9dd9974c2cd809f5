"""Assertions shared by the real-vLLM plan tests (each checks the library against an
observation made without it: raw stream texts, per-request metrics, ``/metrics``)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

import pytest

from deepseekbench import (
    CLOCK_TOLERANCE,
    AcceptanceScope,
    Dialect,
    QualityParity,
    RefusalReason,
    Row,
    ServerClockFault,
    SpeedupMetric,
    acceptance_profile,
    compare_speedup,
    read_acceptance_profile,
    write_acceptance_profile,
)
from tests.vllm.observe import Completion, per_position_accepted
from tests.vllm.plans import (
    MAX_TOKENS,
    MODE,
    N_PARITY,
    PARITY_MAX_TOKENS,
    PARITY_PROMPTS,
    REQUESTS_PER_CELL,
    WARMUP_PER_CELL,
    WORKLOAD_PROMPTS,
    PairRun,
    append_report,
)


def check_requests(run: PairRun, label: str) -> None:
    """Every request ran, on loopback, through the gate; off ran the parity set twice."""
    rows = {r.route_label: r for r in run.result.rows}
    assert list(rows) == ["off", label]
    for row in rows.values():
        assert (row.n_requests, row.n_errors) == (REQUESTS_PER_CELL, 0), row.route_label
    assert calibration_requests(run, label) == 0  # the calibration pass asks off only
    for name, server in run.servers.items():
        seen = run.recorder.completions[server.port]
        expected = N_PARITY * (2 if name == "off" else 1) + WARMUP_PER_CELL + REQUESTS_PER_CELL
        expected += calibration_requests(run, name)
        assert len(seen) == expected, name
        assert all(c.finished for c in seen), name  # every stream reached [DONE]


def independent_parity(run: PairRun, label: str) -> tuple[list[bool], bool]:
    """Per parity prompt, whether the candidate's raw text equals off's (first run);
    and whether off's two runs were identical (the determinism control)."""
    off = run.recorder.texts(run.servers["off"].port, PARITY_PROMPTS, PARITY_MAX_TOKENS)
    cand = run.recorder.texts(run.servers[label].port, PARITY_PROMPTS, PARITY_MAX_TOKENS)
    assert [len(t) for t in off] == [2] * N_PARITY
    assert [len(t) for t in cand] == [1] * N_PARITY
    assert all(len(t[0]) > 20 for t in off)
    deterministic = all(t[0] == t[1] for t in off)
    return [c[0] == o[0] for c, o in zip(cand, off, strict=True)], deterministic


def check_verdict(run: PairRun, label: str) -> list[bool]:
    """The library's parity verdict equals what the raw texts say; returns the matches.

    Verified only when every parity prompt matched and off was deterministic, and then
    credited unless the clock refuses it (:func:`check_clocks`); otherwise
    ``differs`` with the first divergence shown, refused.
    """
    matches, deterministic = independent_parity(run, label)
    rows = {r.route_label: r for r in run.result.rows}
    off_parity = run.result.parity[("off", MODE)]
    assert off_parity.control is not None
    assert off_parity.control.deterministic is deterministic
    assert deterministic, "vLLM off route not deterministic under greedy decoding"
    assert rows["off"].quality_parity is QualityParity.verified
    parity = run.result.parity[(label, MODE)]
    assert parity.exact is not None
    assert [p.match for p in parity.exact.prompts] == matches
    line = next(ln for ln in run.card.lines if ln.route == label)
    if all(matches):
        assert rows[label].quality_parity is QualityParity.verified
        # the client-clock checks: verified parity earns a figure only where the clock allows one
        # (check_clocks holds the figure against the engine's own clock)
        assert line.verdict is not None
        if line.credited:
            assert line.verdict.speedup is not None
            assert f"{line.verdict.speedup:.2f}×" in run.text
        else:
            assert set(line.verdict.reasons) <= CLOCK_REFUSALS, line.verdict.reasons
            assert line.verdict.reasons, line.verdict
    else:
        assert rows[label].quality_parity is QualityParity.differs
        assert parity.exact.n_diverged == matches.count(False)
        assert not line.credited
        assert line.verdict is not None
        assert RefusalReason.candidate_parity_not_verified in line.verdict.reasons
        assert parity.first_divergence is not None
        first = matches.index(False)  # 0-based; the library names parity prompts from 1
        assert parity.first_divergence.startswith(f"prompt-{first + 1}:"), parity.first_divergence
        # the scorecard names the load point (closed loop, one stream: "c=1")
        assert f"{label} @ 1k/256/non_think (c=1): no speedup credited; parity differs" in run.text
        assert f"  first divergence: {parity.first_divergence}" in run.text
    check_clocks(run, label)
    return matches


def _measured(seen: list[Completion]) -> list[Completion]:
    # concurrency 1: a workload prompt goes first to off's calibration pass (natural-length decode's
    # default output_length = "pinned"), then to the warm-up, then to the measured
    # requests, each at max_tokens <= MAX_TOKENS (pinned: the natural length); parity
    # prompts, or the margin test's 256-token parity, and forensics follow-ups
    # (the margin follow-up: logprobs) are left out
    work = [
        c
        for c in seen
        if c.prompt in WORKLOAD_PROMPTS
        and not c.logprobs
        and c.max_tokens is not None
        and c.max_tokens <= MAX_TOKENS
    ]
    return work[-REQUESTS_PER_CELL:]


def calibration_requests(run: PairRun, route: str) -> int:
    """Requests of ``route``'s calibration pass (``off`` only)."""
    return sum(1 for r in run.records("calibration") if r["route"] == route)


def check_counts(run: PairRun, label: str) -> dict[str, Any]:
    """Per-request ``metrics.speculative_decoding`` summed over the whole run (parity,
    warm-up, measured) equals the ``/metrics`` delta, per position too; the row's counts
    equal the measured requests' sums. Returns a summary for the report."""
    off_seen = run.recorder.completions[run.servers["off"].port]
    assert all(c.spec is None for c in off_seen)
    assert run.delta["off"]["num_draft_tokens"] == 0
    seen = run.recorder.completions[run.servers[label].port]
    assert all(c.spec is not None for c in seen), "a speculative stream without metrics"
    specs = [c.spec for c in seen if c.spec is not None]
    drafted = sum(int(s["num_draft_tokens"]) for s in specs)
    accepted = sum(int(s["num_accepted_draft_tokens"]) for s in specs)
    steps = sum(int(s["num_spec_steps"]) for s in specs)
    per_pos: dict[int, int] = defaultdict(int)
    for s in specs:
        for p, n in per_position_accepted(s).items():
            per_pos[p] += n
        assert sum(int(x) for x in s["per_step_accepted"]) == int(s["num_accepted_draft_tokens"])
        assert sum(int(x) for x in s["per_step_drafted"]) == int(s["num_draft_tokens"])
    delta = run.delta[label]
    assert (drafted, accepted, steps) == (
        delta["num_draft_tokens"],
        delta["num_accepted_tokens"],
        delta["num_drafts"],
    ), (drafted, accepted, steps, delta)
    assert drafted > 0 and steps > 0
    n_spec = max(int(s.get("num_spec_tokens", 0)) for s in specs)
    assert n_spec >= 1 and set(delta["per_pos"]) <= set(range(n_spec)), delta["per_pos"]
    assert [per_pos.get(p, 0) for p in range(n_spec)] == [
        delta["per_pos"].get(p, 0) for p in range(n_spec)
    ], (dict(per_pos), delta["per_pos"])
    assert sum(per_pos.values()) == accepted

    measured = _measured(seen)
    assert len(measured) == REQUESTS_PER_CELL
    m_drafted = sum(int(c.spec["num_draft_tokens"]) for c in measured if c.spec)
    m_accepted = sum(int(c.spec["num_accepted_draft_tokens"]) for c in measured if c.spec)
    m_steps = sum(int(c.spec["num_spec_steps"]) for c in measured if c.spec)
    row = next(r for r in run.result.rows if r.route_label == label)
    assert row.acceptance_scope is AcceptanceScope.per_request
    assert (row.draft_tokens, row.accepted_tokens) == (m_drafted, m_accepted)
    assert row.accepted_token_ratio == pytest.approx(m_accepted / m_drafted)
    assert row.acceptance_length == pytest.approx(1 + m_accepted / m_steps)
    lib = [m.measurement for m in run.result.measurements if m.route == label]
    assert sorted((m.draft_tokens, m.accepted_tokens) for m in lib) == sorted(
        (int(c.spec["num_draft_tokens"]), int(c.spec["num_accepted_draft_tokens"]))
        for c in measured
        if c.spec
    )
    # per-position acceptance: the row's figure (the library reads vLLM's per-step lists)
    # equals the one computed here from each request's acceptance_histogram
    m_per_pos: dict[int, int] = defaultdict(int)
    for c in measured:
        assert c.spec is not None
        for p, n in per_position_accepted(c.spec).items():
            m_per_pos[p] += n
    expected_by_pos = [m_per_pos.get(p, 0) / m_steps for p in range(n_spec)]
    assert row.acceptance_by_position is not None
    assert list(row.acceptance_by_position) == pytest.approx(expected_by_pos)
    assert row.spec_tokens == n_spec
    assert row.acceptance_source == "metrics.speculative_decoding"
    check_server_ttft(run, label)
    # the runner's own /metrics windows (one per round, warm-ups outside) together
    # cover exactly the measured requests
    windows = [r["acceptance"] for r in run.records("server_metrics") if r["route"] == label]
    assert windows, "the runner scraped no /metrics for the speculative route"
    assert all(w["engine"] == Dialect.vllm.value for w in windows)
    keys = ("draft_tokens", "accepted_tokens", "verify_steps")
    w_sums = tuple(sum(int(w[k]) for w in windows) for k in keys)
    assert w_sums == (m_drafted, m_accepted, m_steps), (w_sums, m_drafted, m_accepted, m_steps)
    if all(w.get("acceptance_by_position") is not None for w in windows):
        pooled = [
            sum(w["acceptance_by_position"][p] * int(w["verify_steps"]) for w in windows) / m_steps
            for p in range(n_spec)
        ]
        assert pooled == pytest.approx(expected_by_pos)
    by_pos = [round(per_pos.get(p, 0) / steps, 3) for p in range(n_spec)]
    summary = {
        "drafted": drafted,
        "accepted": accepted,
        "verify_steps": steps,
        "per_pos_accepted": dict(per_pos),
        "acceptance_by_position": by_pos,
    }
    append_report(
        f"{label}: whole run drafted/accepted/steps {drafted}/{accepted}/{steps} == /metrics "
        f"delta {delta['num_draft_tokens']}/{delta['num_accepted_tokens']}/"
        f"{delta['num_drafts']}; accepted by position {dict(per_pos)} == "
        f"{delta['per_pos']}; acceptance by position {by_pos} (measured: row "
        f"{[round(x, 3) for x in row.acceptance_by_position]}); measured "
        f"{m_drafted}/{m_accepted}, rate {m_accepted / m_drafted:.3f}, length "
        f"{1 + m_accepted / m_steps:.2f}"
    )
    return summary


def check_server_ttft(run: PairRun, label: str) -> None:
    """Each row's ``server_ttft_ms`` is the median of the engine's own
    ``metrics.time_to_first_token_ms`` over the measured requests (off too: it gets
    ``--enable-per-request-metrics``)."""
    for name in ("off", label):
        measured = _measured(run.recorder.completions[run.servers[name].port])
        ttfts = sorted(float(c.metrics["time_to_first_token_ms"]) for c in measured if c.metrics)
        assert len(ttfts) == REQUESTS_PER_CELL, name
        mid = len(ttfts) // 2
        median = ttfts[mid] if len(ttfts) % 2 else (ttfts[mid - 1] + ttfts[mid]) / 2
        row = next(r for r in run.result.rows if r.route_label == name)
        assert row.server_ttft_ms == pytest.approx(median), name


def measured_texts(run: PairRun) -> dict[str, dict[int, str]]:
    """The library's measured texts per route label and request index."""
    texts: dict[str, dict[int, str]] = defaultdict(dict)
    for m in run.result.measurements:
        texts[m.route][m.index] = m.measurement.text
    return texts


# the client-clock checks: the refusals a verified row may get from the clock alone
CLOCK_REFUSALS = frozenset(
    {
        RefusalReason.clock_disagreement,
        RefusalReason.client_starved,
        RefusalReason.no_significant_difference,
    }
)


def _within_tolerance(client: float, server: float) -> bool:
    # the library's rule (_clock_witness.clock_disagrees), written out again here
    return abs(math.log(client / server)) <= math.log1p(CLOCK_TOLERANCE)


def check_clocks(run: PairRun, label: str) -> dict[str, tuple[float, float]]:
    """The server clock witness: the speed verdict cannot contradict vLLM's own clock.

    Each row's ``server_tpot_ms`` is the median of the measured requests' own
    ``metrics.mean_itl_ms`` (vLLM: decode time / (generated tokens - 1), the TPOT
    definition, read here from the raw streams). The TPOT verdict of a route whose
    parity is verified on both sides is either a figure within ``CLOCK_TOLERANCE`` of
    the server-clock ratio (off / candidate) or a refusal naming only clock reasons
    (``clock_disagreement``, ``client_starved``, ``no_significant_difference``); a
    starved row always refuses ``client_starved``, and a client ratio of the row
    medians outside the tolerance always refuses ``clock_disagreement``. Prints and
    records, per route, the client TPOT beside the server TPOT. Returns
    ``{route: (client TPOT ms, server TPOT ms)}``.
    """
    rows = {r.route_label: r for r in run.result.rows}
    clocks: dict[str, tuple[float, float]] = {}
    for name in ("off", label):
        measured = _measured(run.recorder.completions[run.servers[name].port])
        itls = [
            float(c.metrics["mean_itl_ms"])
            for c in measured
            if c.metrics and c.metrics.get("mean_itl_ms") is not None
        ]
        assert len(itls) == REQUESTS_PER_CELL, (name, itls)
        row = rows[name]
        assert row.server_tpot_ms is not None, name
        assert row.server_tpot_ms == pytest.approx(statistics.median(itls)), name
        assert row.tpot_ms is not None and row.tpot_ms > 0, name
        clocks[name] = (row.tpot_ms, row.server_tpot_ms)
        append_report(
            f"clocks {name}: client TPOT {row.tpot_ms:.2f} ms (p50 over requests), server "
            f"TPOT {row.server_tpot_ms:.2f} ms (p50 of vLLM metrics.mean_itl_ms; requests "
            f"{min(itls):.2f}..{max(itls):.2f}); client starved: {row.client_starved} "
            f"({row.n_client_starved} of {row.n_requests} requests bunched), core wait "
            f"{_share(row.client_core_wait_share)}, stall {_ms(row.client_stall_ms)}"
        )
    server_ratio = clocks["off"][1] / clocks[label][1]
    client_ratio = clocks["off"][0] / clocks[label][0]
    line = next(ln for ln in run.card.lines if ln.route == label)
    verdict = line.verdict
    assert verdict is not None and verdict.metric is SpeedupMetric.tpot_ms
    append_report(
        f"clocks {label} vs off (TPOT): client {client_ratio:.2f}x, server "
        f"{server_ratio:.2f}x (tolerance {CLOCK_TOLERANCE:.0%}); verdict: {verdict}"
    )
    reasons = set(verdict.reasons)
    if rows["off"].client_starved or rows[label].client_starved:
        assert RefusalReason.client_starved in reasons, verdict
    if not _within_tolerance(client_ratio, server_ratio):
        assert RefusalReason.clock_disagreement in reasons, verdict
    if verdict.printed:
        assert verdict.speedup is not None
        assert _within_tolerance(verdict.speedup, server_ratio), (verdict, server_ratio)
    elif all(rows[n].quality_parity is QualityParity.verified for n in ("off", label)):
        assert reasons and reasons <= CLOCK_REFUSALS, verdict
    check_server_clock(run, label)
    return clocks


def _counts(seen: list[Completion], span: tuple[str, ...]) -> list[float]:
    """vLLM's own token count of each request: ``tokens_per_second`` × the sum of the
    ``metrics`` fields in ``span`` (ms) / 1000."""
    return [
        float(c.metrics["tokens_per_second"]) * sum(float(c.metrics[k]) for k in span) / 1000
        for c in seen
        if c.metrics is not None
    ]


def check_server_clock(run: PairRun, label: str) -> None:
    """vLLM's rate is over TTFT + generation time, and the library's count check uses it.

    From the raw streams, independently of the library: each measured request's
    ``metrics.tokens_per_second`` × (``time_to_first_token_ms`` + ``generation_time_ms``)
    is its usage count within 1 token + 2 % (the count check's slack), while the rate ×
    the generation time alone is printed beside it (what the witness used to multiply
    by). Neither row records ``server_clock_count_mismatch``, and the server-clock TPOT
    verdict (``clock = "server"``) names no count fault. Prints both counts (min /
    median / max over requests), the rows' faults and the server-clock verdict."""
    rows = {r.route_label: r for r in run.result.rows}
    for name in ("off", label):
        seen = _measured(run.recorder.completions[run.servers[name].port])
        usage = [c.completion_tokens for c in seen]
        assert all(n is not None for n in usage) and len(seen) == REQUESTS_PER_CELL, name
        both = _counts(seen, ("time_to_first_token_ms", "generation_time_ms"))
        gen = _counts(seen, ("generation_time_ms",))
        for n, count in zip(usage, both, strict=True):
            assert n is not None and abs(count - n) <= 1 + 0.02 * n, (name, count, n)
        faults = rows[name].server_clock_faults
        assert ServerClockFault.server_clock_count_mismatch not in faults, (name, faults)
        append_report(
            f"server clock {name}: usage {_spread(usage)} tokens; vLLM rate x (TTFT + "
            f"generation) {_spread(both)}, rate x generation alone {_spread(gen)}; row "
            f"faults: {', '.join(f.value for f in faults) or 'none'}"
        )
    verdict = compare_speedup(rows["off"], rows[label], clock="server")
    assert RefusalReason.server_clock_count_mismatch not in verdict.reasons, verdict
    append_report(
        f"server clock {label} vs off (TPOT, clock=server): server TPOT "
        f"{_num(rows['off'].server_tpot_ms)} / {_num(rows[label].server_tpot_ms)} ms; "
        f"verdict: {verdict}"
    )


def _spread(xs: list[Any]) -> str:
    v = sorted(float(x) for x in xs)
    return f"{v[0]:.1f} / {statistics.median(v):.1f} / {v[-1]:.1f}"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f} ms"


def report_decomposition(run: PairRun, label: str) -> None:
    """Print the route's speedup decomposition and break-even acceptance (a refused line
    whose client clock was refused: the diagnosis on vLLM's own clock, labelled "no speedup
    credited"; otherwise why it is withheld) beside vLLM's own per-request
    figures, and check its acceptance profile: acceptance length = 1 + Σ marginal, the
    file read back equal (``deepseekbench._analysis._acceptance_profile``)."""
    line = next(ln for ln in run.card.lines if ln.route == label)
    row = line.row
    d = line.decomposition
    e = line.engine_diagnosis
    if d is not None:
        assert e is None, (d, e)  # a credited line is never diagnosed on the side
        append_report(f"{label}: {d.text()}; break-even: {d.target_text()}")
    elif e is not None:
        # the client clock was refused; the engine's own TPOT diagnoses the split
        assert not line.credited and line.verdict is not None and not line.verdict.printed
        assert e.decode_step_ms == row_of(run, "off").server_tpot_ms
        assert row.server_tpot_ms is not None and row.acceptance_length is not None
        assert e.verify_step_ms == pytest.approx(row.server_tpot_ms * row.acceptance_length)
        append_report(f"{label}: {e.text()}")
    else:
        append_report(f"{label}: decomposition withheld ({line.speedup_text})")
    spread = (row.acceptance_length_p10, row.acceptance_length_p50, row.acceptance_length_p90)
    length, tpot = _num(row.acceptance_length), _num(row.server_tpot_ms)
    append_report(
        f"{label}: vLLM's own per-request figures: acceptance length {length}"
        f" (p10/p50/p90 over requests {' / '.join(_num(x) for x in spread)}), steps by "
        f"accepted draft tokens {row.accepted_per_step}, server TPOT {tpot} ms, "
        f"reasoning/answer split {row.acceptance_split}"
    )
    profile = acceptance_profile(row, load=line.load)  # raises when the check fails
    assert profile is not None, f"{label}: vLLM reported no per-position acceptance"
    path = write_acceptance_profile(profile, run.results_path.with_suffix(f".{label}.json"))
    assert read_acceptance_profile(path) == profile
    append_report(
        f"{label}: acceptance profile consistent: length {profile.acceptance_length:.3f} "
        f"= 1 + Σ marginal {sum(profile.marginal):.3f} ({path.name})"
    )


def _num(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "—"


def row_of(run: PairRun, label: str) -> Row:
    """The run's row of route ``label``."""
    return next(r for r in run.result.rows if r.route_label == label)
